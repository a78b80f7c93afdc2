//! `devinject-hook`: the OCI prestart / createRuntime hook.
//!
//! Usage, with the OCI state on stdin:
//! - `devinject-hook [--config FILE]`: inject what the container asked for (hook-only mode);
//! - `devinject-hook [--config FILE] finish [--mount HOST CONTAINER]... [--library HOST CONTAINER]... [--link PATH=TARGET]...
//!   [--ldcache-dir DIR]... [--group-node PATH]... [--node HOST 'c|b MAJOR:MINOR']...`: the step the runtime shim (and the NRI
//!   plugin) wire in for files, soname links, the linker cache, group-only nodes and the nodes of a
//!   container with a user namespace.
//!
//! Exit codes are documented in `devinject_exit::ExitCode` and docs/hook.md.

use std::path::PathBuf;
use std::process::ExitCode as ProcessExit;

use devinject_decision_log::EnginePath;
use devinject_exit::{describe, ExitCode};
use devinject_hostconfig::HostConfig;
use devinject_oci::finish::FinishArgs;
use devinject_oci::refusal::{self, Seen};

const USAGE: &str = "usage: devinject-hook [--config FILE] [finish [--mount HOST CONTAINER]... [--library HOST CONTAINER]... [--mounted-library HOST CONTAINER]... [--link PATH=TARGET]... [--ldcache-dir DIR]... [--group-node PATH]... [--node HOST 'c|b MAJOR:MINOR']... [--forward-compat DIR LIBRARY HOST_MAJOR]]   (OCI state on stdin)";

fn exit(code: ExitCode) -> ProcessExit {
    ProcessExit::from(code.code())
}

fn main() -> ProcessExit {
    // Parsed by hand: the hook runs for every container and must start fast and small.
    let args: Vec<String> = match std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect()
    {
        Ok(a) => a,
        Err(_) => {
            eprintln!("devinject: arguments must be UTF-8\n{USAGE}");
            return exit(ExitCode::Usage);
        }
    };
    let mut config_path: Option<PathBuf> = None;
    let mut rest = args.as_slice();
    loop {
        match rest {
            [flag, value, tail @ ..] if flag == "--config" => {
                config_path = Some(PathBuf::from(value));
                rest = tail;
            }
            [flag] if flag == "--version" => {
                println!("devinject-hook {}", env!("CARGO_PKG_VERSION"));
                return ProcessExit::SUCCESS;
            }
            _ => break,
        }
    }
    let finish = match rest {
        [] => None,
        [cmd, tail @ ..] if cmd == "finish" => match FinishArgs::parse(tail) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("devinject: {e}\n{USAGE}");
                return exit(ExitCode::Usage);
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return exit(ExitCode::Usage);
        }
    };
    let config = match HostConfig::load(config_path.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("devinject: {e}");
            return exit(ExitCode::Config);
        }
    };
    devinject_oci::logging::init(&config.log_level);
    let stdin = std::io::stdin().lock();
    let mut seen = Seen::default();
    let result = match &finish {
        Some(f) => devinject_oci::finish::finish(&config, f, stdin, &mut seen).map(drop),
        None => devinject_oci::run::run(&config, stdin, &mut seen).map(drop),
    };
    match result {
        Ok(()) => ProcessExit::SUCCESS,
        Err(e) => {
            let message = describe(&e);
            eprintln!("devinject: {message}");
            // After the message, which the runtime shows whatever the log does.
            refusal::record(&config, EnginePath::Hook, seen, e.exit_code(), &message);
            exit(e.exit_code())
        }
    }
}
