//! The churn's pods: what each asks for, its manifest, the command that probes it from inside,
//! and what its probe report must say.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::cluster::dra::{claim_template, device_class};
use crate::cluster::DRA_DRIVER;
use crate::cri_node::{BUSYBOX, HANDLER};
use crate::probe::Report;
use crate::sim::{ACCELS, CTL, LIB, SONAME};

/// The resource the demo devices are advertised as.
pub const RESOURCE: &str = "devinject.io/demo";
/// The line the container prints once its probe has reported.
pub const PROBED: &str = "churn-probe-done";
/// Where the container makes its own nodes of every device (with CAP_MKNOD, which the
/// manifest adds): the device cgroup must deny those it was not granted.
const OWN_NODES: &str = "/tmp/churn-nodes";
/// The memory limit of a pod that is OOM-killed on purpose, and what it then allocates.
const OOM_LIMIT: &str = "32Mi";
const OOM_ALLOCATION: &str = "64M";
/// The annotation a forger on the CDI path sets on itself, naming every demo device.
const FORGED_CDI_ANNOTATION: &str = "cdi.k8s.io/churn-forged";
/// The ResourceClaimTemplate of `n` demo devices a pod on the DRA path names:
/// `churn-demo-<n>`.
const DEMO_TEMPLATE: &str = "churn-demo";
/// The ResourceClaimTemplate of one kvm share a pod on the DRA path names.
const KVM_TEMPLATE: &str = "churn-kvm";

/// A real kernel device the pods ask for beside the demo accelerators: its shipped profile,
/// its node made on the node's simulated host with the host's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelDevice {
    /// The shipped profile (`profiles/<profile>.toml`).
    pub profile: &'static str,
    /// The resource the plugin advertises it as.
    pub resource: &'static str,
    /// Its node below the dev root, and below the container's `/dev`.
    pub node: &'static str,
    /// The host's numbers.
    pub major: u32,
    /// The host's numbers.
    pub minor: u32,
    /// The ids the one device is advertised as: more than one makes it a shared resource.
    pub replicas: u32,
}

/// `/dev/kvm`, one per node, shared as three replicas (`0::0` .. `0::2`), as KubeVirt shares
/// it. (The demo accelerators take the numbers of other real misc devices, `/dev/fuse` and
/// the tun device among them: a kernel device here must not share numbers with them, or a
/// grant of one would open the other.)
pub const KVM: KernelDevice = KernelDevice {
    profile: "kvm",
    resource: "devinject.io/kvm",
    node: "kvm",
    major: 10,
    minor: 232,
    replicas: 3,
};

/// The kernel devices of every churn node.
pub const KERNEL_DEVICES: [KernelDevice; 1] = [KVM];

impl KernelDevice {
    /// Whether two pods may hold it at once.
    pub fn shared(&self) -> bool {
        self.replicas > 1
    }
}

/// Every resource the churn's pods ask for: the demo devices, then the kernel devices.
pub fn resources() -> impl Iterator<Item = &'static str> {
    std::iter::once(RESOURCE).chain(KERNEL_DEVICES.iter().map(|d| d.resource))
}

/// What the kubelet's checkpoint granted one pod: resource → device ids.
pub type Grant = BTreeMap<String, Vec<String>>;

/// `resource=id`, one granted (or seen) device in the run's reports and checks.
pub fn device_key(resource: &str, id: &str) -> String {
    format!("{resource}={id}")
}

/// The ResourceClaimTemplates the DRA path's pods name: one and two demo devices, one kvm
/// share, each of the DeviceClass `devinject-dra device-classes` prints for its profile.
pub fn claim_templates() -> String {
    [
        claim_template(&format!("{DEMO_TEMPLATE}-1"), &device_class("demo"), 1),
        claim_template(&format!("{DEMO_TEMPLATE}-2"), &device_class("demo"), 2),
        claim_template(KVM_TEMPLATE, &device_class(KVM.profile), 1),
    ]
    .join("---\n")
}

