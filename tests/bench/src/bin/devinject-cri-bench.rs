//! `devinject-cri-bench`: what each injection path costs a container start on containerd 1.7
//! (Debian 13's, from scripts/runtimes-fetch.sh), or on the containerd 2 a `DEVINJECT_RUNTIMES`
//! names (`--containerd 2`: Debian's 2.1, or 2.3/2.4 built by scripts/containerd-build.sh and
//! linked in by scripts/lib/runtimes-with.sh), driven through CRI as the kubelet drives it.
//! One containerd with every path on: CDI, NRI and the `devinject` runtime entry. The same
//! container (`/bin/true`, the demo devices 0 and 1 and the demo library) is created, started,
//! waited for and removed, in rounds that alternate the paths:
//!
//! - native: the nodes as CRI `devices` and the library as a read-only CRI mount, plain runc
//!   (what a device plugin's `DeviceSpec`s and mounts give; no linker cache), twice per round
//!   (an A/A pair: the noise of the machine);
//! - shim: the request variable, in a pod on the `devinject` runtime;
//! - CDI: the device plugin's `cdi.k8s.io/` annotation, plain runc;
//! - native with `devinject-nri` connected (NRI asks the plugin about every container, those
//!   asking for nothing too);
//! - NRI: the request variable, plain runc, with `devinject-nri` connected.
//!
//! The plugin is started before and stopped after the paths that want it, untimed and followed
//! by one untimed start, so that all six are taken in the same rounds. Each exit is seen on containerd's container event, not by
//! polling (`--poll`, the earlier method, quantises it to the poll's steps). Every call is timed
//! on its own, and each ratio comes with a 95% interval from resampling the rounds.
//!
//! Prints a Markdown section on stdout. Binaries come from `DEVINJECT_BIN_DIR` (scripts/bench.sh
//! points it at the release build). Needs root. Figures are wall times: run on a quiet machine.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use devinject_bench::interval::{ratio_of_medians, RESAMPLES};
use devinject_bench::stats::{short, Samples};
use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::cri_release::{Paths, ReleaseNode};
use devinject_tests::runtimes;
use devinject_tests::sim::LIB;
use k8s_cri::v1::PodSandboxConfig;

/// Rounds per block, unless `--rounds` says otherwise.
const ROUNDS: usize = 20;
/// Rounds run first and not counted (page cache, containerd's first-use costs).
const WARMUP: usize = 3;

fn spec(node: &ReleaseNode, path: &str) -> ContainerSpec {
    let mut s = ContainerSpec {
        name: format!("bench-{path}"),
        image: BUSYBOX.into(),
        command: vec!["/bin/true".into()],
        log_path: format!("{path}.log"),
        ..ContainerSpec::default()
    };
    match path {
        "native" | "native-again" | "native-nri" => {
            for n in ["accel0", "accel1", "ctl"] {
                s.devices.push((
                    node.host.dev_root.join("demo").join(n),
                    PathBuf::from("/dev/demo").join(n),
                ));
            }
            let lib = node
                .host
                .driver_root
                .join("opt/devinject-demo/lib/libdemo.so.1.0.0");
            s.mounts.push((lib, PathBuf::from(LIB)));
        }
        "cdi" => {
            s.annotations.insert(
                "cdi.k8s.io/devinject_demo".into(),
                "devinject.io/demo=0,devinject.io/demo=1".into(),
            );
        }
        _ => s.env.push(("DEMO_VISIBLE_DEVICES".into(), "0,1".into())),
    }
    s
}

/// The timings of one path: the whole start and each CRI call in it.
#[derive(Debug, Clone, Default)]
struct Timings {
    /// `CreateContainer` to the end of `RemoveContainer`.
    total: Samples,
    /// `CreateContainer` (the shim's and NRI's planning; CDI's spec edits).
    create: Samples,
    /// `StartContainer` (runc's create hooks run here: the finish step).
    start: Samples,
    /// From `StartContainer`'s answer to the exit containerd reports (after it has had the
    /// runtime `kill` and `delete` the task).
    exit: Samples,
    /// `RemoveContainer`.
    remove: Samples,
}

