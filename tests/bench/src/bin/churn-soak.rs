//! `churn-soak`: the churn of `tests/tests/cluster/cluster_churn.rs` run long, as scripts/bench.sh
//! `churn` runs it ([`devinject_tests::churn`]: three nodes, the shim, NRI and CDI on CRI-O, pods started and
//! deleted continuously under scheduled faults). Prints the report (starts, faults of each
//! kind, violations, the daemons' first and last readings, the end-of-run metrics scrapes) and
//! writes it to `--report`; exits 1 on any invariant violation.
//!
//! Binaries come from `DEVINJECT_BIN_DIR` (scripts/bench.sh points it at the release build).
//! Needs root and what the cluster tier needs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use devinject_tests::churn::{ready, run, Settings};

/// The soak's settings.
#[derive(Debug, Parser)]
#[command(about = "Pods churned through faults on a real three-node cluster")]
struct Args {
    /// Pod starts to reach.
    #[arg(long, default_value_t = 1000)]
    starts: usize,
    /// The seed of the pod mix (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Where to write the report as well.
    #[arg(long)]
    report: Option<PathBuf>,
}

fn main() -> ExitCode {
    match soak(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("churn-soak: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the soak; whether it found no violation.
fn soak(args: Args) -> Result<bool> {
    let peers = ready().context("this machine cannot run the cluster tier with CRI-O")?;
    let mut settings = Settings::new(args.starts);
    if let Some(seed) = args.seed {
        settings.seed = seed;
    }
    let outcome = run(&settings, &peers)?;
    let report = outcome.report();
    println!("{report}");
    if let Some(path) = &args.report {
        std::fs::write(path, &report).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(outcome.violations.is_empty())
}
