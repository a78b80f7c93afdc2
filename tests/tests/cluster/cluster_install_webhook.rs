//! devinject with its admission webhook installed on a real cluster
//! ([`devinject_tests::cluster`]) the way docs/prepare.md says: `deploy/devinject-webhook.yaml`
//! (the base and the webhook) with the test overlay of `cluster_install.rs` (host network, no
//! systemd), and the self-signed bootstrap run as documented: `devinject-webhook certs`, the
//! Secret, the `caBundle` patch. The API server calls the webhook's Deployment through its
//! Service (routed to the pod's endpoint: there is no service proxy here).
//!
//! The profiles' ConfigMap is what a site would edit: the shipped kvm profile gets a prepare step
//! (`/bin/true`) with a function `vm`, friendly name `devinject.io/kvm-vm`, and loses its
//! `[capacity]` (a device with a prepare step is not shared). A pod asking for
//! `devinject.io/kvm-vm: 1` is stored asking for `devinject.io/kvm: 1` with `KVM_FUNCTION=vm`,
//! runs and sees `/dev/kvm`; an unknown name in that domain is refused at creation.
//!
//! Needs what tests/tests/cluster/cluster_install.rs needs; skipped otherwise, a failure under CI.

use devinject_tests::bins::bin;
use devinject_tests::cluster::install::{
    init_output, patch, prepare_node, ready, rollout, test_overlay, workspace_file, EXAMPLE_IMAGE,
    NS,
};
use devinject_tests::cluster::{image, Cluster, Setup};
use serde_json::{json, Value};

/// A pod of the devinject RuntimeClass asking for `limits`, showing its function variable and
/// `/dev/kvm`.
fn pod(name: &str, limits: Value) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "runtimeClassName": "devinject",
            "hostNetwork": true,
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": EXAMPLE_IMAGE,
                "command": ["/bin/sh", "-c", "echo KVM_FUNCTION=$KVM_FUNCTION; ls -l /dev/kvm"],
                "resources": {"limits": limits},
            }],
        },
    }))
    .unwrap()
}

#[test]
fn the_webhook_overlay_installs_with_its_bootstrap_and_maps_friendly_names() {
    if !ready() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (archive, _) = image::build(t.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let mut c = Cluster::start_with(Setup::DaemonSet).unwrap_or_else(|e| panic!("{e:#}"));
    prepare_node(&c, &archive);

    let manifest = test_overlay(&workspace_file("deploy/devinject-webhook.yaml"));
    // The webhook's pod on the host network too (no CNI).
    let manifest = patch(
        &manifest,
        "      serviceAccountName: devinject-webhook\n",
        "      hostNetwork: true\n      serviceAccountName: devinject-webhook\n",
        1,
    );
    // The site's profile edit: kvm gets a prepare step with a function and its friendly name.
    let manifest = patch(
        &manifest,
        "    [discovery]\n    nodes = [\"kvm\"]\n",
        "    [discovery]\n    nodes = [\"kvm\"]\n\n    [prepare]\n    command = [\"/bin/true\"]\n    \
         [[prepare.functions]]\n    id = \"vm\"\n    resource = \"devinject.io/kvm-vm\"\n",
        1,
    );
    // A device with a prepare step is not shared: the edit drops kvm's `[capacity]` too (the
    // profile would not load with both, as the installer's exit says).
    let manifest = patch(
        &manifest,
        "    [capacity]\n    pods = 110\n  nvidia-imex.toml: |\n",
        "  nvidia-imex.toml: |\n",
        1,
    );
    c.apply(&manifest)
        .expect("kubectl apply -f deploy/devinject-webhook.yaml");

    // The bootstrap, as docs/prepare.md has it.
    let certs = t.path().join("certs");
    let out = std::process::Command::new(bin("devinject-webhook"))
        .args(["certs", "--out"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let file = |name: &str| certs.join(name).display().to_string();
    c.kubectl(&[
        "-n",
        NS,
        "create",
        "secret",
        "tls",
        "devinject-webhook-tls",
        &format!("--cert={}", file("tls.crt")),
        &format!("--key={}", file("tls.key")),
    ])
    .expect("the Secret");
    let ca = std::fs::read(certs.join("ca.crt")).unwrap();
    let ca = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(ca)
    };
    c.kubectl(&[
        "patch",
        "mutatingwebhookconfiguration",
        "devinject",
        "--type=json",
        "-p",
        &json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca}])
            .to_string(),
    ])
    .expect("the caBundle patch");

    // The node: installed, containerd restarted as the installer asks, the plugin serving.
    init_output(&c, "app.kubernetes.io/component=node", "install");
    c.restart_containerd().expect("restart containerd");
    rollout(&c, "devinject");
    c.kubectl(&[
        "-n",
        NS,
        "rollout",
        "status",
        "deployment/devinject-webhook",
        "--timeout=180s",
    ])
    .unwrap_or_else(|e| {
        let pods = c
            .kubectl(&["-n", NS, "get", "pods", "-o", "yaml"])
            .unwrap_or_default();
        panic!("the webhook's rollout: {e:#}\n{pods}\n{}", c.logs())
    });
    c.wait_allocatable("devinject.io/kvm", "1")
        .unwrap_or_else(|e| panic!("{e:#}"));

    // The friendly name, mapped by the installed webhook.
    let stored = c
        .apply_through_webhook("vm", &pod("vm", json!({"devinject.io/kvm-vm": 1})))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let main = &stored["spec"]["containers"][0];
    assert_eq!(
        main["resources"]["limits"],
        json!({"devinject.io/kvm": "1"})
    );
    assert_eq!(
        main["env"],
        json!([{"name": "KVM_FUNCTION", "value": "vm"}])
    );
    let phase = c.wait_pod_done("vm").unwrap();
    let log = c.container_log("vm", "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{log}\n{}", c.logs());
    assert!(
        log.contains("KVM_FUNCTION=vm") && log.contains("10, 232") && log.contains("/dev/kvm"),
        "{log}"
    );

    let err = c
        .apply(&pod("vm2", json!({"devinject.io/kvm-vm2": 1})))
        .unwrap_err();
    assert!(
        format!("{err:#}").contains(
            "devinject: container main asks for devinject.io/kvm-vm2, which is neither a device resource nor a function devinject knows"
        ),
        "{err:#}"
    );
}
