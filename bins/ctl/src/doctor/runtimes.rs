//! The low-level OCI runtimes the shim and the engines hand containers to.

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

/// The OCI runtimes looked for.
pub const RUNTIMES: [&str; 2] = ["runc", "crun"];

/// Finds runc and crun; none at all is an error.
pub fn check(req: &DoctorRequest, report: &mut DoctorReport) {
    let mut any = false;
    for name in RUNTIMES {
        match req.find_binary(name) {
            Some(path) => {
                any = true;
                report.add(
                    Section::Runtimes,
                    name,
                    Severity::Ok,
                    format!("{name}: {}", path.display()),
                    None,
                );
            }
            None => report.add(
                Section::Runtimes,
                name,
                Severity::Info,
                format!("{name}: not installed"),
                None,
            ),
        }
    }
    if !any {
        report.add(
            Section::Runtimes,
            "runtime",
            Severity::Error,
            "neither runc nor crun is installed: no container can start",
            Some("install runc (apt-get install runc)".to_string()),
        );
    }
}
