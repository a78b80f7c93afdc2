//! Host directories through fds: the one way devinject's host-side tools read, replace and remove a host file
//! (CDI specs, hooks.d files, drop-ins, the state file, the engines' own configuration).
//!
//! # Why
//! Opened by path, a symlink at one of `cdi generate`'s own spec names would be written through
//! (with `--root DIR` the link's target, inside the root, overwritten or deleted; with `--root /`
//! the link replaced: the two would disagree), a FIFO there would block `open` for ever (and hang
//! the `--watch` refresher), and a device node there would be opened. Whoever can put an entry into
//! a spec directory, a hooks.d directory or a drop-in directory (another tool, a pod with a
//! hostPath volume) must not steer what devinject does as root with it.
//!
//! # Rules
//! - **Directories** are opened with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` against
//!   an fd of the root prefix: the host's own links are followed as the host follows them, never
//!   out of the prefix. `--root /` takes the very same path (the fd of `/`), so both agree.
//! - **The final name is never followed and nothing is opened before its type is known**: the
//!   entry is looked at with `fstatat(AT_SYMLINK_NOFOLLOW)` / `O_PATH | O_NOFOLLOW` + `fstat`;
//!   a regular file is read through a non-blocking reopen of that same inode
//!   (`/proc/self/fd`), within [`MAX_FILE_BYTES`]. A symlink, FIFO, socket, device node or
//!   directory there is [`HostFsError::NotAFile`], naming the path, what it is and the
//!   fix: it is neither followed, opened, replaced nor removed.
//! - **Our own names** ([`Name::Ours`], and every name we replace or remove) hold a regular file
//!   with one link, or nothing: a hard link there is another file's too (its content must not
//!   reach a diff, a report or the state file), so it is refused as well.
//! - **Writes** go to a temporary file created `O_CREAT | O_EXCL | O_NOFOLLOW` in the directory
//!   fd, are fsynced, given the old file's mode and owner, and `renameat` over the name; the
//!   directory is fsynced. A file that lives only until the node reboots
//!   ([`HostDir::write_for_this_boot`]) skips both fsyncs: a crashing process leaves the page
//!   cache as it was, and what a reboot loses its writer makes again. **Removal** is `unlinkat`
//!   of a regular file only.
//!
//! Whether a link *at* a host path is followed is decided before this layer, by resolving the
//! path ([`crate::host_root::resolve_in_root`]): only for the engine's own configuration file,
//! which an administrator may keep elsewhere and link into place; never for our own names.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, renameat, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fchmod, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fchown, unlinkat, Gid, Uid, UnlinkatFlags};

use crate::error::{HostFsError, Result};
use crate::file_kind;
use crate::path_fd::{Follow, PathFd, Reopen};

/// Mode given to files that did not exist before.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// The largest host file read: configuration files and specs are far smaller; anything larger
/// at one of these names is not what we look for.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// How often a resolution raced by a host-wide rename or mount (EAGAIN) is retried.
const RESOLVE_RETRIES: u32 = 128;

/// Whose name a file has: what may be found there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// A name devinject owns (a spec, the hooks.d file, a drop-in, the state file): a regular
    /// file with one link, or nothing.
    Ours,
    /// Another program's file (the engine's configuration, another tool's drop-in): a regular
    /// file, or nothing.
    Theirs,
}

/// What is at a name in a [`HostDir`] (the name itself, not followed).
#[derive(Debug)]
pub enum Entry {
    /// Nothing.
    Missing,
    /// A regular file, with what `fstatat` said of it.
    File(FileStat),
    /// Anything else: what it is, in words.
    Other(&'static str),
}

/// A host directory, opened inside the root prefix.
#[derive(Debug)]
pub struct HostDir {
    fd: OwnedFd,
    /// The directory as this process names it (the root prefix joined with the host path), for
    /// messages.
    shown: PathBuf,
}

impl HostDir {
    /// Opens the host directory `host` below `root` (see the module docs); `None` when it does
    /// not exist.
    pub fn open(root: &Path, host: &Path) -> Result<Option<HostDir>> {
        let root_fd = open_root(root)?;
        let shown = under(root, host);
        match resolve(&root_fd, host) {
            Ok(fd) => Ok(Some(HostDir { fd, shown })),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io("open directory", &shown, e)),
        }
    }

