//! A device node's directory in sysfs. The kernel links each device number to its device:
//! `/sys/dev/char/<major>:<minor>` -> `../../devices/pci0000:00/0000:00:14.0/usb2/2-1`. The link
//! is read and resolved by its text, within the sys root: nothing it names is followed, and a
//! link that leaves the sys root's `devices/` names no device.

use std::path::{Component, Path, PathBuf};

use devinject_devices::{DeviceKind, DeviceNode, HostRoots};

/// The components of `node`'s device directory below the sys root, starting with `devices`
/// (`["devices", "pci0000:00", ..., "2-1"]`); `None` when the kernel links no device to its
/// number or the link leaves `devices/`.
pub fn device_path(roots: &HostRoots, node: &DeviceNode) -> Option<Vec<String>> {
    let class = match node.kind {
        DeviceKind::Char => "char",
        DeviceKind::Block => "block",
    };
    let link = Path::new("dev")
        .join(class)
        .join(format!("{}:{}", node.major, node.minor));
    let target = std::fs::read_link(roots.sys_root.join(&link)).ok()?;
    let mut path: Vec<String> = vec!["dev".into(), class.into()];
    for c in target.components() {
        match c {
            Component::Normal(s) => path.push(s.to_str()?.to_owned()),
            Component::ParentDir => {
                path.pop()?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (path.first().map(String::as_str) == Some("devices")).then_some(path)
}

/// The directory under the sys root that `components[..=last]` names.
pub fn dir(roots: &HostRoots, components: &[String], last: usize) -> PathBuf {
    let below: PathBuf = components[..=last].iter().collect();
    roots.sys_root.join(below)
}

/// What the tests of the modules that read a node's sysfs directory build their hosts from.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::{Path, PathBuf};

    use devinject_devices::{DeviceKind, DeviceNode, HostRoots};

    /// Roots with only a sys root, at `sys`.
    pub(crate) fn roots(sys: &Path) -> HostRoots {
        HostRoots {
            dev_root: PathBuf::from("/nonexistent"),
            sys_root: sys.to_owned(),
            proc_root: PathBuf::from("/nonexistent"),
            driver_root: PathBuf::from("/nonexistent"),
        }
    }

    /// A node of `kind` with the numbers `major:minor` (its paths do not matter here).
    pub(crate) fn node(kind: DeviceKind, major: u32, minor: u32) -> DeviceNode {
        DeviceNode {
            host_path: PathBuf::from("/dev/x"),
            container_path: PathBuf::from("/dev/x"),
            kind,
            major,
            minor,
            mode: 0o666,
            uid: 0,
            gid: 0,
        }
    }
}
