//! `devinject-ctl doctor`.

use std::path::PathBuf;

use clap::Args;
use devinject_ctl::doctor::{self, text, DoctorRequest};

use crate::exit_code::ExitCode;

/// Arguments of `doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Directory where the host's / is reachable (e.g. /host in an installer container); every
    /// path is read below it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// The host configuration the hook and shim use (default: /etc/devinject/config.toml, which
    /// may be absent).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The kubelet's root directory.
    #[arg(long, value_name = "DIR", default_value = doctor::DEFAULT_KUBELET_DIR)]
    kubelet_dir: PathBuf,
    /// A directory holding CDI specs, checked for stale specs of ours (repeat for several).
    #[arg(long = "cdi-dir", value_name = "DIR", default_values = doctor::cdi_specs::DEFAULT_CDI_DIRS)]
    cdi_dirs: Vec<PathBuf>,
    /// How many of the last refused container starts to list, from the node's decision log
    /// (`decision_log_dir`); 0 for none.
    #[arg(long, value_name = "N", default_value_t = doctor::refusals::DEFAULT_COUNT)]
    refusals: usize,
    /// A host user (name or uid, then optionally :GID): say which devices it can open with no
    /// devinject step at start (rootless podman run by it, or a user namespace whose root it
    /// is: docker's userns-remap maps root to the first subordinate uid and gid, given as
    /// UID:GID), and why.
    #[arg(long, value_name = "USER[:GID]")]
    user: Option<String>,
    /// Print the findings as JSON.
    #[arg(long)]
    json: bool,
    /// Exit non-zero on warnings too.
    #[arg(long)]
    strict: bool,
}

/// Runs the checks and prints the report; [`ExitCode::Broken`] when an error (or, with
/// `--strict`, a warning) was found.
pub fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let root = if args.root.is_absolute() {
        args.root.clone()
    } else {
        std::env::current_dir()?.join(&args.root)
    };
    let req = DoctorRequest {
        root,
        host_config: args.config.clone(),
        kubelet_dir: args.kubelet_dir.clone(),
        cdi_dirs: args.cdi_dirs.clone(),
        refusals: args.refusals,
        user: args.user.clone(),
        ..DoctorRequest::default()
    };
    let report = doctor::run(&req);
    let broken = report.is_broken(args.strict);
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["errors"] = report.count(doctor::Severity::Error).into();
        v["warnings"] = report.count(doctor::Severity::Warning).into();
        v["broken"] = broken.into();
        crate::write_stdout(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
    } else {
        crate::write_stdout(&text::render(&report, args.strict))?;
    }
    Ok(if broken {
        ExitCode::Broken
    } else {
        ExitCode::Success
    })
}
