//! `devinject-hook`: the OCI prestart / createRuntime hook.
//!
//! Usage: `devinject-hook [--config FILE]`, with the OCI state on stdin. Exit codes are
//! documented in `devinject_hook::exit::ExitCode` and docs/hook.md.

use std::path::PathBuf;
use std::process::ExitCode as ProcessExit;

use devinject_hook::config::HostConfig;
use devinject_hook::exit::ExitCode;

fn usage() -> ProcessExit {
    eprintln!("usage: devinject-hook [--config FILE]   (OCI state on stdin)");
    ProcessExit::from(ExitCode::Usage.code())
}

fn main() -> ProcessExit {
    // Argument parsing by hand keeps the hook small and fast to start (it runs per container).
    let mut args = std::env::args_os().skip(1);
    let mut config_path: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--config") => match args.next() {
                Some(p) => config_path = Some(PathBuf::from(p)),
                None => return usage(),
            },
            Some("--version") => {
                println!("devinject-hook {}", env!("CARGO_PKG_VERSION"));
                return ProcessExit::SUCCESS;
            }
            _ => return usage(),
        }
    }
    let config = match HostConfig::load(config_path.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("devinject: {e}");
            return ProcessExit::from(ExitCode::Config.code());
        }
    };
    init_logging(&config.log_level);
    match devinject_hook::run::run(&config, std::io::stdin().lock()) {
        Ok(_) => ProcessExit::SUCCESS,
        Err(e) => {
            let mut msg = format!("devinject: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                let s_text = s.to_string();
                if !msg.contains(&s_text) {
                    msg.push_str(&format!(": {s_text}"));
                }
                src = s.source();
            }
            eprintln!("{msg}");
            ProcessExit::from(e.exit_code().code())
        }
    }
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A plain writer on stderr: no background thread (the hook forks and joins namespaces).
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .init();
}
