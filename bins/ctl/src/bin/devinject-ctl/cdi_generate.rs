//! `devinject-ctl cdi generate [--watch]`.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use devinject_cdi::watch::{self as cdi_watch, WatchOptions};
use devinject_cdi::{self as cdi, CdiRequest};
use devinject_discovery::root_args::{DeviceRootArgs, DriverRootArg};
use devinject_engine_config::request::DEFAULT_HOOK_PATH;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// Arguments of `cdi generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Directory the specs are written to.
    #[arg(long, value_name = "DIR", default_value = cdi::DEFAULT_OUTPUT_DIR)]
    output: PathBuf,
    /// Device profiles.
    #[arg(long, value_name = "DIR", default_value = cdi::DEFAULT_PROFILES_DIR)]
    profiles_dir: PathBuf,
    #[command(flatten)]
    roots: DeviceRootArgs,
    #[command(flatten)]
    driver_root: DriverRootArg,
    /// Host path of devinject-hook (runs the soname-link and linker-cache step).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_HOOK_PATH)]
    hook_path: PathBuf,
    /// Configuration file passed to devinject-hook, when not its default.
    #[arg(long, value_name = "PATH")]
    hook_config: Option<PathBuf>,
    /// Directory libraries are mounted into in containers.
    #[arg(long, value_name = "DIR", default_value = "/usr/lib")]
    lib_dir: PathBuf,
    /// Directory where the host's / is reachable; paths are read below it and written without it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// The newest CDI version the engine reads, when older than what a spec would use:
    /// `additionalGids` (0.7.0) is then left out, and said so. Debian 12's podman 4.3 reads 0.5.0.
    #[arg(long, value_name = "VERSION")]
    cdi_version: Option<cdi::CdiVersion>,
    /// Give each device's nodes to a container with a user namespace as copies it owns, with a
    /// `devinject-hook finish --node` entry per device: one more hook process per start, also
    /// where there is no user namespace (where it leaves the nodes to the runtime).
    #[arg(long)]
    user_namespaces: bool,
    /// Show the changes as a unified diff and write nothing.
    #[arg(long, conflicts_with = "watch")]
    dry_run: bool,
    /// Keep running: refresh the specs whenever a device node appears or goes, a profile or a
    /// driver file changes (inotify), until SIGTERM or SIGINT.
    #[arg(long)]
    watch: bool,
    /// With --watch: how long a burst of changes must pause before the specs are refreshed.
    #[arg(long, value_name = "MS", default_value_t = 100, requires = "watch")]
    debounce_ms: u64,
}

impl GenerateArgs {
    /// Whether the command keeps running.
    pub fn watching(&self) -> bool {
        self.watch
    }
}

/// Runs the subcommand and prints its report.
pub fn run(args: &GenerateArgs) -> anyhow::Result<()> {
    let req = CdiRequest {
        root: args.root.clone(),
        profiles_dir: args.profiles_dir.clone(),
        roots: args.roots.with_driver_root(&args.driver_root),
        output_dir: args.output.clone(),
        hook_path: args.hook_path.clone(),
        hook_config: args.hook_config.clone(),
        lib_dir: args.lib_dir.clone(),
        newest_version: args.cdi_version,
        user_namespaces: args.user_namespaces,
        dry_run: args.dry_run,
    };
    if !args.watch {
        let report = cdi::generate(&req)?;
        crate::print_cdi_report(&report);
        return Ok(());
    }
    let stop = termination_signals()?;
    let opts = WatchOptions {
        debounce: Duration::from_millis(args.debounce_ms),
    };
    cdi_watch::watch(&req, &opts, stop.as_fd(), &mut crate::print_cdi_report)?;
    Ok(())
}

/// SIGTERM and SIGINT as a descriptor that becomes readable when one arrives: blocked first, so
/// that they wait there instead of killing the process halfway through a write. Called before
/// any thread exists, so the mask holds for the whole process.
fn termination_signals() -> anyhow::Result<SignalFd> {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals.thread_block()?;
    Ok(SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC)?)
}
