//! What to watch so that a profile's discovery runs again when its answer may change: the
//! directories that hold its device, per-device and control nodes (a node's removal or
//! re-creation is an event in its directory, which a watch on the node itself would miss), and
//! the sysfs health attribute of each device found (sysfs raises a modify event when a driver
//! calls `sysfs_notify`; for the drivers that do not, the components also read it on a schedule,
//! [`crate::health`]). The long-running components (the device plugin, the DRA driver) run
//! discovery on these inotify events, never on a timer.
//!
//! A node directory is watched for what presence needs only: entries made, removed, renamed and
//! their attributes changed ([`Watched::Entries`]), not for writes to the nodes in it. `/dev` is
//! such a directory (`/dev/kvm`, `/dev/fuse`), and every process writing to `/dev/null` (every
//! shell's `2>/dev/null`) would otherwise wake the components into a rescan.

use std::path::{Component, Path, PathBuf};

use devinject_devices::health::health_attribute;
use devinject_devices::{HostRoots, Inventory, Profile};

/// What a watched path stands for, which decides the events asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// A directory whose entries are devices or lead to them: what is made, removed, renamed
    /// or changes its attributes in it (or itself removed or renamed).
    Entries,
    /// A file whose content is read (a health attribute): its writes as well.
    Content,
}

impl Watched {
    /// The inotify events asked for.
    pub fn mask(self) -> inotify::WatchMask {
        use inotify::WatchMask as M;
        let presence = M::CREATE
            | M::DELETE
            | M::MOVED_FROM
            | M::MOVED_TO
            | M::ATTRIB
            | M::DELETE_SELF
            | M::MOVE_SELF;
        match self {
            Self::Entries => presence,
            Self::Content => presence | M::MODIFY | M::CLOSE_WRITE,
        }
    }
}

/// One path to watch and what it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchPath {
    /// The path; it may not exist yet.
    pub path: PathBuf,
    /// What it is.
    pub what: Watched,
}

impl WatchPath {
    /// What to add an inotify watch on and with which events: the path itself, or, while it
    /// does not exist, its nearest existing ancestor, for the entries made in it (a path made
    /// later is an event there). `None` when nothing of it exists.
    pub fn target(&self) -> Option<(PathBuf, inotify::WatchMask)> {
        let target = nearest_existing(&self.path)?;
        let what = if target == self.path {
            self.what
        } else {
            Watched::Entries
        };
        Some((target, what.mask()))
    }
}

/// The paths to watch for `profile` under `roots`, given what its last discovery found
/// (`found`, for the health attributes). They may not exist yet ([`WatchPath::target`]).
pub fn watch_paths(
    profile: &Profile,
    roots: &HostRoots,
    found: Option<&Inventory>,
) -> Vec<WatchPath> {
    let node_patterns = profile
        .discovery
        .nodes
        .iter()
        .chain(profile.device_nodes.iter().map(|n| &n.path))
        .chain(profile.control_nodes.iter().map(|n| &n.path));
    let mut paths: Vec<WatchPath> = Vec::new();
    for pattern in node_patterns {
        for dir in pattern_dirs(&roots.dev_root, pattern) {
            if !paths.iter().any(|p| p.path == dir) {
                paths.push(WatchPath {
                    path: dir,
                    what: Watched::Entries,
                });
            }
        }
    }
    if let Some(inventory) = found {
        paths.extend(inventory.devices.iter().filter_map(|d| {
            Some(WatchPath {
                path: health_attribute(profile, roots, &d.name)?,
                what: Watched::Content,
            })
        }));
    }
    paths
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
        let roots = HostRoots::under(tmp.path());
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
        let dir = WatchPath {
            path: roots.dev_root.join("demo"),
            what: Watched::Entries,
        };
        let attribute = roots.sys_root.join("class/accel/accel03/n3/health");
        assert_eq!(
            paths,
            [
                dir.clone(),
                WatchPath {
                    path: attribute.clone(),
                    what: Watched::Content
                }
            ]
        );
        assert_eq!(watch_paths(&profile, &roots, None), [dir]);
        // The attribute is not there yet: its nearest ancestor is watched for entries only.
        assert_eq!(
            paths[1].target(),
            Some((tmp.path().to_path_buf(), Watched::Entries.mask()))
        );
        std::fs::create_dir_all(attribute.parent().unwrap()).unwrap();
        std::fs::write(&attribute, "ok\n").unwrap();
        assert_eq!(
            paths[1].target(),
            Some((attribute, Watched::Content.mask()))
        );
    }

    /// A node directory's watch sees a node come and go, and not the writes to a node in it
    /// (`/dev/null` is in `/dev`): writes to a watched attribute are seen.
    #[test]
    fn writes_to_a_node_wake_no_directory_watch_but_writes_to_an_attribute_do() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dev");
        std::fs::create_dir(&dir).unwrap();
        let null = dir.join("null");
        nix::sys::stat::mknod(
            &null,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        let attribute = tmp.path().join("health");
        std::fs::write(&attribute, "ok\n").unwrap();
        let mut inotify = inotify::Inotify::init().unwrap();
        for (path, what) in [(&dir, Watched::Entries), (&attribute, Watched::Content)] {
            inotify.watches().add(path, what.mask()).unwrap();
        }
        let mut buffer = [0u8; 4096];
        let mut pending = |inotify: &mut inotify::Inotify| {
            inotify
                .read_events(&mut buffer)
                .map(|events| events.map(|e| e.mask).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        for _ in 0..10 {
            let mut node = std::fs::OpenOptions::new().write(true).open(&null).unwrap();
            node.write_all(b"discarded").unwrap();
        }
        assert_eq!(
            pending(&mut inotify),
            [],
            "writes to a node in the directory"
        );
        std::fs::remove_file(&null).unwrap();
        assert!(pending(&mut inotify).contains(&inotify::EventMask::DELETE));
        std::fs::write(&attribute, "bad\n").unwrap();
        assert!(pending(&mut inotify).contains(&inotify::EventMask::MODIFY));
    }
}
