//! `devinject-runtime`: the OCI runtime shim.
//!
//! Usage: `devinject-runtime [--config FILE] [--runtime PATH] <runc arguments...>`. On `create`
//! and `run` it writes the container's devices into the bundle's `config.json`, then execs the
//! real runtime with the arguments unchanged. Exit codes: docs/hook.md.
//!
//! Without `--config`, the configuration is `$DEVINJECT_CONFIG`, else the default path: an
//! engine whose runtime entry takes no arguments (containerd's `BinaryName`) passes a
//! configuration elsewhere through its own environment, which the runtime shim inherits. (Only
//! the engine's environment reaches here; a container's is in its `config.json`.)

use std::path::PathBuf;
use std::process::ExitCode as ProcessExit;

use devinject_decision_log::EnginePath;
use devinject_exit::{describe, ExitCode};
use devinject_hostconfig::HostConfig;
use devinject_oci::refusal::{self, Seen};
use devinject_oci::shim::{self, args::ShimArgs, runtime_log, CONFIG_ENV};

fn main() -> ProcessExit {
    let mut args = match ShimArgs::parse(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("devinject-runtime: {e}\nusage: devinject-runtime [--config FILE] [--runtime PATH] <runtime arguments...>");
            return ProcessExit::from(ExitCode::Usage.code());
        }
    };
    if args.config.is_none() {
        args.config = std::env::var_os(CONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
    }
    let config = match HostConfig::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            runtime_log::report(&args, &format!("devinject: {e}"));
            return ProcessExit::from(ExitCode::Config.code());
        }
    };
    devinject_oci::logging::init(&config.log_level);
    let mut seen = Seen {
        container: args.container_id.clone().unwrap_or_default(),
        ..Seen::default()
    };
    let err = shim::run(&args, &config, &mut seen);
    let message = describe(&err);
    runtime_log::report(&args, &format!("devinject: {message}"));
    // A failed create or run kept a container from starting; any other command is runc's own.
    if args.edits_bundle() {
        refusal::record(&config, EnginePath::Shim, seen, err.exit_code(), &message);
    }
    ProcessExit::from(err.exit_code().code())
}
