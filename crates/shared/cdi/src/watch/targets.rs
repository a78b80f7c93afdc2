//! What `cdi generate --watch` watches: every place whose change can change a spec.
//!
//! - the profiles directory (a profile added, edited or removed; a ConfigMap volume's `..data`
//!   link swapped);
//! - for every profile that loads, the directories its node patterns (discovery globs, device
//!   and control nodes) can match below the dev root, at every wildcard level;
//! - the sysfs attributes that decide whether a node is a device and what its id is
//!   (`require_sysfs`, `id_sysfs`), for every node matching now;
//! - below the driver root, the directories searched for each library, binary and file, and the
//!   directories of the files they resolve to (what the specs mount);
//! - the output directory, for one of our specs removed by someone else.
//!
//! A directory that does not exist yet (`/dev/dri` before the driver loads) is covered by its
//! nearest existing ancestor, interested only in the name that leads to it: once it appears the
//! next round watches it. Device directories are not watched for writes: a write to a node
//! raises `IN_MODIFY` on its directory's watch (writes to `/dev/null` alone would wake the
//! watcher all the time), and what a spec says of a node (type, numbers, mode, owner) changes
//! only with a create, delete, rename or attribute change.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use devinject_devices::profile::IdSource;
use devinject_devices::{HostRoots, Profile};
use devinject_discovery::{profile_file, resolve_driver_files};
use inotify::WatchMask;
use tracing::warn;

use crate::generate::file_name;
use crate::request::CdiRequest;

/// Which names in a watched directory matter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Interest {
    /// Every name.
    pub all: bool,
    /// These names.
    pub names: BTreeSet<OsString>,
}

impl Interest {
    fn all() -> Self {
        Interest {
            all: true,
            names: BTreeSet::new(),
        }
    }

    fn name(name: &OsStr) -> Self {
        Interest {
            all: false,
            names: BTreeSet::from([name.to_os_string()]),
        }
    }

    pub fn merge(&mut self, other: Interest) {
        self.all |= other.all;
        self.names.extend(other.names);
    }

    /// Whether an event about `name` (`None`: the watched file or directory itself) matters.
    pub fn matches(&self, name: Option<&OsStr>) -> bool {
        name.is_none_or(|n| self.all || self.names.contains(n))
    }
}

/// One watch: the events and the names that matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The inotify events asked for.
    pub mask: WatchMask,
    /// The names whose events trigger a refresh.
    pub interest: Interest,
}

/// The watches wanted, by path (as this process reaches it).
pub(crate) type Targets = BTreeMap<PathBuf, Target>;

/// A directory holding device nodes.
const NODES: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF);
/// The nearest existing ancestor of a directory that is not there yet.
const ANCESTOR: WatchMask = WatchMask::CREATE
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF);
/// A directory of driver files: their content matters too (a library's soname).
const FILES: WatchMask = NODES.union(WatchMask::CLOSE_WRITE);
/// The profiles directory.
const PROFILES: WatchMask = FILES.union(WatchMask::MODIFY);
/// A sysfs attribute (kernfs raises `IN_MODIFY` on `sysfs_notify`).
const ATTRIBUTE: WatchMask = WatchMask::MODIFY.union(WatchMask::ATTRIB);
/// The output directory: only a removal of one of our specs by someone else matters (our own
/// writes create a temporary file and rename it, which must not wake the watcher again).
const OUTPUT: WatchMask = WatchMask::DELETE
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF);

/// The watches for `req` as the host is now.
pub(crate) fn targets(req: &CdiRequest) -> Targets {
    let mut t = Targets::new();
    let roots = req.access_roots();
    let profiles_dir = req.access(&req.profiles_dir);
    dir_target(&mut t, &profiles_dir, PROFILES, Interest::all());
    let profiles = load_profiles(&profiles_dir);
    for p in &profiles {
        node_targets(&mut t, &roots, p);
        sysfs_targets(&mut t, &roots, p);
        driver_targets(&mut t, &roots, p);
    }
    let output = req.access(&req.output_dir);
    if output.is_dir() {
        let names = profiles
            .iter()
            .map(|p| OsString::from(file_name(p.name.as_str())))
            .collect();
        insert(&mut t, output, OUTPUT, Interest { all: false, names });
    }
    t
}

