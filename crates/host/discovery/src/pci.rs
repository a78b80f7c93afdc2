//! A device's place on the PCI bus ([`devinject_devices::PciLocation`]), read from sysfs: the
//! link of its number to its device directory ([`crate::sysfs_device`]) and its function's
//! `numa_node`.

use devinject_devices::pci::{is_bus_id, is_root_complex};
use devinject_devices::{DeviceNode, HostRoots, PciLocation};

use crate::sysfs_device;

/// The PCI location of the device `node` belongs to, under `roots`' sys root; `None` for a
/// device that is not on PCI (a virtual or platform device) or whose link cannot be read.
pub fn pci_location(roots: &HostRoots, node: &DeviceNode) -> Option<PciLocation> {
    let path = sysfs_device::device_path(roots, node)?;
    let root = path.get(1).filter(|c| is_root_complex(c))?.clone();
    let last = path.iter().rposition(|c| is_bus_id(c))?;
    let bus_id = path[last].clone();
    let numa_node =
        std::fs::read_to_string(sysfs_device::dir(roots, &path, last).join("numa_node"))
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .filter(|&n| n >= 0);
    Some(PciLocation {
        root,
        bus_id,
        numa_node,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs_device::testing::{node, roots};
    use devinject_devices::DeviceKind;
    use std::path::Path;

    fn link(sys: &Path, class: &str, number: &str, target: &str) {
        let dir = sys.join("dev").join(class);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(target, dir.join(number)).unwrap();
    }

    #[test]
    fn a_device_below_a_bridge_is_placed_at_its_own_function_and_root() {
        let t = tempfile::tempdir().unwrap();
        let function = t
            .path()
            .join("devices/pci0000:40/0000:40:01.1/0000:41:00.0");
        std::fs::create_dir_all(function.join("drm/renderD128")).unwrap();
        std::fs::write(function.join("numa_node"), "1\n").unwrap();
        link(
            t.path(),
            "char",
            "226:128",
            "../../devices/pci0000:40/0000:40:01.1/0000:41:00.0/drm/renderD128",
        );
        assert_eq!(
            pci_location(&roots(t.path()), &node(DeviceKind::Char, 226, 128)),
            Some(PciLocation {
                root: "pci0000:40".into(),
                bus_id: "0000:41:00.0".into(),
                numa_node: Some(1),
            })
        );
        // A block device's number is looked up among the block devices.
        assert_eq!(
            pci_location(&roots(t.path()), &node(DeviceKind::Block, 226, 128)),
            None
        );
    }

    #[test]
    fn virtual_devices_unknown_numbers_and_escaping_links_have_no_location() {
        let t = tempfile::tempdir().unwrap();
        link(t.path(), "char", "10:232", "../../devices/virtual/misc/kvm");
        link(
            t.path(),
            "char",
            "1:1",
            "../../../../etc/devices/pci0000:00/0000:00:01.0",
        );
        link(
            t.path(),
            "char",
            "1:2",
            "/sys/devices/pci0000:00/0000:00:01.0",
        );
        link(
            t.path(),
            "char",
            "1:3",
            "../../devices/pci0000:00/not-a-function",
        );
        let r = roots(t.path());
        for (major, minor) in [(10, 232), (1, 1), (1, 2), (1, 3), (5, 5)] {
            assert_eq!(
                pci_location(&r, &node(DeviceKind::Char, major, minor)),
                None,
                "{major}:{minor}"
            );
        }
        // No numa_node file, or -1: no NUMA node.
        link(
            t.path(),
            "char",
            "2:0",
            "../../devices/pci0000:00/0000:00:02.0/x/y",
        );
        std::fs::create_dir_all(t.path().join("devices/pci0000:00/0000:00:02.0")).unwrap();
        let at = pci_location(&r, &node(DeviceKind::Char, 2, 0)).unwrap();
        assert_eq!((at.bus_id.as_str(), at.numa_node), ("0000:00:02.0", None));
        std::fs::write(
            t.path().join("devices/pci0000:00/0000:00:02.0/numa_node"),
            "-1\n",
        )
        .unwrap();
        assert_eq!(
            pci_location(&r, &node(DeviceKind::Char, 2, 0))
                .unwrap()
                .numa_node,
            None
        );
    }
}
