//! The churn's pods: what each asks for, its manifest, the command that probes it from inside,
//! and what its probe report must say.

use serde_json::Value;

use crate::cri_node::{BUSYBOX, HANDLER};
use crate::probe::Report;
use crate::sim::{ACCELS, CTL, LIB, SONAME};

/// The resource the demo devices are advertised as.
pub const RESOURCE: &str = "devinject.io/demo";
/// The line the container prints once its probe has reported.
pub const PROBED: &str = "churn-probe-done";
/// Where the container makes its own nodes of every demo device (with CAP_MKNOD, which
/// containerd's default set has): the device cgroup must deny those it was not granted.
const OWN_NODES: &str = "/tmp/churn-nodes";
/// The memory limit of a pod that is OOM-killed on purpose, and what it then allocates.
const OOM_LIMIT: &str = "32Mi";
const OOM_ALLOCATION: &str = "64M";

/// The engine path a pod goes through; each has its own node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EnginePath {
    /// The `devinject` RuntimeClass: the runtime shim (node 0).
    Shim,
    /// The default runtime with `devinject-nri` on containerd's NRI socket (node 1).
    Nri,
}

impl EnginePath {
    /// Both, in node order.
    pub const ALL: [Self; 2] = [Self::Shim, Self::Nri];

    /// The index of the node that runs this path.
    pub fn node(self) -> usize {
        match self {
            Self::Shim => 0,
            Self::Nri => 1,
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Shim => "shim",
            Self::Nri => "nri",
        }
    }
}

/// What a pod does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Asks for its devices, probes, then holds them until deleted.
    Probe,
    /// Asks for its devices under a small memory limit, probes, then allocates past the limit:
    /// the kernel kills it mid-life, and its devices must come back.
    Oom,
    /// Asks the scheduler for nothing and sets the request variable itself: must be refused.
    Forger,
}

/// One pod of the run.
#[derive(Debug, Clone)]
pub struct PodPlan {
    /// Its name, `churn-<n>`.
    pub name: String,
    /// Which engine path (and node) it goes through.
    pub path: EnginePath,
    /// How many demo devices it asks for (0–2; 0 for a forger).
    pub devices: u32,
    /// What it does.
    pub kind: Kind,
}

impl PodPlan {
    /// The pod's manifest, pinned to `node` by its hostname label.
    pub fn manifest(&self, node: &str) -> String {
        let mut limits = Vec::new();
        if self.devices > 0 {
            limits.push(format!("{RESOURCE}: {}", self.devices));
        }
        if self.kind == Kind::Oom {
            limits.push(format!("memory: {OOM_LIMIT}"));
        }
        let resources = match limits.is_empty() {
            true => String::new(),
            false => format!("\n    resources: {{limits: {{{}}}}}", limits.join(", ")),
        };
        let env: Vec<Value> = match self.kind {
            Kind::Forger => {
                vec![serde_json::json!({"name": "DEMO_VISIBLE_DEVICES", "value": "all"})]
            }
            _ => Vec::new(),
        };
        let runtime_class = match self.path {
            EnginePath::Shim => format!("\n  runtimeClassName: {HANDLER}"),
            EnginePath::Nri => String::new(),
        };
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{devinject-churn: \"1\"}}\n\
             spec:{runtime_class}\n  nodeSelector: {{kubernetes.io/hostname: {node}}}\n  \
             hostNetwork: true\n  restartPolicy: Never\n  automountServiceAccountToken: false\n  \
             terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    image: {BUSYBOX}\n    \
             imagePullPolicy: Never\n    command: {command}\n    env: {env}{resources}\n",
            name = self.name,
            command = serde_json::to_string(&self.command()).expect("json"),
            env = serde_json::to_string(&env).expect("json"),
        )
    }