/// Every `*.toml` in `dir` that loads; a broken one (invalid, or not a regular file) is left
/// out of the watches and logged, naming it, as `cdi generate` refuses it; the directory's
/// watch notices its repair. Read as every consumer reads a profile ([`profile_file::load`]): a FIFO
/// or device node there is refused through its fd, never opened.
fn load_profiles(dir: &Path) -> Vec<Profile> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| match profile_file::load(f) {
            Ok(p) => Some(p),
            Err(e) => {
                warn!(
                    profile = %f.display(),
                    error = %e,
                    "profile not loaded: its devices are not watched until it is fixed"
                );
                None
            }
        })
        .collect()
}

fn node_targets(t: &mut Targets, roots: &HostRoots, p: &Profile) {
    let patterns = p
        .discovery
        .nodes
        .iter()
        .chain(p.device_nodes.iter().map(|n| &n.path))
        .chain(p.control_nodes.iter().map(|n| &n.path));
    for pattern in patterns {
        pattern_targets(t, &roots.dev_root, pattern, NODES);
    }
}

fn sysfs_targets(t: &mut Targets, roots: &HostRoots, p: &Profile) {
    let mut templates: Vec<&str> = p
        .discovery
        .require_sysfs
        .keys()
        .map(String::as_str)
        .collect();
    if p.discovery.id == IdSource::Sysfs {
        templates.extend(p.discovery.id_sysfs.as_deref());
    }
    if templates.is_empty() {
        return;
    }
    for node in p
        .discovery
        .nodes
        .iter()
        .flat_map(|g| glob_under(&roots.dev_root, g))
    {
        let Some(name) = node.file_name().and_then(OsStr::to_str) else {
            continue;
        };
        for template in &templates {
            let attr = roots.in_sys_root(&substitute(template, name));
            // sysfs raises no event when an attribute appears; its node in /dev does.
            if attr.exists() {
                insert(t, attr, ATTRIBUTE, Interest::all());
            }
        }
    }
}

fn driver_targets(t: &mut Targets, roots: &HostRoots, p: &Profile) {
    for lib in &p.libraries {
        if let Some(soname) = &lib.soname {
            for dir in &p.library_dirs {
                dir_target(
                    t,
                    &roots.in_driver_root(dir),
                    FILES,
                    Interest::name(OsStr::new(soname)),
                );
            }
        }
        if let Some(g) = &lib.glob {
            pattern_targets(t, &roots.driver_root, g, FILES);
        }
    }
    for f in p.binaries.iter().chain(&p.files) {
        pattern_targets(t, &roots.driver_root, &f.path, FILES);
    }
    // What the specs mount: the real files the names above resolve to, wherever links lead.
    if let Ok(files) = resolve_driver_files(p, roots) {
        let real = files
            .libraries
            .iter()
            .map(|l| &l.path)
            .chain(files.binaries.iter().map(|b| &b.path))
            .chain(files.files.iter().map(|f| &f.path));
        for path in real {
            if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
                dir_target(t, dir, FILES, Interest::name(name));
            }
        }
    }
}

/// The directories whose entries decide what `pattern` (relative to `root`) matches: the
/// directory of its first wildcard component (or of its last component, when it has none), and
/// every directory each further wildcard level matches now.
fn pattern_targets(t: &mut Targets, root: &Path, pattern: &str, mask: WatchMask) {
    // `{name}` and `{n}` are filled in from the device's node name: any name.
    let pattern = pattern.replace("{name}", "*").replace("{n}", "*");
    let parts: Vec<&str> = Path::new(&pattern)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = parts.split_last() else {
        return;
    };
    let join = |parts: &[&str]| parts.iter().fold(root.to_path_buf(), |p, c| p.join(c));
    match parents.iter().position(|c| is_wild(c)) {
        None => {
            let interest = if is_wild(last) {
                Interest::all()
            } else {
                Interest::name(OsStr::new(last))
            };
            dir_target(t, &join(parents), mask, interest);
        }
        Some(first) => {
            dir_target(t, &join(&parents[..first]), mask, Interest::all());
            for level in first + 1..=parents.len() {
                for dir in glob_under(root, &parents[..level].join("/")) {
                    if dir.is_dir() {
                        insert(t, dir, mask, Interest::all());
                    }
                }
            }
        }
    }
}

fn is_wild(component: &str) -> bool {
    component.contains(['*', '?', '['])
}

