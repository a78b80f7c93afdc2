//! The kubelet's sockets: device plugins register on `device-plugins/kubelet.sock`, and
//! devinject checks what a pod was granted on `pod-resources/kubelet.sock`; plus the kubelet's
//! cgroup driver against init and the CRI engines'.

use crate::doctor::cgroup::Cgroups;
use crate::doctor::engines::EngineState;
use crate::doctor::{is_socket, DoctorReport, DoctorRequest, Section, Severity};
use devinject_engine_config::engines::detection::CgroupDriver;
use devinject_engine_config::request::Engine;

/// The kubelet's `cgroupDriver` from a KubeletConfiguration file (YAML; the key is read from a
/// plain `cgroupDriver: x` line, which is how kubeadm and every distribution write it).
pub fn kubelet_driver(text: &str) -> Option<CgroupDriver> {
    text.lines().find_map(|l| {
        let v = l.trim().strip_prefix("cgroupDriver:")?;
        CgroupDriver::parse(v.trim().trim_matches(['"', '\'']))
    })
}

/// Checks the kubelet's sockets and cgroup driver.
pub fn check(
    req: &DoctorRequest,
    cgroups: &Cgroups,
    engines: &[EngineState],
    report: &mut DoctorReport,
) {
    let dir = &req.kubelet_dir;
    if !req.access(dir).is_dir() {
        report.add(
            Section::Kubelet,
            "kubelet",
            Severity::Info,
            format!(
                "{} is absent: not a Kubernetes node (or the kubelet runs with another --root-dir)",
                dir.display()
            ),
            None,
        );
        return;
    }
    let sockets = [
        (
            "device-plugins/kubelet.sock",
            Severity::Error,
            "the device plugin cannot register, so pods cannot ask for devices; is the kubelet running?",
        ),
        (
            "pod-resources/kubelet.sock",
            Severity::Warning,
            "requests cannot be checked against the devices the kubelet granted each pod; is the kubelet running (KubeletPodResources)?",
        ),
    ];
    for (rel, severity, effect) in sockets {
        let host = dir.join(rel);
        let access = req.access(&host);
        if is_socket(&access) {
            report.add(
                Section::Kubelet,
                rel,
                Severity::Ok,
                format!("{} is there", host.display()),
                None,
            );
        } else {
            let what = if access.exists() {
                "is not a socket"
            } else {
                "is missing"
            };
            report.add(
                Section::Kubelet,
                rel,
                severity,
                format!("{} {what}: {effect}", host.display()),
                None,
            );
        }
    }
    let config = dir.join("config.yaml");
    let Some(driver) = std::fs::read_to_string(req.access(&config))
        .ok()
        .and_then(|t| kubelet_driver(&t))
    else {
        return;
    };
    if driver == CgroupDriver::Systemd && !cgroups.systemd_init {
        report.add(
            Section::Kubelet,
            "cgroupDriver",
            Severity::Error,
            format!(
                "{} sets cgroupDriver: systemd, but systemd is not init",
                config.display()
            ),
            Some("set cgroupDriver: cgroupfs".to_string()),
        );
    }
    for e in engines {
        let cri = matches!(e.engine, Engine::Containerd | Engine::Crio);
        match e.driver {
            Some(d) if cri && e.installed() && d != driver => report.add(
                Section::Kubelet,
                "cgroupDriver",
                Severity::Warning,
                format!(
                    "the kubelet uses the {driver} cgroup driver ({}), {} uses {d}: pods end up in two cgroup trees",
                    config.display(),
                    e.engine
                ),
                Some("use the same driver in both".to_string()),
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cgroup_driver_line() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n";
        assert_eq!(kubelet_driver(yaml), Some(CgroupDriver::Systemd));
        assert_eq!(
            kubelet_driver("cgroupDriver: \"cgroupfs\"\n"),
            Some(CgroupDriver::Cgroupfs)
        );
        assert_eq!(kubelet_driver("kind: KubeletConfiguration\n"), None);
    }
}
