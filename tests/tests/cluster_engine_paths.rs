//! The CDI path end to end on a real cluster ([`devinject_tests::cluster`], [`Setup::Cdi`]):
//! the kubelet v1.20.2 asks the real device plugin, in `cdi-annotations` allocate mode, for a
//! pod's devices; the plugin answers Allocate with `cdi.k8s.io/devinject_demo:
//! devinject.io/demo=<id>,...`; the kubelet passes the annotation through the CRI to containerd
//! 1.7, which runs with `enable_cdi = true` on the specs `devinject-ctl cdi generate` wrote and has
//! no devinject runtime entry. The pod names no RuntimeClass: it runs on the default runtime,
//! plain runc, and only containerd's CDI support and the spec's `createRuntime` hook
//! (`devinject-hook finish`, for the library and the linker cache) act on it.
//!
//! The pod must see exactly the devices the kubelet's checkpoint says it allocated (type,
//! numbers, opening), not the others, the control node, and the demo library read-only and in
//! the linker cache; the container's CRI annotations must name the same devices.
//!
//! Needs root, runc, openssl, unshare, nsenter, the Kubernetes binaries (scripts/kube-build.sh)
//! and containerd 1.7 (scripts/runtimes-fetch.sh); skipped otherwise, a failure under CI. One
//! cluster at a time: the kubelets would share the `kubepods` cgroups.

use std::sync::Mutex;

use devinject_tests::cluster::{kube_bin_dir, Cluster, Setup};
use devinject_tests::cri_node::{BUSYBOX, HANDLER};
use devinject_tests::probe::Report;
use devinject_tests::runtimes::{self, Release};
use devinject_tests::sim::{demo_probe_args, ACCELS, CTL, LIB, SONAME};
use devinject_tests::skip::{require, require_binary, require_root};

static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// The resource the demo profile's devices are advertised as.
const RESOURCE: &str = "devinject.io/demo";
/// The annotation key the plugin answers with in `cdi-annotations` mode (plugin/src/resource.rs).
const ANNOTATION: &str = "cdi.k8s.io/devinject_demo";

fn ready() -> Option<Release> {
    let release = runtimes::containerd("1.7");
    (require_root()
        && require_binary("runc")
        && require_binary("openssl")
        && require_binary("unshare")
        && require_binary("nsenter")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
        && require(
            kube_bin_dir().is_some(),
            "needs the Kubernetes v1.20.2 binaries (scripts/kube-build.sh)",
        )
        && require(
            release.is_some(),
            "needs containerd 1.7 (scripts/runtimes-fetch.sh)",
        ))
    .then(|| release.expect("checked"))
}

/// A pod running the demo probe on the default runtime (no RuntimeClass), asking for `devices`
/// demo devices.
fn pod(name: &str, devices: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         restartPolicy: Never\n  automountServiceAccountToken: false\n  \
         terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    image: {BUSYBOX}\n    \
         imagePullPolicy: Never\n    command: {command}\n    \
         resources: {{limits: {{{RESOURCE}: {devices}}}}}\n",
        command = serde_json::to_string(&demo_probe_args()).expect("json"),
    )
}

#[test]
fn containerd_1_7_with_cdi_gives_a_pod_on_plain_runc_exactly_its_allocated_devices() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::start_with(Setup::Cdi {
        containerd: release.bin.clone(),
    })
    .unwrap_or_else(|e| panic!("cluster: {e:#}"));
    eprintln!("containerd 1.7: package {}", release.version);

    // Nothing of devinject's in the runtime: CDI is on, and runc is the only runtime.
    let config = std::fs::read_to_string(c.containerd_config()).expect("containerd config");
    assert!(
        config.contains("enable_cdi = true")
            && !config.contains(&format!("runtimes.{HANDLER}"))
            && !config.contains("devinject-runtime"),
        "{config}"
    );

    c.apply(&pod("cdi", 2)).expect("create pod");
    let phase = c.wait_pod_done("cdi").expect("pod finishes");
    let out = c.container_log("cdi", "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{out}\n{}", c.logs());
    let pod = c.pod("cdi").expect("pod");
    assert!(
        pod["spec"]["runtimeClassName"].is_null(),
        "the default runtime"
    );
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_owned();
    let ids = c.allocated(&uid, "main", RESOURCE).expect("checkpoint");
    assert_eq!(ids.len(), 2, "the kubelet allocated two devices: {ids:?}");

    // The plugin's answer reached containerd through the kubelet, naming those devices.
    let status = c
        .cri_container_status("cdi", "main")
        .expect("the container's CRI status");
    let want: Vec<String> = ids.iter().map(|i| format!("{RESOURCE}={i}")).collect();
    assert_eq!(
        status.annotations.get(ANNOTATION),
        Some(&want.join(",")),
        "the CDI annotation the kubelet passed: {:?}",
        status.annotations
    );

    let report = Report::parse(&out);
    for (i, (name, major, minor)) in ACCELS.iter().enumerate() {
        let node = report.node(&format!("/dev/demo/{name}"));
        if ids.contains(&i.to_string()) {
            assert_eq!(
                (
                    node.kind.as_str(),
                    node.major,
                    node.minor,
                    node.open.as_str()
                ),
                ("c", *major, *minor, "ok"),
                "{name} was allocated ({ids:?}):\n{out}"
            );
        } else {
            assert_eq!(
                node.kind, "missing",
                "{name} was not allocated ({ids:?}):\n{out}"
            );
        }
    }
    assert_eq!(
        report.node(&format!("/dev/demo/{}", CTL.0)).open,
        "ok",
        "the control node:\n{out}"
    );
    let lib = report.lib(LIB);
    assert!(
        lib.present && lib.read_only,
        "the library, read-only:\n{out}"
    );
    assert!(
        report.lib(SONAME).in_ldcache,
        "the soname in the linker cache (the spec's createRuntime hook):\n{out}"
    );
}
