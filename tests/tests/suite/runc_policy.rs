//! The request policy with the real runc, through the hook and through the shim, against a test
//! kubelet serving the pod-resources v1 API: granted devices are injected; a pod that sets the
//! request variable itself, copies another pod's annotations, or names a pod the kubelet does
//! not know gets nothing and a clear message (exit code 9); a missing kubelet socket is named;
//! non-Kubernetes containers are honoured as configured. The hook and the shim ask the kubelet
//! themselves, in-process; an obsolete `pod_resources_helper` key changes nothing.

use std::process::Output;

use devinject_kubelet::pod_resources::v1::PodResources;
use devinject_tests::bins::bin;
use devinject_tests::podresources::{pod, FakeKubelet};
use devinject_tests::probe::Report;
use devinject_tests::runc::{container_id, describe, Bundle};
use devinject_tests::sim::{assert_demo_granted_0_1_in, demo_host, demo_probe_args, SimHost};
use devinject_tests::skip::require_runc_demo;

const DEMO: &str = "devinject.io/demo";

/// How the container is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// runc with `devinject-hook` as a createRuntime hook.
    Hook,
    /// `devinject-runtime` in front of runc.
    Shim,
}

/// Which CRI runtime's annotations the spec carries.
#[derive(Debug, Clone, Copy)]
enum Cri {
    Containerd,
    CriO,
}

/// CRI annotations naming pod `ns/name` (uid `uid`) and container `container`.
fn cri_annotations(b: &mut Bundle, cri: Cri, ns: &str, name: &str, uid: &str, container: &str) {
    let keys = match cri {
        Cri::Containerd => [
            ("io.kubernetes.cri.container-type", "container"),
            ("io.kubernetes.cri.sandbox-namespace", ns),
            ("io.kubernetes.cri.sandbox-name", name),
            ("io.kubernetes.cri.sandbox-uid", uid),
            ("io.kubernetes.cri.container-name", container),
        ],
        Cri::CriO => [
            ("io.kubernetes.cri-o.ContainerType", "container"),
            ("io.kubernetes.pod.namespace", ns),
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.uid", uid),
            ("io.kubernetes.container.name", container),
        ],
    };
    for (k, v) in keys {
        b.annotation(k, v);
    }
}

struct Case {
    _dir: tempfile::TempDir,
    host: SimHost,
    bundle: Bundle,
    kubelet: Option<FakeKubelet>,
}

/// A demo host whose config has `policy_config`, a test kubelet serving `pods` (none: no
/// kubelet), and a probe bundle with accel2 bind-mounted but never granted.
fn case(policy_config: &str, pods: Option<Vec<PodResources>>) -> Case {
    let dir = tempfile::tempdir().unwrap();
    let host = demo_host(&dir.path().join("host"), &["demo"]).unwrap();
    let socket = dir.path().join("pod-resources/kubelet.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let kubelet = pods.map(|p| FakeKubelet::start(&socket, p).unwrap());
    let extra = format!(
        "pod_resources_socket = {:?}\npod_resources_timeout_ms = 2000\n{policy_config}",
        socket
    );
    host.write_config(&extra).unwrap();
    let args = demo_probe_args();
    let mut bundle = Bundle::new(&dir.path().join("bundle"), &args).unwrap();
    bundle.bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    Case {
        _dir: dir,
        host,
        bundle,
        kubelet,
    }
}

impl Case {
    fn run(&mut self, via: Via) -> (Output, Report) {
        let id = container_id("policy");
        let out = match via {
            Via::Hook => {
                let hook = bin("devinject-hook");
                self.bundle.hook("createRuntime", &hook, &self.host.config);
                self.bundle.run(&id).unwrap()
            }
            Via::Shim => {
                let runc = devinject_tests::runc::runc_path();
                let cmd = [
                    bin("devinject-runtime").to_string_lossy().into_owned(),
                    "--config".into(),
                    self.host.config.to_string_lossy().into_owned(),
                    "--runtime".into(),
                    runc,
                ];
                let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
                self.bundle.run_with(&refs, &id).unwrap()
            }
        };
        let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
        (out, report)
    }

    fn calls(&self) -> Vec<&'static str> {
        self.kubelet
            .as_ref()
            .map(FakeKubelet::calls)
            .unwrap_or_default()
    }
}

/// What must come of a container start.
enum Outcome {
    /// It starts with demo devices 0 and 1 ([`assert_demo_granted_0_1_in`]).
    Granted,
    /// The policy refuses it, and stderr says each of these ([`assert_refused`]).
    Refused(&'static [&'static str]),
    /// The policy lets it through but it fails to start, and stderr says each of these.
    Fails(&'static [&'static str]),
    /// It starts without any device: the refusal is ignored.
    NoDevices,
}

