//! Skipping tests that cannot run here, loudly, and never under CI.

use std::path::Path;

/// True when running under CI (`CI=true`), where nothing may skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Returns true when the test can run. Otherwise prints why and returns false, or panics under
/// CI so a missing prerequisite can never look like a pass there.
pub fn require(ok: bool, reason: &str) -> bool {
    if ok {
        return true;
    }
    assert!(!in_ci(), "prerequisite missing under CI=true: {reason}");
    eprintln!("SKIPPED: {reason}");
    false
}

/// The test needs root.
pub fn require_root() -> bool {
    require(nix_is_root(), "needs root (mknod, mounts, runc)")
}

/// The test needs an executable on the host.
pub fn require_binary(path: &str) -> bool {
    require(
        Path::new(path).exists() || which(path).is_some(),
        &format!("needs {path} (apt-get install it, or run scripts/test.sh)"),
    )
}

/// The test runs containers with real runc on the simulated demo host: root, runc, a static
/// busybox for the rootfs and gcc for the demo library.
pub fn require_runc_demo() -> bool {
    require_root()
        && require_binary("runc")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
}

/// Finds `name` on PATH.
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}
