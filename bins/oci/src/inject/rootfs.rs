//! Safe path operations inside a hostile rootfs.
//!
//! Every path is resolved with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` against an fd
//! of the rootfs, so symlinks and `..` in the image resolve as if the rootfs were `/` and can
//! never reach the host (CVE-2024-0132, CVE-2025-23267, runc CVE-2024-21626 class). Directories
//! are created one component at a time with `mkdirat` on the fd of the parent that was just
//! resolved, and the final file is handled with `*at` calls on that parent fd with
//! `AT_SYMLINK_NOFOLLOW` / `O_NOFOLLOW`: no step re-resolves a path the image could have swapped.
//!
//! # Security
//!
//! The rules every operation here follows as root (nothing is opened before its type is known,
//! reads and writes stay on the rootfs's own filesystem, device nodes go onto the container's
//! own tmpfs, a shared read-only rootfs is never written), why, and the tests that fail without
//! them: docs/security.md, "Nothing in the image can make us touch the host" and its threat
//! table.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use devinject_hostfs::file_kind;
use devinject_hostfs::path_fd::{self, Reopen};
use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

use super::ns_calls::{NsCalls, Syscalls};

/// How often a resolution raced by a host-wide rename or mount (EAGAIN) is retried.
const RESOLVE_RETRIES: u32 = 128;

/// An error on a path inside the rootfs. Resolution errors say what in the image likely caused
/// them, since that is what the user has to fix.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path} in the container rootfs: {errno}{}", hint(op, *errno))]
pub struct RootfsError {
    /// What was being done.
    pub op: &'static str,
    /// The container path.
    pub path: PathBuf,
    /// The kernel's answer.
    pub errno: Errno,
}

fn hint(op: &str, errno: Errno) -> &'static str {
    match (op, errno) {
        (_, Errno::EXDEV) => {
            " (this path leads onto another mount, e.g. a volume, where devinject does not write as root: mount the volume elsewhere, or give the image this directory)"
        }
        (_, Errno::EROFS) => {
            " (the spec makes the rootfs read-only, and it is a plain directory, not a filesystem mounted for this container alone: other containers may run from it, so devinject writes nothing into it; put this path in the image, or give the container a writable layer of its own)"
        }
        ("resolve", Errno::ELOOP) => {
            " (a symlink in the image on this path loops or leads through /proc: fix the image)"
        }
        ("resolve", Errno::ENOENT) => {
            " (a symlink in the image on this path leads nowhere inside the rootfs: fix the image)"
        }
        (_, Errno::ENOTDIR) => " (the image has a file where a directory belongs: fix the image)",
        _ => "",
    }
}

/// Why [`Rootfs::open_regular`] did not open a file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path could not be resolved or the inode reopened.
    #[error(transparent)]
    Rootfs(#[from] RootfsError),
    /// Something other than a regular file is there: it is never opened.
    #[error("{path} in the container rootfs is a {what}, not a regular file; devinject never opens it (fix the image)")]
    NotRegular {
        /// The container path.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// The file is larger than the caller reads.
    #[error("{path} in the container rootfs is {size} bytes long, over the {max} bytes devinject reads (fix the image)")]
    TooLarge {
        /// The container path.
        path: PathBuf,
        size: u64,
        /// The bound.
        max: u64,
    },
}

/// What is at a name inside a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Nothing.
    Missing,
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symlink (not followed).
    Symlink,
    /// A char or block device with this `st_rdev` and type bits.
    Device {
        /// `S_IFCHR` or `S_IFBLK`.
        kind: SFlag,
        /// `st_rdev`.
        rdev: u64,
    },
    /// A FIFO, socket or anything else.
    Other,
}

