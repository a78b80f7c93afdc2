//! The globs of a profile's driver files, each directory listed once per resolution.
//!
//! A profile names most driver files by a glob whose wildcards are in the file name alone
//! (`/usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.*`): a few dozen globs over the same two or
//! three directories. Matched one by one with the `glob` crate, each glob reads its whole
//! directory again and looks up every component of its path from the root twice; on a real GPU
//! host with a large system library directory, the graphics group alone then cost a hook start
//! about 10 ms of CPU (docs/benchmarks.md, section 18b). Here such a
//! glob is matched against a listing read once; a path without wildcards is one lookup, and a
//! glob with wildcards in a directory goes to the `glob` crate as before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Directory listings read so far, by directory.
#[derive(Debug, Default)]
pub(crate) struct DriverGlobs {
    listings: HashMap<PathBuf, Vec<String>>,
}

/// Whether `s` holds a character the `glob` crate reads as a wildcard.
fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

impl DriverGlobs {
    /// The paths under `root` that `pattern` (an absolute path as the profile writes it, read
    /// under the driver root) matches, sorted: what `glob::glob` of the joined pattern yields.
    pub(crate) fn matches(
        &mut self,
        root: &Path,
        pattern: &str,
    ) -> Result<Vec<PathBuf>, glob::PatternError> {
        let relative = pattern.trim_start_matches('/');
        let (dir, name) = match relative.rsplit_once('/') {
            Some((dir, name)) => (dir, name),
            None => ("", relative),
        };
        if has_wildcard(dir) {
            return Self::crate_glob(root, relative);
        }
        let dir = root.join(dir);
        if !has_wildcard(name) {
            // As the glob crate matches a literal path: when there is an entry of that name
            // (a dangling link too; resolving it fails later, naming it).
            let path = dir.join(name);
            return Ok(if path.symlink_metadata().is_ok() {
                vec![path]
            } else {
                Vec::new()
            });
        }
        let compiled = glob::Pattern::new(name)?;
        let names = self.listings.entry(dir.clone()).or_insert_with(|| {
            // An unreadable or missing directory matches nothing, as with the glob crate.
            std::fs::read_dir(&dir)
                .map(|entries| {
                    entries
                        .filter_map(|e| e.ok()?.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default()
        });
        let mut found: Vec<PathBuf> = names
            .iter()
            .filter(|n| compiled.matches(n))
            .map(|n| dir.join(n))
            .collect();
        found.sort();
        Ok(found)
    }

    /// A glob with a wildcard in a directory: the `glob` crate's walk.
    fn crate_glob(root: &Path, relative: &str) -> Result<Vec<PathBuf>, glob::PatternError> {
        let full = format!(
            "{}/{}",
            glob::Pattern::escape(root.to_string_lossy().trim_end_matches('/')),
            relative
        );
        let mut found: Vec<PathBuf> = glob::glob(&full)?.filter_map(Result::ok).collect();
        found.sort();
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver tree with libraries, links, a dotfile, a directory and a dangling link.
    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let lib = t.path().join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(lib.join("nvidia/current")).unwrap();
        for f in [
            "libnvidia-glcore.so.535.1",
            "libnvidia-eglcore.so.535.1",
            ".libhidden.so.1",
            "nvidia/current/libcuda.so.535.1",
        ] {
            std::fs::write(lib.join(f), b"x").unwrap();
        }
        std::os::unix::fs::symlink(
            "libnvidia-glcore.so.535.1",
            lib.join("libnvidia-glcore.so.1"),
        )
        .unwrap();
        std::os::unix::fs::symlink("nowhere", lib.join("libnvidia-gone.so.1")).unwrap();
        std::fs::create_dir(lib.join("libnvidia-dir.so.9")).unwrap();
        t
    }

    const PATTERNS: &[&str] = &[
        "/usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.*",
        "/usr/lib/x86_64-linux-gnu/libnvidia-*.so.[0-9]*",
        "/usr/lib/x86_64-linux-gnu/libnvidia-g?ne.so.1",
        "/usr/lib/x86_64-linux-gnu/*.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-gone.so.1",
        "/usr/lib/x86_64-linux-gnu/libmissing.so.*",
        "/usr/lib/missing-dir/lib*.so",
        "/usr/lib/*/nvidia/current/libcuda.so.*",
        "/usr/lib/x86_64-linux-gnu/nvidia/*/libcuda.so.*",
        "/usr/lib/x86_64-linux-gnu/libnvidia-dir.so.*",
    ];

    #[test]
    fn every_pattern_matches_what_the_glob_crate_matches() {
        let t = tree();
        let mut globs = DriverGlobs::default();
        for pattern in PATTERNS {
            let ours = globs.matches(t.path(), pattern).unwrap();
            let theirs =
                DriverGlobs::crate_glob(t.path(), pattern.trim_start_matches('/')).unwrap();
            assert_eq!(ours, theirs, "{pattern}");
        }
        // A dangling link is a match, literal or by wildcard, as with the glob crate.
        for pattern in ["libnvidia-gone.so.1", "libnvidia-g?ne.so.1"] {
            let found = globs
                .matches(t.path(), &format!("/usr/lib/x86_64-linux-gnu/{pattern}"))
                .unwrap();
            assert_eq!(found.len(), 1, "{pattern}");
        }
    }

    #[test]
    fn a_directory_is_listed_once_for_all_its_globs() {
        let t = tree();
        let mut globs = DriverGlobs::default();
        let dir = "/usr/lib/x86_64-linux-gnu";
        assert_eq!(
            globs
                .matches(t.path(), &format!("{dir}/libnvidia-glcore.so.*"))
                .unwrap()
                .len(),
            2
        );
        // A file added after the first listing is not seen by this resolution: the listing
        // was read once.
        std::fs::write(
            t.path()
                .join("usr/lib/x86_64-linux-gnu/libnvidia-late.so.1"),
            b"x",
        )
        .unwrap();
        assert!(globs
            .matches(t.path(), &format!("{dir}/libnvidia-late.so.*"))
            .unwrap()
            .is_empty());
        assert_eq!(globs.listings.len(), 1);
        assert_eq!(
            DriverGlobs::default()
                .matches(t.path(), &format!("{dir}/libnvidia-late.so.*"))
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn a_bad_pattern_is_an_error() {
        let t = tree();
        assert!(DriverGlobs::default()
            .matches(t.path(), "/usr/lib/x86_64-linux-gnu/lib[.so")
            .is_err());
        assert!(DriverGlobs::default()
            .matches(t.path(), "/usr/lib/[/lib*.so")
            .is_err());
    }
}