/// What a ResourceClaim's allocation gives its pod, as the kubelet's checkpoint would say it:
/// `(resource, id)` per device of devinject's driver (DRA device `<profile>-<id>`, a replica
/// id's `::` as `--`, docs/dra.md); a device of no churn profile as `(?, <device>)`.
pub fn claim_devices(claim: &Value) -> Vec<(String, String)> {
    let profiles = std::iter::once(("demo", RESOURCE))
        .chain(KERNEL_DEVICES.iter().map(|d| (d.profile, d.resource)));
    let profiles: Vec<(&str, &str)> = profiles.collect();
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["driver"] == DRA_DRIVER)
        .filter_map(|r| r["device"].as_str())
        .map(|device| {
            profiles
                .iter()
                .find_map(|(profile, resource)| {
                    let id = device.strip_prefix(profile)?.strip_prefix('-')?;
                    Some((resource.to_string(), id.replace("--", "::")))
                })
                .unwrap_or_else(|| ("?".to_owned(), device.to_owned()))
        })
        .collect()
}

/// The engine path a pod goes through; each has its own node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EnginePath {
    /// The `devinject` RuntimeClass: the runtime shim (node 0, containerd 2).
    Shim,
    /// The default runtime with `devinject-nri` on containerd's NRI socket (node 1).
    Nri,
    /// CDI on CRI-O: the plugin answers with CDI devices, CRI-O injects the specs
    /// `devinject-ctl cdi generate` wrote, their hook finishes (node 2).
    Cdi,
    /// Dynamic Resource Allocation: the pod's ResourceClaims allocated by the scheduler from
    /// `devinject-dra`'s ResourceSlices, prepared by it as a transient CDI spec per claim,
    /// which containerd 2 injects; pods on plain runc (node 3).
    Dra,
}

impl EnginePath {
    /// All, in node order.
    pub const ALL: [Self; 4] = [Self::Shim, Self::Nri, Self::Cdi, Self::Dra];

    /// The index of the node that runs this path.
    pub fn node(self) -> usize {
        match self {
            Self::Shim => 0,
            Self::Nri => 1,
            Self::Cdi => 2,
            Self::Dra => 3,
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Shim => "shim",
            Self::Nri => "nri",
            Self::Cdi => "cdi",
            Self::Dra => "dra",
        }
    }

    /// Whether devinject sees a forged request on this path and refuses it (the hook, the
    /// shim and NRI read the container's env); on the CDI and DRA paths only what the kubelet
    /// passes is injected, so a forger runs with nothing.
    pub fn refuses_forgers(self) -> bool {
        matches!(self, Self::Shim | Self::Nri)
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
    /// Asks the scheduler for nothing and sets the request variable itself (and, on the CDI
    /// path, a CDI annotation on the pod): must be refused, or get nothing.
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
    /// The kernel devices it asks for, one of each ([`KERNEL_DEVICES`]).
    pub kernel: Vec<KernelDevice>,
    /// What it does.
    pub kind: Kind,
}

impl PodPlan {
    /// Whether it asks for `device`.
    pub fn asks(&self, device: &KernelDevice) -> bool {
        self.kernel.contains(device)
    }

    /// How many ids of `resource` it asks for.
    pub fn asked(&self, resource: &str) -> usize {
        if resource == RESOURCE {
            return self.devices as usize;
        }
        self.kernel
            .iter()
            .filter(|d| d.resource == resource)
            .count()
    }

    /// What it asks for, for reports.
    pub fn label(&self) -> String {
        let mut parts = vec![format!("{} demo", self.devices)];
        parts.extend(self.kernel.iter().map(|d| d.profile.to_owned()));
        parts.join(" + ")
    }

