//! The log's directory and its two files, reached only through descriptors.
//!
//! # Security
//!
//! The hook writes here as root for every refused container, and the device plugin and
//! `devinject-ctl doctor` read here. The directory comes from the host config, but what is in
//! it could have been put there by another tool or a pod with a hostPath volume. So:
//! - the directory is opened `O_DIRECTORY | O_NOFOLLOW` (a link there is refused, not followed)
//!   and must be owned by root (or this process's user) and writable by nobody else;
//! - a file is looked at through an `O_PATH | O_NOFOLLOW` descriptor and only a regular file
//!   with one link is reopened, the same inode ([`devinject_hostfs::path_fd`]);
//! - a missing log file is created `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600;
//! - rotation renames within the directory's descriptor (`renameat`), which replaces a name
//!   and never follows what the name held.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, openat, renameat, Flock, FlockArg, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use nix::unistd::mkdir;

use crate::error::{DecisionLogError, Result};
use devinject_hostfs::file_kind;
use devinject_hostfs::path_fd::{Follow, PathFd, Reopen};

/// The file decisions are appended to.
pub const LOG_NAME: &str = "decisions.log";
/// The previous log, after a rotation.
pub const ROTATED_NAME: &str = "decisions.log.1";

/// The log's directory, open.
pub(crate) struct LogDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// How a log file is opened once it is known to be a regular file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Append,
}

/// A file's identity: a rotation gives the name another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
}

impl Identity {
    pub(crate) fn of(st: &FileStat) -> Self {
        Identity {
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// A file's size from its `fstat`.
pub(crate) fn size(st: &FileStat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

fn io(op: &'static str, path: &Path, errno: Errno) -> DecisionLogError {
    DecisionLogError::Io {
        op,
        path: path.to_owned(),
        source: std::io::Error::from(errno),
    }
}

impl LogDir {
    /// Opens the directory at `path`; when it is missing, makes it (mode 0700, the last
    /// component only) if `create`, else `Ok(None)`.
    pub(crate) fn open(path: &Path, create: bool) -> Result<Option<Self>> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if create => {
                match mkdir(path, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(io("create", path, e)),
                }
                open(path, flags, Mode::empty()).map_err(|e| Self::open_error(path, e))?
            }
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(Self::open_error(path, e)),
        };
        let st = fstat(&fd).map_err(|e| io("stat", path, e))?;
        let mode = st.st_mode & 0o7777;
        let owner_ok = st.st_uid == 0 || st.st_uid == nix::unistd::geteuid().as_raw();
        if !owner_ok || mode & 0o022 != 0 {
            return Err(DecisionLogError::DirectoryNotPrivate {
                path: path.to_owned(),
                mode,
                uid: st.st_uid,
            });
        }
        Ok(Some(LogDir {
            fd,
            path: path.to_owned(),
        }))
    }

    fn open_error(path: &Path, errno: Errno) -> DecisionLogError {
        match errno {
            // O_NOFOLLOW on a link: ELOOP; O_DIRECTORY on anything else: ENOTDIR.
            Errno::ELOOP | Errno::ENOTDIR => DecisionLogError::NotADirectory {
                path: path.to_owned(),
                what: std::fs::symlink_metadata(path)
                    .map(|m| {
                        if m.file_type().is_symlink() {
                            "symbolic link"
                        } else {
                            "file"
                        }
                    })
                    .unwrap_or("file"),
            },
            e => io("open", path, e),
        }
    }

    /// The path of the file `name`, for messages.
    pub(crate) fn file_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// What the name `name` holds, not followed; `None` when nothing.
    pub(crate) fn stat(&self, name: &str) -> Result<Option<FileStat>> {
        match fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io("stat", &self.file_path(name), e)),
        }
    }

    /// The file `name` opened for `access` when it is a regular file with one link, with its
    /// `fstat`; `None` when it is missing and `access` is [`Access::Read`]. For
    /// [`Access::Append`] a missing file is created.
    pub(crate) fn open_file(&self, name: &str, access: Access) -> Result<Option<(File, FileStat)>> {
        let path = self.file_path(name);
        // Twice at most: a file another writer creates between our two opens is then opened.
        for _ in 0..2 {
            let held = match PathFd::at(Some(self.fd.as_fd()), Path::new(name), Follow::No) {
                Ok(held) => held,
                Err(Errno::ENOENT) if access == Access::Read => return Ok(None),
                Err(Errno::ENOENT) => match self.create(name) {
                    Ok(created) => return Ok(Some(created)),
                    Err(Errno::EEXIST) => continue,
                    Err(e) => return Err(io("create", &path, e)),
                },
                Err(e) => return Err(io("open", &path, e)),
            };
            check(&path, held.stat())?;
            let how = match access {
                Access::Read => Reopen::Read,
                Access::Append => Reopen::Append,
            };
            let file = held.reopen(how).map_err(|e| io("open", &path, e))?;
            return Ok(Some((file, *held.stat())));
        }
        Err(io("open", &path, Errno::EEXIST))
    }

    fn create(&self, name: &str) -> std::result::Result<(File, FileStat), Errno> {
        let flags = OFlag::O_WRONLY
            | OFlag::O_APPEND
            | OFlag::O_CREAT
            | OFlag::O_EXCL
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC;
        let fd = openat(&self.fd, name, flags, Mode::from_bits_truncate(0o600))?;
        let st = fstat(&fd)?;
        Ok((File::from(fd), st))
    }

    /// Renames the log to the rotated name, replacing the previous rotated log.
    pub(crate) fn rotate(&self) -> Result<()> {
        renameat(&self.fd, LOG_NAME, &self.fd, ROTATED_NAME)
            .map_err(|e| io("rotate", &self.file_path(LOG_NAME), e))
    }

    /// The directory's exclusive lock, when no other writer holds it (never waits).
    pub(crate) fn try_lock(&self) -> Option<Flock<OwnedFd>> {
        let fd = self.fd.as_fd().try_clone_to_owned().ok()?;
        Flock::lock(fd, FlockArg::LockExclusiveNonblock).ok()
    }
}

/// Only a regular file with one link is read or written.
fn check(path: &Path, st: &FileStat) -> Result<()> {
    let k = file_kind::of(st);
    if k != SFlag::S_IFREG {
        return Err(DecisionLogError::NotAFile {
            path: path.to_owned(),
            what: file_kind::name(k),
        });
    }
    if st.st_nlink != 1 {
        return Err(DecisionLogError::HardLinked {
            path: path.to_owned(),
            // `nlink_t` is u32 on some targets.
            #[allow(clippy::unnecessary_cast)]
            links: st.st_nlink as u64,
        });
    }
    Ok(())
}
