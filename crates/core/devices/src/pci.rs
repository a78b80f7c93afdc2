//! Where a device sits on the PCI bus, from sysfs: its PCI Express root complex, its bus
//! address and its NUMA node, what Kubernetes' standard device attributes carry
//! (`resource.kubernetes.io/pcieRoot`, `pciBusID`, `numaNode`; defined in
//! k8s.io/dynamic-resource-allocation's `deviceattribute` package), so that a claim can ask for
//! devices on one root complex or NUMA node with `matchAttribute`.
//!
//! The device's directory in sysfs (read by the devinject-discovery crate), e.g.
//! `devices/pci0000:00/0000:00:01.0/0000:01:00.0/drm/renderD128`, names the root complex first
//! (`pci<domain>:<bus>`), then each PCI function on the way down
//! (`<domain>:<bus>:<device>.<function>`); the last is the device's own. Only the function's
//! `numa_node` is read.

/// A device's place on the PCI bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciLocation {
    /// The root complex, `pci<domain>:<bus>` (e.g. `pci0000:00`).
    pub root: String,
    /// The device's PCI function, `<domain>:<bus>:<device>.<function>` (e.g. `0000:01:00.0`).
    pub bus_id: String,
    /// The function's NUMA node, when the kernel knows one (`numa_node` is not `-1`).
    pub numa_node: Option<i64>,
}

/// `pci<domain>:<bus>`: four and two hex digits.
pub fn is_root_complex(s: &str) -> bool {
    s.strip_prefix("pci")
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(domain, bus)| hex(domain, 4) && hex(bus, 2))
}

/// `<domain>:<bus>:<device>.<function>`: 4, 2, 2 and 1 hex digits.
pub fn is_bus_id(s: &str) -> bool {
    let mut parts = s.split(':');
    let (Some(domain), Some(bus), Some(rest), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    rest.split_once('.').is_some_and(|(device, function)| {
        hex(domain, 4) && hex(bus, 2) && hex(device, 2) && hex(function, 1)
    })
}

fn hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_are_told_apart_by_their_shape() {
        assert!(is_root_complex("pci0000:00") && is_root_complex("pci10ab:7f"));
        assert!(!is_root_complex("pci0000:000") && !is_root_complex("0000:00"));
        assert!(is_bus_id("0000:41:00.0") && is_bus_id("abcd:ef:1f.7"));
        assert!(!is_bus_id("0000:41:00") && !is_bus_id("0000:41:00.0:1") && !is_bus_id("usb1"));
    }
}
