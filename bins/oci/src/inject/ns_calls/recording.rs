//! A recording [`NsCalls`] over a temp dir that stands for the rootfs, for unit tests that run
//! without root.
//!
//! What an unprivileged process may do in its own temp dir (mkdir, symlink, unlink, create,
//! rename) is done for real, so the applier's next lookup sees it; what needs root (mknod, chown,
//! mounts, fs ids) is only recorded, and a node it "made" is kept in an overlay that
//! [`NsCalls::stat_at`] answers from, as is a node a test seeds with [`Recording::seed_node`].
//! Every call is kept as a [`Call`] with its container path and exact arguments; a test can make
//! the next call of one kind fail with [`Recording::fail_next`].

use std::cell::RefCell;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::MsFlags;
use nix::sys::stat::SFlag;

use super::{NsCalls, Stat, Syscalls};

/// One call, with the container path it acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `mkdirat`.
    Mkdir {
        /// Container path.
        path: PathBuf,
        /// Permission bits.
        mode: u32,
    },
    /// `mknodat`.
    Mknod {
        /// Container path.
        path: PathBuf,
        /// `S_IFCHR` or `S_IFBLK`.
        kind: SFlag,
        /// Permission bits.
        mode: u32,
        /// Device numbers.
        rdev: u64,
    },
    /// `fchownat` on a name, or on an fd (`by_fd`).
    Chown {
        /// Container path.
        path: PathBuf,
        /// New owner, if changed.
        uid: Option<u32>,
        /// New group, if changed.
        gid: Option<u32>,
        /// Through the fd (`AT_EMPTY_PATH`) rather than the name.
        by_fd: bool,
    },
    /// `symlinkat`.
    Symlink {
        /// Container path of the link.
        path: PathBuf,
        /// What it points at.
        target: String,
    },
    /// `unlinkat`.
    Unlink {
        /// Container path.
        path: PathBuf,
    },
    /// A new file, `O_EXCL`.
    Create {
        /// Container path.
        path: PathBuf,
        /// Permission bits.
        mode: u32,
        /// Opened for writing.
        write: bool,
    },
    /// `renameat` within one directory.
    Rename {
        /// Container path of the old name.
        from: PathBuf,
        /// Container path of the new name.
        to: PathBuf,
    },
    /// `move_mount` of a detached tree.
    MoveMount {
        /// Container path of the mount point.
        target: PathBuf,
    },
    /// A classic bind mount.
    BindMount {
        /// Host path of the source.
        source: PathBuf,
        /// Container path of the mount point.
        target: PathBuf,
    },
    /// A classic remount of a bind mount.
    Remount {
        /// Container path of the mount point.
        target: PathBuf,
        /// The flags besides `MS_BIND | MS_REMOUNT`.
        flags: MsFlags,
    },
    /// `setfsgid` and `setfsuid`.
    FsIds {
        /// The uid set.
        uid: u32,
        /// The gid set.
        gid: u32,
    },
}

/// The recording fake: see the module docs.
#[derive(Debug)]
pub struct Recording {
    root: PathBuf,
    calls: RefCell<Vec<Call>>,
    /// Nodes made or seeded, by host path: what `stat_at` answers for them.
    nodes: RefCell<Vec<(PathBuf, Stat)>>,
    /// Calls to fail once, by the name [`Recording::fail_next`] takes.
    failures: RefCell<Vec<(&'static str, Errno)>>,
    /// The fs ids in force.
    fs_ids: RefCell<(u32, u32)>,
}

impl Recording {
    /// A fake over the rootfs at `root` (a temp dir of the test's).
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.canonicalize().expect("the test's rootfs exists"),
            calls: RefCell::new(Vec::new()),
            nodes: RefCell::new(Vec::new()),
            failures: RefCell::new(Vec::new()),
            fs_ids: RefCell::new((0, 0)),
        }
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    /// The calls that changed something (all but the fs ids switches), in order.
    pub fn changes(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| !matches!(c, Call::FsIds { .. }))
            .collect()
    }

    /// Puts a device node at container path `path` (its directory must exist) that only
    /// `stat_at` sees.
    pub fn seed_node(&self, path: &str, kind: SFlag, mode: u32, rdev: u64) {
        let host = self.root.join(path.trim_start_matches('/'));
        assert!(
            host.parent().is_some_and(Path::is_dir),
            "{path}: no directory"
        );
        self.nodes.borrow_mut().push((
            host,
            Stat {
                mode: kind.bits() | mode,
                rdev,
            },
        ));
    }

    /// Makes the next call named `op` (`"mkdir"`, `"mknod"`, `"chown"`, `"symlink"`, `"unlink"`,
    /// `"create"`, `"rename"`, `"move_mount"`, `"bind_mount"`, `"remount"`) fail with `errno`.
    pub fn fail_next(&self, op: &'static str, errno: Errno) {
        self.failures.borrow_mut().push((op, errno));
    }

    fn failure(&self, op: &str) -> nix::Result<()> {
        let mut failures = self.failures.borrow_mut();
        match failures.iter().position(|(o, _)| *o == op) {
            Some(i) => Err(failures.remove(i).1),
            None => Ok(()),
        }
    }

    fn record(&self, call: Call) {
        self.calls.borrow_mut().push(call);
    }

    /// The host path an fd names.
    fn host_path(fd: BorrowedFd<'_>) -> PathBuf {
        std::fs::read_link(devinject_hostfs::path_fd::proc_path(fd))
            .expect("the fd's path in /proc/self/fd")
    }

    /// The container path of `name` in `dir` (of the fd itself when `name` is empty).
    fn container(&self, dir: BorrowedFd<'_>, name: &OsStr) -> PathBuf {
        let host = Self::host_path(dir).join(name);
        self.shown(&host)
    }

    fn shown(&self, host: &Path) -> PathBuf {
        let rel = host
            .strip_prefix(&self.root)
            .unwrap_or_else(|_| panic!("{} is outside the test's rootfs", host.display()));
        Path::new("/").join(rel)
    }

    fn node_at(&self, host: &Path) -> Option<Stat> {
        let nodes = self.nodes.borrow();
        nodes.iter().find(|(p, _)| p == host).map(|(_, st)| *st)
    }
}

