//! The host-root flags of every binary that discovers devices (`devinject-ctl cdi generate` and
//! `devices list`, the device plugin, the DRA driver): one definition, flattened into each
//! command line, so that the names, defaults and help agree. Host roots are parameters, never
//! constants: in a DaemonSet pod the host's `/dev` or `/sys` may be mounted elsewhere, and tests
//! build their own trees.

use std::path::PathBuf;

use devinject_devices::roots::{self, HostRoots};

/// `--dev-root`, `--sys-root`, `--proc-root`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DeviceRootArgs {
    /// Where the host's device nodes are.
    #[arg(long, value_name = "DIR", default_value = roots::DEV_ROOT)]
    pub dev_root: PathBuf,
    /// Where sysfs is.
    #[arg(long, value_name = "DIR", default_value = roots::SYS_ROOT)]
    pub sys_root: PathBuf,
    /// Where procfs is (a profile's `discovery.aliases` files).
    #[arg(long, value_name = "DIR", default_value = roots::PROC_ROOT)]
    pub proc_root: PathBuf,
}

/// `--driver-root`, for the binaries that mount a driver's files.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DriverRootArg {
    /// Where the driver's libraries and files are (e.g. /run/nvidia/driver).
    #[arg(long, value_name = "DIR", default_value = roots::DRIVER_ROOT)]
    pub driver_root: PathBuf,
}

impl DeviceRootArgs {
    /// These roots, the driver's files at the default root.
    pub fn host_roots(&self) -> HostRoots {
        HostRoots {
            dev_root: self.dev_root.clone(),
            sys_root: self.sys_root.clone(),
            proc_root: self.proc_root.clone(),
            ..HostRoots::default()
        }
    }

    /// These roots with the driver's files below `driver`.
    pub fn with_driver_root(&self, driver: &DriverRootArg) -> HostRoots {
        HostRoots {
            driver_root: driver.driver_root.clone(),
            ..self.host_roots()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        roots: DeviceRootArgs,
        #[command(flatten)]
        driver: DriverRootArg,
    }

    #[test]
    fn the_flags_default_to_the_hosts_own_roots() {
        let cli = Cli::try_parse_from(["x"]).expect("no flags");
        assert_eq!(
            cli.roots.with_driver_root(&cli.driver),
            HostRoots::default()
        );
        assert_eq!(cli.roots.host_roots(), HostRoots::default());
    }

    #[test]
    fn each_flag_sets_its_root() {
        let cli = Cli::try_parse_from([
            "x",
            "--dev-root=/h/dev",
            "--sys-root=/h/sys",
            "--proc-root=/h/proc",
            "--driver-root=/run/nvidia/driver",
        ])
        .expect("flags");
        assert_eq!(
            cli.roots.with_driver_root(&cli.driver),
            HostRoots {
                dev_root: "/h/dev".into(),
                sys_root: "/h/sys".into(),
                proc_root: "/h/proc".into(),
                driver_root: "/run/nvidia/driver".into(),
            }
        );
        assert_eq!(cli.roots.host_roots().driver_root, PathBuf::from("/"));
    }
}
