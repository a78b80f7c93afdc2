//! Cross-node bin-packing (docs/scheduling.md) on a real kube-scheduler with two real nodes
//! ([`devinject_tests::cluster`]: two kubelets, each with its own namespace, containerd, cgroup
//! root, device plugin and two simulated demo devices). The scheduler runs with the shipped
//! deploy/scheduler/kube-scheduler-config.yaml (`v1`; on 1.20 its `v1beta1` twin), only its
//! kubeconfig (and on 1.20 its serving address) made the test's, so the test proves the file
//! users get:
//!
//! - with the `devinject-binpack` profile, two 1-device pods land on the same node, and a
//!   2-device pod then still finds a node (the other, whole) and gets both its devices;
//! - with the default profile (of the same scheduler), two 1-device pods are spread over the two
//!   nodes, and a 2-device pod stays Pending with `Insufficient devinject.io/demo`.
//!
//! Every pod's placement and conditions are read from the apiserver, and every running pod's
//! container is probed for exactly the devices its kubelet allocated.
//!
//! Case A can fail: with the `devinject-binpack` profile of the file stripped of its plugins
//! (so that it scores as the default one), the second 1-device pod went to the other node and
//! the test failed on "the two 1-device pods share a node" (checked by hand when this test was
//! written).
//!
//! Needs what tests/tests/cluster/cluster.rs needs; skipped otherwise, a failure under CI.

use devinject_tests::cluster::{
    ready, shipped_scheduler_config, Cluster, Kubernetes, Setup, Shape,
};
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::probe::Report;
use devinject_tests::sim::{assert_demo_granted_exactly, demo_probe_args};
use serde_json::Value;

const RESOURCE: &str = "devinject.io/demo";
/// Demo devices per node: two 1-device pods fill a node, and only a whole node fits two.
const DEVICES: usize = 2;
/// What the container prints once the probe has reported.
const PROBED: &str = "probe-done";
const BINPACK: &str = "devinject-binpack";

/// A long-running pod asking for `devices` demo devices, scheduled by `scheduler` (`None`: the
/// default scheduler): it probes the demo devices, then sleeps, keeping them allocated.
fn pod(name: &str, devices: usize, scheduler: Option<&str>) -> String {
    let scheduler = scheduler
        .map(|s| format!("\n  schedulerName: {s}"))
        .unwrap_or_default();
    let script = format!(
        "{}; echo {PROBED}; exec sleep 3600",
        demo_probe_args().join(" ")
    );
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:{scheduler}\n  \
         runtimeClassName: devinject\n  hostNetwork: true\n  restartPolicy: Never\n  \
         automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 0\n  containers:\n  \
         - name: main\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    \
         command: [\"/bin/sh\", \"-c\", {script:?}]\n    \
         resources: {{limits: {{{RESOURCE}: {devices}}}}}\n",
    )
}

