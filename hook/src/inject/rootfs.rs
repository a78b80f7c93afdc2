//! Safe path operations inside a hostile rootfs.
//!
//! Every path is resolved with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` against an fd
//! of the rootfs, so symlinks and `..` in the image resolve as if the rootfs were `/` and can
//! never reach the host (CVE-2024-0132, CVE-2025-23267, runc CVE-2024-21626 class). Directories
//! are created one component at a time with `mkdirat` on the fd of the parent that was just
//! resolved, and the final file is handled with `*at` calls on that parent fd with
//! `AT_SYMLINK_NOFOLLOW` / `O_NOFOLLOW`: no step re-resolves a path the image could have swapped.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};

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
#[derive(Debug)]
pub struct Rootfs {
    fd: OwnedFd,
    path: PathBuf,
    /// Host uid and gid of the container's root in a user namespace: files created on a
    /// filesystem mounted inside that namespace (the runtime's `/dev` tmpfs) must belong to an
    /// id mapped there, or the kernel refuses with EOVERFLOW.
    userns_owner: Option<(u32, u32)>,
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
            userns_owner: None,
        })
    }

    /// Sets the owner used for creations that the kernel refuses to root (see the field).
    pub fn with_userns_owner(mut self, owner: Option<(u32, u32)>) -> Self {
        self.userns_owner = owner;
        self
    }

    /// Runs a creating `*at` call; on EOVERFLOW (a filesystem mounted in the container's user
    /// namespace, where host root is unmapped) retries it as the container's root.
    pub fn create<T>(&self, f: impl Fn() -> nix::Result<T>) -> nix::Result<T> {
        match (f(), self.userns_owner) {
            (Err(Errno::EOVERFLOW), Some((uid, gid))) => {
                let old_gid = nix::unistd::setfsgid(nix::unistd::Gid::from_raw(gid));
                let old_uid = nix::unistd::setfsuid(nix::unistd::Uid::from_raw(uid));
                let r = f();
                nix::unistd::setfsuid(old_uid);
                nix::unistd::setfsgid(old_gid);
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
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let rel = rel(path);
        let mut tries = 0;
        loop {
            match openat2(self.fd.as_fd(), &rel, how) {
                Err(Errno::EAGAIN) if tries < RESOLVE_RETRIES => tries += 1,
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
    /// but is not a directory (or a link to one) is an error, never replaced.
    pub fn mkdir_all(&self, dir: &Path) -> Result<OwnedFd, RootfsError> {
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY;
        let mut cur = PathBuf::from("/");
        let mut fd = self.resolve(&cur, flags)?;
        for comp in normal_components(dir)? {
            cur.push(comp);
            match self.resolve(&cur, flags) {
                Ok(next) => fd = next,
                Err(e) if e.errno == Errno::ENOENT => {
                    match self.create(|| mkdirat(fd.as_fd(), comp, Mode::from_bits_truncate(0o755)))
                    {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(errno) => {
                            return Err(RootfsError {
                                op: "mkdir",
                                path: cur,
                                errno,
                            })
                        }
                    }
                    fd = self.resolve(&cur, flags)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(fd)
    }
}

/// What is at `name` in the directory `dir` (symlinks not followed).
pub fn entry_at(dir: impl AsFd, name: &OsStr, shown: &Path) -> Result<Entry, RootfsError> {
    match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
            Ok(match kind {
                SFlag::S_IFREG => Entry::File,
                SFlag::S_IFDIR => Entry::Dir,
                SFlag::S_IFLNK => Entry::Symlink,
                SFlag::S_IFCHR | SFlag::S_IFBLK => Entry::Device {
                    kind,
                    rdev: st.st_rdev,
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

    #[test]
    fn split_refuses_dotdot() {
        assert!(split(Path::new("/a/../b")).is_err());
        let (p, n) = split(Path::new("/usr/lib/libx.so")).unwrap();
        assert_eq!((p, n), (PathBuf::from("/usr/lib"), OsStr::new("libx.so")));
    }
}
