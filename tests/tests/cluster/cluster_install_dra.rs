//! devinject installed as a DRA driver on a real Kubernetes 1.37 cluster (1.34 in the `dra` pass)
//! ([`devinject_tests::cluster`], [`Setup::DaemonSetDra`]) the way users install it, and removed
//! the same way:
//!
//! 1. the node runs containerd 2 with CDI on its default directory (`/var/run/cdi`, the node's
//!    own), nothing of devinject on the node; the image built by scripts/build-image.sh (which
//!    ships `devinject-dra`) is imported into it;
//! 2. `kubectl apply -f deploy/devinject-dra.yaml` with only `hostNetwork: true` and the API
//!    server's address patched in (no CNI, no kube-proxy here): the init container installs the
//!    files and configures no engine; the `dra` container chroots into the node's `/`,
//!    registers with the kubelet and publishes the node's real kvm, tun and fuse as
//!    ResourceSlices with the pod's own, pod-bound service account token;
//! 3. the shipped examples (`deploy/examples/{kvm,tun,fuse}.yaml`, which ask for the profiles'
//!    resources in their limits) run unchanged but for their `runtimeClassName`: the shipped
//!    DeviceClasses map those resources to DRA (KEP-5004), and each pod sees its device; a pod
//!    holding a ResourceClaim of the kvm class sees `/dev/kvm`, and its claim's CDI spec is in
//!    the node's `/var/run/cdi` while it runs and gone after;
//! 4. the shipped policy holds the driver's account to its node: with a token bound to the
//!    driver's pod, a ResourceSlice of another node is refused; with a token bound to no pod, any
//!    slice is; the account may not read Secrets; of claims it may watch them and patch the
//!    device status of its own driver's devices on its node's claims, nothing more;
//! 5. the DaemonSet deleted and the shipped uninstall DaemonSet applied, every file of devinject
//!    is gone from the node (the driver's checkpoint and its directory under the kubelet's
//!    plugins directory too, and its registration socket), and containerd's configuration is
//!    byte for byte what it was.
//!
//! Needs what tests/tests/cluster/cluster_install.rs needs, Kubernetes >= 1.34 and containerd 2
//! (scripts/runtimes-fetch.sh); skipped otherwise, a failure under CI.

use devinject_dra::registration::REGISTERED;
use devinject_tests::cluster::dra::{claim_template, device_class, ready_for_dra};
use devinject_tests::cluster::install::{
    api_server_reachable, delete_node_daemonset, files_in, host_network, init_output, pods,
    prepare_node, ready, rollout, show_and_run_examples, uninstall_touching_no_engine,
    workspace_file, workspace_path, Via, NODE_PODS, NS,
};
use devinject_tests::cluster::{image, Cluster, Setup, DEFAULT_CDI_DIR, DRA_DRIVER, NODE, SLOW};
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::daemons::poll;

/// Where [`DEFAULT_CDI_DIR`] leads on the node (`/var/run` is a link to `/run`), as a path
/// through the node's `/proc/<pid>/root`, where the link would lead to the test's own `/run`.
const NODE_CDI_DIR: &str = "/run/cdi";

/// The driver's directory under the kubelet's plugins directory: its checkpoint and socket.
const DRIVER_DIR: &str = "/var/lib/kubelet/plugins/devinject.io";
/// Where the kubelet looks for registration sockets.
const REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";

/// The manifest as shipped, but on the host network and with the API server's address as a pod
/// there reaches it (no kube-proxy serves the `kubernetes` Service's address here).
fn test_manifest(c: &Cluster) -> String {
    api_server_reachable(
        &host_network(&workspace_file("deploy/devinject-dra.yaml")),
        c.api_port(),
    )
}

/// A ResourceSlice of the driver for `node`, in a pool of its own.
fn forged_slice(node: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: forged-{node}\n\
         spec:\n  driver: devinject.io\n  nodeName: {node}\n  pool:\n    name: {node}/forged\n    \
         generation: 1\n    resourceSliceCount: 1\n  devices:\n  - name: forged-0\n"
    )
}

/// A pod holding a claim of the kvm DeviceClass, listing `/dev/kvm` and then sleeping.
fn kvm_claimant(name: &str, template: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  resourceClaims:\n  \
         - name: kvm\n    resourceClaimTemplateName: {template}\n  containers:\n  - name: main\n    \
         image: {BUSYBOX}\n    imagePullPolicy: Never\n    \
         command: [sh, -c, 'ls -l /dev/kvm; echo listed; exec sleep 3600']\n    resources:\n      \
         claims:\n      - name: kvm\n"
    )
}

