//! Friendly device names and the prepare step on the real cluster (Kubernetes v1.20.2,
//! [`devinject_tests::cluster`]): the FPGA flow of docs/prepare.md, end to end.
//!
//! The node's demo profile gets a prepare step whose program "programs" a device by writing the
//! function into a sysfs-like file, and a friendly name, `devinject.io/demo-nlb3`, for its
//! function `nlb3`. `devinject-webhook` runs on the host with a certificate from its own
//! `certs` bootstrap, and the API server calls it through the shipped
//! MutatingWebhookConfiguration (deploy/overlays/webhook/webhook.yaml: rules, failure policy,
//! selectors as shipped), its `clientConfig` pointed at the host process by URL and its
//! `caBundle` the bootstrap's CA (this cluster has no service proxy to reach a Service).
//!
//! - A pod asking for `devinject.io/demo-nlb3: 1` is stored asking for `devinject.io/demo: 1`
//!   with `DEMO_FUNCTION=nlb3` and the functions annotation; the kubelet allocates a device, the
//!   shim runs the prepare program on exactly that device before the container starts, and the
//!   container reads `nlb3` from it.
//! - An unknown name in the friendly names' domain is refused by the API server with the
//!   webhook's message; a pod without friendly names is stored unchanged.
//! - A pod granted nothing that names a function and forges the request variable is refused by
//!   the `kubernetes` policy, and no device is programmed.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use devinject_tests::bins::bin;
use devinject_tests::cluster::{ready, Cluster};
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::daemons::Daemon;
use devinject_tests::scrape::{self, ANY_LOOPBACK_PORT};
use devinject_tests::sim::add_demo_prepare_step;
use serde_json::{json, Value};

/// `devinject-webhook` on the host with a bootstrap certificate for 127.0.0.1, registered with
/// the API server through the shipped configuration.
fn start_webhook(c: &Cluster, dir: &Path) -> Daemon {
    let certs = dir.join("certs");
    let out = Command::new(bin("devinject-webhook"))
        .args(["certs", "--name", "127.0.0.1", "--out"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(out.status.success(), "certs: {out:?}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(bin("devinject-webhook"));
    cmd.arg("serve")
        .arg("--profiles-dir")
        .arg(&c.host().profiles_dir)
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg("--tls-cert")
        .arg(certs.join("tls.crt"))
        .arg("--tls-key")
        .arg(certs.join("tls.key"))
        .arg(ANY_LOOPBACK_PORT);
    let mut webhook = Daemon::start("devinject-webhook", cmd, &dir.join("webhook.log")).unwrap();
    webhook
        .wait_ready("the webhook's port", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .unwrap();
    let ca = std::fs::read(certs.join("ca.crt")).unwrap();
    let mut config = shipped_webhook_configuration(c);
    let hook = &mut config["webhooks"][0];
    hook["clientConfig"] = json!({
        "url": format!("https://127.0.0.1:{port}/mutate"),
        "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
    });
    c.apply(&serde_json::to_string(&config).unwrap())
        .expect("the MutatingWebhookConfiguration");
    webhook
}

/// The MutatingWebhookConfiguration of deploy/overlays/webhook/webhook.yaml, as the cluster's
/// `kubectl` reads it (a client-side dry run prints each document's JSON).
fn shipped_webhook_configuration(c: &Cluster) -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/overlays/webhook/webhook.yaml");
    let text = c
        .kubectl(&[
            "create",
            "--dry-run=client",
            "-o",
            "json",
            "-f",
            &path.display().to_string(),
        ])
        .expect("kubectl reads the shipped manifest");
    // One JSON object per document, one after the other.
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|d| d.expect("kubectl's JSON"))
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .expect("the shipped configuration")
}

/// A pod of the devinject RuntimeClass running `script` in busybox with `limits`, `env`, and
/// the sysfs-like directory bound at `/sys-fpga`.
fn pod(name: &str, limits: Value, env: Value, sys: &Path, script: &str) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "runtimeClassName": "devinject",
            "hostNetwork": true,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
                "env": env,
                "resources": {"limits": limits},
                "volumeMounts": [{"name": "fpga", "mountPath": "/sys-fpga", "readOnly": true}],
            }],
            "volumes": [{"name": "fpga", "hostPath": {"path": sys, "type": "Directory"}}],
        },
    }))
    .unwrap()
}

