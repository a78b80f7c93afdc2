//! devinject installed on a real cluster ([`devinject_tests::cluster`]) the way users install
//! it, and removed the same way:
//!
//! 1. the image built by scripts/build-image.sh, imported into the node's containerd;
//! 2. `kubectl apply -f deploy/devinject.yaml` with only a test overlay for what this node differs
//!    in: `--restart-mode=none` (no systemd here; the test restarts containerd as the installer's
//!    message says) and `hostNetwork: true` (no CNI here);
//! 3. the init container configures the node's containerd, the plugin container serves the
//!    node's real kvm, tun and fuse devices (the host's `/dev` at `/host/dev`), and `kubectl
//!    rollout status` completes with the readiness probe passing;
//! 4. every example in deploy/examples for a device this machine has runs unchanged but for
//!    `hostNetwork` and sees its device; a pod asking for none that sets the request variable is
//!    refused;
//! 5. the uninstall of docs/uninstall.md restores containerd's configuration byte for byte and
//!    leaves no file of devinject on the node.
//!
//! Needs what tests/tests/cluster/cluster.rs needs, plus dockerd and the real /dev/kvm, /dev/net/tun and
//! /dev/fuse; skipped otherwise, a failure under CI.

use devinject_tests::cluster::install::{
    api_server_reachable, assert_kvm_held, prepare_node, ready, restart_and_serve, retag_image,
    rollout, run_example, show_and_run_examples, start_kvm_holder, test_overlay,
    uninstalled_byte_for_byte, workspace_file, workspace_path, Via, KVM_HOLDER, NODE_PODS, NS,
};
use devinject_tests::cluster::{image, Cluster, Setup};

#[test]
fn installed_from_the_manifests_it_serves_the_examples_and_uninstalls_byte_for_byte() {
    if !ready() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (archive, tag) = image::build(t.path()).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(tag, "devinject:0.1.0", "the manifests' image");
    let mut c = Cluster::start_with(Setup::DaemonSet).unwrap_or_else(|e| panic!("{e:#}"));
    let before = std::fs::read(c.containerd_config()).unwrap();
    prepare_node(&c, &archive);

    // Install.
    let manifest = api_server_reachable(
        &test_overlay(&workspace_file("deploy/devinject.yaml")),
        c.api_port(),
    );
    c.apply(&manifest)
        .expect("kubectl apply -f deploy/devinject.yaml");
    restart_and_serve(
        &mut c,
        &before,
        &["devinject.io/kvm", "devinject.io/tun", "devinject.io/fuse"],
    );
    show_and_run_examples(&c, Via::RuntimeClass);
    // Asked for none, sets the request variable itself: refused.
    c.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kvm-forger\nspec:\n  hostNetwork: true\n  \
         runtimeClassName: devinject\n  restartPolicy: Never\n  containers:\n  - name: main\n    \
         image: busybox:1.36\n    command: [ls, -l, /dev/kvm]\n    \
         env: [{name: KVM_VISIBLE_DEVICES, value: all}]\n",
    )
    .expect("apply the forger");
    let refused = c.wait_refusal("kvm-forger").expect("the forger is refused");
    assert!(refused.contains("KVM_VISIBLE_DEVICES"), "{refused}");
    eprintln!("kvm-forger: {refused}");
    // Where the user looks: an Event on the pod, posted by the device plugin with the token and
    // the ClusterRole the manifests give it.
    let note = c
        .wait_pod_event("kvm-forger", "DeviceRequestRefused")
        .expect("the refusal is an Event on the pod");
    assert!(note.contains("KVM_VISIBLE_DEVICES"), "{note}");
    // Granted tun, forges kvm too: refused, naming the forged variable, not the granted one.
    c.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: tun-forging-kvm\nspec:\n  hostNetwork: true\n  \
         runtimeClassName: devinject\n  restartPolicy: Never\n  containers:\n  - name: main\n    \
         image: busybox:1.36\n    command: [ls, -l, /dev/kvm, /dev/net/tun]\n    \
         env: [{name: KVM_VISIBLE_DEVICES, value: all}]\n    \
         resources: {limits: {devinject.io/tun: 1}}\n",
    )
    .expect("apply the pod granted tun forging kvm");
    let refused = c
        .wait_refusal("tun-forging-kvm")
        .expect("the forged kvm request is refused");
    assert!(
        refused.contains("KVM_VISIBLE_DEVICES") && !refused.contains("TUN_VISIBLE_DEVICES"),
        "the refusal names the forged variable only: {refused}"
    );
    eprintln!("tun-forging-kvm: {refused}");
    c.kubectl(&["delete", "pod", "tun-forging-kvm", "--wait=false"])
        .unwrap();

    // A pod that keeps opening its device, across the next two steps.
    start_kvm_holder(&c);
    let config_installed = std::fs::read(c.containerd_config()).unwrap();

    // The plugin pod goes (evicted, crashed): the DaemonSet makes a new one, whose installer
    // finds the node installed, and whose plugin registers again: a new pod is granted (tun:
    // the holder has the node's only kvm).
    c.kubectl(&["-n", NS, "delete", "pod", "-l", NODE_PODS, "--wait=true"])
        .unwrap();
    rollout(&c, "devinject");
    assert!(
        std::fs::read(c.containerd_config()).unwrap() == config_installed,
        "a second install changes nothing"
    );
    run_example(
        &c,
        "tun",
        "/dev/net/tun",
        "10, 200",
        "devinject-example-tun-again",
        Via::RuntimeClass,
    );

    // An upgrade: the DaemonSet rolls to another image tag (the same build: what is tested is
    // the rollout over running pods, not a change of code).
    retag_image(&c, "0.1.1");
    c.kubectl(&[
        "-n",
        NS,
        "set",
        "image",
        "ds/devinject",
        "install=devinject:0.1.1",
        "device-plugin=devinject:0.1.1",
    ])
    .unwrap();
    rollout(&c, "devinject");
    let images = c
        .kubectl(&[
            "-n",
            NS,
            "get",
            "pods",
            "-l",
            NODE_PODS,
            "-o",
            "jsonpath={.items[*].spec.containers[*].image}",
        ])
        .unwrap();
    assert_eq!(images, "devinject:0.1.1", "the upgrade rolled out");
    // The holder kept its device through both: its latest lines still open it.
    let opens = assert_kvm_held(&c, "the plugin's restart and the upgrade");
    eprintln!(
        "kvm-holder: {opens} opens of /dev/kvm, all ok, across a plugin restart and an upgrade"
    );
    c.kubectl(&["delete", "pod", KVM_HOLDER, "--wait=false"])
        .unwrap();

    // Uninstall, as docs/uninstall.md says (with the same overlay).
    c.kubectl(&["-n", NS, "delete", "ds/devinject"]).unwrap();
    let uninstall = test_overlay(&workspace_file("deploy/uninstall/daemonset.yaml"));
    c.apply(&uninstall).expect("apply the uninstall DaemonSet");
    uninstalled_byte_for_byte(&mut c, &before);
    c.kubectl(&[
        "delete",
        "-f",
        &workspace_path("deploy/devinject.yaml")
            .display()
            .to_string(),
        "--ignore-not-found",
        // The namespace's finalization can take minutes on a loaded node: not waited for.
        "--wait=false",
    ])
    .expect("the last uninstall step succeeds");
}
