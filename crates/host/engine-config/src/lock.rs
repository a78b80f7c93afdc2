//! Serialising concurrent runs (an installer DaemonSet restarting while an administrator runs
//! `devinject-ctl`) on the same engine configuration.

use std::fs::File;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use crate::error::{Result, RuntimeConfigError};

/// An exclusive `flock(2)` on a directory, released on drop.
pub struct DirLock {
    _lock: Flock<File>,
}

impl DirLock {
    /// Locks the directory holding `path` (its nearest existing ancestor, when the directory does
    /// not exist yet), waiting for another holder to finish. Directory locks leave no file behind.
    pub fn acquire(path: &Path) -> Result<DirLock> {
        let mut dir = path.parent().unwrap_or(Path::new("/"));
        while !dir.is_dir() {
            dir = dir.parent().unwrap_or(Path::new("/"));
        }
        let file =
            File::open(dir).map_err(|e| RuntimeConfigError::io("open for locking", dir, e))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| {
            RuntimeConfigError::io("lock", dir, std::io::Error::from(errno))
        })?;
        Ok(DirLock { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_nonblocking_lock_fails_while_held() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = DirLock::acquire(&dir.path().join("missing/deeper/file")).expect("lock");
        let other = File::open(dir.path()).expect("open");
        assert!(Flock::lock(other, FlockArg::LockExclusiveNonblock).is_err());
        drop(held);
        let other = File::open(dir.path()).expect("open");
        assert!(Flock::lock(other, FlockArg::LockExclusiveNonblock).is_ok());
    }
}
