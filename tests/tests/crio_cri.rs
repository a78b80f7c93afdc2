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
//!   `devinject` handler.
//!
//! Each container must see exactly devices 0 and 1 with the host's numbers and mode, the
//! un-granted `accel2` (bind-mounted in) denied by the cgroup, `accel3` absent, and the demo
//! library read-only and in the linker cache. A container on plain runc with no hook asking the
//! same way gets nothing, so each path is what granted them.
//!
//! CRI-O comes from scripts/crio-build.sh (run by scripts/test.sh). Needs root, runc, conmon,
//! podman, busybox, gcc and the built binaries; skipped otherwise (fails under `CI=true`).

use std::collections::HashMap;
use std::path::PathBuf;

use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::crio::{ready, CrioNode, Paths, SHIM_HANDLER};
use devinject_tests::probe::Report;
use devinject_tests::sim::{assert_demo_granted_0_1_in, demo_probe_args, ACCELS, NO_LDCONFIG};

/// The annotation the device plugin answers Allocate with in `cdi-annotations` mode for
/// devices 0 and 1 (plugin/src/allocate.rs).
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