/// The pod's `type` condition, when it has one.
fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Creates pod `name` and waits until it runs; returns its node.
fn run(c: &Cluster, name: &str, devices: usize, scheduler: Option<&str>) -> String {
    c.apply(&pod(name, devices, scheduler)).expect("create pod");
    c.wait_pod(name, "running", |p| {
        (p["status"]["phase"] == "Running"
            && condition(p, "PodScheduled").is_some_and(|s| s["status"] == "True"))
        .then(|| {
            p["spec"]["nodeName"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
    })
    .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Asserts that pod `name`'s container sees exactly the `devices` devices its node's kubelet
/// allocated to it.
fn assert_granted(c: &Cluster, name: &str, devices: usize) {
    let out = c
        .wait_pod(name, "the probe's report", |_| {
            c.container_log(name, "main")
                .ok()
                .filter(|out| out.contains(PROBED))
        })
        .unwrap_or_else(|e| panic!("{e:#}"));
    let uid = c.pod(name).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = c.allocated(&uid, "main", RESOURCE).unwrap();
    assert_eq!(ids.len(), devices, "{name}: allocated {ids:?}");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &format!("{name}:\n{out}"));
}

/// Creates pod `name` and waits until the scheduler has found no node for it; returns the
/// scheduler's message.
fn unschedulable(c: &Cluster, name: &str, devices: usize, scheduler: Option<&str>) -> String {
    c.apply(&pod(name, devices, scheduler)).expect("create pod");
    c.wait_pod(name, "unschedulable", |p| {
        let cond = condition(p, "PodScheduled")?;
        (cond["status"] == "False" && cond["reason"] == "Unschedulable")
            .then(|| cond["message"].as_str().unwrap_or_default().to_owned())
    })
    .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Prints the pods and the scheduler that bound each, as docs/scheduling.md shows them.
fn show(c: &Cluster, case: &str) {
    let pods = c.kubectl(&["get", "pods", "-o", "wide"]).unwrap();
    let events = c
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "reason=Scheduled",
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            "custom-columns=POD:.involvedObject.name,SCHEDULER:.reportingComponent,MESSAGE:.message",
        ])
        .unwrap_or_default();
    println!("--- {case}\n$ kubectl get pods -o wide\n{pods}\n$ kubectl get events ...\n{events}");
}

/// Deletes every pod and waits until they are gone (their devices free again).
fn delete_pods(c: &Cluster) {
    c.kubectl(&[
        "delete",
        "pods",
        "--all",
        "--grace-period=1",
        "--wait=true",
        "--timeout=90s",
    ])
    .expect("delete the pods");
    c.kubectl(&["delete", "events", "--all"])
        .expect("delete the events");
}

#[test]
fn the_binpack_profile_fills_one_node_first_and_the_default_one_spreads() {
    if !ready() {
        return;
    }
    let shape = Shape {
        nodes: 2,
        devices: DEVICES,
        scheduler_config: Some(shipped_scheduler_config(
            &Kubernetes::find().expect("checked by ready"),
        )),
        ..Shape::default()
    };
    let c = Cluster::start_shaped(Setup::Ctl, &shape).unwrap_or_else(|e| panic!("cluster: {e:#}"));
    c.runtime_class().expect("RuntimeClass");
    let nodes: Vec<&str> = c.nodes().iter().map(|n| n.name()).collect();

    // A: the bin-packing profile fills one node, and the 2-device pod gets the other, whole.
    let first = run(&c, "packed-1", 1, Some(BINPACK));
    let second = run(&c, "packed-2", 1, Some(BINPACK));
    show(&c, "bin-packing, two 1-device pods");
    assert_eq!(
        first,
        second,
        "the two 1-device pods share a node\n{}",
        c.logs()
    );
    let big = run(&c, "packed-big", 2, Some(BINPACK));
    show(&c, "bin-packing, then a 2-device pod");
    assert_ne!(big, first, "the 2-device pod gets the other node");
    assert!(nodes.contains(&big.as_str()), "{big} is one of {nodes:?}");
    for (name, devices) in [("packed-1", 1), ("packed-2", 1), ("packed-big", 2)] {
        assert_granted(&c, name, devices);
    }
    delete_pods(&c);

    // B: the default profile spreads them, and no node has two devices left.
    let first = run(&c, "spread-1", 1, None);
    let second = run(&c, "spread-2", 1, None);
    assert_ne!(
        first, second,
        "the default scheduler spreads the 1-device pods"
    );
    for name in ["spread-1", "spread-2"] {
        assert_granted(&c, name, 1);
    }
    let why = unschedulable(&c, "spread-big", 2, None);
    show(&c, "default scheduler");
    let message = c
        .kubectl(&[
            "get",
            "pod",
            "spread-big",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}",
        ])
        .unwrap();
    println!("$ kubectl get pod spread-big -o jsonpath=...PodScheduled message\n{message}");
    assert!(
        why.contains(&format!(
            "0/2 nodes are available: 2 Insufficient {RESOURCE}"
        )),
        "{why}"
    );
    assert_eq!(c.pod("spread-big").unwrap()["status"]["phase"], "Pending");
}
