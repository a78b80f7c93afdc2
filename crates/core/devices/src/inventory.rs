//! What discovery found for one profile: its devices, each with its nodes, ids and
//! attributes, the kind's control nodes, and the devices it left out. The devinject-discovery
//! crate fills it from the host; requests, the planner and the prepare steps read it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::names::DeviceId;
use crate::node::DeviceNode;

/// One discovered device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Stable id, advertised to the kubelet and accepted in requests.
    pub id: DeviceId,
    /// Position in discovery order; requests may name it.
    pub index: usize,
    /// The matched node's file name, e.g. `accel0`.
    pub name: String,
    /// The device's own nodes: the matched node first, then the profile's `device_nodes`, then
    /// the `discovery.links` that lead to the matched node, each at the link's path.
    pub nodes: Vec<DeviceNode>,
    /// NUMA node, when sysfs tells one.
    pub numa_node: Option<i64>,
    /// Health from the profile's sysfs attribute (true when none is configured).
    pub healthy: bool,
    /// The profile's `discovery.attributes_sysfs` that could be read, by name (an attribute
    /// whose file is missing, empty or longer than [`MAX_ATTRIBUTE_VALUE`] is left out).
    pub attributes: BTreeMap<String, String>,
    /// Other ids requests may name it by (`discovery.aliases`: a GPU's UUID, its bus id), each
    /// naming this device only (the devinject-discovery crate drops one that names two).
    pub aliases: Vec<DeviceId>,
}

impl Device {
    /// True when `name` is its id or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.id.as_str() == name || self.aliases.iter().any(|a| a.as_str() == name)
    }
}

/// The longest attribute value kept (the DRA API's limit for a string attribute).
pub const MAX_ATTRIBUTE_VALUE: usize = 64;

/// A device discovery found and left out, because something of its own could not be read or
/// used: its node, its id, one of its per-device nodes, or an id another device has too. The
/// profile's other devices are served; this one is not, until a rescan finds it whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withdrawn {
    /// The node discovery matched for it.
    pub node: PathBuf,
    /// Why, naming the thing and the fix.
    pub problem: String,
}

/// Everything discovery found for one profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// The devices, in index order.
    pub devices: Vec<Device>,
    /// The kind's control nodes, injected with any device.
    pub control_nodes: Vec<DeviceNode>,
    /// The devices left out, each for a problem of its own ([`Withdrawn`]).
    pub withdrawn: Vec<Withdrawn>,
}

impl Inventory {
    /// The device with id `id`.
    pub fn by_id(&self, id: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.id.as_str() == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(id: &str, index: usize) -> Device {
        let node = DeviceNode {
            host_path: format!("/dev/sim/accel{index}").into(),
            container_path: format!("/dev/sim/accel{index}").into(),
            kind: crate::DeviceKind::Char,
            major: 240,
            minor: u32::try_from(index).unwrap(),
            mode: 0o666,
            uid: 0,
            gid: 0,
        };
        Device {
            id: DeviceId::new(id).unwrap(),
            index,
            name: format!("accel{index}"),
            nodes: vec![node],
            numa_node: None,
            healthy: true,
            attributes: Default::default(),
            aliases: Vec::new(),
        }
    }

    #[test]
    fn by_id_finds_the_device_with_that_id_only() {
        let inv = Inventory {
            withdrawn: Vec::new(),
            devices: vec![device("SN-7", 0), device("SN-3", 1)],
            control_nodes: Vec::new(),
        };
        assert_eq!(inv.by_id("SN-3").map(|d| d.index), Some(1));
        assert_eq!(inv.by_id("SN-7").map(|d| d.index), Some(0));
        assert_eq!(inv.by_id("SN-1"), None);
        assert_eq!(inv.by_id("1"), None, "an index is not an id");
    }
}
