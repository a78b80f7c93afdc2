//! What to watch so that a profile's discovery runs again when its answer may change: the
//! directories that hold its device, per-device and control nodes (a node's removal or
//! re-creation is an event in its directory, which a watch on the node itself would miss), and
//! the sysfs health attribute of each device found (sysfs raises a modify event when a driver
//! calls `sysfs_notify`). The long-running components (the device plugin, the DRA driver) run
//! discovery on these inotify events, never on a timer.

use std::path::{Component, Path, PathBuf};

use crate::discovery::{substitute, trailing_number, Inventory};
use crate::profile::Profile;
use devinject_hostfs::HostRoots;

/// The paths to watch for `profile` under `roots`, given what its last discovery found
/// (`found`, for the health attributes). They may not exist yet: a caller watches the nearest
/// existing ancestor ([`nearest_existing`]).
pub fn watch_paths(
    profile: &Profile,
    roots: &HostRoots,
    found: Option<&Inventory>,
) -> Vec<PathBuf> {
    let node_patterns = profile
        .discovery
        .nodes
        .iter()
        .chain(profile.device_nodes.iter().map(|n| &n.path))
        .chain(profile.control_nodes.iter().map(|n| &n.path));
    let mut paths = Vec::new();
    for pattern in node_patterns {
        for dir in pattern_dirs(&roots.dev_root, pattern) {
            if !paths.contains(&dir) {
                paths.push(dir);
            }
        }
    }
    if let (Some(template), Some(inventory)) = (&profile.discovery.health_sysfs, found) {
        for d in &inventory.devices {
            let attribute = substitute(template, &d.name, trailing_number(&d.name));
            paths.push(roots.in_sys_root(&attribute));
        }
    }
    paths
}

/// The inotify events on a watched path that may change what discovery finds.
pub fn mask() -> inotify::WatchMask {
    use inotify::WatchMask as M;
    M::CREATE
        | M::DELETE
        | M::MOVED_FROM
        | M::MOVED_TO
        | M::ATTRIB
        | M::MODIFY
        | M::CLOSE_WRITE
        | M::DELETE_SELF
        | M::MOVE_SELF
}

/// At most this many queued events are folded into one rescan.
pub const MAX_COALESCED: usize = 1024;

/// `path` if it exists, else its closest existing ancestor.
pub fn nearest_existing(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|p| !p.as_os_str().is_empty() && p.symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

fn is_pattern(component: &str) -> bool {
    component.contains(['*', '?', '[', '{'])
}

/// The directories whose entries decide what `pattern` (relative to `root`) matches: the
/// directory holding the first wildcard component, and, when wildcards span directories, every
/// directory the pattern's parent matches now.
fn pattern_dirs(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let components: Vec<&str> = Path::new(pattern)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let Some(last) = components.len().checked_sub(1) else {
        return Vec::new();
    };
    let first_wild = components
        .iter()
        .position(|c| is_pattern(c))
        .unwrap_or(last);
    let mut dirs = vec![components[..first_wild]
        .iter()
        .fold(root.to_path_buf(), |p, c| p.join(c))];
    if first_wild < last {
        let parent: Vec<String> = components[..last]
            .iter()
            .map(|c| {
                if c.contains('{') {
                    "*".to_owned()
                } else {
                    (*c).to_owned()
                }
            })
            .collect();
        let full = format!(
            "{}/{}",
            glob::Pattern::escape(&root.to_string_lossy()),
            parent.join("/")
        );
        if let Ok(found) = glob::glob(&full) {
            dirs.extend(found.flatten().filter(|p| p.is_dir()));
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_to_watch() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        std::fs::create_dir_all(root.join("bus/a")).expect("mkdir");
        std::fs::create_dir_all(root.join("bus/b")).expect("mkdir");
        assert_eq!(pattern_dirs(root, "demo/accel[0-9]*"), [root.join("demo")]);
        assert_eq!(pattern_dirs(root, "kvm"), [root.to_path_buf()]);
        assert_eq!(pattern_dirs(root, "dri/renderD{n}"), [root.join("dri")]);
        let mut bus = pattern_dirs(root, "bus/*/accel*");
        bus.sort();
        assert_eq!(
            bus,
            [root.join("bus"), root.join("bus/a"), root.join("bus/b")]
        );
    }

    #[test]
    fn each_found_devices_health_attribute_is_watched_as_discovery_reads_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let roots = HostRoots {
            dev_root: tmp.path().join("dev"),
            sys_root: tmp.path().join("sys"),
            proc_root: tmp.path().join("proc"),
            driver_root: tmp.path().to_path_buf(),
        };
        let profile = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel*\"]\nhealth_sysfs = \"class/accel/{name}/n{n}/health\"\n[[control_nodes]]\npath = \"demo/ctl\"\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        std::fs::create_dir_all(roots.dev_root.join("demo")).unwrap();
        for name in ["accel03", "ctl"] {
            nix::sys::stat::mknod(
                &roots.dev_root.join("demo").join(name),
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
                nix::sys::stat::makedev(1, 3),
            )
            .unwrap();
        }
        let inventory = crate::discover(&profile, &roots).unwrap();
        let paths = watch_paths(&profile, &roots, Some(&inventory));
        assert_eq!(
            paths,
            [
                roots.dev_root.join("demo"),
                roots.sys_root.join("class/accel/accel03/n3/health")
            ]
        );
        assert_eq!(
            watch_paths(&profile, &roots, None),
            [roots.dev_root.join("demo")]
        );
    }
}
