//! Devices chosen by what they are on their bus, as generic device plugins and KubeVirt choose
//! them: a USB device by vendor and product id (and serial number), a PCI function by vendor,
//! device and class. A profile lists selectors (`[[discovery.usb]]`, `[[discovery.pci]]`); a node
//! its globs match is one of its devices when a selector matches the USB device or PCI function
//! the node belongs to: the nearest one above the node's directory in sysfs (which the
//! devinject-discovery crate reads), so `/dev/bus/usb/002/003` (the USB device itself) and
//! `/dev/ttyUSB0` (a node of one of its interfaces) both belong to USB device `2-1`.
//!
//! The device's place on its bus ([`BusAddress`]: the USB port path such as `2-1.4`, or the PCI
//! function such as `0000:01:00.0`) is its id with `discovery.id = "bus"`: it stays the same
//! when the device re-enumerates under another id or number (the Coral USB Accelerator comes up
//! as `1a6e:089a` and, once its firmware is loaded, as `18d1:9302` with a new device number),
//! so the kubelet's allocation keeps naming it.

use std::fmt;

use serde::Deserialize;

/// A USB device's vendor or product id: four hex digits, as sysfs' `idVendor` and `idProduct`
/// say them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct UsbId(u16);

impl TryFrom<String> for UsbId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        hex_u16(&s)
            .map(Self)
            .ok_or_else(|| format!("{s:?} is not a USB id: write four hex digits, e.g. \"18d1\""))
    }
}

impl fmt::Display for UsbId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}", self.0)
    }
}

/// A PCI vendor or device id: four hex digits, with or without `0x` (sysfs says `0x1ac1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct PciId(u16);

impl TryFrom<String> for PciId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        hex_u16(s.strip_prefix("0x").unwrap_or(&s))
            .map(Self)
            .ok_or_else(|| format!("{s:?} is not a PCI id: write four hex digits, e.g. \"0x1ac1\""))
    }
}

/// A PCI class: its base class, with its subclass, or with both and its programming interface
/// (2, 4 or 6 hex digits, with or without `0x`); a function matches when its 24-bit class
/// (sysfs' `class`, `0x088000`) begins with these digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct PciClass {
    value: u32,
    digits: u32,
}

impl TryFrom<String> for PciClass {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let digits = s.strip_prefix("0x").unwrap_or(&s);
        match digits.len() {
            2 | 4 | 6 if digits.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(Self {
                value: u32::from_str_radix(digits, 16).map_err(|e| e.to_string())?,
                digits: digits.len() as u32,
            }),
            _ => Err(format!(
                "{s:?} is not a PCI class: write 2, 4 or 6 hex digits (class, subclass, \
                 interface), e.g. \"0x0880\""
            )),
        }
    }
}

impl PciClass {
    /// Whether the 24-bit class `class` begins with this one.
    fn covers(self, class: u32) -> bool {
        class >> (4 * (6 - self.digits)) == self.value
    }
}

/// One `[[discovery.usb]]` entry: the USB devices it chooses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsbSelector {
    /// `idVendor`.
    pub vendor: UsbId,
    /// `idProduct`.
    pub product: UsbId,
    /// `serial`, when only one device of that kind is meant.
    pub serial: Option<String>,
}

/// One `[[discovery.pci]]` entry: the PCI functions it chooses. At least one key is set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciSelector {
    /// `vendor`.
    pub vendor: Option<PciId>,
    /// `device`.
    pub device: Option<PciId>,
    /// `class`, or its leading digits.
    pub class: Option<PciClass>,
}

/// The longest serial number a USB selector may name (a USB string descriptor holds 126
/// UTF-16 units).
pub const MAX_SERIAL: usize = 126;

impl UsbSelector {
    /// What is wrong with this selector, for the profile's error.
    pub fn problem(&self) -> Option<String> {
        let serial = self.serial.as_deref()?;
        (serial.is_empty() || serial.len() > MAX_SERIAL || serial.chars().any(|c| c.is_control()))
            .then(|| {
                format!(
                "serial {serial:?} is not a USB serial number: 1 to {MAX_SERIAL} characters, no \
                 control characters; leave it out to choose every device of that id"
            )
            })
    }

