//! `devinject-ctl runtime configure`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use devinject_engine_config::request::{
    DEFAULT_HOOK_PATH, DEFAULT_RUNTIME_NAME, DEFAULT_SHIM_PATH,
};
use devinject_engine_config::{configure, reload, ChangeReport, ConfigureRequest, Engine, Mode};

use crate::Common;

/// How devinject is plugged in.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// A runtime entry running devinject-runtime (default; podman: hook).
    Shim,
    /// An OCI createRuntime hook running devinject-hook.
    Hook,
}

/// Arguments of `runtime configure`.
#[derive(Debug, Args)]
pub struct ConfigureArgs {
    #[command(flatten)]
    common: Common,
    /// shim: a devinject runtime entry; hook: a createRuntime hook (default: shim, podman: hook).
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Make devinject the engine's default runtime (unconfigure restores the old default).
    #[arg(long)]
    set_as_default: bool,
    /// Host path of devinject-runtime.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SHIM_PATH)]
    shim_path: PathBuf,
    /// Host path of devinject-hook.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_HOOK_PATH)]
    hook_path: PathBuf,
    /// Hook mode: host configuration file the hook reads (default: /etc/devinject/config.toml).
    #[arg(long, value_name = "PATH")]
    hook_config: Option<PathBuf>,
    /// Name of the runtime entry (RuntimeClass handler).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_RUNTIME_NAME)]
    runtime_name: String,
    /// containerd hook mode: OCI spec to build the base spec from (default: the runtime's own
    /// base_runtime_spec, else `ctr oci spec`).
    #[arg(long, value_name = "PATH")]
    base_spec: Option<PathBuf>,
    /// containerd hook mode: the ctr binary.
    #[arg(long, value_name = "PATH", default_value = "ctr")]
    ctr: PathBuf,
}

/// Runs the subcommand and prints its report.
pub fn run(args: &ConfigureArgs) -> anyhow::Result<()> {
    let engine = Engine::from(args.common.runtime);
    check_reload(&args.common, engine)?;
    let mut req = ConfigureRequest::new(engine);
    req.mode = args.mode.map(|m| match m {
        ModeArg::Shim => Mode::Shim,
        ModeArg::Hook => Mode::Hook,
    });
    req.set_as_default = args.set_as_default;
    req.dry_run = args.common.dry_run;
    req.paths = args.common.paths()?;
    req.shim_path = args.shim_path.clone();
    req.hook_path = args.hook_path.clone();
    req.hook_config = args.hook_config.clone();
    req.runtime_name = args.runtime_name.clone();
    req.base_spec = args.base_spec.clone();
    req.ctr_path = args.ctr.clone();
    let report = configure(&req)?;
    finish(&args.common, engine, &report, &req.paths)
}

/// Refuses `--reload` for engines that cannot reload, before anything is written.
pub fn check_reload(common: &Common, engine: Engine) -> anyhow::Result<()> {
    if common.reload && engine != Engine::Docker {
        return Err(
            devinject_engine_config::RuntimeConfigError::InvalidRequest(format!(
                "--reload only applies to docker; {engine} needs a restart, which is left to you"
            ))
            .into(),
        );
    }
    Ok(())
}

/// Prints the report, then sends SIGHUP to dockerd when asked and something changed.
pub fn finish(
    common: &Common,
    engine: Engine,
    report: &ChangeReport,
    paths: &devinject_engine_config::HostPaths,
) -> anyhow::Result<()> {
    let reload = common.reload && !report.dry_run && report.changed();
    crate::print_report(report, reload);
    if reload {
        check_reload(common, engine)?;
        reload::reload_dockerd(&paths.access(&common.docker_pidfile))?;
        crate::print_reloaded();
    }
    Ok(())
}