impl NsCalls for Recording {
    fn stat_at(&self, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<Stat> {
        match self.node_at(&Self::host_path(dir).join(name)) {
            Some(st) => Ok(st),
            None => Syscalls.stat_at(dir, name),
        }
    }

    fn mkdir_at(&self, dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> nix::Result<()> {
        self.record(Call::Mkdir {
            path: self.container(dir, name),
            mode,
        });
        self.failure("mkdir")?;
        Syscalls.mkdir_at(dir, name, mode)
    }

    fn mknod_at(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        kind: SFlag,
        mode: u32,
        rdev: u64,
    ) -> nix::Result<()> {
        self.record(Call::Mknod {
            path: self.container(dir, name),
            kind,
            mode,
            rdev,
        });
        self.failure("mknod")?;
        let host = Self::host_path(dir).join(name);
        if self.node_at(&host).is_some() || host.symlink_metadata().is_ok() {
            return Err(Errno::EEXIST);
        }
        self.nodes.borrow_mut().push((
            host,
            Stat {
                mode: kind.bits() | mode,
                rdev,
            },
        ));
        Ok(())
    }

    fn chown_at(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> nix::Result<()> {
        self.record(Call::Chown {
            path: self.container(dir, name),
            uid,
            gid,
            by_fd: false,
        });
        self.failure("chown")
    }

    fn chown_fd(&self, fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> nix::Result<()> {
        self.record(Call::Chown {
            path: self.container(fd, OsStr::new("")),
            uid,
            gid,
            by_fd: true,
        });
        self.failure("chown")
    }

    fn symlink_at(&self, target: &str, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()> {
        self.record(Call::Symlink {
            path: self.container(dir, name),
            target: target.to_owned(),
        });
        self.failure("symlink")?;
        Syscalls.symlink_at(target, dir, name)
    }

    fn unlink_at(&self, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()> {
        self.record(Call::Unlink {
            path: self.container(dir, name),
        });
        self.failure("unlink")?;
        let host = Self::host_path(dir).join(name);
        let mut nodes = self.nodes.borrow_mut();
        if let Some(i) = nodes.iter().position(|(p, _)| *p == host) {
            nodes.remove(i);
            return Ok(());
        }
        Syscalls.unlink_at(dir, name)
    }

    fn create_file(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
        write: bool,
    ) -> nix::Result<OwnedFd> {
        self.record(Call::Create {
            path: self.container(dir, name),
            mode,
            write,
        });
        self.failure("create")?;
        if self.node_at(&Self::host_path(dir).join(name)).is_some() {
            return Err(Errno::EEXIST);
        }
        Syscalls.create_file(dir, name, mode, write)
    }

    fn rename_at(&self, dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> nix::Result<()> {
        self.record(Call::Rename {
            from: self.container(dir, from),
            to: self.container(dir, to),
        });
        self.failure("rename")?;
        Syscalls.rename_at(dir, from, to)
    }

    fn move_mount(&self, _tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> nix::Result<()> {
        self.record(Call::MoveMount {
            target: self.shown(&Self::host_path(target)),
        });
        self.failure("move_mount")
    }

    fn bind_mount(&self, source: BorrowedFd<'_>, target: BorrowedFd<'_>) -> nix::Result<()> {
        self.record(Call::BindMount {
            source: Self::host_path(source.as_fd()),
            target: self.shown(&Self::host_path(target)),
        });
        self.failure("bind_mount")
    }

    fn remount_bind(&self, target: BorrowedFd<'_>, flags: MsFlags) -> nix::Result<()> {
        self.record(Call::Remount {
            target: self.shown(&Self::host_path(target)),
            flags,
        });
        self.failure("remount")
    }

    fn set_fs_ids(&self, uid: u32, gid: u32) -> (u32, u32) {
        self.record(Call::FsIds { uid, gid });
        self.fs_ids.replace((uid, gid))
    }
}

/// A rootfs over a new temp dir whose changes all go through a [`Recording`]: the temp dir (keep
/// it alive), the fake, and the rootfs.
pub fn fake_rootfs() -> (
    tempfile::TempDir,
    std::rc::Rc<Recording>,
    super::super::rootfs::Rootfs,
) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fake = std::rc::Rc::new(Recording::new(dir.path()));
    let root = super::super::rootfs::Rootfs::open(dir.path())
        .expect("open the temp rootfs")
        .with_calls(fake.clone());
    (dir, fake, root)
}
