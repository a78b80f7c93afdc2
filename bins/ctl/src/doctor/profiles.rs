//! Every profile in the profiles directory loads, and no two collide.
//!
//! The hook and the shim load the whole directory for every container and refuse to go on when
//! any profile is broken (so that a typo never silently disables a device kind): one broken
//! profile makes every container created through them fail. Doctor loads the files one by one so
//! it can name each broken file and still check the others.

use devinject_devices::{Profile, ProfileSet};
use devinject_discovery::profile_file;
use devinject_hostconfig::HostConfig;

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

const BROKEN_FIX: &str = "fix it: while any profile is broken, the hook and the shim fail every \
                          container they are run for";

/// Loads the profiles; returns the valid ones.
pub fn check(req: &DoctorRequest, host: &HostConfig, report: &mut DoctorReport) -> Vec<Profile> {
    let dir = req.access(&host.profiles_dir);
    let shown = host.profiles_dir.display().to_string();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => {
            report.add(
                Section::Profiles,
                &shown,
                Severity::Error,
                format!("cannot list the profiles directory {shown}: {e}"),
                Some(
                    "install the profiles (devinject-installer), or set profiles_dir in the host configuration"
                        .to_string(),
                ),
            );
            return Vec::new();
        }
    };
    let mut files: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut valid = Vec::new();
    for file in files {
        let subject = req.host_view(&file).display().to_string();
        match profile_file::load(&file) {
            Ok(p) => valid.push(p),
            Err(e) => report.add(
                Section::Profiles,
                subject,
                Severity::Error,
                e.to_string(),
                Some(BROKEN_FIX.to_string()),
            ),
        }
    }
    if let Err(e) = ProfileSet::from_profiles(valid.clone(), &dir) {
        report.add(
            Section::Profiles,
            &shown,
            Severity::Error,
            e.to_string(),
            Some(BROKEN_FIX.to_string()),
        );
    }
    for p in &valid {
        report.add(
            Section::Profiles,
            p.name.as_str(),
            Severity::Ok,
            format!(
                "{}: resource {}, requested with {} or the {} annotation",
                p.name.as_str(),
                p.resource_name(),
                p.request_env(),
                p.request_annotation()
            ),
            None,
        );
    }
    if valid.is_empty()
        && !report
            .section(Section::Profiles)
            .any(|f| f.severity == Severity::Error)
    {
        report.add(
            Section::Profiles,
            &shown,
            Severity::Error,
            format!("no profiles in {shown}: no device kind is known"),
            Some(
                "copy the profiles for this node's devices there (see docs/profiles.md)"
                    .to_string(),
            ),
        );
    }
    valid
}
