//! Device nodes for tests that simulate a host's `/dev` (as root).

use std::path::Path;

/// Makes the character device node `path` with `major:minor` (and its parent directories),
/// with `mknod`'s default mode; panics naming the path when it cannot.
pub fn mknod_char(path: &Path, major: u32, minor: u32) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
    }
    let status = std::process::Command::new("mknod")
        .arg(path)
        .arg("c")
        .arg(major.to_string())
        .arg(minor.to_string())
        .status()
        .unwrap_or_else(|e| panic!("run mknod: {e}"));
    assert!(status.success(), "mknod {}", path.display());
}
