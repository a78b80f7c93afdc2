//! `devinject-ctl`: configure container engines for devinject, export CDI specs, list devices and
//! tell what is wrong on a host.
//!
//! Exit codes (see [`exit_code::ExitCode`]): 0 success (including "nothing to change"), 1
//! unexpected failure, 2 usage error, 3 a host configuration file or profile is broken,
//! unsupported or not ours (nothing was written), 4 filesystem or permission error, 5 a helper
//! command or the daemon reload failed, 6 `doctor` found an error.

mod cdi_generate;
mod devices_list;
mod doctor;
mod exit_code;
mod runtime_configure;
mod runtime_unconfigure;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use devinject_cdi::CdiReport;
use devinject_engine_config::{ChangeReport, Engine, HostPaths};

use exit_code::ExitCode;

/// Configure container engines (containerd, CRI-O, docker, podman) to inject devices with
/// devinject.
#[derive(Debug, Parser)]
#[command(name = "devinject-ctl", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Configure or unconfigure a container engine.
    #[command(subcommand)]
    Runtime(RuntimeCommand),
    /// Container Device Interface specs.
    #[command(subcommand)]
    Cdi(CdiCommand),
    /// The devices each profile finds on this host.
    #[command(subcommand)]
    Devices(DevicesCommand),
    /// Tell what is wrong on this host: cgroups, runtimes, engine configuration, profiles,
    /// devices, driver files, stale CDI specs, ldconfig, kubelet sockets. Exits 6 when something
    /// is broken.
    Doctor(doctor::DoctorArgs),
}

#[derive(Debug, Subcommand)]
enum DevicesCommand {
    /// List profiles' devices: id, index, nodes, NUMA node, health.
    List(devices_list::ListArgs),
}

#[derive(Debug, Subcommand)]
enum CdiCommand {
    /// Write a CDI spec per profile for the devices found on this host; with --watch, keep them
    /// fresh.
    Generate(cdi_generate::GenerateArgs),
}

#[derive(Debug, Subcommand)]
enum RuntimeCommand {
    /// Add devinject to an engine's configuration.
    Configure(runtime_configure::ConfigureArgs),
    /// Restore the engine's configuration as it was before `configure`.
    Unconfigure(runtime_unconfigure::UnconfigureArgs),
}

/// The engine, on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum EngineArg {
    Containerd,
    Crio,
    Docker,
    Podman,
}

impl From<EngineArg> for Engine {
    fn from(e: EngineArg) -> Self {
        match e {
            EngineArg::Containerd => Engine::Containerd,
            EngineArg::Crio => Engine::Crio,
            EngineArg::Docker => Engine::Docker,
            EngineArg::Podman => Engine::Podman,
        }
    }
}

/// Options shared by configure and unconfigure.
#[derive(Debug, Args)]
struct Common {
    /// The engine to (un)configure.
    #[arg(long, value_enum)]
    runtime: EngineArg,
    /// The engine's main configuration file (default: /etc/containerd/config.toml,
    /// /etc/crio/crio.conf, /etc/docker/daemon.json, /etc/containers/containers.conf).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Directory where the host's / is reachable (e.g. /host in an installer container); every
    /// path is read and written below it, and written into files without it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// hooks.d directory for CRI-O and podman hook files.
    #[arg(long, value_name = "DIR")]
    hooks_dir: Option<PathBuf>,
    /// Show the changes as a unified diff and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// docker: send SIGHUP to dockerd after a change so it re-reads daemon.json.
    #[arg(long)]
    reload: bool,
    /// docker: dockerd's pid file, for --reload.
    #[arg(long, value_name = "PATH", default_value = devinject_engine_config::reload::DOCKERD_PIDFILE)]
    docker_pidfile: PathBuf,
}

impl Common {
    fn paths(&self) -> anyhow::Result<HostPaths> {
        let absolute = |p: &PathBuf| -> anyhow::Result<PathBuf> {
            if p.is_absolute() {
                Ok(p.clone())
            } else {
                Ok(std::env::current_dir()?.join(p))
            }
        };
        Ok(HostPaths {
            root: absolute(&self.root)?,
            config: self.config.as_ref().map(absolute).transpose()?,
            hooks_dir: self.hooks_dir.as_ref().map(absolute).transpose()?,
        })
    }
}

/// Prints what changed (or, for a dry run, the diff) and what the engine needs next.
fn print_report(report: &ChangeReport, will_reload: bool) {
    if report.dry_run {
        print!("{}", report.diff());
        if report.changed() {
            println!(
                "dry run: {} file(s) would change; nothing was written",
                report.changes.len()
            );
        }
    } else {
        for change in &report.changes {
            println!("{:<6} {}", change.action, change.path.display());
        }
    }
    for note in &report.notes {
        println!("note: {note}");
    }
    if report.changed() && !will_reload {
        if let Some(instruction) = report.activation.instruction() {
            println!("{instruction}");
        }
    }
}

/// Prints the CDI export: one line per profile, then the changed files (or the diff).
fn print_cdi_report(report: &CdiReport) {
    for p in &report.profiles {
        if let Some(why) = &p.withdrawn {
            println!("{}: withdrawn, no spec: {why}", p.profile);
            continue;
        }
        match (&p.file, &p.cdi_version, &p.not_exported) {
            (Some(file), Some(version), _) => println!(
                "{}: {} device(s) -> {} (cdiVersion {version})",
                p.profile,
                p.devices,
                file.display()
            ),
            (_, _, Some(why)) => println!("{}: {} device(s), no spec: {why}", p.profile, p.devices),
            _ => println!("{}: no devices found, no spec", p.profile),
        }
        if let Some(note) = &p.left_out {
            println!("{}: {note}", p.profile);
        }
    }
    if report.dry_run {
        for c in &report.changes {
            print!("{}", c.diff);
        }
        if !report.changes.is_empty() {
            println!(
                "dry run: {} file(s) would change; nothing was written",
                report.changes.len()
            );
        }
    } else {
        for c in &report.changes {
            println!("{:<6} {}", c.action, c.path.display());
        }
        if report.changes.is_empty() {
            println!("CDI specs are up to date; nothing changed");
        }
    }
}

/// Writes `text` to stdout; a reader that went away (`| head`) is not an error.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Says that dockerd was told to reload.
fn print_reloaded() {
    println!("reloaded dockerd (SIGHUP)");
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::Success);
    match cli.command {
        Command::Runtime(RuntimeCommand::Configure(args)) => done(runtime_configure::run(&args)),
        Command::Runtime(RuntimeCommand::Unconfigure(args)) => {
            done(runtime_unconfigure::run(&args))
        }
        Command::Cdi(CdiCommand::Generate(args)) => done(cdi_generate::run(&args)),
        Command::Devices(DevicesCommand::List(args)) => done(devices_list::run(&args)),
        Command::Doctor(args) => doctor::run(&args),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // A watcher is a daemon: what it refreshes is worth a line in its log.
    let level = match &cli.command {
        Command::Cdi(CdiCommand::Generate(args)) if args.watching() => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DEVINJECT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .init();
    match run(cli) {
        Ok(code) => code.into(),
        Err(err) => {
            eprintln!("devinject-ctl: {err:#}");
            ExitCode::of(&err).into()
        }
    }
}
