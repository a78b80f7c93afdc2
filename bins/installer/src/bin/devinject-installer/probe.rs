//! `devinject-installer probe`: the device plugin container's liveness and readiness check.

use std::path::PathBuf;

use clap::Args;

use crate::exit_code::ExitCode;

/// Options of `probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The kubelet's device-plugins directory, where the plugin's sockets are.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/lib/kubelet/device-plugins"
    )]
    kubelet_dir: PathBuf,
}

/// Passes when a `devinject-*.sock` in the directory accepts a connection.
pub fn run(args: &ProbeArgs) -> ExitCode {
    match devinject_installer::probe::live_sockets(&args.kubelet_dir) {
        Ok(live) if !live.is_empty() => {
            for s in live {
                println!("serving: {}", s.display());
            }
            ExitCode::Success
        }
        Ok(_) => {
            eprintln!(
                "devinject-installer probe: no devinject-*.sock in {} accepts connections; \
                 the device plugin is not serving (see its log)",
                args.kubelet_dir.display()
            );
            ExitCode::ProbeFailed
        }
        Err(e) => {
            eprintln!(
                "devinject-installer probe: cannot list {}: {e}",
                args.kubelet_dir.display()
            );
            ExitCode::ProbeFailed
        }
    }
}