/// One container start under the request policy: the host, the pod it claims to be, what it
/// asks for, and what must come of it.
struct Start {
    /// Names the start in failure messages.
    name: &'static str,
    /// Host config lines after the pod-resources socket's.
    config: &'static str,
    /// The pods the test kubelet serves; `None`: no kubelet.
    pods: Option<Vec<PodResources>>,
    /// The kubelet answers List only (Get switched off, as on kubelets before 1.34).
    list_only: bool,
    /// CRI annotations naming container `main` of pod `ml/<name>`: the runtime's keys, the pod
    /// name and its uid.
    pod_keys: Vec<(Cri, &'static str, &'static str)>,
    /// Other annotations.
    annotations: &'static [(&'static str, &'static str)],
    /// The container's environment.
    env: &'static [&'static str],
    /// What must come of it.
    outcome: Outcome,
    /// The kubelet calls it must make; `None`: not checked.
    calls: Option<&'static [&'static str]>,
    /// Demo nodes removed from the host after the kubelet's allocation, before the start.
    unplugged: &'static [&'static str],
}

impl Default for Start {
    fn default() -> Self {
        Start {
            name: "",
            config: "policy = \"kubernetes\"\n",
            pods: Some(Vec::new()),
            list_only: false,
            pod_keys: Vec::new(),
            annotations: &[],
            env: &["DEMO_VISIBLE_DEVICES=0,1"],
            outcome: Outcome::Granted,
            calls: None,
            unplugged: &[],
        }
    }
}

/// Runs each start through `via` (when the host can run containers).
fn check(via: Via, starts: impl IntoIterator<Item = Start>) {
    if !require_runc_demo() {
        return;
    }
    for s in starts {
        start(via, s);
    }
}

fn start(via: Via, s: Start) {
    let mut c = case(s.config, s.pods);
    if s.list_only {
        c.kubelet.as_ref().expect("a kubelet").disable_get();
    }
    for (cri, name, uid) in s.pod_keys {
        cri_annotations(&mut c.bundle, cri, "ml", name, uid, "main");
    }
    for (k, v) in s.annotations {
        c.bundle.annotation(k, v);
    }
    for e in s.env {
        c.bundle.env(e);
    }
    for node in s.unplugged {
        std::fs::remove_file(c.host.dev_root.join("demo").join(node)).unwrap();
    }
    let (out, report) = c.run(via);
    let what = format!("{} via {via:?}", s.name);
    let ctx = format!("{what}: {}", describe(&out));
    match s.outcome {
        Outcome::Granted => {
            assert!(out.status.success(), "{ctx}");
            assert_demo_granted_0_1_in(&report, &ctx);
        }
        Outcome::Refused(needles) => assert_refused(via, &out, &report, needles, &ctx),
        Outcome::Fails(needles) => {
            assert!(!out.status.success(), "must not start: {ctx}");
            assert!(report.nodes.is_empty(), "the container must not run: {ctx}");
            let err = String::from_utf8_lossy(&out.stderr).replace("\\\"", "\"");
            for n in needles {
                assert!(err.contains(n), "{n:?} in stderr: {ctx}");
            }
        }
        Outcome::NoDevices => {
            assert!(out.status.success(), "{ctx}");
            assert_eq!(report.node("/dev/demo/accel0").kind, "missing", "{ctx}");
            assert_eq!(report.node("/dev/demo/accel2").open, "EPERM", "{ctx}");
        }
    }
    if let Some(calls) = s.calls {
        assert_eq!(c.calls(), calls, "kubelet calls: {what}");
    }
}

/// The container did not start, the policy refused it with exit code 9, and stderr says
/// `needles` (runc quotes a hook's stderr, so quotes are compared unescaped).
fn assert_refused(via: Via, out: &Output, report: &Report, needles: &[&str], ctx: &str) {
    assert!(!out.status.success(), "must not start: {ctx}");
    assert!(
        report.nodes.is_empty(),
        "the container must not have run: {ctx}"
    );
    let err = String::from_utf8_lossy(&out.stderr).replace("\\\"", "\"");
    match via {
        Via::Shim => assert_eq!(out.status.code(), Some(9), "policy exit code: {ctx}"),
        Via::Hook => assert!(err.contains("exit status 9"), "policy exit code: {ctx}"),
    }
    for n in needles {
        assert!(err.contains(n), "{n:?} in stderr: {ctx}");
    }
}

