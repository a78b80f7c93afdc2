//! devinject as an NRI plugin (`devinject-nri`) on real containerd 1.7 (Debian 13's, NRI
//! enabled in its configuration) and 2.x (Debian unstable's, NRI on by default), driven through
//! their CRI API as the kubelet would. No devinject runtime entry and no CDI: the pod runs on
//! plain runc, the plugin registers over containerd's NRI socket and adjusts each container it
//! is asked about.
//!
//! - A container asking for devices 0 and 1 sees exactly those simulated devices with the
//!   host's numbers and mode, the un-granted `accel2` (bind-mounted in) denied by the cgroup,
//!   `accel3` absent, and the demo library read-only and in the linker cache (the finish hook).
//! - A container asking for nothing is left alone.
//! - A request naming a device that does not exist fails the creation with devinject's message.
//! - A volume the container mounts over the nodes' directory fails the creation, and its host
//!   directory is left as it was: runc would make the nodes in it.
//! - The plugin connects again after containerd restarts.
//! - Its `/metrics`, scraped over TCP, count each of those answers: adjustments, refusals by
//!   reason, registrations.
//! - A profile's prepare step (docs/prepare.md) runs in the plugin before it answers: the
//!   container reads the function loaded into its granted device; a failing run fails the
//!   creation with the program's message.
//! - A container running as uid 1000 with no supplementary groups opens its granted devices
//!   whose host nodes are `0660 root:4242`: NRI cannot add a group to the process, so the finish
//!   hook gives the nodes runc made to the process's group; the un-granted accel2 (bind-mounted
//!   with the host's owner) stays refused.
//! - A prepare step slower than containerd's NRI request timeout fails only its own container,
//!   within the plugin's request budget and with a message naming the budget and the fix;
//!   containerd keeps the plugin, and the next container gets its devices.
//!
//! The host configuration's request policy is `env` here (no kubelet); the `kubernetes` policy
//! on this path is the real kubelet's test. Needs root, runc, busybox, gcc, the built binaries
//! and the fetched releases (scripts/runtimes-fetch.sh); skipped otherwise (fails under
//! `CI=true`).

use std::path::PathBuf;

use devinject_tests::canary::HostGuard;
use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::cri_release::{ready, Paths, ReleaseNode};
use devinject_tests::nri_plugin::SlowPrepareRun;
use devinject_tests::probe::Report;
use devinject_tests::scrape;
use devinject_tests::sim::{
    add_demo_prepare_step, assert_demo_granted_0_1_in, assert_group_only_granted_0_1,
    demo_probe_args, DEMO_BROKEN_FUNCTION, DEMO_FUNCTION, DEMO_SLOW_FUNCTION, LIB,
};

/// The probe asking for `request` (`DEMO_VISIBLE_DEVICES`), with accel2 bind-mounted.
fn probe(node: &ReleaseNode, name: &str, request: Option<&str>) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        image: BUSYBOX.into(),
        command: demo_probe_args(),
        env: request
            .map(|r| vec![("DEMO_VISIBLE_DEVICES".to_owned(), r.to_owned())])
            .unwrap_or_default(),
        mounts: vec![(
            node.host.dev_root.join("demo/accel2"),
            PathBuf::from("/dev/demo/accel2"),
        )],
        log_path: format!("{name}.log"),
        ..ContainerSpec::default()
    }
}

