//! CRI-O 1.36, the second runtime the product is specified for, driven through its CRI API as
//! the kubelet would ([`devinject_tests::crio`]), with each path as CRI-O users configure it:
//!
//! - **CDI** (on by default in CRI-O): the specs `devinject-ctl cdi generate` writes, and a
//!   container naming its devices in the annotation the device plugin answers with in
//!   `cdi-annotations` mode; only CRI-O's CDI support and the spec's `createRuntime` hook
//!   (`devinject-hook finish`, for the linker cache, with no ldconfig to fall back to) act on it;
//! - **the hook through hooks.d**: the file `devinject-ctl runtime configure --runtime crio --mode
//!   hook` writes, in CRI-O's `hooks_dir`, and a container setting `DEMO_VISIBLE_DEVICES=0,1`;
//! - **the shim as a runtime handler**: the drop-in `devinject-ctl runtime configure --runtime
//!   crio` writes (`runtime_path`), read from CRI-O's `--config-dir`, and a pod naming the
//!   `devinject` handler;
//! - **NRI**: `[crio.nri]` enabled with its socket (`nri_listen`) in the node's directory and
//!   `devinject-nri` connected to it, and a container on plain runc setting
//!   `DEMO_VISIBLE_DEVICES=0,1`.
//!
//! Each container must see exactly devices 0 and 1 with the host's numbers and mode, the
//! un-granted `accel2` (bind-mounted in) denied by the cgroup, `accel3` absent, and the demo
//! library read-only and in the linker cache. A container on plain runc with no hook asking the
//! same way gets nothing, so each path is what granted them.
//!
//! On NRI, a profile's prepare step (docs/prepare.md) slower than CRI-O's
//! `nri_plugin_request_timeout` (2 s, its default, stated in the node's configuration) fails
//! only its own container, within the plugin's request budget and with a message naming the
//! budget and the fix; CRI-O keeps the plugin, and the next container gets its devices through
//! it (docs/nri.md says what CRI-O does without the budget).
//!
//! CRI-O comes from scripts/crio-build.sh (run by scripts/test.sh). Needs root, runc, conmon,
//! podman, busybox, gcc and the built binaries; skipped otherwise (fails under `CI=true`).

use std::collections::HashMap;
use std::path::PathBuf;

use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::crio::{ready, CrioNode, Paths, NRI_REQUEST_TIMEOUT, SHIM_HANDLER};
use devinject_tests::nri_plugin::SlowPrepareRun;
use devinject_tests::probe::Report;
use devinject_tests::sim::{
    add_demo_prepare_step, assert_demo_granted_0_1_in, demo_probe_args, ACCELS, DEMO_SLOW_FUNCTION,
    NO_LDCONFIG,
};

/// The annotation the device plugin answers Allocate with in `cdi-annotations` mode for
/// devices 0 and 1 (bins/device-plugin/src/allocate.rs).
const ANNOTATION: (&str, &str) = (
    "cdi.k8s.io/devinject_demo",
    "devinject.io/demo=0,devinject.io/demo=1",
);

/// The probe container with `annotations` and `env`, accel2 bind-mounted but not granted.
fn probe(node: &CrioNode, annotations: &[(&str, &str)], env: &[(&str, &str)]) -> ContainerSpec {
    ContainerSpec {
        name: "probe".into(),
        image: BUSYBOX.into(),
        command: demo_probe_args(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        mounts: vec![(
            node.host.dev_root.join("demo/accel2"),
            PathBuf::from("/dev/demo/accel2"),
        )],
        log_path: "probe.log".into(),
        ..ContainerSpec::default()
    }
}

/// Runs `spec` in a new pod `pod` on `handler` to its end; its exit code and output.
fn run(node: &mut CrioNode, pod: &str, handler: &str, spec: &ContainerSpec) -> (i32, String) {
    let (id, config) = node.pod(pod, handler).unwrap_or_else(|e| panic!("{e:#}"));
    let out = node
        .run(&id, &config, spec)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log_tail()));
    node.cri.remove_pod(&id).expect("remove pod");
    out
}

fn start(paths: &Paths) -> Option<CrioNode> {
    let bin = ready()?;
    Some(CrioNode::start(&bin, paths).unwrap_or_else(|e| panic!("{e:#}")))
}

fn assert_granted_by(path: &str, (code, output): (i32, String), node: &CrioNode) {
    let ctx = format!(
        "CRI-O via {path}\n--- output\n{output}\n--- crio\n{}",
        node.log_tail()
    );
    assert_eq!(code, 0, "probe exited {code}: {ctx}");
    assert_demo_granted_0_1_in(&Report::parse(&output), &ctx);
}

/// No path on: the same request grants nothing (so the tests below see each path's work).
fn assert_nothing_granted((code, output): (i32, String)) {
    assert_eq!(code, 0, "{output}");
    let report = Report::parse(&output);
    for (name, _, _) in [ACCELS[0], ACCELS[1]] {
        assert_eq!(
            report.node(&format!("/dev/demo/{name}")).kind,
            "missing",
            "{name}:\n{output}"
        );
    }
}

