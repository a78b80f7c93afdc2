//! Replacing host files atomically.
//!
//! A daemon may read its configuration at any moment (containerd on restart, CRI-O on reload,
//! podman on every command), so a file is never seen half-written: the new content goes to a
//! temporary file in the same directory, is flushed with `fsync`, given the old file's mode and
//! owner, and renamed over the old one; the directory is then synced so the rename survives a
//! crash. This follows cargo's `paths::write_atomic`.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Result, RuntimeConfigError};

/// Mode given to files that did not exist before.
pub const DEFAULT_FILE_MODE: u32 = 0o644;

/// Atomically replaces (or creates) `path` with `contents`.
///
/// `mode`: the permission bits to give the file; `None` keeps the current file's mode, or
/// [`DEFAULT_FILE_MODE`] for a new file. The owner of an existing file is kept. The parent
/// directory must exist.
pub fn write_atomic(path: &Path, contents: &[u8], mode: Option<u32>) -> Result<()> {
    let dir = parent_of(path);
    let name = path
        .file_name()
        .ok_or_else(|| {
            RuntimeConfigError::io(
                "write",
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
            )
        })?
        .to_string_lossy()
        .into_owned();
    let existing = match fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(RuntimeConfigError::io("stat", path, e)),
    };
    let mode = mode
        .or_else(|| existing.as_ref().map(|m| m.mode() & 0o7777))
        .unwrap_or(DEFAULT_FILE_MODE);

    let tmp = dir.join(format!(".{name}.devinject-tmp-{}", std::process::id()));
    let result = write_temp(&tmp, contents, mode, existing.as_ref()).and_then(|()| {
        fs::rename(&tmp, path)
            .map_err(|e| RuntimeConfigError::io("rename temporary file onto", path, e))
    });
    if result.is_err() {
        // Best effort: the temporary file is ours and useless now.
        let _ = fs::remove_file(&tmp);
        return result;
    }
    sync_dir(&dir)
}

fn write_temp(
    tmp: &Path,
    contents: &[u8],
    mode: u32,
    existing: Option<&fs::Metadata>,
) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)
        .map_err(|e| RuntimeConfigError::io("create temporary file", tmp, e))?;
    file.write_all(contents)
        .map_err(|e| RuntimeConfigError::io("write temporary file", tmp, e))?;
    // The umask applied to `mode` above; set the exact bits.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| RuntimeConfigError::io("set the mode of", tmp, e))?;
    if let Some(meta) = existing {
        let (uid, gid) = (meta.uid(), meta.gid());
        // Only root can give a file away; keep the owner when we can, and do not fail when the
        // file already belongs to us.
        if let Err(e) = std::os::unix::fs::fchown(&file, Some(uid), Some(gid)) {
            if e.kind() != std::io::ErrorKind::PermissionDenied {
                return Err(RuntimeConfigError::io("set the owner of", tmp, e));
            }
        }
    }
    file.sync_all()
        .map_err(|e| RuntimeConfigError::io("fsync temporary file", tmp, e))
}

/// Removes `path` (which must exist) and syncs its directory.
pub fn remove(path: &Path) -> Result<()> {
    fs::remove_file(path).map_err(|e| RuntimeConfigError::io("remove", path, e))?;
    sync_dir(&parent_of(path))
}

/// Creates `dir` and any missing parents with mode 0755; returns the directories that were
/// created, outermost first, so that they can be removed again.
pub fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.as_os_str().is_empty() || d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cur = d.parent();
    }
    missing.reverse();
    for d in &missing {
        fs::DirBuilder::new()
            .mode(0o755)
            .create(d)
            .map_err(|e| RuntimeConfigError::io("create directory", d, e))?;
    }
    Ok(missing)
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    let d = fs::File::open(dir).map_err(|e| RuntimeConfigError::io("open directory", dir, e))?;
    d.sync_all()
        .map_err(|e| RuntimeConfigError::io("fsync directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

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
