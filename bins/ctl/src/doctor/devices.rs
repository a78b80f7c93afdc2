//! What discovery finds for each profile, exactly as the hook and the shim would.

use devinject_devices::{HostRoots, Inventory, Profile};
use devinject_discovery::{discover, DiscoveryError};
use devinject_hostconfig::HostConfig;

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

/// The host's roots as this process reaches them.
pub fn roots(req: &DoctorRequest, host: &HostConfig) -> HostRoots {
    HostRoots {
        dev_root: req.access(&host.dev_root),
        sys_root: req.access(&host.sys_root),
        proc_root: req.access(&host.proc_root),
        driver_root: req.access(&host.driver_root),
    }
}

/// Discovers every profile's devices; returns the profiles with at least one device, with their
/// inventory.
pub fn check(
    req: &DoctorRequest,
    host: &HostConfig,
    profiles: &[Profile],
    report: &mut DoctorReport,
) -> Vec<(Profile, Inventory)> {
    let roots = roots(req, host);
    let mut found = Vec::new();
    for p in profiles {
        let name = p.name.as_str();
        let result = discover(p, &roots).or_else(|e| match e {
            // A required node of the kind missing on a node without the devices is just "no
            // devices"; with devices present it stays an error.
            DiscoveryError::Missing { .. } => {
                let mut without = p.clone();
                without.control_nodes.clear();
                match discover(&without, &roots) {
                    Ok(inv) if inv.devices.is_empty() => Ok(inv),
                    _ => Err(e),
                }
            }
            e => Err(e),
        });
        for w in result.iter().flat_map(|inv| &inv.withdrawn) {
            report.add(
                Section::Devices,
                name,
                Severity::Warning,
                format!("{name}: device {} withdrawn: {}", w.node.display(), w.problem),
                Some(
                    "containers asking for it are refused until it is fixed; the profile's other devices are served"
                        .to_string(),
                ),
            );
        }
        match result {
            Err(e) => report.add(
                Section::Devices,
                name,
                Severity::Error,
                e.to_string(),
                Some(
                    "containers asking for these devices fail to start until this is fixed"
                        .to_string(),
                ),
            ),
            Ok(inv) if inv.devices.is_empty() => report.add(
                Section::Devices,
                name,
                Severity::Warning,
                format!(
                    "{name}: no devices found ({} under {})",
                    p.discovery.nodes.join(", "),
                    host.dev_root.display()
                ),
                Some(
                    "load the driver, or leave this profile out on nodes without the device"
                        .to_string(),
                ),
            ),
            Ok(inv) => {
                let ids: Vec<String> = inv
                    .devices
                    .iter()
                    .map(|d| format!("{} ({})", d.id.as_str(), d.name))
                    .collect();
                report.add(
                    Section::Devices,
                    name,
                    Severity::Ok,
                    format!(
                        "{name}: {} device(s): {}; {} control node(s)",
                        inv.devices.len(),
                        ids.join(", "),
                        inv.control_nodes.len()
                    ),
                    None,
                );
                for d in inv.devices.iter().filter(|d| !d.healthy) {
                    report.add(
                        Section::Devices,
                        name,
                        Severity::Warning,
                        format!("{name}: device {} ({}) is unhealthy", d.id.as_str(), d.name),
                        Some("the device plugin does not offer it until its health attribute recovers".to_string()),
                    );
                }
                found.push((p.clone(), inv));
            }
        }
    }
    found
}
