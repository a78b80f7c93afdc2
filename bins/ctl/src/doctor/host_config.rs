//! The host configuration, `/etc/devinject/config.toml`, parsed with `devinject-hostconfig`,
//! exactly as the hook and the shim parse it.

use std::path::{Path, PathBuf};

use devinject_hostconfig::{HostConfig, DEFAULT_CONFIG_PATH};

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

/// Loads the host configuration file `host` (a host path) below the root; `Err` carries the
/// message to show.
pub fn load(req: &DoctorRequest, host: &Path) -> Result<HostConfig, String> {
    HostConfig::load(Some(&req.access(host))).map_err(|e| e.to_string())
}

/// Checks the host configuration and returns it (defaults when it is missing or broken, so the
/// other checks still run).
pub fn check(req: &DoctorRequest, report: &mut DoctorReport) -> HostConfig {
    let explicit = req.host_config.is_some();
    let host = req
        .host_config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
    let subject = host.display().to_string();
    let access = req.access(&host);
    let config = if access.exists() {
        match load(req, &host) {
            Ok(c) => {
                report.add(
                    Section::HostConfig,
                    &subject,
                    Severity::Ok,
                    format!("{subject}: {}", summary(&c)),
                    None,
                );
                c
            }
            Err(e) => {
                report.add(
                    Section::HostConfig,
                    &subject,
                    Severity::Error,
                    e,
                    Some(
                        "fix the file: the hook and the shim refuse to run with it, so every \
                         container created through them fails"
                            .to_string(),
                    ),
                );
                HostConfig::default()
            }
        }
    } else if explicit {
        report.add(
            Section::HostConfig,
            &subject,
            Severity::Error,
            format!("{subject} does not exist"),
            Some("give the file the hook and shim are configured with".to_string()),
        );
        HostConfig::default()
    } else {
        let c = HostConfig::default();
        report.add(
            Section::HostConfig,
            &subject,
            Severity::Info,
            format!("{subject} is absent, so defaults apply: {}", summary(&c)),
            None,
        );
        c
    };
    let paths: [(&str, &Path); 4] = [
        ("profiles_dir", &config.profiles_dir),
        ("dev_root", &config.dev_root),
        ("sys_root", &config.sys_root),
        ("driver_root", &config.driver_root),
    ];
    for (key, path) in paths {
        if key != "profiles_dir" && !req.access(path).is_dir() {
            report.add(
                Section::HostConfig,
                key,
                Severity::Error,
                format!("{key} {} is not a directory", path.display()),
                Some(format!("set {key} in {subject} to where it is")),
            );
        }
    }
    let binaries: [(&str, &Option<PathBuf>, &str); 2] = [
        ("runtime", &config.runtime, "the shim cannot start runc"),
        (
            "hook",
            &config.hook,
            "the shim cannot wire in the linker-cache step",
        ),
    ];
    for (key, value, effect) in binaries {
        if let Some(path) = value {
            if !crate::doctor::is_executable(&req.access(path)) {
                report.add(
                    Section::HostConfig,
                    key,
                    Severity::Error,
                    format!(
                        "{key} = {} is not an executable file: {effect}",
                        path.display()
                    ),
                    Some(format!("install it, or fix {key} in {subject}")),
                );
            }
        }
    }
    if config.runtime.is_none() {
        let candidates = devinject_hostconfig::RUNTIME_CANDIDATES;
        if !candidates
            .iter()
            .any(|c| crate::doctor::is_executable(&req.access(Path::new(c))))
        {
            report.add(
                Section::HostConfig,
                "runtime",
                Severity::Warning,
                format!(
                    "runtime is not set and none of {} exists: the shim has no runc to hand containers to",
                    candidates.join(", ")
                ),
                Some(format!("set runtime in {subject} (e.g. the path of crun)")),
            );
        }
    }
    check_obsolete(&config, &subject, report);
    config
}

/// `pod_resources_helper` is accepted for configs written for earlier releases, and ignored:
/// say so, so that nobody keeps a helper around for it.
fn check_obsolete(config: &HostConfig, subject: &str, report: &mut DoctorReport) {
    if config.obsolete_pod_resources_helper.is_some() {
        report.add(
            Section::HostConfig,
            "pod_resources_helper",
            Severity::Warning,
            "pod_resources_helper is obsolete and ignored: the hook and the shim ask the kubelet's pod-resources API themselves".to_owned(),
            Some(format!("remove pod_resources_helper from {subject}")),
        );
    }
}

fn summary(c: &HostConfig) -> String {
    format!(
        "profiles {}, dev root {}, sys root {}, driver root {}",
        c.profiles_dir.display(),
        c.dev_root.display(),
        c.sys_root.display(),
        c.driver_root.display()
    )
}
