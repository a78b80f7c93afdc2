//! The one way devinject opens a file at a name someone else may control (an image's file, a
//! profile, a host directory another tool writes, the decision log): look at the name through an
//! `O_PATH` descriptor, which opens nothing (no FIFO open blocks, no device driver runs), check
//! what `fstat` says of that inode, then reopen that same inode through `/proc/self/fd/<n>`, so
//! that nothing is resolved by name again between the check and the use. Every reopen is
//! close-on-exec (no program we start inherits it), never makes a terminal our controlling one,
//! and a read never blocks. docs/security.md ("Threat model at a glance") lists who relies on it.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, FileStat, Mode};

use crate::file_kind;

/// `/proc/self/fd/<n>`: the inode `fd` holds, reached without resolving any other path.
pub fn proc_path(fd: impl AsFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
}

/// Whether a link at the name's last component is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Followed (a profile directory's entries may be links an operator made).
    Yes,
    /// Not followed: a link is seen as a link (`O_NOFOLLOW`).
    No,
}

/// An inode held through an `O_PATH` descriptor, with what `fstat` said of it.
#[derive(Debug)]
pub struct PathFd {
    fd: OwnedFd,
    stat: FileStat,
}

impl PathFd {
    /// Looks at `name`, relative to `dir` (or to the working directory with `None`), opening
    /// nothing.
    pub fn at(dir: Option<BorrowedFd<'_>>, name: &Path, follow: Follow) -> Result<Self, Errno> {
        let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
        if follow == Follow::No {
            flags |= OFlag::O_NOFOLLOW;
        }
        let fd = match dir {
            Some(dir) => openat(dir, name, flags, Mode::empty())?,
            None => open(name, flags, Mode::empty())?,
        };
        let stat = fstat(fd.as_fd())?;
        Ok(Self { fd, stat })
    }

    /// What `fstat` said.
    pub fn stat(&self) -> &FileStat {
        &self.stat
    }

    /// Whether it is a regular file.
    pub fn is_regular(&self) -> bool {
        file_kind::of(&self.stat) == nix::sys::stat::SFlag::S_IFREG
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        u64::try_from(self.stat.st_size).unwrap_or(u64::MAX)
    }

    /// Its file type in the words messages use ("FIFO", "character device").
    pub fn kind_name(&self) -> &'static str {
        file_kind::name(file_kind::of(&self.stat))
    }

    /// The same inode opened for `how`. Only for a regular file: the caller checked
    /// [`PathFd::is_regular`] (a FIFO's or a device's open is what this module avoids).
    pub fn reopen(&self, how: Reopen) -> Result<File, Errno> {
        reopen(&self.fd, how)
    }
}

impl AsFd for PathFd {
    /// The `O_PATH` descriptor: for `fstatfs`, `open_tree` or an `*at` call on the same inode.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What a reopen is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reopen {
    /// Reading, without blocking.
    Read,
    /// Appending.
    Append,
}

/// The inode `fd` holds, opened for `how` through [`proc_path`], close-on-exec and never as a
/// controlling terminal.
pub fn reopen(fd: impl AsFd, how: Reopen) -> Result<File, Errno> {
    let access = match how {
        Reopen::Read => OFlag::O_RDONLY | OFlag::O_NONBLOCK,
        Reopen::Append => OFlag::O_WRONLY | OFlag::O_APPEND,
    };
    let file = open(
        &proc_path(fd),
        access | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_regular_file_is_reopened_and_a_fifo_is_only_looked_at() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("f");
        std::fs::write(&file, "one").unwrap();
        let held = PathFd::at(None, &file, Follow::No).unwrap();
        assert!(held.is_regular());
        assert_eq!(held.size(), 3);
        let mut text = String::new();
        held.reopen(Reopen::Read)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "one");
        held.reopen(Reopen::Append)
            .unwrap()
            .write_all(b" two")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "one two");

        // A FIFO with no writer: looking at it does not block, and it says what it is.
        let fifo = t.path().join("p");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let held = PathFd::at(None, &fifo, Follow::Yes).unwrap();
        assert!(!held.is_regular());
        assert_eq!(held.kind_name(), "FIFO");
    }

    #[test]
    fn a_link_is_followed_only_when_asked_and_names_resolve_below_the_directory() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), "x").unwrap();
        std::os::unix::fs::symlink("f", t.path().join("l")).unwrap();
        let dir = std::fs::File::open(t.path()).unwrap();
        let seen = PathFd::at(Some(dir.as_fd()), Path::new("l"), Follow::No).unwrap();
        assert_eq!(seen.kind_name(), "symbolic link");
        let followed = PathFd::at(Some(dir.as_fd()), Path::new("l"), Follow::Yes).unwrap();
        assert!(followed.is_regular());
        assert_eq!(
            PathFd::at(Some(dir.as_fd()), Path::new("missing"), Follow::No).unwrap_err(),
            Errno::ENOENT
        );
    }

    #[test]
    fn the_reopen_is_the_inode_that_was_checked_even_when_the_name_is_swapped() {
        let t = tempfile::tempdir().unwrap();
        let name = t.path().join("profile.toml");
        std::fs::write(&name, "checked").unwrap();
        let held = PathFd::at(None, &name, Follow::No).unwrap();
        // Another writer replaces the name between the check and the use.
        let other = t.path().join("other");
        std::fs::write(&other, "swapped in").unwrap();
        std::fs::rename(&other, &name).unwrap();
        let mut text = String::new();
        held.reopen(Reopen::Read)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "checked");
    }

    #[test]
    fn every_descriptor_is_closed_on_exec() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let held = PathFd::at(None, &file, Follow::No).unwrap();
        let opened = held.reopen(Reopen::Read).unwrap();
        for fd in [held.fd.as_fd(), opened.as_fd()] {
            let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).unwrap();
            assert!(
                nix::fcntl::FdFlag::from_bits_truncate(flags)
                    .contains(nix::fcntl::FdFlag::FD_CLOEXEC),
                "{fd:?} is inherited by programs we start"
            );
        }
    }
}