/// An open rootfs.
pub struct Rootfs {
    fd: OwnedFd,
    path: PathBuf,
    /// The calls that change the tree ([`Syscalls`], or a test's recording fake).
    calls: Rc<dyn NsCalls>,
    /// Host uid and gid of the container's root in a user namespace: files created on a
    /// filesystem mounted inside that namespace (the runtime's `/dev` tmpfs) must belong to an
    /// id mapped there, or the kernel refuses with EOVERFLOW.
    userns_owner: Option<(u32, u32)>,
    /// The device numbers of the host's mounts: a node's directory off the rootfs's own mount
    /// must be on a tmpfs with none of them ([`Rootfs::node_dir`]).
    host_devs: Vec<(u32, u32)>,
    /// Every write is refused: see [`Rootfs::shared_read_only`].
    read_only: bool,
    /// Directories [`Rootfs::mkdir_all`] has opened, by normalised container path and whether
    /// they were resolved without crossing a mount. A plan puts every library and soname link in
    /// one directory: resolving it from the root again for each (one `openat2` per component)
    /// was ~400 path walks at 64 libraries. Holding the fd is also what the `*at` calls want:
    /// the directory cannot be swapped under us.
    dirs: RefCell<Vec<(PathBuf, Crossing, OwnedFd)>>,
}

impl std::fmt::Debug for Rootfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rootfs")
            .field("path", &self.path)
            .field("userns_owner", &self.userns_owner)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// Whether a resolution may cross onto another mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossing {
    /// Anywhere inside the rootfs (reads; device nodes in the runtime's `/dev` tmpfs).
    Allowed,
    /// Only the rootfs's own mount (`RESOLVE_NO_XDEV`): what the hook reads, and where it
    /// writes files.
    SameMount,
    /// Each directory on the rootfs's own mount or on a tmpfs only the container's mount
    /// namespace holds: where device nodes go ([`Rootfs::node_dir`]).
    NodeDir,
}

