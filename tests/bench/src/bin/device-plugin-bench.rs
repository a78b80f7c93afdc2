//! Device plugin benchmark: the real `devinject-device-plugin` against the test kubelet.
//!
//! Run as root: `cargo run --release -p devinject-bench --bin device-plugin-bench`.
//! Measures start-up to registration, `Allocate` latency over 10 000 calls (back to back, and
//! paced as a kubelet would call), the time from a
//! device node's removal or re-creation to the `ListAndWatch` message, `Allocate` of healthy
//! devices while another's node is a FIFO against all healthy (with an A/A pair), and the daemon's resident
//! memory while serving 3 profiles with 64 devices. Targets: p99 `Allocate` under 1 ms, health
//! change under 100 ms, RSS under 10 MiB. A benchmark, not a test: it prints figures and fails
//! only when it cannot measure.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use devinject_device_plugin::advertisement::{Advertisement, ScannedDevice};
use devinject_device_plugin::allocate::container_response;
use devinject_device_plugin::api::v1beta1::{AllocateRequest, ContainerAllocateRequest};
use devinject_device_plugin::resource::{AllocateMode, ResourceConfig};
use devinject_tests::kubelet::fake_kubelet::{health, FakeKubelet, Registration};
use devinject_tests::kubelet::host::TestHost;
use devinject_tests::kubelet::plugin_process::PluginProcess;
use nix::sys::signal::Signal;

const SLOW: Duration = Duration::from_secs(30);
const ALLOCATE_CALLS: usize = 10_000;
const HEALTH_ROUNDS: usize = 50;
const STARTS: usize = 5;
const PACE: Duration = Duration::from_micros(500);
/// Blocks of each state in the Allocate-beside-a-failing-device rounds.
const BESIDE_BLOCKS: usize = 10;
/// Calls per block.
const BESIDE_BLOCK: usize = 250;
/// Calls of each block not counted.
const BESIDE_SETTLE: usize = 50;
/// How long the plugin's idle CPU is counted.
const IDLE_WINDOW: Duration = Duration::from_secs(5);

/// Benchmark: the real `devinject-device-plugin` against the test kubelet: start-up to
/// registration, `Allocate` latency, health-change latency and resident memory.
///
/// Prints the figures on stdout; they are in docs/benchmarks.md (row 4). Needs root; run it on a
/// quiet machine, through scripts/bench.sh.
#[derive(Parser, Debug)]
#[command(name = "device-plugin-bench")]
struct Cli {
    /// Child mode: echo 64-byte messages on a Unix socket at this path (the round-trip
    /// baseline).
    #[arg(long = "echo-server", hide = true, value_name = "PATH")]
    echo_server: Option<PathBuf>,
}

fn main() {
    if let Some(path) = Cli::parse().echo_server {
        echo_server(&path);
        return;
    }
    let runtime = devinject_bench::root_runtime::root_runtime("device-plugin-bench");
    runtime.block_on(bench());
}

