//! Updating a container's `/etc/ld.so.cache` in place: read the image's, add the injected
//! libraries, write it back with a temp file and a rename. Runs in the injection child, in the
//! container's mount namespace; every path is resolved in-root ([`Rootfs`]), so an image's links
//! cannot lead the read or the write anywhere else.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use devinject_devices::{Mount, MountKind, Symlink};
use nix::errno::Errno;
use nix::sys::stat::Mode;

use super::{elf_flags, Cache, Library, Unsupported};
use crate::inject::ns_calls::NsCalls;
use crate::inject::rootfs::{Crossing, ReadError, Rootfs, RootfsError};

/// The cache, in the container.
pub const CACHE: &str = "/etc/ld.so.cache";
/// The temp name a new cache is written under before the rename.
const TEMP_NAME: &str = "ld.so.cache~devinject";
/// Larger caches are not read (ldconfig rebuilds them instead).
pub const MAX_CACHE_BYTES: u64 = 64 << 20;

/// What an update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Updated {
    /// A new cache is in place.
    Written,
    /// The cache already was what we would write (a container started again on its rootfs).
    AlreadyCurrent,
}

/// Why an update did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The image's cache is not one we merge into: ldconfig must rebuild it.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// Writing failed.
    #[error("cannot write {CACHE} in the container: {0}")]
    Write(#[from] RootfsError),
}

/// The cache entries the container needs for the libraries among `mounts`: each by its soname
/// link (among `links`), or by its file name when it has none, with the flags its host file's
/// ELF header gives. `None` when there is no library (only links and directories are known, as
/// from an older shim's or CDI spec's finish step): then only ldconfig can tell what the cache
/// needs.
pub fn libraries<'a>(
    mounts: impl IntoIterator<Item = &'a Mount>,
    links: &[Symlink],
) -> Option<Result<Vec<Library>, Unsupported>> {
    let libs: Vec<_> = mounts
        .into_iter()
        .filter(|m| m.kind == MountKind::Library)
        .collect();
    if libs.is_empty() {
        return None;
    }
    Some(libs.into_iter().try_fold(Vec::new(), |mut out, m| {
        out.extend(entries(m, links)?);
        Ok(out)
    }))
}

/// The cache entries of the library mounted by `m`: under its soname link (among `links`), or
/// its file name when it has none; then under its other names (a profile's `links`:
/// `libcuda.so`), links to its soname, as ldconfig lists a development link. All with the
/// flags of its host file's ELF header.
fn entries(m: &Mount, links: &[Symlink]) -> Result<Vec<Library>, Unsupported> {
    let lib = m.container_path.as_path();
    let unsupported = || Unsupported::Flags(m.host_path.display().to_string());
    let name_of = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .ok_or_else(unsupported)
    };
    let file_name = name_of(lib)?;
    let in_dir = |l: &&Symlink| l.link.parent() == lib.parent();
    let path = links
        .iter()
        .filter(in_dir)
        .find(|l| l.target == file_name)
        .map_or(lib, |l| l.link.as_path());
    let flags = elf_flags::read(&m.host_path).ok_or_else(unsupported)?;
    let soname = name_of(path)?;
    let others = links
        .iter()
        .filter(in_dir)
        .filter(|l| l.target == soname && l.link != path);
    let mut out = vec![Library {
        soname: soname.clone(),
        path: path.to_owned(),
        flags,
    }];
    for l in others {
        out.push(Library {
            soname: name_of(&l.link)?,
            path: l.link.clone(),
            flags,
        });
    }
    Ok(out)
}

/// Who may read a cache: its permission bits and owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// Adds `libs` to the container's cache (creating it when the image has none). The new cache
/// gets the old one's mode and owner: a cache the image kept from the container's user
/// (`0600 root`) stays so, rather than being handed to it readable.
pub fn update(root: &Rootfs, libs: &[Library]) -> Result<Updated, UpdateError> {
    let (old, access) =
        read_with_access(root, CACHE, Crossing::SameMount).map_err(UpdateError::Unsupported)?;
    let mut cache = Cache::parse(&old)?;
    cache.add(libs);
    let new = cache.to_bytes();
    if new == old {
        return Ok(Updated::AlreadyCurrent);
    }
    install(root, &new, access)?;
    Ok(Updated::Written)
}

/// Reads a regular file inside the rootfs, bounded; empty when there is none or it is not a
/// regular file where `crossing` allows. Nothing else is ever opened: a device node,
/// FIFO or socket the image put there is seen through an `O_PATH` fd and left alone, and a
/// link onto procfs, sysfs or a volume is not followed ([`Rootfs::open_regular`]). Larger than
/// [`MAX_CACHE_BYTES`] is [`Unsupported`]. `crossing`: see [`Rootfs::open_regular`].
pub fn read(root: &Rootfs, path: &str, crossing: Crossing) -> Result<Vec<u8>, Unsupported> {
    read_with_access(root, path, crossing).map(|(bytes, _)| bytes)
}