fn granted_ids_are_injected(cri: Cri) -> [Start; 1] {
    [Start {
        name: "granted ids",
        pods: Some(vec![pod(
            "ml",
            "trainer",
            &[("main", &[(DEMO, &["1", "0"])]), ("sidecar", &[])],
        )]),
        pod_keys: vec![(cri, "trainer", "uid-1")],
        calls: Some(&["Get"]),
        ..Start::default()
    }]
}

/// The kubelet granted device 1; accel1 is unplugged before the start, leaving accel0 and accel2.
/// Read as position 1, device 1 would be accel2, which may be another pod's.
fn granted_device_gone() -> [Start; 1] {
    [Start {
        name: "granted device unplugged",
        pods: Some(vec![pod("ml", "trainer", &[("main", &[(DEMO, &["1"])])])]),
        pod_keys: vec![(Cri::Containerd, "trainer", "uid-1")],
        env: &["DEMO_VISIBLE_DEVICES=1"],
        unplugged: &["accel1"],
        outcome: Outcome::Fails(&[
            "device 1 of devinject.io/demo was granted but is gone",
            "known ids are 0, 2, 3",
        ]),
        ..Start::default()
    }]
}

#[test]
fn hook_fails_when_a_granted_device_is_gone() {
    check(Via::Hook, granted_device_gone());
}

#[test]
fn shim_fails_when_a_granted_device_is_gone() {
    check(Via::Shim, granted_device_gone());
}

#[test]
fn hook_injects_granted_devices_containerd() {
    check(Via::Hook, granted_ids_are_injected(Cri::Containerd));
}

#[test]
fn shim_injects_granted_devices_crio() {
    check(Via::Shim, granted_ids_are_injected(Cri::CriO));
}

fn own_variable_is_refused() -> [Start; 1] {
    [Start {
        name: "own variable",
        pods: Some(vec![pod("ml", "thief", &[("main", &[])])]),
        pod_keys: vec![(Cri::Containerd, "thief", "uid-2")],
        env: &["DEMO_VISIBLE_DEVICES=all"],
        outcome: Outcome::Refused(&[
            "demo devices refused",
            "container \"main\" of pod ml/thief (uid uid-2) asks for `all` (env DEMO_VISIBLE_DEVICES)",
            "granted it none of devinject.io/demo",
            "instead of setting DEMO_VISIBLE_DEVICES yourself",
        ]),
        ..Start::default()
    }]
}

#[test]
fn hook_refuses_a_pod_setting_the_variable_itself() {
    check(Via::Hook, own_variable_is_refused());
}

#[test]
fn shim_refuses_a_pod_setting_the_variable_itself() {
    check(Via::Shim, own_variable_is_refused());
}

fn copied_annotations_are_refused() -> [Start; 2] {
    let pods = || {
        Some(vec![
            pod("ml", "victim", &[("main", &[(DEMO, &["0", "1"])])]),
            pod("ml", "thief", &[("main", &[])]),
        ])
    };
    [
        // CRI-O copies the thief's pod annotations, including a copy of the victim's grant,
        // into its container; the identity keys are the kubelet's and name the thief.
        Start {
            name: "copied grant annotation",
            pods: pods(),
            pod_keys: vec![(Cri::CriO, "thief", "uid-2")],
            annotations: &[("devinject.io/demo.devices", "0,1")],
            env: &[],
            outcome: Outcome::Refused(&[
                "asks for 0, 1 (annotation devinject.io/demo.devices)",
                "granted it none",
                "setting devinject.io/demo.devices yourself",
            ]),
            ..Start::default()
        },
        // The thief also copies the victim's identity under containerd's keys: the annotations
        // disagree and the kubelet is not even asked.
        Start {
            name: "copied identity annotations",
            pods: pods(),
            pod_keys: vec![
                (Cri::CriO, "thief", "uid-2"),
                (Cri::Containerd, "victim", "uid-1"),
            ],
            annotations: &[("devinject.io/demo.devices", "0,1")],
            env: &[],
            outcome: Outcome::Refused(&["annotations disagree", "\"uid-1\"", "\"uid-2\""]),
            calls: Some(&[]),
            ..Start::default()
        },
    ]
}

#[test]
fn hook_refuses_annotations_copied_from_another_pod() {
    check(Via::Hook, copied_annotations_are_refused());
}

#[test]
fn shim_refuses_annotations_copied_from_another_pod() {
    check(Via::Shim, copied_annotations_are_refused());
}

