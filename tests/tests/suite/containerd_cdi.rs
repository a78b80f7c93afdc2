//! CDI consumed by the runtime itself, with no devinject runtime entry: `devinject-ctl cdi
//! generate` writes the specs, and containerd 1.7 (`enable_cdi = true`, Debian 13's) and 2.x
//! (CDI on by default, Debian unstable's), driven through their CRI API as the kubelet would,
//! inject the devices a container names in the annotation the device plugin returns in
//! `cdi-annotations` mode (`cdi.k8s.io/devinject_demo: devinject.io/demo=0,devinject.io/demo=1`).
//! The container runs on plain runc: only containerd's CDI support and the spec's
//! `createRuntime` hook (`devinject-hook finish`, for the linker cache) act on it.
//!
//! Each container must see exactly the named simulated devices with the host's numbers and
//! mode, the un-granted `accel2` (bind-mounted in) denied by the cgroup, `accel3` absent, and the
//! demo library read-only and in the linker cache.
//!
//! The releases come from scripts/runtimes-fetch.sh (run by scripts/test.sh); the machine's own
//! containerd 1.6 has no CDI. Needs root, runc, busybox, gcc and the built binaries; skipped
//! otherwise (fails under `CI=true`).

use std::collections::HashMap;
use std::path::PathBuf;

use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::cri_release::{ready, Paths, ReleaseNode};
use devinject_tests::probe::Report;
use devinject_tests::runtimes::Release;
use devinject_tests::sim::{
    assert_demo_granted_0_1_in, assert_group_only_granted_0_1, demo_probe_args, NO_LDCONFIG,
};

/// The annotation the device plugin answers Allocate with in `cdi-annotations` mode for
/// devices 0 and 1 (bins/device-plugin/src/allocate.rs).
const ANNOTATION: (&str, &str) = (
    "cdi.k8s.io/devinject_demo",
    "devinject.io/demo=0,devinject.io/demo=1",
);

/// containerd with CDI on, reading the specs devinject-ctl wrote; with `group`, the
/// accelerators are `0660 root:<group>`. The host configuration names an ldconfig that does not
/// exist: the spec's finish hook is told which libraries the runtime mounted and writes the
/// linker cache itself, so a fall back to ldconfig fails the container.
fn start(release: &Release, group: Option<u32>) -> ReleaseNode {
    let paths = Paths {
        cdi: true,
        accel_group: group,
        host_config: NO_LDCONFIG.into(),
        ..Paths::default()
    };
    ReleaseNode::start(release, &paths).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Runs `spec` in a new plain-runc pod `pod` to its end; its exit code and output.
fn run(node: &mut ReleaseNode, pod: &str, spec: &ContainerSpec) -> (i32, String) {
    let (id, config) = node.pod(pod, "").unwrap_or_else(|e| panic!("{e:#}"));
    let out = node
        .run(&id, &config, spec)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|e| panic!("{e}"));
    node.cri.remove_pod(&id).expect("remove pod");
    out
}

/// The probe container asking for devices 0 and 1 through the plugin's annotation, with
/// accel2 bind-mounted but not granted.
fn probe(node: &ReleaseNode, user: Option<(i64, i64)>) -> ContainerSpec {
    ContainerSpec {
        name: "probe".into(),
        image: BUSYBOX.into(),
        command: demo_probe_args(),
        annotations: HashMap::from([(ANNOTATION.0.into(), ANNOTATION.1.into())]),
        mounts: vec![(
            node.host.dev_root.join("demo/accel2"),
            PathBuf::from("/dev/demo/accel2"),
        )],
        log_path: "probe.log".into(),
        user,
        ..ContainerSpec::default()
    }
}

fn devices_injected_by(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let mut node = start(&release, None);
    let spec = probe(&node, None);
    let (code, output) = run(&mut node, "cdi", &spec);
    assert_eq!(code, 0, "probe exited {code}:\n{output}");
    assert_demo_granted_0_1_in(
        &Report::parse(&output),
        &format!("containerd {series} via CDI\n--- output\n{output}"),
    );
}

#[test]
fn containerd_1_7_injects_the_cdi_devices_the_plugin_names() {
    devices_injected_by("1.7");
}

#[test]
fn containerd_2_injects_the_cdi_devices_the_plugin_names() {
    devices_injected_by("2");
}

/// A container running as uid 1000 with no supplementary groups opens its granted devices,
/// whose nodes are `0660 root:4242`: the spec's `additionalGids` adds the group. The un-granted
/// accel2 (same owner and mode, bind-mounted in) stays denied by the cgroup.
fn non_root_opens_group_owned_devices_through(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let mut node = start(&release, Some(GROUP));
    let spec = probe(&node, Some((1000, 1000)));
    let (code, output) = run(&mut node, "cdi-user", &spec);
    assert_eq!(code, 0, "probe exited {code}:\n{output}");
    let report = Report::parse(&output);
    assert_group_only_granted_0_1(&report, &format!("containerd {series}:\n{output}"));
    assert_eq!(
        report.node("/dev/demo/accel2").open,
        "EPERM",
        "un-granted accel2 is denied by the cgroup:\n{output}"
    );
}

/// The group of the render-node-like accelerators.
const GROUP: u32 = 4242;

#[test]
fn containerd_1_7_gives_a_non_root_container_the_group_of_its_devices() {
    non_root_opens_group_owned_devices_through("1.7");
}

#[test]
fn containerd_2_gives_a_non_root_container_the_group_of_its_devices() {
    non_root_opens_group_owned_devices_through("2");
}