    /// Whether this selector chooses the USB device whose sysfs `idVendor`, `idProduct` and
    /// `serial` read as these (`None`: unreadable, which only a key left out matches).
    pub fn matches(&self, vendor: Option<u16>, product: Option<u16>, serial: Option<&str>) -> bool {
        Some(self.vendor.0) == vendor
            && Some(self.product.0) == product
            && self
                .serial
                .as_deref()
                .is_none_or(|want| Some(want) == serial)
    }
}

impl PciSelector {
    /// What is wrong with this selector, for the profile's error.
    pub fn problem(&self) -> Option<String> {
        (self.vendor.is_none() && self.device.is_none() && self.class.is_none()).then(|| {
            "chooses every PCI function: set vendor, device or class (e.g. vendor = \"0x1ac1\")"
                .to_owned()
        })
    }

    /// Whether this selector chooses the PCI function whose sysfs `vendor`, `device` and
    /// `class` read as these (`None`: unreadable, which no key set to a value matches).
    pub fn matches(&self, vendor: Option<u16>, device: Option<u16>, class: Option<u32>) -> bool {
        self.vendor.is_none_or(|v| Some(v.0) == vendor)
            && self.device.is_none_or(|d| Some(d.0) == device)
            && self
                .class
                .is_none_or(|c| class.is_some_and(|class| c.covers(class)))
    }
}

/// Where a device sits on its bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusAddress {
    /// A USB device's port path below its bus (`2-1`, `1-1.4.2`), or a root hub (`usb2`).
    Usb(String),
    /// A PCI function (`0000:01:00.0`).
    Pci(String),
}

impl BusAddress {
    /// The address as text: the port path or the function.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Usb(a) | Self::Pci(a) => a,
        }
    }
}

/// `usb<bus>` or `<bus>-<port>[.<port>]...`: a USB device's directory in sysfs (an interface's
/// has a `:<config>.<interface>` after it).
pub fn is_usb_device(s: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(bus) = s.strip_prefix("usb") {
        return digits(bus);
    }
    s.split_once('-')
        .is_some_and(|(bus, ports)| digits(bus) && ports.split('.').all(digits))
}

/// Four hex digits as a number.
pub fn hex_u16(s: &str) -> Option<u16> {
    (s.len() == 4 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u16::from_str_radix(s, 16).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn ids_and_classes_parse_only_in_their_shapes() {
        assert_eq!(UsbId::try_from("18D1".to_owned()), Ok(UsbId(0x18d1)));
        for bad in ["18d", "18d1a", "0x18d1", "zzzz", ""] {
            let e = UsbId::try_from(bad.to_owned()).unwrap_err();
            assert!(e.contains("four hex digits"), "{bad}: {e}");
        }
        assert_eq!(PciId::try_from("0x1ac1".to_owned()), Ok(PciId(0x1ac1)));
        assert_eq!(PciId::try_from("1ac1".to_owned()), Ok(PciId(0x1ac1)));
        assert!(PciId::try_from("0x1ac".to_owned()).is_err());
        let class = |s: &str| PciClass::try_from(s.to_owned()).unwrap();
        assert!(class("0x08").covers(0x088000) && class("0x0880").covers(0x088000));
        assert!(class("088000").covers(0x088000) && !class("0x0880").covers(0x030000));
        assert!(!class("0x0881").covers(0x088000));
        for bad in ["0x0", "0x088", "0x08800000", "0xgg"] {
            assert!(PciClass::try_from(bad.to_owned()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_selector_that_chooses_everything_or_names_a_bad_serial_is_a_problem() {
        assert!(pci(None, None, None)
            .problem()
            .unwrap()
            .contains("set vendor"));
        assert!(pci(Some("0x1ac1"), None, None).problem().is_none());
        assert!(usb("18d1", "9302", None).problem().is_none());
        for bad in ["", "a\nb", &"s".repeat(MAX_SERIAL + 1)] {
            assert!(
                usb("18d1", "9302", Some(bad)).problem().is_some(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn usb_device_directories_are_told_from_interfaces_and_functions() {
        for yes in ["usb2", "2-1", "1-1.4.2", "10-12"] {
            assert!(is_usb_device(yes), "{yes}");
        }
        for no in [
            "2-1:1.0",
            "usb",
            "0000:00:14.0",
            "2-",
            "2-1.",
            "ttyUSB0",
            "-1",
        ] {
            assert!(!is_usb_device(no), "{no}");
        }
    }
}
