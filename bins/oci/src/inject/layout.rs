//! Where libraries go in a given image.
//!
//! Debian/Ubuntu images use the multiarch dir (`/usr/lib/x86_64-linux-gnu`), RHEL/Fedora/SUSE
//! images `/usr/lib64`, Alpine and busybox images plain `/usr/lib`. The first directory that
//! exists in the image wins; looking is done with in-root resolution, so a hostile image can only
//! choose among its own directories.

use std::path::{Path, PathBuf};

use devinject_devices::ContainerLayout;

use super::rootfs::Rootfs;

/// The candidate library directories for this machine's architecture, best first.
pub fn candidates() -> Vec<PathBuf> {
    let multiarch = match std::env::consts::ARCH {
        "x86_64" => Some("x86_64-linux-gnu"),
        "aarch64" => Some("aarch64-linux-gnu"),
        "powerpc64" => Some("powerpc64le-linux-gnu"),
        "s390x" => Some("s390x-linux-gnu"),
        _ => None,
    };
    let mut v = Vec::new();
    if let Some(m) = multiarch {
        v.push(PathBuf::from("/usr/lib").join(m));
        v.push(PathBuf::from("/lib").join(m));
    }
    v.push(PathBuf::from("/usr/lib64"));
    v.push(PathBuf::from("/usr/lib"));
    v
}

/// The layout of the rootfs at `path`: [`detect`]ed, or the default when the rootfs cannot be
/// opened (the failure then surfaces where the hook or the shim uses the rootfs).
pub fn of_rootfs(path: &Path) -> ContainerLayout {
    Rootfs::open(path).map(|r| detect(&r)).unwrap_or_default()
}

/// Picks the image's library dir (`/usr/lib`, created if need be, when none exists).
pub fn detect(root: &Rootfs) -> ContainerLayout {
    let lib_dir = candidates()
        .into_iter()
        .find(|d| root.is_dir(d))
        .unwrap_or_else(|| PathBuf::from("/usr/lib"));
    ContainerLayout { lib_dir }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_multiarch_then_lib64_then_usr_lib() {
        let t = tempfile::tempdir().unwrap();
        let r = Rootfs::open(t.path()).unwrap();
        assert_eq!(detect(&r).lib_dir, PathBuf::from("/usr/lib"));
        std::fs::create_dir_all(t.path().join("usr/lib64")).unwrap();
        assert_eq!(detect(&r).lib_dir, PathBuf::from("/usr/lib64"));
        let first = candidates().remove(0);
        std::fs::create_dir_all(t.path().join(first.strip_prefix("/").unwrap())).unwrap();
        assert_eq!(detect(&r).lib_dir, first);
    }

    #[test]
    fn a_link_to_the_host_is_not_followed_out() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("usr")).unwrap();
        // /usr/lib64 -> /usr/lib on the host exists there, but not inside this root.
        std::os::unix::fs::symlink("/usr/lib", t.path().join("usr/lib64")).unwrap();
        let r = Rootfs::open(t.path()).unwrap();
        assert_eq!(detect(&r).lib_dir, PathBuf::from("/usr/lib"));
    }
}