impl Rootfs {
    /// Opens the rootfs directory (trusted path from the runtime).
    pub fn open(path: &Path) -> Result<Self, RootfsError> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| RootfsError {
            op: "open rootfs",
            path: path.to_owned(),
            errno,
        })?;
        Ok(Self {
            fd,
            path: path.to_owned(),
            calls: Rc::new(Syscalls),
            userns_owner: None,
            host_devs: Vec::new(),
            read_only: false,
            dirs: RefCell::new(Vec::new()),
        })
    }

    /// Makes every change through `calls` instead of the kernel's own calls: a unit test's
    /// recording fake.
    pub fn with_calls(mut self, calls: Rc<dyn NsCalls>) -> Self {
        self.calls = calls;
        self
    }

    /// The calls that change the tree: every creation, replacement, owner change and mount in
    /// the rootfs goes through them.
    pub fn calls(&self) -> &dyn NsCalls {
        &*self.calls
    }

    /// Sets the device numbers of the host's mounts, for [`Rootfs::node_dir`].
    pub fn with_host_filesystems(mut self, host_devs: Vec<(u32, u32)>) -> Self {
        self.host_devs = host_devs;
        self
    }

    /// Refuses every write into the rootfs (`EROFS`, with the fix in the message): for a
    /// read-only rootfs that is not a mount of its own. The runtime makes the rootfs read-only
    /// only after the hooks, and a plain directory may be the image several containers run
    /// from: a placeholder, link or cache written there would show up in all of them.
    pub fn shared_read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Sets the owner used for creations that the kernel refuses to root (see the field).
    pub fn with_userns_owner(mut self, owner: Option<(u32, u32)>) -> Self {
        self.userns_owner = owner;
        self
    }

    /// Runs a creating `*at` call; on EOVERFLOW (a filesystem mounted in the container's user
    /// namespace, where host root is unmapped) retries it as the container's root.
    pub fn create<T>(&self, f: impl Fn(&dyn NsCalls) -> nix::Result<T>) -> nix::Result<T> {
        let calls = self.calls();
        match (f(calls), self.userns_owner) {
            (Err(Errno::EOVERFLOW), Some((uid, gid))) => {
                let (old_uid, old_gid) = calls.set_fs_ids(uid, gid);
                let r = f(calls);
                calls.set_fs_ids(old_uid, old_gid);
                r
            }
            (r, _) => r,
        }
    }

    /// The rootfs's host path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Resolves `path` (container-absolute) inside the rootfs.
    ///
    /// The kernel answers EAGAIN when a rename or mount anywhere on the host raced the walk
    /// (it cannot then prove the result stayed inside the root); that is retried a bounded
    /// number of times, as libpathrs does.
    pub fn resolve(&self, path: &Path, flags: OFlag) -> Result<OwnedFd, RootfsError> {
        self.resolve_with(path, flags, Crossing::Allowed)
    }

    /// [`Rootfs::resolve`], refusing to cross a mount when `crossing` says so (`EXDEV`).
    pub fn resolve_with(
        &self,
        path: &Path,
        flags: OFlag,
        crossing: Crossing,
    ) -> Result<OwnedFd, RootfsError> {
        let mut resolve = ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS;
        if crossing == Crossing::SameMount {
            resolve |= ResolveFlag::RESOLVE_NO_XDEV;
        }
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .resolve(resolve);
        let rel = rel(path);
        let mut tries = 0;
        loop {
            match openat2(self.fd.as_fd(), &rel, how) {
                Err(Errno::EAGAIN) if tries < RESOLVE_RETRIES => tries += 1,
                // The walk met a mount. When the path is unusable anyway (a link through /proc,
                // a dangling one), that is the error worth telling the image's author.
                Err(Errno::EXDEV) if crossing == Crossing::SameMount => {
                    self.resolve_with(path, flags, Crossing::Allowed)?;
                    return Err(RootfsError {
                        op: "resolve",
                        path: path.to_owned(),
                        errno: Errno::EXDEV,
                    });
                }
                other => {
                    return other.map_err(|errno| RootfsError {
                        op: "resolve",
                        path: path.to_owned(),
                        errno,
                    })
                }
            }
        }
    }

    /// True when `dir` resolves to a directory inside the rootfs.
    pub fn is_dir(&self, dir: &Path) -> bool {
        self.resolve(dir, OFlag::O_PATH | OFlag::O_DIRECTORY)
            .is_ok()
    }

    /// Opens directory `dir`, creating missing components (mode 0755). A component that exists
    /// but is not a directory (or a link to one) is an error, never replaced. May cross mounts:
    /// for device nodes, which go into the runtime's `/dev` tmpfs.
    pub fn mkdir_all(&self, dir: &Path) -> Result<OwnedFd, RootfsError> {
        self.mkdir_all_with(dir, Crossing::Allowed)
    }

    /// [`Rootfs::mkdir_all`] for a directory the hook writes files into: every component,
    /// existing or created, must be on the rootfs's own mount (see the module docs).
    pub fn writable_dir(&self, dir: &Path) -> Result<OwnedFd, RootfsError> {
        self.refuse_when_read_only(dir)?;
        self.mkdir_all_with(dir, Crossing::SameMount)
    }

    /// [`Rootfs::mkdir_all`] for the directory of a device node: every component, existing or
    /// created, must be on the rootfs's own mount (writable) or on a tmpfs whose device number
    /// no host mount has, which only the container's mount namespace holds: the runtime's
    /// `/dev`. A volume over `/dev` or below it (a host directory, a host tmpfs) is refused
    /// before anything is made in it, so no node of ours ever lands in a host directory.
    pub fn node_dir(&self, dir: &Path) -> Result<OwnedFd, RootfsError> {
        let fd = self.mkdir_all_with(dir, Crossing::NodeDir)?;
        self.refuse_write_unless_container_tmpfs(&fd, dir)?;
        Ok(fd)
    }

    fn refuse_when_read_only(&self, dir: &Path) -> Result<(), RootfsError> {
        if self.read_only {
            return Err(RootfsError {
                op: "write into",
                path: dir.to_owned(),
                errno: Errno::EROFS,
            });
        }
        Ok(())
    }

    /// Whether the directory `fd` (at `path`) is on a tmpfs whose device number no host mount
    /// has: one only the container's mount namespace holds (the runtime's `/dev`).
    fn on_container_tmpfs(&self, fd: &OwnedFd, path: &Path) -> Result<bool, RootfsError> {
        let err = |op, errno| RootfsError {
            op,
            path: path.to_owned(),
            errno,
        };
        let st = fstat(fd).map_err(|e| err("stat", e))?;
        let fs = nix::sys::statfs::fstatfs(fd).map_err(|e| err("statfs", e))?;
        let dev = (
            devinject_devices::node::major(st.st_dev),
            devinject_devices::node::minor(st.st_dev),
        );
        Ok(fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC && !self.host_devs.contains(&dev))
    }

    /// For [`Crossing::NodeDir`]: whether the directory `fd` (at `path`) may lead to a node:
    /// on the container's own tmpfs, or on the image's filesystem.
    fn check_node_dir(&self, fd: &OwnedFd, path: &Path) -> Result<(), RootfsError> {
        if self.on_container_tmpfs(fd, path)? {
            return Ok(());
        }
        self.resolve_with(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY,
            Crossing::SameMount,
        )
        .map(drop)
        .map_err(|e| RootfsError {
            op: "create device nodes in",
            ..e
        })
    }

    /// With [`Rootfs::shared_read_only`], refuses a write into the directory `fd` unless it is
    /// on the container's own tmpfs.
    fn refuse_write_unless_container_tmpfs(
        &self,
        fd: &OwnedFd,
        path: &Path,
    ) -> Result<(), RootfsError> {
        if self.read_only && !self.on_container_tmpfs(fd, path)? {
            return self.refuse_when_read_only(path);
        }
        Ok(())
    }

    fn mkdir_all_with(&self, dir: &Path, crossing: Crossing) -> Result<OwnedFd, RootfsError> {
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY;
        let comps = normal_components(dir)?;
        let mut cur = PathBuf::from("/");
        if let Some(fd) = self.cached(&cur.join(comps.iter().collect::<PathBuf>()), crossing)? {
            return Ok(fd);
        }
        // A node's directories are resolved wherever they lead, then each is checked.
        let resolve = |path: &Path| -> Result<OwnedFd, RootfsError> {
            if crossing != Crossing::NodeDir {
                return self.resolve_with(path, flags, crossing);
            }
            let fd = self.resolve_with(path, flags, Crossing::Allowed)?;
            self.check_node_dir(&fd, path)?;
            Ok(fd)
        };
        let mut fd = match self.cached(&cur, crossing)? {
            Some(fd) => fd,
            None => self.remember(&cur, crossing, resolve(&cur)?)?,
        };
        for comp in comps {
            cur.push(comp);
            if let Some(next) = self.cached(&cur, crossing)? {
                fd = next;
                continue;
            }
            let next = match resolve(&cur) {
                Ok(next) => next,
                Err(e) if e.errno == Errno::ENOENT => {
                    self.refuse_write_unless_container_tmpfs(&fd, &cur)?;
                    match self.create(|calls| calls.mkdir_at(fd.as_fd(), comp, 0o755)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(errno) => {
                            return Err(RootfsError {
                                op: "mkdir",
                                path: cur,
                                errno,
                            })
                        }
                    }
                    resolve(&cur)?
                }
                Err(e) => return Err(e),
            };
            fd = self.remember(&cur, crossing, next)?;
        }
        Ok(fd)
    }

    /// Opens the regular file at `path` for reading, at most `max` bytes long, without ever
    /// opening anything else: see the module docs. `crossing`: [`Crossing::SameMount`] for
    /// every file of the image (never procfs, sysfs or a volume); [`Crossing::Allowed`] only for
    /// a file on a mount of our own. `Ok(None)` when there is nothing at `path` (or a link
    /// there leads nowhere).
    pub fn open_regular(
        &self,
        path: &Path,
        max: u64,
        crossing: Crossing,
    ) -> Result<Option<File>, ReadError> {
        let fd = match self.resolve_with(path, OFlag::O_PATH, crossing) {
            Ok(fd) => fd,
            Err(e) if e.errno == Errno::ENOENT => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let seen = reopen_regular(&fd, max).map_err(|(op, errno)| RootfsError {
            op,
            path: path.to_owned(),
            errno,
        })?;
        match seen {
            Regular::File(file) => Ok(Some(file)),
            Regular::Other(mode) => Err(ReadError::NotRegular {
                path: path.to_owned(),
                what: file_kind::name(file_kind::of_mode(mode)),
            }),
            Regular::TooLarge(size) => Err(ReadError::TooLarge {
                path: path.to_owned(),
                size,
                max,
            }),
        }
    }

    /// A duplicate of the fd of directory `path` when [`Rootfs::mkdir_all`] opened it before,
    /// resolved at least as strictly as `crossing` asks.
    fn cached(&self, path: &Path, crossing: Crossing) -> Result<Option<OwnedFd>, RootfsError> {
        let dirs = self.dirs.borrow();
        let Some((_, _, fd)) = dirs
            .iter()
            .find(|(p, c, _)| p == path && (*c == crossing || *c == Crossing::SameMount))
        else {
            return Ok(None);
        };
        dup(fd, path).map(Some)
    }

    /// Keeps `fd` as directory `path` and returns a duplicate of it.
    fn remember(
        &self,
        path: &Path,
        crossing: Crossing,
        fd: OwnedFd,
    ) -> Result<OwnedFd, RootfsError> {
        let copy = dup(&fd, path)?;
        self.dirs.borrow_mut().push((path.to_owned(), crossing, fd));
        Ok(copy)
    }
}