    /// The container's command: make its own nodes of every demo device, probe the injected
    /// ones, its own and the library, say so, then hold (or, for [`Kind::Oom`], allocate past
    /// the limit as PID 1, which the kernel's OOM killer then ends).
    fn command(&self) -> Vec<String> {
        let mut script = format!("mkdir -p {OWN_NODES}; ");
        for (name, major, minor) in ACCELS {
            script.push_str(&format!("mknod {OWN_NODES}/{name} c {major} {minor}; "));
        }
        let mut nodes: Vec<String> = ACCELS
            .iter()
            .chain(std::iter::once(&CTL))
            .map(|(n, _, _)| format!("/dev/demo/{n}"))
            .collect();
        nodes.extend(ACCELS.iter().map(|(n, _, _)| format!("{OWN_NODES}/{n}")));
        script.push_str(&format!(
            "/bin/sh /probe.sh {} -- {LIB} {SONAME}; echo {PROBED}; ",
            nodes.join(" ")
        ));
        script.push_str(&match self.kind {
            Kind::Oom => {
                format!("exec dd if=/dev/zero of=/dev/null bs={OOM_ALLOCATION} count=1")
            }
            _ => "exec sleep 3600".to_owned(),
        });
        vec!["/bin/sh".into(), "-c".into(), script]
    }
}

/// What is wrong with the probe report `out` of a container that the kubelet's checkpoint says
/// was allocated `ids` (device indexes as strings) of the `asked` it asked for: every injected
/// node granted and opening with the host's numbers, no other injected; its own node of a
/// granted device opening and of any other denied by the device cgroup (EPERM); the control
/// node and the library (read-only, in the linker cache) exactly when it holds a device.
/// Empty when all is right.
pub fn probe_problems(out: &str, ids: &[String], asked: u32) -> Vec<String> {
    let report = Report::parse(out);
    let mut problems = Vec::new();
    if ids.len() != asked as usize {
        problems.push(format!(
            "asked for {asked} devices, the checkpoint has {ids:?}"
        ));
    }
    let Some(ctl) = report.nodes.get(&format!("/dev/demo/{}", CTL.0)) else {
        problems.push("no probe report".to_owned());
        return problems;
    };
    for (i, (name, major, minor)) in ACCELS.iter().enumerate() {
        let granted = ids.contains(&i.to_string());
        let injected = report.nodes.get(&format!("/dev/demo/{name}"));
        let own = report.nodes.get(&format!("{OWN_NODES}/{name}"));
        match (granted, injected) {
            (true, Some(n))
                if (n.kind.as_str(), n.major, n.minor, n.open.as_str())
                    == ("c", *major, *minor, "ok") => {}
            (false, Some(n)) if n.kind == "missing" => {}
            (_, n) => problems.push(format!(
                "/dev/demo/{name} (granted: {granted}): {}",
                n.map_or("not reported".to_owned(), |n| format!(
                    "{} {}:{} open={}",
                    n.kind, n.major, n.minor, n.open
                ))
            )),
        }
        match (granted, own) {
            (_, Some(n)) if n.kind != "c" => problems.push(format!(
                "the container could not make its own node of {name} ({}), so its denial was not checked",
                n.kind
            )),
            (true, Some(n)) if n.open == "ok" => {}
            (false, Some(n)) if n.open == "EPERM" => {}
            (_, n) => problems.push(format!(
                "own node of {name} (granted: {granted}): open={}",
                n.map_or("not reported", |n| n.open.as_str())
            )),
        }
    }
    let holds = !ids.is_empty();
    let ctl_ok = match holds {
        true => ctl.open == "ok",
        false => ctl.kind == "missing",
    };
    if !ctl_ok {
        problems.push(format!(
            "control node (holds devices: {holds}): {} open={}",
            ctl.kind, ctl.open
        ));
    }
    match report.libs.get(LIB) {
        Some(lib) if holds && !(lib.present && lib.read_only) => problems.push(format!(
            "the library: present={} read_only={}",
            lib.present, lib.read_only
        )),
        Some(lib) if !holds && lib.present => {
            problems.push("the library, with no device granted".to_owned())
        }
        None => problems.push("the library not reported".to_owned()),
        _ => {}
    }
    if holds && !report.libs.get(SONAME).is_some_and(|l| l.in_ldcache) {
        problems.push("the soname not in the linker cache".to_owned());
    }
    problems
}

