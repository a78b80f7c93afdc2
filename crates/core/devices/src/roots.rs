//! The host roots every lookup is made under, so tests and installers can point elsewhere.
//!
//! Plain data, four paths and how a profile's paths join under them, so it lives with the
//! profiles rather than with the code that reads below it: the host configuration (a core crate)
//! builds it from its settings and the health schedule names attributes under it, neither of
//! which may link the host crates. The devinject-discovery crate reads the host under it.

use std::path::{Path, PathBuf};

/// Where the host's device nodes, sysfs and driver files live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoots {
    /// Device nodes (`/dev`). Node globs are relative to it; a node's container path is its path
    /// relative to this root, under `/dev`.
    pub dev_root: PathBuf,
    /// sysfs (`/sys`).
    pub sys_root: PathBuf,
    /// procfs (`/proc`), where some drivers describe their devices.
    pub proc_root: PathBuf,
    /// Where driver libraries, binaries and files are (`/`, or e.g. `/run/nvidia/driver`).
    pub driver_root: PathBuf,
}

/// The host's device nodes unless told otherwise: the one default of `--dev-root` and of the host
/// config's `dev_root`.
pub const DEV_ROOT: &str = "/dev";
/// sysfs unless told otherwise.
pub const SYS_ROOT: &str = "/sys";
/// procfs unless told otherwise.
pub const PROC_ROOT: &str = "/proc";
/// The driver's files unless told otherwise: the host's own root.
pub const DRIVER_ROOT: &str = "/";

impl Default for HostRoots {
    fn default() -> Self {
        Self {
            dev_root: PathBuf::from(DEV_ROOT),
            sys_root: PathBuf::from(SYS_ROOT),
            proc_root: PathBuf::from(PROC_ROOT),
            driver_root: PathBuf::from(DRIVER_ROOT),
        }
    }
}

impl HostRoots {
    /// A simulated host laid out under `dir`: `dir/dev`, `dir/sys`, `dir/proc`, and `dir` itself
    /// as the driver root (tests and benchmarks build their trees there).
    pub fn under(dir: &Path) -> Self {
        Self {
            dev_root: dir.join("dev"),
            sys_root: dir.join("sys"),
            proc_root: dir.join("proc"),
            driver_root: dir.to_path_buf(),
        }
    }

    /// `path` (absolute, as written in a profile) under the driver root.
    pub fn in_driver_root(&self, path: &str) -> PathBuf {
        join_under(&self.driver_root, path)
    }

    /// `path` (relative, as written in a profile) under the proc root.
    pub fn in_proc_root(&self, path: &str) -> PathBuf {
        join_under(&self.proc_root, path)
    }

    /// `path` (relative, as written in a profile) under the sys root.
    pub fn in_sys_root(&self, path: &str) -> PathBuf {
        join_under(&self.sys_root, path)
    }
}

/// Joins a profile path under a root, treating a leading `/` as the root itself.
pub fn join_under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_absolute_paths_under_the_root() {
        let r = HostRoots {
            driver_root: PathBuf::from("/run/nvidia/driver"),
            ..HostRoots::default()
        };
        assert_eq!(
            r.in_driver_root("/usr/lib/libcuda.so.1"),
            PathBuf::from("/run/nvidia/driver/usr/lib/libcuda.so.1")
        );
        assert_eq!(
            HostRoots::default().in_driver_root("/usr/bin/x"),
            PathBuf::from("/usr/bin/x")
        );
    }
}
