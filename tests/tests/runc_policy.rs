//! The request policy with the real runc, through the hook and through the shim, against a test
//! kubelet serving the pod-resources v1 API: granted devices are injected; a pod that sets the
//! request variable itself, copies another pod's annotations, or names a pod the kubelet does
//! not know gets nothing and a clear message (exit code 9); a missing kubelet socket is named,
//! and so is a missing pod-resources helper; non-Kubernetes containers are honoured as
//! configured. The kubelet is asked through `devinject-podresources`, found next to the hook
//! and the shim as on an installed node.

use std::process::Output;

use devinject_tests::bins::bin;
use devinject_tests::podresources::{pod, FakeKubelet};
use devinject_tests::probe::Report;
use devinject_tests::runc::{container_id, describe, Bundle};
use devinject_tests::sim::{
    assert_demo_granted_0_1, demo_host, demo_probe_args, write_config, SimHost,
};
use devinject_tests::skip::{require_binary, require_root};

const DEMO: &str = "devinject.io/demo";

fn ready() -> bool {
    require_root()
        && require_binary("runc")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
}

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
fn case(policy_config: &str, pods: Option<Vec<devinject_podresources::v1::PodResources>>) -> Case {
    let dir = tempfile::tempdir().unwrap();
    let host = demo_host(&dir.path().join("host"), &["demo"]).unwrap();
    let socket = dir.path().join("pod-resources/kubelet.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let kubelet = pods.map(|p| FakeKubelet::start(&socket, p).unwrap());
    let extra = format!(
        "pod_resources_socket = {:?}\npod_resources_timeout_ms = 2000\n{policy_config}",
        socket
    );
    write_config(
        &host.config,
        &host.profiles_dir,
        &host.dev_root,
        &host.driver_root,
        &host.dir.join("sys"),
        &extra,
    )
    .unwrap();
    let args = demo_probe_args();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut bundle = Bundle::new(&dir.path().join("bundle"), &arg_refs).unwrap();
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
                let runc = devinject_tests::skip::which("runc").expect("runc on PATH");
                let cmd = [
                    bin("devinject-runtime").to_string_lossy().into_owned(),
                    "--config".into(),
                    self.host.config.to_string_lossy().into_owned(),
                    "--runtime".into(),
                    runc.to_string_lossy().into_owned(),
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

/// The container did not start, the policy refused it with exit code 9, and stderr says
/// `needles` (runc quotes a hook's stderr, so quotes are compared unescaped).
fn assert_refused(via: Via, out: &Output, report: &Report, needles: &[&str]) {
    let ctx = describe(out);
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

fn granted_ids_are_injected(via: Via, cri: Cri) {
    let mut c = case(
        "policy = \"kubernetes\"\n",
        Some(vec![pod(
            "ml",
            "trainer",
            &[("main", &[(DEMO, &["1", "0"])]), ("sidecar", &[])],
        )]),
    );
    cri_annotations(&mut c.bundle, cri, "ml", "trainer", "uid-1", "main");
    c.bundle.env("DEMO_VISIBLE_DEVICES=0,1");
    let (out, report) = c.run(via);
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&report, &out);
    assert_eq!(c.calls(), ["Get"]);
}

#[test]
fn hook_injects_granted_devices_containerd() {
    if ready() {
        granted_ids_are_injected(Via::Hook, Cri::Containerd);
    }
}

#[test]
fn shim_injects_granted_devices_crio() {
    if ready() {
        granted_ids_are_injected(Via::Shim, Cri::CriO);
    }
}

fn own_variable_is_refused(via: Via) {
    let mut c = case(
        "policy = \"kubernetes\"\n",
        Some(vec![pod("ml", "thief", &[("main", &[])])]),
    );
    cri_annotations(
        &mut c.bundle,
        Cri::Containerd,
        "ml",
        "thief",
        "uid-2",
        "main",
    );
    c.bundle.env("DEMO_VISIBLE_DEVICES=all");
    let (out, report) = c.run(via);
    assert_refused(
        via,
        &out,
        &report,
        &[
            "demo devices refused",
            "container \"main\" of pod ml/thief (uid uid-2) asks for `all` (env DEMO_VISIBLE_DEVICES)",
            "granted it none of devinject.io/demo",
            "instead of setting DEMO_VISIBLE_DEVICES yourself",
        ],
    );
}

#[test]
fn hook_refuses_a_pod_setting_the_variable_itself() {
    if ready() {
        own_variable_is_refused(Via::Hook);
    }
}

#[test]
fn shim_refuses_a_pod_setting_the_variable_itself() {
    if ready() {
        own_variable_is_refused(Via::Shim);
    }
}

fn copied_annotations_are_refused(via: Via) {
    let pods = vec![
        pod("ml", "victim", &[("main", &[(DEMO, &["0", "1"])])]),
        pod("ml", "thief", &[("main", &[])]),
    ];
    // CRI-O copies the thief's pod annotations, including a copy of the victim's grant, into
    // its container; the identity keys are the kubelet's and name the thief.
    let mut c = case("policy = \"kubernetes\"\n", Some(pods.clone()));
    cri_annotations(&mut c.bundle, Cri::CriO, "ml", "thief", "uid-2", "main");
    c.bundle.annotation("devinject.io/demo.devices", "0,1");
    let (out, report) = c.run(via);
    assert_refused(
        via,
        &out,
        &report,
        &[
            "asks for 0, 1 (annotation devinject.io/demo.devices)",
            "granted it none",
            "setting devinject.io/demo.devices yourself",
        ],
    );
    // The thief also copies the victim's identity under containerd's keys: the annotations
    // disagree and the kubelet is not even asked.
    let mut c = case("policy = \"kubernetes\"\n", Some(pods));
    cri_annotations(&mut c.bundle, Cri::CriO, "ml", "thief", "uid-2", "main");
    cri_annotations(
        &mut c.bundle,
        Cri::Containerd,
        "ml",
        "victim",
        "uid-1",
        "main",
    );
    c.bundle.annotation("devinject.io/demo.devices", "0,1");
    let (out, report) = c.run(via);
    assert_refused(
        via,
        &out,
        &report,
        &["annotations disagree", "\"uid-1\"", "\"uid-2\""],
    );
    assert!(c.calls().is_empty(), "{:?}", c.calls());
}

#[test]
fn hook_refuses_annotations_copied_from_another_pod() {
    if ready() {
        copied_annotations_are_refused(Via::Hook);
    }
}

#[test]
fn shim_refuses_annotations_copied_from_another_pod() {
    if ready() {
        copied_annotations_are_refused(Via::Shim);
    }
}

fn unknown_pod_is_refused(via: Via) {
    let mut c = case(
        "policy = \"kubernetes\"\n",
        Some(vec![pod(
            "ml",
            "trainer",
            &[("main", &[(DEMO, &["0", "1"])])],
        )]),
    );
    c.kubelet.as_ref().unwrap().disable_get();
    cri_annotations(
        &mut c.bundle,
        Cri::Containerd,
        "ml",
        "ghost",
        "uid-9",
        "main",
    );
    c.bundle.env("DEMO_VISIBLE_DEVICES=0,1");
    let (out, report) = c.run(via);
    assert_refused(
        via,
        &out,
        &report,
        &["the kubelet knows no pod ml/ghost (uid uid-9)"],
    );
    // Get switched off as on kubelets before 1.34: List answered.
    assert_eq!(c.calls(), ["Get", "List"]);
}

#[test]
fn hook_refuses_an_unknown_pod() {
    if ready() {
        unknown_pod_is_refused(Via::Hook);
    }
}

#[test]
fn shim_refuses_an_unknown_pod() {
    if ready() {
        unknown_pod_is_refused(Via::Shim);
    }
}

/// A container asking for the devices pod ml/trainer got, on a node where the grant cannot be
/// checked (`config`, `kubelet`: whether one serves): refused with `needles`, and no kubelet
/// call is made.
fn unverifiable_grant_is_refused(via: Via, config: &str, kubelet: bool, needles: &[&str]) {
    let pods = kubelet.then(|| vec![pod("ml", "trainer", &[("main", &[(DEMO, &["0", "1"])])])]);
    let mut c = case(config, pods);
    cri_annotations(
        &mut c.bundle,
        Cri::Containerd,
        "ml",
        "trainer",
        "uid-1",
        "main",
    );
    c.bundle.env("DEMO_VISIBLE_DEVICES=0,1");
    let (out, report) = c.run(via);
    assert_refused(via, &out, &report, needles);
    assert!(c.calls().is_empty(), "{:?}", c.calls());
}

const MISSING_SOCKET: [&str; 3] = [
    "the device grant cannot be checked",
    "pod-resources/kubelet.sock does not exist",
    "pod_resources_socket",
];

#[test]
fn hook_names_a_missing_kubelet_socket() {
    if ready() {
        unverifiable_grant_is_refused(
            Via::Hook,
            "policy = \"kubernetes\"\n",
            false,
            &MISSING_SOCKET,
        );
    }
}

#[test]
fn shim_names_a_missing_kubelet_socket() {
    if ready() {
        unverifiable_grant_is_refused(
            Via::Shim,
            "policy = \"kubernetes\"\n",
            false,
            &MISSING_SOCKET,
        );
    }
}

const NO_HELPER: &str =
    "policy = \"kubernetes\"\npod_resources_helper = \"/nonexistent/devinject-podresources\"\n";

const MISSING_HELPER: [&str; 3] = [
    "the device grant cannot be checked",
    "the pod-resources helper /nonexistent/devinject-podresources does not exist",
    "or set `pod_resources_helper` in the devinject config",
];

#[test]
fn hook_names_a_missing_helper() {
    if ready() {
        unverifiable_grant_is_refused(Via::Hook, NO_HELPER, true, &MISSING_HELPER);
    }
}

#[test]
fn shim_names_a_missing_helper() {
    if ready() {
        unverifiable_grant_is_refused(Via::Shim, NO_HELPER, true, &MISSING_HELPER);
    }
}

fn non_kubernetes_container(via: Via) {
    // The env policy: no kubelet at all, the variable is honoured.
    let mut c = case("policy = \"env\"\n", None);
    c.bundle.env("DEMO_VISIBLE_DEVICES=0,1");
    let (out, report) = c.run(via);
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&report, &out);

    // The kubernetes policy leaves containers without CRI annotations alone by default, and
    // never asks the kubelet about them.
    let mut c = case("policy = \"kubernetes\"\n", Some(vec![]));
    c.bundle.env("DEMO_VISIBLE_DEVICES=0,1");
    let (out, report) = c.run(via);
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&report, &out);
    assert!(c.calls().is_empty(), "{:?}", c.calls());

    // podman writes a few of CRI-O's keys, but no pod identity: not a Kubernetes container.
    let mut c = case("policy = \"kubernetes\"\n", Some(vec![]));
    for (k, v) in [
        ("io.container.manager", "libpod"),
        ("io.kubernetes.cri-o.Created", "2026-01-01T00:00:00Z"),
        ("io.kubernetes.cri-o.TTY", "false"),
    ] {
        c.bundle.annotation(k, v);
    }
    c.bundle.env("DEMO_VISIBLE_DEVICES=0,1");
    let (out, report) = c.run(via);
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&report, &out);
    assert!(c.calls().is_empty(), "{:?}", c.calls());

    // ... unless told to refuse them.
    let mut c = case(
        "policy = \"kubernetes\"\nnon_kubernetes = \"refuse\"\n",
        Some(vec![]),
    );
    c.bundle.env("DEMO_VISIBLE_DEVICES=0,1");
    let (out, report) = c.run(via);
    assert_refused(via, &out, &report, &["not a Kubernetes container"]);
}

#[test]
fn hook_honours_non_kubernetes_containers_as_configured() {
    if ready() {
        non_kubernetes_container(Via::Hook);
    }
}

#[test]
fn shim_honours_non_kubernetes_containers_as_configured() {
    if ready() {
        non_kubernetes_container(Via::Shim);
    }
}

#[test]
fn on_denied_ignore_starts_the_container_without_devices() {
    if !ready() {
        return;
    }
    for via in [Via::Hook, Via::Shim] {
        let mut c = case(
            "policy = \"kubernetes\"\non_denied = \"ignore\"\n",
            Some(vec![pod("ml", "cuda", &[("main", &[])])]),
        );
        cri_annotations(
            &mut c.bundle,
            Cri::Containerd,
            "ml",
            "cuda",
            "uid-3",
            "main",
        );
        c.bundle.env("DEMO_VISIBLE_DEVICES=all");
        let (out, report) = c.run(via);
        assert!(out.status.success(), "{via:?}: {}", describe(&out));
        assert_eq!(report.node("/dev/demo/accel0").kind, "missing", "{via:?}");
        assert_eq!(report.node("/dev/demo/accel2").open, "EPERM", "{via:?}");
    }
}
