//! The image's newer driver libraries, read in-root for the linker cache
//! ([`devinject_devices::forward_compat`]).
//!
//! The directory is the image's: it is resolved in-root on the rootfs's own mount (a link out
//! of the rootfs, onto procfs or onto a volume is not followed), listed up to
//! [`MAX_ENTRIES`] names, and only its regular files are opened, each beneath the listed
//! directory's fd (no link, no other mount) through an `O_PATH` fd first (a FIFO or a device
//! node named like a library is never opened). The ldconfig fallback is shown these same
//! files, through these fds ([`Newer`]). Of each library only
//! the ELF header and `DT_SONAME` are read. Links in the directory are not followed: the cache
//! names the real files, under their sonames.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use devinject_devices::forward_compat::major_of;
use devinject_devices::{Excerpt, ForwardCompat};
use devinject_discovery::elf_soname::soname_of;
use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};

use super::ld_so_cache::{elf_flags, Library};
use super::rootfs::{reopen_regular, Crossing, Regular, Rootfs};

/// The most names read from the directory: NVIDIA's holds about ten.
pub const MAX_ENTRIES: usize = 256;

/// Why the image's directory was not used.
#[derive(Debug, thiserror::Error)]
pub enum CompatError {
    /// It could not be opened as a directory on the rootfs's own mount.
    #[error("{dir}: cannot open it in the image ({errno}): it must be a directory of the image, not a link out of it or a volume")]
    Open {
        /// The directory.
        dir: PathBuf,
        errno: Errno,
    },
    /// It could not be listed.
    #[error("{dir}: cannot list it ({errno})")]
    List {
        /// The directory.
        dir: PathBuf,
        errno: Errno,
    },
    /// It holds more names than a driver's compat directory has.
    #[error("{dir}: more than {MAX_ENTRIES} entries: not a driver's compat directory")]
    TooMany {
        /// The directory.
        dir: PathBuf,
    },
}

/// The image's newer libraries as the hook verified them: the directory it listed, and each
/// library's cache entry with the file it read it from. The ldconfig fallback is shown only
/// these files, through these fds ([`super::ldconfig`]).
#[derive(Debug)]
pub struct Newer {
    /// The directory, as resolved in-root on the rootfs's own mount.
    pub dir: OwnedFd,
    /// Each library's cache entry and its open file, sorted by path.
    pub libraries: Vec<(Library, File)>,
}

/// The libraries of `fc`'s directory in the image, to list ahead of the host's, when its
/// deciding library is of a newer major version than the host's; `Ok(None)` when it is not (or
/// the image has no such directory).
pub fn newer_libraries(
    root: &Rootfs,
    fc: &ForwardCompat,
) -> Result<Option<Vec<Library>>, CompatError> {
    Ok(newer(root, fc)?.map(|n| n.libraries.into_iter().map(|(lib, _)| lib).collect()))
}

/// [`newer_libraries`] with the directory's fd and each library's open file.
pub fn newer(root: &Rootfs, fc: &ForwardCompat) -> Result<Option<Newer>, CompatError> {
    let Some((dir, names)) = regular_files(root, &fc.dir)? else {
        return Ok(None);
    };
    let image_major = names.iter().filter_map(|n| major_of(n, &fc.library)).max();
    match image_major {
        Some(major) if fc.prefers(major) => {}
        _ => return Ok(None),
    }
    let mut libraries: Vec<(Library, File)> = names
        .iter()
        .filter(|n| n.starts_with("lib") && n.contains(".so."))
        .filter_map(|n| library(&dir, &fc.dir, n))
        .collect();
    libraries.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    Ok(Some(Newer { dir, libraries }))
}

/// The directory `dir` (an fd of it) and the names of its regular files (by the entry's type;
/// links and others left out); `None` when the image has no `dir`.
fn regular_files(root: &Rootfs, dir: &Path) -> Result<Option<(OwnedFd, Vec<String>)>, CompatError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NONBLOCK;
    let fd = match root.resolve_with(dir, flags, Crossing::SameMount) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ENOENT => return Ok(None),
        Err(e) => {
            return Err(CompatError::Open {
                dir: dir.to_owned(),
                errno: e.errno,
            })
        }
    };
    let list = |errno| CompatError::List {
        dir: dir.to_owned(),
        errno,
    };
    let kept = fd
        .try_clone()
        .map_err(|e| list(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF))))?;
    let mut listing = Dir::from_fd(fd).map_err(list)?;
    let mut names = Vec::new();
    for (seen, entry) in listing.iter().enumerate() {
        if seen >= MAX_ENTRIES + 2 {
            return Err(CompatError::TooMany {
                dir: dir.to_owned(),
            });
        }
        let entry = entry.map_err(list)?;
        // A type the filesystem does not tell is read through the fd below, which opens
        // regular files only.
        if !matches!(entry.file_type(), Some(Type::File) | None) {
            continue;
        }
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        names.push(name.to_owned());
    }
    Ok(Some((kept, names)))
}

