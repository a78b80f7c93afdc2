//! The calls that change a container's tree, behind one narrow trait.
//!
//! Everything the injection child does in the container's mount namespace that creates,
//! replaces, owns or mounts something is one of these calls, each on a directory fd that
//! [`Rootfs`](super::rootfs::Rootfs) resolved in-root: the decisions around them (what to make,
//! what to replace, what to refuse, which owner and mode) live in `nodes.rs`, `mounts.rs`,
//! `symlinks.rs`, `rootfs.rs` and the linker cache's `update.rs`, and are unit-tested without
//! root against the recording fake in `ns_calls/recording.rs`, which asserts the exact arguments.
//! [`Syscalls`] is this machine, tested as root against real runc.
//!
//! Reads (`openat2`, `fstat`, `fstatfs`, `readlinkat`) stay direct calls: they change nothing, and
//! a test builds what they look at in a temp dir. The one read behind the trait is
//! [`NsCalls::stat_at`], so that a test can show the applier a device node it could not make
//! without root.

use std::ffi::OsStr;
use std::os::fd::{BorrowedFd, OwnedFd};

use nix::fcntl::{AtFlags, OFlag};
use nix::mount::MsFlags;
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::{Gid, Uid, UnlinkatFlags};

use crate::sys;
use devinject_hostfs::path_fd::proc_path;

/// What is at a name, as [`NsCalls::stat_at`] sees it (symlinks not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    /// `st_rdev`: the device numbers of a node.
    pub rdev: u64,
}

/// The calls that change the container's tree. Every name is a single component in the
/// directory `dir`, which the caller resolved in-root; nothing here resolves a path.
pub trait NsCalls {
    /// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
    fn stat_at(&self, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<Stat>;
    /// `mkdirat(dir, name, mode)`.
    fn mkdir_at(&self, dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> nix::Result<()>;
    /// `mknodat(dir, name, kind | mode, rdev)`.
    fn mknod_at(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        kind: SFlag,
        mode: u32,
        rdev: u64,
    ) -> nix::Result<()>;
    /// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`.
    fn chown_at(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> nix::Result<()>;
    /// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH)`: the inode `fd` names, which may be an
    /// `O_PATH` fd (the node the runtime made, regrouped).
    fn chown_fd(&self, fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> nix::Result<()>;
    /// `symlinkat(target, dir, name)`.
    fn symlink_at(&self, target: &str, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()>;
    /// `unlinkat(dir, name, 0)`: never a directory.
    fn unlink_at(&self, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()>;
    /// Creates the new, empty file `name` in `dir` with `mode` and opens it (`O_CREAT | O_EXCL |
    /// O_NOFOLLOW`): for writing when `write`, else read-only (a mount target). `EEXIST` when
    /// the name is taken: nothing that exists is ever opened this way.
    fn create_file(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
        write: bool,
    ) -> nix::Result<OwnedFd>;
    /// `renameat(dir, from, dir, to)`.
    fn rename_at(&self, dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> nix::Result<()>;
    /// `move_mount(tree, "", target, "", F_EMPTY_PATH | T_EMPTY_PATH)`: attaches a detached tree
    /// onto the file `target` names.
    fn move_mount(&self, tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> nix::Result<()>;
    /// `mount(source, target, MS_BIND)` through `/proc/self/fd`: kernels without the new mount
    /// API.
    fn bind_mount(&self, source: BorrowedFd<'_>, target: BorrowedFd<'_>) -> nix::Result<()>;
    /// `mount(NULL, target, MS_BIND | MS_REMOUNT | flags)` through `/proc/self/fd`.
    fn remount_bind(&self, target: BorrowedFd<'_>, flags: MsFlags) -> nix::Result<()>;
    /// Sets the filesystem uid and gid this thread creates files as (`setfsgid`, `setfsuid`)
    /// and returns the previous ones.
    fn set_fs_ids(&self, uid: u32, gid: u32) -> (u32, u32);
}

/// This machine's kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct Syscalls;

impl NsCalls for Syscalls {
    fn stat_at(&self, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<Stat> {
        let st = nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
        Ok(Stat {
            mode: st.st_mode,
            rdev: st.st_rdev,
        })
    }

    fn mkdir_at(&self, dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> nix::Result<()> {
        nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(mode))
    }

    fn mknod_at(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        kind: SFlag,
        mode: u32,
        rdev: u64,
    ) -> nix::Result<()> {
        nix::sys::stat::mknodat(dir, name, kind, Mode::from_bits_truncate(mode), rdev)
    }

    fn chown_at(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> nix::Result<()> {
        nix::unistd::fchownat(
            dir,
            name,
            uid.map(Uid::from_raw),
            gid.map(Gid::from_raw),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
    }

    fn chown_fd(&self, fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> nix::Result<()> {
        nix::unistd::fchownat(
            fd,
            "",
            uid.map(Uid::from_raw),
            gid.map(Gid::from_raw),
            AtFlags::AT_EMPTY_PATH,
        )
    }

    fn symlink_at(&self, target: &str, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()> {
        nix::unistd::symlinkat(target, dir, name)
    }

    fn unlink_at(&self, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()> {
        nix::unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)
    }

    fn create_file(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
        write: bool,
    ) -> nix::Result<OwnedFd> {
        let access = if write {
            OFlag::O_WRONLY
        } else {
            OFlag::O_RDONLY
        };
        nix::fcntl::openat(
            dir,
            name,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | access,
            Mode::from_bits_truncate(mode),
        )
    }

    fn rename_at(&self, dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> nix::Result<()> {
        nix::fcntl::renameat(dir, from, dir, to)
    }

    fn move_mount(&self, tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> nix::Result<()> {
        sys::move_mount(tree, target)
    }

    fn bind_mount(&self, source: BorrowedFd<'_>, target: BorrowedFd<'_>) -> nix::Result<()> {
        nix::mount::mount(
            Some(&proc_path(source)),
            &proc_path(target),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
    }

    fn remount_bind(&self, target: BorrowedFd<'_>, flags: MsFlags) -> nix::Result<()> {
        nix::mount::mount(
            None::<&str>,
            &proc_path(target),
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags,
            None::<&str>,
        )
    }

    fn set_fs_ids(&self, uid: u32, gid: u32) -> (u32, u32) {
        let old_gid = nix::unistd::setfsgid(Gid::from_raw(gid));
        let old_uid = nix::unistd::setfsuid(Uid::from_raw(uid));
        (old_uid.as_raw(), old_gid.as_raw())
    }
}

#[cfg(test)]
pub mod recording;