/// Creates, starts, waits for and removes `spec` in `pod`, timing each call.
fn timed_run(
    node: &mut ReleaseNode,
    pod: &str,
    pod_config: &PodSandboxConfig,
    spec: &ContainerSpec,
) -> Result<[Duration; 4]> {
    let cri = &mut node.cri;
    let t0 = Instant::now();
    let id = cri.create_container(pod, &spec.config(), pod_config)?;
    let t1 = Instant::now();
    cri.start_container(&id)?;
    let t2 = Instant::now();
    let status = cri.wait_exited(&id, Duration::from_secs(60))?;
    let t3 = Instant::now();
    cri.remove_container(&id)?;
    let t4 = Instant::now();
    if status.exit_code != 0 {
        bail!(
            "{} exited {}: {}",
            spec.name,
            status.exit_code,
            status.message
        );
    }
    Ok([t1 - t0, t2 - t1, t3 - t2, t4 - t3])
}

/// One column of the benchmark: a way of giving the container its devices.
struct Column {
    /// Its name, which picks the container's spec.
    column: &'static str,
    /// The pod's runtime handler (`""`: plain runc).
    handler: &'static str,
    /// Whether `devinject-nri` is connected while it runs.
    nri: bool,
}

/// Runs `rounds` rounds of `paths`, alternating, each round starting one path later than the
/// one before (the first start of a round is the slower one), connecting `devinject-nri` for
/// the paths that want it and stopping it for the others, each change followed by one start
/// (all untimed); the timings per path, sample `i` of each from round `i`.
fn block(node: &mut ReleaseNode, paths: &[Column], rounds: usize) -> Result<Vec<Timings>> {
    let mut pods = Vec::new();
    for p in paths {
        pods.push(node.pod(&format!("bench-{}", p.column), p.handler)?);
    }
    let specs: Vec<ContainerSpec> = paths.iter().map(|p| spec(node, p.column)).collect();
    let mut timings = vec![Timings::default(); paths.len()];
    let mut nri = false;
    for round in 0..WARMUP + rounds {
        for k in 0..paths.len() {
            let i = (round + k) % paths.len();
            let ((pod, config), spec) = (&pods[i], &specs[i]);
            if paths[i].nri != nri {
                if paths[i].nri {
                    node.start_nri_plugin()?;
                } else {
                    node.stop_nri_plugin();
                }
                nri = paths[i].nri;
                // One start untimed after the change: containerd 2.3 makes the first container
                // after a plugin left about 5 ms slower to start (seen as an A/A pair of 0.91
                // when the native path always came right after the plugin stopped).
                timed_run(node, pod, config, spec).with_context(|| node.containerd.log_tail())?;
            }
            let phases =
                timed_run(node, pod, config, spec).with_context(|| node.containerd.log_tail())?;
            if round >= WARMUP {
                let t = &mut timings[i];
                t.total.push(phases.iter().sum());
                for (s, d) in [&mut t.create, &mut t.start, &mut t.exit, &mut t.remove]
                    .into_iter()
                    .zip(phases)
                {
                    s.push(d);
                }
            }
        }
    }
    node.stop_nri_plugin();
    for (pod, _) in &pods {
        node.cri.remove_pod(pod)?;
    }
    Ok(timings)
}

/// `[lo–hi]`, the 95% interval of `a`'s median over `base`'s, or `–`.
fn interval(a: &Samples, base: &Samples) -> String {
    match ratio_of_medians(a, base, RESAMPLES) {
        Some((lo, hi)) => format!("[{}–{}]", short(lo), short(hi)),
        None => "–".into(),
    }
}