#[test]
fn installed_as_a_dra_driver_it_serves_claims_and_the_examples_and_uninstalls() {
    if !ready() {
        return;
    }
    let Some(release) = ready_for_dra() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let (archive, tag) = image::build(t.path()).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(tag, "devinject:0.1.0", "the manifests' image");
    let c = Cluster::start_with(Setup::DaemonSetDra {
        containerd: release.bin.clone(),
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    let before = std::fs::read(c.containerd_config()).unwrap();
    prepare_node(&c, &archive);

    // Install.
    c.apply(&test_manifest(&c))
        .expect("kubectl apply -f deploy/devinject-dra.yaml");
    let install = init_output(&c, NODE_PODS, "install");
    eprintln!(
        "$ kubectl -n {NS} logs <pod> -c install\n{}",
        install.trim_end()
    );
    assert!(
        !install.contains("ACTION NEEDED") && !install.contains("runtime-containerd"),
        "the installer configured no engine and asks for nothing:\n{install}"
    );
    rollout(&c, "devinject");
    let pod = pods(&c, NS, NODE_PODS)
        .first()
        .cloned()
        .expect("the DaemonSet's pod");
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    let mut dra_log = String::new();
    poll("devinject-dra to register and publish", SLOW, || {
        dra_log = c.pod_log(&pod, "dra").unwrap_or_default();
        let devices = c.resource_slice_devices().unwrap_or_default();
        let published = ["kvm-", "tun-", "fuse-"]
            .iter()
            .all(|p| devices.iter().any(|(_, d)| d.starts_with(p)));
        Ok((dra_log.contains(REGISTERED) && published).then_some(()))
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\n--- the dra container's log\n{dra_log}\n{}",
            c.logs()
        )
    });
    eprintln!(
        "$ kubectl -n {NS} logs {pod_name} -c dra\n{}",
        dra_log.trim_end()
    );
    eprintln!(
        "$ kubectl get resourceslices,deviceclasses\n{}",
        c.kubectl(&["get", "resourceslices,deviceclasses"])
            .unwrap_or_default()
    );
    assert_eq!(
        c.kubectl(&["get", "runtimeclass", "-o", "name"]).unwrap(),
        "",
        "no RuntimeClass: pods run on the default runtime"
    );

    // The examples as shipped, their resources served through the DeviceClasses' mapping; before
    // 1.36 a DeviceClass serves no extended resource, so the examples wait for a device plugin
    // and only claims are served.
    if c.dra_beyond_ga() {
        show_and_run_examples(&c, Via::DefaultRuntime);
    } else {
        let example = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/kvm.yaml"),
        )
        .expect("the kvm example")
        .replace("  runtimeClassName: devinject\n", "");
        c.apply(&example).expect("apply the example");
        let why = c
            .wait_pod("devinject-example-kvm", "unschedulable", |p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|cond| cond["reason"] == "Unschedulable")
                    .and_then(|cond| cond["message"].as_str().map(str::to_owned))
            })
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert!(why.contains("Insufficient devinject.io/kvm"), "{why}");
        eprintln!("the kvm example on {}: {why}", c.kubernetes().version());
        c.kubectl(&["delete", "pod", "devinject-example-kvm", "--wait=true"])
            .expect("delete the example");
    }
    let allocatable = c
        .kubectl(&["get", "node", NODE, "-o", "jsonpath={.status.allocatable}"])
        .unwrap();
    assert!(
        !allocatable.contains("devinject.io/kvm"),
        "no device plugin advertised the resources: DRA served them ({allocatable})"
    );
    // A claim of the kvm class: the device, and its spec in the node's CDI directory.
    c.apply(&claim_template("kvm", &device_class("kvm"), 1))
        .expect("apply the claim template");
    c.apply(&kvm_claimant("kvm-claimant", "kvm"))
        .expect("apply the pod");
    let mut out = String::new();
    poll("the pod to list /dev/kvm", SLOW, || {
        out = c.container_log("kvm-claimant", "main").unwrap_or_default();
        Ok(out.contains("listed").then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}: {out}"));
    assert!(
        out.starts_with('c') && out.contains("10, 232"),
        "the claimant sees the real /dev/kvm: {out}"
    );
    let specs = files_in(&c, NODE_CDI_DIR);
    eprintln!(
        "$ ls {DEFAULT_CDI_DIR}  # on the node\n{}",
        specs.join("\n")
    );
    assert!(
        specs.iter().any(|f| f.contains("kvm")),
        "the claim's spec is in the node's CDI directory: {specs:?}"
    );
    // Within the manifests' RBAC, the driver tells the claim's device status (KEP-4817).
    let mut status = String::new();
    poll("the claim's device status", SLOW, || {
        let pod = c.pod("kvm-claimant")?;
        let claim = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        status = c.kubectl(&[
            "get",
            "resourceclaim",
            &claim,
            "-o",
            "jsonpath={.status.devices}",
        ])?;
        Ok((status.contains("\"Ready\"") && status.contains("\"profile\":\"kvm\"")).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}: {status}"));
    c.kubectl(&["delete", "pod", "kvm-claimant", "--wait=true"])
        .unwrap();
    poll("the claim's spec to go", SLOW, || {
        Ok(files_in(&c, NODE_CDI_DIR).is_empty().then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}: {:?}", files_in(&c, NODE_CDI_DIR)));

    // The account's scope: its node's slices, with a token bound to its pod; nothing else.
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let bound = c
        .kubectl(&[
            "-n",
            NS,
            "create",
            "token",
            "devinject",
            "--bound-object-kind=Pod",
            &format!("--bound-object-name={pod_name}"),
            &format!("--bound-object-uid={uid}"),
        ])
        .unwrap();
    let unbound = c
        .kubectl(&["-n", NS, "create", "token", "devinject"])
        .unwrap();
    let slice_file = t.path().join("forged.yaml");
    std::fs::write(&slice_file, forged_slice("another-node")).unwrap();
    let file = slice_file.display().to_string();
    let refused = c
        .kubectl_with_token(&bound, &["create", "-f", &file])
        .expect_err("another node's slice must be refused");
    // The error leads with kubectl's command line, token included: only the answer is shown.
    let answer = format!("{refused:#}");
    eprintln!(
        "another node's slice, with the pod's token: {}",
        answer
            .lines()
            .filter(|l| l.contains("denied"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        format!("{refused:#}").contains("may change only that node"),
        "refused by the shipped policy: {refused:#}"
    );
    std::fs::write(&slice_file, forged_slice(NODE)).unwrap();
    let refused = c
        .kubectl_with_token(&unbound, &["create", "-f", &file])
        .expect_err("a token bound to no pod must not change slices");
    assert!(
        format!("{refused:#}").contains("names no node"),
        "refused by the shipped policy: {refused:#}"
    );
    let refused = c
        .kubectl_with_token(&bound, &["-n", NS, "get", "secrets"])
        .expect_err("the account reads no Secrets");
    assert!(format!("{refused:#}").contains("forbidden"), "{refused:#}");
    // Its claims: a watch of them and, for a profile that prepares before binding, the device
    // status of its own driver's devices on claims allocated on its node (the API server's
    // granular status authorization), not on another node's nor for another driver.
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i", "-n", "default"];
        all.extend_from_slice(args);
        c.kubectl_with_token(&bound, &all).is_ok()
    };
    let claims = "resourceclaims.resource.k8s.io";
    let ours = format!("{claims}/{DRA_DRIVER}");
    assert!(can(&["watch", claims]), "watch the claims");
    assert!(
        can(&["patch", claims, "--subresource=status"]),
        "their status"
    );
    assert!(
        can(&["associated-node:patch", &ours, "--subresource=driver"]),
        "its devices' status on its node's claims"
    );
    assert!(!can(&[
        "arbitrary-node:patch",
        &ours,
        "--subresource=driver"
    ]));
    assert!(!can(&[
        "associated-node:patch",
        &format!("{claims}/gpu.example.com"),
        "--subresource=driver"
    ]));
    assert!(!can(&["update", claims]), "the claims themselves");

    // The driver kept its checkpoint of the claim it prepared.
    let kept = files_in(&c, DRIVER_DIR);
    assert!(
        kept.iter().any(|f| f == "checkpoint.json"),
        "the driver's checkpoint is on the node: {kept:?}"
    );

    // Uninstall, as docs/uninstall.md says.
    delete_node_daemonset(&c);
    uninstall_touching_no_engine(&c);
    // Nothing of the driver is left under the kubelet's directories.
    assert!(
        !c.in_node_ns(DRIVER_DIR).unwrap().exists(),
        "the driver's directory is gone: {:?}",
        files_in(&c, DRIVER_DIR)
    );
    let registry = files_in(&c, REGISTRY_DIR);
    assert!(
        !registry.iter().any(|f| f.contains("devinject")),
        "no registration socket of ours: {registry:?}"
    );
    // The node's ResourceSlices go with the driver: nothing is left for a scheduler to
    // allocate on a node that can no longer prepare it.
    poll("the node's ResourceSlices to go", SLOW, || {
        Ok(c.dra_slice_uids()?.is_empty().then_some(()))
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\nslices: {:?}\n{}",
            c.resource_slice_devices(),
            c.logs()
        )
    });
    assert!(
        std::fs::read(c.containerd_config()).unwrap() == before,
        "containerd's config.toml is byte-identical to before the install"
    );
    c.kubectl(&[
        "delete",
        "-f",
        &workspace_path("deploy/devinject-dra.yaml")
            .display()
            .to_string(),
        "--ignore-not-found",
        "--wait=false",
    ])
    .expect("the last uninstall step succeeds");
}