fn injects_through_nri(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let paths = Paths {
        nri: true,
        host_config: "policy = \"env\"".into(),
        ..Paths::default()
    };
    let mut node = ReleaseNode::start(&release, &paths).unwrap_or_else(|e| panic!("{e:#}"));
    node.start_nri_plugin().unwrap_or_else(|e| panic!("{e:#}"));
    let (pod, config) = node.pod("nri", "").unwrap_or_else(|e| panic!("{e:#}"));
    let run = |node: &mut ReleaseNode, spec: &ContainerSpec| {
        node.run(&pod, &config, spec)
            .unwrap_or_else(|e| panic!("{e:#}\n--- plugin\n{}", node.nri_log()))
    };

    let spec = probe(&node, "granted", Some("0,1"));
    let (code, output) = run(&mut node, &spec).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code, 0, "probe exited {code}:\n{output}");
    assert_demo_granted_0_1_in(
        &Report::parse(&output),
        &format!(
            "containerd {series} via NRI\n--- output\n{output}\n--- plugin\n{}",
            node.nri_log()
        ),
    );

    // Asked for nothing: no device, no library.
    let spec = probe(&node, "nothing", None);
    let (code, output) = run(&mut node, &spec).expect("runs");
    assert_eq!(code, 0, "{output}");
    let report = Report::parse(&output);
    assert_eq!(report.node("/dev/demo/accel0").kind, "missing", "{output}");
    assert!(!report.lib(LIB).present, "{output}");

    // A device that does not exist: the creation fails with devinject's message.
    let spec = probe(&node, "bad", Some("9"));
    let err = run(&mut node, &spec).expect_err("a request for a missing device must fail");
    assert!(err.contains("devinject") && err.contains('9'), "{err}");

    // A volume over the nodes' directory: runc makes the adjustment's nodes by path after the
    // container's mounts, so they would land in the volume's host directory. The creation is
    // refused naming it, and the directory stays as it was.
    let volume = node.host.dir.join("pod-volume");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("keep"), "the volume's own\n").unwrap();
    let guard = HostGuard::new(vec![volume.clone()]);
    let spec = ContainerSpec {
        mounts: vec![(volume.clone(), PathBuf::from("/dev/demo"))],
        ..probe(&node, "volume", Some("0"))
    };
    let err = run(&mut node, &spec).expect_err("a node in a volume must be refused");
    assert!(
        err.contains("devinject") && err.contains("device node /dev/demo/accel0"),
        "{err}"
    );
    guard.assert_unchanged(&format!("containerd {series}: a volume over /dev/demo"));

    // A prepare step: run by the plugin on the granted device before it answers.
    let sys = add_demo_prepare_step(&node.host).unwrap();
    let prepared = |name: &str, function: &str| ContainerSpec {
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "for d in /sys-fpga/*; do echo \"$d $(cat $d/function)\"; done".into(),
        ],
        env: vec![
            ("DEMO_VISIBLE_DEVICES".into(), "1".into()),
            ("DEMO_FUNCTION".into(), function.into()),
        ],
        mounts: vec![(sys.clone(), PathBuf::from("/sys-fpga"))],
        ..probe(&node, name, None)
    };
    let (good, broken) = (
        prepared("prepared", DEMO_FUNCTION.0),
        prepared("broken", DEMO_BROKEN_FUNCTION.0),
    );
    let (code, output) = run(&mut node, &good).expect("runs");
    assert_eq!(code, 0, "{output}");
    assert_eq!(
        output.trim(),
        format!("/sys-fpga/accel1 {}", DEMO_FUNCTION.0),
        "{output}"
    );
    let err = run(&mut node, &broken).expect_err("a failing prepare step must fail the creation");
    assert!(
        err.contains("for device 1 (function broken) failed (exit code 3)")
            && err.contains(DEMO_BROKEN_FUNCTION.1),
        "{err}"
    );
    node.cri.remove_pod(&pod).expect("remove pod");

    // Every answer above, counted as containerd got it: two adjustments, a refusal of each
    // kind, one registration, connected.
    let text = node.nri_metrics().unwrap_or_else(|e| panic!("{e:#}"));
    for (name, want) in [
        ("devinject_nri_adjustments_total", 2.0),
        ("devinject_nri_refusals_total{reason=\"request\"}", 1.0),
        (
            "devinject_nri_refusals_total{reason=\"node_in_volume\"}",
            1.0,
        ),
        ("devinject_nri_refusals_total{reason=\"prepare_step\"}", 1.0),
        (
            "devinject_nri_create_container_duration_seconds_count{outcome=\"injected\"}",
            2.0,
        ),
        (
            "devinject_nri_create_container_duration_seconds_count{outcome=\"refused\"}",
            3.0,
        ),
        ("devinject_nri_registrations_total", 1.0),
        ("devinject_nri_connected", 1.0),
    ] {
        assert_eq!(
            scrape::value(&text, name),
            Some(want),
            "containerd {series}: {name}\n{text}"
        );
    }

    // containerd restarts: the plugin registers again and the next container is served.
    node.restart_containerd()
        .unwrap_or_else(|e| panic!("{e:#}"));
    node.wait_nri_registered(2)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (pod, config) = node
        .pod("nri-again", "")
        .unwrap_or_else(|e| panic!("{e:#}"));
    let spec = probe(&node, "granted-again", Some("0,1"));
    let (code, output) = node
        .run(&pod, &config, &spec)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code, 0, "{output}");
    assert_demo_granted_0_1_in(&Report::parse(&output), &output);
    node.cri.remove_pod(&pod).expect("remove pod");
    let text = node.nri_metrics().unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        scrape::value(&text, "devinject_nri_registrations_total"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        scrape::value(&text, "devinject_nri_adjustments_total"),
        Some(3.0),
        "{text}"
    );
}

