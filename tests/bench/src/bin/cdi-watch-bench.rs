//! `cdi-watch-bench`: how soon `devinject-ctl cdi generate --watch` refreshes a CDI spec.
//!
//! Run as root after `cargo build --release --workspace --bins` (scripts/bench.sh does both):
//! `cdi-watch-bench [--rounds 20] [--debounce-ms 100]`. On a simulated demo host (4 mknod'ed
//! nodes, a gcc-built library) the real watcher runs; each round creates a fifth node with
//! mknod(2) and times until the spec naming it has been renamed into place (an inotify
//! `IN_MOVED_TO` on the CDI directory, then the spec read and parsed), then removes the node and
//! times until the spec without it is in place. The target is under 1 s; the figure is about
//! one debounce period (the pause the watcher waits for after the last event) plus one
//! generation. Also prints the CPU time the watcher used per refresh. A benchmark, not a test:
//! it prints figures and fails only when it cannot measure. Exit codes: 0 measured, 1 the
//! benchmark failed, 2 not root.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use devinject_bench::stats::{short, Samples};
use devinject_tests::{bins, sim};
use inotify::{Inotify, WatchMask};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};

/// Benchmark: how soon `devinject-ctl cdi generate --watch` refreshes a CDI spec after a device
/// node appears or goes.
///
/// Prints the latencies and the watcher's CPU time per refresh as Markdown; the figures are in
/// docs/benchmarks.md. Needs root; run it on a quiet machine, through scripts/bench.sh.
#[derive(Parser, Debug)]
#[command(name = "cdi-watch-bench")]
struct Cli {
    /// Changes of each kind (node created, node removed) to time.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// The watcher's --debounce-ms.
    #[arg(long, default_value_t = 100)]
    debounce_ms: u64,
}

/// No refresh within this is a failure.
const DEADLINE: Duration = Duration::from_secs(10);
/// The spec's file name.
const SPEC: &str = "devinject.io-demo.json";

fn main() -> ExitCode {
    let cli = Cli::parse();
    devinject_bench::main_as_root("cdi-watch-bench", "mknod", || bench(&cli))
}

/// The watcher process; stopped (SIGTERM, then killed) on drop.
struct Watcher(Child);

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Watcher {
    /// CPU time (user + system) the watcher has used so far.
    fn cpu(&self) -> Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0.id()))
            .context("read the watcher's /proc/<pid>/stat")?;
        let after = stat
            .rfind(')')
            .map(|i| &stat[i + 2..])
            .context("parse /proc/<pid>/stat")?;
        let fields: Vec<&str> = after.split(' ').collect();
        // utime and stime, in clock ticks of USER_HZ, which is 100 on Linux (proc(5)).
        let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
        Ok(Duration::from_millis(ticks * 10))
    }
}

/// Instants at which a spec was renamed into (or removed from) the CDI directory.
fn spec_events(dir: &Path) -> Result<Receiver<Instant>> {
    let mut inotify = Inotify::init().context("inotify")?;
    inotify
        .watches()
        .add(dir, WatchMask::MOVED_TO | WatchMask::DELETE)
        .with_context(|| format!("watch {}", dir.display()))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        loop {
            let Ok(events) = inotify.read_events_blocking(&mut buffer) else {
                return;
            };
            let at = Instant::now();
            for event in events {
                if event.name.is_some_and(|n| n == SPEC) && tx.send(at).is_err() {
                    return;
                }
            }
        }
    });
    Ok(rx)
}

/// The spec's device names, or `None` when it is absent.
fn device_names(spec: &Path) -> Result<Option<Vec<String>>> {
    let text = match std::fs::read_to_string(spec) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("read {}", spec.display())),
    };
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} does not parse: read half-written?", spec.display()))?;
    Ok(Some(
        v["devices"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter_map(|d| d["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
    ))
}

/// Waits for the spec event after which `done` holds for the spec; returns that event's instant.
fn wait_for(
    events: &Receiver<Instant>,
    spec: &Path,
    what: &str,
    done: impl Fn(Option<&[String]>) -> bool,
) -> Result<Instant> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(at) = events.recv_timeout(left) else {
            bail!(
                "{what}: {} not refreshed within {DEADLINE:?}",
                spec.display()
            );
        };
        if done(device_names(spec)?.as_deref()) {
            return Ok(at);
        }
    }
}

fn bench(cli: &Cli) -> Result<String> {
    let tmp = tempfile::tempdir().context("tempdir")?;
    let host = sim::demo_host(tmp.path(), &["demo"]).context("simulated host")?;
    let out = tmp.path().join("cdi");
    std::fs::create_dir_all(&out).context("mkdir cdi")?;
    let spec = out.join(SPEC);
    let events = spec_events(&out)?;
    let ctl: PathBuf = bins::bin("devinject-ctl");
    let watcher = Watcher(
        Command::new(&ctl)
            .args(["cdi", "generate", "--watch", "--debounce-ms"])
            .arg(cli.debounce_ms.to_string())
            .arg("--output")
            .arg(&out)
            .arg("--profiles-dir")
            .arg(&host.profiles_dir)
            .arg("--dev-root")
            .arg(&host.dev_root)
            .arg("--sys-root")
            .arg(tmp.path().join("sys"))
            .arg("--driver-root")
            .arg(&host.driver_root)
            .env("DEVINJECT_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("start {} cdi generate --watch", ctl.display()))?,
    );
    wait_for(&events, &spec, "first generation", |names| {
        names.is_some_and(|n| n.len() == 5)
    })?;

    let node = host.dev_root.join("demo/accel4");
    let mut created = Samples::default();
    let mut removed = Samples::default();
    let cpu_before = watcher.cpu()?;
    for _ in 0..cli.rounds {
        while events.try_recv().is_ok() {}
        let t0 = Instant::now();
        mknod(
            &node,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(10, 183),
        )
        .with_context(|| format!("mknod {}", node.display()))?;
        let at = wait_for(&events, &spec, "node created", |names| {
            names.is_some_and(|n| n.iter().any(|d| d == "4"))
        })?;
        created.push(at - t0);

        while events.try_recv().is_ok() {}
        let t0 = Instant::now();
        std::fs::remove_file(&node).with_context(|| format!("rm {}", node.display()))?;
        let at = wait_for(&events, &spec, "node removed", |names| {
            names.is_some_and(|n| !n.iter().any(|d| d == "4"))
        })?;
        removed.push(at - t0);
    }
    let cpu = watcher.cpu()? - cpu_before;
    drop(watcher);

    let ms = |d: Duration| short(d.as_secs_f64() * 1e3);
    let row = |what: &str, s: &Samples| {
        format!(
            "| {what} | {} | {} | {} | {} | {} |\n",
            s.len(),
            ms(s.median()),
            ms(s.min()),
            ms(s.quantile(0.9)),
            ms(s.max())
        )
    };
    let refreshes = (created.len() + removed.len()).max(1);
    Ok(format!(
        "### CDI spec refresh (`devinject-ctl cdi generate --watch`, debounce {} ms)\n\n\
         Time from the change to the refreshed spec renamed into place, in ms (target: under \
         1 s).\n\n\
         | change | runs | median | min | p90 | max |\n\
         |---|---|---|---|---|---|\n\
         {}{}\n\
         Watcher CPU time: {} ms per refresh (discovery, the spec, its write).\n",
        cli.debounce_ms,
        row("node created (mknod) -> spec with the device", &created),
        row("node removed -> spec without it", &removed),
        ms(cpu / u32::try_from(refreshes).unwrap_or(u32::MAX)),
    ))
}