async fn bench() {
    let plugin_binary = devinject_tests::kubelet::plugin_process::binary();
    println!("plugin binary: {}", plugin_binary.display());

    let mut starts = Vec::new();
    for _ in 0..STARTS {
        let host = TestHost::new();
        host.add_kind("demo", "", 4, |i| (i / 2) as i64);
        let mut kubelet = FakeKubelet::start(&host.kubelet_dir());
        let mut plugin = PluginProcess::spawn(&host, &[], &[]);
        let reg = kubelet.next_registration(SLOW).await;
        starts.push(reg.at - plugin.started);
        drop(reg);
        plugin.signal(Signal::SIGTERM);
        plugin.wait(SLOW).await;
    }

    // 3 profiles, 64 devices, 2 NUMA nodes each.
    let host = TestHost::new();
    let kinds = [("alpha", 32), ("beta", 16), ("gamma", 16)];
    for (name, count) in kinds {
        host.add_kind(name, "", count, move |i| (i * 2 / count) as i64);
    }
    let mut kubelet = FakeKubelet::start(&host.kubelet_dir());
    let plugin = PluginProcess::spawn(&host, &[], &[]);
    let mut regs: BTreeMap<String, Registration> = BTreeMap::new();
    while regs.len() < kinds.len() {
        let mut reg = kubelet.next_registration(SLOW).await;
        reg.next_list(SLOW).await.expect("first list");
        regs.insert(reg.request.resource_name.clone(), reg);
    }
    let alpha = regs
        .get_mut("devinject.io/alpha")
        .expect("alpha registered");

    // Allocate: 1 to 4 devices per container, as a kubelet would ask.
    let requests = allocate_requests(ALLOCATE_CALLS, 32);
    for request in requests.iter().take(200) {
        alpha
            .client
            .allocate(request.clone())
            .await
            .expect("warm-up Allocate");
    }
    let mut allocate = Vec::with_capacity(ALLOCATE_CALLS);
    let total = Instant::now();
    for request in &requests {
        let start = Instant::now();
        alpha
            .client
            .allocate(request.clone())
            .await
            .expect("Allocate");
        allocate.push(start.elapsed());
    }
    let allocate_total = total.elapsed();
    // The kubelet calls Allocate once per container at admission, far below this rate; paced
    // calls show the latency of a plugin that is not also competing with its own previous
    // request for CPU time on a busy machine.
    let mut paced = Vec::with_capacity(ALLOCATE_CALLS);
    let mut tick = tokio::time::interval(PACE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for request in &requests {
        tick.tick().await;
        let start = Instant::now();
        alpha
            .client
            .allocate(request.clone())
            .await
            .expect("Allocate");
        paced.push(start.elapsed());
    }

    // Health: remove and re-create one node, time to the stream message.
    let mut removal = Vec::new();
    let mut recreation = Vec::new();
    for round in 0..HEALTH_ROUNDS {
        let node = format!("accel{}", round % 32);
        let start = Instant::now();
        host.remove_node(&format!("alpha/{node}"));
        alpha
            .wait_list(SLOW, "unhealthy", |l| {
                health(l).contains(&(node.as_str(), "Unhealthy"))
            })
            .await;
        removal.push(start.elapsed());
        let start = Instant::now();
        host.mknod(&format!("alpha/{node}"), 1, 3);
        alpha
            .wait_list(SLOW, "healthy", |l| {
                health(l).iter().all(|(_, h)| *h == "Healthy")
            })
            .await;
        recreation.push(start.elapsed());
    }

    // Allocate beside a failing device: accel31's node replaced by a FIFO, which withdraws that
    // device alone (docs/operations.md, "One bad device"), while the calls ask for the others.
    // In alternating blocks: healthy, failing, healthy again (the A/A pair), each leading in
    // turn, so that the machine's drift and the order fall on all three alike.
    let beside = allocate_requests(BESIDE_BLOCK, 31);
    let (mut healthy, mut failing, mut healthy_again) = (Vec::new(), Vec::new(), Vec::new());
    for block in 0..BESIDE_BLOCKS {
        let mut states = [
            (false, &mut healthy),
            (true, &mut failing),
            (false, &mut healthy_again),
        ];
        // Each state leads in turn: the first calls after a change of state run apart.
        states.rotate_left(block % 3);
        for (fail, state) in states {
            if fail {
                fail_accel31(&host, alpha).await;
            }
            for (i, request) in beside.iter().enumerate() {
                let start = Instant::now();
                alpha
                    .client
                    .allocate(request.clone())
                    .await
                    .expect("Allocate beside a failing device");
                // The first calls after a change of state are left out: only the failing
                // blocks always follow one.
                if i >= BESIDE_SETTLE {
                    state.push(start.elapsed());
                }
            }
            if fail {
                heal_accel31(&host, alpha).await;
            }
        }
    }

    // The plugin's CPU while nothing is asked of it, all healthy and with accel31's node a
    // FIFO: a failing device must not keep it busy.
    let idle_healthy = cpu_over(plugin.pid(), IDLE_WINDOW).await;
    fail_accel31(&host, alpha).await;
    let idle_failing = cpu_over(plugin.pid(), IDLE_WINDOW).await;
    heal_accel31(&host, alpha).await;

    // The handler's own work, without transport: the pure Allocate function in this process.
    let resource = ResourceConfig {
        profile: devinject_devices::ProfileName::new("alpha").expect("a valid profile name"),
        resource_name: "devinject.io/alpha".into(),
        request_env: "ALPHA_VISIBLE_DEVICES".into(),
        request_annotation: "devinject.io/alpha.devices".into(),
        replicas: 1,
        mode: AllocateMode::Envvar,
    };
    let scan: Vec<ScannedDevice> = (0..32)
        .map(|i| ScannedDevice {
            id: format!("accel{i}"),
            numa_node: Some(i / 16),
            healthy: true,
        })
        .collect();
    let advertisement = Advertisement::new(1).with_scan(&scan);
    let mut handler = Vec::with_capacity(ALLOCATE_CALLS);
    for request in &requests {
        let start = Instant::now();
        let answer = container_response(
            &resource,
            &advertisement,
            &request.container_requests[0].devices_ids,
            0,
        )
        .expect("allocate in process");
        handler.push(start.elapsed());
        std::hint::black_box(answer);
    }

    // The floor for any request/response between two processes on this machine right now: a
    // blocking echo over a Unix socket, same number of round trips.
    let mut baseline = unix_round_trips(&host.path("echo.sock"), ALLOCATE_CALLS);

    let rss = plugin.rss_kib();
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", plugin.pid())).unwrap_or_default();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default();

    println!();
    println!("start-up to registered ({STARTS} starts, 1 profile, 4 devices):");
    print_stats(&mut starts);
    println!(
        "Allocate ({ALLOCATE_CALLS} sequential calls, 1-4 ids, over the Unix socket, total {:?}):",
        allocate_total
    );
    print_stats(&mut allocate);
    println!("Allocate, paced one call per {PACE:?} ({ALLOCATE_CALLS} calls):");
    print_stats(&mut paced);
    println!("baseline: 64-byte echo between two processes over a Unix socket, no gRPC:");
    print_stats(&mut baseline);
    println!("Allocate handler alone, in process (same requests, no gRPC):");
    print_stats(&mut handler);
    let calls = BESIDE_BLOCKS * (BESIDE_BLOCK - BESIDE_SETTLE);
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (a, f, b) = (
        median(&mut healthy),
        median(&mut failing),
        median(&mut healthy_again),
    );
    println!("Allocate of healthy devices, all healthy ({calls} calls in {BESIDE_BLOCKS} blocks, the first {BESIDE_SETTLE} of each left out):");
    print_stats(&mut healthy);
    println!("Allocate of healthy devices while accel31's node is a FIFO ({calls} calls, the blocks between):");
    print_stats(&mut failing);
    println!("Allocate of healthy devices, all healthy again (A/A, {calls} calls):");
    print_stats(&mut healthy_again);
    println!(
        "  ratio of medians: failing / healthy {:.3}, A/A (healthy again / healthy) {:.3}",
        f.as_secs_f64() / a.as_secs_f64(),
        b.as_secs_f64() / a.as_secs_f64()
    );
    println!(
        "plugin CPU while idle, {} s each: all healthy {} ms, accel31's node a FIFO {} ms",
        IDLE_WINDOW.as_secs(),
        idle_healthy.as_millis(),
        idle_failing.as_millis()
    );
    println!("health, node removed -> Unhealthy in ListAndWatch ({HEALTH_ROUNDS} rounds):");
    print_stats(&mut removal);
    println!("health, node re-created -> Healthy in ListAndWatch ({HEALTH_ROUNDS} rounds):");
    print_stats(&mut recreation);
    println!(
        "RSS serving 3 profiles / 64 devices after the runs above: {} KiB ({:.1} MiB), peak {hwm}",
        rss,
        rss as f64 / 1024.0
    );
    drop(regs);
    drop(plugin);
}

/// `count` Allocate requests for 1 to 4 of `accel0` .. `accel<pool - 1>` each, as a kubelet
/// would ask.
fn allocate_requests(count: usize, pool: usize) -> Vec<AllocateRequest> {
    (0..count)
        .map(|i| AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: (0..1 + i % 4)
                    .map(|k| format!("accel{}", (i + k * 7) % pool))
                    .collect(),
            }],
        })
        .collect()
}

