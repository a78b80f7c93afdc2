//! A host canary: a tree of files outside every rootfs that hostile images aim their links at,
//! and fingerprints that prove it, and the host paths an escape would write, did not change.
//!
//! A fingerprint records, for every entry under each watched path and without following links:
//! its type, mode, owner, size, mtime and ctime (nanoseconds), and a hash of a file's bytes or a
//! link's target. Creating and deleting a temp file in a directory changes its mtime, so a write
//! that cleaned up after itself shows too (within the file system's timestamp granularity).

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::Hasher;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Part of every file name the canary holds, so checks on real host directories are precise.
pub const MARK: &str = "devinject-canary";

/// Files an escape from a container's rootfs would touch on the host if it followed the image's
/// links: what the hook writes (linker cache, its temp and aux files, soname links, the demo
/// library and tool, demo nodes) at their real host locations. Absent ones must stay absent.
pub const HOST_PATHS_AT_RISK: [&str; 12] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.cache~",
    "/etc/ld.so.conf",
    "/var/cache/ldconfig",
    "/usr/lib/libdemo.so.1.0.0",
    "/usr/lib/libdemo.so.1",
    "/usr/lib/x86_64-linux-gnu/libdemo.so.1.0.0",
    "/usr/lib/x86_64-linux-gnu/libdemo.so.1",
    "/usr/bin/demo-smi",
    "/dev/demo",
    "/demo",
    "/opt/devinject-demo",
];

/// A canary tree: `etc/`, `usr/lib/`, `usr/bin/`, `dev/`, `var/cache/` with marked files.
#[derive(Debug, Clone)]
pub struct Canary {
    /// Its root (a host path, outside every rootfs).
    pub dir: PathBuf,
}

impl Canary {
    /// Creates the tree under `dir`.
    pub fn new(dir: &Path) -> Result<Self> {
        for d in ["etc/ld.so.conf.d", "usr/lib", "usr/bin", "dev", "var/cache"] {
            std::fs::create_dir_all(dir.join(d)).with_context(|| format!("mkdir canary {d}"))?;
        }
        let files = [
            ("etc/passwd", format!("root:x:0:0:{MARK}:/root:/bin/sh\n")),
            ("etc/ld.so.cache", format!("{MARK} cache\n")),
            ("etc/ld.so.conf", format!("# {MARK}\n")),
            ("usr/lib/libc.so.6", format!("{MARK} library\n")),
            ("usr/bin/tool", format!("#!/bin/sh\necho {MARK}\n")),
            ("dev/null", format!("{MARK} not a device\n")),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).with_context(|| format!("write canary {name}"))?;
        }
        std::fs::set_permissions(
            dir.join("usr/bin/tool"),
            std::fs::Permissions::from_mode(0o755),
        )?;
        std::os::unix::fs::symlink("libc.so.6", dir.join("usr/lib/libdemo.so.1"))?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// `rel` under the canary, e.g. `usr/lib`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// A guard over the canary and [`HOST_PATHS_AT_RISK`], fingerprinted now.
    pub fn guard(&self) -> HostGuard {
        let mut roots = vec![self.dir.clone()];
        roots.extend(HOST_PATHS_AT_RISK.iter().map(PathBuf::from));
        HostGuard::new(roots)
    }
}

/// Every entry under a set of paths, as text, by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(BTreeMap<PathBuf, String>);

impl Fingerprint {
    /// Fingerprints `roots` and everything beneath them, never following a link.
    pub fn of(roots: &[PathBuf]) -> Self {
        let mut map = BTreeMap::new();
        for r in roots {
            walk(r, &mut map);
        }
        Self(map)
    }

    /// What differs from `before`, one line per path.
    pub fn diff(&self, before: &Fingerprint) -> Vec<String> {
        let mut out = Vec::new();
        for (p, was) in &before.0 {
            match self.0.get(p) {
                None => out.push(format!("removed {}: was {was}", p.display())),
                Some(now) if now != was => {
                    out.push(format!("changed {}: {was} -> {now}", p.display()))
                }
                Some(_) => {}
            }
        }
        for (p, now) in &self.0 {
            if !before.0.contains_key(p) {
                out.push(format!("appeared {}: {now}", p.display()));
            }
        }
        out
    }
}

fn walk(path: &Path, map: &mut BTreeMap<PathBuf, String>) {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            map.insert(path.to_owned(), "absent".into());
            return;
        }
        Err(e) => {
            map.insert(path.to_owned(), format!("unreadable: {e}"));
            return;
        }
    };
    let ft = meta.file_type();
    let content = if ft.is_symlink() {
        format!(
            "-> {}",
            std::fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_default()
        )
    } else if ft.is_file() {
        match std::fs::read(path) {
            Ok(bytes) => {
                let mut h = DefaultHasher::new();
                h.write(&bytes);
                format!("bytes {:016x}", h.finish())
            }
            Err(e) => format!("unreadable: {e}"),
        }
    } else {
        String::new()
    };
    map.insert(
        path.to_owned(),
        format!(
            "mode {:o} owner {}:{} size {} rdev {:x} mtime {}.{:09} ctime {}.{:09} {content}",
            meta.mode(),
            meta.uid(),
            meta.gid(),
            if ft.is_dir() { 0 } else { meta.size() },
            meta.rdev(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
        ),
    );
    if ft.is_dir() {
        let mut names: Vec<_> = match std::fs::read_dir(path) {
            Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(_) => return,
        };
        names.sort();
        for n in names {
            walk(&n, map);
        }
    }
}

/// A fingerprint taken now, to compare with later.
#[derive(Debug)]
pub struct HostGuard {
    roots: Vec<PathBuf>,
    before: Fingerprint,
}

impl HostGuard {
    /// Fingerprints `roots` now.
    pub fn new(roots: Vec<PathBuf>) -> Self {
        let before = Fingerprint::of(&roots);
        Self { roots, before }
    }

    /// What changed since the guard was made.
    pub fn changes(&self) -> Vec<String> {
        Fingerprint::of(&self.roots).diff(&self.before)
    }

    /// The paths that changed since the guard was made, relative to `base` when under it.
    pub fn changed_paths(&self, base: &Path) -> std::collections::BTreeSet<PathBuf> {
        let now = Fingerprint::of(&self.roots);
        let mut out = std::collections::BTreeSet::new();
        for p in self.before.0.keys().chain(now.0.keys()) {
            if self.before.0.get(p) != now.0.get(p) {
                out.insert(p.strip_prefix(base).unwrap_or(p).to_owned());
            }
        }
        out
    }

    /// Panics with every change since the guard was made; `ctx` says which case ran.
    pub fn assert_unchanged(&self, ctx: &str) {
        let changes = self.changes();
        assert!(
            changes.is_empty(),
            "{ctx}: the host changed:\n  {}",
            changes.join("\n  ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_see_changed_and_new_files() {
        let t = tempfile::tempdir().unwrap();
        let c = Canary::new(&t.path().join("canary")).unwrap();
        let g = c.guard();
        assert!(g.changes().is_empty(), "{:?}", g.changes());
        std::fs::write(c.path("etc/passwd"), "changed").unwrap();
        assert!(g.changes().iter().any(|l| l.contains("etc/passwd")));

        let g = c.guard();
        std::fs::write(c.path("usr/lib/new"), "").unwrap();
        assert!(g.changes().iter().any(|l| l.starts_with("appeared")));
    }
}