    /// The pod's manifest, pinned to `node` by its hostname label. On the DRA path it asks
    /// through claims made from [`claim_templates`], elsewhere through extended resources.
    pub fn manifest(&self, node: &str) -> String {
        let mut limits = Vec::new();
        let mut claims: Vec<(String, String)> = Vec::new();
        match self.path {
            EnginePath::Dra => {
                if self.devices > 0 {
                    claims.push(("demo".into(), format!("{DEMO_TEMPLATE}-{}", self.devices)));
                }
                for d in &self.kernel {
                    claims.push((d.profile.into(), KVM_TEMPLATE.into()));
                }
            }
            _ => {
                if self.devices > 0 {
                    limits.push(format!("{RESOURCE}: {}", self.devices));
                }
                for d in &self.kernel {
                    limits.push(format!("{}: 1", d.resource));
                }
            }
        }
        if self.kind == Kind::Oom {
            limits.push(format!("memory: {OOM_LIMIT}"));
        }
        let mut resources = Vec::new();
        if !limits.is_empty() {
            resources.push(format!("limits: {{{}}}", limits.join(", ")));
        }
        if !claims.is_empty() {
            let refs: Vec<String> = claims
                .iter()
                .map(|(c, _)| format!("{{name: {c}}}"))
                .collect();
            resources.push(format!("claims: [{}]", refs.join(", ")));
        }
        let resources = match resources.is_empty() {
            true => String::new(),
            false => format!("\n    resources: {{{}}}", resources.join(", ")),
        };
        let pod_claims = match claims.is_empty() {
            true => String::new(),
            false => {
                let entries: Vec<String> = claims
                    .iter()
                    .map(|(c, t)| format!("{{name: {c}, resourceClaimTemplateName: {t}}}"))
                    .collect();
                format!("\n  resourceClaims: [{}]", entries.join(", "))
            }
        };
        let forger = self.kind == Kind::Forger;
        let env: Vec<Value> = match forger {
            true => vec![serde_json::json!({"name": "DEMO_VISIBLE_DEVICES", "value": "all"})],
            false => Vec::new(),
        };
        let annotations = match (forger, self.path) {
            (true, EnginePath::Cdi) => {
                format!("\n  annotations: {{{FORGED_CDI_ANNOTATION}: \"{RESOURCE}=all\"}}")
            }
            _ => String::new(),
        };
        let runtime_class = match self.path {
            EnginePath::Shim => format!("\n  runtimeClassName: {HANDLER}"),
            EnginePath::Nri | EnginePath::Cdi | EnginePath::Dra => String::new(),
        };
        // A claimed pod's container may be killed and must start again with its devices.
        let restart = match (self.path, self.kind) {
            (EnginePath::Dra, Kind::Probe) => "OnFailure",
            _ => "Never",
        };
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{devinject-churn: \"1\"}}{annotations}\n\
             spec:{runtime_class}{pod_claims}\n  nodeSelector: {{kubernetes.io/hostname: {node}}}\n  \
             hostNetwork: true\n  restartPolicy: {restart}\n  automountServiceAccountToken: false\n  \
             terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    image: {BUSYBOX}\n    \
             imagePullPolicy: Never\n    command: {command}\n    env: {env}\n    \
             securityContext: {{capabilities: {{add: [MKNOD]}}}}{resources}\n",
            name = self.name,
            command = serde_json::to_string(&self.command()).expect("json"),
            env = serde_json::to_string(&env).expect("json"),
        )
    }