/// [`read`], with the file's [`Access`] when there was one.
fn read_with_access(
    root: &Rootfs,
    path: &str,
    crossing: Crossing,
) -> Result<(Vec<u8>, Option<Access>), Unsupported> {
    let file = match root.open_regular(Path::new(path), MAX_CACHE_BYTES, crossing) {
        Ok(Some(file)) => file,
        Ok(None) => return Ok((Vec::new(), None)),
        Err(ReadError::TooLarge { .. }) => return Err(Unsupported::Damaged("larger than 64 MiB")),
        Err(e) => {
            tracing::debug!(error = %e, "not read: replaced by a new cache");
            return Ok((Vec::new(), None));
        }
    };
    let access = nix::sys::stat::fstat(&file).ok().map(|st| Access {
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
    });
    let mut buf = Vec::new();
    file.take(MAX_CACHE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|_| Unsupported::Damaged("unreadable"))?;
    if buf.len() as u64 > MAX_CACHE_BYTES {
        return Err(Unsupported::Damaged("larger than 64 MiB"));
    }
    Ok((buf, access))
}

/// Puts `bytes` in place as `/etc/ld.so.cache`: a temp file in `/etc` (an image's file or link
/// by that name is removed, never followed, and ours is created `O_EXCL`, a new inode: a hard
/// link to a host file there is never written), then a rename, both on the `/etc` fd resolved
/// in-root on the rootfs's own mount ([`Rootfs::writable_dir`]: an `/etc` on a volume is
/// refused). No `fsync`: the cache lives in a throw-away layer, and ld.so ignores a truncated
/// one. `access`: the mode and owner to give it; `None`, `0644` and the creator's.
pub fn install(root: &Rootfs, bytes: &[u8], access: Option<Access>) -> Result<(), RootfsError> {
    let etc = root.writable_dir(Path::new("/etc"))?;
    let err = |op, errno| RootfsError {
        op,
        path: Path::new(CACHE).to_owned(),
        errno,
    };
    install_in(root.calls(), &etc, bytes, access).map_err(|e| err("write", e))
}

fn install_in(
    calls: &dyn NsCalls,
    etc: &OwnedFd,
    bytes: &[u8],
    access: Option<Access>,
) -> Result<(), Errno> {
    let temp = OsStr::new(TEMP_NAME);
    match calls.unlink_at(etc.as_fd(), temp) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(e),
    }
    let fd = calls.create_file(etc.as_fd(), temp, 0o644, true)?;
    let mut file = std::fs::File::from(fd);
    let written = file
        .write_all(bytes)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)));
    let mode = access.map_or(0o644, |a| a.mode);
    let moded = nix::sys::stat::fchmod(&file, Mode::from_bits_truncate(mode)).and_then(|()| {
        let Some(a) = access else { return Ok(()) };
        calls.chown_fd(file.as_fd(), Some(a.uid), Some(a.gid))
    });
    drop(file);
    if let Err(e) = written.and(moded) {
        let _ = calls.unlink_at(etc.as_fd(), temp);
        return Err(e);
    }
    calls
        .rename_at(etc.as_fd(), temp, OsStr::new("ld.so.cache"))
        .inspect_err(|_| {
            let _ = calls.unlink_at(etc.as_fd(), temp);
        })
}

#[cfg(test)]
mod tests {
    use super::super::super::ns_calls::recording::{fake_rootfs, Call};
    use super::*;

    const TEMP: &str = "/etc/ld.so.cache~devinject";

    fn unlink_temp() -> Call {
        Call::Unlink { path: TEMP.into() }
    }

    fn create_temp() -> Call {
        Call::Create {
            path: TEMP.into(),
            mode: 0o644,
            write: true,
        }
    }

    fn rename() -> Call {
        Call::Rename {
            from: TEMP.into(),
            to: CACHE.into(),
        }
    }

    #[test]
    fn a_new_cache_is_a_new_temp_file_given_the_old_owner_then_renamed() {
        let (t, fake, root) = fake_rootfs();
        let etc = t.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        std::fs::write(etc.join("ld.so.cache"), "old").unwrap();
        // A stale temp file of an earlier, killed start is removed, never written through.
        std::fs::write(etc.join("ld.so.cache~devinject"), "stale").unwrap();
        let access = Access {
            mode: 0o600,
            uid: 0,
            gid: 42,
        };
        install(&root, b"new", Some(access)).unwrap();
        let chown = Call::Chown {
            path: TEMP.into(),
            uid: Some(0),
            gid: Some(42),
            by_fd: true,
        };
        assert_eq!(
            fake.changes(),
            vec![unlink_temp(), create_temp(), chown, rename()]
        );
        assert_eq!(std::fs::read(etc.join("ld.so.cache")).unwrap(), b"new");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(etc.join("ld.so.cache"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o7777, 0o600);
    }

    #[test]
    fn a_cache_the_image_lacked_gets_no_owner_change() {
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir(t.path().join("etc")).unwrap();
        install(&root, b"new", None).unwrap();
        assert_eq!(fake.changes(), vec![unlink_temp(), create_temp(), rename()]);
    }

    #[test]
    fn a_failed_rename_leaves_the_old_cache_and_no_temp_file() {
        let (t, fake, root) = fake_rootfs();
        let etc = t.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        std::fs::write(etc.join("ld.so.cache"), "old").unwrap();
        fake.fail_next("rename", Errno::EIO);
        let err = install(&root, b"new", None).unwrap_err();
        assert!(err.to_string().contains("write /etc/ld.so.cache"), "{err}");
        assert_eq!(
            fake.changes(),
            vec![unlink_temp(), create_temp(), rename(), unlink_temp()]
        );
        assert_eq!(std::fs::read(etc.join("ld.so.cache")).unwrap(), b"old");
        assert!(!etc.join("ld.so.cache~devinject").exists());
    }
}
