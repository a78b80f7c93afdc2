//! Forward compatibility: an image's newer driver libraries preferred to the host's.
//!
//! A driver's user space may come newer than its kernel module: NVIDIA's `cuda-compat` package
//! puts a newer `libcuda.so` and its companions in `/usr/local/cuda/compat` of an image, so that
//! an application built for a newer CUDA runs on an older (datacenter) driver. NVIDIA's toolkit
//! makes the container's linker prefer that directory when the library there is of a newer
//! driver than the host's (its `enable-cuda-compat` hook compares the major versions: 545 over
//! 535, never 535 over 545, and not the same major either).
//!
//! A profile names the directory and the library whose version decides
//! (`[forward_compat]`); the planner notes the host's major version from the file it injects
//! (`libcuda.so.535.216.01` is 535), and the finish step reads the image's directory in-root and
//! puts its libraries ahead of ours in the linker cache when the image's major is the greater.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A profile's `[forward_compat]` table.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ForwardCompatSpec {
    /// Where an image keeps the newer libraries (a container path), e.g.
    /// `/usr/local/cuda/compat`.
    pub dir: String,
    /// The library whose version decides, as the file name before its version, e.g.
    /// `libcuda.so` (the host's `libcuda.so.535.216.01`, the image's `libcuda.so.545.23.08`).
    /// One of the profile's libraries must have files of that name.
    pub library: String,
}

impl ForwardCompatSpec {
    /// What is wrong with the table, as (key under `forward_compat`, problem), if anything.
    pub(crate) fn problem(&self) -> Option<(&'static str, String)> {
        let dir = Path::new(&self.dir);
        if !dir.is_absolute() || dir.components().any(|c| c.as_os_str() == "..") {
            return Some((
                "dir",
                format!(
                    "{:?} is not an absolute path without '..': use e.g. /usr/local/cuda/compat",
                    self.dir
                ),
            ));
        }
        if self.library.is_empty() || self.library.contains('/') || !self.library.contains(".so") {
            return Some((
                "library",
                format!(
                    "{:?} is not a library file name: use the name before its version, e.g. libcuda.so",
                    self.library
                ),
            ));
        }
        None
    }
}

/// What the finish step needs: the directory, the library and the host's major version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForwardCompat {
    /// The image's directory (container path).
    pub dir: PathBuf,
    /// The deciding library's name before its version.
    pub library: String,
    /// The major version of the host's copy of it.
    pub host_major: u32,
}

impl ForwardCompat {
    /// Whether a library of major version `image_major` in the image wins over the host's.
    pub fn prefers(&self, image_major: u32) -> bool {
        image_major > self.host_major
    }
}

/// The major version in `file_name` when it is `library` followed by a version of at least two
/// numbers (`libcuda.so.535.216.01` with `libcuda.so` is 535); a soname (`libcuda.so.1`) or
/// another name is `None`.
pub fn major_of(file_name: &str, library: &str) -> Option<u32> {
    let version = file_name.strip_prefix(library)?.strip_prefix('.')?;
    let mut parts = version.split('.');
    let major = parts.next()?;
    let numeric = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let rest: Vec<&str> = parts.collect();
    if !numeric(major) || rest.is_empty() || !rest.iter().all(|p| numeric(p)) {
        return None;
    }
    major.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_major_version_comes_from_a_versioned_file_name_only() {
        assert_eq!(major_of("libcuda.so.535.216.01", "libcuda.so"), Some(535));
        assert_eq!(major_of("libcuda.so.545.23.08", "libcuda.so"), Some(545));
        assert_eq!(major_of("libcuda.so.1", "libcuda.so"), None, "a soname");
        assert_eq!(major_of("libcuda.so", "libcuda.so"), None);
        assert_eq!(major_of("libcudart.so.12.2.1", "libcuda.so"), None);
        assert_eq!(major_of("libcuda.so.545.x", "libcuda.so"), None);
        assert_eq!(major_of("libcuda.so.545..1", "libcuda.so"), None);
        assert_eq!(major_of("libcuda.so.99999999999.1", "libcuda.so"), None);
    }

    #[test]
    fn only_a_greater_major_wins() {
        let fc = ForwardCompat {
            dir: "/usr/local/cuda/compat".into(),
            library: "libcuda.so".into(),
            host_major: 535,
        };
        assert!(fc.prefers(545));
        assert!(!fc.prefers(535));
        assert!(!fc.prefers(470));
    }

    #[test]
    fn the_table_is_checked() {
        let spec = |dir: &str, library: &str| ForwardCompatSpec {
            dir: dir.into(),
            library: library.into(),
        };
        assert_eq!(spec("/usr/local/cuda/compat", "libcuda.so").problem(), None);
        assert_eq!(spec("usr/local", "libcuda.so").problem().unwrap().0, "dir");
        assert_eq!(
            spec("/usr/../etc", "libcuda.so").problem().unwrap().0,
            "dir"
        );
        assert_eq!(spec("/c", "lib/cuda.so").problem().unwrap().0, "library");
        assert_eq!(spec("/c", "libcuda").problem().unwrap().0, "library");
    }
}