    /// The container's command: make its own nodes of every device, probe the injected ones,
    /// its own and the library, say so, then hold (or, for [`Kind::Oom`], allocate past the
    /// limit as PID 1, which the kernel's OOM killer then ends).
    fn command(&self) -> Vec<String> {
        let mut script = format!("mkdir -p {OWN_NODES}; ");
        for (name, major, minor) in ACCELS {
            script.push_str(&format!("mknod {OWN_NODES}/{name} c {major} {minor}; "));
        }
        for d in KERNEL_DEVICES {
            script.push_str(&format!(
                "mknod {OWN_NODES}/{} c {} {}; ",
                d.node, d.major, d.minor
            ));
        }
        let mut nodes: Vec<String> = ACCELS
            .iter()
            .chain(std::iter::once(&CTL))
            .map(|(n, _, _)| format!("/dev/demo/{n}"))
            .collect();
        nodes.extend(ACCELS.iter().map(|(n, _, _)| format!("{OWN_NODES}/{n}")));
        for d in KERNEL_DEVICES {
            nodes.push(format!("/dev/{}", d.node));
            nodes.push(format!("{OWN_NODES}/{}", d.node));
        }
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

/// What is wrong with the probe report `out` of a container that the kubelet's checkpoint
/// says was granted `grant` for `plan`: as many ids of each resource as it asked for; every
/// injected node granted and opening with the host's numbers, no other injected; its own node
/// of a granted device opening and of any other denied by the device cgroup (EPERM); the
/// control node and the library (read-only, in the linker cache) exactly when it holds a demo
/// device. Empty when all is right.
pub fn probe_problems(out: &str, grant: &Grant, plan: &PodPlan) -> Vec<String> {
    let report = Report::parse(out);
    let mut problems = Vec::new();
    let ids = |resource: &str| grant.get(resource).cloned().unwrap_or_default();
    for resource in resources() {
        let asked = plan.asked(resource);
        let granted = ids(resource);
        if granted.len() != asked {
            problems.push(format!(
                "asked for {asked} of {resource}, the checkpoint has {granted:?}"
            ));
        }
    }
    let Some(ctl) = report.nodes.get(&format!("/dev/demo/{}", CTL.0)) else {
        problems.push("no probe report".to_owned());
        return problems;
    };
    let demo = ids(RESOURCE);
    let mut devices: Vec<(String, String, bool, u32, u32)> = ACCELS
        .iter()
        .enumerate()
        .map(|(i, (name, major, minor))| {
            let granted = demo.contains(&i.to_string());
            (
                format!("demo/{name}"),
                name.to_string(),
                granted,
                *major,
                *minor,
            )
        })
        .collect();
    devices.extend(KERNEL_DEVICES.iter().map(|d| {
        let granted = !ids(d.resource).is_empty();
        (
            d.node.to_owned(),
            d.node.to_owned(),
            granted,
            d.major,
            d.minor,
        )
    }));
    for (path, own_name, granted, major, minor) in devices {
        let injected = report.nodes.get(&format!("/dev/{path}"));
        let own = report.nodes.get(&format!("{OWN_NODES}/{own_name}"));
        match (granted, injected) {
            (true, Some(n))
                if (n.kind.as_str(), n.major, n.minor, n.open.as_str())
                    == ("c", major, minor, "ok") => {}
            (false, Some(n)) if n.kind == "missing" => {}
            (_, n) => problems.push(format!(
                "/dev/{path} (granted: {granted}): {}",
                n.map_or("not reported".to_owned(), |n| format!(
                    "{} {}:{} open={}",
                    n.kind, n.major, n.minor, n.open
                ))
            )),
        }
        match (granted, own) {
            (_, Some(n)) if n.kind != "c" => problems.push(format!(
                "the container could not make its own node of {own_name} ({}), so its denial was not checked",
                n.kind
            )),
            (true, Some(n)) if n.open == "ok" => {}
            (false, Some(n)) if n.open == "EPERM" => {}
            (_, n) => problems.push(format!(
                "own node of {own_name} (granted: {granted}): open={}",
                n.map_or("not reported", |n| n.open.as_str())
            )),
        }
    }
    let holds = !demo.is_empty();
    let ctl_ok = match holds {
        true => ctl.open == "ok",
        false => ctl.kind == "missing",
    };
    if !ctl_ok {
        problems.push(format!(
            "control node (holds demo devices: {holds}): {} open={}",
            ctl.kind, ctl.open
        ));
    }
    match report.libs.get(LIB) {
        Some(lib) if holds && !(lib.present && lib.read_only) => problems.push(format!(
            "the library: present={} read_only={}",
            lib.present, lib.read_only
        )),
        Some(lib) if !holds && lib.present => {
            problems.push("the library, with no demo device granted".to_owned())
        }
        None => problems.push("the library not reported".to_owned()),
        _ => {}
    }
    if holds && !report.libs.get(SONAME).is_some_and(|l| l.in_ldcache) {
        problems.push("the soname not in the linker cache".to_owned());
    }
    problems
}

/// The exclusive devices ([`device_key`]s: the demo accelerators) the probe report
/// `out` shows opening inside the container: what it really holds, whatever the checkpoint
/// says. A shared device is left out: two pods may hold it.
pub fn observed_devices(out: &str) -> Vec<String> {
    let report = Report::parse(out);
    let opens = |path: String| report.nodes.get(&path).is_some_and(|n| n.open == "ok");
    let mut held: Vec<String> = ACCELS
        .iter()
        .enumerate()
        .filter(|(_, (name, _, _))| {
            opens(format!("/dev/demo/{name}")) || opens(format!("{OWN_NODES}/{name}"))
        })
        .map(|(i, _)| device_key(RESOURCE, &i.to_string()))
        .collect();
    held.extend(
        KERNEL_DEVICES
            .iter()
            .filter(|d| !d.shared())
            .filter(|d| {
                opens(format!("/dev/{}", d.node)) || opens(format!("{OWN_NODES}/{}", d.node))
            })
            .map(|d| device_key(d.resource, "0")),
    );
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_line(path: &str, (ma, mi): (u32, u32), open: &str, present: bool) -> String {
        match present {
            true => format!("node {path} c {ma}:{mi} 666 open={open}\n"),
            false => format!("node {path} missing 0:0 0 open=ENOENT\n"),
        }
    }

    /// The report of a container that sees exactly `granted` demo devices and `kernel`.
    fn report(granted: &[usize], kernel: &[KernelDevice]) -> String {
        let mut out = String::new();
        for (i, (name, ma, mi)) in ACCELS.iter().enumerate() {
            let g = granted.contains(&i);
            out.push_str(&node_line(
                &format!("/dev/demo/{name}"),
                (*ma, *mi),
                "ok",
                g,
            ));
            let open = if g { "ok" } else { "EPERM" };
            out.push_str(&node_line(
                &format!("{OWN_NODES}/{name}"),
                (*ma, *mi),
                open,
                true,
            ));
        }
        for d in KERNEL_DEVICES {
            let g = kernel.contains(&d);
            out.push_str(&node_line(
                &format!("/dev/{}", d.node),
                (d.major, d.minor),
                "ok",
                g,
            ));
            let open = if g { "ok" } else { "EPERM" };
            out.push_str(&node_line(
                &format!("{OWN_NODES}/{}", d.node),
                (d.major, d.minor),
                open,
                true,
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

    fn plan(devices: u32, kernel: &[KernelDevice]) -> PodPlan {
        PodPlan {
            name: "churn-1".into(),
            path: EnginePath::Nri,
            devices,
            kernel: kernel.to_vec(),
            kind: Kind::Probe,
        }
    }

    fn grant(demo: &[&str], kernel: &[(KernelDevice, &str)]) -> Grant {
        let mut g = Grant::new();
        if !demo.is_empty() {
            g.insert(
                RESOURCE.into(),
                demo.iter().map(|s| s.to_string()).collect(),
            );
        }
        for (d, id) in kernel {
            g.insert(d.resource.into(), vec![id.to_string()]);
        }
        g
    }

    #[test]
    fn a_container_seeing_exactly_its_grant_has_no_problem() {
        assert_eq!(
            probe_problems(
                &report(&[1, 3], &[]),
                &grant(&["1", "3"], &[]),
                &plan(2, &[])
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            probe_problems(&report(&[], &[]), &Grant::new(), &plan(0, &[])),
            Vec::<String>::new()
        );
        let both = grant(&["2"], &[(KVM, "0::1")]);
        assert_eq!(
            probe_problems(&report(&[2], &[KVM]), &both, &plan(1, &[KVM])),
            Vec::<String>::new()
        );
        assert_eq!(
            observed_devices(&report(&[1, 3], &[KVM])),
            ["devinject.io/demo=1", "devinject.io/demo=3"],
            "kvm is shared: not an exclusive holding"
        );
    }

    #[test]
    fn a_device_not_granted_but_opening_is_a_problem() {
        let problems = probe_problems(&report(&[1, 2], &[]), &grant(&["1"], &[]), &plan(1, &[]));
        assert!(
            problems.iter().any(|p| p.contains("accel2")),
            "{problems:?}"
        );
        let problems = probe_problems(&report(&[], &[KVM]), &Grant::new(), &plan(0, &[]));
        assert!(
            problems.iter().any(|p| p.contains("/dev/kvm")),
            "{problems:?}"
        );
    }

    #[test]
    fn a_kernel_device_asked_but_not_granted_is_a_problem() {
        let problems = probe_problems(&report(&[], &[KVM]), &Grant::new(), &plan(0, &[KVM]));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("asked for 1 of devinject.io/kvm")),
            "{problems:?}"
        );
    }

    #[test]
    fn an_own_node_that_opens_without_a_grant_is_a_problem() {
        let out = report(&[], &[]).replace(
            "accel0 c 10:237 666 open=EPERM",
            "accel0 c 10:237 666 open=ok",
        );
        let problems = probe_problems(&out, &Grant::new(), &plan(0, &[]));
        assert!(
            problems.iter().any(|p| p.contains("own node of accel0")),
            "{problems:?}"
        );
        let out =
            report(&[], &[]).replace("kvm c 10:232 666 open=EPERM", "kvm c 10:232 666 open=ok");
        let problems = probe_problems(&out, &Grant::new(), &plan(0, &[]));
        assert!(
            problems.iter().any(|p| p.contains("own node of kvm")),
            "{problems:?}"
        );
    }

    #[test]
    fn a_missing_report_is_a_problem() {
        assert!(!probe_problems("", &Grant::new(), &plan(0, &[])).is_empty());
    }

    #[test]
    fn each_path_names_its_runtime_and_the_cdi_forger_its_annotation() {
        let plan = |path, kind| PodPlan {
            name: "churn-1".into(),
            path,
            devices: 2,
            kernel: vec![KVM],
            kind,
        };
        let shim = plan(EnginePath::Shim, Kind::Oom).manifest("n0");
        assert!(shim.contains("runtimeClassName: devinject"), "{shim}");
        assert!(
            shim.contains("devinject.io/demo: 2, devinject.io/kvm: 1, memory: 32Mi"),
            "{shim}"
        );
        assert!(shim.contains("add: [MKNOD]"), "{shim}");
        assert!(!plan(EnginePath::Nri, Kind::Probe)
            .manifest("n1")
            .contains("runtimeClassName"));
        let forger = plan(EnginePath::Cdi, Kind::Forger).manifest("n2");
        assert!(
            forger.contains("cdi.k8s.io/churn-forged: \"devinject.io/demo=all\""),
            "{forger}"
        );
        assert!(!plan(EnginePath::Nri, Kind::Forger)
            .manifest("n1")
            .contains("cdi.k8s.io"));
    }

    #[test]
    fn a_dra_pod_asks_through_claims_and_its_allocation_reads_as_a_grant() {
        let pod = PodPlan {
            name: "churn-1".into(),
            path: EnginePath::Dra,
            devices: 2,
            kernel: vec![KVM],
            kind: Kind::Probe,
        }
        .manifest("n3");
        assert!(
            pod.contains("resourceClaims: [{name: demo, resourceClaimTemplateName: churn-demo-2}, {name: kvm, resourceClaimTemplateName: churn-kvm}]"),
            "{pod}"
        );
        assert!(
            pod.contains("resources: {claims: [{name: demo}, {name: kvm}]}"),
            "{pod}"
        );
        assert!(!pod.contains("limits"), "{pod}");
        assert!(pod.contains("restartPolicy: OnFailure"), "{pod}");
        let templates = claim_templates();
        for t in [
            "churn-demo-1",
            "churn-demo-2",
            "churn-kvm",
            "kvm.devinject.io",
        ] {
            assert!(templates.contains(t), "{templates}");
        }
        let claim = serde_json::json!({"status": {"allocation": {"devices": {"results": [
            {"driver": "devinject.io", "device": "demo-3"},
            {"driver": "devinject.io", "device": "kvm-0--2"},
            {"driver": "other.example.com", "device": "demo-1"},
        ]}}}});
        assert_eq!(
            claim_devices(&claim),
            [
                (RESOURCE.to_owned(), "3".to_owned()),
                (KVM.resource.to_owned(), "0::2".to_owned())
            ]
        );
    }
}
