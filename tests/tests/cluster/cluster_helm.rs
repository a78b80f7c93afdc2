//! devinject installed, upgraded, rolled back and removed with its Helm chart
//! (deploy/helm/devinject) on a real cluster ([`devinject_tests::cluster`]), with the real
//! `helm` built from its Go module (scripts/helm-build.sh), as docs/install.md and
//! docs/uninstall.md say:
//!
//! 1. `helm install` with only what this node differs in set as values: `hostNetwork` (no CNI
//!    here), `installer.restartMode=none` (no systemd; the test restarts containerd as the
//!    installer says) and the API server's address in `extraEnv` (no kube-proxy); the init
//!    container configures containerd, the device plugin serves the node's real kvm, tun and
//!    fuse, and a pod gets its device through the chart's RuntimeClass; with the CDI refresher
//!    on and a profile of the site's own in `allocate_mode = "cdi-annotations"`, the refresher
//!    writes its spec into the node's `/etc/cdi` and a pod on the default runtime gets the
//!    device through containerd's CDI;
//! 2. `helm upgrade --reuse-values` to another image tag rolls the node pods, and `helm
//!    rollback` to the first revision rolls them back; a pod holding its device keeps it
//!    through both;
//! 3. `helm upgrade --set installer.uninstall=true --wait` replaces the node DaemonSet with the
//!    uninstall one, which restores containerd's configuration byte for byte and removes every
//!    file of devinject; `helm uninstall` then leaves no object of the chart in the cluster.
//!
//! Needs what tests/tests/cluster/cluster_install.rs needs and helm (`DEVINJECT_HELM`, set by
//! scripts/test.sh); skipped otherwise, a failure under CI.

use devinject_tests::cluster::install::{
    assert_kvm_held, files_in, pods, prepare_node, ready, restart_and_serve, retag_image, rollout,
    run_example, start_kvm_holder, uninstalled_byte_for_byte, workspace_path, Via, KVM_HOLDER,
    NODE_PODS, NS,
};
use devinject_tests::cluster::{image, Cluster, Setup, SLOW};
use devinject_tests::daemons::poll;
use devinject_tests::skip;

const RELEASE: &str = "devinject";