#[test]
fn friendly_names_are_mapped_and_their_function_is_loaded_into_the_granted_device() {
    if !ready() {
        return;
    }
    let c = Cluster::start().unwrap_or_else(|e| panic!("cluster: {e:#}"));
    c.runtime_class().expect("RuntimeClass");
    let sys = add_demo_prepare_step(c.host()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _webhook = start_webhook(&c, dir.path());
    let webhook_log = dir.path().join("webhook.log");

    let granted = pod(
        "nlb3",
        json!({"devinject.io/demo-nlb3": 1}),
        json!([]),
        &sys,
        "echo DEMO_FUNCTION=$DEMO_FUNCTION; for d in /sys-fpga/*; do echo \"$d $(cat $d/function)\"; done",
    );
    let stored = c
        .apply_through_webhook("nlb3", &granted)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let main = &stored["spec"]["containers"][0];
    // For docs/prepare.md: the pod as the API server stored it.
    println!(
        "stored: {}",
        c.kubectl(&[
            "get",
            "pod",
            "nlb3",
            "-o",
            "jsonpath={.spec.containers[0].resources} {.spec.containers[0].env} {.metadata.annotations}",
        ])
        .unwrap_or_default()
    );
    assert_eq!(
        main["resources"]["limits"],
        json!({"devinject.io/demo": "1"})
    );
    assert_eq!(
        main["env"],
        json!([{"name": "DEMO_FUNCTION", "value": "nlb3"}])
    );
    assert_eq!(
        stored["metadata"]["annotations"]["devinject.io/functions"],
        "main=demo:nlb3"
    );

    let phase = c.wait_pod_done("nlb3").unwrap();
    let out = c.container_log("nlb3", "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{out}\n{}", c.logs());
    println!("container log:\n{out}");
    let uid = c.pod("nlb3").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = c.allocated(&uid, "main", "devinject.io/demo").unwrap();
    assert_eq!(ids.len(), 1, "{ids:?}");
    // The container saw, as it started, the function on its device and on no other.
    // (The log holds the runtime's own lines too, as runc passes on its hooks' stderr.)
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("DEMO_FUNCTION=") || l.starts_with("/sys-fpga/"))
        .collect();
    assert_eq!(
        lines,
        [
            "DEMO_FUNCTION=nlb3".to_owned(),
            format!("/sys-fpga/accel{} nlb3", ids[0])
        ],
        "{out}"
    );

    // An unknown friendly name is refused at creation, with the webhook's message.
    let err = c
        .apply(&pod(
            "nlb9",
            json!({"devinject.io/demo-nlb9": 1}),
            json!([]),
            &sys,
            "true",
        ))
        .unwrap_err();
    let text = format!("{err:#}");
    println!("refused: {text}");
    assert!(
        text.contains("devinject: container main asks for devinject.io/demo-nlb9, which is neither a device resource nor a function devinject knows: use one of devinject.io/demo, devinject.io/demo-nlb3"),
        "{text}"
    );
    assert!(c.pod("nlb9").is_err(), "the refused pod must not exist");

    // A pod without friendly names is stored as it was sent.
    c.apply(&pod(
        "plain",
        json!({"devinject.io/demo": 1}),
        json!([]),
        &sys,
        "true",
    ))
    .unwrap();
    let plain = c.pod("plain").unwrap();
    assert!(plain["metadata"]["annotations"]["devinject.io/functions"].is_null());
    assert_eq!(plain["spec"]["containers"][0]["env"], Value::Null);
    c.wait_pod_done("plain").unwrap();

    // The webhook's /metrics, scraped over TCP, counted each review the API server sent: the
    // mapped pod, the refusal by its reason, the unchanged pod; and timed them.
    let text = scrape::from_log(&std::fs::read_to_string(&webhook_log).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e:#}"));
    for series in [
        "devinject_webhook_reviews_total{outcome=\"patched\"}",
        "devinject_webhook_reviews_total{outcome=\"refused\"}",
        "devinject_webhook_reviews_total{outcome=\"unchanged\"}",
        "devinject_webhook_refusals_total{reason=\"unknown_resource\"}",
        "devinject_webhook_review_duration_seconds_count",
    ] {
        let value = scrape::value(&text, series).unwrap_or(0.0);
        assert!(value >= 1.0, "{series} is {value}:\n{text}");
    }
    assert!(
        !text.contains("nlb9"),
        "a resource name as a label:\n{text}"
    );

    // Granted nothing, a function and a forged request: refused by the policy, nothing loaded.
    let before: Vec<PathBuf> = std::fs::read_dir(&sys)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    c.apply(&pod(
        "forger",
        json!({}),
        json!([{"name": "DEMO_VISIBLE_DEVICES", "value": "all"}, {"name": "DEMO_FUNCTION", "value": "nlb3"}]),
        &sys,
        "true",
    ))
    .unwrap();
    let message = c.wait_refusal("forger").unwrap();
    assert!(
        message.contains("the kubelet granted it none of devinject.io/demo"),
        "{message}"
    );
    let after: Vec<PathBuf> = std::fs::read_dir(&sys)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(before, after, "no device may be programmed for the forger");
}
