//! The paths with nothing of devinject's in the runtime, end to end on a real cluster
//! ([`devinject_tests::cluster`]): Kubernetes 1.37 on containerd 2 (and the compatibility
//! release 1.20.2 on containerd 1.7, Debian 13's), pods naming no RuntimeClass and running on the
//! default runtime, plain runc.
//!
//! - CDI ([`Setup::Cdi`]): the real device plugin, in `cdi-annotations` allocate mode, answers
//!   Allocate with `cdi.k8s.io/devinject_demo: devinject.io/demo=<id>,...`; the kubelet passes
//!   the annotation through the CRI to containerd, which runs with `enable_cdi = true` on the
//!   specs `devinject-ctl cdi generate` wrote; only containerd's CDI support and the spec's
//!   `createRuntime` hook (`devinject-hook finish`, for the library and the linker cache) act on
//!   the pod. The container's CRI annotations must name the allocated devices.
//! - NRI ([`Setup::Nri`]): containerd with NRI enabled and `devinject-nri` connected under the
//!   `kubernetes` policy; the plugin answers Allocate in its default `envvar` mode, the kubelet
//!   sets the request variable, and `devinject-nri` adjusts the container after asking this
//!   kubelet's pod-resources API what it granted. A pod that sets the variable itself without
//!   asking the scheduler for devices is refused at creation with the policy's message.
//!
//! Each pod must see exactly the devices the kubelet's checkpoint says it allocated (type,
//! numbers, opening), not the others, the control node, and the demo library read-only and in
//! the linker cache.
//!
//! Needs root, runc, openssl, unshare, nsenter, the Kubernetes binaries
//! (scripts/kube-module-build.sh or scripts/kube-build.sh) and the node's containerd
//! (scripts/runtimes-fetch.sh); skipped otherwise, a failure under CI. One
//! cluster at a time: the kubelets would share the `kubepods` cgroups.

use std::sync::Mutex;

use devinject_tests::cluster::userns::{
    after_uid_map, cdi_user_namespaced_pods_open_kvm,
    user_namespaced_pods_get_theirs_and_forgers_nothing,
};
use devinject_tests::cluster::{
    ready_with_containerd, user_namespaced, user_namespaced_pods_ready, Cluster, Setup,
    CDI_ALLOCATE_MODE, CDI_CRI_ALLOCATE_MODE,
};
use devinject_tests::cri_node::{BUSYBOX, HANDLER};
use devinject_tests::probe::Report;
use devinject_tests::runtimes::Release;
use devinject_tests::sim::{assert_demo_granted_exactly, demo_probe_args, ACCELS};

static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// The resource the demo profile's devices are advertised as.
const RESOURCE: &str = "devinject.io/demo";
/// The annotation key the plugin answers with in `cdi-annotations` mode (bins/device-plugin/src/resource.rs).
const ANNOTATION: &str = "cdi.k8s.io/devinject_demo";

fn ready() -> Option<Release> {
    ready_with_containerd("1.7")
}

/// Whether `release`'s NRI applies device cgroup rules given without nodes: containerd 2.2 and
/// later (its Debian version or the built one's, `2.3.7`).
fn nri_takes_rules_without_nodes(release: &Release) -> bool {
    let mut parts = release
        .version
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 2)
}

/// A pod running the demo probe on the default runtime (no RuntimeClass), asking for `devices`
/// demo devices, with `env` set in its container.
fn pod(name: &str, devices: u32, env: &[(&str, &str)]) -> String {
    pod_running(name, demo_probe_args(), devices, env)
}

/// [`pod`] running `command` instead of the demo probe.
fn pod_running(name: &str, command: Vec<String>, devices: u32, env: &[(&str, &str)]) -> String {
    let env: Vec<serde_json::Value> = env
        .iter()
        .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
        .collect();
    let resources = if devices > 0 {
        format!("\n    resources: {{limits: {{{RESOURCE}: {devices}}}}}")
    } else {
        String::new()
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         restartPolicy: Never\n  automountServiceAccountToken: false\n  \
         terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    image: {BUSYBOX}\n    \
         imagePullPolicy: Never\n    command: {command}\n    env: {env}{resources}\n",
        command = serde_json::to_string(&command).expect("json"),
        env = serde_json::to_string(&env).expect("json"),
    )
}

/// Starts a node on CDI with the demo profile in `allocate_mode` and nothing of devinject's in
/// the runtime, runs a pod asking for two devices, and returns the cluster, the ids the kubelet
/// allocated, the probe's output and the container's CRI annotations.
fn run_on_cdi(
    release: &Release,
    allocate_mode: &'static str,
) -> (
    Cluster,
    Vec<String>,
    String,
    std::collections::HashMap<String, String>,
) {
    let c = Cluster::start_with(Setup::Cdi {
        containerd: release.bin.clone(),
        allocate_mode,
    })
    .unwrap_or_else(|e| panic!("cluster: {e:#}"));
    eprintln!("node containerd: package {}", release.version);

    // Nothing of devinject's in the runtime: CDI is on, and runc is the only runtime.
    let config = std::fs::read_to_string(c.containerd_config()).expect("containerd config");
    assert!(
        config.contains("enable_cdi = true")
            && !config.contains(&format!("runtimes.{HANDLER}"))
            && !config.contains("devinject-runtime"),
        "{config}"
    );

    c.apply(&pod("cdi", 2, &[])).expect("create pod");
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
    let status = c
        .cri_container_status("cdi", "main")
        .expect("the container's CRI status");
    (c, ids, out, status.annotations)
}

