//! Dynamic Resource Allocation end to end on a real cluster ([`devinject_tests::cluster`],
//! [`Setup::Dra`]): Kubernetes 1.37's control plane, scheduler and kubelet, containerd 2 with CDI
//! on and nothing of devinject's in the runtime, and `devinject-dra` as the node's DRA driver
//! (registered through the kubelet's plugin registry, its ResourceSlices published through the
//! API server). Pods name no RuntimeClass and run on plain runc.
//!
//! - the driver's ResourceSlice lists the node's demo devices, in the pool `<node>/demo`;
//! - a pod whose ResourceClaimTemplate asks for one device of the shipped DeviceClass is
//!   scheduled by the real scheduler, and sees exactly the device the claim's allocation names
//!   (probe), the control node and the library read-only and in the linker cache; the claim's
//!   transient CDI spec is on the node while the pod runs and gone once it is deleted;
//! - two pods holding a claim each at the same time get different devices;
//! - a claim for more devices than the node has leaves its pod Pending, unschedulable;
//! - a pod that holds no claim and sets the request variable itself gets nothing;
//! - a device unplugged leaves the slice (the publisher rescans on the directory's event) and no claim is
//!   allocated to it; plugged in again, it is published and allocated again;
//! - the same claims on a CRI-O 1.36 node, CDI on;
//! - a pod asking for `devinject.io/demo` in its limits, as for the device plugin, is served
//!   through DRA unchanged (the DeviceClass's `extendedResourceName`, KEP-5004); on a node where
//!   the device plugin advertises the resource, the same pod is left to the plugin (no claim,
//!   nothing prepared), the driver taints the device it holds `<driver>/device-plugin` (read
//!   from the kubelet's pod-resources), and a claim pinned to that device waits unschedulable
//!   until the pod ends, then gets it through DRA; while that claim holds it, the plugin
//!   lists it unhealthy, so a pod asking the plugin for every device waits until the claim's
//!   pod ends, then gets them all; the profile then made shared (`[capacity]`), a claim for a
//!   device that pod holds gets a share of it and runs beside it;
//! - a node with one device moved from the device plugin to DRA and back while its pods run:
//!   the plugin's pod keeps the device, a limits pod and a claim wait for it and get it in
//!   turn, the plugin back beside a claim offers it to no one, and the pods, each opening the
//!   device every 100 ms, never hold it at once;
//! - the shipped kvm, tun and fuse profiles: one pod holding a claim of each opens the machine's
//!   real `/dev/kvm`, `/dev/net/tun` and `/dev/fuse` (nodes with their numbers) and nothing else;
//!   user-namespaced pods (`hostUsers: false`), as root and as uid 1000, open each through
//!   their claims (kvm only its group may use), and one with no claim that sets the request
//!   variable gets nothing; the same user-namespaced pods on the CRI-O node;
//! - a claim's opaque `function` parameter is loaded into exactly its device by the profile's
//!   prepare step before the pod starts; a function whose program fails keeps the pod from
//!   starting, with the program's message in the pod's events; while one claim's program
//!   hangs (until the kubelet's 45 s deadline for the call), another claim on the node is
//!   prepared and its pod runs, the hanging program still in its first run;
//! - an admin-access claim (KEP-5018, in a namespace marked for it) gets the device another
//!   pod's claim holds, and no other;
//! - the driver SIGKILLed while a pod holds a prepared claim: started again, it registers again,
//!   and the pod's deletion still removes exactly that claim's spec (its checkpoint); the
//!   kubelet restarted under the running driver (it deletes its node's ResourceSlices): the
//!   driver publishes them again and a new claim is allocated within seconds; the node's CDI
//!   directory emptied under two running claimed pods: the driver puts their specs back as
//!   they were, and a SIGKILLed container of one starts again with its device;
//! - a profile's sysfs attributes (`discovery.attributes_sysfs`) are in the slice, and a claim
//!   whose CEL selector names one device's value gets that device; a device whose sysfs health
//!   turns bad stays in the slice with a `NoSchedule` taint, the pod holding it keeps running and
//!   shows it Unhealthy in its status (the health stream, KEP-4680), a new claim for a tainted
//!   device waits unschedulable unless it tolerates the taint, and all follow the recovery;
//! - a `DeviceTaintRule` made after the scheduler allocated two claims (the kubelet stopped
//!   meanwhile) keeps its devices from the claim that does not tolerate its taint, the rule
//!   named in the pod's event, while the tolerating claim's pod runs; deleted, it is let go;
//! - a profile sharing its one device twice (`replicas = 2`) publishes two devices, two pods'
//!   claims hold one share each and both see the device, a third pod waits unschedulable; the
//!   profile then sharing it by a fractional capacity (`value = 1`, `step = 0.25`) publishes it
//!   once in thousandths, and claims of a half and two quarters (the default) hold it at once
//!   while a fourth waits, each consuming what it asked for;
//! - a profile cutting its ten devices in halves and quarters (`[partitions]`) publishes them
//!   whole and in parts with their shared counters, a pool of four slices (two of counters, two
//!   of devices: more than one slice holds of each); claims that would overlap are never both
//!   allocated, in any order (whole then half, halves then whole, quarters filling a half, and
//!   on the last device, in the pool's second slices, a quarter then whole), and each
//!   partition's container sees its device alone and is told its units; on 1.34 (counters
//!   dropped) the devices are published whole only;
//! - beside `devinject-nri` under the `kubernetes` policy: a claim holder gets exactly its device,
//!   and one that also sets the request variable, like a pod with no claim that does, is refused
//!   (the kubelet granted it no device-plugin device; its claim is reported apart, KEP-3695).
//!
//! Needs root, runc, openssl, unshare, nsenter, Kubernetes >= 1.34 (scripts/kube-module-build.sh)
//! and containerd 2 (scripts/runtimes-fetch.sh); skipped otherwise, a failure under CI. One
//! cluster at a time: the kubelets would share the `kubepods` cgroups.

use std::path::PathBuf;
use std::sync::Mutex;

use devinject_tests::cluster::dra::{
    add_hanging_function, claim_template, demo_claim_template, device_class, ready_for_dra,
    DEMO_CLASS,
};
use devinject_tests::cluster::userns::{assert_user_namespaced, machine_node, WHO_AM_I};
use devinject_tests::cluster::{
    user_namespaced, user_namespaced_pods_ready, Cluster, DraBeside, Kubernetes, NodeHost, Setup,
    Shape, DRA_DRIVER, SLOW,
};
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::daemons::poll;
use devinject_tests::probe::Report;
use devinject_tests::runtimes::Release;
use devinject_tests::scrape;
use devinject_tests::sim::{
    assert_demo_granted_exactly, demo_host_with_accels, demo_probe_args, without_partitions,
    ACCELS, CTL, LIB,
};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// containerd 2 and a Kubernetes release with DRA GA.
fn ready() -> Option<Release> {
    ready_for_dra()
}

/// [`ready`], and CRI-O 1.36 (scripts/crio-build.sh): its bin dir.
fn ready_crio() -> Option<(Release, PathBuf)> {
    let release = ready()?;
    let crio = devinject_tests::crio::ready()?;
    Some((release, crio))
}

/// A cluster on DRA whose node runs containerd from `release`, or CRI-O from `crio`, with the
/// shipped DeviceClasses applied.
fn start(release: &Release, crio: Option<PathBuf>) -> Cluster {
    start_beside(
        release,
        DraBeside::Nothing,
        Shape {
            crio,
            ..Shape::default()
        },
    )
}

/// A cluster on DRA of `shape` on containerd from `release`, with `beside` serving beside the
/// driver and the shipped DeviceClasses applied.
/// Rewrites the node's demo profile with `edit` and restarts the driver, which reads its profiles
/// when it starts.
fn edit_demo_profile(c: &mut Cluster, edit: impl FnOnce(String) -> String) {
    let profile = c.host().profiles_dir.join("demo.toml");
    let text = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(&profile, edit(text)).unwrap();
    c.restart_dra_plugin()
        .unwrap_or_else(|e| panic!("restart the driver: {e:#}"));
}

fn start_beside(release: &Release, beside: DraBeside, shape: Shape) -> Cluster {
    let c = Cluster::start_shaped(
        Setup::Dra {
            containerd: release.bin.clone(),
            beside,
        },
        &shape,
    )
    .unwrap_or_else(|e| panic!("cluster: {e:#}"));
    c.apply_dra_device_classes().expect("the DeviceClasses");
    c
}

/// A pod on the default runtime running the demo probe and then sleeping (so its claim stays
/// prepared until the test deletes it), its one container holding the claim made from
/// `template`.
fn pod(name: &str, template: &str) -> String {
    pod_holding(name, &[("demo", template)], &demo_probe_args())
}

/// A pod on the default runtime running the probe `probe` (its arguments), printing the device
/// metadata of its claims' request `dev` (one JSON line each, where the driver mounted it), and
/// then sleeping, its one container holding a claim per `(claim name, template)` of `claims`.
fn pod_holding(name: &str, claims: &[(&str, &str)], probe: &[String]) -> String {
    pod_holding_after(name, claims, probe, "true")
}

/// [`pod_holding`], its container running the shell line `first` before the probe.
fn pod_holding_after(name: &str, claims: &[(&str, &str)], probe: &[String], first: &str) -> String {
    let probe = probe
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let metadata: String = claims
        .iter()
        .map(|(claim, _)| {
            format!(
                " cat /var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/{claim}/dev/{DRA_DRIVER}-metadata.json 2>/dev/null;"
            )
        })
        .collect();
    let command = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        format!("{first}; {probe};{metadata} echo probe-done; exec sleep 3600"),
    ];
    let (mut pod_claims, mut refs) = (String::new(), String::new());
    for (claim, template) in claims {
        pod_claims += &format!("  - name: {claim}\n    resourceClaimTemplateName: {template}\n");
        refs += &format!("      - name: {claim}\n");
    }
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         restartPolicy: Never\n  automountServiceAccountToken: false\n  \
         terminationGracePeriodSeconds: 0\n  resourceClaims:\n{pod_claims}  containers:\n  \
         - name: main\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    command: {command}\n    \
         resources:\n      claims:\n{refs}",
        command = serde_json::to_string(&command).expect("json"),
    )
}

/// A pod on the default runtime with no claim, setting the demo profile's request variable.
fn forger(name: &str) -> String {
    pod(name, "unused")
        .replace(
            "  resourceClaims:\n  - name: demo\n    resourceClaimTemplateName: unused\n",
            "",
        )
        .replace(
            "    resources:\n      claims:\n      - name: demo\n",
            "    env: [{name: DEMO_VISIBLE_DEVICES, value: all}]\n",
        )
}

/// Asserts that the probe's container saw no demo device, control node or library.
fn assert_demo_granted_nothing(report: &Report, out: &str) {
    for (name, _, _) in ACCELS.iter().chain(std::iter::once(&CTL)) {
        assert_eq!(
            report.node(&format!("/dev/demo/{name}")).kind,
            "missing",
            "{name} without a claim:\n{out}"
        );
    }
    assert!(
        !report.lib(LIB).present,
        "the library without a claim:\n{out}"
    );
}

/// Waits until pod `name` has run the probe; its output.
fn probe_output(c: &Cluster, name: &str) -> String {
    poll(
        &format!("pod {name} to run the probe"),
        devinject_tests::cluster::SLOW,
        || {
            let out = c.container_log(name, "main").unwrap_or_default();
            Ok(out.contains("probe-done").then_some(out))
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()))
}

/// The claim pod `name` holds (made from its template): its JSON.
fn claim_of(c: &Cluster, name: &str) -> Value {
    pod_claim(c, name, None)
}

/// The claim of pod `name` made for its `resourceClaims` entry `entry` (the first without):
/// its JSON.
fn pod_claim(c: &Cluster, name: &str, entry: Option<&str>) -> Value {
    let pod = c.pod(name).expect("pod");
    let claim = pod["status"]["resourceClaimStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| entry.is_none_or(|e| s["name"] == e))
        .and_then(|s| s["resourceClaimName"].as_str())
        .unwrap_or_else(|| panic!("pod {name} names no claim {entry:?}: {pod}"))
        .to_owned();
    serde_json::from_str(
        &c.kubectl(&["get", "resourceclaim", &claim, "-o", "json"])
            .expect("get the claim"),
    )
    .expect("claim JSON")
}

/// The demo device ids the claim's allocation names (DRA device `demo-<id>`).
fn allocated_ids(claim: &Value) -> Vec<String> {
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["driver"] == DRA_DRIVER)
        .map(|r| {
            r["device"]
                .as_str()
                .and_then(|d| d.strip_prefix("demo-"))
                .unwrap_or_else(|| panic!("a demo device: {r}"))
                .to_owned()
        })
        .collect()
}

