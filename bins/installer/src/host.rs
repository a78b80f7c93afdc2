//! Where the host's filesystem is: a root prefix (`/host` in the init container, a temp dir in
//! tests, `/` on the host itself) and the translation between host paths and paths this process
//! can open.
//!
//! Paths written *into* files (a runtime entry's binary, the hook's profile directory) are host
//! paths; files are opened at the path [`HostRoot::access`] gives, with the host's absolute
//! symlinks (`/var/run -> /run`, `/etc/docker -> /srv/docker`) followed inside the root, for
//! every file the installer reads or writes.
//!
//! Files themselves are reached only through their directory's fd
//! ([`devinject_hostfs::host_dir`]): the directory is opened inside the root, the final
//! name is never followed, and only a regular file with one link, or nothing, is read, replaced
//! or removed; anything else at one of the installer's names (a link, a FIFO, a device node, a
//! hard link to another file) is refused before anything is written, naming it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use devinject_hostfs::host_dir::{self, Entry, HostDir, Name};
use devinject_hostfs::host_root::{host_path_of, resolve_in_root};
use nix::sys::stat::FileStat;

use crate::error::{InstallError, Result};

/// The largest host file the installer reads: its binaries are the largest it writes.
pub const MAX_HOST_FILE_BYTES: u64 = 512 << 20;

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
    /// ([`devinject_hostfs::host_root`], shared with `devinject-ctl`).
    pub fn access(&self, host: &Path) -> PathBuf {
        resolve_in_root(&self.root, host)
    }

    /// The host path of `access`, a path below the root.
    pub fn host_of(&self, access: &Path) -> PathBuf {
        host_path_of(&self.root, access)
    }

    /// The directory holding host path `host` (opened inside the root) and the final name;
    /// `None` for the directory when it does not exist.
    fn dir_of<'n>(&self, host: &'n Path) -> Result<(Option<HostDir>, &'n OsStr)> {
        let (dir, name) = host_dir::split(host).map_err(InstallError::HostFile)?;
        let dir = HostDir::open(&self.root, &dir).map_err(InstallError::HostFile)?;
        Ok((dir, name))
    }

    /// What is at host path `host` (not followed); [`Entry::Missing`] when its directory is
    /// missing too.
    pub fn entry(&self, host: &Path) -> Result<Entry> {
        match self.dir_of(host)? {
            (Some(dir), name) => dir.entry(name).map_err(InstallError::HostFile),
            (None, _) => Ok(Entry::Missing),
        }
    }

    /// The bytes of the installer's file at host path `host` and its `fstat`; `None` when
    /// nothing is there. Anything but a regular file with one link is refused unopened.
    pub fn read(&self, host: &Path) -> Result<Option<(Vec<u8>, FileStat)>> {
        match self.dir_of(host)? {
            (Some(dir), name) => dir
                .read_bytes(name, Name::Ours, MAX_HOST_FILE_BYTES)
                .map_err(InstallError::HostFile),
            (None, _) => Ok(None),
        }
    }

    /// Replaces (or creates) the installer's file at host path `host` atomically; the
    /// directory exists. `owner`: the new file's (uid, gid), `None` keeps the current owner.
    pub fn write(
        &self,
        host: &Path,
        bytes: &[u8],
        mode: Option<u32>,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        match self.dir_of(host)? {
            (Some(dir), name) => dir
                .write_owned(name, bytes, mode, owner)
                .map_err(InstallError::HostFile),
            (None, _) => Err(InstallError::io(
                "open the directory of",
                self.access(host),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )),
        }
    }

    /// Removes the regular file (one link) at host path `host`; returns whether there was one.
    /// Anything else there is refused and left.
    pub fn remove(&self, host: &Path) -> Result<bool> {
        match self.dir_of(host)? {
            (Some(dir), name) => dir.remove(name).map_err(InstallError::HostFile),
            (None, _) => Ok(false),
        }
    }

    /// Removes the socket at `host` through its directory's fd ([`HostDir::remove_socket`]):
    /// anything else there is left. Returns whether one went.
    pub fn remove_socket(&self, host: &Path) -> Result<bool> {
        match self.dir_of(host)? {
            (Some(dir), name) => dir.remove_socket(name).map_err(InstallError::HostFile),
            (None, _) => Ok(false),
        }
    }

    /// Opens the host directory `host` inside the root; `None` when it does not exist.
    pub fn open_dir(&self, host: &Path) -> Result<Option<HostDir>> {
        HostDir::open(&self.root, host).map_err(InstallError::HostFile)
    }

    /// Opens (creating it and its missing parents, mode 0755) the host directory `host`.
    pub fn create_dir(&self, host: &Path) -> Result<HostDir> {
        HostDir::create(&self.root, host)
            .map(|(dir, _)| dir)
            .map_err(InstallError::HostFile)
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

    /// `/etc/docker -> /somewhere` on the host leads inside the root, never outside it.
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