    /// Opens the host directory `host` below `root`, creating it and its missing parents (mode
    /// 0755). Returns it and the directories created (host paths, outermost first).
    pub fn create(root: &Path, host: &Path) -> Result<(HostDir, Vec<PathBuf>)> {
        let root_fd = open_root(root)?;
        let mut created = Vec::new();
        let mut cur = PathBuf::from("/");
        let mut parent = resolve(&root_fd, &cur).map_err(|e| io("open directory", root, e))?;
        for comp in normal(host) {
            cur.push(comp);
            let fd = match resolve(&root_fd, &cur) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => {
                    match mkdirat(parent.as_fd(), comp, Mode::from_bits_truncate(0o755)) {
                        Ok(()) => {
                            created.push(cur.clone());
                            // The umask applied; the mode is exact.
                            let fd = resolve(&root_fd, &cur)
                                .map_err(|e| io("open directory", under(root, &cur), e))?;
                            fchmod(fd.as_fd(), Mode::from_bits_truncate(0o755))
                                .map_err(|e| io("set the mode of", under(root, &cur), e))?;
                            fd
                        }
                        // A dangling link there: it is not ours to replace.
                        Err(e) => return Err(io("create directory", under(root, &cur), e)),
                    }
                }
                Err(e) => return Err(io("open directory", under(root, &cur), e)),
            };
            parent = fd;
        }
        Ok((
            HostDir {
                fd: parent,
                shown: under(root, host),
            },
            created,
        ))
    }

    /// The directory as this process names it.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// `name` in this directory as this process names it.
    pub fn shown(&self, name: &OsStr) -> PathBuf {
        self.shown.join(name)
    }

    /// What is at `name` (not followed).
    pub fn entry(&self, name: &OsStr) -> Result<Entry> {
        match fstatat(self.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if file_kind::of(&st) == SFlag::S_IFREG => Ok(Entry::File(st)),
            Ok(st) => Ok(Entry::Other(file_kind::name(file_kind::of(&st)))),
            Err(Errno::ENOENT) => Ok(Entry::Missing),
            Err(e) => Err(io("stat", self.shown(name), e)),
        }
    }

    /// The regular file at `name` when `whose` allows what is there; `None` when nothing is.
    fn checked(&self, name: &OsStr, whose: Name) -> Result<Option<FileStat>> {
        match self.entry(name)? {
            Entry::Missing => Ok(None),
            Entry::File(st) if whose == Name::Ours && st.st_nlink > 1 => {
                Err(self.not_a_file(name, "hard link (the file has other names)"))
            }
            Entry::File(st) => Ok(Some(st)),
            Entry::Other(what) => Err(self.not_a_file(name, what)),
        }
    }

    fn not_a_file(&self, name: &OsStr, what: &'static str) -> HostFsError {
        HostFsError::NotAFile {
            path: self.shown(name),
            what,
        }
    }

    /// Reads the text file at `name`; `None` when there is nothing. Anything but a regular file
    /// (and, for [`Name::Ours`], one with one link) is refused unopened.
    pub fn read(&self, name: &OsStr, whose: Name) -> Result<Option<String>> {
        let Some((bytes, _)) = self.read_bytes(name, whose, MAX_FILE_BYTES)? else {
            return Ok(None);
        };
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| HostFsError::NotText {
                path: self.shown(name),
            })
    }

    /// Reads the file at `name` as bytes, at most `max` of them, with what `fstat` said of the
    /// inode read; `None` when there is nothing. The same checks as [`HostDir::read`]; for
    /// callers whose files are not text or may be larger (the installer's binaries and their
    /// backups).
    pub fn read_bytes(
        &self,
        name: &OsStr,
        whose: Name,
        max: u64,
    ) -> Result<Option<(Vec<u8>, FileStat)>> {
        let shown = self.shown(name);
        if self.checked(name, whose)?.is_none() {
            return Ok(None);
        }
        let held = match PathFd::at(Some(self.fd.as_fd()), Path::new(name), Follow::No) {
            Ok(held) => held,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(io("open", &shown, e)),
        };
        // The O_PATH fd names one inode: check it again (the name may have changed since the
        // look above), then reopen that inode, never the name.
        let st = *held.stat();
        if !held.is_regular() {
            return Err(self.not_a_file(name, held.kind_name()));
        }
        if whose == Name::Ours && st.st_nlink > 1 {
            return Err(self.not_a_file(name, "hard link (the file has other names)"));
        }
        let size = held.size();
        if size > max {
            return Err(HostFsError::TooLarge {
                path: shown,
                size,
                max,
            });
        }
        let file = held
            .reopen(Reopen::Read)
            .map_err(|e| io("reopen", &shown, e))?;
        let mut bytes = Vec::new();
        file.take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| HostFsError::io("read", &shown, e))?;
        if bytes.len() as u64 > max {
            return Err(HostFsError::TooLarge {
                path: shown,
                size: bytes.len() as u64,
                max,
            });
        }
        Ok(Some((bytes, st)))
    }

    /// Replaces (or creates) the file at `name` with `contents` atomically (see the module
    /// docs). `mode`: the permission bits; `None` keeps the current file's, or
    /// [`DEFAULT_FILE_MODE`] for a new file. The owner of an existing file
    /// is kept. Only a regular file with one link is replaced.
    pub fn write(&self, name: &OsStr, contents: &[u8], mode: Option<u32>) -> Result<()> {
        self.write_owned(name, contents, mode, None)
    }

    /// [`HostDir::write`] of a file that is valid for this boot of the node only, whose writer
    /// makes it again after a reboot (a DRA claim's CDI spec and device metadata): the same
    /// checks and atomic rename, without the fsyncs. Readers in this boot see the new file
    /// whole or the old one, as with [`HostDir::write`]; only a crash of the kernel could lose
    /// it, and the node then boots again.
    pub fn write_for_this_boot(
        &self,
        name: &OsStr,
        contents: &[u8],
        mode: Option<u32>,
    ) -> Result<()> {
        self.write_with(name, contents, mode, None, Durability::ThisBoot)
    }

    /// [`HostDir::write`], the new file owned by `owner` (uid, gid) instead of the current
    /// file's owner: for putting back a file saved earlier, whoever owns the name now.
    pub fn write_owned(
        &self,
        name: &OsStr,
        contents: &[u8],
        mode: Option<u32>,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        self.write_with(name, contents, mode, owner, Durability::Synced)
    }

    fn write_with(
        &self,
        name: &OsStr,
        contents: &[u8],
        mode: Option<u32>,
        owner: Option<(u32, u32)>,
        durability: Durability,
    ) -> Result<()> {
        let shown = self.shown(name);
        if name.is_empty() || name.as_bytes().contains(&b'/') || name == ".." || name == "." {
            return Err(HostFsError::io(
                "write",
                &shown,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
            ));
        }
        let existing = self.checked(name, Name::Ours)?;
        let mode = mode
            .or_else(|| existing.as_ref().map(|st| st.st_mode & 0o7777))
            .unwrap_or(DEFAULT_FILE_MODE);
        let owner = owner.or_else(|| existing.as_ref().map(|st| (st.st_uid, st.st_gid)));
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(".devinject-tmp-{}", std::process::id()));
        let result = self
            .write_temp(&tmp, contents, mode, owner, durability)
            .and_then(|()| {
                // Checked again right before the rename: what is there now is still ours to
                // replace.
                self.checked(name, Name::Ours)?;
                renameat(self.fd.as_fd(), tmp.as_os_str(), self.fd.as_fd(), name)
                    .map_err(|e| io("rename temporary file onto", &shown, e))
            });
        if result.is_err() {
            // Best effort: the temporary file is ours and useless now.
            let _ = unlinkat(self.fd.as_fd(), tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
            return result;
        }
        match durability {
            Durability::Synced => self.sync(),
            Durability::ThisBoot => Ok(()),
        }
    }

    fn write_temp(
        &self,
        tmp: &OsStr,
        contents: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
        durability: Durability,
    ) -> Result<()> {
        let shown = self.shown(tmp);
        let fd = openat(
            self.fd.as_fd(),
            tmp,
            OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_NOCTTY
                | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )
        .map_err(|e| io("create temporary file", &shown, e))?;
        let mut file = File::from(fd);
        file.write_all(contents)
            .map_err(|e| HostFsError::io("write temporary file", &shown, e))?;
        // The umask applied to `mode` above; set the exact bits.
        fchmod(file.as_fd(), Mode::from_bits_truncate(mode))
            .map_err(|e| io("set the mode of", &shown, e))?;
        if let Some((uid, gid)) = owner {
            // Only root can give a file away; keep the owner when we can, and do not fail when
            // the file already belongs to us.
            match fchown(
                file.as_fd(),
                Some(Uid::from_raw(uid)),
                Some(Gid::from_raw(gid)),
            ) {
                Ok(()) | Err(Errno::EPERM) => {}
                Err(e) => return Err(io("set the owner of", &shown, e)),
            }
        }
        match durability {
            Durability::Synced => file
                .sync_all()
                .map_err(|e| HostFsError::io("fsync temporary file", &shown, e)),
            Durability::ThisBoot => Ok(()),
        }
    }

    /// Removes the regular file (one link) at `name` and syncs the directory. Returns whether
    /// there was one; anything else there is refused and left.
    pub fn remove(&self, name: &OsStr) -> Result<bool> {
        if self.checked(name, Name::Ours)?.is_none() {
            return Ok(false);
        }
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => {}
            Err(Errno::ENOENT) => return Ok(false),
            Err(e) => return Err(io("remove", self.shown(name), e)),
        }
        self.sync()?;
        Ok(true)
    }

    /// Removes the socket at `name` (a server's that died without removing it) and syncs the
    /// directory. Returns whether there was one; anything else there is left as it is.
    pub fn remove_socket(&self, name: &OsStr) -> Result<bool> {
        self.remove_of_kind(name, SFlag::S_IFSOCK, UnlinkatFlags::NoRemoveDir, "remove")
    }

    /// Removes the directory `name` when it is empty; a missing, non-empty or non-directory
    /// entry is left as it is. Returns whether it went.
    pub fn remove_empty_dir(&self, name: &OsStr) -> Result<bool> {
        self.remove_of_kind(
            name,
            SFlag::S_IFDIR,
            UnlinkatFlags::RemoveDir,
            "remove directory",
        )
    }

    /// Unlinks `name` when `fstatat` (not following a link) finds it of `kind`, then syncs the
    /// directory; `false` when it is missing, of another kind, or (a directory) not empty.
    fn remove_of_kind(
        &self,
        name: &OsStr,
        kind: SFlag,
        flags: UnlinkatFlags,
        what: &'static str,
    ) -> Result<bool> {
        match fstatat(self.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if file_kind::of(&st) == kind => {}
            Ok(_) | Err(Errno::ENOENT) => return Ok(false),
            Err(e) => return Err(io("stat", self.shown(name), e)),
        }
        match unlinkat(self.fd.as_fd(), name, flags) {
            Ok(()) => {
                self.sync()?;
                Ok(true)
            }
            Err(Errno::ENOENT | Errno::ENOTEMPTY | Errno::EEXIST) => Ok(false),
            Err(e) => Err(io(what, self.shown(name), e)),
        }
    }

    /// fsync(2) of the directory, so a rename or unlink survives a crash.
    fn sync(&self) -> Result<()> {
        nix::unistd::fsync(self.fd.as_fd()).map_err(|e| io("fsync directory", &self.shown, e))
    }
}

