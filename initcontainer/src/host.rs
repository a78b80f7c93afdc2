//! Where the host's filesystem is: a root prefix (`/host` in the init container, a temp dir in
//! tests, `/` on the host itself) and the translation between host paths and paths this process
//! can open.
//!
//! Paths written *into* files (a runtime entry's binary, the hook's profile directory) are host
//! paths; files are opened at the path [`HostRoot::access`] gives, with the host's absolute
//! symlinks (`/var/run -> /run`, `/etc/docker -> /srv/docker`) followed inside the root, for
//! every file the installer reads or writes.

use std::path::{Path, PathBuf};

use devinject_runtime_config::host_root::{host_path_of, resolve_in_root};

/// The host's root as seen by this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    root: PathBuf,
}

impl HostRoot {
    /// The host's `/` is reachable at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        HostRoot { root: root.into() }
    }

    /// The prefix.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the host path `host` can be opened by this process: symlinks on the way are
    /// followed as the host would follow them, staying inside the root
    /// ([`devinject_runtime_config::host_root`], shared with `devinject-ctl`).
    pub fn access(&self, host: &Path) -> PathBuf {
        resolve_in_root(&self.root, host)
    }

    /// The host path of `access`, a path below the root.
    pub fn host_of(&self, access: &Path) -> PathBuf {
        host_path_of(&self.root, access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_and_host_of_are_inverse() {
        let h = HostRoot::new("/host");
        let a = h.access(Path::new("/etc/containerd/config.toml"));
        assert_eq!(a, PathBuf::from("/host/etc/containerd/config.toml"));
        assert_eq!(h.host_of(&a), PathBuf::from("/etc/containerd/config.toml"));
        assert_eq!(h.access(Path::new("/")), PathBuf::from("/host"));
        let plain = HostRoot::new("/");
        assert_eq!(plain.access(Path::new("/etc/x")), PathBuf::from("/etc/x"));
    }

    /// Issue 13, finding 7: `/etc/docker -> /somewhere` on the host led outside the root.
    #[test]
    fn absolute_links_on_the_host_stay_inside_the_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("etc")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("srv/docker")).expect("mkdir");
        std::os::unix::fs::symlink("/srv/docker", dir.path().join("etc/docker")).expect("symlink");
        let h = HostRoot::new(dir.path());
        let a = h.access(Path::new("/etc/docker/daemon.json"));
        assert_eq!(a, dir.path().join("srv/docker/daemon.json"));
        assert_eq!(h.host_of(&a), PathBuf::from("/srv/docker/daemon.json"));
    }
}
