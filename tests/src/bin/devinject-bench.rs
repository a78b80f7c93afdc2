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

use clap::{Parser, Subcommand, ValueEnum};
use devinject_tests::bench::scratch::LayerFs;
use devinject_tests::bench::{self, Options, Part};

/// What devinject costs a container start (runc with the hook, the shim, docker), against the
/// native path; prints Markdown tables (docs/benchmarks.md).
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
        default_value = "start,pass-through,docker,discovery,storm"
    )]
    only: Vec<PartArg>,
    /// Filesystem of the containers' writable layers.
    #[arg(long, value_enum, default_value = "ext4")]
    layers: LayersArg,
    /// Keep the work files in this directory (default: a temporary directory, removed).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Directory of the built devinject binaries (default: this binary's directory).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum PartArg {
    Start,
    PassThrough,
    Docker,
    Discovery,
    Storm,
}

impl From<PartArg> for Part {
    fn from(p: PartArg) -> Self {
        match p {
            PartArg::Start => Part::Start,
            PartArg::PassThrough => Part::PassThrough,
            PartArg::Docker => Part::Docker,
            PartArg::Discovery => Part::Discovery,
            PartArg::Storm => Part::Storm,
        }
    }
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LayersArg {
    /// A fresh ext4 filesystem on a loop device.
    Ext4,
    /// A tmpfs.
    Tmpfs,
    /// The work dir's own filesystem.
    Dir,
}

impl From<LayersArg> for LayerFs {
    fn from(l: LayersArg) -> Self {
        match l {
            LayersArg::Ext4 => LayerFs::Ext4,
            LayersArg::Tmpfs => LayerFs::Tmpfs,
            LayersArg::Dir => LayerFs::Dir,
        }
    }
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
        parts: a.only.into_iter().map(Part::from).collect(),
        layer_fs: a.layers.into(),
        work_dir: a.work_dir,
        bin_dir,
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