/// Replaces `accel31`'s node by a FIFO, which withdraws that device alone, and waits until
/// `ListAndWatch` says so.
async fn fail_accel31(host: &TestHost, alpha: &mut Registration) {
    host.remove_node("alpha/accel31");
    nix::unistd::mkfifo(
        &host.dev_root().join("alpha/accel31"),
        nix::sys::stat::Mode::from_bits_truncate(0o666),
    )
    .expect("mkfifo");
    alpha
        .wait_list(SLOW, "accel31 withdrawn", |l| {
            !health(l).contains(&("accel31", "Healthy"))
        })
        .await;
}

/// Makes `accel31`'s node again and waits until `ListAndWatch` has it healthy.
async fn heal_accel31(host: &TestHost, alpha: &mut Registration) {
    host.remove_node("alpha/accel31");
    host.mknod("alpha/accel31", 1, 3);
    alpha
        .wait_list(SLOW, "accel31 back", |l| {
            health(l).contains(&("accel31", "Healthy"))
        })
        .await;
}

/// The CPU time process `pid` spends over `window` (user and system, in clock ticks of 10 ms).
async fn cpu_over(pid: u32, window: Duration) -> Duration {
    let ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
        // After the command's closing parenthesis: fields 14 and 15 are utime and stime.
        let rest = &stat[stat.rfind(')').expect("stat has a command") + 2..];
        let fields: Vec<u64> = rest
            .split(' ')
            .skip(11)
            .take(2)
            .map(|f| f.parse().expect("a tick count"))
            .collect();
        fields.iter().sum::<u64>()
    };
    let before = ticks();
    tokio::time::sleep(window).await;
    Duration::from_millis((ticks() - before) * 10)
}

