//! What doctor reports: findings, each with a section, a severity and what to do.

use serde::Serialize;

/// The part of the host a finding is about, in screen order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Section {
    /// cgroup version, devices controller, cgroup driver.
    Cgroup,
    /// Low-level OCI runtimes (runc, crun).
    Runtimes,
    /// Container engines and their devinject configuration.
    Engines,
    /// `/etc/devinject/config.toml`.
    HostConfig,
    /// Device profiles.
    Profiles,
    /// Devices found per profile.
    Devices,
    /// Which devices one host user can open without devinject's hook or shim.
    Access,
    /// Driver libraries, binaries and files per profile.
    Libraries,
    /// Our CDI specs, fresh or stale.
    Cdi,
    /// The host's `ldconfig`.
    Ldconfig,
    /// The kubelet's sockets.
    Kubelet,
    /// The last refused container starts, from the decision log.
    Refusals,
}

impl Section {
    /// The heading shown on screen.
    pub fn title(self) -> &'static str {
        match self {
            Section::Cgroup => "cgroups",
            Section::Runtimes => "OCI runtimes",
            Section::Engines => "container engines",
            Section::HostConfig => "host configuration",
            Section::Profiles => "profiles",
            Section::Devices => "devices",
            Section::Access => "access for one user",
            Section::Libraries => "libraries",
            Section::Cdi => "CDI specs",
            Section::Ldconfig => "ldconfig",
            Section::Kubelet => "kubelet",
            Section::Refusals => "recent refusals",
        }
    }
}

/// How bad a finding is. Only errors make doctor exit non-zero (warnings too with `--strict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Works.
    Ok,
    /// Worth knowing, nothing to fix (e.g. an engine that is not installed).
    Info,
    /// Works, but not everywhere or not robustly (e.g. an installed engine not configured, a
    /// profile without devices on this node).
    Warning,
    /// Containers will not get their devices, or will not start (e.g. a broken profile, a
    /// configured shim that does not exist, no engine configured at all).
    Error,
}

impl Severity {
    /// The label shown on screen.
    pub fn label(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Info => "info",
            Severity::Warning => "WARN",
            Severity::Error => "ERROR",
        }
    }
}

/// One thing doctor found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Where.
    pub section: Section,
    /// What it is about: an engine, a profile, a file.
    pub subject: String,
    /// How bad.
    pub severity: Severity,
    /// What was found.
    pub message: String,
    /// What to do about it, when something should be done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Everything doctor found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DoctorReport {
    /// The findings, in the order they were made (grouped by section when shown).
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// Adds a finding.
    pub fn add(
        &mut self,
        section: Section,
        subject: impl Into<String>,
        severity: Severity,
        message: impl Into<String>,
        fix: Option<String>,
    ) {
        self.findings.push(Finding {
            section,
            subject: subject.into(),
            severity,
            message: message.into(),
            fix,
        });
    }

    /// How many findings have `severity`.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }

    /// The findings of `section`.
    pub fn section(&self, section: Section) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.section == section)
    }

    /// Whether the host is broken: an error, or with `strict` also a warning.
    pub fn is_broken(&self, strict: bool) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity == Severity::Error || (strict && f.severity == Severity::Warning))
    }
}
