//! `devinject-demo`: a real runc container asks for two simulated `demo` accelerators and
//! reports what it sees ([`devinject_harness::demo`]). Run through `scripts/demo.sh`, which
//! installs runc and busybox first.
//!
//! Exits non-zero when what the container sees is not what devinject promises.

use std::process::ExitCode;

use anyhow::{Context, Result};
use devinject_harness::demo::{self, Applier};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("devinject-demo: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool> {
    // runc runs hooks from the bundle directory: the hook path must be absolute.
    let hook = match std::env::args().nth(1) {
        Some(p) => std::fs::canonicalize(&p).with_context(|| format!("hook binary {p}"))?,
        None => std::env::current_exe()?.with_file_name("devinject-hook"),
    };
    demo::run(Applier::Hook(&hook))
}