#[test]
fn with_cdi_annotations_a_pod_on_plain_runc_gets_exactly_its_allocated_devices() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let (_c, ids, out, annotations) = run_on_cdi(&release, CDI_ALLOCATE_MODE);
    // The plugin's answer reached containerd through the kubelet, naming those devices.
    let want: Vec<String> = ids.iter().map(|i| format!("{RESOURCE}={i}")).collect();
    assert_eq!(
        annotations.get(ANNOTATION),
        Some(&want.join(",")),
        "the CDI annotation the kubelet passed: {annotations:?}"
    );
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
}

/// `cdi-cri`: the plugin names the devices in the Allocate answer's `cdi_devices` (KEP-4009),
/// with no annotation. A kubelet >= 1.28 passes them to containerd as the container's CDI
/// devices, and the pod sees exactly them; 1.20's kubelet knows no such field and drops it, and
/// the pod sees none (which is why the mode needs a kubelet >= 1.28, docs/profiles.md).
#[test]
fn with_cdi_devices_in_the_allocate_answer_a_pod_gets_exactly_its_allocated_devices() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let (mut c, ids, out, annotations) = run_on_cdi(&release, CDI_CRI_ALLOCATE_MODE);
    assert!(
        !annotations.keys().any(|k| k.starts_with("cdi.k8s.io/")),
        "no CDI annotation: {annotations:?}"
    );
    let report = Report::parse(&out);
    if c.kubernetes().minor() >= 28 {
        assert_demo_granted_exactly(&report, &ids, &out);
        // User-namespaced pods, with the specs of `cdi generate --user-namespaces`.
        if user_namespaced_pods_ready() {
            cdi_user_namespaced_pods_open_kvm(&mut c, CDI_CRI_ALLOCATE_MODE);
        }
    } else {
        for (name, _, _) in ACCELS {
            let node = report.node(&format!("/dev/demo/{name}"));
            assert_eq!(node.kind, "missing", "1.20 drops cdi_devices: {out}");
        }
    }
}

#[test]
fn with_nri_a_pod_gets_exactly_its_allocated_devices_and_forgers_are_refused() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::start_with(Setup::Nri {
        containerd: release.bin.clone(),
    })
    .unwrap_or_else(|e| panic!("cluster: {e:#}"));
    let config = std::fs::read_to_string(c.containerd_config()).expect("containerd config");
    assert!(
        !config.contains(&format!("runtimes.{HANDLER}")) && !config.contains("devinject-runtime"),
        "no devinject runtime: {config}"
    );

    c.apply(&pod("nri", 2, &[])).expect("create pod");
    let phase = c.wait_pod_done("nri").expect("pod finishes");
    let out = c.container_log("nri", "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{out}\n{}", c.logs());
    let pod_json = c.pod("nri").expect("pod");
    assert!(
        pod_json["spec"]["runtimeClassName"].is_null(),
        "the default runtime"
    );
    let uid = pod_json["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    let ids = c.allocated(&uid, "main", RESOURCE).expect("checkpoint");
    assert_eq!(ids.len(), 2, "the kubelet allocated two devices: {ids:?}");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);

    // User-namespaced pods (`hostUsers: false`, so off the host network) asking for devices:
    // their nodes must come as copies they own, with device cgroup rules given without nodes.
    // A runtime whose NRI applies such rules (containerd 2.2 on: scripts/cluster-containerd.sh)
    // serves them, root and non-root, and refuses their forger; on an older one, which drops
    // the rules (containerd 2.1, built with NRI v0.8), the plugin refuses the container, naming
    // the runtime and the way out, rather than let it start without its devices.
    if user_namespaced_pods_ready() {
        if nri_takes_rules_without_nodes(&release) {
            user_namespaced_pods_get_theirs_and_forgers_nothing(
                &c,
                RESOURCE,
                &|name, devices, env, user| {
                    user_namespaced(
                        &pod_running(name, after_uid_map(demo_probe_args()), devices, env),
                        user,
                    )
                },
            );
        } else {
            c.apply(&user_namespaced(&pod("nri-userns", 2, &[]), None))
                .expect("create pod");
            let message = c
                .wait_refusal("nri-userns")
                .expect("the user-namespaced pod is refused");
            assert!(
                message.contains("runs in a user namespace")
                    && message.contains("containerd 2.1")
                    && message.contains("runtimeClassName: devinject"),
                "the refusal names the runtime and the way out: {message}"
            );
        }
    }

    // Asked the scheduler for nothing, sets the variable itself: devinject-nri asks the
    // kubelet, which granted it nothing, and the creation fails with the policy's message.
    c.apply(&pod("nri-forger", 0, &[("DEMO_VISIBLE_DEVICES", "all")]))
        .expect("create pod");
    let message = c.wait_refusal("nri-forger").expect("the forger is refused");
    assert!(
        message.contains("env DEMO_VISIBLE_DEVICES")
            && message.contains("the kubelet granted it none of devinject.io/demo"),
        "the refusal names the request and the grant: {message}"
    );
    assert_ne!(
        c.pod("nri-forger").unwrap()["status"]["phase"],
        "Succeeded",
        "the forger must not run"
    );
}