#[test]
fn containerd_1_7_injects_through_the_nri_plugin() {
    injects_through_nri("1.7");
}

#[test]
fn containerd_2_injects_through_the_nri_plugin() {
    injects_through_nri("2");
}

/// The group of the render-node-like accelerators.
const GROUP: u32 = 4242;

fn non_root_opens_group_owned_devices_through_nri(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let paths = Paths {
        nri: true,
        accel_group: Some(GROUP),
        host_config: "policy = \"env\"".into(),
        ..Paths::default()
    };
    let mut node = ReleaseNode::start(&release, &paths).unwrap_or_else(|e| panic!("{e:#}"));
    node.start_nri_plugin().unwrap_or_else(|e| panic!("{e:#}"));
    let (pod, config) = node.pod("nri-user", "").unwrap_or_else(|e| panic!("{e:#}"));
    let spec = ContainerSpec {
        user: Some((1000, 1000)),
        ..probe(&node, "user", Some("0,1"))
    };
    let (code, output) = node
        .run(&pod, &config, &spec)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|e| panic!("{e}\n--- plugin\n{}", node.nri_log()));
    assert_eq!(code, 0, "probe exited {code}:\n{output}");
    let report = Report::parse(&output);
    assert_group_only_granted_0_1(&report, &format!("containerd {series}:\n{output}"));
    let accel2 = report.node("/dev/demo/accel2");
    assert!(
        accel2.open.contains("Permission_denied"),
        "un-granted accel2 keeps the host's group and is refused: {accel2:?}\n{output}"
    );
    node.cri.remove_pod(&pod).expect("remove pod");
}

#[test]
fn containerd_1_7_gives_a_non_root_container_its_nodes_through_nri() {
    non_root_opens_group_owned_devices_through_nri("1.7");
}

#[test]
fn containerd_2_gives_a_non_root_container_its_nodes_through_nri() {
    non_root_opens_group_owned_devices_through_nri("2");
}

/// A prepare step that outlives containerd's `plugin_request_timeout` (2 s by default) would make
/// containerd close the plugin and create that container, and every one after it until the plugin
/// reconnects, without devinject. The plugin answers within its request budget instead: only the
/// slow container fails, and the plugin stays.
fn a_slow_prepare_step_fails_only_its_container_and_keeps_the_plugin(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let paths = Paths {
        nri: true,
        host_config: "policy = \"env\"".into(),
        ..Paths::default()
    };
    let mut node = ReleaseNode::start(&release, &paths).unwrap_or_else(|e| panic!("{e:#}"));
    node.start_nri_plugin().unwrap_or_else(|e| panic!("{e:#}"));
    let sys = add_demo_prepare_step(&node.host).unwrap();
    let (pod, config) = node.pod("nri-slow", "").unwrap_or_else(|e| panic!("{e:#}"));
    let (slow, seconds) = DEMO_SLOW_FUNCTION;
    let spec = ContainerSpec {
        env: vec![
            ("DEMO_VISIBLE_DEVICES".into(), "1".into()),
            ("DEMO_FUNCTION".into(), slow.into()),
        ],
        mounts: vec![(sys.clone(), PathBuf::from("/sys-fpga"))],
        ..probe(&node, "slow", None)
    };
    let started = std::time::Instant::now();
    let slow_outcome = node
        .run(&pod, &config, &spec)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let slow_took = started.elapsed();
    // At once, as another pod's would: a container asking for devices, with no prepare step.
    let spec = probe(&node, "after-slow", Some("0,1"));
    let next = node
        .run(&pod, &config, &spec)
        .unwrap_or_else(|e| panic!("{e:#}"));
    SlowPrepareRun {
        runtime: &format!("containerd {series}"),
        timeout_key: "plugin_request_timeout",
        step_seconds: seconds,
        took: slow_took,
        slow: &slow_outcome,
        next: &next,
        runtime_log: &std::fs::read_to_string(node.containerd.daemon().log()).unwrap_or_default(),
        plugin_log: &node.nri_log(),
    }
    .assert_kept();
    node.cri.remove_pod(&pod).expect("remove pod");
}

#[test]
fn containerd_1_7_keeps_the_nri_plugin_when_a_prepare_step_is_slow() {
    a_slow_prepare_step_fails_only_its_container_and_keeps_the_plugin("1.7");
}

#[test]
fn containerd_2_keeps_the_nri_plugin_when_a_prepare_step_is_slow() {
    a_slow_prepare_step_fails_only_its_container_and_keeps_the_plugin("2");
}