#[test]
fn crio_injects_the_cdi_devices_the_plugin_names() {
    // No ldconfig to fall back to: the spec's finish hook writes the linker cache itself.
    let Some(mut node) = start(&Paths {
        cdi: true,
        host_config: NO_LDCONFIG.into(),
        ..Paths::default()
    }) else {
        return;
    };
    let spec = probe(&node, &[ANNOTATION], &[]);
    let out = run(&mut node, "cdi", "", &spec);
    assert_granted_by("CDI", out, &node);
}

#[test]
fn crio_runs_the_hooksd_hook_devinject_ctl_writes() {
    let Some(mut node) = start(&Paths {
        hook: true,
        ..Paths::default()
    }) else {
        return;
    };
    let spec = probe(&node, &[], &[("DEMO_VISIBLE_DEVICES", "0,1")]);
    let out = run(&mut node, "hook", "", &spec);
    assert_granted_by("the hooks.d hook", out, &node);
}

#[test]
fn crio_runs_the_shim_from_the_drop_in_devinject_ctl_writes() {
    let Some(mut node) = start(&Paths {
        shim: true,
        ..Paths::default()
    }) else {
        return;
    };
    let spec = probe(&node, &[], &[("DEMO_VISIBLE_DEVICES", "0,1")]);
    let plain = run(&mut node, "plain", "", &spec);
    assert_nothing_granted(plain);
    let out = run(&mut node, "shim", SHIM_HANDLER, &spec);
    assert_granted_by("the shim", out, &node);
}

/// NRI on, the request policy `env` (no kubelet here; the `kubernetes` policy on NRI is the real
/// kubelet's test).
fn nri_paths() -> Paths {
    Paths {
        nri: true,
        host_config: "policy = \"env\"".into(),
        ..Paths::default()
    }
}

#[test]
fn crio_injects_through_the_nri_plugin() {
    let Some(mut node) = start(&nri_paths()) else {
        return;
    };
    let spec = probe(&node, &[], &[("DEMO_VISIBLE_DEVICES", "0,1")]);
    // NRI on but no plugin connected: nothing.
    let plain = run(&mut node, "no-plugin", "", &spec);
    assert_nothing_granted(plain);
    node.start_nri_plugin().unwrap_or_else(|e| panic!("{e:#}"));
    let out = run(&mut node, "nri", "", &spec);
    assert_granted_by(
        &format!("the NRI plugin\n--- plugin\n{}", node.nri_log()),
        out,
        &node,
    );
}

/// A prepare step that outlives CRI-O's `nri_plugin_request_timeout` would make CRI-O close the
/// plugin. The plugin answers within its request budget (three quarters of the timeout CRI-O
/// announces at `Configure`) instead: only the slow container fails, and the plugin stays.
#[test]
fn crio_keeps_the_nri_plugin_when_a_prepare_step_is_slow() {
    assert_eq!(NRI_REQUEST_TIMEOUT, "2s", "the budget below is 3/4 of it");
    let Some(mut node) = start(&nri_paths()) else {
        return;
    };
    node.start_nri_plugin().unwrap_or_else(|e| panic!("{e:#}"));
    let sys = add_demo_prepare_step(&node.host).unwrap();
    let (pod, config) = node.pod("nri-slow", "").unwrap_or_else(|e| panic!("{e:#}"));
    let (slow, seconds) = DEMO_SLOW_FUNCTION;
    let spec = ContainerSpec {
        name: "slow".into(),
        log_path: "slow.log".into(),
        mounts: vec![(sys.clone(), PathBuf::from("/sys-fpga"))],
        ..probe(
            &node,
            &[],
            &[("DEMO_VISIBLE_DEVICES", "1"), ("DEMO_FUNCTION", slow)],
        )
    };
    let started = std::time::Instant::now();
    let slow_outcome = node
        .run(&pod, &config, &spec)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let slow_took = started.elapsed();
    // At once, as another pod's would: a container asking for devices, with no prepare step.
    let spec = ContainerSpec {
        name: "after-slow".into(),
        log_path: "after-slow.log".into(),
        ..probe(&node, &[], &[("DEMO_VISIBLE_DEVICES", "0,1")])
    };
    let next = node
        .run(&pod, &config, &spec)
        .unwrap_or_else(|e| panic!("{e:#}"));
    SlowPrepareRun {
        runtime: "CRI-O",
        timeout_key: "nri_plugin_request_timeout",
        step_seconds: seconds,
        took: slow_took,
        slow: &slow_outcome,
        next: &next,
        runtime_log: &node.crio_log(),
        plugin_log: &node.nri_log(),
    }
    .assert_kept();
    node.cri.remove_pod(&pod).expect("remove pod");
}