fn run(series: &str, rounds: usize, poll: bool) -> Result<()> {
    let release = runtimes::containerd(series).with_context(|| {
        format!("containerd {series} is not fetched (scripts/runtimes-fetch.sh)")
    })?;
    let paths = Paths {
        cdi: true,
        nri: true,
        shim: true,
        host_config: "policy = \"env\"".into(),
        ..Paths::default()
    };
    let mut node = ReleaseNode::start(&release, &paths)?;
    if !poll {
        node.cri.follow_events()?;
    }
    let path = |column, handler, nri| Column {
        column,
        handler,
        nri,
    };
    let t = block(
        &mut node,
        &[
            path("native", "", false),
            path("shim", "devinject", false),
            path("cdi", "", false),
            path("native-again", "", false),
            path("native-nri", "", true),
            path("nri", "", true),
        ],
        rounds,
    )?;

    let wait = if poll {
        "the exit seen by polling `ContainerStatus` (20, 40, 80 ms apart: the earlier method)"
    } else {
        "the exit seen on containerd's container event (`GetContainerEvents`)"
    };
    println!(
        "### Container start by injection path (containerd {})",
        release.version
    );
    println!();
    println!(
        "Create, start, exit and removal of one container (`/bin/true`, demo devices 0 and 1 \
         and the demo library) through CRI, {wait}; {rounds} rounds after {WARMUP} not counted, \
         paths alternating, each round starting with the next (`devinject-nri` connected for \
         the two paths that name it, stopped for the others, each change followed by one \
         start, all untimed). Milliseconds: median \
         [min–max]; ratio of medians to the native column, with its 95% interval from \
         {RESAMPLES} resamples of the rounds."
    );
    println!();
    println!("| path | ms | ratio to native | 95% interval |");
    println!("|---|---|---|---|");
    let rows = [
        ("native (CRI devices and mount)", &t[0], &t[0]),
        ("native again (A/A)", &t[3], &t[0]),
        ("runtime shim", &t[1], &t[0]),
        ("CDI (containerd injects)", &t[2], &t[0]),
        ("native, devinject-nri connected", &t[4], &t[0]),
        ("NRI plugin", &t[5], &t[0]),
        ("NRI plugin, against native with it connected", &t[5], &t[4]),
    ];
    for (name, t, base) in rows {
        println!(
            "| {name} | {} | {} | {} |",
            t.total.ms(),
            short(t.total.ratio_to(&base.total)),
            interval(&t.total, &base.total)
        );
    }
    println!();
    println!("Where the time goes: each CRI call's median, ms.");
    println!();
    println!("| path | create | start | to exit | remove |");
    println!("|---|---|---|---|---|");
    for (name, t, _) in &rows[..6] {
        let ms = |s: &Samples| short(s.median().as_secs_f64() * 1e3);
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(&t.create),
            ms(&t.start),
            ms(&t.exit),
            ms(&t.remove)
        );
    }
    Ok(())
}

/// Benchmark: what each injection path (CDI, NRI, the devinject runtime) costs a container start
/// on containerd, driven through CRI as the kubelet drives it, against the native path.
///
/// Prints a Markdown section on stdout; the figures are in docs/benchmarks.md. Binaries come
/// from DEVINJECT_BIN_DIR. Needs root and the containerd of `--containerd` from
/// scripts/runtimes-fetch.sh; run it on a quiet machine, through scripts/bench.sh.
#[derive(Parser, Debug)]
#[command(name = "devinject-cri-bench")]
struct Cli {
    /// Rounds per block (each path once per round).
    #[arg(long, default_value_t = ROUNDS)]
    rounds: usize,
    /// The containerd series under `DEVINJECT_RUNTIMES` (`1.7`, `2`).
    #[arg(long, value_name = "SERIES", default_value = "1.7")]
    containerd: String,
    /// See each exit by polling `ContainerStatus` (20, 40, 80 ms apart), as the benchmark did
    /// before it followed containerd's container events: to compare the two methods.
    #[arg(long)]
    poll: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.rounds == 0 {
        eprintln!("devinject-cri-bench: --rounds must be at least 1");
        return ExitCode::FAILURE;
    }
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("devinject-cri-bench: needs root");
        return ExitCode::FAILURE;
    }
    match run(&cli.containerd, cli.rounds, cli.poll) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinject-cri-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