/// The paths `pattern` (relative to `root`) matches now.
fn glob_under(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let full = format!(
        "{}/{}",
        glob::Pattern::escape(root.to_string_lossy().trim_end_matches('/')),
        pattern.trim_start_matches('/')
    );
    glob::glob(&full)
        .map(|paths| paths.flatten().collect())
        .unwrap_or_default()
}

/// Watches `dir`, or, while it is not a directory, its nearest existing ancestor for the name
/// leading to it.
fn dir_target(t: &mut Targets, dir: &Path, mask: WatchMask, interest: Interest) {
    if dir.is_dir() {
        insert(t, dir.to_path_buf(), mask, interest);
        return;
    }
    let mut child = dir;
    while let Some(parent) = child.parent() {
        if parent.is_dir() {
            if let Some(name) = child.file_name() {
                insert(t, parent.to_path_buf(), ANCESTOR, Interest::name(name));
            }
            return;
        }
        child = parent;
    }
}

fn insert(t: &mut Targets, path: PathBuf, mask: WatchMask, interest: Interest) {
    match t.get_mut(&path) {
        Some(existing) => {
            existing.mask |= mask;
            existing.interest.merge(interest);
        }
        None => {
            t.insert(path, Target { mask, interest });
        }
    }
}

/// `{name}` and `{n}` (the number at the end of the node's name) in a profile's sysfs path, as
/// discovery fills them in.
fn substitute(template: &str, name: &str) -> String {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let n = name[name.len() - digits..]
        .parse::<u64>()
        .map(|n| n.to_string())
        .unwrap_or_default();
    template.replace("{name}", name).replace("{n}", &n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(t: &Targets) -> Vec<(PathBuf, bool, Vec<String>)> {
        t.iter()
            .map(|(p, w)| {
                (
                    p.clone(),
                    w.interest.all,
                    w.interest
                        .names
                        .iter()
                        .map(|n| n.to_string_lossy().into_owned())
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_missing_directory_is_covered_by_its_nearest_ancestor() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let mut t = Targets::new();
        pattern_targets(&mut t, root, "dri/renderD[0-9]*", NODES);
        assert_eq!(
            watched(&t),
            [(root.to_path_buf(), false, vec!["dri".into()])]
        );
        assert_eq!(t[root].mask, ANCESTOR);

        std::fs::create_dir(root.join("dri")).expect("mkdir");
        let mut t = Targets::new();
        pattern_targets(&mut t, root, "dri/renderD{n}", NODES);
        assert_eq!(watched(&t), [(root.join("dri"), true, vec![])]);
        assert_eq!(t[&root.join("dri")].mask, NODES);
    }

    #[test]
    fn literal_names_and_wildcard_levels() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        std::fs::create_dir_all(root.join("bus/a/x")).expect("mkdir");
        std::fs::create_dir_all(root.join("bus/b")).expect("mkdir");
        let mut t = Targets::new();
        pattern_targets(&mut t, root, "kvm", NODES);
        pattern_targets(&mut t, root, "fuse", NODES);
        assert_eq!(
            watched(&t),
            [(root.to_path_buf(), false, vec!["fuse".into(), "kvm".into()])]
        );
        pattern_targets(&mut t, root, "bus/*/x/accel*", NODES);
        assert_eq!(
            watched(&t),
            [
                (root.to_path_buf(), false, vec!["fuse".into(), "kvm".into()]),
                (root.join("bus"), true, vec![]),
                (root.join("bus/a"), true, vec![]),
                (root.join("bus/a/x"), true, vec![]),
                (root.join("bus/b"), true, vec![]),
            ]
        );
    }

    #[test]
    fn interests_merge_and_match() {
        let mut i = Interest::name(OsStr::new("dri"));
        assert!(i.matches(Some(OsStr::new("dri"))));
        assert!(!i.matches(Some(OsStr::new("null"))));
        assert!(i.matches(None), "an event on the watched directory itself");
        i.merge(Interest::all());
        assert!(i.matches(Some(OsStr::new("null"))));
    }

    #[test]
    fn sysfs_templates_take_the_node_name_and_number() {
        assert_eq!(
            substitute("class/drm/{name}/device/vendor", "renderD128"),
            "class/drm/renderD128/device/vendor"
        );
        assert_eq!(
            substitute("class/apex/apex_{n}", "apex_03"),
            "class/apex/apex_3"
        );
        assert_eq!(substitute("x/{n}", "kvm"), "x/");
    }
}
