//! The one way configure and unconfigure change the host: every file written or removed and
//! every directory made or removed goes through a [`HostWriter`].
//!
//! `devinject-ctl` uses [`Direct`]: atomic replacement through [`devinject_hostfs::host_dir`], in the
//! directory opened inside the root, the final name never followed (only a regular file with
//! one link is replaced or removed). The installer passes its step journal instead, which saves what
//! each path held before letting the change through, so a failed or killed step is undone
//! whatever part of the engine's configuration was written. The library never touches a host
//! path any other way while configuring, so the caller sees every change as it happens and
//! needs no preview to learn which files to protect.
//!
//! Paths given to a [`HostWriter`] are host paths (`/etc/containerd/config.toml`), never paths
//! under the root prefix: each implementation resolves them itself, the same way.

use std::path::{Path, PathBuf};

use tracing::debug;

use crate::error::{Result, RuntimeConfigError};
use crate::request::HostPaths;
use devinject_hostfs::host_dir::{self, HostDir};

/// Where configure and unconfigure make their changes.
pub trait HostWriter {
    /// Replaces (or creates) the file at host path `host` atomically, never following what is
    /// at its name; `mode` as for [`devinject_hostfs::atomic_write::write_atomic`] (`None`: keep the current mode, or the default). The
    /// parent directory exists (made through [`HostWriter::create_dirs`]).
    fn write(&mut self, host: &Path, bytes: &[u8], mode: Option<u32>) -> Result<()>;

    /// Removes the file at host path `host`; a missing file is not an error.
    fn remove(&mut self, host: &Path) -> Result<()>;

    /// Creates the directory `host` and its missing parents (mode 0755). Returns the
    /// directories created (host paths, outermost first).
    fn create_dirs(&mut self, host: &Path) -> Result<Vec<PathBuf>>;

    /// Removes the directory `host` when it is empty; a missing or non-empty directory is left
    /// as it is (anything put there since is not ours to remove). Returns whether it went.
    fn remove_empty_dir(&mut self, host: &Path) -> Result<bool>;
}

/// Changes made straight to the host at [`HostPaths::access`], as `devinject-ctl` makes them.
#[derive(Debug)]
pub struct Direct<'a> {
    paths: &'a HostPaths,
}

impl<'a> Direct<'a> {
    /// Changes on the host at `paths.root`.
    pub fn new(paths: &'a HostPaths) -> Self {
        Direct { paths }
    }
}

impl Direct<'_> {
    /// The directory holding host path `host`, when it exists.
    fn dir_of<'n>(&self, host: &'n Path) -> Result<(Option<HostDir>, &'n std::ffi::OsStr)> {
        let (dir, name) = host_dir::split(host)?;
        Ok((HostDir::open(&self.paths.root, &dir)?, name))
    }
}

impl HostWriter for Direct<'_> {
    fn write(&mut self, host: &Path, bytes: &[u8], mode: Option<u32>) -> Result<()> {
        match self.dir_of(host)? {
            (Some(dir), name) => Ok(dir.write(name, bytes, mode)?),
            (None, _) => Err(RuntimeConfigError::io(
                "open the directory of",
                self.paths.access(host),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )),
        }
    }

    fn remove(&mut self, host: &Path) -> Result<()> {
        if let (Some(dir), name) = self.dir_of(host)? {
            dir.remove(name)?;
        }
        Ok(())
    }

    fn create_dirs(&mut self, host: &Path) -> Result<Vec<PathBuf>> {
        // Where the host's own links lead (`/etc/docker -> /srv/docker`), inside the root.
        let real = self.paths.behind_links(host);
        Ok(HostDir::create(&self.paths.root, &real)?.1)
    }

    fn remove_empty_dir(&mut self, host: &Path) -> Result<bool> {
        let gone = match self.dir_of(host)? {
            (Some(dir), name) => dir.remove_empty_dir(name)?,
            (None, _) => false,
        };
        if !gone {
            debug!(dir = %host.display(), "missing or not empty; left in place");
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_changes_land_under_the_root_and_report_host_paths() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = HostPaths::under_root(dir.path());
        let mut files = Direct::new(&paths);
        let made = files
            .create_dirs(Path::new("/etc/devinject/sub"))
            .expect("dirs");
        assert_eq!(
            made,
            vec![
                PathBuf::from("/etc"),
                PathBuf::from("/etc/devinject"),
                PathBuf::from("/etc/devinject/sub")
            ]
        );
        files
            .write(Path::new("/etc/devinject/sub/f"), b"x", Some(0o600))
            .expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("etc/devinject/sub/f")).expect("read"),
            b"x"
        );
        assert!(!files
            .remove_empty_dir(Path::new("/etc/devinject/sub"))
            .expect("not empty"));
        files
            .remove(Path::new("/etc/devinject/sub/f"))
            .expect("remove");
        files
            .remove(Path::new("/etc/devinject/sub/f"))
            .expect("a missing file is fine");
        assert!(files
            .remove_empty_dir(Path::new("/etc/devinject/sub"))
            .expect("empty"));
        assert!(!files
            .remove_empty_dir(Path::new("/etc/devinject/sub"))
            .expect("gone already"));
        assert!(dir.path().join("etc/devinject").is_dir());
    }
}
