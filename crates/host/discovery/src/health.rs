//! Device health read again on the schedule of [`devinject_devices::HealthSchedule`]: each
//! found device's health attribute, without a discovery.

use std::path::Path;

use devinject_devices::health::health_attribute;
use devinject_devices::{Device, HostRoots, Inventory, Profile};

use crate::sysfs_attr::read_attr;

/// Reads the health attribute of each device of `inventory` once and updates its `healthy`;
/// returns the devices whose health changed, as they are now. Nothing else of the inventory is
/// read again: a device that came or went is discovery's to see.
pub fn refresh_health(
    profile: &Profile,
    roots: &HostRoots,
    inventory: &mut Inventory,
) -> Vec<Device> {
    let mut changed = Vec::new();
    for device in &mut inventory.devices {
        let Some(attribute) = health_attribute(profile, roots, &device.name) else {
            return changed;
        };
        let healthy = health_from_attr(&attribute);
        if healthy != device.healthy {
            tracing::info!(profile = %profile.name, device = %device.id, healthy, "device health changed (read on schedule)");
            device.healthy = healthy;
            changed.push(device.clone());
        }
    }
    changed
}

/// Whether the health attribute at `path` says healthy: unreadable, empty or one of the words
/// of failure is unhealthy.
pub fn health_from_attr(path: &Path) -> bool {
    match read_attr(path) {
        Some(v) => !matches!(
            v.to_ascii_lowercase().as_str(),
            "0" | "bad" | "unhealthy" | "error" | "failed" | "dead"
        ),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_attribute_values() {
        let dir = tempfile::tempdir().unwrap();
        let attr = dir.path().join("health");
        for (text, healthy) in [
            ("ok\n", true),
            ("1\n", true),
            ("  good  \n", true),
            ("0\n", false),
            ("BAD\n", false),
            ("Unhealthy", false),
            ("error\n", false),
            ("failed\n", false),
            ("dead\nok\n", false),
            ("\n", false),
        ] {
            std::fs::write(&attr, text).unwrap();
            assert_eq!(health_from_attr(&attr), healthy, "{text:?}");
        }
        assert!(!health_from_attr(&dir.path().join("missing")), "unreadable");
    }

    #[test]
    fn a_refresh_reads_each_devices_attribute_and_reports_the_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let roots = HostRoots::under(tmp.path());
        let profile = Profile::parse(
            "name = \"demo\"\nresource = \"x.io/demo\"\n[discovery]\nnodes = [\"demo/accel*\"]\nhealth_sysfs = \"class/demo/{name}/n{n}/health\"\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        std::fs::create_dir_all(roots.dev_root.join("demo")).unwrap();
        for n in [0, 1] {
            nix::sys::stat::mknod(
                &roots.dev_root.join(format!("demo/accel{n}")),
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
                nix::sys::stat::makedev(1, 3),
            )
            .unwrap();
            let attr = roots
                .sys_root
                .join(format!("class/demo/accel{n}/n{n}/health"));
            std::fs::create_dir_all(attr.parent().unwrap()).unwrap();
            std::fs::write(&attr, "ok\n").unwrap();
        }
        let mut inventory = crate::discover(&profile, &roots).unwrap();
        assert!(refresh_health(&profile, &roots, &mut inventory).is_empty());
        std::fs::write(
            roots.sys_root.join("class/demo/accel1/n1/health"),
            "failed\n",
        )
        .unwrap();
        let changed = refresh_health(&profile, &roots, &mut inventory);
        assert_eq!(changed.len(), 1);
        assert_eq!(
            (changed[0].name.as_str(), changed[0].healthy),
            ("accel1", false)
        );
        assert!(inventory.devices[0].healthy && !inventory.devices[1].healthy);
        assert!(
            refresh_health(&profile, &roots, &mut inventory).is_empty(),
            "once"
        );
    }
}
