//! `devinject-runtime`: the OCI runtime shim.
//!
//! Usage: `devinject-runtime [--config FILE] [--runtime PATH] <runc arguments...>`. On `create`
//! and `run` it writes the container's devices into the bundle's `config.json`, then execs the
//! real runtime with the arguments unchanged. Exit codes: docs/hook.md.

use std::process::ExitCode as ProcessExit;

use devinject_hook::config::HostConfig;
use devinject_hook::exit::{describe, ExitCode};
use devinject_hook::shim::{self, args::ShimArgs, runtime_log};

fn main() -> ProcessExit {
    let args = match ShimArgs::parse(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("devinject-runtime: {e}\nusage: devinject-runtime [--config FILE] [--runtime PATH] <runtime arguments...>");
            return ProcessExit::from(ExitCode::Usage.code());
        }
    };
    let config = match HostConfig::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            runtime_log::report(&args, &format!("devinject: {e}"));
            return ProcessExit::from(ExitCode::Config.code());
        }
    };
    devinject_hook::logging::init(&config.log_level);
    let err = shim::run(&args, &config);
    runtime_log::report(&args, &format!("devinject: {}", describe(&err)));
    ProcessExit::from(err.exit_code().code())
}
