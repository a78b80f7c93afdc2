//! devinject's benchmarks: what devinject costs a container start, a pod start and a device
//! plugin call, side by side with the native path. scripts/bench.sh builds them as they ship and
//! runs them; the figures, and how each is taken, are in docs/benchmarks.md. Benchmarks, not
//! tests: they print figures and fail only when they cannot measure. The machinery they share
//! with the integration tests (runc bundles, simulated hosts, private containerd and dockerd,
//! the test kubelet, the cluster) comes from `devinject-tests`.
//!
//! The binaries (`src/bin/`):
//!
//! - `devinject-bench`: container starts with runc, the hook, the shim and docker (rows 1 to 3,
//!   5, 9, 11 and 14), built on this library; `devinject-bench time` times the hook or the shim by
//!   itself.
//! - `device-plugin-bench`: the device plugin's registration, `Allocate` latency, health
//!   changes and memory (row 4).
//! - `cdi-watch-bench`: how soon `devinject-ctl cdi generate --watch` refreshes a CDI spec.
//! - `devinject-cri-bench`: each injection path on containerd 1.7, through CRI.
//! - `devinject-cluster-bench`: pod starts, the `kubernetes` policy and plugin re-registration
//!   on a real cluster.
//! - `oci-parse-bench`: parsing `config.json` with the hook's own types against `oci-spec`'s,
//!   and which of the two accepts specs with names newer than the parser (section 12).
//! - `servers-bench`: the metrics endpoint and the webhook's HTTPS server under well-behaved
//!   clients, requests per second and p50/p99 latency, with an A/A pair (section 19).
//! - `idle-bench`: the device plugin and the DRA driver waiting on a simulated node, quiet and
//!   beside a process writing to a node in a watched directory (section 6c).
//!
//! The library, mostly `devinject-bench`'s rows:
//!
//! - [`idle`]: a daemon's CPU time and wakeups over a window, for `idle-bench` and the
//!   cluster's.
//! - [`host`]: simulated hosts with N mknod'ed devices and L gcc-built libraries, and a profiles
//!   dir with the `bench` profile and every shipped one.
//! - [`overlay`]: a fresh overlay rootfs per start, as an engine gives each container, on the
//!   [`scratch`] filesystems.
//! - [`start`]: one way of starting a container (native, hook, shim ...), timed.
//! - [`timer`]: `devinject-bench time`, which times the hook or the shim by itself.
//! - [`matrix`]: rows 1 and 2 (the N × L matrix, and the shim pass-through).
//! - [`docker`]: row 3.
//! - [`discovery`]: row 5, in-process.
//! - [`storm`]: row 9, many containers started at once.
//! - [`startup`]: row 11, the CPU of the shim's and the helper's start-up.
//! - [`cdi_finish`]: row 14, the finish step a CDI spec carries, now and in an earlier spec.
//! - [`stats`] and [`report`]: medians with min and max, and the Markdown tables; [`stats`] serves
//!   every binary.
//! - [`interval`]: a 95% interval of a ratio of medians, resampling the rounds of a benchmark
//!   whose variants alternate.

pub mod cdi_finish;
pub mod discovery;
pub mod docker;
pub mod host;
pub mod idle;
pub mod interval;
pub mod matrix;
pub mod overlay;
pub mod report;
pub mod root_runtime;
pub mod scratch;
pub mod start;
pub mod startup;
pub mod stats;
pub mod storm;
pub mod timer;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use devinject_tests::runc::Bundle;
use devinject_tests::skip::which;
use host::HostFactory;
use report::{Environment, Report};
use scratch::{LayerFs, Scratch};
use start::{Binaries, Setup};

/// The parts of the benchmark (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Row 1: the N × L matrix.
    Start,
    /// Row 2: the shim pass-through.
    PassThrough,
    /// Row 3: docker.
    Docker,
    /// Row 5: discovery.
    Discovery,
    /// Row 9: start storms.
    Storm,
    /// Row 11: the CPU of the shim's and the helper's start-up.
    Startup,
    /// Row 14: a CDI spec's finish step, as written now and in an earlier spec.
    CdiFinish,
}

/// What to measure and how often.
#[derive(Debug, Clone)]
pub struct Options {
    /// Timed runs per figure.
    pub runs: usize,
    /// Untimed warm-up runs per figure.
    pub warmup: usize,
    /// Device counts of row 1.
    pub devices: Vec<usize>,
    /// Library counts of row 1.
    pub libraries: Vec<usize>,
    /// Devices in the docker row.
    pub docker_devices: usize,
    /// Libraries in the docker row.
    pub docker_libraries: usize,
    /// Timed runs per figure of the docker row.
    pub docker_runs: usize,
    /// Devices on the discovery host.
    pub discovery_devices: usize,
    /// Libraries on the discovery host.
    pub discovery_libraries: usize,
    /// Containers started at once in the storm row.
    pub storm_sizes: Vec<usize>,
    /// Rounds of the storm row.
    pub storm_rounds: usize,
    /// The parts to run.
    pub parts: Vec<Part>,
    /// The filesystem of the containers' upper layers.
    pub layer_fs: LayerFs,
    /// Work directory (kept); a temporary one (removed) when unset.
    pub work_dir: Option<PathBuf>,
    /// Directory of the built binaries.
    pub bin_dir: PathBuf,
    /// A second build of the shim and the helper to compare in row 11 (name, directory).
    pub compare: Option<(String, PathBuf)>,
    /// Timed runs of each binary in row 11 (each run is about a millisecond).
    pub startup_runs: usize,
    /// The command line, for the report.
    pub command: String,
}

