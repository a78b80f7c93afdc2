//! Replacing host files atomically, at a path as this process names it.
//!
//! A daemon may read its configuration at any moment (containerd on restart, CRI-O on reload,
//! podman on every command), so a file is never seen half-written: the new content goes to a
//! temporary file in the same directory, is flushed with `fsync`, given the old file's mode and
//! owner, and renamed over the old one; the directory is then synced so the rename survives a
//! crash. This follows cargo's `paths::write_atomic`.
//!
//! These take a path as this process names it (the root `/`) and are
//! [`crate::host_dir::HostDir`] underneath: the final name is never followed, and only a
//! regular file with one link is replaced or removed.

use std::path::{Path, PathBuf};

use crate::error::Result;
pub use crate::host_dir::DEFAULT_FILE_MODE;
use crate::host_dir::{self, HostDir};

/// Atomically replaces (or creates) `path` with `contents`.
///
/// `mode`: the permission bits to give the file; `None` keeps the current file's mode, or
/// [`DEFAULT_FILE_MODE`] for a new file. The owner of an existing file is kept. The parent
/// directory must exist. A symlink, FIFO, device node, directory or hard link at `path` is an
/// error, left as it is ([`crate::HostFsError::NotAFile`]).
pub fn write_atomic(path: &Path, contents: &[u8], mode: Option<u32>) -> Result<()> {
    let (dir, name) = host_dir::split(path)?;
    existing_dir(&dir)?.write(name, contents, mode)
}

/// [`write_atomic`] of a file valid for this boot only, whose writer makes it again when it is
/// needed after a reboot (a container bundle's `config.json`, which the engine makes anew): the
/// same checks and atomic rename, without the fsyncs
/// ([`crate::host_dir::HostDir::write_for_this_boot`]). On tmpfs, where engines keep bundles
/// (`/run`), a sync is free; on a disk it cost the shim 0.5-12 ms per start (strace -T, ext4).
pub fn write_for_this_boot(path: &Path, contents: &[u8], mode: Option<u32>) -> Result<()> {
    let (dir, name) = host_dir::split(path)?;
    existing_dir(&dir)?.write_for_this_boot(name, contents, mode)
}

/// Removes `path` (which must exist and be a regular file with one link) and syncs its
/// directory.
pub fn remove(path: &Path) -> Result<()> {
    let (dir, name) = host_dir::split(path)?;
    if existing_dir(&dir)?.remove(name)? {
        Ok(())
    } else {
        Err(crate::HostFsError::io(
            "remove",
            path,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ))
    }
}

/// Creates `dir` and any missing parents with mode 0755; returns the directories that were
/// created, outermost first, so that they can be removed again.
pub fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let dir = absolute(dir);
    Ok(HostDir::create(Path::new("/"), &dir)?.1)
}

fn existing_dir(dir: &Path) -> Result<HostDir> {
    let dir = absolute(dir);
    HostDir::open(Path::new("/"), &dir)?.ok_or_else(|| {
        crate::HostFsError::io(
            "open directory",
            &dir,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        )
    })
}

/// `path` made absolute against the working directory (the fd-based layer starts at `/`).
fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn replaces_content_and_keeps_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("daemon.json");
        fs::write(&path, "{}").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        write_atomic(&path, b"{\"a\": 1}", None).expect("write_atomic");
        assert_eq!(fs::read_to_string(&path).expect("read"), "{\"a\": 1}");
        let mode = fs::metadata(&path).expect("stat").mode() & 0o7777;
        assert_eq!(mode, 0o600);
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("readdir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("daemon.json")]);
    }

    /// A bundle's `config.json` as the shim replaces it: content and mode as for
    /// `write_atomic`, and a link at the name refused, the link and its target left as they are.
    #[test]
    fn this_boot_replaces_like_write_atomic_and_refuses_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        fs::write(&path, "{}").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
        write_for_this_boot(&path, b"{\"ociVersion\": \"1.2.0\"}", None).expect("write");
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            "{\"ociVersion\": \"1.2.0\"}"
        );
        assert_eq!(fs::metadata(&path).expect("stat").mode() & 0o7777, 0o640);
        let target = dir.path().join("elsewhere");
        fs::write(&target, "kept").expect("write");
        let link = dir.path().join("linked.json");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let err = write_for_this_boot(&link, b"x", None).expect_err("a link is refused");
        assert!(err.to_string().contains("linked.json"), "{err}");
        assert_eq!(fs::read_to_string(&target).expect("read"), "kept");
        assert!(fs::symlink_metadata(&link)
            .expect("lstat")
            .file_type()
            .is_symlink());
    }

    #[test]
    fn new_file_gets_default_or_given_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        write_atomic(&a, b"x", None).expect("write");
        assert_eq!(
            fs::metadata(&a).expect("stat").mode() & 0o7777,
            DEFAULT_FILE_MODE
        );
        let b = dir.path().join("b");
        write_atomic(&b, b"x", Some(0o640)).expect("write");
        assert_eq!(fs::metadata(&b).expect("stat").mode() & 0o7777, 0o640);
    }

    #[test]
    fn missing_parent_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nope/file");
        let err = write_atomic(&path, b"x", None).expect_err("must fail");
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn create_dirs_reports_what_it_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let deep = dir.path().join("a/b/c");
        let made = create_dirs(&deep).expect("create");
        assert_eq!(
            made,
            vec![dir.path().join("a"), dir.path().join("a/b"), deep.clone()]
        );
        assert!(create_dirs(&deep).expect("again").is_empty());
    }
}