/// The transient spec file of `claim` on the node.
fn spec_file(c: &Cluster, claim: &Value) -> PathBuf {
    let uid = claim["metadata"]["uid"].as_str().expect("uid");
    c.cdi_spec_dir()
        .join(format!("k8s.{DRA_DRIVER}-demo_{uid}.json"))
}

fn delete_pod(c: &Cluster, name: &str) {
    c.kubectl(&["delete", "pod", name, "--wait=true", "--timeout=120s"])
        .expect("delete pod");
}

fn wait_gone(c: &Cluster, file: &std::path::Path) {
    poll(
        &format!("{} to be removed", file.display()),
        devinject_tests::cluster::SLOW,
        || Ok((!file.exists()).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
}

#[test]
fn claims_get_exactly_their_allocated_devices_through_a_transient_cdi_spec() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    claims_get_exactly_their_devices(&start(&release, None));
}

#[test]
fn on_crio_claims_get_exactly_their_allocated_devices_through_a_transient_cdi_spec() {
    let Some((release, crio)) = ready_crio() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start(&release, Some(crio));
    let nodes = c
        .kubectl(&["get", "nodes", "-o", "wide"])
        .unwrap_or_default();
    assert!(nodes.contains("cri-o://"), "the node runs CRI-O:\n{nodes}");
    claims_get_exactly_their_devices(&c);
    // User-namespaced pods holding claims on the machine's kvm, tun and fuse open them, as
    // root and as uid 1000, and a forger among them gets nothing.
    if user_namespaced_pods_ready() {
        let KernelDevices { claims, numbers } = serve_kernel_devices(&mut c);
        let templates: Vec<(&str, &str)> = claims.iter().map(|(p, t)| (*p, t.as_str())).collect();
        user_namespaced_pods_open_the_kernel_devices(&c, &templates, &numbers);
    }
}

/// The scenario of the module's first points on the running cluster `c`.
fn claims_get_exactly_their_devices(c: &Cluster) {
    // The slice lists every demo device of the node, in the node's pool.
    let mut devices = c.resource_slice_devices().expect("slices");
    devices.sort();
    let want: Vec<(String, String)> = (0..ACCELS.len())
        .map(|i| (format!("{}/demo", c.node().name()), format!("demo-{i}")))
        .collect();
    assert_eq!(devices, want);
    println!(
        "$ kubectl get resourceslices\n{}",
        c.kubectl(&["get", "resourceslices"]).unwrap_or_default()
    );

    c.apply(&demo_claim_template("one-demo", 1))
        .expect("template");
    c.apply(&pod("first", "one-demo")).expect("create pod");
    c.apply(&pod("second", "one-demo")).expect("create pod");
    let first = probe_output(c, "first");
    let second = probe_output(c, "second");
    let (claim1, claim2) = (claim_of(c, "first"), claim_of(c, "second"));
    let (ids1, ids2) = (allocated_ids(&claim1), allocated_ids(&claim2));
    assert_eq!((ids1.len(), ids2.len()), (1, 1), "{claim1}\n{claim2}");
    assert_ne!(ids1, ids2, "two pods, one exclusive device");
    assert_demo_granted_exactly(&Report::parse(&first), &ids1, &first);
    assert_demo_granted_exactly(&Report::parse(&second), &ids2, &second);
    // The device metadata in the container (KEP-5304): the claim's request and its device
    // with the slice's attributes, found by the pod's own name for the claim.
    let metadata: Value = first
        .lines()
        .find(|l| l.starts_with("{\"apiVersion\":\"metadata.resource.k8s.io/"))
        .map(|l| serde_json::from_str(l).expect("metadata JSON"))
        .unwrap_or_else(|| panic!("no device metadata in the container:\n{first}"));
    assert_eq!(metadata["kind"], "DeviceMetadata", "{metadata}");
    assert_eq!(metadata["podClaimName"], "demo", "{metadata}");
    assert_eq!(
        metadata["metadata"]["uid"], claim1["metadata"]["uid"],
        "{metadata}"
    );
    let request = &metadata["requests"][0];
    assert_eq!(request["name"], "dev", "{metadata}");
    let device = &request["devices"][0];
    assert_eq!(device["driver"], DRA_DRIVER, "{metadata}");
    assert_eq!(device["name"], format!("demo-{}", ids1[0]), "{metadata}");
    assert_eq!(device["attributes"]["id"]["string"], ids1[0], "{metadata}");
    println!(
        "$ kubectl get resourceclaims\n{}",
        c.kubectl(&["get", "resourceclaims"]).unwrap_or_default()
    );

    // The claim's spec is there while the pod runs, and only its devices are in it.
    let spec1 = spec_file(c, &claim1);
    let text = std::fs::read_to_string(&spec1)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", spec1.display(), c.logs()));
    let spec: Value = serde_json::from_str(&text).expect("spec JSON");
    assert_eq!(spec["kind"], format!("k8s.{DRA_DRIVER}/demo"), "{text}");
    assert_eq!(spec["devices"].as_array().map(Vec::len), Some(1), "{text}");

    // More devices than the node has: the scheduler leaves the pod Pending.
    c.apply(&demo_claim_template("too-many", ACCELS.len() as u32 + 1))
        .expect("template");
    c.apply(&pod("greedy", "too-many")).expect("create pod");
    let why = unschedulable(c, "greedy").expect("the greedy pod stays unschedulable");
    assert_eq!(
        c.pod("greedy").unwrap()["status"]["phase"],
        "Pending",
        "{why}"
    );

    // A pod that holds no claim and sets the demo profile's request variable itself gets
    // nothing: no device reaches a container but through its claim.
    c.apply(&forger("forger")).expect("create pod");
    let out = probe_output(c, "forger");
    assert_demo_granted_nothing(&Report::parse(&out), &out);

    // Deleting the pod unprepares its claim: its spec goes, the other pod's stays.
    delete_pod(c, "first");
    wait_gone(c, &spec1);
    assert!(
        spec_file(c, &claim2).exists(),
        "the second pod's spec stays"
    );

    // The driver's /metrics, scraped over TCP: the devices it publishes, both claims prepared
    // and timed, the first one unprepared (counted once its answer is made, just after its
    // spec went), its registration and its slice.
    let at_least = |text: &str, series: &str, want: f64| {
        scrape::value(text, series).is_some_and(|v| v >= want)
    };
    let text = poll(
        "devinject-dra's metrics",
        std::time::Duration::from_secs(10),
        || {
            let text = scrape::from_log(&c.dra_log())?;
            Ok(at_least(
                &text,
                "devinject_dra_claim_unprepares_total{outcome=\"unprepared\"}",
                1.0,
            )
            .then_some(text))
        },
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\n{}",
            scrape::from_log(&c.dra_log()).unwrap_or_default()
        )
    });
    assert_eq!(
        scrape::value(
            &text,
            "devinject_dra_devices{profile=\"demo\",health=\"healthy\"}"
        ),
        Some(ACCELS.len() as f64),
        "{text}"
    );
    for (series, want) in [
        (
            "devinject_dra_claim_prepares_total{outcome=\"prepared\"}",
            2.0,
        ),
        (
            "devinject_dra_prepare_duration_seconds_count{outcome=\"prepared\"}",
            2.0,
        ),
        (
            "devinject_dra_registrations_total{outcome=\"registered\"}",
            1.0,
        ),
        (
            "devinject_dra_resourceslice_applies_total{outcome=\"applied\"}",
            1.0,
        ),
    ] {
        assert!(at_least(&text, series, want), "{series} < {want}:\n{text}");
    }
}

#[test]
fn beside_nri_a_claim_gets_its_device_and_a_forged_request_is_refused() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let c = start_beside(&release, DraBeside::Nri, Shape::default());
    c.apply(&demo_claim_template("one-demo", 1))
        .expect("template");
    // The claim's spec carries no request variable: devinject-nri, asked about the container,
    // finds nothing to adjust and the pod gets exactly its claim's device.
    c.apply(&pod("holder", "one-demo")).expect("create pod");
    let out = probe_output(&c, "holder");
    let claim = claim_of(&c, "holder");
    assert_demo_granted_exactly(&Report::parse(&out), &allocated_ids(&claim), &out);
    // A claim holder asking for every device by the variable: the kubelet granted the
    // container no device-plugin device (its DRA claim is reported apart, KEP-3695), so the
    // request policy refuses the container rather than widening the claim.
    let greedy = pod("greedy", "one-demo").replace(
        "    resources:\n      claims:\n      - name: demo\n",
        "    env: [{name: DEMO_VISIBLE_DEVICES, value: all}]\n    resources:\n      claims:\n      - name: demo\n",
    );
    assert!(greedy.contains("DEMO_VISIBLE_DEVICES"), "{greedy}");
    c.apply(&greedy).expect("create pod");
    let refused = c
        .wait_refusal("greedy")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    eprintln!("greedy: {refused}");
    assert!(refused.contains("DEMO_VISIBLE_DEVICES"), "{refused}");
    // No claim at all: the same.
    c.apply(&forger("forger")).expect("create pod");
    let refused = c.wait_refusal("forger").expect("the forger is refused");
    assert!(refused.contains("DEMO_VISIBLE_DEVICES"), "{refused}");
    // Where the user looks: no device plugin runs on this node, so the DRA driver posts the
    // NRI plugin's refusal as an Event on the pod.
    let note = c
        .wait_pod_event("forger", "DeviceRequestRefused")
        .expect("the refusal is an Event on the pod");
    assert!(
        note.starts_with("devinject's NRI plugin refused to start the container: ")
            && note.contains("DEMO_VISIBLE_DEVICES"),
        "{note}"
    );
    for pod in ["greedy", "forger"] {
        assert_ne!(
            c.pod(pod).unwrap()["status"]["phase"],
            "Succeeded",
            "{pod} must not run"
        );
    }
}

#[test]
fn a_driver_killed_or_a_kubelet_restarted_under_it_keeps_claims_served() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start(&release, None);
    c.apply(&demo_claim_template("one-demo", 1))
        .expect("template");
    c.apply(&pod("held", "one-demo")).expect("create pod");
    let out = probe_output(&c, "held");
    let claim = claim_of(&c, "held");
    assert_demo_granted_exactly(&Report::parse(&out), &allocated_ids(&claim), &out);
    let spec = spec_file(&c, &claim);
    assert!(spec.exists(), "{}\n{}", spec.display(), c.logs());

    c.restart_dra_plugin()
        .unwrap_or_else(|e| panic!("restart the driver: {e:#}"));
    delete_pod(&c, "held");
    wait_gone(&c, &spec);

    // The restarted driver prepares new claims as before.
    c.apply(&pod("after", "one-demo")).expect("create pod");
    let out = probe_output(&c, "after");
    let claim = claim_of(&c, "after");
    assert_demo_granted_exactly(&Report::parse(&out), &allocated_ids(&claim), &out);

    // A restarting kubelet deletes its node's ResourceSlices: the driver, watching its own,
    // publishes them again (and again on the kubelet's registration), so a new claim is
    // allocated within seconds, not never.
    let registered = c
        .dra_log()
        .matches(devinject_dra::registration::REGISTERED)
        .count();
    let slices = c.dra_slice_uids().unwrap();
    let mut devices = c.resource_slice_devices().unwrap();
    devices.sort();
    assert!(!slices.is_empty(), "the driver published no slice");
    c.restart_kubelet()
        .unwrap_or_else(|e| panic!("restart the kubelet: {e:#}"));
    c.wait_node_ready()
        .unwrap_or_else(|e| panic!("node Ready again: {e:#}"));
    poll(
        "the restarted kubelet to register devinject-dra again",
        devinject_tests::cluster::SLOW,
        || {
            let log = c.dra_log();
            Ok(
                (log.matches(devinject_dra::registration::REGISTERED).count() > registered)
                    .then_some(()),
            )
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    let asked = std::time::Instant::now();
    // Restarted when its container is killed (below).
    c.apply(
        &pod("after-kubelet", "one-demo").replace("restartPolicy: Never", "restartPolicy: Always"),
    )
    .expect("create pod");
    let allocated = poll(
        "the claim of pod after-kubelet to be allocated",
        std::time::Duration::from_secs(20),
        || {
            let pod = c.pod("after-kubelet")?;
            let Some(name) =
                pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"].as_str()
            else {
                return Ok(None);
            };
            let claim: Value =
                serde_json::from_str(&c.kubectl(&["get", "resourceclaim", name, "-o", "json"])?)?;
            Ok(claim["status"]["allocation"]
                .is_object()
                .then(|| asked.elapsed()))
        },
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\nslices: {:?}\n{}",
            c.resource_slice_devices(),
            c.logs()
        )
    });
    eprintln!("a claim after the kubelet's restart was allocated in {allocated:?}");
    // What the API server holds: the slices the kubelet deleted are gone, and new ones (new
    // UIDs) publish the same devices.
    let again = c.dra_slice_uids().unwrap();
    let mut republished = c.resource_slice_devices().unwrap();
    republished.sort();
    assert!(
        !again.is_empty() && again.is_disjoint(&slices) && republished == devices,
        "the slices were not deleted and published again: {slices:?} before, {again:?} \
         after; devices {devices:?} before, {republished:?} after\n{}",
        c.dra_log()
    );
    let out = probe_output(&c, "after-kubelet");
    let claim = claim_of(&c, "after-kubelet");
    let ids = allocated_ids(&claim);
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);

    // The node's CDI directory emptied under the two running claimed pods (a tmpfs remounted,
    // a cleanup tool): the kubelet prepares nothing for a restarting container, so the driver
    // puts back the specs of the claims it prepared in this boot, as they were, and a killed
    // container of such a pod starts again with its device.
    let specs: Vec<(PathBuf, Vec<u8>)> = [&claim, &claim_of(&c, "after")]
        .into_iter()
        .map(|claim| {
            let file = spec_file(&c, claim);
            let text = std::fs::read(&file)
                .unwrap_or_else(|e| panic!("{}: {e}\n{}", file.display(), c.logs()));
            (file, text)
        })
        .collect();
    for entry in std::fs::read_dir(c.cdi_spec_dir()).expect("the CDI directory") {
        let path = entry.expect("an entry").path();
        if path.is_file() {
            std::fs::remove_file(&path).expect("remove a spec");
        }
    }
    for (file, text) in &specs {
        poll(
            &format!("{} to be put back", file.display()),
            std::time::Duration::from_secs(10),
            || {
                Ok(std::fs::read(file)
                    .is_ok_and(|now| now == *text)
                    .then_some(()))
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.dra_log()));
    }
    // The status may trail the container's log after the kubelet's restart.
    let container = c
        .wait_pod("after-kubelet", "its container id in its status", |p| {
            p["status"]["containerStatuses"][0]["containerID"]
                .as_str()
                .and_then(|id| id.strip_prefix("containerd://"))
                .map(str::to_owned)
        })
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    let mut kill = c.node_containerd().ctr();
    kill.args(["-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", &container]);
    devinject_tests::daemons::run_ok(kill).expect("kill the container");
    let out = poll(
        "the killed container of pod after-kubelet to start again and run the probe",
        devinject_tests::cluster::SLOW,
        || {
            let pod = c.pod("after-kubelet")?;
            let restarted = pod["status"]["containerStatuses"][0]["restartCount"]
                .as_u64()
                .unwrap_or_default()
                >= 1;
            let out = if restarted {
                c.container_log("after-kubelet", "main").unwrap_or_default()
            } else {
                String::new()
            };
            Ok(out.contains("probe-done").then_some(out))
        },
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\n{}\n{}",
            c.kubectl(&["describe", "pod", "after-kubelet"])
                .unwrap_or_default(),
            c.logs()
        )
    });
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
}