/// Whether a write reaches the disk before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// The file and the directory are fsynced: the file survives a crash of the kernel.
    Synced,
    /// Neither is: the file lives until the node reboots ([`HostDir::write_for_this_boot`]).
    ThisBoot,
}

/// The parent directory (host path) and final name of the host path `host`.
pub fn split(host: &Path) -> Result<(PathBuf, &OsStr)> {
    match (host.parent(), host.file_name()) {
        (Some(dir), Some(name)) => Ok((dir.to_path_buf(), name)),
        _ => Err(HostFsError::io(
            "use",
            host,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
        )),
    }
}

/// Reads the file at host path `host` below `root` ([`HostDir::read`]); `None` when it or its
/// directory does not exist.
pub fn read(root: &Path, host: &Path, whose: Name) -> Result<Option<String>> {
    let (dir, name) = split(host)?;
    match HostDir::open(root, &dir)? {
        Some(d) => d.read(name, whose),
        None => Ok(None),
    }
}

/// What is at host path `host` below `root` (not followed); [`Entry::Missing`] when its
/// directory does not exist either.
pub fn entry(root: &Path, host: &Path) -> Result<Entry> {
    let (dir, name) = split(host)?;
    match HostDir::open(root, &dir)? {
        Some(d) => d.entry(name),
        None => Ok(Entry::Missing),
    }
}

