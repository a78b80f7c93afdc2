//! The newer containerd and docker releases the tests run beside the machine's own, unpacked from
//! Debian's packages by scripts/runtimes-fetch.sh (which scripts/test.sh runs).

use std::path::{Path, PathBuf};

/// A fetched engine release: its binaries and version.
#[derive(Debug, Clone)]
pub struct Release {
    /// The directory holding its binaries (containerd, containerd-shim-runc-v2 and ctr; or
    /// dockerd, docker-proxy and docker).
    pub bin: PathBuf,
    /// The Debian package version.
    pub version: String,
}

/// The fetched containerd of `series` (`1.7` or `2`), from `DEVINJECT_RUNTIMES` or the
/// workspace's `target/runtimes`; `None` when it is not there.
pub fn containerd(series: &str) -> Option<Release> {
    fetched(
        &format!("containerd-{series}"),
        &["containerd", "containerd-shim-runc-v2", "ctr"],
    )
}

/// The fetched docker engine and CLI of `series` (`28`), as [`containerd`] finds it.
pub fn docker(series: &str) -> Option<Release> {
    fetched(
        &format!("docker-{series}"),
        &["dockerd", "docker-proxy", "docker"],
    )
}

fn fetched(name: &str, bins: &[&str]) -> Option<Release> {
    let dir = std::env::var_os("DEVINJECT_RUNTIMES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/runtimes"),
        PathBuf::from,
    );
    let dir = dir.join(name);
    let version = std::fs::read_to_string(dir.join("VERSION")).ok()?;
    let bin = dir.join("bin");
    bins.iter().all(|b| bin.join(b).is_file()).then(|| Release {
        bin,
        version: version.trim().to_owned(),
    })
}