/// What an `O_PATH` fd names, seen through [`reopen_regular`].
#[derive(Debug)]
pub enum Regular {
    /// A regular file, opened for reading.
    File(File),
    /// Anything else, with its mode: not opened.
    Other(u32),
    /// A regular file over the caller's bound, with its length: not opened.
    TooLarge(u64),
}

/// Opens for reading the inode the `O_PATH` fd `fd` names, only when `fstat` shows a regular file
/// of at most `max` bytes: the same inode reopened ([`devinject_hostfs::path_fd`]). A FIFO or
/// a device node is never opened (an open can block, or act on the device). On error, the step
/// that failed.
pub fn reopen_regular(fd: &OwnedFd, max: u64) -> Result<Regular, (&'static str, Errno)> {
    let st = fstat(fd).map_err(|e| ("stat", e))?;
    if file_kind::of(&st) != SFlag::S_IFREG {
        return Ok(Regular::Other(st.st_mode));
    }
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if size > max {
        return Ok(Regular::TooLarge(size));
    }
    let file = path_fd::reopen(fd, Reopen::Read).map_err(|e| ("reopen", e))?;
    Ok(Regular::File(file))
}

fn dup(fd: &OwnedFd, path: &Path) -> Result<OwnedFd, RootfsError> {
    fd.try_clone().map_err(|e| RootfsError {
        op: "duplicate the fd of",
        path: path.to_owned(),
        errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
    })
}

