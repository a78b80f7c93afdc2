//! The product on a real cluster ([`devinject_tests::cluster`]): Kubernetes' control plane and
//! kubelet (1.37, and 1.20.2 for compatibility), containerd over CRI with the `devinject` runtime
//! written by `devinject-ctl`, and the real device plugin, which the kubelet reaches over gRPC-Go
//! (its `:authority` is the socket path on 1.20, `localhost` since 1.26). Pods ask for
//! `devinject.io/demo` through resource limits:
//!
//! - a pod gets exactly the devices the kubelet's checkpoint says it allocated, with the
//!   library read-only and in the linker cache, and nothing else;
//! - a pod that asked for none and sets the request variable itself is refused by the
//!   `kubernetes` policy, with its message in the pod's status;
//! - the real scheduler keeps a pod asking for more devices than the node has Pending;
//! - after a kubelet restart the plugin registers again and the next pod is granted, and after a
//!   containerd restart too;
//! - a device unplugged between admission (Allocate) and the container's start fails the start
//!   with "granted but is gone", never another device;
//! - the policy's pod-resources question is answered by `Get` on a kubelet >= 1.34, by `List` on
//!   1.20, with the checkpoint's devices;
//! - a device gone while a pod holds it shows as Unhealthy in that pod's
//!   `allocatedResourcesStatus` on 1.37 (absent on 1.20).
//!
//! Needs root, containerd, runc, openssl, unshare, nsenter and the Kubernetes binaries
//! (scripts/kube-build.sh; scripts/test.sh builds them); skipped otherwise, a failure under CI.
//! One cluster at a time: the kubelets would share the `kubepods` cgroups.

use std::sync::Mutex;
use std::time::Duration;

use devinject_kubelet::pod_resources::{PodResourcesClient, Rpc};

use devinject_tests::cluster::userns::{
    after_uid_map, user_namespaced_pods_get_theirs_and_forgers_nothing,
};
use devinject_tests::cluster::{ready, user_namespaced, user_namespaced_pods_ready, Cluster};
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::probe::Report;
use devinject_tests::sim::{assert_demo_granted_exactly, demo_probe_args, ACCELS};
use serde_json::Value;

static ONE_CLUSTER: Mutex<()> = Mutex::new(());

fn start() -> (std::sync::MutexGuard<'static, ()>, Cluster) {
    let guard = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::start().unwrap_or_else(|e| panic!("cluster: {e:#}"));
    cluster.runtime_class().expect("RuntimeClass");
    (guard, cluster)
}

/// A pod running `command` in one container of the devinject RuntimeClass, asking for `devices`
/// demo devices (none: no resource at all), with `env`, after an init container sleeping
/// `init_sleep` seconds (0: none).
fn pod(
    name: &str,
    command: &[String],
    devices: u32,
    env: &[(&str, &str)],
    init_sleep: u32,
) -> String {
    let resources = if devices > 0 {
        format!("\n    resources: {{limits: {{devinject.io/demo: {devices}}}}}")
    } else {
        String::new()
    };
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
        .collect();
    let init = if init_sleep > 0 {
        format!(
            "\n  initContainers:\n  - name: wait\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    \
             command: [\"/bin/sleep\", \"{init_sleep}\"]"
        )
    } else {
        String::new()
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  runtimeClassName: devinject\n  \
         hostNetwork: true\n  restartPolicy: Never\n  automountServiceAccountToken: false\n  \
         terminationGracePeriodSeconds: 0{init}\n  containers:\n  - name: main\n    image: {BUSYBOX}\n    \
         imagePullPolicy: Never\n    command: {command}\n    env: {env}{resources}\n",
        command = serde_json::to_string(command).expect("json"),
        env = serde_json::to_string(&env).expect("json"),
    )
}

/// How many of the simulated accelerators the probe's output `out` opened.
fn opened_accels(out: &str) -> usize {
    let report = Report::parse(out);
    ACCELS
        .iter()
        .filter(|(name, _, _)| report.node(&format!("/dev/demo/{name}")).open == "ok")
        .count()
}