/// The demo devices (indexes as strings) the probe report `out` shows opening inside the
/// container: what it really holds, whatever the checkpoint says.
pub fn observed_devices(out: &str) -> Vec<String> {
    let report = Report::parse(out);
    ACCELS
        .iter()
        .enumerate()
        .filter(|(_, (name, _, _))| {
            report
                .nodes
                .get(&format!("/dev/demo/{name}"))
                .is_some_and(|n| n.open == "ok")
                || report
                    .nodes
                    .get(&format!("{OWN_NODES}/{name}"))
                    .is_some_and(|n| n.open == "ok")
        })
        .map(|(i, _)| i.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(granted: &[usize]) -> String {
        let mut out = String::new();
        for (i, (name, ma, mi)) in ACCELS.iter().enumerate() {
            if granted.contains(&i) {
                out.push_str(&format!("node /dev/demo/{name} c {ma}:{mi} 666 open=ok\n"));
            } else {
                out.push_str(&format!(
                    "node /dev/demo/{name} missing 0:0 0 open=ENOENT\n"
                ));
            }
            let open = if granted.contains(&i) { "ok" } else { "EPERM" };
            out.push_str(&format!(
                "node {OWN_NODES}/{name} c {ma}:{mi} 644 open={open}\n"
            ));
        }
        let holds = !granted.is_empty();
        if holds {
            out.push_str("node /dev/demo/ctl c 10:200 666 open=ok\n");
            out.push_str(&format!("lib {LIB} present=yes ro=yes ldcache=yes\n"));
            out.push_str(&format!("lib {SONAME} present=yes ro=yes ldcache=yes\n"));
        } else {
            out.push_str("node /dev/demo/ctl missing 0:0 0 open=ENOENT\n");
            out.push_str(&format!("lib {LIB} present=no ro=no ldcache=no\n"));
            out.push_str(&format!("lib {SONAME} present=no ro=no ldcache=no\n"));
        }
        out
    }

    #[test]
    fn a_container_seeing_exactly_its_grant_has_no_problem() {
        assert_eq!(
            probe_problems(&report(&[1, 3]), &["1".into(), "3".into()], 2),
            Vec::<String>::new()
        );
        assert_eq!(probe_problems(&report(&[]), &[], 0), Vec::<String>::new());
        assert_eq!(observed_devices(&report(&[1, 3])), ["1", "3"]);
    }

    #[test]
    fn a_device_not_granted_but_opening_is_a_problem() {
        let problems = probe_problems(&report(&[1, 2]), &["1".into()], 1);
        assert!(
            problems.iter().any(|p| p.contains("accel2")),
            "{problems:?}"
        );
    }

    #[test]
    fn an_own_node_that_opens_without_a_grant_is_a_problem() {
        let out = report(&[]).replace(
            "accel0 c 10:237 644 open=EPERM",
            "accel0 c 10:237 644 open=ok",
        );
        let problems = probe_problems(&out, &[], 0);
        assert!(
            problems.iter().any(|p| p.contains("own node of accel0")),
            "{problems:?}"
        );
    }

    #[test]
    fn a_missing_report_is_a_problem() {
        assert!(!probe_problems("", &[], 0).is_empty());
    }

    #[test]
    fn the_shim_pod_names_the_runtime_class_and_the_nri_pod_does_not() {
        let plan = |path| PodPlan {
            name: "churn-1".into(),
            path,
            devices: 2,
            kind: Kind::Oom,
        };
        let shim = plan(EnginePath::Shim).manifest("n0");
        assert!(shim.contains("runtimeClassName: devinject"), "{shim}");
        assert!(
            shim.contains("devinject.io/demo: 2, memory: 32Mi"),
            "{shim}"
        );
        assert!(!plan(EnginePath::Nri)
            .manifest("n1")
            .contains("runtimeClassName"));
    }
}
