//! The newer containerd releases the tests run beside the machine's own, unpacked from Debian's
//! packages by scripts/runtimes-fetch.sh (which scripts/test.sh runs).

use std::path::{Path, PathBuf};

/// A containerd release: its binaries and version.
#[derive(Debug, Clone)]
pub struct Release {
    /// The directory holding containerd, containerd-shim-runc-v2 and ctr.
    pub bin: PathBuf,
    /// The Debian package version.
    pub version: String,
}

/// The fetched containerd of `series` (`1.7` or `2`), from `DEVINJECT_RUNTIMES` or the
/// workspace's `target/runtimes`; `None` when it is not there.
pub fn containerd(series: &str) -> Option<Release> {
    let dir = std::env::var_os("DEVINJECT_RUNTIMES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/runtimes"),
        PathBuf::from,
    );
    let dir = dir.join(format!("containerd-{series}"));
    let version = std::fs::read_to_string(dir.join("VERSION")).ok()?;
    let bin = dir.join("bin");
    ["containerd", "containerd-shim-runc-v2", "ctr"]
        .iter()
        .all(|b| bin.join(b).is_file())
        .then(|| Release {
            bin,
            version: version.trim().to_owned(),
        })
}