#[test]
fn pods_get_exactly_their_allocated_devices_and_forged_requests_are_refused() {
    if !ready() {
        return;
    }
    let (_one, c) = start();
    c.apply(&pod("granted", &demo_probe_args(), 2, &[], 0))
        .expect("create pod");
    let phase = c.wait_pod_done("granted").expect("pod finishes");
    let out = c.container_log("granted", "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{out}\n{}", c.logs());
    let uid = c.pod("granted").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = c.allocated(&uid, "main", "devinject.io/demo").unwrap();
    assert_eq!(ids.len(), 2, "the kubelet allocated two devices: {ids:?}");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);

    the_kubelet_answers_the_policy_with_get_where_it_can(&c);
    // User-namespaced pods through the runtime class: the shim's finish step gives the
    // container its own copy of each granted node, owned by the ids the pod's namespace maps.
    if user_namespaced_pods_ready() {
        user_namespaced_pods_get_theirs_and_forgers_nothing(
            &c,
            "devinject.io/demo",
            &user_namespaced_pod,
        );
    }

    // Asked for nothing, sets the variable itself: the policy asks the kubelet and refuses.
    // Restarted by the kubelet, as a Deployment's pod is, so that it is refused again.
    c.apply(
        &pod(
            "forger",
            &demo_probe_args(),
            0,
            &[("DEMO_VISIBLE_DEVICES", "all")],
            0,
        )
        .replace("restartPolicy: Never", "restartPolicy: Always"),
    )
    .expect("create pod");
    let message = c
        .wait_refusal("forger")
        .expect("the forged request is refused");
    assert!(
        message.contains("env DEMO_VISIBLE_DEVICES")
            && message.contains("the kubelet granted it none of devinject.io/demo"),
        "the refusal names the request and the grant: {message}"
    );
    assert_ne!(
        c.pod("forger").unwrap()["status"]["phase"],
        "Succeeded",
        "the forger must not run"
    );
    // Where the user looks: an Event on the pod (`kubectl describe pod forger`), one however
    // often the kubelet retries the start.
    let note = c
        .wait_pod_event("forger", "DeviceRequestRefused")
        .expect("the refusal is an Event on the pod");
    assert!(
        note.starts_with("devinject's runtime shim refused to start the container: ")
            && note.contains("env DEMO_VISIBLE_DEVICES"),
        "{note}"
    );
    // The kubelet tries the start again (its `Failed` Event counts the tries): still one Event
    // of ours, within the gap the Events keep per pod and reason.
    devinject_tests::daemons::poll(
        "the kubelet to try the forger again",
        devinject_tests::cluster::SLOW,
        || {
            let tries = Cluster::event_count(&c.pod_events("forger", "Failed")?);
            Ok((tries >= 2).then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    let ours = c.pod_events("forger", "DeviceRequestRefused").unwrap();
    assert_eq!(
        (ours.len(), Cluster::event_count(&ours)),
        (1, 1),
        "one Event however often the start is refused within a minute: {ours:#?}"
    );

    // More than the node has: the scheduler keeps it Pending and says why.
    c.apply(&pod("too-many", &demo_probe_args(), 5, &[], 0))
        .expect("create pod");
    let why = c
        .wait_pod("too-many", "unschedulable", |p| {
            let cond = p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "PodScheduled")?;
            (cond["status"] == "False" && cond["reason"] == "Unschedulable")
                .then(|| cond["message"].as_str().unwrap_or_default().to_owned())
        })
        .expect("the scheduler refuses it");
    assert!(why.contains("Insufficient devinject.io/demo"), "{why}");
    assert_eq!(c.pod("too-many").unwrap()["status"]["phase"], "Pending");
}

/// A pod with `hostUsers: false` asking for `devices` demo devices (none: no resource), with
/// `env`, running as `user` (uid and gid; the image's root when `None`), the probe after its
/// uid map. Such a pod cannot use the host network: it gets a network namespace of its own
/// ([`devinject_tests::cluster::cni_plugins`]).
fn user_namespaced_pod(
    name: &str,
    devices: u32,
    env: &[(&str, &str)],
    user: Option<u32>,
) -> String {
    let command = after_uid_map(demo_probe_args());
    user_namespaced(&pod(name, &command, devices, env, 0), user)
}

/// The policy's question, asked of the real kubelet for a running pod holding one device: a
/// kubelet >= 1.34 answers `Get` for that one pod (the policy then reads one pod, not the node's
/// every pod); 1.20's has no `Get`, and the client falls back to `List`. Either way the answer is
/// the device the kubelet's checkpoint says it allocated.
fn the_kubelet_answers_the_policy_with_get_where_it_can(c: &Cluster) {
    let hold = vec!["/bin/sleep".to_owned(), "600".to_owned()];
    c.apply(&pod("held", &hold, 1, &[], 0)).expect("create pod");
    c.wait_pod("held", "Running", |p| {
        (p["status"]["phase"] == "Running").then_some(())
    })
    .expect("the pod runs");
    let uid = c.pod("held").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = c.allocated(&uid, "main", "devinject.io/demo").unwrap();
    let socket = c
        .in_node_ns("/var/lib/kubelet/pod-resources/kubelet.sock")
        .expect("the node's namespace");
    let lookup = PodResourcesClient::new(socket, Duration::from_secs(5))
        .pod("default", "held")
        .expect("the kubelet answers");
    let expected = if c.kubernetes().minor() >= 34 {
        Rpc::Get
    } else {
        Rpc::List
    };
    println!(
        "pod-resources on Kubernetes {}: answered by {}",
        c.kubernetes().version(),
        lookup.answered_by
    );
    assert_eq!(lookup.answered_by, expected, "{}", c.kubernetes().version());
    let granted: Vec<String> = lookup
        .entries
        .iter()
        .flat_map(|p| &p.containers)
        .filter(|ct| ct.name == "main")
        .flat_map(|ct| &ct.devices)
        .filter(|d| d.resource_name == "devinject.io/demo")
        .flat_map(|d| d.device_ids.clone())
        .collect();
    assert_eq!(
        granted, ids,
        "the kubelet's answer is its checkpoint's allocation"
    );
    c.kubectl(&[
        "delete",
        "pod",
        "held",
        "--grace-period=0",
        "--force",
        "--wait=false",
    ])
    .expect("delete the pod");
}

#[test]
fn after_kubelet_and_containerd_restarts_the_next_pods_are_granted() {
    if !ready() {
        return;
    }
    let (_one, mut c) = start();
    assert_eq!(c.plugin_registrations(), 1, "{}", c.logs());
    c.restart_kubelet().expect("restart the kubelet");
    devinject_tests::daemons::poll(
        "the plugin to register again",
        devinject_tests::cluster::SLOW,
        || Ok((c.plugin_registrations() >= 2).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    c.wait_node_ready().expect("node Ready again");
    c.wait_allocatable("devinject.io/demo", "4")
        .expect("devices advertised again");
    c.apply(&pod("after-restart", &demo_probe_args(), 1, &[], 0))
        .expect("create pod");
    let phase = c.wait_pod_done("after-restart").expect("pod finishes");
    let out = c.container_log("after-restart", "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{out}\n{}", c.logs());
    assert_eq!(
        opened_accels(&out),
        1,
        "one device after the restart:\n{out}"
    );

    // containerd restarts (an upgrade of the engine): the next pod is granted too.
    c.restart_containerd().expect("restart containerd");
    c.apply(&pod("after-containerd", &demo_probe_args(), 2, &[], 0))
        .expect("create pod");
    let phase = c.wait_pod_done("after-containerd").expect("pod finishes");
    let out = c
        .container_log("after-containerd", "main")
        .unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{out}\n{}", c.logs());
    assert_eq!(
        opened_accels(&out),
        2,
        "two devices after containerd's restart:\n{out}"
    );
}

#[test]
fn a_device_unplugged_after_allocation_fails_the_start_and_never_swaps_in_another() {
    if !ready() {
        return;
    }
    let (_one, c) = start();
    // All four, so that the one unplugged is surely granted; the init container holds the
    // start back while the device goes.
    c.apply(&pod("unplugged", &demo_probe_args(), 4, &[], 8))
        .expect("create pod");
    c.wait_pod("unplugged", "its init container running", |p| {
        p["status"]["initContainerStatuses"][0]["state"]["running"]
            .is_object()
            .then_some(())
    })
    .expect("init container runs");
    let uid = c.pod("unplugged").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = c.allocated(&uid, "main", "devinject.io/demo").unwrap();
    assert_eq!(ids, ["0", "1", "2", "3"], "all four allocated");
    std::fs::remove_file(c.host().dev_root.join("demo/accel1")).expect("unplug accel1");
    let message = c.wait_refusal("unplugged").expect("the start is refused");
    assert!(
        message.contains("device 1 of devinject.io/demo was granted but is gone"),
        "{message}"
    );
}

/// Device health in the pod's status (KEP-4680, beta and on by default in 1.36): a running pod
/// holds one device; the device's node goes away, the plugin reports it Unhealthy over
/// ListAndWatch, and the kubelet puts that into the holder's
/// `status.containerStatuses[].allocatedResourcesStatus`. 1.20 has no such field, and the test
/// wants it absent there.
#[test]
fn a_device_gone_unhealthy_shows_in_the_status_of_the_pod_holding_it() {
    if !ready() {
        return;
    }
    let (_one, c) = start();
    let hold = vec!["/bin/sleep".to_owned(), "600".to_owned()];
    c.apply(&pod("holder", &hold, 1, &[], 0))
        .expect("create pod");
    c.wait_pod("holder", "Running", |p| {
        (p["status"]["phase"] == "Running").then_some(())
    })
    .expect("the pod runs");
    let uid = c.pod("holder").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = c.allocated(&uid, "main", "devinject.io/demo").unwrap();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = &ids[0];
    let (name, _, _) = ACCELS[id.parse::<usize>().expect("a numeric id")];
    std::fs::remove_file(c.host().dev_root.join("demo").join(name)).expect("unplug it");

    let statuses =
        |p: &Value| p["status"]["containerStatuses"][0]["allocatedResourcesStatus"].clone();
    if c.kubernetes().minor() >= 36 {
        let status = c
            .wait_pod("holder", "its device Unhealthy in its status", |p| {
                let s = statuses(p);
                let unhealthy = s.as_array()?.iter().any(|r| {
                    r["name"] == "devinject.io/demo"
                        && r["resources"].as_array().is_some_and(|rs| {
                            rs.iter().any(|x| {
                                x["resourceID"] == id.as_str() && x["health"] == "Unhealthy"
                            })
                        })
                });
                unhealthy.then_some(s)
            })
            .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
        println!(
            "$ kubectl get pod holder -o jsonpath='{{.status.containerStatuses[0].allocatedResourcesStatus}}'\n{status}"
        );
    } else {
        // Give the kubelet the time it would need, then look.
        std::thread::sleep(Duration::from_secs(10));
        let pod = c.pod("holder").unwrap();
        assert!(statuses(&pod).is_null(), "{pod}");
    }
}
