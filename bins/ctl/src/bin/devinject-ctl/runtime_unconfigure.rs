//! `devinject-ctl runtime unconfigure`.

use std::path::PathBuf;

use clap::Args;
use devinject_engine_config::request::{DEFAULT_HOOK_PATH, DEFAULT_RUNTIME_NAME};
use devinject_engine_config::{unconfigure, Engine, UnconfigureRequest};

use crate::runtime_configure::{check_reload, finish};
use crate::Common;

/// Arguments of `runtime unconfigure`.
#[derive(Debug, Args)]
pub struct UnconfigureArgs {
    #[command(flatten)]
    common: Common,
    /// Name of the runtime entry; only used when no record of the configure is left.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_RUNTIME_NAME)]
    runtime_name: String,
    /// Host path of devinject-hook; only used when no record of the configure is left.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_HOOK_PATH)]
    hook_path: PathBuf,
}

/// Runs the subcommand and prints its report.
pub fn run(args: &UnconfigureArgs) -> anyhow::Result<()> {
    let engine = Engine::from(args.common.runtime);
    check_reload(&args.common, engine)?;
    let mut req = UnconfigureRequest::new(engine);
    req.dry_run = args.common.dry_run;
    req.paths = args.common.paths()?;
    req.runtime_name = args.runtime_name.clone();
    req.hook_path = args.hook_path.clone();
    let report = unconfigure(&req)?;
    finish(&args.common, engine, &report, &req.paths)
}
