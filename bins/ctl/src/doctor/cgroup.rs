//! cgroup version, devices controller and init system.
//!
//! Read from the mount table of the host's init (`<root>/proc/1/mountinfo`, else
//! `<root>/proc/self/mountinfo`), so it also works from an installer container that sees the
//! host's `/proc`:
//! - **v2**: a `cgroup2` mount and no v1 hierarchy; device access is an eBPF program per cgroup,
//!   which the hook replaces with one holding the runtime's rules plus its own;
//! - **hybrid**: v1 controllers (`/sys/fs/cgroup/<controller>`) plus a `cgroup2` mount holding
//!   no controllers (usually `/sys/fs/cgroup/unified`); devices are a v1 matter;
//! - **v1**: v1 controllers only; device access is `devices.allow` in the devices hierarchy.
//!
//! systemd is init when `<root>/run/systemd/system` is a directory (what `sd_booted(3)` checks):
//! then the engines and the kubelet should use the systemd cgroup driver, otherwise they must use
//! cgroupfs.

use std::path::PathBuf;

use serde::Serialize;

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

/// The cgroup layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// Only v1 hierarchies.
    V1,
    /// v1 hierarchies plus a cgroup2 mount.
    Hybrid,
    /// The unified hierarchy only.
    V2,
}

/// What the mount table and `/run/systemd` say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cgroups {
    /// The layout; `None` when no cgroup filesystem is mounted.
    pub version: Option<CgroupVersion>,
    /// Where the v1 devices controller is mounted (host path).
    pub devices: Option<PathBuf>,
    /// Where the cgroup2 hierarchy is mounted (host path).
    pub unified: Option<PathBuf>,
    /// systemd is init.
    pub systemd_init: bool,
}

/// Parses a mountinfo table (proc(5)) into the cgroup layout; lines that do not parse are
/// passed over (a report about the rest is more use than none).
pub fn parse_mountinfo(
    text: impl AsRef<[u8]>,
) -> (Option<CgroupVersion>, Option<PathBuf>, Option<PathBuf>) {
    let mut v1 = false;
    let mut devices = None;
    let mut unified = None;
    for mount in devinject_mountinfo::parse(text.as_ref()).filter_map(Result::ok) {
        if mount.fs_type == "cgroup" {
            v1 = true;
            if mount.has_super_option("devices") {
                devices = Some(mount.mount_point);
            }
        } else if mount.fs_type == "cgroup2" {
            unified = Some(mount.mount_point);
        }
    }
    let version = match (v1, &unified) {
        (true, Some(_)) => Some(CgroupVersion::Hybrid),
        (true, None) => Some(CgroupVersion::V1),
        (false, Some(_)) => Some(CgroupVersion::V2),
        (false, None) => None,
    };
    (version, devices, unified)
}

/// Checks the cgroup layout and init system.
pub fn check(req: &DoctorRequest, report: &mut DoctorReport) -> Cgroups {
    let systemd_init = req
        .access(std::path::Path::new("/run/systemd/system"))
        .is_dir();
    let sources = ["/proc/1/mountinfo", "/proc/self/mountinfo"];
    let table = sources.iter().find_map(|s| {
        std::fs::read(req.access(std::path::Path::new(s)))
            .ok()
            .map(|t| (*s, t))
    });
    let (version, devices, unified) = match &table {
        Some((_, text)) => parse_mountinfo(text),
        None => (None, None, None),
    };
    let cgroups = Cgroups {
        version,
        devices,
        unified,
        systemd_init,
    };
    let show = |p: &Option<PathBuf>| {
        p.as_ref()
            .map_or_else(|| "?".to_string(), |p| p.display().to_string())
    };
    match (cgroups.version, &table) {
        (_, None) => report.add(
            Section::Cgroup,
            "version",
            Severity::Error,
            format!("cannot read {} or {}", sources[0], sources[1]),
            Some("run doctor where the host's /proc is visible (below --root)".to_string()),
        ),
        (None, Some((src, _))) => report.add(
            Section::Cgroup,
            "version",
            Severity::Error,
            format!("no cgroup filesystem is mounted ({src})"),
            Some("mount cgroup2 at /sys/fs/cgroup (or the v1 hierarchies)".to_string()),
        ),
        (Some(CgroupVersion::V2), _) => report.add(
            Section::Cgroup,
            "version",
            Severity::Ok,
            format!(
                "cgroup v2 at {}: device access is an eBPF program per cgroup",
                show(&cgroups.unified)
            ),
            None,
        ),
        (Some(v), _) => {
            let layout = match v {
                CgroupVersion::Hybrid => format!(
                    "cgroup v1 with an empty cgroup2 hierarchy at {} (hybrid)",
                    show(&cgroups.unified)
                ),
                _ => "cgroup v1".to_string(),
            };
            match &cgroups.devices {
                Some(d) => report.add(
                    Section::Cgroup,
                    "version",
                    Severity::Ok,
                    format!(
                        "{layout}; devices controller (v1) at {}: device access is devices.allow",
                        d.display()
                    ),
                    None,
                ),
                None => report.add(
                    Section::Cgroup,
                    "version",
                    Severity::Error,
                    format!("{layout}, but no v1 devices controller is mounted: runc cannot grant or restrict device access"),
                    Some("mount the devices controller (cgroup -o devices) or boot with cgroup v2".to_string()),
                ),
            }
        }
    }
    report.add(
        Section::Cgroup,
        "driver",
        Severity::Ok,
        if systemd_init {
            "init is systemd: engines and the kubelet should use the systemd cgroup driver"
        } else {
            "init is not systemd: engines and the kubelet must use the cgroupfs driver"
        },
        None,
    );
    cgroups
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
35 25 0:30 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
40 35 0:35 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices
41 35 0:36 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";

    #[test]
    fn classifies_v1_hybrid_and_v2() {
        let (v, d, u) = parse_mountinfo(HYBRID);
        assert_eq!(v, Some(CgroupVersion::Hybrid));
        assert_eq!(d, Some(PathBuf::from("/sys/fs/cgroup/devices")));
        assert_eq!(u, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let v1: String = HYBRID
            .lines()
            .filter(|l| !l.contains("cgroup2"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(parse_mountinfo(&v1).0, Some(CgroupVersion::V1));
        let v2 = "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parse_mountinfo(v2),
            (
                Some(CgroupVersion::V2),
                None,
                Some(PathBuf::from("/sys/fs/cgroup"))
            )
        );
        assert_eq!(parse_mountinfo("garbage\n").0, None);
    }
}