const ECHO_FLAG: &str = "--echo-server";

/// Child mode: echo 64-byte messages on a Unix socket until the peer hangs up.
fn echo_server(path: &Path) {
    let listener = UnixListener::bind(path).expect("bind echo socket");
    println!("ready");
    std::io::stdout().flush().expect("flush");
    let (mut stream, _) = listener.accept().expect("accept");
    let mut buf = [0u8; 64];
    while stream.read_exact(&mut buf).is_ok() {
        if stream.write_all(&buf).is_err() {
            break;
        }
    }
}

/// Round trips to an echo child process; returns each one's duration.
fn unix_round_trips(path: &Path, count: usize) -> Vec<Duration> {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = std::process::Command::new(exe)
        .arg(ECHO_FLAG)
        .arg(path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start echo child");
    let mut ready = String::new();
    BufReader::new(child.stdout.take().expect("child stdout"))
        .read_line(&mut ready)
        .expect("child ready line");
    let mut stream = UnixStream::connect(path).expect("connect echo");
    let mut buf = [7u8; 64];
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        stream.write_all(&buf).expect("write echo");
        stream.read_exact(&mut buf).expect("read echo");
        samples.push(start.elapsed());
    }
    drop(stream);
    child.wait().expect("echo child exit");
    samples
}

fn print_stats(samples: &mut [Duration]) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "  p50 {:>10.3?}  p99 {:>10.3?}  max {:>10.3?}",
        at(0.50),
        at(0.99),
        samples[samples.len() - 1]
    );
}
