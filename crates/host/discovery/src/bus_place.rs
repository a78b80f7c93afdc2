//! Where a device node sits on its bus, read from sysfs: the nearest USB device and PCI
//! function above the node's directory ([`crate::sysfs_device`]), their attributes, and
//! whether a profile's selectors ([`devinject_devices::bus_select`]) choose the node.

use devinject_devices::bus_select::{hex_u16, is_usb_device, BusAddress, PciSelector, UsbSelector};
use devinject_devices::pci::is_bus_id;
use devinject_devices::{DeviceNode, HostRoots};

use crate::sysfs_attr::read_attr;
use crate::sysfs_device;

/// Where a node sits in sysfs: its device directory's path ([`sysfs_device::device_path`], read
/// once), with the nearest USB device and PCI function on it.
pub struct BusPlace<'a> {
    roots: &'a HostRoots,
    path: Vec<String>,
    usb: Option<usize>,
    pci: Option<usize>,
}

impl<'a> BusPlace<'a> {
    /// The place of `node` under `roots`; `None` when the kernel links no device to its number.
    pub fn of(roots: &'a HostRoots, node: &DeviceNode) -> Option<Self> {
        let path = sysfs_device::device_path(roots, node)?;
        let usb = path.iter().rposition(|c| is_usb_device(c));
        let pci = path.iter().rposition(|c| is_bus_id(c));
        Some(Self {
            roots,
            path,
            usb,
            pci,
        })
    }

    /// The node's place on its bus: the nearest USB device above its sysfs directory, else the
    /// nearest PCI function; `None` for a node on neither (a virtual device such as kvm).
    pub fn address(&self) -> Option<BusAddress> {
        match (self.usb, self.pci) {
            (Some(at), _) => Some(BusAddress::Usb(self.path[at].clone())),
            (None, Some(at)) => Some(BusAddress::Pci(self.path[at].clone())),
            (None, None) => None,
        }
    }

    /// Attribute `name` of the directory ending at component `at`.
    fn attr(&self, at: usize, name: &str) -> Option<String> {
        read_attr(&sysfs_device::dir(self.roots, &self.path, at).join(name))
    }

    /// Whether one of `usb` matches the USB device the node belongs to.
    fn usb_chosen(&self, usb: &[UsbSelector]) -> bool {
        let Some(at) = self.usb.filter(|_| !usb.is_empty()) else {
            return false;
        };
        let vendor = self.attr(at, "idVendor").as_deref().and_then(hex_u16);
        let product = self.attr(at, "idProduct").as_deref().and_then(hex_u16);
        let serial = self.attr(at, "serial");
        usb.iter()
            .any(|s| s.matches(vendor, product, serial.as_deref()))
    }

    /// Whether one of `pci` matches the node's PCI function.
    fn pci_chosen(&self, pci: &[PciSelector]) -> bool {
        let Some(at) = self.pci.filter(|_| !pci.is_empty()) else {
            return false;
        };
        let id = |name| {
            self.attr(at, name)
                .as_deref()
                .and_then(|v| hex_u16(v.strip_prefix("0x").unwrap_or(v)))
        };
        let (vendor, device) = (id("vendor"), id("device"));
        let class = self
            .attr(at, "class")
            .and_then(|v| u32::from_str_radix(v.strip_prefix("0x").unwrap_or(&v), 16).ok());
        pci.iter().any(|s| s.matches(vendor, device, class))
    }
}

