//! Where a resource's devices come from: a small trait so the health monitor can be driven by a
//! profile on a real host ([`ProfileSource`]), or by a fake in tests.

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use devinject_devices::{discover, DiscoveryError, HostRoots, Profile};

use crate::advertisement::ScannedDevice;

/// A kind of device on this host.
pub trait DeviceSource: Send + 'static {
    /// Why a scan failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The devices present now, with their health.
    fn scan(&self) -> Result<Vec<ScannedDevice>, Self::Error>;

    /// Files and directories whose changes may change [`Self::scan`]'s answer: the directories
    /// holding device nodes and any health attributes. They may not exist yet.
    fn watch_paths(&self) -> Vec<PathBuf>;
}

/// A profile's devices under a set of host roots, found by `devinject_devices::discover`.
pub struct ProfileSource {
    profile: Profile,
    roots: HostRoots,
    /// The health attribute of each device of the last scan.
    health_attributes: Mutex<Vec<PathBuf>>,
}

impl ProfileSource {
    /// A source for `profile` under `roots`.
    pub fn new(profile: Profile, roots: HostRoots) -> Self {
        Self {
            profile,
            roots,
            health_attributes: Mutex::new(Vec::new()),
        }
    }
}

impl DeviceSource for ProfileSource {
    type Error = DiscoveryError;

    fn scan(&self) -> Result<Vec<ScannedDevice>, DiscoveryError> {
        let inventory = match discover(&self.profile, &self.roots) {
            Ok(inventory) => inventory,
            // A required control or per-device node is gone: no container of this kind could
            // start (the hook fails the same discovery), so every device is unhealthy until it
            // is back. Other errors may be transient and keep the last list.
            Err(err @ DiscoveryError::Missing { .. }) => {
                tracing::warn!(profile = %self.profile.name, error = %err, "devices unusable");
                return Ok(Vec::new());
            }
            Err(err) => return Err(err),
        };
        if let Some(template) = &self.profile.discovery.health_sysfs {
            let paths = inventory
                .devices
                .iter()
                .map(|d| self.roots.in_sys_root(&substitute(template, &d.name)))
                .collect();
            *self
                .health_attributes
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = paths;
        }
        Ok(inventory
            .devices
            .into_iter()
            .map(|d| ScannedDevice {
                id: d.id.to_string(),
                numa_node: d.numa_node,
                healthy: d.healthy,
            })
            .collect())
    }

    fn watch_paths(&self) -> Vec<PathBuf> {
        let node_patterns = self
            .profile
            .discovery
            .nodes
            .iter()
            .chain(self.profile.device_nodes.iter().map(|n| &n.path))
            .chain(self.profile.control_nodes.iter().map(|n| &n.path));
        let mut paths = Vec::new();
        for pattern in node_patterns {
            for dir in pattern_dirs(&self.roots.dev_root, pattern) {
                if !paths.contains(&dir) {
                    paths.push(dir);
                }
            }
        }
        paths.extend(
            self.health_attributes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        paths
    }
}

/// `{name}` and `{n}` (the trailing number of the node's name) in a profile path, as discovery
/// substitutes them.
fn substitute(template: &str, name: &str) -> String {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    template
        .replace("{name}", name)
        .replace("{n}", &name[name.len() - digits..])
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
    fn substitution() {
        assert_eq!(
            substitute("class/accel/{name}/device/health", "accel12"),
            "class/accel/accel12/device/health"
        );
        assert_eq!(
            substitute("class/apex/apex_{n}/temp", "apex_3"),
            "class/apex/apex_3/temp"
        );
    }
}