/// What is at `name` in the directory `dir` (symlinks not followed), as `calls` sees it.
pub fn entry_at(
    calls: &dyn NsCalls,
    dir: impl AsFd,
    name: &OsStr,
    shown: &Path,
) -> Result<Entry, RootfsError> {
    match calls.stat_at(dir.as_fd(), name) {
        Ok(st) => {
            let kind = file_kind::of_mode(st.mode);
            Ok(match kind {
                SFlag::S_IFREG => Entry::File,
                SFlag::S_IFDIR => Entry::Dir,
                SFlag::S_IFLNK => Entry::Symlink,
                SFlag::S_IFCHR | SFlag::S_IFBLK => Entry::Device {
                    kind,
                    rdev: st.rdev,
                },
                _ => Entry::Other,
            })
        }
        Err(Errno::ENOENT) => Ok(Entry::Missing),
        Err(errno) => Err(RootfsError {
            op: "stat",
            path: shown.to_owned(),
            errno,
        }),
    }
}

/// Opens `name` in `dir` as an `O_PATH` fd without following a final symlink.
pub fn open_nofollow(dir: impl AsFd, name: &OsStr, shown: &Path) -> Result<OwnedFd, RootfsError> {
    openat(
        dir.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| RootfsError {
        op: "open",
        path: shown.to_owned(),
        errno,
    })
}