/// Runs the benchmark. Needs root (mknod, overlay mounts, runc).
pub fn run(opts: &Options) -> Result<Report> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the benchmark needs root (mknod, overlay mounts, runc)");
    }
    for (tool, pkg) in [("gcc", "gcc"), ("runc", "runc")] {
        which(tool).with_context(|| format!("{tool} not found: apt-get install {pkg}"))?;
    }
    let tmp;
    let dir = match &opts.work_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("devinject-bench")
                .tempdir()?;
            tmp.path().to_owned()
        }
    };
    std::fs::create_dir_all(&dir)?;
    // runc runs hooks from the bundle dir: every path the bundles hold must be absolute.
    let dir = std::fs::canonicalize(&dir).with_context(|| format!("{}", dir.display()))?;
    let bin_dir = std::fs::canonicalize(&opts.bin_dir)
        .with_context(|| format!("binaries dir {}", opts.bin_dir.display()))?;
    let bins = Binaries {
        runc: which("runc").context("runc")?,
        hook: existing(bin_dir.join("devinject-hook"))?,
        shim: existing(bin_dir.join("devinject-runtime"))?,
        ctl: existing(bin_dir.join("devinject-ctl"))?,
        bench: std::env::current_exe().context("current exe")?,
        hook_only_runtime: Some(bin_dir.join("devinject-hook-only-runtime"))
            .filter(|p| p.is_file()),
    };
    let mut report = Report {
        env: environment(opts)?,
        ..Report::default()
    };
    let setup = Setup {
        template: Bundle::new(&dir.join("template"), &["/bin/true"])?,
        bins,
        scratch: Scratch::create(&dir.join("scratch"), opts.layer_fs)?,
    };
    let factory = HostFactory::new(&dir.join("hosts"))?;
    if opts.parts.contains(&Part::Start) {
        let dir = setup.scratch.bundles.join("start");
        report.matrix = matrix::measure(opts, &dir, &setup, &factory)?;
    }
    if opts.parts.contains(&Part::PassThrough) {
        let host = factory.host(1, 0)?;
        report.pass_through = Some(matrix::pass_through(
            opts,
            &dir.join("pass"),
            &setup,
            &host,
        )?);
    }
    if opts.parts.contains(&Part::Docker) {
        let host = factory.host(opts.docker_devices, opts.docker_libraries)?;
        report.docker = Some(docker::measure(opts, &host, &setup.bins));
    }
    if opts.parts.contains(&Part::Discovery) {
        let host = factory.host(opts.discovery_devices, opts.discovery_libraries)?;
        report.discovery = Some(discovery::measure(opts, &host)?);
    }
    if opts.parts.contains(&Part::Storm) {
        let host = factory.host(1, 0)?;
        report.storm = storm::measure(
            &setup.scratch.bundles.join("storm"),
            &setup,
            &host,
            &opts.storm_sizes,
            opts.storm_rounds,
        )?;
    }
    if opts.parts.contains(&Part::CdiFinish) {
        let dir = setup.scratch.bundles.join("cdi-finish");
        report.cdi_finish = cdi_finish::measure(opts, &dir, &setup, &factory)?;
    }
    if opts.parts.contains(&Part::Startup) {
        let host = factory.host(1, 0)?;
        let mut builds = vec![startup::Build::in_dir("as shipped", &bin_dir)?];
        if let Some((name, dir)) = &opts.compare {
            builds.push(startup::Build::in_dir(name, dir)?);
        }
        report.startup = Some(startup::measure(
            &dir.join("startup"),
            &host,
            &builds,
            opts.startup_runs,
            opts.warmup.max(10),
        )?);
    }
    report.env.load_after = load_average();
    Ok(report)
}

/// `p`, when it is a built binary.
pub(crate) fn existing(p: PathBuf) -> Result<PathBuf> {
    if !p.is_file() {
        bail!(
            "{} is not built: run `cargo build --release --workspace --bins` (scripts/bench.sh does)",
            p.display()
        );
    }
    Ok(p)
}

fn environment(opts: &Options) -> Result<Environment> {
    let first_line = |cmd: &str, args: &[&str]| -> String {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.lines().next().map(str::to_owned))
            .unwrap_or_default()
    };
    Ok(Environment {
        kernel: first_line("uname", &["-r"]),
        runc: first_line("runc", &["--version"]),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_before: load_average(),
        load_after: String::new(),
        command: opts.command.clone(),
        layers: opts.layer_fs.describe().to_owned(),
        runs: opts.runs,
        warmup: opts.warmup,
        nice: nice(),
    })
}

/// This process's nice value (field 19 of `/proc/self/stat`).
fn nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name, field 2, may hold spaces: count fields after its closing parenthesis.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(16))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The first three fields of `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The line that says how a run of interleaved rounds was taken: rounds, untimed rounds, CPUs
/// and the load average at the end.
pub fn rounds_line(rounds: usize, warmup: usize) -> String {
    format!(
        "{rounds} rounds after {warmup} untimed, paths interleaved; {} CPUs, load {}.",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average(),
    )
}

/// The `main` of a benchmark that needs root: exit 2 naming `needs` without it, else runs
/// `bench` and prints its table (exit 0) or its error (exit 1).
pub fn main_as_root(
    name: &str,
    needs: &str,
    bench: impl FnOnce() -> Result<String>,
) -> std::process::ExitCode {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("{name}: needs root ({needs})");
        return std::process::ExitCode::from(2);
    }
    match bench() {
        Ok(table) => {
            print!("{table}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
