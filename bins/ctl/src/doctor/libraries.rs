//! The driver's libraries, binaries and files of every profile with devices on this host.

use devinject_devices::{Inventory, Profile};
use devinject_discovery::resolve_driver_files;
use devinject_hostconfig::HostConfig;

use crate::doctor::{devices, DoctorReport, DoctorRequest, Section, Severity};

/// Resolves the files of each profile in `found`; returns whether any library is injected (the
/// hook then runs `ldconfig` in containers).
pub fn check(
    req: &DoctorRequest,
    host: &HostConfig,
    found: &[(Profile, Inventory)],
    report: &mut DoctorReport,
) -> bool {
    let roots = devices::roots(req, host);
    let mut libraries = false;
    for (p, _) in found {
        let name = p.name.as_str();
        match resolve_driver_files(p, &roots) {
            Err(e) => report.add(
                Section::Libraries,
                name,
                Severity::Error,
                e.to_string(),
                Some(format!(
                    "containers asking for {name} devices fail to start until the driver's files are there"
                )),
            ),
            Ok(files) => {
                libraries |= !files.libraries.is_empty();
                let libs: Vec<&str> = files
                    .libraries
                    .iter()
                    .map(|l| l.file_name.as_str())
                    .collect();
                report.add(
                    Section::Libraries,
                    name,
                    Severity::Ok,
                    format!(
                        "{name}: {} librar{} ({}), {} binar{}, {} other file(s)",
                        libs.len(),
                        if libs.len() == 1 { "y" } else { "ies" },
                        if libs.is_empty() { "-".to_string() } else { libs.join(", ") },
                        files.binaries.len(),
                        if files.binaries.len() == 1 { "y" } else { "ies" },
                        files.files.len()
                    ),
                    None,
                );
            }
        }
    }
    libraries
}