fn open_root(root: &Path) -> Result<OwnedFd> {
    nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("open the root directory", root, e))
}

/// Opens the directory at host path `host` inside the root `root_fd`.
fn resolve(root_fd: &OwnedFd, host: &Path) -> std::result::Result<OwnedFd, Errno> {
    let rel: PathBuf = normal(host).collect();
    let rel = if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel
    };
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let mut tries = 0;
    loop {
        match openat2(root_fd.as_fd(), &rel, how) {
            Err(Errno::EAGAIN) if tries < RESOLVE_RETRIES => tries += 1,
            other => return other,
        }
    }
}

/// The components of `path` that name something (`/` and `.` dropped, `..` kept for the kernel
/// to resolve inside the root).
fn normal(path: &Path) -> impl Iterator<Item = &OsStr> {
    path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n),
        Component::ParentDir => Some(OsStr::new("..")),
        _ => None,
    })
}

fn under(root: &Path, host: &Path) -> PathBuf {
    root.join(host.strip_prefix("/").unwrap_or(host))
}

fn io(op: &'static str, path: impl Into<PathBuf>, errno: Errno) -> HostFsError {
    HostFsError::io(op, path, std::io::Error::from(errno))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    #[test]
    fn a_link_at_the_name_is_refused_and_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("canary"), "c").expect("write");
        symlink("/canary", dir.path().join("x")).expect("symlink");
        let d = HostDir::open(dir.path(), Path::new("/"))
            .expect("open")
            .expect("exists");
        for err in [
            d.write(OsStr::new("x"), b"new", None).expect_err("write"),
            d.write_for_this_boot(OsStr::new("x"), b"new", None)
                .expect_err("write for this boot"),
            d.read(OsStr::new("x"), Name::Theirs).expect_err("read"),
            d.remove(OsStr::new("x")).expect_err("remove"),
        ] {
            let msg = err.to_string();
            assert!(
                msg.contains("symbolic link") && msg.contains("remove it"),
                "{msg}"
            );
        }
        assert_eq!(
            std::fs::read(dir.path().join("canary")).expect("read"),
            b"c"
        );
        assert!(dir.path().join("x").is_symlink());
    }

    #[test]
    fn a_hard_link_is_refused_for_our_names_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("canary"), "c").expect("write");
        std::fs::hard_link(dir.path().join("canary"), dir.path().join("x")).expect("link");
        let d = HostDir::open(dir.path(), Path::new("/"))
            .expect("open")
            .expect("exists");
        assert_eq!(
            d.read(OsStr::new("x"), Name::Theirs).expect("theirs"),
            Some("c".into())
        );
        assert!(d.read(OsStr::new("x"), Name::Ours).is_err());
        assert!(d.write(OsStr::new("x"), b"new", None).is_err());
        assert_eq!(
            std::fs::metadata(dir.path().join("canary"))
                .expect("stat")
                .nlink(),
            2
        );
    }

    #[test]
    fn a_write_for_this_boot_replaces_the_file_whole_with_its_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("spec.json"), "old").expect("write");
        let d = HostDir::open(dir.path(), Path::new("/"))
            .expect("open")
            .expect("exists");
        d.write_for_this_boot(OsStr::new("spec.json"), b"new", Some(0o640))
            .expect("write");
        let path = dir.path().join("spec.json");
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        assert_eq!(
            std::fs::metadata(&path).expect("stat").mode() & 0o7777,
            0o640
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["spec.json"], "no temporary file left");
    }

    #[test]
    fn directories_resolve_inside_the_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("real")).expect("mkdir");
        symlink("/../../real", dir.path().join("l")).expect("symlink");
        let d = HostDir::open(dir.path(), Path::new("/l"))
            .expect("open")
            .expect("exists");
        d.write(OsStr::new("f"), b"x", Some(0o600)).expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("real/f")).expect("read"),
            b"x"
        );
        let (_, made) = HostDir::create(dir.path(), Path::new("/a/b")).expect("create");
        assert_eq!(made, vec![PathBuf::from("/a"), PathBuf::from("/a/b")]);
        assert!(dir.path().join("a/b").is_dir());
    }
}
