//! What the device plugin and the DRA driver cost while they wait, on a simulated node: both
//! daemons serve the demo profile's four devices (the plugin against the test kubelet, the
//! driver against the stand-in API server), and beside the devices' directory holds `null`, a
//! node of no profile, as `/dev` holds `/dev/null` beside `/dev/kvm`. After a 5 s settle, two
//! quiet windows (the second an A/A of the first), then one with a process writing to `null` 100
//! times a second (open, write, close: a shell's `2>/dev/null`). Each window gives each
//! daemon's CPU seconds per hour and wakeups per second (section 6c of docs/benchmarks.md; the
//! same measure as `devinject-cluster-bench --idle` on a real node).
//!
//! Run as root: `cargo run -p devinject-bench --bin idle-bench`, or with `DEVINJECT_BIN_DIR`
//! naming another build's binaries. A benchmark, not a test: it prints figures and fails only
//! when it cannot measure.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use devinject_bench::idle::Mark;
use devinject_tests::kubelet::dra_process::DraProcess;
use devinject_tests::kubelet::fake_apiserver::FakeApiServer;
use devinject_tests::kubelet::fake_kubelet::FakeKubelet;
use devinject_tests::kubelet::host::{profile, TestHost};
use devinject_tests::kubelet::plugin_process::PluginProcess;

const SLOW: Duration = Duration::from_secs(30);
/// Time for the start's registration, first publications and lists to be over.
const SETTLE: Duration = Duration::from_secs(5);
/// The writes a second of the busy window.
const WRITES_PER_SECOND: u32 = 100;

/// Benchmark: the device plugin's and the DRA driver's CPU and wakeups while they wait on a
/// simulated node, quiet and beside writes to a node in a watched directory.
#[derive(Parser, Debug)]
#[command(name = "idle-bench")]
struct Cli {
    /// Length of each window, in seconds.
    #[arg(long, default_value_t = 30)]
    window: u64,
    /// The profile's `discovery.health_interval_ms`; unset, the default (binaries from before
    /// the key refuse it).
    #[arg(long, value_name = "MS")]
    health_interval_ms: Option<u64>,
}

fn main() {
    let cli = Cli::parse();
    let runtime = devinject_bench::root_runtime::root_runtime("idle-bench");
    runtime.block_on(bench(
        Duration::from_secs(cli.window),
        cli.health_interval_ms,
    ));
}

async fn bench(window: Duration, health_interval_ms: Option<u64>) {
    let host = TestHost::new();
    host.add_kind("demo", "", 4, |i| (i / 2) as i64);
    if let Some(ms) = health_interval_ms {
        host.write_profile(
            "demo",
            &profile("demo", "").replace(
                "[discovery]\n",
                &format!("[discovery]\nhealth_interval_ms = {ms}\n"),
            ),
        );
    }
    host.mknod("demo/null", 1, 3);
    let mut kubelet = FakeKubelet::start(&host.kubelet_dir());
    let plugin = PluginProcess::spawn(&host, &[], &[]);
    let mut reg = kubelet.next_registration(SLOW).await;
    reg.next_list(SLOW).await.expect("the plugin's first list");
    let api = FakeApiServer::start().await;
    let driver = DraProcess::spawn(&host, &api, &[]);
    api.wait_applied(SLOW, "the driver's demo slice", 0, |_| true)
        .await;
    println!(
        "binaries: {}; health interval: {}",
        std::env::var("DEVINJECT_BIN_DIR").unwrap_or_else(|_| "this build's".into()),
        health_interval_ms.map_or("the default".to_owned(), |ms| format!("{ms} ms"))
    );
    let daemons = [
        ("devinject-device-plugin", plugin.pid()),
        ("devinject-dra", driver.pid()),
    ];
    let pids: Vec<u32> = daemons.iter().map(|&(_, pid)| pid).collect();
    tokio::time::sleep(SETTLE).await;
    let mut rows = Vec::new();
    for (name, writes) in [
        ("quiet", false),
        ("quiet (A/A)", false),
        ("100 writes/s to a node beside", true),
    ] {
        let writer = writes.then(|| Writer::start(host.dev_root().join("demo/null")));
        let mark = Mark::now(&pids).expect("read the daemons' /proc");
        // Awaited, not slept: the test kubelet and the stand-in API server run on this thread.
        tokio::time::sleep(window).await;
        let costs = mark.cost(&pids).expect("read the daemons' /proc");
        let label = match writer.map(Writer::stop) {
            Some(rate) => format!("{name} ({rate:.0} a second)"),
            None => name.to_owned(),
        };
        for ((daemon, _), cost) in daemons.iter().zip(costs) {
            rows.push((*daemon, label.clone(), cost));
        }
    }
    rows.sort_by_key(|r| r.0);
    println!(
        "\n| daemon | window ({} s) | CPU s per hour | wakeups per s |\n|---|---|---|---|",
        window.as_secs()
    );
    for (daemon, window, cost) in rows {
        println!(
            "| {daemon} | {window} | {:.1} | {:.2} |",
            cost.cpu_per_hour, cost.wakeups_per_second
        );
    }
    drop(reg);
}

/// A thread writing to a node [`WRITES_PER_SECOND`] times a second, each write its own open,
/// write and close.
struct Writer {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    started: Instant,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    fn start(node: std::path::PathBuf) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let (stop, writes) = (Arc::clone(&stop), Arc::clone(&writes));
            move || {
                let period = Duration::from_secs(1) / WRITES_PER_SECOND;
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::fs::write(&node, "discarded\n").expect("write to the node");
                    writes.fetch_add(1, Ordering::Relaxed);
                    next += period;
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            }
        });
        Self {
            stop,
            writes,
            started: Instant::now(),
            thread,
        }
    }

    /// Stops the writes; returns how many were made a second.
    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        self.thread.join().expect("the writer thread");
        self.writes.load(Ordering::Relaxed) as f64 / secs
    }
}