/// The cache entry of the library `name` in the directory `dir` (container path `shown`), and
/// its open file: its soname, its path, the flags of its ELF header. The entry is opened beneath
/// `dir` itself, never through a link or onto another mount. `None` for anything else (not a
/// regular file, not an ELF library we can flag, no soname).
fn library(dir: &OwnedFd, shown: &Path, name: &str) -> Option<(Library, File)> {
    let path = shown.join(name);
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        );
    let fd = match openat2(dir.as_fd(), name, how) {
        Ok(fd) => fd,
        Err(errno) => {
            tracing::debug!(path = %Excerpt(&path.to_string_lossy()), %errno, "not read as a compat library");
            return None;
        }
    };
    let file = match reopen_regular(&fd, u64::MAX) {
        Ok(Regular::File(file)) => file,
        Ok(_) => return None,
        Err((op, errno)) => {
            tracing::debug!(path = %Excerpt(&path.to_string_lossy()), op, %errno, "not read as a compat library");
            return None;
        }
    };
    let flags = elf_flags::of_file(&file)?;
    let soname = soname_of(&file)?;
    // A name ld.so looks up: a file name, no directory in it.
    if soname.is_empty() || soname.contains('/') {
        return None;
    }
    Some((
        Library {
            soname,
            path,
            flags,
        },
        file,
    ))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use nix::sys::stat::Mode;

    use super::*;

    fn fc(host_major: u32) -> ForwardCompat {
        ForwardCompat {
            dir: PathBuf::from("/usr/local/cuda/compat"),
            library: "libcuda.so".into(),
            host_major,
        }
    }

    /// An image with `files` in its compat directory, each a copy of the host's libc: a real
    /// ELF library whose `DT_SONAME` (`libc.so.6`) says the soname is read, not guessed.
    fn image(files: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("usr/local/cuda/compat");
        std::fs::create_dir_all(&dir).unwrap();
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("the host's libc (Debian layout)");
        for f in files {
            std::fs::copy(libc, dir.join(f)).unwrap();
        }
        (t, dir)
    }

    #[test]
    fn a_newer_major_lists_the_directory_s_libraries_under_their_sonames() {
        let (t, dir) = image(&[
            "libcuda.so.545.23.08",
            "libnvidia-ptxjitcompiler.so.545.23.08",
        ]);
        symlink("libcuda.so.545.23.08", dir.join("libcuda.so.1")).unwrap();
        std::fs::write(dir.join("README"), "not a library").unwrap();
        let root = Rootfs::open(t.path()).unwrap();
        let libs = newer_libraries(&root, &fc(535)).unwrap().unwrap();
        let paths: Vec<_> = libs.iter().map(|l| l.path.clone()).collect();
        assert_eq!(
            paths,
            [
                Path::new("/usr/local/cuda/compat/libcuda.so.545.23.08"),
                Path::new("/usr/local/cuda/compat/libnvidia-ptxjitcompiler.so.545.23.08"),
            ],
            "real files only, not the link"
        );
        // The soname is the file's own DT_SONAME (here libc's), never guessed from the name.
        assert!(libs.iter().all(|l| l.soname == "libc.so.6"), "{libs:?}");
        assert_eq!(Some(libs[0].flags), elf_flags::NATIVE);
    }

    #[test]
    fn the_same_or_an_older_major_or_no_directory_is_nothing() {
        let (t, _dir) = image(&["libcuda.so.535.216.01"]);
        let root = Rootfs::open(t.path()).unwrap();
        assert_eq!(newer_libraries(&root, &fc(535)).unwrap(), None);
        assert_eq!(newer_libraries(&root, &fc(550)).unwrap(), None);
        let empty = tempfile::tempdir().unwrap();
        let root = Rootfs::open(empty.path()).unwrap();
        assert_eq!(newer_libraries(&root, &fc(535)).unwrap(), None);
    }

    #[test]
    fn a_link_out_of_the_image_is_not_followed() {
        // The directory a link to the host's: resolved in-root, it is the image's own path,
        // which does not exist.
        let host = image(&["libcuda.so.999.1.1"]);
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("usr/local/cuda")).unwrap();
        symlink(&host.1, t.path().join("usr/local/cuda/compat")).unwrap();
        let root = Rootfs::open(t.path()).unwrap();
        assert_eq!(newer_libraries(&root, &fc(535)).unwrap(), None);
    }

    #[test]
    fn a_fifo_named_like_the_library_is_never_opened() {
        let (t, dir) = image(&[]);
        nix::unistd::mkfifo(
            &dir.join("libcuda.so.999.1.1"),
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let root_path = t.path().to_owned();
        std::thread::spawn(move || {
            let root = Rootfs::open(&root_path).unwrap();
            tx.send(newer_libraries(&root, &fc(535)).map_err(|e| e.to_string()))
                .unwrap();
        });
        let seen = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("a FIFO must not be opened");
        // Not a regular file: its name counts for nothing, and nothing is preferred.
        assert_eq!(seen, Ok(None));
    }

    #[test]
    fn a_directory_of_thousands_of_names_is_refused_bounded() {
        let (t, dir) = image(&["libcuda.so.999.1.1"]);
        for i in 0..(MAX_ENTRIES + 10) {
            std::fs::write(dir.join(format!("f{i}")), "").unwrap();
        }
        let root = Rootfs::open(t.path()).unwrap();
        let err = newer_libraries(&root, &fc(535)).unwrap_err();
        assert!(err.to_string().contains("more than 256 entries"), "{err}");
    }

    #[test]
    fn a_file_where_the_directory_should_be_is_an_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("usr/local/cuda")).unwrap();
        std::fs::write(t.path().join("usr/local/cuda/compat"), "").unwrap();
        let root = Rootfs::open(t.path()).unwrap();
        let err = newer_libraries(&root, &fc(535)).unwrap_err();
        assert!(err.to_string().contains("/usr/local/cuda/compat"), "{err}");
    }
}