/// The DeviceTaintRule the taint-rule test makes: `example.com/maintenance=planned:NoSchedule`
/// on every device of the node's demo pool.
fn maintenance_rule(pool: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata:\n  name: maintenance\n\
         spec:\n  deviceSelector:\n    driver: {DRA_DRIVER}\n    pool: {pool}\n  taint:\n    \
         key: example.com/maintenance\n    value: planned\n    effect: NoSchedule\n"
    )
}

/// Waits, as `what`, until the driver logs a change of the DeviceTaintRules it honours whose
/// line holds `needle`.
fn wait_rules_logged(c: &Cluster, what: &str, needle: &str) {
    poll(what, SLOW, || {
        Ok(c.dra_log()
            .lines()
            .any(|l| l.contains("DeviceTaintRules selecting") && l.contains(needle))
            .then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.dra_log()));
}

#[test]
fn a_taint_rule_made_after_allocation_keeps_its_devices_from_claims_that_do_not_tolerate_it() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start(&release, None);
    if c.kubernetes().minor() < 37 {
        // Before 1.37 no v1 DeviceTaintRule is served: the driver says so and goes on.
        poll(
            "the driver to say it honours no DeviceTaintRule",
            SLOW,
            || {
                Ok(c.dra_log()
                    .contains("serves no resource.k8s.io/v1 DeviceTaintRule")
                    .then_some(()))
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.dra_log()));
        return;
    }
    c.apply(&demo_claim_template("one-demo", 1))
        .expect("template");
    let tolerating = demo_claim_template("tolerating-demo", 1)
        + "          tolerations:\n          - key: example.com/maintenance\n            \
           operator: Exists\n";
    c.apply(&tolerating).expect("template");
    // With the kubelet stopped, the scheduler allocates both claims and binds the pods, and
    // nothing is prepared: the window in which a rule made now reaches the node only through
    // the driver (the scheduler itself keeps a tainted device from new allocations).
    c.stop_kubelet();
    c.apply(&pod("intolerant", "one-demo")).expect("create pod");
    c.apply(&pod("tolerant", "tolerating-demo"))
        .expect("create pod");
    let allocated = |name: &str| {
        poll(
            &format!("the claim of pod {name} to be allocated"),
            SLOW,
            || {
                let made = c.pod(name)?["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
                    .is_string();
                Ok(made
                    .then(|| claim_of(&c, name))
                    .filter(|claim| claim["status"]["allocation"].is_object()))
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()))
    };
    let (intolerant, tolerant) = (allocated("intolerant"), allocated("tolerant"));
    let pool = intolerant["status"]["allocation"]["devices"]["results"][0]["pool"]
        .as_str()
        .expect("the allocated pool")
        .to_owned();
    c.apply(&maintenance_rule(&pool))
        .expect("the DeviceTaintRule");
    wait_rules_logged(&c, "the driver to see the DeviceTaintRule", "maintenance");
    c.start_kubelet_again()
        .unwrap_or_else(|e| panic!("start the kubelet again: {e:#}"));

    // The claim that tolerates the taint is prepared; the other is refused, with the rule named.
    let out = probe_output(&c, "tolerant");
    assert_demo_granted_exactly(&Report::parse(&out), &allocated_ids(&tolerant), &out);
    let refused = c
        .wait_pod_event("intolerant", "FailedPrepareDynamicResources")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    assert!(
        refused.contains("DeviceTaintRule maintenance")
            && refused.contains("example.com/maintenance=planned:NoSchedule"),
        "{refused}"
    );
    assert!(!pod_running(&c, "intolerant"), "{}", c.logs());
    // The rule deleted, the driver lets it go: the kubelet's next try prepares the claim (at
    // its pod resync, a minute or more later: the driver's unit tests show the claim prepared).
    c.kubectl(&["delete", "devicetaintrule", "maintenance"])
        .expect("delete the DeviceTaintRule");
    wait_rules_logged(&c, "the driver to let the DeviceTaintRule go", "rules=[]");
}

#[test]
fn an_unplugged_device_leaves_the_slice_and_no_claim_is_allocated_to_it() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let c = start(&release, None);
    let (last, major, minor) = ACCELS[ACCELS.len() - 1];
    let node = c.host().dev_root.join("demo").join(last);
    std::fs::remove_file(&node).expect("unplug");
    let unplugged = std::time::Instant::now();
    c.wait_resource_slices(ACCELS.len() - 1)
        .unwrap_or_else(|e| panic!("the slice follows the unplug: {e:#}"));
    println!("the slice withdrew {last} within {:?}", unplugged.elapsed());

    // All the node has left, and not one more: the scheduler allocates from the slice.
    let left = ACCELS.len() as u32 - 1;
    c.apply(&demo_claim_template("all-left", left))
        .expect("template");
    c.apply(&pod("rest", "all-left")).expect("create pod");
    let out = probe_output(&c, "rest");
    let ids = allocated_ids(&claim_of(&c, "rest"));
    let want: Vec<String> = (0..ACCELS.len() - 1).map(|i| i.to_string()).collect();
    assert_eq!(sorted(ids.clone()), want, "never the unplugged device");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);

    // Plugged in again, it is published again and allocated to the next claim.
    devinject_tests::sim::mknod(&node, major, minor, "0666").expect("replug");
    c.wait_resource_slices(ACCELS.len())
        .unwrap_or_else(|e| panic!("the slice follows the replug: {e:#}"));
    c.apply(&demo_claim_template("one-demo", 1))
        .expect("template");
    c.apply(&pod("replugged", "one-demo")).expect("create pod");
    let out = probe_output(&c, "replugged");
    let ids = allocated_ids(&claim_of(&c, "replugged"));
    assert_eq!(
        ids,
        vec![(ACCELS.len() - 1).to_string()],
        "the replugged device"
    );
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
}

#[test]
fn a_shared_profile_lets_claims_hold_one_device_by_replicas_or_by_a_fractional_capacity() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    // Fractional ranges are beta in 1.37 but on only with the control plane's
    // `--min-compatibility-version` at 1.37 (pkg/features/kube_features.go): turned on here.
    let fractional = Kubernetes::find().is_some_and(|k| k.minor() >= 37);
    let mut c = start_beside(
        &release,
        DraBeside::Nothing,
        Shape {
            devices: 1,
            control_plane_gates: if fractional { FRACTIONAL_GATE } else { "" },
            ..Shape::default()
        },
    );
    // The demo profile shares its one device twice.
    edit_demo_profile(&mut c, |text| {
        format!("replicas = 2\n{}", without_partitions(&text))
    });
    c.wait_resource_slices(2)
        .unwrap_or_else(|e| panic!("a device per share: {e:#}"));
    let mut names: Vec<String> = c
        .resource_slice_devices()
        .unwrap()
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    names.sort();
    assert_eq!(names, ["demo-0--0", "demo-0--1"]);

    c.apply(&demo_claim_template("one-demo", 1))
        .expect("template");
    let mut shares = Vec::new();
    for name in ["share-a", "share-b"] {
        c.apply(&pod(name, "one-demo")).expect("create pod");
        let out = probe_output(&c, name);
        let ids = allocated_ids(&claim_of(&c, name));
        assert_eq!(ids.len(), 1, "{ids:?}");
        // The share stands for device 0, which the pod sees, and nothing else.
        assert_demo_granted_exactly(&Report::parse(&out), &["0".to_owned()], &out);
        shares.extend(ids);
    }
    assert_eq!(sorted(shares), ["0--0", "0--1"], "one share each");
    // Both shares held: a third claim waits.
    c.apply(&pod("share-c", "one-demo")).expect("create pod");
    let why = unschedulable(&c, "share-c").expect("the third pod stays unschedulable");
    eprintln!("share-c: {why}");
    for name in ["share-a", "share-b", "share-c"] {
        delete_pod(&c, name);
    }
    if fractional {
        the_device_is_shared_by_a_fractional_capacity(&mut c);
    }
}

/// The feature gate of fractional capacity ranges (KEP-5075), for the API server and the
/// scheduler.
const FRACTIONAL_GATE: &str = "DRAFractionalCapacityRange=true";

