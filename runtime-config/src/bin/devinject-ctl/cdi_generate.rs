//! `devinject-ctl cdi generate`.

use std::path::PathBuf;

use clap::Args;
use devinject_devices::HostRoots;
use devinject_runtime_config::cdi::{self, CdiRequest};
use devinject_runtime_config::request::DEFAULT_HOOK_PATH;

/// Arguments of `cdi generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Directory the specs are written to.
    #[arg(long, value_name = "DIR", default_value = cdi::DEFAULT_OUTPUT_DIR)]
    output: PathBuf,
    /// Device profiles.
    #[arg(long, value_name = "DIR", default_value = cdi::DEFAULT_PROFILES_DIR)]
    profiles_dir: PathBuf,
    /// Where the host's device nodes are.
    #[arg(long, value_name = "DIR", default_value = "/dev")]
    dev_root: PathBuf,
    /// Where sysfs is.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sys_root: PathBuf,
    /// Where the driver's libraries and files are (e.g. /run/nvidia/driver).
    #[arg(long, value_name = "DIR", default_value = "/")]
    driver_root: PathBuf,
    /// Host path of devinject-hook (runs the soname-link and linker-cache step).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_HOOK_PATH)]
    hook_path: PathBuf,
    /// Configuration file passed to devinject-hook, when not its default.
    #[arg(long, value_name = "PATH")]
    hook_config: Option<PathBuf>,
    /// Directory libraries are mounted into in containers.
    #[arg(long, value_name = "DIR", default_value = "/usr/lib")]
    lib_dir: PathBuf,
    /// Directory where the host's / is reachable; paths are read below it and written without it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// Show the changes as a unified diff and write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Runs the subcommand and prints its report.
pub fn run(args: &GenerateArgs) -> anyhow::Result<()> {
    let req = CdiRequest {
        root: args.root.clone(),
        profiles_dir: args.profiles_dir.clone(),
        roots: HostRoots {
            dev_root: args.dev_root.clone(),
            sys_root: args.sys_root.clone(),
            driver_root: args.driver_root.clone(),
        },
        output_dir: args.output.clone(),
        hook_path: args.hook_path.clone(),
        hook_config: args.hook_config.clone(),
        lib_dir: args.lib_dir.clone(),
        dry_run: args.dry_run,
    };
    let report = cdi::generate(&req)?;
    crate::print_cdi_report(&report);
    Ok(())
}