/// Whether a node at `place` is chosen by the selectors: with none, every node is; otherwise
/// one of `usb` matches the USB device the node belongs to, or one of `pci` its PCI function
/// (a node with no place in sysfs is chosen by none).
pub fn chosen(place: Option<&BusPlace<'_>>, usb: &[UsbSelector], pci: &[PciSelector]) -> bool {
    if usb.is_empty() && pci.is_empty() {
        return true;
    }
    place.is_some_and(|p| p.usb_chosen(usb) || p.pci_chosen(pci))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::sysfs_device::testing::roots;
    use devinject_devices::bus_select::{PciClass, PciId, UsbId};
    use devinject_devices::DeviceKind;

    fn node(major: u32, minor: u32) -> DeviceNode {
        crate::sysfs_device::testing::node(DeviceKind::Char, major, minor)
    }

    /// A device directory `dir` (below the sys root) with `attrs`, linked from number
    /// `major:minor` at `node_dir` (below `dir`).
    fn device(sys: &Path, number: &str, dir: &str, node_dir: &str, attrs: &[(&str, &str)]) {
        std::fs::create_dir_all(sys.join(dir).join(node_dir)).unwrap();
        for (name, value) in attrs {
            std::fs::write(sys.join(dir).join(name), format!("{value}\n")).unwrap();
        }
        std::fs::create_dir_all(sys.join("dev/char")).unwrap();
        let target = format!("../../{dir}/{node_dir}");
        std::os::unix::fs::symlink(
            target.trim_end_matches('/'),
            sys.join("dev/char").join(number),
        )
        .unwrap();
    }

    fn usb(vendor: &str, product: &str, serial: Option<&str>) -> UsbSelector {
        UsbSelector {
            vendor: UsbId::try_from(vendor.to_owned()).unwrap(),
            product: UsbId::try_from(product.to_owned()).unwrap(),
            serial: serial.map(str::to_owned),
        }
    }

    fn pci(vendor: Option<&str>, device: Option<&str>, class: Option<&str>) -> PciSelector {
        PciSelector {
            vendor: vendor.map(|v| PciId::try_from(v.to_owned()).unwrap()),
            device: device.map(|v| PciId::try_from(v.to_owned()).unwrap()),
            class: class.map(|v| PciClass::try_from(v.to_owned()).unwrap()),
        }
    }

    /// The simulated bus: the Coral USB Accelerator at port 2-1 before its firmware
    /// (`1a6e:089a`, 189:130), a keyboard at 2-2, an FTDI serial adapter at 2-3 whose tty is
    /// below its interface, and a PCI Edge TPU; kvm is on no bus.
    fn bus(sys: &Path) {
        let hc = "devices/pci0000:00/0000:00:14.0/usb2";
        device(
            sys,
            "189:130",
            &format!("{hc}/2-1"),
            "",
            &[("idVendor", "1a6e"), ("idProduct", "089a")],
        );
        device(
            sys,
            "189:131",
            &format!("{hc}/2-2"),
            "",
            &[("idVendor", "046d"), ("idProduct", "c31c")],
        );
        device(
            sys,
            "188:0",
            &format!("{hc}/2-3"),
            "2-3:1.0/ttyUSB0/tty/ttyUSB0",
            &[
                ("idVendor", "0403"),
                ("idProduct", "6001"),
                ("serial", "A50285BI"),
            ],
        );
        device(
            sys,
            "120:0",
            "devices/pci0000:00/0000:00:1c.0/0000:03:00.0",
            "apex/apex_0",
            &[
                ("vendor", "0x1ac1"),
                ("device", "0x089a"),
                ("class", "0x0880ff"),
            ],
        );
        std::fs::create_dir_all(sys.join("devices/virtual/misc/kvm")).unwrap();
        std::os::unix::fs::symlink(
            "../../devices/virtual/misc/kvm",
            sys.join("dev/char/10:232"),
        )
        .unwrap();
    }

    #[test]
    fn a_node_is_chosen_by_the_usb_device_or_pci_function_it_belongs_to() {
        let t = tempfile::tempdir().unwrap();
        bus(t.path());
        let r = roots(t.path());
        let coral = [usb("1a6e", "089a", None), usb("18d1", "9302", None)];
        let chosen_by = |n: &DeviceNode, u: &[UsbSelector], p: &[PciSelector]| {
            chosen(BusPlace::of(&r, n).as_ref(), u, p)
        };
        assert!(chosen_by(&node(189, 130), &coral, &[]));
        assert!(!chosen_by(&node(189, 131), &coral, &[]), "the keyboard");
        assert!(!chosen_by(&node(10, 232), &coral, &[]), "kvm is on no bus");
        assert!(!chosen_by(&node(189, 199), &coral, &[]), "no such number");
        // A tty below the adapter's interface belongs to the adapter; its serial must match.
        let ftdi = |serial| [usb("0403", "6001", serial)];
        assert!(chosen_by(&node(188, 0), &ftdi(None), &[]));
        assert!(chosen_by(&node(188, 0), &ftdi(Some("A50285BI")), &[]));
        assert!(!chosen_by(&node(188, 0), &ftdi(Some("OTHER")), &[]));
        // PCI by vendor, device, class prefix; a USB node is on PCI too, below its controller.
        let apex = node(120, 0);
        assert!(chosen_by(
            &apex,
            &[],
            &[pci(Some("0x1ac1"), Some("0x089a"), None)]
        ));
        assert!(chosen_by(&apex, &[], &[pci(None, None, Some("0x0880"))]));
        assert!(!chosen_by(
            &apex,
            &[],
            &[pci(Some("0x1ac1"), None, Some("0x03"))]
        ));
        assert!(
            !chosen_by(&apex, &coral, &[]),
            "PCI's Edge TPU is no USB device"
        );
        // No selector: everything, kvm included.
        assert!(chosen_by(&node(10, 232), &[], &[]));
    }

    fn address(roots: &HostRoots, node: &DeviceNode) -> Option<BusAddress> {
        BusPlace::of(roots, node)?.address()
    }

    #[test]
    fn the_bus_address_is_the_usb_port_or_the_pci_function_and_kvm_has_none() {
        let t = tempfile::tempdir().unwrap();
        bus(t.path());
        let r = roots(t.path());
        assert_eq!(
            address(&r, &node(189, 130)),
            Some(BusAddress::Usb("2-1".into()))
        );
        assert_eq!(
            address(&r, &node(188, 0)),
            Some(BusAddress::Usb("2-3".into()))
        );
        assert_eq!(
            address(&r, &node(120, 0)),
            Some(BusAddress::Pci("0000:03:00.0".into()))
        );
        assert_eq!(address(&r, &node(10, 232)), None);
    }
}
