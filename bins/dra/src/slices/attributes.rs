//! The attributes each published device carries: the driver's own (`profile`, `id`, `index`,
//! `numaNode`; `replica` on a share, `partition` on a partition), the profile's sysfs
//! attributes as strings and, for a device on PCI, the standard attributes of
//! k8s.io/dynamic-resource-allocation's `deviceattribute` package
//! (`resource.kubernetes.io/pcieRoot`, `pciBusID` and `numaNode`), so that a claim can
//! `matchAttribute` across drivers
//! (<https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/>).
//! The driver's names are unqualified, so they take the driver's domain.

use std::collections::BTreeMap;

use devinject_devices::{Inventory, PciLocation, Profile};
use k8s_openapi::api::resource::v1::DeviceAttribute;

/// Attribute: the profile the device belongs to (string).
pub const ATTR_PROFILE: &str = "profile";
/// Attribute: the device's id in its profile (string).
pub const ATTR_ID: &str = "id";
/// Attribute: the device's discovery index (int).
pub const ATTR_INDEX: &str = "index";
/// Attribute: the device's NUMA node (int), when known.
pub const ATTR_NUMA_NODE: &str = "numaNode";
/// Kubernetes' standard attribute (k8s.io/dynamic-resource-allocation, `deviceattribute`): the
/// device's PCIe root complex, `pci<domain>:<bus>` (string), when it is on PCI.
pub const STD_PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
/// Kubernetes' standard attribute: the device's PCI function, `<domain>:<bus>:<dev>.<fn>`
/// (string), when it is on PCI.
pub const STD_PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// Kubernetes' standard attribute (1.37): the device's NUMA node (int), when known: the
/// profile's `numa_sysfs`, else its PCI function's `numa_node`.
pub const STD_NUMA_NODE: &str = "resource.kubernetes.io/numaNode";
/// Attribute: which share of a shared device this is (int, 0 to `replicas` - 1), on the
/// devices of a profile with `replicas` > 1 only.
pub const ATTR_REPLICA: &str = "replica";
/// Attribute: which shape of its device a partition is (string, a `[partitions.shapes]` name),
/// on the partitions of a profile with `[partitions]` only; the whole device carries none.
pub const ATTR_PARTITION: &str = "partition";

/// The attributes device `d` of `profile` carries, whatever share of it is published (see the
/// module docs); `location` is where it sits on the PCI bus, if it does.
pub fn device_attributes(
    profile: &Profile,
    d: &devinject_devices::Device,
    location: Option<&PciLocation>,
) -> BTreeMap<String, DeviceAttribute> {
    let mut attributes = BTreeMap::new();
    attributes.insert(ATTR_PROFILE.to_owned(), string(profile.name.as_str()));
    attributes.insert(ATTR_ID.to_owned(), string(d.id.as_str()));
    attributes.insert(
        ATTR_INDEX.to_owned(),
        int(i64::try_from(d.index).unwrap_or(i64::MAX)),
    );
    if let Some(numa) = d.numa_node {
        attributes.insert(ATTR_NUMA_NODE.to_owned(), int(numa));
    }
    if let Some(at) = location {
        attributes.insert(STD_PCIE_ROOT.to_owned(), string(&at.root));
        attributes.insert(STD_PCI_BUS_ID.to_owned(), string(&at.bus_id));
    }
    if let Some(numa) = d.numa_node.or(location.and_then(|at| at.numa_node)) {
        attributes.insert(STD_NUMA_NODE.to_owned(), int(numa));
    }
    for (name, value) in &d.attributes {
        attributes.insert(name.clone(), string(value));
    }
    attributes
}

/// Where each device of `inventory` sits on the PCI bus (its first node's), by device id;
/// devices off PCI are absent.
pub fn pci_locations(
    inventory: &Inventory,
    roots: &devinject_devices::HostRoots,
) -> BTreeMap<String, PciLocation> {
    inventory
        .devices
        .iter()
        .filter_map(|d| {
            let node = d.nodes.first()?;
            Some((
                d.id.as_str().to_owned(),
                devinject_discovery::pci_location(roots, node)?,
            ))
        })
        .collect()
}

pub(super) fn string(s: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(s.to_owned()),
        ..DeviceAttribute::default()
    }
}

