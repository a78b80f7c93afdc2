//! What `cdi generate` exports, and where the host is.

use std::path::{Path, PathBuf};

use devinject_devices::{ContainerLayout, HostRoots, DEFAULT_HOOK_PATH};

use crate::version::CdiVersion;

/// Default directory CDI specs are written to (CDI's static directory).
pub const DEFAULT_OUTPUT_DIR: &str = "/etc/cdi";
/// Default profiles directory, as for the hook.
pub use devinject_devices::profile_set::DEFAULT_PROFILES_DIR;

/// What to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiRequest {
    /// Prefix under which the host's `/` is reachable (the root prefix of `devinject-ctl --root`).
    pub root: PathBuf,
    /// Profiles directory (host path).
    pub profiles_dir: PathBuf,
    /// Device, sysfs and driver roots (host paths).
    pub roots: HostRoots,
    /// Directory the specs go to (host path).
    pub output_dir: PathBuf,
    /// `devinject-hook` (host path), for the soname/ldcache hook.
    pub hook_path: PathBuf,
    /// `--config` for the hook, when not the default.
    pub hook_config: Option<PathBuf>,
    /// Where libraries go in containers.
    pub lib_dir: PathBuf,
    /// The newest CDI version the engine reading the specs knows, when it predates what a
    /// spec would use (see [`crate::version::fit`]); `None`: each spec takes the lowest version
    /// that holds it.
    pub newest_version: Option<CdiVersion>,
    /// Give each device's nodes, in a container with a user namespace, as copies the container
    /// owns: a `devinject-hook finish --node` entry per device (`cdi generate
    /// --user-namespaces`). Off by default: it runs one more hook process per start, also where
    /// there is no user namespace (where it then does nothing).
    pub user_namespaces: bool,
    /// Report only.
    pub dry_run: bool,
}

impl Default for CdiRequest {
    fn default() -> Self {
        CdiRequest {
            root: PathBuf::from("/"),
            profiles_dir: PathBuf::from(DEFAULT_PROFILES_DIR),
            roots: HostRoots::default(),
            output_dir: PathBuf::from(DEFAULT_OUTPUT_DIR),
            hook_path: PathBuf::from(DEFAULT_HOOK_PATH),
            hook_config: None,
            lib_dir: ContainerLayout::default().lib_dir,
            newest_version: None,
            user_namespaces: false,
            dry_run: false,
        }
    }
}

impl CdiRequest {
    /// Where the host path `host` is for this process: below [`CdiRequest::root`], the host's
    /// own absolute links followed inside it ([`devinject_hostfs::host_root::resolve_in_root`]).
    pub fn access(&self, host: &Path) -> PathBuf {
        devinject_hostfs::host_root::resolve_in_root(&self.root, host)
    }

    /// The device, sysfs and driver roots as this process reaches them.
    pub fn access_roots(&self) -> HostRoots {
        HostRoots {
            dev_root: self.access(&self.roots.dev_root),
            sys_root: self.access(&self.roots.sys_root),
            proc_root: self.access(&self.roots.proc_root),
            driver_root: self.access(&self.roots.driver_root),
        }
    }
}
