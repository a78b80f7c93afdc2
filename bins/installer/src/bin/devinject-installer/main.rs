//! `devinject-installer`: installs devinject on a node (hook, shim, devinject-podresources,
//! devinject-ctl, profiles, host config, engine configuration) from a DaemonSet init container,
//! or uninstalls it.
//!
//! Usage:
//! - `devinject-installer --host-root /host [options]`: install;
//! - `devinject-installer --host-root /host --uninstall`: uninstall;
//! - `devinject-installer probe`: the device plugin's liveness/readiness probe;
//! - `devinject-installer idle`: wait until stopped (the uninstall DaemonSet's main container).
//!
//! Exit codes: see [`exit_code::ExitCode`] and docs/install.md.

mod exit_code;
mod idle;
mod install;
mod probe;
mod uninstall;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use devinject_engine_config::Engine;
use devinject_installer::activate::System;
use devinject_installer::fault::Fault;
use devinject_installer::options::{DEFAULT_CONFIG_DIR, DEFAULT_PREFIX};
use devinject_installer::{EngineChoice, Layout, RestartMode};

use exit_code::ExitCode;

/// Environment variable naming a fault to inject (`<step>:<n>[:abort]`); for tests.
const FAULT_ENV: &str = "DEVINJECT_INSTALLER_FAULT";

/// Install devinject on this node (binaries, profiles, host config, container engine
/// configuration), or uninstall it.
#[derive(Debug, Parser)]
#[command(
    name = "devinject-installer",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Uninstall instead of installing.
    #[arg(long)]
    uninstall: bool,
    #[command(flatten)]
    host: HostArgs,
    #[command(flatten)]
    install: install::InstallArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check that the device plugin serves (liveness/readiness probe).
    Probe(probe::ProbeArgs),
    /// Wait until stopped (SIGTERM): the uninstall DaemonSet's main container, from this image.
    Idle,
}

/// The engine(s) to configure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RuntimeArg {
    /// The one the node runs (see docs/install.md for the detection order).
    Auto,
    /// Install the files only; configure no engine.
    None,
    Containerd,
    Crio,
    Docker,
    Podman,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RestartArg {
    /// systemctl restart/reload in the host's namespaces (needs hostPID and privileges).
    Systemd,
    /// SIGHUP to dockerd; SIGTERM to containerd, restarted by its unit.
    Signal,
    /// Only report that a restart or reload is needed.
    None,
}

/// Options shared by install and uninstall.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// Where the host's / is mounted (every path below is a host path under it).
    #[arg(
        long,
        value_name = "DIR",
        env = "DEVINJECT_HOST_ROOT",
        default_value = "/"
    )]
    host_root: PathBuf,
    /// The host's /proc as seen here (hostPID: true makes it /proc).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    proc_root: PathBuf,
    /// Install prefix on the host.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_PREFIX)]
    prefix: PathBuf,
    /// Directory of the hook's config.toml and profiles on the host.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CONFIG_DIR)]
    config_dir: PathBuf,
    /// Engines to configure: auto, none, or a comma-separated list.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    runtime: Vec<RuntimeArg>,
    /// The engine's main configuration file on the host, instead of its usual one.
    #[arg(long, value_name = "PATH")]
    runtime_config: Option<PathBuf>,
    /// The engine's API socket on the host, instead of its usual one (for --restart-mode signal).
    #[arg(long, value_name = "PATH")]
    runtime_socket: Option<PathBuf>,
    /// The runtime entry / CRI-O handler name (the RuntimeClass handler).
    #[arg(long, value_name = "NAME", default_value = devinject_engine_config::request::DEFAULT_RUNTIME_NAME)]
    runtime_name: String,
    /// How to make a configuration change take effect.
    #[arg(long, value_enum, default_value = "systemd")]
    restart_mode: RestartArg,
    /// The systemd unit to restart, instead of the engine's usual one.
    #[arg(long, value_name = "UNIT")]
    restart_unit: Option<String>,
    /// dockerd's pid file on the host, for --restart-mode signal.
    #[arg(long, value_name = "PATH")]
    docker_pidfile: Option<PathBuf>,
    /// Show what would change; write nothing.
    #[arg(long)]
    dry_run: bool,
}

impl HostArgs {
    fn layout(&self) -> anyhow::Result<Layout> {
        let mut l = Layout::new(absolute(&self.host_root)?);
        l.proc_root = absolute(&self.proc_root)?;
        l.prefix = self.prefix.clone();
        l.config_dir = self.config_dir.clone();
        l.engine_config = self.runtime_config.clone();
        l.engine_socket = self.runtime_socket.clone();
        l.docker_pidfile = self.docker_pidfile.clone();
        l.restart_unit = self.restart_unit.clone();
        Ok(l)
    }

    fn engines(&self) -> anyhow::Result<EngineChoice> {
        let special = |r: &RuntimeArg| matches!(r, RuntimeArg::Auto | RuntimeArg::None);
        if self.runtime.iter().any(special) {
            anyhow::ensure!(
                self.runtime.len() == 1,
                "--runtime auto or none cannot be combined with other values"
            );
            return Ok(match self.runtime[0] {
                RuntimeArg::None => EngineChoice::Skip,
                _ => EngineChoice::Auto,
            });
        }
        let mut list = Vec::new();
        for r in &self.runtime {
            let e = match r {
                RuntimeArg::Containerd => Engine::Containerd,
                RuntimeArg::Crio => Engine::Crio,
                RuntimeArg::Docker => Engine::Docker,
                RuntimeArg::Podman => Engine::Podman,
                RuntimeArg::Auto | RuntimeArg::None => unreachable!("handled above"),
            };
            if !list.contains(&e) {
                list.push(e);
            }
        }
        Ok(EngineChoice::These(list))
    }

    fn restart_mode(&self) -> RestartMode {
        match self.restart_mode {
            RestartArg::Systemd => RestartMode::Systemd,
            RestartArg::Signal => RestartMode::Signal,
            RestartArg::None => RestartMode::None,
        }
    }

    fn fault(&self) -> anyhow::Result<Option<Fault>> {
        match std::env::var(FAULT_ENV) {
            Ok(v) if !v.is_empty() => Ok(Some(Fault::parse(&v)?)),
            _ => Ok(None),
        }
    }
}

fn absolute(p: &PathBuf) -> anyhow::Result<PathBuf> {
    Ok(if p.is_absolute() {
        p.clone()
    } else {
        std::env::current_dir()?.join(p)
    })
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DEVINJECT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .init();
    run(cli).into_process()
}

fn run(cli: Cli) -> ExitCode {
    match &cli.command {
        Some(Command::Probe(args)) => return probe::run(args),
        Some(Command::Idle) => return idle::run(),
        None => {}
    }
    let mut ctl = System {
        proc_root: cli.host.proc_root.clone(),
    };
    let result = if cli.uninstall {
        match uninstall::options(&cli.host) {
            Ok(o) => devinject_installer::uninstall(&o, &mut ctl),
            Err(e) => return usage(e),
        }
    } else {
        match cli.install.options(&cli.host) {
            Ok(o) => devinject_installer::install(&o, &mut ctl),
            Err(e) => return usage(e),
        }
    };
    match result {
        Ok(report) => {
            print!("{report}");
            ExitCode::Success
        }
        Err(failure) => {
            print!("{}", failure.report);
            eprint!("devinject-installer: {failure}");
            ExitCode::for_error(&failure.error)
        }
    }
}

fn usage(e: anyhow::Error) -> ExitCode {
    eprintln!("devinject-installer: {e:#}");
    ExitCode::Usage
}
