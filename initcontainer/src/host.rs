//! Where the host's filesystem is: a root prefix (`/host` in the init container, a temp dir in
//! tests, `/` on the host itself) and the translation between host paths and paths this process
//! can open.
//!
//! Paths written *into* files (a runtime entry's binary, the hook's profile directory) are host
//! paths; files are opened at `root` joined with the host path. Absolute symlinks on the host
//! (`/var/run -> /run`) point outside the prefix when followed naively, so [`HostRoot::resolve`]
//! follows them inside the root for the files the installer only reads (sockets, pid files).

use std::path::{Component, Path, PathBuf};

/// The host's root as seen by this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    root: PathBuf,
}

/// How many symlinks [`HostRoot::resolve`] follows before giving up (as the kernel's
/// `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

impl HostRoot {
    /// The host's `/` is reachable at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        HostRoot { root: root.into() }
    }

    /// The prefix.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the host path `host` can be opened by this process (no symlink resolution).
    pub fn access(&self, host: &Path) -> PathBuf {
        let rel = host.strip_prefix("/").unwrap_or(host);
        if rel.as_os_str().is_empty() {
            return self.root.clone();
        }
        self.root.join(rel)
    }

    /// The host path of `access`, a path below the root.
    pub fn host_of(&self, access: &Path) -> PathBuf {
        match access.strip_prefix(&self.root) {
            Ok(rel) => Path::new("/").join(rel),
            Err(_) => access.to_path_buf(),
        }
    }

    /// Like [`HostRoot::access`], but symlinks on the way are followed as the host would follow
    /// them, staying inside the root. A missing component ends the walk (the rest is appended).
    pub fn resolve(&self, host: &Path) -> PathBuf {
        let mut resolved = PathBuf::from("/");
        let mut pending: Vec<PathBuf> = components_rev(host);
        let mut links = 0;
        while let Some(part) = pending.pop() {
            if part.as_os_str() == ".." {
                resolved.pop();
                continue;
            }
            let candidate = resolved.join(&part);
            match std::fs::read_link(self.access(&candidate)) {
                Ok(target) if links < MAX_LINKS => {
                    links += 1;
                    if target.is_absolute() {
                        resolved = PathBuf::from("/");
                    }
                    pending.extend(components_rev(&target));
                }
                _ => resolved = candidate,
            }
        }
        self.access(&resolved)
    }
}

/// The normal components of `path` in reverse order (so that `pop` yields them in order), with
/// `..` kept and `.` dropped.
fn components_rev(path: &Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            _ => None,
        })
        .collect();
    parts.reverse();
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_and_host_of_are_inverse() {
        let h = HostRoot::new("/host");
        let a = h.access(Path::new("/etc/containerd/config.toml"));
        assert_eq!(a, PathBuf::from("/host/etc/containerd/config.toml"));
        assert_eq!(h.host_of(&a), PathBuf::from("/etc/containerd/config.toml"));
        assert_eq!(h.access(Path::new("/")), PathBuf::from("/host"));
        let plain = HostRoot::new("/");
        assert_eq!(plain.access(Path::new("/etc/x")), PathBuf::from("/etc/x"));
    }

    #[test]
    fn resolve_follows_absolute_links_inside_the_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = HostRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("run")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("var")).expect("mkdir");
        std::os::unix::fs::symlink("/run", dir.path().join("var/run")).expect("symlink");
        std::fs::write(dir.path().join("run/docker.pid"), "42").expect("write");
        let p = h.resolve(Path::new("/var/run/docker.pid"));
        assert_eq!(p, dir.path().join("run/docker.pid"));
        assert_eq!(std::fs::read_to_string(p).expect("read"), "42");
        // Relative links and `..` stay inside too.
        std::os::unix::fs::symlink("../../../../run", dir.path().join("var/up")).expect("symlink");
        assert_eq!(
            h.resolve(Path::new("/var/up/docker.pid")),
            dir.path().join("run/docker.pid")
        );
        // A missing path resolves to where it would be.
        assert_eq!(h.resolve(Path::new("/nope/x")), dir.path().join("nope/x"));
    }

    #[test]
    fn resolve_gives_up_on_link_loops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = HostRoot::new(dir.path());
        std::os::unix::fs::symlink("/b", dir.path().join("a")).expect("symlink");
        std::os::unix::fs::symlink("/a", dir.path().join("b")).expect("symlink");
        // Terminates; the exact result does not matter.
        let _ = h.resolve(Path::new("/a/x"));
    }
}