pub(super) fn int(i: i64) -> DeviceAttribute {
    DeviceAttribute {
        int: Some(i),
        ..DeviceAttribute::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::{build, device, inventory, only, profile, LEFT_OUT};
    use crate::slices::{resource_slices, ApiFields, DeviceState};

    #[test]
    fn the_attributes_every_device_carries_are_those_profiles_may_not_name() {
        assert_eq!(
            devinject_devices::profile::DEVICE_ATTRIBUTES,
            [
                ATTR_PROFILE,
                ATTR_ID,
                ATTR_INDEX,
                ATTR_NUMA_NODE,
                ATTR_REPLICA,
                ATTR_PARTITION
            ]
        );
    }

    #[test]
    fn attribute_names_are_c_identifiers_of_at_most_32_characters() {
        for name in [ATTR_PROFILE, ATTR_ID, ATTR_INDEX, ATTR_NUMA_NODE] {
            assert!(name.len() <= 32, "{name}");
            assert!(
                name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'),
                "{name}"
            );
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{name}"
            );
        }
    }

    #[test]
    fn a_devices_sysfs_attributes_are_published_as_strings() {
        let mut d = device("GPU-A", 0, None, true);
        d.attributes.insert("vendor".into(), "0x1002".into());
        let slice = build("node-a", &profile(), &inventory(vec![d]), 1, LEFT_OUT).unwrap();
        let devices = slice.spec.devices.unwrap();
        let a = devices[0].attributes.as_ref().unwrap();
        assert_eq!(a["vendor"].string.as_deref(), Some("0x1002"));
        assert_eq!(a["id"].string.as_deref(), Some("GPU-A"));
    }

    #[test]
    fn a_device_on_pci_carries_the_standard_attributes() {
        let inv = inventory(vec![
            device("0", 0, None, true),
            device("1", 1, Some(3), true),
            device("2", 2, None, true),
        ]);
        let at = |bus_id: &str, numa_node| PciLocation {
            root: "pci0000:40".into(),
            bus_id: bus_id.into(),
            numa_node,
        };
        let locations = BTreeMap::from([
            ("0".to_owned(), at("0000:41:00.0", Some(1))),
            ("1".to_owned(), at("0000:42:00.0", Some(0))),
        ]);
        let slice = only(resource_slices(
            "devinject.io",
            "n",
            &profile(),
            &inv,
            1,
            ApiFields::ALL,
            &DeviceState {
                locations,
                ..DeviceState::default()
            },
        ))
        .unwrap();
        let devices = slice.spec.devices.unwrap();
        let a = devices[0].attributes.as_ref().unwrap();
        assert_eq!(a[STD_PCIE_ROOT].string.as_deref(), Some("pci0000:40"));
        assert_eq!(a[STD_PCI_BUS_ID].string.as_deref(), Some("0000:41:00.0"));
        assert_eq!(a[STD_NUMA_NODE].int, Some(1), "the function's NUMA node");
        assert!(
            !a.contains_key(ATTR_NUMA_NODE),
            "the profile's own stays the profile's"
        );
        let b = devices[1].attributes.as_ref().unwrap();
        assert_eq!(
            b[STD_NUMA_NODE].int,
            Some(3),
            "the profile's NUMA node first"
        );
        assert_eq!(b[ATTR_NUMA_NODE].int, Some(3));
        let c = devices[2].attributes.as_ref().unwrap();
        for std in [STD_PCIE_ROOT, STD_PCI_BUS_ID, STD_NUMA_NODE] {
            assert!(!c.contains_key(std), "a device off PCI has no {std}");
        }
    }

    #[test]
    fn a_device_off_pci_carries_its_profile_id_index_and_numa_node_only() {
        let d = device("GPU-A", 2, Some(1), true);
        let a = device_attributes(&profile(), &d, None);
        let found: Vec<(&str, Option<&str>, Option<i64>)> = a
            .iter()
            .map(|(k, v)| (k.as_str(), v.string.as_deref(), v.int))
            .collect();
        assert_eq!(
            found,
            [
                ("id", Some("GPU-A"), None),
                ("index", None, Some(2)),
                ("numaNode", None, Some(1)),
                ("profile", Some("demo"), None),
                ("resource.kubernetes.io/numaNode", None, Some(1)),
            ]
        );
    }

    #[test]
    fn the_pci_functions_numa_node_stands_in_only_where_the_profile_knows_none() {
        let at = PciLocation {
            root: "pci0000:00".into(),
            bus_id: "0000:00:02.0".into(),
            numa_node: Some(0),
        };
        let unknown = device_attributes(&profile(), &device("0", 0, None, true), Some(&at));
        assert_eq!(unknown[STD_NUMA_NODE].int, Some(0));
        assert!(!unknown.contains_key(ATTR_NUMA_NODE));
        assert_eq!(unknown[STD_PCIE_ROOT].string.as_deref(), Some("pci0000:00"));
        assert_eq!(
            unknown[STD_PCI_BUS_ID].string.as_deref(),
            Some("0000:00:02.0")
        );
        let known = device_attributes(&profile(), &device("0", 0, Some(3), true), Some(&at));
        assert_eq!(known[STD_NUMA_NODE].int, Some(3));
        let neither = PciLocation {
            numa_node: None,
            ..at
        };
        let none = device_attributes(&profile(), &device("0", 0, None, true), Some(&neither));
        assert!(!none.contains_key(STD_NUMA_NODE));
    }

    #[test]
    fn pci_locations_follow_each_devices_first_node_and_leave_out_devices_off_pci() {
        let temp = tempfile::tempdir().unwrap();
        let sys = temp.path().join("sys");
        let function = sys.join("devices/pci0000:40/0000:40:01.0/0000:41:00.0");
        std::fs::create_dir_all(&function).unwrap();
        std::fs::write(function.join("numa_node"), "1\n").unwrap();
        std::fs::create_dir_all(sys.join("dev/char")).unwrap();
        // The kernel's link from the device number to the device (index 0: 240:0); device 1
        // has none, as a virtual device.
        std::os::unix::fs::symlink(
            "../../devices/pci0000:40/0000:40:01.0/0000:41:00.0/demo/accel0",
            sys.join("dev/char/240:0"),
        )
        .unwrap();
        let roots = devinject_devices::HostRoots {
            dev_root: temp.path().join("dev"),
            sys_root: sys,
            proc_root: temp.path().join("proc"),
            driver_root: temp.path().join("driver"),
        };
        let inv = inventory(vec![device("a", 0, None, true), device("b", 1, None, true)]);
        assert_eq!(
            pci_locations(&inv, &roots),
            BTreeMap::from([(
                "a".to_owned(),
                PciLocation {
                    root: "pci0000:40".into(),
                    bus_id: "0000:41:00.0".into(),
                    numa_node: Some(1),
                }
            )])
        );
    }
}