fn unknown_pod_is_refused() -> [Start; 1] {
    [Start {
        name: "unknown pod",
        pods: Some(vec![pod(
            "ml",
            "trainer",
            &[("main", &[(DEMO, &["0", "1"])])],
        )]),
        list_only: true,
        pod_keys: vec![(Cri::Containerd, "ghost", "uid-9")],
        outcome: Outcome::Refused(&["the kubelet knows no pod ml/ghost (uid uid-9)"]),
        // Get switched off as on kubelets before 1.34: List answered.
        calls: Some(&["Get", "List"]),
        ..Start::default()
    }]
}

#[test]
fn hook_refuses_an_unknown_pod() {
    check(Via::Hook, unknown_pod_is_refused());
}

#[test]
fn shim_refuses_an_unknown_pod() {
    check(Via::Shim, unknown_pod_is_refused());
}

fn missing_socket_is_named() -> [Start; 1] {
    [Start {
        name: "missing socket",
        pods: None,
        pod_keys: vec![(Cri::Containerd, "trainer", "uid-1")],
        outcome: Outcome::Refused(&MISSING_SOCKET),
        ..Start::default()
    }]
}

const MISSING_SOCKET: [&str; 3] = [
    "the device grant cannot be checked",
    "pod-resources/kubelet.sock does not exist",
    "pod_resources_socket",
];

#[test]
fn hook_names_a_missing_kubelet_socket() {
    check(Via::Hook, missing_socket_is_named());
}

#[test]
fn shim_names_a_missing_kubelet_socket() {
    check(Via::Shim, missing_socket_is_named());
}

/// A config written for an earlier release names the helper those releases executed: it is
/// ignored, so a path where nothing is changes nothing.
const OBSOLETE_HELPER: &str =
    "policy = \"kubernetes\"\npod_resources_helper = \"/nonexistent/devinject-podresources\"\n";

/// The kubelet is asked in-process: a granted container gets its devices with one `Get`,
/// whatever an obsolete `pod_resources_helper` says.
fn asked_in_process() -> [Start; 1] {
    [Start {
        name: "obsolete helper key",
        config: OBSOLETE_HELPER,
        pods: Some(vec![pod(
            "ml",
            "trainer",
            &[("main", &[(DEMO, &["0", "1"])])],
        )]),
        pod_keys: vec![(Cri::Containerd, "trainer", "uid-1")],
        calls: Some(&["Get"]),
        ..Start::default()
    }]
}

#[test]
fn hook_asks_the_kubelet_in_process() {
    check(Via::Hook, asked_in_process());
}

#[test]
fn shim_asks_the_kubelet_in_process() {
    check(Via::Shim, asked_in_process());
}

fn non_kubernetes_container() -> [Start; 4] {
    [
        // The env policy: no kubelet at all, the variable is honoured.
        Start {
            name: "env policy",
            config: "policy = \"env\"\n",
            pods: None,
            ..Start::default()
        },
        // The kubernetes policy leaves containers without CRI annotations alone by default,
        // and never asks the kubelet about them.
        Start {
            name: "no CRI annotations",
            calls: Some(&[]),
            ..Start::default()
        },
        // podman writes a few of CRI-O's keys, but no pod identity: not a Kubernetes
        // container.
        Start {
            name: "podman's annotations",
            annotations: &[
                ("io.container.manager", "libpod"),
                ("io.kubernetes.cri-o.Created", "2026-01-01T00:00:00Z"),
                ("io.kubernetes.cri-o.TTY", "false"),
            ],
            calls: Some(&[]),
            ..Start::default()
        },
        // ... unless told to refuse them.
        Start {
            name: "non_kubernetes = refuse",
            config: "policy = \"kubernetes\"\nnon_kubernetes = \"refuse\"\n",
            outcome: Outcome::Refused(&["not a Kubernetes container"]),
            ..Start::default()
        },
    ]
}

#[test]
fn hook_honours_non_kubernetes_containers_as_configured() {
    check(Via::Hook, non_kubernetes_container());
}

#[test]
fn shim_honours_non_kubernetes_containers_as_configured() {
    check(Via::Shim, non_kubernetes_container());
}

#[test]
fn on_denied_ignore_starts_the_container_without_devices() {
    for via in [Via::Hook, Via::Shim] {
        check(
            via,
            [Start {
                name: "on_denied = ignore",
                config: "policy = \"kubernetes\"\non_denied = \"ignore\"\n",
                pods: Some(vec![pod("ml", "cuda", &[("main", &[])])]),
                pod_keys: vec![(Cri::Containerd, "cuda", "uid-3")],
                env: &["DEMO_VISIBLE_DEVICES=all"],
                outcome: Outcome::NoDevices,
                ..Start::default()
            }],
        );
    }
}