/// Splits a container-absolute path into its parent and final name, refusing `..`, `.` tricks
/// and empty names.
pub fn split(path: &Path) -> Result<(PathBuf, &OsStr), RootfsError> {
    let comps = normal_components(path)?;
    let Some((name, parents)) = comps.split_last() else {
        return Err(RootfsError {
            op: "use",
            path: path.to_owned(),
            errno: Errno::EINVAL,
        });
    };
    let mut parent = PathBuf::from("/");
    parent.extend(parents);
    Ok((parent, name))
}

fn normal_components(path: &Path) -> Result<Vec<&OsStr>, RootfsError> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(RootfsError {
                    op: "use path with `..`",
                    path: path.to_owned(),
                    errno: Errno::EINVAL,
                })
            }
        }
    }
    Ok(out)
}

fn rel(path: &Path) -> PathBuf {
    let s = path.strip_prefix("/").unwrap_or(path);
    if s.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        // An absolute link to a host path and a relative one climbing out of the root.
        symlink("/etc", root.join("etc")).unwrap();
        symlink("../../../../../../tmp", root.join("usr/lib/up")).unwrap();
        let r = Rootfs::open(&root).unwrap();
        // /etc -> "/etc" inside the root does not exist: creating under it makes root/etc/...
        // only if the link target resolves inside; here it resolves to root/etc itself (a
        // link to itself) which fails cleanly, never touching the host's /etc.
        let e = r.mkdir_all(Path::new("/etc/devinject-test"));
        assert!(e.is_err());
        assert!(!Path::new("/etc/devinject-test").exists());
        // The climbing link lands on the rootfs's own /tmp, created inside the root.
        r.mkdir_all(Path::new("/tmp")).unwrap();
        r.mkdir_all(Path::new("/usr/lib/up/x")).unwrap();
        assert!(root.join("tmp/x").is_dir());
    }

    #[test]
    fn directories_are_resolved_once_and_reused() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("usr")).unwrap();
        // /usr/lib is a link inside the image: it resolves in-root, once.
        std::os::unix::fs::symlink("/opt/lib", t.path().join("usr/lib")).unwrap();
        let r = Rootfs::open(t.path()).unwrap();
        let a = r.mkdir_all(Path::new("/opt/lib")).unwrap();
        let b = r.mkdir_all(Path::new("/usr/lib/")).unwrap();
        let c = r.mkdir_all(Path::new("/usr/lib")).unwrap();
        let ino = |fd: &OwnedFd| nix::sys::stat::fstat(fd).unwrap().st_ino;
        assert_eq!(ino(&a), ino(&b));
        assert_eq!(ino(&b), ino(&c));
        assert_eq!(
            r.dirs.borrow().len(),
            5,
            "/, /opt, /opt/lib, /usr, /usr/lib"
        );
        // A writable directory is resolved again without crossing mounts, then reused.
        let d = r.writable_dir(Path::new("/usr/lib")).unwrap();
        assert_eq!(ino(&d), ino(&a));
        assert_eq!(r.dirs.borrow().len(), 8, "/, /usr, /usr/lib once more");
        r.writable_dir(Path::new("/usr/lib")).unwrap();
        r.mkdir_all(Path::new("/usr/lib")).unwrap();
        assert_eq!(r.dirs.borrow().len(), 8);
    }

    #[test]
    fn files_where_dirs_are_expected_are_errors() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("usr")).unwrap();
        std::fs::write(t.path().join("usr/lib"), "").unwrap();
        let r = Rootfs::open(t.path()).unwrap();
        let err = r.mkdir_all(Path::new("/usr/lib/x")).unwrap_err();
        assert_eq!(err.errno, Errno::ENOTDIR);
        assert!(
            err.to_string().contains("a file where a directory belongs"),
            "{err}"
        );
    }

    #[test]
    fn dangling_links_are_errors_that_say_so() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("usr")).unwrap();
        symlink("/nowhere/lib", t.path().join("usr/lib")).unwrap();
        let r = Rootfs::open(t.path()).unwrap();
        let err = r.mkdir_all(Path::new("/usr/lib")).unwrap_err();
        assert_eq!(err.errno, Errno::ENOENT);
        assert!(
            err.to_string().contains("leads nowhere inside the rootfs"),
            "{err}"
        );
        assert!(!Path::new("/nowhere").exists());
    }

    /// A mount made by a test on the host, detached again when dropped.
    struct TestMount(PathBuf);

    impl TestMount {
        fn tmpfs(at: &Path) -> Self {
            std::fs::create_dir_all(at).unwrap();
            nix::mount::mount(
                Some("tmpfs"),
                at,
                Some("tmpfs"),
                nix::mount::MsFlags::empty(),
                Some("size=1m"),
            )
            .unwrap();
            Self(at.to_owned())
        }

        fn bind(source: &Path, at: &Path) -> Self {
            std::fs::create_dir_all(at).unwrap();
            nix::mount::mount(
                Some(source),
                at,
                None::<&str>,
                nix::mount::MsFlags::MS_BIND | nix::mount::MsFlags::MS_REC,
                None::<&str>,
            )
            .unwrap();
            Self(at.to_owned())
        }

        fn dev(&self) -> (u32, u32) {
            dev_of(&self.0)
        }
    }

    /// The device number of the filesystem `path` is on. The filesystem a test's temporary
    /// directory is on is a host mount, which [`Rootfs::with_host_filesystems`] must list as the
    /// host's mountinfo would: where it is a tmpfs (as under scripts/test.sh), a directory there
    /// would otherwise pass for the container's own tmpfs.
    fn dev_of(path: &Path) -> (u32, u32) {
        let st = nix::sys::stat::stat(path).unwrap();
        (
            devinject_devices::node::major(st.st_dev),
            devinject_devices::node::minor(st.st_dev),
        )
    }

    impl Drop for TestMount {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }

    /// `/etc/ld.so.cache -> /proc/kmsg` would have the hook read, as root, a regular file of
    /// procfs. What the hook reads of the image resolves on the rootfs's own filesystem only:
    /// procfs, sysfs and volumes are refused before anything is opened.
    #[test]
    fn reads_stay_on_the_rootfs_own_filesystem() {
        if !devinject_testkit::require_root() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/own"), "image\n").unwrap();
        let _proc = TestMount::bind(Path::new("/proc"), &root.join("proc"));
        let vol = TestMount::tmpfs(&root.join("vol"));
        std::fs::write(vol.0.join("file"), "volume\n").unwrap();
        for (name, target) in [
            ("kmsg", "/proc/kmsg"),
            ("version", "/proc/version"),
            ("volume", "/vol/file"),
        ] {
            symlink(target, root.join("etc").join(name)).unwrap();
        }
        symlink("own", root.join("etc/link-to-own")).unwrap();
        let r = Rootfs::open(&root).unwrap();
        for name in ["kmsg", "version", "volume"] {
            let path = Path::new("/etc").join(name);
            match r.open_regular(&path, 1 << 20, Crossing::SameMount) {
                Err(ReadError::Rootfs(e)) => assert_eq!(e.errno, Errno::EXDEV, "{name}: {e}"),
                other => panic!("{name} was read: {other:?}"),
            }
        }
        let mut own = r
            .open_regular(Path::new("/etc/link-to-own"), 1 << 20, Crossing::SameMount)
            .unwrap()
            .expect("a file of the image");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut own, &mut text).unwrap();
        assert_eq!(text, "image\n");
    }

    /// A volume over `/dev/<dir>` would get the hook's `0666` nodes in its host directory. A node's
    /// directory is on the image's filesystem or on a tmpfs no host mount shows (the runtime's
    /// `/dev`); anything else is refused before a directory is made in it.
    #[test]
    fn node_directories_are_the_container_tmpfs_or_the_image() {
        if !devinject_testkit::require_root() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        std::fs::create_dir_all(root.join("image-dev")).unwrap();
        let dev = TestMount::tmpfs(&root.join("dev"));
        let host_dir = t.path().join("host-dir");
        std::fs::create_dir_all(&host_dir).unwrap();
        let _vol = TestMount::bind(&host_dir, &dev.0.join("vol"));
        let host_tmpfs = TestMount::tmpfs(&t.path().join("host-tmpfs"));
        let _shown = TestMount::bind(&host_tmpfs.0, &dev.0.join("shown"));

        // The tmpfs is the container's when no host mount has its device number.
        let others = vec![host_tmpfs.dev(), dev_of(t.path())];
        let r = Rootfs::open(&root).unwrap().with_host_filesystems(others);
        r.node_dir(Path::new("/dev/demo")).unwrap();
        r.node_dir(Path::new("/image-dev/demo")).unwrap();
        assert!(root.join("dev/demo").is_dir() && root.join("image-dev/demo").is_dir());
        for (dir, made) in [
            ("/dev/vol/demo", host_dir.join("demo")),
            ("/dev/shown/demo", host_tmpfs.0.join("demo")),
        ] {
            let err = r.node_dir(Path::new(dir)).unwrap_err();
            assert_eq!(err.errno, Errno::EXDEV, "{dir}: {err}");
            assert!(
                err.to_string().contains("another mount, e.g. a volume"),
                "{err}"
            );
            assert!(!made.exists(), "{dir}: made {}", made.display());
        }
        // The same tmpfs, when the host shows it, is a volume too.
        let r = Rootfs::open(&root)
            .unwrap()
            .with_host_filesystems(vec![dev.dev(), dev_of(t.path())]);
        let err = r.node_dir(Path::new("/dev/other")).unwrap_err();
        assert_eq!(err.errno, Errno::EXDEV, "{err}");
        assert!(!root.join("dev/other").exists());
    }

    /// A read-only rootfs that may be shared is never written, while the container's own `/dev`
    /// tmpfs still takes its nodes.
    #[test]
    fn a_shared_read_only_rootfs_refuses_every_write_and_says_why() {
        if !devinject_testkit::require_root() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        let _dev = TestMount::tmpfs(&root.join("dev"));
        let r = Rootfs::open(&root)
            .unwrap()
            .with_host_filesystems(vec![dev_of(t.path())])
            .shared_read_only();
        for dir in ["/usr/lib", "/etc", "/usr/lib/new"] {
            let err = r.writable_dir(Path::new(dir)).unwrap_err();
            assert_eq!(err.errno, Errno::EROFS, "{dir}");
            assert!(err.to_string().contains("writes nothing into it"), "{err}");
        }
        let err = r.node_dir(Path::new("/image-dev")).unwrap_err();
        assert_eq!(err.errno, Errno::EROFS, "{err}");
        r.node_dir(Path::new("/dev/demo")).unwrap();
        assert!(!root.join("etc").exists() && !root.join("image-dev").exists());
        assert!(!root.join("usr/lib/new").exists());
    }

    #[test]
    fn missing_directories_are_made_one_mkdirat_each_and_only_those() {
        use super::super::ns_calls::recording::{fake_rootfs, Call};
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir_all(t.path().join("usr")).unwrap();
        root.mkdir_all(Path::new("/usr/lib/x86_64-linux-gnu"))
            .unwrap();
        root.writable_dir(Path::new("/usr/lib/x86_64-linux-gnu"))
            .unwrap();
        let mkdir = |p: &str| Call::Mkdir {
            path: p.into(),
            mode: 0o755,
        };
        assert_eq!(
            fake.changes(),
            vec![mkdir("/usr/lib"), mkdir("/usr/lib/x86_64-linux-gnu")]
        );
        // A shared read-only rootfs is refused before any call.
        let (_t, fake, root) = fake_rootfs();
        let root = root.shared_read_only();
        let err = root.writable_dir(Path::new("/etc")).unwrap_err();
        assert_eq!(err.errno, Errno::EROFS);
        assert_eq!(fake.calls(), vec![]);
    }

    #[test]
    fn split_refuses_dotdot() {
        assert!(split(Path::new("/a/../b")).is_err());
        let (p, n) = split(Path::new("/usr/lib/libx.so")).unwrap();
        assert_eq!((p, n), (PathBuf::from("/usr/lib"), OsStr::new("libx.so")));
    }
}
