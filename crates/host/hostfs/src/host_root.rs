//! Host paths seen through a root prefix: the one translator the installer and
//! `devinject-ctl` use for every file they read or write on the host.
//!
//! An installer in a container sees the host's `/` at `/host`. The host's own absolute links
//! (`/etc/docker -> /srv/docker`, `/opt -> /data/opt`, `/var/run -> /run`) must then be followed
//! as the host follows them: to `/host/srv/docker`, not to this process's `/srv/docker`. Left to
//! the kernel, a path joined under the prefix follows such a link out of it, and the installer
//! wrote elsewhere, reported success, and its uninstall acted on the wrong files.
//!
//! [`resolve_in_root`] walks the path one component at a time below the prefix, reading each
//! symlink and resolving its target inside the prefix (absolute targets from the prefix, `..`
//! never above it), the semantics of `openat2(RESOLVE_IN_ROOT)`. Unlike `openat2` it also
//! answers for paths that do not exist yet (a file to create, a directory `mkdir -p` will make):
//! the missing rest is appended as it is. The root `/` is walked the same way, so that `--root /`
//! and `--root DIR` follow the same links. This walk decides only *where* a host path is (and is
//! used for the engine's own configuration file, which may be linked into place); the files
//! themselves are read, replaced and removed through [`crate::host_dir`], which opens the
//! directory inside the root with `openat2(RESOLVE_IN_ROOT)` and never follows or opens what is
//! at a final name before its type is known.

use std::path::{Component, Path, PathBuf};

/// How many symlinks are followed before giving up (the kernel's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Where the host path `host` is for this process, when the host's `/` is at `root`.
pub fn resolve_in_root(root: &Path, host: &Path) -> PathBuf {
    if root == Path::new("/") && !host.is_absolute() {
        // Relative to the working directory, as given on the command line.
        return host.to_path_buf();
    }
    // `/` is walked the same way as any other root: whether a link is followed must not depend on
    // where the host is seen from.
    let under = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let mut resolved = PathBuf::from("/");
    let mut pending = components_rev(host);
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part.as_os_str() == ".." {
            // `..` of the root is the root, as for the kernel.
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&part);
        match std::fs::read_link(under(&candidate)) {
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
    under(&resolved)
}

/// The host path of `access`, a path below `root` (the inverse of [`resolve_in_root`] for a path
/// with no link on the way); a path outside the root is returned as it is.
pub fn host_path_of(root: &Path, access: &Path) -> PathBuf {
    match access.strip_prefix(root) {
        Ok(rel) => Path::new("/").join(rel),
        Err(_) => access.to_path_buf(),
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
    use std::os::unix::fs::symlink;

    #[test]
    fn links_resolve_inside_the_root_as_the_host_resolves_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("run")).expect("mkdir");
        std::fs::create_dir_all(root.join("var")).expect("mkdir");
        std::fs::create_dir_all(root.join("srv/docker")).expect("mkdir");
        std::fs::create_dir_all(root.join("etc")).expect("mkdir");
        symlink("/run", root.join("var/run")).expect("symlink");
        symlink("/srv/docker", root.join("etc/docker")).expect("symlink");
        symlink("../../../../run", root.join("var/up")).expect("symlink");
        let r = |p: &str| resolve_in_root(root, Path::new(p));
        assert_eq!(r("/var/run/docker.pid"), root.join("run/docker.pid"));
        assert_eq!(r("/var/up/docker.pid"), root.join("run/docker.pid"));
        // A directory link in the middle, to a file that does not exist yet.
        assert_eq!(
            r("/etc/docker/daemon.json"),
            root.join("srv/docker/daemon.json")
        );
        // A dangling link: where the host would look, inside the root.
        symlink("/data/opt", root.join("opt")).expect("symlink");
        assert_eq!(r("/opt/devinject/bin"), root.join("data/opt/devinject/bin"));
        assert_eq!(r("/nope/x"), root.join("nope/x"));
        assert_eq!(r("/../../etc"), root.join("etc"));
        assert_eq!(r("/"), root.to_path_buf());
    }

    #[test]
    fn link_loops_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        symlink("/b", dir.path().join("a")).expect("symlink");
        symlink("/a", dir.path().join("b")).expect("symlink");
        let p = resolve_in_root(dir.path(), Path::new("/a/x"));
        assert!(p.starts_with(dir.path()), "{}", p.display());
    }

    #[test]
    fn the_hosts_own_root_is_walked_the_same_way() {
        assert_eq!(
            resolve_in_root(Path::new("/"), Path::new("/etc/x")),
            PathBuf::from("/etc/x")
        );
    }
}
