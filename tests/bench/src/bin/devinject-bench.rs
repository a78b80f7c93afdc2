//! `devinject-bench`: what devinject costs a container start, side by side with the native path.
//!
//! Usage (as root, after `cargo build --release --workspace --bins`; scripts/bench.sh does both):
//! `devinject-bench [--runs N] [--warmup N] [--devices 1,8,32] [--libraries 0,16,64] ...`.
//! Prints Markdown tables on stdout, progress on stderr. Exit codes: 0 measured, 1 the benchmark
//! failed (a start failed or a prerequisite is missing), 2 bad arguments.
//!
//! `devinject-bench time --record FILE -- CMD...` is the internal wrapper that times the hook (as
//! runc's createRuntime hook) or the shim by itself.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use devinject_bench::scratch::LayerFs;
use devinject_bench::{self as bench, Options, Part};

/// Benchmark: what devinject costs a container start (runc with the hook, the shim, docker),
/// against the native path.
///
/// Prints Markdown tables on stdout, progress on stderr; the figures and how they are taken are
/// in docs/benchmarks.md (rows 1 to 3, 5, 9, 11 and 14). Needs root; run it on a quiet machine, through
/// scripts/bench.sh, which builds the release binaries first.
#[derive(Parser, Debug)]
#[command(name = "devinject-bench", version)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Timed runs per figure.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// Untimed warm-up runs per figure.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Device counts for row 1.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    devices: Vec<usize>,
    /// Library counts for row 1.
    #[arg(long, value_delimiter = ',', default_value = "0,16,64")]
    libraries: Vec<usize>,
    /// Devices in the docker row.
    #[arg(long, default_value_t = 8)]
    docker_devices: usize,
    /// Libraries in the docker row.
    #[arg(long, default_value_t = 64)]
    docker_libraries: usize,
    /// Timed runs per figure of the docker row.
    #[arg(long, default_value_t = 100)]
    docker_runs: usize,
    /// Devices on the host of the discovery row.
    #[arg(long, default_value_t = 256)]
    discovery_devices: usize,
    /// Libraries in the profile of the discovery row.
    #[arg(long, default_value_t = 64)]
    discovery_libraries: usize,
    /// Containers started at once in the storm row.
    #[arg(long, value_delimiter = ',', default_value = "10,50")]
    storm: Vec<usize>,
    /// Rounds of the storm row (after one not counted).
    #[arg(long, default_value_t = 6)]
    storm_rounds: usize,
    /// Parts to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "start,pass-through,docker,discovery,storm,startup,cdi-finish"
    )]
    only: Vec<Part>,
    /// Filesystem of the containers' writable layers.
    #[arg(long, value_enum, default_value = "ext4")]
    layers: LayerFs,
    /// Keep the work files in this directory (default: a temporary directory, removed).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Directory of the built devinject binaries (default: this binary's directory).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Timed runs of each binary in the start-up row (row 11).
    #[arg(long, default_value_t = 300)]
    startup_runs: usize,
    /// Another build of the shim and the helper to compare in the start-up row, as NAME=DIR
    /// (scripts/bench.sh passes the glibc builds of the binaries it ships built against musl).
    #[arg(long, value_parser = bench::stats::name_and_dir)]
    compare: Option<(String, PathBuf)>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Runs CMD, appends its wall time and peak RSS to FILE, exits with its exit code.
    #[command(hide = true)]
    Time {
        /// The record file.
        #[arg(long)]
        record: PathBuf,
        /// The command.
        #[arg(last = true, required = true)]
        cmd: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Cmd::Time { record, cmd }) = &cli.command {
        return match bench::timer::time_command(record, cmd) {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                eprintln!("devinject-bench time: {e:#}");
                ExitCode::from(1)
            }
        };
    }
    let a = cli.run;
    let bin_dir = a.bin_dir.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("."))
    });
    let opts = Options {
        runs: a.runs.max(1),
        warmup: a.warmup,
        devices: a.devices,
        libraries: a.libraries,
        docker_devices: a.docker_devices,
        docker_libraries: a.docker_libraries,
        docker_runs: a.docker_runs.max(1),
        discovery_devices: a.discovery_devices,
        discovery_libraries: a.discovery_libraries,
        storm_sizes: a.storm,
        storm_rounds: a.storm_rounds.max(1),
        parts: a.only,
        layer_fs: a.layers,
        work_dir: a.work_dir,
        bin_dir,
        compare: a.compare,
        startup_runs: a.startup_runs.max(1),
        command: command_line(),
    };
    match bench::run(&opts) {
        Ok(report) => {
            print!("{}", report.render());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("devinject-bench: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn command_line() -> String {
    let mut args = std::env::args();
    let _ = args.next();
    std::iter::once("devinject-bench".to_owned())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}