/// The images of the node pods' containers, init containers first.
fn node_images(c: &Cluster) -> Vec<String> {
    pods(c, NS, NODE_PODS)
        .iter()
        .flat_map(|p| {
            let spec = &p["spec"];
            let list = |key: &str| spec[key].as_array().cloned().unwrap_or_default();
            list("initContainers")
                .into_iter()
                .chain(list("containers"))
                .filter_map(|c| c["image"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `helm upgrade` of the release with its values kept but for `set`.
fn upgrade(c: &Cluster, chart: &str, set: &str) {
    c.helm(&[
        "upgrade",
        RELEASE,
        chart,
        "--namespace",
        NS,
        "--reuse-values",
        "--set",
        set,
    ])
    .unwrap_or_else(|e| panic!("helm upgrade --set {set}: {e:#}"));
}

/// Waits until every node pod runs `image` only and the DaemonSet has rolled out.
fn rolled_to(c: &Cluster, image: &str) {
    poll(&format!("the node pods on {image}"), SLOW, || {
        let images = node_images(c);
        Ok((!images.is_empty() && images.iter().all(|i| i == image)).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    rollout(c, "devinject");
}

#[test]
fn installed_upgraded_rolled_back_and_uninstalled_with_helm() {
    if !ready()
        || !skip::require(
            std::env::var_os("DEVINJECT_HELM").is_some(),
            "needs helm in DEVINJECT_HELM (scripts/helm-build.sh builds it; scripts/test.sh sets it)",
        )
    {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (archive, tag) = image::build(t.path()).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(tag, "devinject:0.1.0", "the chart's appVersion image");
    let mut c = Cluster::start_with(Setup::DaemonSet).unwrap_or_else(|e| panic!("{e:#}"));
    let before = std::fs::read(c.containerd_config()).unwrap();
    prepare_node(&c, &archive);
    let chart = workspace_path("deploy/helm/devinject")
        .display()
        .to_string();
    let api_port = c.api_port().to_string();

    // Install, with the CDI refresher and a profile of the site's own that the device plugin
    // serves through CDI: tun again, as `devinject.io/tun-cdi`.
    let values = t.path().join("values.yaml");
    std::fs::write(
        &values,
        format!(
            "hostNetwork: true\ninstaller:\n  restartMode: none\nextraEnv:\n\
             - name: KUBERNETES_SERVICE_HOST\n  value: \"127.0.0.1\"\n\
             - name: KUBERNETES_SERVICE_PORT\n  value: \"{api_port}\"\n\
             cdiRefresher:\n  enabled: true\nextraProfiles:\n  tun-cdi.toml: |\n    \
             name = \"tun-cdi\"\n    resource = \"devinject.io/tun-cdi\"\n    \
             allocate_mode = \"cdi-annotations\"\n    [discovery]\n    nodes = [\"net/tun\"]\n"
        ),
    )
    .unwrap();
    let values = values.display().to_string();
    let installed = c
        .helm(&[
            "install",
            RELEASE,
            &chart,
            "--namespace",
            NS,
            "--create-namespace",
            "--values",
            &values,
        ])
        .unwrap_or_else(|e| panic!("helm install: {e:#}"));
    eprintln!("$ helm install {RELEASE} deploy/helm/devinject ...\n{installed}");
    restart_and_serve(
        &mut c,
        &before,
        &[
            "devinject.io/kvm",
            "devinject.io/tun",
            "devinject.io/fuse",
            "devinject.io/tun-cdi",
        ],
    );
    run_example(
        &c,
        "tun",
        "/dev/net/tun",
        "10, 200",
        "devinject-example-tun",
        Via::RuntimeClass,
    );
    // Through CDI: the plugin answers with a CDI name, which containerd resolves in the spec
    // the refresher wrote into the node's /etc/cdi; the pod runs on the default runtime.
    poll("the refresher's spec of tun-cdi", SLOW, || {
        Ok(files_in(&c, "/etc/cdi")
            .iter()
            .any(|f| f.contains("tun-cdi"))
            .then_some(()))
    })
    .unwrap_or_else(|e| {
        let pod = pods(&c, NS, NODE_PODS)
            .into_iter()
            .next()
            .unwrap_or_default();
        let log = c.pod_log(&pod, "cdi-refresher");
        panic!("{e:#}: the refresher says {log:?}\n{pod:#}")
    });
    c.apply(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: tun-through-cdi\nspec:\n  hostNetwork: true\n  \
         restartPolicy: Never\n  containers:\n  - name: main\n    image: busybox:1.36\n    \
         command: [ls, -l, /dev/net/tun]\n    resources: {limits: {devinject.io/tun-cdi: 1}}\n",
    )
    .expect("apply the CDI pod");
    let phase = c
        .wait_pod_done("tun-through-cdi")
        .expect("the CDI pod ends");
    let seen = c
        .container_log("tun-through-cdi", "main")
        .unwrap_or_default();
    assert!(
        phase == "Succeeded" && seen.contains("10, 200"),
        "the pod sees /dev/net/tun ({phase}): {seen}\n{}",
        c.logs()
    );
    eprintln!("$ kubectl logs tun-through-cdi\n{}", seen.trim_end());

    // A pod that keeps opening its device, through the upgrade and the rollback.
    start_kvm_holder(&c);

    // Upgrade: another image tag (the same build: what is tested is helm's rollout over
    // running pods), every other value kept.
    retag_image(&c, "0.1.1");
    upgrade(&c, &chart, "image.tag=0.1.1");
    rolled_to(&c, "devinject:0.1.1");

    // Rollback to the install's revision.
    c.helm(&["rollback", RELEASE, "1", "--namespace", NS])
        .unwrap_or_else(|e| panic!("helm rollback: {e:#}"));
    rolled_to(&c, "devinject:0.1.0");
    let history = c
        .helm(&["history", RELEASE, "--namespace", NS])
        .unwrap_or_else(|e| panic!("helm history: {e:#}"));
    eprintln!("$ helm history {RELEASE}\n{history}");
    assert!(
        history.lines().count() == 4 && history.contains("Rollback to 1"),
        "install, upgrade and rollback are three revisions:\n{history}"
    );
    assert_kvm_held(&c, "the upgrade and the rollback");
    c.kubectl(&["delete", "pod", KVM_HOLDER, "--wait=false"])
        .unwrap();

    // Uninstall, as docs/uninstall.md says for the chart.
    upgrade(&c, &chart, "installer.uninstall=true");
    uninstalled_byte_for_byte(&mut c, &before);
    poll(
        "the node DaemonSet's pods to go with the upgrade",
        SLOW,
        || Ok(pods(&c, NS, NODE_PODS).is_empty().then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    c.helm(&["uninstall", RELEASE, "--namespace", NS, "--wait"])
        .unwrap_or_else(|e| panic!("helm uninstall: {e:#}"));
    let left = c
        .kubectl(&[
            "get",
            "runtimeclass,clusterrole,clusterrolebinding,daemonset,configmap,serviceaccount",
            "-A",
            "-l",
            "app.kubernetes.io/managed-by=Helm",
            "-o",
            "name",
        ])
        .unwrap();
    assert_eq!(left, "", "helm uninstall leaves no object of the chart");
    assert_eq!(
        c.helm(&["list", "--namespace", NS, "-q"]).unwrap(),
        "",
        "no release is left"
    );
}
