//! `devinject-ctl devices list`.

use std::path::PathBuf;

use clap::Args;
use devinject_cdi::DEFAULT_PROFILES_DIR;
use devinject_ctl::device_list::{self, DeviceListError, DeviceListRequest};
use devinject_discovery::root_args::DeviceRootArgs;

/// Arguments of `devices list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Device profiles.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_PROFILES_DIR)]
    profiles_dir: PathBuf,
    #[command(flatten)]
    roots: DeviceRootArgs,
    /// Directory where the host's / is reachable; paths are read below it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
}

/// Lists the devices; fails (after printing) when a profile's discovery failed.
pub fn run(args: &ListArgs) -> anyhow::Result<()> {
    let root = if args.root.is_absolute() {
        args.root.clone()
    } else {
        std::env::current_dir()?.join(&args.root)
    };
    let req = DeviceListRequest {
        root,
        profiles_dir: args.profiles_dir.clone(),
        roots: args.roots.host_roots(),
    };
    let list = device_list::list(&req)?;
    if args.json {
        crate::write_stdout(&format!("{}\n", serde_json::to_string_pretty(&list)?))?;
    } else {
        crate::write_stdout(&device_list::render_table(&list))?;
    }
    match list.failed() {
        0 => Ok(()),
        n => Err(DeviceListError {
            message: format!("discovery failed for {n} profile(s); see above"),
        }
        .into()),
    }
}