/// The one demo device shared by a capacity of one unit in quarters (Kubernetes 1.37's
/// fractional ranges, [`FRACTIONAL_GATE`] on; without it the scheduler rounds each amount up to
/// a whole unit, and the half claim alone fills the device): published once, the amounts in
/// thousandths as the API server keeps them and the slice not applied again; a claim asking
/// for half and two asking for nothing (a quarter each) hold it at once and see it, each
/// consuming what it took, and a fourth waits.
fn the_device_is_shared_by_a_fractional_capacity(c: &mut Cluster) {
    edit_demo_profile(c, |text| {
        without_partitions(&text).replace("replicas = 2\n", "")
            + "\n[capacity.share]\nvalue = 1\nstep = 0.25\n"
    });
    c.wait_resource_slices(1)
        .unwrap_or_else(|e| panic!("the device once: {e:#}"));
    let device = c
        .resource_slice_device("demo-0")
        .expect("the slices")
        .expect("demo-0 in a slice");
    assert_eq!(device["allowMultipleAllocations"], true, "{device}");
    let share = &device["capacity"]["share"];
    assert_eq!(share["value"], "1", "{device}");
    assert_eq!(share["requestPolicy"]["default"], "250m", "{device}");
    assert_eq!(
        share["requestPolicy"]["validRange"]["min"], "250m",
        "{device}"
    );
    assert_eq!(
        share["requestPolicy"]["validRange"]["step"], "250m",
        "{device}"
    );
    // What the server wrote back compares equal to what the driver applied: a round of
    // discovery (an entry made beside the device nodes, which it reads on the directory's
    // event) finds nothing changed and writes nothing. Amounts written otherwise than the
    // server writes them back (`1000m` for `1`) would be applied again at every round.
    let resource_version = |c: &Cluster| {
        let list = c.kubectl(&["get", "resourceslices", "-o", "json"]).unwrap();
        let list: Value = serde_json::from_str(&list).unwrap();
        list["items"][0]["metadata"]["resourceVersion"].clone()
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let before = resource_version(c);
    std::fs::write(c.host().dev_root.join("demo/README"), "not a device\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        resource_version(c),
        before,
        "the slice is applied again:\n{}",
        c.dra_log()
    );

    let half = demo_claim_template("half-demo", 1).replace(
        "          count: 1\n",
        "          count: 1\n          capacity:\n            requests:\n              share: \"0.5\"\n",
    );
    c.apply(&half).expect("template");
    c.apply(&demo_claim_template("quarter-demo", 1))
        .expect("template");
    let mut consumed = Vec::new();
    for (name, template) in [
        ("half", "half-demo"),
        ("quarter-a", "quarter-demo"),
        ("quarter-b", "quarter-demo"),
    ] {
        c.apply(&pod(name, template)).expect("create pod");
        let out = probe_output(c, name);
        assert_demo_granted_exactly(&Report::parse(&out), &["0".to_owned()], &out);
        let claim = claim_of(c, name);
        let result = &claim["status"]["allocation"]["devices"]["results"][0];
        assert_eq!(result["device"], "demo-0", "{claim}");
        assert!(result["shareID"].is_string(), "{claim}");
        consumed.push(result["consumedCapacity"]["share"].clone());
    }
    assert_eq!(consumed, ["500m", "250m", "250m"], "what each claim took");
    // The device is used up: a fourth quarter waits.
    c.apply(&pod("quarter-c", "quarter-demo"))
        .expect("create pod");
    let why = unschedulable(c, "quarter-c").expect("the fourth claim waits");
    eprintln!("quarter-c: {why}");
}

/// The demo devices of the partitions test's node: more than one counters' slice holds
/// (eight sets), and published whole, in halves and in quarters (7 each), more than one
/// devices' slice holds (64), so the pool is two slices of each.
const PARTITIONED_ACCELS: usize = 10;

/// A ResourceClaimTemplate `name` asking for one device of DeviceClass `class` that is demo
/// device `id` (whole or a partition of it) and, with `shape`, a partition of that shape.
fn pinned_template(name: &str, class: &str, id: &str, shape: Option<&str>) -> String {
    let attr = |a: &str| format!("device.attributes[\"{DRA_DRIVER}\"].{a}");
    let shape = shape
        .map(|shape| format!(" && {} == \"{shape}\"", attr("partition")))
        .unwrap_or_default();
    claim_template(name, class, 1).replace(
        "          count: 1\n",
        &format!(
            "          count: 1\n          selectors:\n          - cel:\n              \
             expression: '{} == \"{id}\"{shape}'\n",
            attr("id")
        ),
    )
}

/// A ResourceClaimTemplate `name` asking for one partition of shape `shape` of demo device
/// `id`.
fn partition_template(name: &str, id: &str, shape: &str) -> String {
    pinned_template(
        name,
        &format!("partition.{}", device_class("demo")),
        id,
        Some(shape),
    )
}

/// [`pod`] printing also the partition its container was told (`partition=<units>`) and the
/// demo nodes it has (`nodes=<names>`).
fn partition_pod(name: &str, template: &str) -> String {
    pod(name, template).replace(
        "echo probe-done",
        "echo partition=$DEMO_PARTITION; echo nodes=$(ls /dev/demo); echo probe-done",
    )
}

/// The demo nodes partition pod output `out` lists (`nodes=`).
fn demo_nodes(out: &str) -> &str {
    out.lines()
        .find_map(|l| l.strip_prefix("nodes="))
        .unwrap_or_else(|| panic!("the pod listed its nodes:\n{out}"))
}

/// The units (first, last) the partition pod `name` was told it holds; `None` for a whole
/// device (no variable).
fn told_units(out: &str) -> Option<(u32, u32)> {
    let told = out
        .lines()
        .find_map(|l| l.strip_prefix("partition="))
        .expect("the pod printed its partition");
    let (first, last) = told.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// Runs partition pod `name` of `template`: asserts it sees demo device `id` and nothing else,
/// and that its allocation is a device of `shape` (`demo-<id>-<shape><n>`); the units it was
/// told.
fn run_partition(c: &Cluster, name: &str, template: &str, id: &str, shape: &str) -> (u32, u32) {
    c.apply(&partition_pod(name, template)).expect("create pod");
    let out = probe_output(c, name);
    let ids = allocated_ids(&claim_of(c, name));
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert!(
        ids[0].starts_with(&format!("{id}-{shape}")),
        "a {shape} of {id}: {ids:?}"
    );
    assert_demo_granted_exactly(&Report::parse(&out), &[id.to_owned()], &out);
    assert_eq!(demo_nodes(&out), format!("accel{id} ctl"), "{name}");
    let units = told_units(&out).unwrap_or_else(|| panic!("{name} told no units:\n{out}"));
    assert_eq!(
        units.1 - units.0 + 1,
        if shape == "half" { 2 } else { 1 },
        "{name}: {units:?}"
    );
    println!("{name} holds {} and was told units {units:?}", ids[0]);
    units
}

#[test]
fn partitions_of_one_device_are_never_allocated_overlapping() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let c = start_beside(
        &release,
        DraBeside::Nothing,
        Shape {
            node_host: Some(NodeHost {
                make: |dir| demo_host_with_accels(dir, PARTITIONED_ACCELS),
                image: |_| Ok(()),
            }),
            dra_devices: Some(PARTITIONED_ACCELS),
            ..Shape::default()
        },
    );
    // The shipped demo profile cuts its devices in halves and quarters, and the partition
    // class comes with it. The claims name device 0, which the test fills and empties.
    c.apply(&pinned_template("whole", DEMO_CLASS, "0", None))
        .expect("template");
    if c.kubernetes().minor() < 36 {
        // The API server drops counters (DRAPartitionableDevices off): whole devices only.
        c.wait_resource_slices(PARTITIONED_ACCELS)
            .unwrap_or_else(|e| panic!("the whole device alone: {e:#}"));
        let log = c.dra_log();
        assert!(
            log.lines()
                .any(|l| l.contains("the API server drops fields")
                    && l.contains("DRAPartitionableDevices")),
            "the driver found the counters dropped:\n{log}"
        );
        // And the pool is one slice again: the counters' slice is deleted.
        poll(
            "the counters' slice deleted",
            devinject_tests::cluster::SLOW,
            || {
                let names = c.kubectl(&["get", "resourceslices", "-o", "name"])?;
                Ok((!names.contains("-demo-counters-")).then_some(()))
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.dra_log()));
        c.apply(&pod("whole-a", "whole")).expect("create pod");
        let out = probe_output(&c, "whole-a");
        assert_eq!(allocated_ids(&claim_of(&c, "whole-a")), ["0"]);
        assert_demo_granted_exactly(&Report::parse(&out), &["0".to_owned()], &out);
        return;
    }
    // The devices whole, in halves and in quarters: a pool of two counters' slices (8 + 2
    // sets) and two devices' (64 + 6), each naming four.
    let mut slices = Value::Null;
    poll("the partitioned pool's four slices", SLOW, || {
        slices = serde_json::from_str(&c.kubectl(&["get", "resourceslices", "-o", "json"])?)?;
        let mut pool: Vec<(usize, usize, i64)> = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["spec"]["driver"] == DRA_DRIVER)
            .map(|s| {
                let len = |field: &str| s["spec"][field].as_array().map_or(0, Vec::len);
                (
                    len("sharedCounters"),
                    len("devices"),
                    s["spec"]["pool"]["resourceSliceCount"]
                        .as_i64()
                        .unwrap_or(0),
                )
            })
            .collect();
        pool.sort();
        Ok((pool == [(0, 6, 4), (0, 64, 4), (2, 0, 4), (8, 0, 4)]).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{slices:#}\n{}", c.dra_log()));
    c.apply(&partition_template("half", "0", "half"))
        .expect("template");
    c.apply(&partition_template("quarter", "0", "quarter"))
        .expect("template");

    // Whole, then a half: the half waits until the whole device is free.
    c.apply(&partition_pod("whole-a", "whole"))
        .expect("create pod");
    let out = probe_output(&c, "whole-a");
    assert_eq!(allocated_ids(&claim_of(&c, "whole-a")), ["0"]);
    assert_eq!(
        told_units(&out),
        None,
        "a whole device is told no partition"
    );
    let whole_spec = spec_file(&c, &claim_of(&c, "whole-a"));
    c.apply(&partition_pod("half-a", "half"))
        .expect("create pod");
    let why = unschedulable(&c, "half-a").expect("a half waits while the device is whole");
    println!("half-a beside the whole device: {why}");
    delete_pod(&c, "whole-a");
    wait_gone(&c, &whole_spec);
    let a = run_partition(&c, "half-a", "half", "0", "half");

    // Two halves, then whole: the whole device waits.
    let b = run_partition(&c, "half-b", "half", "0", "half");
    assert!(a.1 < b.0 || b.1 < a.0, "the halves are apart: {a:?} {b:?}");
    c.apply(&partition_pod("whole-b", "whole"))
        .expect("create pod");
    let why = unschedulable(&c, "whole-b").expect("the whole device waits while halves are held");
    println!("whole-b beside two halves: {why}");
    delete_pod(&c, "whole-b");

    // Quarters filling a half: half-a's units freed, two quarters take them and a third waits.
    let half_a_spec = spec_file(&c, &claim_of(&c, "half-a"));
    delete_pod(&c, "half-a");
    wait_gone(&c, &half_a_spec);
    let q1 = run_partition(&c, "quarter-a", "quarter", "0", "quarter");
    let q2 = run_partition(&c, "quarter-b", "quarter", "0", "quarter");
    for q in [q1, q2] {
        assert!(
            a.0 <= q.0 && q.1 <= a.1,
            "a quarter in the freed half {a:?}: {q:?}"
        );
    }
    assert_ne!(q1, q2, "two quarters apart");
    c.apply(&partition_pod("quarter-c", "quarter"))
        .expect("create pod");
    let why = unschedulable(&c, "quarter-c").expect("a third quarter waits");
    println!("quarter-c beside a half and two quarters: {why}");

    // The last device, whose counters and partitions are in the pool's second slices: a
    // quarter of it is allocated and the whole device then waits.
    c.apply(&partition_template("quarter-9", "9", "quarter"))
        .expect("template");
    c.apply(&pinned_template("whole-9", DEMO_CLASS, "9", None))
        .expect("template");
    run_partition(&c, "last-quarter", "quarter-9", "9", "quarter");
    c.apply(&partition_pod("last-whole", "whole-9"))
        .expect("create pod");
    let why = unschedulable(&c, "last-whole").expect("the whole last device waits");
    println!("last-whole beside a quarter of it: {why}");
}

#[test]
fn sysfs_attributes_reach_the_slice_and_a_health_change_taints_the_device() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start(&release, None);
    // Each demo device gets a health and a serial attribute in the node's sysfs, which the
    // profile names; the driver reads its profiles at start.
    let sys = c.host().dir.join("sys/class/demo");
    for (i, (name, _, _)) in ACCELS.iter().enumerate() {
        std::fs::create_dir_all(sys.join(name)).unwrap();
        std::fs::write(sys.join(name).join("health"), "ok\n").unwrap();
        std::fs::write(sys.join(name).join("serial"), format!("SN-{i}\n")).unwrap();
    }
    // And a place on the PCI bus: accel0 and accel3 below root complex pci0000:00, accel1 and
    // accel2 behind a bridge of pci0000:40 on NUMA node 1 (the kernel's /sys/dev/char links).
    let sys_root = c.host().dir.join("sys");
    let functions = [
        "pci0000:00/0000:00:04.0",
        "pci0000:40/0000:40:01.0/0000:41:00.0",
        "pci0000:40/0000:40:01.0/0000:42:00.0",
        "pci0000:00/0000:00:05.0",
    ];
    for ((name, major, minor), function) in ACCELS.iter().zip(functions) {
        let dir = sys_root.join("devices").join(function);
        std::fs::create_dir_all(dir.join("demo").join(name)).unwrap();
        let numa = if function.starts_with("pci0000:40") {
            "1"
        } else {
            "0"
        };
        std::fs::write(dir.join("numa_node"), format!("{numa}\n")).unwrap();
        let links = sys_root.join("dev/char");
        std::fs::create_dir_all(&links).unwrap();
        let link = links.join(format!("{major}:{minor}"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(format!("../../devices/{function}/demo/{name}"), &link).unwrap();
    }
    edit_demo_profile(&mut c, |text| {
        text.replacen(
            "[discovery]\n",
            "[discovery]\nhealth_sysfs = \"class/demo/{name}/health\"\nhealth_interval_ms = 1000\n",
            1,
        ) + "\n[discovery.attributes_sysfs]\nserial = \"class/demo/{name}/serial\"\n"
    });
    poll(
        "the serials in the slice",
        devinject_tests::cluster::SLOW,
        || {
            let serials: Vec<String> = c
                .whole_dra_devices()?
                .into_iter()
                .filter_map(|(_, d)| {
                    d["attributes"]["serial"]["string"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect();
            Ok((serials.len() == ACCELS.len()).then_some(serials))
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.dra_log()));

    // Kubernetes' standard attributes: a claim for two devices on one PCIe root gets a pair
    // below one root complex.
    let demo1 = c
        .resource_slice_device("demo-1")
        .unwrap()
        .expect("demo-1 in a slice");
    let attrs = &demo1["attributes"];
    assert_eq!(
        attrs["resource.kubernetes.io/pcieRoot"]["string"], "pci0000:40",
        "{demo1}"
    );
    assert_eq!(
        attrs["resource.kubernetes.io/pciBusID"]["string"], "0000:41:00.0",
        "{demo1}"
    );
    assert_eq!(
        attrs["resource.kubernetes.io/numaNode"]["int"], 1,
        "{demo1}"
    );
    let pair = demo_claim_template("pair", 2).replace(
        "          count: 2\n",
        "          count: 2\n      constraints:\n      - requests: [dev]\n        \
         matchAttribute: resource.kubernetes.io/pcieRoot\n",
    );
    c.apply(&pair).expect("template");
    c.apply(&pod("pair", "pair")).expect("create pod");
    let out = probe_output(&c, "pair");
    let mut ids = allocated_ids(&claim_of(&c, "pair"));
    ids.sort();
    assert!(
        ids == ["0", "3"] || ids == ["1", "2"],
        "two devices on one root complex: {ids:?}"
    );
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
    delete_pod(&c, "pair");

    // A claim choosing its device by the sysfs attribute gets that device.
    let chosen = "SN-2";
    let template = demo_claim_template("by-serial", 1).replace(
        "          count: 1\n",
        &format!(
            "          count: 1\n          selectors:\n          - cel:\n              \
             expression: device.attributes[\"{DRA_DRIVER}\"].serial == \"{chosen}\"\n"
        ),
    );
    assert!(template.contains(chosen), "{template}");
    c.apply(&template).expect("template");
    c.apply(&pod("chooser", "by-serial")).expect("create pod");
    let out = probe_output(&c, "chooser");
    let ids = allocated_ids(&claim_of(&c, "chooser"));
    assert_eq!(ids, ["2"], "the device whose serial the claim chose");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
    // The claim's device status tells an operator what was prepared (KEP-4817): the device
    // Ready, its profile, host device and CDI device, and what the prepare step did.
    let entry = poll(
        "the chooser's claim tells its device status",
        devinject_tests::cluster::SLOW,
        || {
            let claim = claim_of(&c, "chooser");
            Ok(claim["status"]["devices"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|d| d["driver"] == DRA_DRIVER && d["device"] == "demo-2")
                .cloned())
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let ready = &entry["conditions"][0];
    assert_eq!(
        (&ready["type"], &ready["status"]),
        (&json!("Ready"), &json!("True")),
        "{entry}"
    );
    assert_eq!(
        (&entry["data"]["profile"], &entry["data"]["deviceID"]),
        (&json!("demo"), &json!("2")),
        "{entry}"
    );
    assert_eq!(entry["data"]["prepareStep"], "none", "{entry}");
    assert!(
        entry["data"]["cdiDeviceIDs"][0]
            .as_str()
            .is_some_and(|id| id.contains("demo")),
        "{entry}"
    );

    // The chooser's device turns unhealthy: it stays in the slice with a taint, the pod holding
    // it keeps running and says so in its status (the health stream).
    let (sick, _, _) = ACCELS[2];
    // Running in the API first: the status lags the container's start, and discovery follows
    // the sysfs change at once.
    poll(
        "pod chooser Running",
        devinject_tests::cluster::SLOW,
        || Ok(pod_running(&c, "chooser").then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    // Changed as a driver that does not call sysfs_notify changes it: through a shared mapping,
    // which raises no inotify event; the driver's schedule (1 s here) reads it.
    let program = c.host().dir.join("shared-map-writer");
    devinject_tests::cprog::shared_map_writer(&program).expect("build the writer");
    let mut sick_health =
        devinject_tests::cprog::SharedMapWriter::map(&program, &sys.join(sick).join("health"))
            .expect("map the health attribute");
    sick_health.store("bad").expect("store through the mapping");
    let changed = std::time::Instant::now();
    if !c.dra_beyond_ga() {
        // Before 1.36 the API server drops taints: the driver sees it and leaves the device out.
        c.wait_resource_slices(ACCELS.len() - 1)
            .unwrap_or_else(|e| panic!("the slice follows the health change: {e:#}"));
        println!(
            "the slice left unhealthy {sick} out within {:?}",
            changed.elapsed()
        );
        let log = c.dra_log();
        assert!(
            log.lines().any(|l| l.contains("the API server drops fields")
                && l.contains("DRADeviceTaints")),
            "the driver found the taints dropped:\n{log}"
        );
        assert!(pod_running(&c, "chooser"), "the holder keeps running");
        std::fs::write(sys.join(sick).join("health"), "ok\n").unwrap();
        c.wait_resource_slices(ACCELS.len())
            .unwrap_or_else(|e| panic!("the slice follows the recovery: {e:#}"));
        return;
    }
    let taint = wait_taint(&c, "demo-2", Some("NoSchedule"));
    println!(
        "the slice tainted unhealthy {sick} within {:?}: {taint}",
        changed.elapsed()
    );
    assert_eq!(
        c.resource_slice_devices().unwrap().len(),
        ACCELS.len(),
        "a tainted device stays in the slice"
    );
    let status = device_health_in_status(&c, "chooser", "demo-2", "Unhealthy");
    println!(
        "the pod's status said so within {:?}: {status}",
        changed.elapsed()
    );
    // A 1.37 kubelet negotiates the stream's v1, which the driver advertises first; an older one
    // opens v1alpha1.
    let api = if c.kubernetes().minor() >= 37 {
        devinject_dra::api::HEALTH_V1
    } else {
        devinject_dra::api::HEALTH_V1ALPHA1
    };
    let log = c.dra_log();
    assert!(
        log.lines()
            .any(|l| l.contains(devinject_dra::health::OPENED) && l.contains(&format!("\"{api}\""))),
        "the kubelet opened the health stream's {api}:\n{log}"
    );
    assert!(
        pod_running(&c, "chooser"),
        "NoSchedule leaves the holder running"
    );

    // A free device turns unhealthy: a claim that does not tolerate the taint waits, one that
    // does gets the device.
    let (free, _, _) = ACCELS[1];
    std::fs::write(sys.join(free).join("health"), "failed\n").unwrap();
    wait_taint(&c, "demo-1", Some("NoSchedule"));
    let by_serial = |name: &str, tolerate: bool| {
        let tolerations = if tolerate {
            format!(
                "          tolerations:\n          - key: {DRA_DRIVER}/unhealthy\n            \
                 operator: Exists\n            effect: NoSchedule\n"
            )
        } else {
            String::new()
        };
        demo_claim_template(name, 1).replace(
            "          count: 1\n",
            &format!(
                "          count: 1\n          selectors:\n          - cel:\n              \
                 expression: device.attributes[\"{DRA_DRIVER}\"].serial == \"SN-1\"\n{tolerations}"
            ),
        )
    };
    c.apply(&by_serial("sick-strict", false)).expect("template");
    c.apply(&pod("avoider", "sick-strict")).expect("create pod");
    let why = unschedulable(&c, "avoider").unwrap_or_else(|e| panic!("{e:#}\n{}", c.dra_log()));
    println!("a claim not tolerating the taint: {why}");
    c.apply(&by_serial("sick-tolerant", true))
        .expect("template");
    c.apply(&pod("tolerant", "sick-tolerant"))
        .expect("create pod");
    let out = probe_output(&c, "tolerant");
    let ids = allocated_ids(&claim_of(&c, "tolerant"));
    assert_eq!(ids, ["1"], "the tainted device, to the claim tolerating it");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);

    // Healthy again: the taint goes, and the holder's status follows.
    sick_health.store("ok").expect("store through the mapping");
    wait_taint(&c, "demo-2", None);
    device_health_in_status(&c, "chooser", "demo-2", "Healthy");

    // A profile asking for NoExecute: the pod whose claim holds the still unhealthy device, and
    // tolerates only NoSchedule, is evicted; the holder of the healthy one stays.
    assert!(
        pod_running(&c, "tolerant"),
        "NoSchedule leaves the tolerating pod running"
    );
    edit_demo_profile(&mut c, |text| {
        text.replacen(
            "[discovery]\n",
            "[discovery]\nhealth_taint = \"NoExecute\"\n",
            1,
        )
    });
    wait_taint(&c, "demo-1", Some("NoExecute"));
    let tainted = std::time::Instant::now();
    let how = poll(
        "pod tolerant evicted",
        devinject_tests::cluster::SLOW,
        || {
            Ok(match c.pod("tolerant") {
                Err(_) => Some("deleted".to_owned()),
                Ok(p) => p["metadata"]["deletionTimestamp"]
                    .as_str()
                    .map(|t| format!("deleting since {t}")),
            })
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    println!(
        "NoExecute evicted the holder of the unhealthy device within {:?}: {how}",
        tainted.elapsed()
    );
    assert!(
        pod_running(&c, "chooser"),
        "the healthy device's holder stays"
    );
}

/// Waits until DRA device `device` of the driver's slices carries the driver's unhealthy taint
/// with `effect` (or, with `None`, no taint); the taint as the API server holds it.
fn wait_taint(c: &Cluster, device: &str, effect: Option<&str>) -> String {
    wait_taint_of(c, device, devinject_dra::slices::UNHEALTHY_TAINT, effect)
}

/// Waits until DRA device `device` carries the taint `<driver>/<key>` with `effect` in its
/// slice (the taint, as JSON), or, with `None`, no taint at all.
fn wait_taint_of(c: &Cluster, device: &str, key: &str, effect: Option<&str>) -> String {
    poll(
        &format!("{device} tainted {key} {effect:?} in its slice"),
        devinject_tests::cluster::SLOW,
        || {
            let Some(d) = c.resource_slice_device(device)? else {
                return Ok(None);
            };
            let taints = d["taints"].as_array().cloned().unwrap_or_default();
            let key = format!("{DRA_DRIVER}/{key}");
            Ok(match effect {
                Some(effect) => taints
                    .iter()
                    .find(|t| t["key"] == key.as_str() && t["effect"] == effect)
                    .map(|t| t.to_string()),
                None => taints.is_empty().then(String::new),
            })
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.dra_log()))
}

/// Whether pod `name` is running.
fn pod_running(c: &Cluster, name: &str) -> bool {
    c.kubectl(&["get", "pod", name, "-o", "jsonpath={.status.phase}"])
        .is_ok_and(|phase| phase.trim() == "Running")
}

/// Waits until pod `name`'s status reports `health` for DRA device `device`
/// (`allocatedResourcesStatus`, from the driver's health stream); that part of the status.
fn device_health_in_status(c: &Cluster, name: &str, device: &str, health: &str) -> String {
    c.wait_pod(name, &format!("{device} {health} in its status"), |p| {
        p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| {
                s["allocatedResourcesStatus"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|r| {
                r["resources"].as_array().into_iter().flatten().any(|res| {
                    res["resourceID"]
                        .as_str()
                        .is_some_and(|id| id.ends_with(device))
                        && res["health"] == health
                })
            })
            .map(|r| r.to_string())
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.dra_log()))
}

/// Waits until pod `name` is unschedulable; the scheduler's message.
fn unschedulable(c: &Cluster, name: &str) -> anyhow::Result<String> {
    c.wait_pod(name, "unschedulable", |p| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|cond| cond["type"] == "PodScheduled" && cond["reason"] == "Unschedulable")
            .map(|cond| cond["message"].as_str().unwrap_or_default().to_owned())
    })
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// The machine's own kvm, tun and fuse served to claims on `c`: their nodes (the kernel's
/// numbers) in the node's device root, the shipped profiles that find them (kvm shared by a
/// capacity small enough to exhaust), the driver restarted to read them, their slices and
/// DeviceClasses, and a claim template per profile.
fn serve_kernel_devices(c: &mut Cluster) -> KernelDevices {
    // The node's device root gets the machine's own kvm, tun and fuse nodes (their numbers, so
    // that opening them opens the kernel's devices) and the shipped profiles that find them.
    let mut numbers = Vec::new();
    for (profile, dev) in KERNEL_DEVICES {
        // kvm as distributions make it: only its group may use it, a group no pod here has.
        let (major, minor) = machine_node(&c.host().dev_root, dev, profile == "kvm");
        let shipped = std::fs::read_to_string(
            devinject_tests::sim::shipped_profiles().join(format!("{profile}.toml")),
        )
        .expect("read the shipped profile");
        // kvm shared by a capacity small enough to exhaust: two claims at once.
        let text = if profile == "kvm" {
            let small = shipped.replace(
                &format!("pods = {SHIPPED_CAPACITY}"),
                &format!("pods = {KVM_CAPACITY}"),
            );
            assert_ne!(
                small, shipped,
                "kvm.toml states `pods = {SHIPPED_CAPACITY}`"
            );
            small
        } else {
            shipped
        };
        std::fs::write(c.host().profiles_dir.join(format!("{profile}.toml")), text)
            .expect("write the profile");
        numbers.push((format!("/dev/{dev}"), major, minor));
    }
    // The driver reads its profiles at start.
    c.restart_dra_plugin()
        .unwrap_or_else(|e| panic!("restart the driver: {e:#}"));
    c.wait_resource_slices(ACCELS.len() + KERNEL_DEVICES.len())
        .unwrap_or_else(|e| panic!("the kernel devices' slices: {e:#}"));
    c.apply_dra_device_classes().expect("the DeviceClasses");

    let mut claims = Vec::new();
    for (profile, _) in KERNEL_DEVICES {
        c.apply(&claim_template(
            &format!("one-{profile}"),
            &device_class(profile),
            1,
        ))
        .expect("template");
        claims.push((profile, format!("one-{profile}")));
    }
    KernelDevices { claims, numbers }
}

/// What [`serve_kernel_devices`] set up.
struct KernelDevices {
    /// The claim template of each profile, by profile.
    claims: Vec<(&'static str, String)>,
    /// Each device's path in the container, with its numbers.
    numbers: Vec<(String, u32, u32)>,
}

/// The kernel devices of the kvm, tun and fuse profiles, as `(profile, path under /dev)`.
const KERNEL_DEVICES: [(&str, &str); 3] = [("kvm", "kvm"), ("tun", "net/tun"), ("fuse", "fuse")];

#[test]
fn the_kvm_tun_and_fuse_profiles_serve_the_real_kernel_devices_through_claims() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start(&release, None);
    let KernelDevices { claims, numbers } = serve_kernel_devices(&mut c);
    let templates: Vec<(&str, &str)> = claims.iter().map(|(p, t)| (*p, t.as_str())).collect();
    user_namespaced_pods_open_the_kernel_devices(&c, &templates, &numbers);
    let demo: Vec<String> = ACCELS
        .iter()
        .map(|(name, _, _)| format!("/dev/demo/{name}"))
        .collect();
    let paths: Vec<&str> = numbers
        .iter()
        .map(|(p, _, _)| p.as_str())
        .chain(demo.iter().map(String::as_str))
        .collect();
    c.apply(&pod_holding(
        "kernel",
        &templates,
        &devinject_tests::probe::probe_args(&paths, &[]),
    ))
    .expect("create pod");
    let out = probe_output(&c, "kernel");
    let report = Report::parse(&out);
    for (path, major, minor) in &numbers {
        assert_opens(
            &report,
            path,
            (*major, *minor),
            &format!("through its claim:\n{out}"),
        );
    }
    // Only the claimed devices: none of the demo accelerators.
    for (name, _, _) in ACCELS {
        assert_eq!(
            report.node(&format!("/dev/demo/{name}")).kind,
            "missing",
            "{out}"
        );
    }
    kvm_is_shared_up_to_its_capacity(&c, &numbers[0]);
}

/// User-namespaced pods (`hostUsers: false`) holding a claim on each of kvm, tun and fuse (the
/// `templates`), as the container's root and as uid 1000, open each device (`numbers`): kvm
/// only its group may use, tun and fuse anyone. The runtime would bind the host's nodes, owned
/// by nobody in the namespace; the claim's spec has the finish step give the container copies
/// it owns instead. A pod that holds no claim and sets the demo request variable gets nothing.
/// The pods are deleted and their claims freed before this returns.
fn user_namespaced_pods_open_the_kernel_devices(
    c: &Cluster,
    templates: &[(&str, &str)],
    numbers: &[(String, u32, u32)],
) {
    if !user_namespaced_pods_ready() {
        return;
    }
    let paths: Vec<&str> = numbers.iter().map(|(p, _, _)| p.as_str()).collect();
    let pods = [("userns-root", None), ("userns-user", Some(1000))];
    let create = |name: &str, user: Option<u32>| {
        let manifest = pod_holding_after(
            name,
            templates,
            &devinject_tests::probe::probe_args(&paths, &[]),
            WHO_AM_I,
        );
        c.apply(&user_namespaced(&manifest, user))
            .expect("create pod");
    };
    // Both at once where the devices are shared by capacity; one after the other before 1.36,
    // where each device goes to one claim at a time.
    let at_once = c.dra_beyond_ga();
    if at_once {
        for (name, user) in pods {
            create(name, user);
        }
    }
    for (name, user) in pods {
        if !at_once {
            create(name, user);
        }
        let out = probe_output(c, name);
        assert_user_namespaced(name, &out, user, "a pod holding claims");
        let report = Report::parse(&out);
        for (path, major, minor) in numbers {
            assert_opens(
                &report,
                path,
                (*major, *minor),
                &format!("in {name}, a user-namespaced pod:\n{out}\n{}", c.dra_log()),
            );
        }
        if !at_once {
            delete_pod(c, name);
            poll("the pod's claims to go", SLOW, || {
                Ok(claim_owned_by(c, name).is_none().then_some(()))
            })
            .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
        }
    }
    c.apply(&user_namespaced(&forger("userns-forger"), None))
        .expect("create pod");
    let out = probe_output(c, "userns-forger");
    assert_demo_granted_nothing(&Report::parse(&out), &out);
    delete_pod(c, "userns-forger");
    if at_once {
        for (name, _) in pods {
            delete_pod(c, name);
        }
    }
    poll("the user-namespaced pods' claims to go", SLOW, || {
        Ok(pods
            .iter()
            .all(|(name, _)| claim_owned_by(c, name).is_none())
            .then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
}

/// Asserts that the probe saw the char device `path` with the numbers `(major, minor)` and
/// opened it; `ctx` is shown on failure.
fn assert_opens(report: &Report, path: &str, (major, minor): (u32, u32), ctx: &str) {
    let node = report.node(path);
    assert_eq!(
        (
            node.kind.as_str(),
            node.major,
            node.minor,
            node.open.as_str()
        ),
        ("c", major, minor, "ok"),
        "{path} {ctx}"
    );
}

/// The pool generation of the kvm slice.
fn kvm_pool_generation(c: &Cluster) -> i64 {
    let list: Value = serde_json::from_str(
        &c.kubectl(&["get", "resourceslices", "-o", "json"])
            .expect("the slices"),
    )
    .expect("slices JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| {
            s["spec"]["pool"]["name"]
                .as_str()
                .is_some_and(|p| p.ends_with("/kvm"))
        })
        .and_then(|s| s["spec"]["pool"]["generation"].as_i64())
        .unwrap_or_else(|| panic!("no kvm slice: {list}"))
}

/// The capacity the shipped kvm, tun and fuse profiles state (`pods = 110`: a node's default
/// pod limit), and the one the test gives kvm.
const SHIPPED_CAPACITY: u32 = 110;
const KVM_CAPACITY: u32 = 2;

/// With consumable capacity (Kubernetes 1.36 and later) the one kvm device, held by the pod
/// `kernel` already, goes to a second claim at once, each allocation with its own share id and
/// one unit of the capacity, and a third claim waits; where the API server drops consumable
/// capacity (1.34), the driver publishes the device for one claim at a time, detected, not
/// configured: the second claim waits.
fn kvm_is_shared_up_to_its_capacity(c: &Cluster, kvm: &(String, u32, u32)) {
    let (path, major, minor) = kvm;
    let (_, name) = c
        .resource_slice_devices()
        .expect("the slices")
        .into_iter()
        .find(|(pool, _)| pool.ends_with("/kvm"))
        .expect("the kvm device in a slice");
    let device = c
        .resource_slice_device(&name)
        .expect("the slices")
        .expect("the kvm device in a slice");
    let shared = c.dra_beyond_ga();
    if shared {
        assert_eq!(device["allowMultipleAllocations"], true, "{device}");
        assert_eq!(
            device["capacity"]["pods"]["value"],
            KVM_CAPACITY.to_string(),
            "{device}"
        );
    } else {
        assert!(device["allowMultipleAllocations"].is_null(), "{device}");
    }
    // The slice settles: where the API server drops a field, the driver stops sending it
    // rather than applying the slice again at every rescan.
    let generation = kvm_pool_generation(c);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        kvm_pool_generation(c),
        generation,
        "the kvm slice is applied again at every rescan:\n{}",
        c.dra_log()
    );
    c.apply(&claim_template("kvm-share", &device_class("kvm"), 1))
        .expect("template");
    let holders = if shared { KVM_CAPACITY } else { 1 };
    let mut shares = vec![pod_claim(c, "kernel", Some("kvm"))];
    for n in 1..holders {
        let holder = format!("kvm-{n}");
        c.apply(&pod_holding(
            &holder,
            &[("kvm", "kvm-share")],
            &devinject_tests::probe::probe_args(&[path.as_str()], &[]),
        ))
        .expect("create pod");
        let out = probe_output(c, &holder);
        assert_opens(
            &Report::parse(&out),
            path,
            (*major, *minor),
            &format!("in {holder}, beside the other holders:\n{out}"),
        );
        shares.push(pod_claim(c, &holder, Some("kvm")));
    }
    let results: Vec<&Value> = shares
        .iter()
        .flat_map(|claim| {
            claim["status"]["allocation"]["devices"]["results"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["device"] == name.as_str())
        })
        .collect();
    assert_eq!(results.len(), holders as usize, "{results:?}");
    if shared {
        let mut ids: Vec<&str> = results
            .iter()
            .map(|r| {
                r["shareID"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a share id: {r}"))
            })
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), results.len(), "one share id each: {results:?}");
        for r in &results {
            assert_eq!(r["consumedCapacity"]["pods"], "1", "{r}");
        }
    }
    let waiting = format!("kvm-{holders}");
    c.apply(&pod_holding(
        &waiting,
        &[("kvm", "kvm-share")],
        &devinject_tests::probe::probe_args(&[path.as_str()], &[]),
    ))
    .expect("create pod");
    let why = unschedulable(c, &waiting).expect("the claim past the capacity waits");
    eprintln!("{waiting}: {why}");
}

/// A ResourceClaimTemplate `name` asking for one demo device whose opaque configuration chooses
/// the prepare step's `function`.
fn claim_template_with_function(name: &str, function: &str) -> String {
    demo_claim_template(name, 1)
        + &format!(
            "      config:\n      - opaque:\n          driver: {DRA_DRIVER}\n          parameters:\n            \
             function: {function}\n"
        )
}

#[test]
fn a_claims_function_is_loaded_into_its_device_before_the_pod_starts() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start(&release, None);
    let sys = devinject_tests::sim::add_demo_prepare_step(c.host()).expect("prepare step");
    let hanging = add_hanging_function(c.host()).expect("a hanging function");
    // The driver reads its profiles at start.
    c.restart_dra_plugin()
        .unwrap_or_else(|e| panic!("restart the driver: {e:#}"));

    let (function, _) = devinject_tests::sim::DEMO_FUNCTION;
    c.apply(&claim_template_with_function("loaded", function))
        .expect("template");
    c.apply(&pod("fpga", "loaded")).expect("create pod");
    let out = probe_output(&c, "fpga");
    let ids = allocated_ids(&claim_of(&c, "fpga"));
    assert_eq!(ids.len(), 1, "{out}");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
    // The program ran for exactly that device, with the claim's function.
    for (i, (name, _, _)) in ACCELS.iter().enumerate() {
        let loaded = std::fs::read_to_string(sys.join(name).join("function")).ok();
        if ids.contains(&i.to_string()) {
            assert_eq!(loaded.as_deref(), Some(function), "{name}\n{}", c.logs());
        } else {
            assert_eq!(loaded, None, "{name} was not claimed");
        }
    }

    // A function whose program fails: the pod does not start, and its events say why.
    let (broken, message) = devinject_tests::sim::DEMO_BROKEN_FUNCTION;
    c.apply(&claim_template_with_function("broken", broken))
        .expect("template");
    c.apply(&pod("unloadable", "broken")).expect("create pod");
    let event = poll(
        "the prepare failure in the pod's events",
        devinject_tests::cluster::SLOW,
        || {
            let events = c.kubectl(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=unloadable",
                "-o",
                "jsonpath={.items[*].message}",
            ])?;
            Ok(events.contains(message).then_some(events))
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    println!("events of the pod whose function fails to load: {event}");
    let unloadable = c.pod("unloadable").expect("pod");
    assert_ne!(unloadable["status"]["phase"], "Running", "{unloadable}");
    assert!(
        c.container_log("unloadable", "main")
            .unwrap_or_default()
            .is_empty(),
        "the container never ran"
    );

    // One claim's prepare program hangs (until the kubelet's deadline for the call, 45 s,
    // kills it): another claim on the node is prepared meanwhile, its program run, and its
    // pod runs while the hanging program is still in its first run.
    c.apply(&claim_template_with_function("hanging", hanging.id))
        .expect("template");
    c.apply(&pod("stuck", "hanging")).expect("create pod");
    poll(
        "the hanging prepare program to start",
        devinject_tests::cluster::SLOW,
        || Ok((!hanging.running().is_empty()).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    let asked = std::time::Instant::now();
    c.apply(&pod("beside", "loaded")).expect("create pod");
    let out = probe_output(&c, "beside");
    let took = asked.elapsed();
    let (runs, running) = (hanging.runs(), hanging.running());
    eprintln!("a pod beside a hanging prepare step ran its probe in {took:?}");
    assert!(
        runs == 1 && !running.is_empty(),
        "the other claim waited for the hanging one: its program started {runs} times, \
         {running:?} running, when the pod beside it had run (after {took:?})\n{}",
        c.dra_log()
    );
    let ids = allocated_ids(&claim_of(&c, "beside"));
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
    assert_ne!(c.pod("stuck").expect("pod")["status"]["phase"], "Running");
    c.kubectl(&["delete", "pod", "stuck", "--wait=false"])
        .expect("delete pod");
    hanging.kill();
}

/// Gives `node`'s demo profile a prepare step that runs before binding (`before_binding`): with
/// `fail`, it exits with [`BINDING_FAILURE`] on stderr; else it waits for the file `gate` to
/// exist. Each run appends its device id to `runs`. Returns (`runs`, `gate`).
fn add_binding_prepare(node: &devinject_tests::cluster::Node, fail: bool) -> (PathBuf, PathBuf) {
    let host = &node.host;
    let (runs, gate) = (host.dir.join("bind-runs"), host.dir.join("bind-gate"));
    let program = host.dir.join("bind-program");
    let then = if fail {
        format!("echo '{BINDING_FAILURE}' >&2; exit 4")
    } else {
        format!("while [ ! -e {} ]; do sleep 0.1; done", gate.display())
    };
    // Written and closed before any run: a file open for writing cannot be executed.
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh
echo \"$DEVINJECT_DEVICE\" >> {}
{then}
",
            runs.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let profile = host.profiles_dir.join("demo.toml");
    let text = without_partitions(&std::fs::read_to_string(&profile).unwrap());
    std::fs::write(
        &profile,
        format!(
            "{text}\n[prepare]\ncommand = [\"{}\"]\ntimeout_ms = 120000\nbefore_binding = true\n",
            program.display()
        ),
    )
    .unwrap();
    (runs, gate)
}

/// What the failing prepare step of [`add_binding_prepare`] says.
const BINDING_FAILURE: &str = "region 0 failed its self-test";

/// The lines of file `path`, none when it does not exist.
fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_prepare_before_binding_holds_the_pod_and_a_failing_one_sends_it_to_the_other_node() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start_beside(
        &release,
        DraBeside::Nothing,
        Shape {
            nodes: 2,
            devices: 1,
            ..Shape::default()
        },
    );
    // The first node's step fails; the second's waits for the test's gate.
    let (failing_runs, _) = add_binding_prepare(&c.nodes()[0], true);
    let (runs, gate) = add_binding_prepare(&c.nodes()[1], false);
    // The second node's device is unplugged until the first has failed, so that the scheduler
    // tries the first node first.
    let (name, major, minor) = ACCELS[0];
    let second_device = c.nodes()[1].host.dev_root.join("demo").join(name);
    std::fs::remove_file(&second_device).expect("unplug");
    for node in c.nodes_mut() {
        node.restart_dra_plugin()
            .unwrap_or_else(|e| panic!("restart the driver: {e:#}"));
    }
    c.wait_resource_slices(1)
        .unwrap_or_else(|e| panic!("the first node's device alone: {e:#}"));
    let first = c.nodes()[0].name().to_owned();
    let second = c.nodes()[1].name().to_owned();
    let device_of = |node: &str| {
        c.dra_slice_devices()
            .unwrap()
            .into_iter()
            .find(|(pool, _)| pool.starts_with(&format!("{node}/")))
            .map(|(_, d)| d)
    };
    if !c.dra_beyond_ga() {
        // The API server drops binding conditions (the gate off): the step runs when the
        // kubelet prepares the claim, as without the key.
        let log = poll(
            "the driver to find binding conditions dropped",
            devinject_tests::cluster::SLOW,
            || {
                let log = c.nodes()[0].dra_log();
                Ok(log
                    .lines()
                    .any(|l| l.contains("DRADeviceBindingConditions"))
                    .then_some(log))
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        println!("{log}");
        let device = device_of(&first).expect("the first node's device");
        assert!(device.get("bindingConditions").is_none(), "{device}");
        return;
    }
    let device = device_of(&first).expect("the first node's device");
    assert_eq!(
        device["bindingConditions"],
        serde_json::json!(["Prepared"]),
        "{device}"
    );
    assert_eq!(
        device["bindingFailureConditions"],
        serde_json::json!(["PrepareFailed"]),
        "{device}"
    );

    c.apply(&demo_claim_template("programmed", 1))
        .expect("template");
    c.apply(&pod("bound", "programmed")).expect("create pod");
    // The first node's step ran and failed: its device is tainted, and the pod is not bound.
    poll(
        "the first node's step to run",
        devinject_tests::cluster::SLOW,
        || Ok((!lines(&failing_runs).is_empty()).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    let tainted = poll(
        "the failed device tainted",
        devinject_tests::cluster::SLOW,
        || {
            let device = device_of(&first).unwrap_or_default();
            Ok(device["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| {
                    t["key"] == format!("{DRA_DRIVER}/prepare-failed")
                        && t["effect"] == "NoSchedule"
                })
                .then_some(device))
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.nodes()[0].dra_log()));
    println!("the first node's device after its step failed: {tainted}");
    assert!(
        c.nodes()[0].dra_log().contains(BINDING_FAILURE),
        "the driver logs why:\n{}",
        c.nodes()[0].dra_log()
    );
    assert!(c.pod("bound").unwrap()["spec"]["nodeName"].is_null());

    // The second node's device comes: the claim is allocated it, its step runs, and the pod
    // stays unbound while the step runs (the scheduler looks every 5 s).
    devinject_tests::sim::mknod(&second_device, major, minor, "0666").expect("replug");
    poll(
        "the second node's step to start",
        devinject_tests::cluster::SLOW,
        || Ok((!lines(&runs).is_empty()).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    std::thread::sleep(std::time::Duration::from_secs(6));
    let waiting = c.pod("bound").unwrap();
    assert!(
        waiting["spec"]["nodeName"].is_null(),
        "bound before its device was prepared: {waiting}"
    );
    let claim = claim_of(&c, "bound");
    assert!(
        claim["status"]["allocation"]["devices"]["results"][0]["pool"]
            .as_str()
            .is_some_and(|p| p.starts_with(&format!("{second}/"))),
        "{claim}"
    );
    std::fs::write(&gate, "").unwrap();
    let out = probe_output(&c, "bound");
    assert_eq!(c.node_of("bound").unwrap().name(), second);
    let claim = claim_of(&c, "bound");
    let ids = allocated_ids(&claim);
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
    let told = &claim["status"]["devices"][0];
    assert_eq!(told["driver"], DRA_DRIVER, "{claim}");
    assert!(
        told["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Prepared" && c["status"] == "True"),
        "{claim}"
    );
    // The step ran once on the second node: the kubelet's prepare did not run it again.
    assert_eq!(lines(&runs), ["0"], "{}", c.nodes()[1].dra_log());
}

#[test]
fn a_pod_asking_for_the_extended_resource_is_served_through_dra_unchanged() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let c = start(&release, None);
    // No device plugin runs here: the DeviceClass's extendedResourceName makes the scheduler
    // claim a device for the pod.
    c.apply(&classic_pod("classic")).expect("create pod");
    if !c.dra_beyond_ga() {
        // Before 1.36 a DeviceClass serves no extended resource: only a device plugin can.
        let why = unschedulable(&c, "classic").unwrap_or_else(|e| panic!("{e:#}"));
        assert!(why.contains("Insufficient devinject.io/demo"), "{why}");
        return;
    }
    let out = probe_output(&c, "classic");
    let claim = claim_owned_by(&c, "classic")
        .unwrap_or_else(|| panic!("the scheduler's claim for the pod\n{}", c.logs()));
    let ids = allocated_ids(&claim);
    assert_eq!(ids.len(), 1, "{claim}");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
}

#[test]
fn where_the_device_plugin_serves_the_node_a_limits_pod_is_left_to_it() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let c = start_beside(&release, DraBeside::DevicePlugin, Shape::default());
    // The node advertises the resource through the device plugin: the same pod gets a device
    // from the plugin (as a CDI device), and the scheduler makes it no claim.
    c.apply(&classic_pod("classic")).expect("create pod");
    let out = probe_output(&c, "classic");
    let report = Report::parse(&out);
    let seen: Vec<String> = ACCELS
        .iter()
        .enumerate()
        .filter(|(_, (name, _, _))| report.node(&format!("/dev/demo/{name}")).kind != "missing")
        .map(|(i, _)| i.to_string())
        .collect();
    assert_eq!(seen.len(), 1, "one device from the plugin:\n{out}");
    assert_demo_granted_exactly(&report, &seen, &out);
    assert!(
        claim_owned_by(&c, "classic").is_none(),
        "no claim: the device plugin served the pod"
    );
    assert!(
        !c.dra_log()
            .lines()
            .any(|l| l.contains(devinject_dra::driver::PREPARED) && l.contains("took_us")),
        "the DRA driver prepared nothing:\n{}",
        c.dra_log()
    );
    // The driver sees the plugin's grant in the kubelet's pod-resources and keeps the device
    // off: tainted in its slice with the holding pod's name (docs/dra.md, "From the device
    // plugin to DRA").
    let held = format!("demo-{}", seen[0]);
    let taints = c.dra_beyond_ga();
    if taints {
        let taint = wait_taint_of(
            &c,
            &held,
            devinject_dra::slices::PLUGIN_HELD_TAINT,
            Some("NoSchedule"),
        );
        assert!(taint.contains("default.classic"), "{taint}");
    } else {
        // Before 1.36 the API server drops taints: the held device is left out instead.
        c.wait_resource_slices(ACCELS.len() - 1)
            .unwrap_or_else(|e| panic!("the held device left out: {e:#}"));
    }
    // A claim on the same node for that very device waits while the plugin's pod holds it.
    c.apply(&pinned_template("held-demo", DEMO_CLASS, &seen[0], None))
        .expect("template");
    c.apply(&pod("claimant", "held-demo")).expect("create pod");
    let why = unschedulable(&c, "claimant").unwrap_or_else(|e| panic!("{e:#}"));
    assert!(!pod_running(&c, "claimant"), "{why}");
    assert!(
        pod_running(&c, "classic"),
        "the plugin's pod keeps its device"
    );
    // Once that pod ends, the device is free again and the claim goes through DRA.
    delete_pod(&c, "classic");
    if taints {
        wait_taint_of(&c, &held, devinject_dra::slices::PLUGIN_HELD_TAINT, None);
    } else {
        c.wait_resource_slices(ACCELS.len())
            .unwrap_or_else(|e| panic!("the device back in the slice: {e:#}"));
    }
    let out = probe_output(&c, "claimant");
    let ids = allocated_ids(&claim_of(&c, "claimant"));
    assert_eq!(ids, [seen[0].clone()], "the device the plugin held");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
    // The way back: while the claim holds the device, the plugin lists it unhealthy (read from
    // the kubelet's pod-resources), so a pod asking the plugin for every device waits...
    let every = ACCELS.len().to_string();
    c.wait_allocatable("devinject.io/demo", &(ACCELS.len() - 1).to_string())
        .unwrap_or_else(|e| panic!("the claimed device withheld by the plugin: {e:#}"));
    c.apply(&classic_pod("every").replace(
        "devinject.io/demo: 1",
        &format!("devinject.io/demo: {every}"),
    ))
    .expect("create pod");
    let why = unschedulable(&c, "every").unwrap_or_else(|e| panic!("{e:#}"));
    assert!(pod_running(&c, "claimant"), "{why}");
    // ...and gets them all, through the plugin, once the claim's pod ends.
    delete_pod(&c, "claimant");
    let out = probe_output(&c, "every");
    let all: Vec<String> = (0..ACCELS.len()).map(|i| i.to_string()).collect();
    assert_demo_granted_exactly(&Report::parse(&out), &all, &out);
    assert!(
        claim_owned_by(&c, "every").is_none(),
        "the device plugin served the pod"
    );

    // A shared profile (`[capacity]`) is left alone by both: while the plugin's pod holds every
    // device, a claim pinned to one of them is allocated a share of it and runs beside it.
    if !c.dra_beyond_ga() {
        return;
    }
    let mut c = c;
    edit_demo_profile(&mut c, |text| {
        without_partitions(&text) + "\n[capacity]\npods = 2\n"
    });
    c.restart_plugin()
        .unwrap_or_else(|e| panic!("restart the device plugin: {e:#}"));
    c.apply(&pinned_template("shared-demo", DEMO_CLASS, "0", None))
        .expect("template");
    c.apply(&pod("sharer", "shared-demo")).expect("create pod");
    let out = probe_output(&c, "sharer");
    let ids = allocated_ids(&claim_of(&c, "sharer"));
    assert_eq!(ids, ["0"], "a share of the device the plugin's pod holds");
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
    assert!(
        pod_running(&c, "every"),
        "the plugin's pod keeps every device"
    );
    assert!(
        c.resource_slice_device("demo-0")
            .expect("the slices")
            .is_some_and(|d| d["taints"].is_null()),
        "a shared device is not tainted for the plugin's hold:\n{}",
        c.dra_log()
    );
}

#[test]
fn a_node_moved_from_the_device_plugin_to_dra_and_back_never_gives_its_device_twice() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    // One exclusive device, served by the device plugin (the driver beside it, as while a
    // DaemonSet rolls): every pod below wants that one device.
    let mut c = start_beside(
        &release,
        DraBeside::DevicePlugin,
        Shape {
            devices: 1,
            node_host: Some(NodeHost {
                make: one_device_host,
                image: |_| Ok(()),
            }),
            ..Shape::default()
        },
    );
    if !c.dra_beyond_ga() {
        // Before 1.36 a DeviceClass serves no extended resource: the move is a drain.
        return;
    }
    let holds = c.host().dir.join("holds");
    std::fs::create_dir_all(&holds).unwrap();
    let log = holds.join(HOLDS_LOG);
    c.apply(&keeps_opening(&classic_pod("first"), &holds))
        .expect("create pod");
    let out = probe_output(&c, "first");
    assert_demo_granted_exactly(&Report::parse(&out), &["0".to_owned()], &out);
    assert!(
        claim_owned_by(&c, "first").is_none(),
        "the device plugin served the first pod"
    );

    // The move: the plugin goes and the driver starts anew, with `first` running. The kubelet
    // marks a gone plugin's devices unhealthy at once, so the node's allocatable is 0 and the
    // scheduler hands pods asking for the resource to DRA; the driver, reading the kubelet's
    // grants, publishes the device tainted by the pod that holds it.
    c.stop_plugin();
    c.restart_dra_plugin()
        .unwrap_or_else(|e| panic!("start the driver again: {e:#}"));
    c.wait_allocatable("devinject.io/demo", "0")
        .unwrap_or_else(|e| panic!("the gone plugin's device unallocatable: {e:#}"));
    let taint = wait_taint_of(
        &c,
        "demo-0",
        devinject_dra::slices::PLUGIN_HELD_TAINT,
        Some("NoSchedule"),
    );
    assert!(taint.contains("default.first"), "{taint}");
    // A pod written for the plugin and a claim for the same device both wait for `first`.
    c.apply(&keeps_opening(&classic_pod("limits"), &holds))
        .expect("create pod");
    c.apply(&pinned_template("the-device", DEMO_CLASS, "0", None))
        .expect("template");
    c.apply(&keeps_opening(&pod("claimant", "the-device"), &holds))
        .expect("create pod");
    for name in ["limits", "claimant"] {
        let why = unschedulable(&c, name).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(pod_running(&c, "first"), "{name}: {why}");
    }
    // `first` ends: one of them gets the device through DRA, the other waits until it ends.
    delete_pod(&c, "first");
    let (next, last) = poll("one of the waiting pods to run", SLOW, || {
        Ok(if pod_running(&c, "limits") {
            Some(("limits", "claimant"))
        } else if pod_running(&c, "claimant") {
            Some(("claimant", "limits"))
        } else {
            None
        })
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    assert_holds_the_device_through_dra(&c, next);
    let why = unschedulable(&c, last).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        !pod_running(&c, last),
        "{last} waits while {next} holds the device: {why}"
    );
    delete_pod(&c, next);
    assert_holds_the_device_through_dra(&c, last);

    // The way back: the plugin starts again while `last`'s claim holds the device. It reads
    // the claim from the kubelet before it registers, so it never offers that device: a pod
    // asking for the resource waits whichever path serves it.
    c.restart_plugin()
        .unwrap_or_else(|e| panic!("start the device plugin again: {e:#}"));
    c.apply(&keeps_opening(&classic_pod("back"), &holds))
        .expect("create pod");
    let why = unschedulable(&c, "back").unwrap_or_else(|e| panic!("{e:#}"));
    assert!(pod_running(&c, last), "{why}");
    delete_pod(&c, last);
    let out = probe_output(&c, "back");
    assert_demo_granted_exactly(&Report::parse(&out), &["0".to_owned()], &out);
    delete_pod(&c, "back");
    // The driver goes once no claim is prepared; the plugin alone serves the node again.
    c.stop_dra_plugin();
    c.wait_allocatable("devinject.io/demo", "1")
        .unwrap_or_else(|e| panic!("the plugin's device allocatable again: {e:#}"));
    c.apply(&keeps_opening(&classic_pod("after"), &holds))
        .expect("create pod");
    let out = probe_output(&c, "after");
    assert_demo_granted_exactly(&Report::parse(&out), &["0".to_owned()], &out);
    assert!(
        claim_owned_by(&c, "after").is_none(),
        "the device plugin served the last pod"
    );
    // Every pod opened the device every 100 ms while it ran: their turns never interleaved.
    let turns = holders_in_turn(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(turns, ["first", next, last, "back", "after"]);
}

/// Asserts that pod `name` runs with the one demo device, allocated to its claim (the
/// scheduler's for a pod asking for the extended resource).
fn assert_holds_the_device_through_dra(c: &Cluster, name: &str) {
    let out = probe_output(c, name);
    let claim = claim_owned_by(c, name).unwrap_or_else(|| panic!("{name}'s claim\n{}", c.logs()));
    assert_eq!(allocated_ids(&claim), ["0"], "{name} through DRA: {claim}");
    assert_demo_granted_exactly(&Report::parse(&out), &["0".to_owned()], &out);
}

/// The file under a [`keeps_opening`] pod's host directory it appends its name to.
const HOLDS_LOG: &str = "opened";

/// The demo host with one accelerator, `accel0`.
fn one_device_host(dir: &std::path::Path) -> anyhow::Result<devinject_tests::sim::SimHost> {
    let host = devinject_tests::sim::demo_host(dir, &["demo"])?;
    for (name, _, _) in &ACCELS[1..] {
        std::fs::remove_file(host.dev_root.join("demo").join(name))?;
    }
    Ok(host)
}

/// `pod` (one of this file's pods, named `name` in its YAML) made to use its device the whole
/// time it runs: after the probe its container opens `/dev/demo/accel0` every 100 ms and, each
/// time the open succeeds, appends its name to [`HOLDS_LOG`] in the node's directory `dir`.
///
/// It ends on SIGTERM within the grace period, as a well-behaved workload does: a pod deleted
/// with a grace period of 0 is removed from the API server at once, before the kubelet has
/// stopped its containers, and its devices go to the next pod while they still run (seen
/// here: two such pods opened the device at once for 1.5 s, through either path). That is
/// Kubernetes' force deletion, which no device path can make safe.
fn keeps_opening(pod: &str, dir: &std::path::Path) -> String {
    let name = pod
        .lines()
        .find_map(|l| l.strip_prefix("  name: "))
        .expect("the pod's name");
    let opening = format!(
        "trap 'exit 0' TERM; while :; do : < /dev/demo/accel0 && echo {name} >> \
         /holds/{HOLDS_LOG}; sleep 0.1; done"
    );
    let with_volume = pod
        .replacen("exec sleep 3600", &opening, 1)
        .replacen(
            "  terminationGracePeriodSeconds: 0\n",
            &format!(
                "  terminationGracePeriodSeconds: 10\n  volumes:\n  - name: holds\n    hostPath: \
                 {{path: {}, type: Directory}}\n",
                dir.display()
            ),
            1,
        )
        .replacen(
            "    resources:\n",
            "    volumeMounts:\n    - {name: holds, mountPath: /holds}\n    resources:\n",
            1,
        );
    assert!(with_volume.contains(&opening) && with_volume.contains("mountPath: /holds"));
    with_volume
}

/// The pods of a [`HOLDS_LOG`] in the order they used the device. A name that comes back
/// after another's means two containers used it at once: it fails. An overlap shorter than
/// the 100 ms between opens can go unseen.
fn holders_in_turn(log: &str) -> Vec<String> {
    let mut turns: Vec<String> = Vec::new();
    for name in log.lines() {
        if turns.last().is_some_and(|last| last == name) {
            continue;
        }
        assert!(
            !turns.iter().any(|t| t == name),
            "{name} used the device again after another pod did, so both held it:\n{log}"
        );
        turns.push(name.to_owned());
    }
    turns
}

/// A device-plugin-style pod: the demo resource in its limits, no claim.
fn classic_pod(name: &str) -> String {
    pod(name, "unused")
        .replace(
            "  resourceClaims:\n  - name: demo\n    resourceClaimTemplateName: unused\n",
            "",
        )
        .replace(
            "    resources:\n      claims:\n      - name: demo\n",
            "    resources:\n      limits:\n        devinject.io/demo: 1\n",
        )
}

/// The ResourceClaim the scheduler made for pod `name` (owned by it), if any.
fn claim_owned_by(c: &Cluster, name: &str) -> Option<Value> {
    let claims: Value = serde_json::from_str(
        &c.kubectl(&["get", "resourceclaims", "-o", "json"])
            .expect("claims"),
    )
    .expect("JSON");
    claims["items"]
        .as_array()?
        .iter()
        .find(|cl| {
            cl["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["kind"] == "Pod" && o["name"] == name)
        })
        .cloned()
}

#[test]
fn an_admin_access_claim_gets_the_device_another_pod_holds_and_no_other() {
    let Some(release) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start(&release, None);
    // Whole devices only: the scheduler checks a partitioned device's counters for an
    // admin-access request too (k8s.io/dynamic-resource-allocation's allocator), so admin
    // access to a partitioned device another claim holds waits (docs/dra.md).
    edit_demo_profile(&mut c, |text| without_partitions(&text));
    // Device 0, chosen by its `id` attribute, held by an ordinary pod.
    let by_id = |name: &str, namespace: &str, admin: bool| {
        demo_claim_template(name, 1).replace(
            &format!("  name: {name}\n"),
            &format!("  name: {name}\n  namespace: {namespace}\n"),
        ) + &format!(
            "          adminAccess: {admin}\n          selectors:\n          - cel:\n              \
             expression: 'device.attributes[\"{DRA_DRIVER}\"].id == \"0\"'\n"
        )
    };
    c.apply(&by_id("device-0", "default", false))
        .expect("template");
    c.apply(&pod("holder", "device-0")).expect("create pod");
    let out = probe_output(&c, "holder");
    assert_eq!(allocated_ids(&claim_of(&c, "holder")), ["0"], "{out}");

    // Admin access (KEP-5018) is for namespaces an administrator marked.
    c.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ops\n  labels:\n    \
         resource.kubernetes.io/admin-access: \"true\"\n",
    )
    .expect("namespace");
    c.apply(&by_id("device-0-admin", "ops", true))
        .expect("template");
    let admin_pod = pod("monitor", "device-0-admin")
        .replace("  name: monitor\n", "  name: monitor\n  namespace: ops\n");
    c.apply(&admin_pod).expect("create pod");
    let out = poll(
        "the admin pod to run the probe",
        devinject_tests::cluster::SLOW,
        || {
            let pod: Value = serde_json::from_str(
                &c.kubectl(&["get", "pod", "-n", "ops", "monitor", "-o", "json"])?,
            )?;
            let out = c.pod_log(&pod, "main").unwrap_or_default();
            Ok(out.contains("probe-done").then_some(out))
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    // The device the spec names, though another pod holds it, and nothing else.
    assert_demo_granted_exactly(&Report::parse(&out), &["0".to_owned()], &out);
}
