//! devinject installed on a [`Cluster`] from the shipped manifests and image, as users install
//! it: the steps and checks the install tests share (tests/tests/cluster/cluster_install.rs, through the
//! runtime shim, and tests/tests/cluster/cluster_install_nri.rs, through NRI).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Cluster, NODE, SLOW};
use crate::cri_node::{BUSYBOX, K8S_NAMESPACE};
use crate::daemons::{poll, run_ok};
use crate::skip::{require, require_binary};

/// The namespace of the shipped manifests.
pub const NS: &str = "devinject-system";

/// The label of the devinject DaemonSet's pods.
pub const NODE_PODS: &str = "app.kubernetes.io/component=node";

/// The image the examples name, tagged from the test's busybox.
pub const EXAMPLE_IMAGE: &str = "docker.io/library/busybox:1.36";

/// Whether this machine can run an install test: root, the node's tools, dockerd for the
/// image, the real `/dev/kvm`, `/dev/net/tun` and `/dev/fuse`, and the Kubernetes binaries;
/// each missing one is a loud skip (a failure under CI).
pub fn ready() -> bool {
    super::ready()
        && require_binary("dockerd")
        && require_binary("docker")
        && require(
            ["/dev/kvm", "/dev/net/tun", "/dev/fuse"]
                .iter()
                .all(|d| Path::new(d).exists()),
            "needs /dev/kvm, /dev/net/tun and /dev/fuse",
        )
}

/// The path of `rel`, a file of the workspace.
pub fn workspace_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The text of `rel`, a file of the workspace.
pub fn workspace_file(rel: &str) -> String {
    let p = workspace_path(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Replaces `from` with `to` in `text`, which must hold `from` exactly `times` times: an overlay
/// that silently stops matching the shipped manifest would test something else.
pub fn patch(text: &str, from: &str, to: &str, times: usize) -> String {
    assert_eq!(
        text.matches(from).count(),
        times,
        "the test overlay expects {from:?} {times} time(s) in the manifest"
    );
    text.replace(from, to)
}

/// The one thing every node of this tier differs in from the manifests' target: no CNI, so the
/// DaemonSet's pods use the host network.
pub fn host_network(manifest: &str) -> String {
    patch(
        manifest,
        "      hostPID: true\n",
        "      hostNetwork: true\n      hostPID: true\n",
        1,
    )
}

/// The API server's address as a pod on the host network reaches it, given to every container
/// that talks to it (those given their `NODE_NAME`): no kube-proxy serves the `kubernetes`
/// Service's address here.
pub fn api_server_reachable(manifest: &str, api_port: u16) -> String {
    let from = "        env:\n        - name: NODE_NAME\n";
    assert!(
        manifest.contains(from),
        "the test overlay expects a container given its NODE_NAME"
    );
    manifest.replace(
        from,
        &format!(
            "        env:\n        - name: KUBERNETES_SERVICE_HOST\n          value: 127.0.0.1\n        \
             - name: KUBERNETES_SERVICE_PORT\n          value: \"{api_port}\"\n        - name: NODE_NAME\n"
        ),
    )
}

/// What a node with the runtime shim installed differs in: [`host_network`], and no systemd to
/// restart containerd (`--restart-mode=none`; the test restarts it).
pub fn test_overlay(manifest: &str) -> String {
    host_network(&patch(
        manifest,
        "--restart-mode=systemd",
        "--restart-mode=none",
        1,
    ))
}

/// Readies the node for the manifests: imports the image archive built by [`super::image`]
/// into the node's containerd, tags the test's busybox as the examples' image, and labels the
/// node `devinject.io/enabled=true`.
pub fn prepare_node(c: &Cluster, archive: &Path) {
    c.node_containerd()
        .import(K8S_NAMESPACE, archive)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut tag_busybox = c.node_containerd().ctr();
    tag_busybox.args(["-n", K8S_NAMESPACE, "images", "tag", BUSYBOX, EXAMPLE_IMAGE]);
    run_ok(tag_busybox).expect("tag busybox:1.36");
    c.kubectl(&["label", "node", NODE, "devinject.io/enabled=true"])
        .unwrap();
}

/// The pods of `namespace` with label `selector`, as JSON items.
pub fn pods(c: &Cluster, namespace: &str, selector: &str) -> Vec<Value> {
    let text = c
        .kubectl(&["-n", namespace, "get", "pods", "-l", selector, "-o", "json"])
        .unwrap_or_default();
    serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

/// Waits for the init container `container` of the one pod matching `selector` in [`NS`] to
/// exit 0; returns its output.
pub fn init_output(c: &Cluster, selector: &str, container: &str) -> String {
    let pod = poll(&format!("init container {container}"), SLOW, || {
        let items = pods(c, NS, selector);
        let Some(pod) = items.first() else {
            return Ok(None);
        };
        let state = &pod["status"]["initContainerStatuses"][0]["state"]["terminated"];
        if let Some(code) = state["exitCode"].as_i64() {
            assert_eq!(
                code,
                0,
                "{container} failed: {state}\n--- its output\n{}\n{}",
                c.pod_log(pod, container).unwrap_or_default(),
                c.logs()
            );
            return Ok(Some(pod.clone()));
        }
        Ok(None)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    c.pod_log(&pod, container)
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// The log of pod `pod`'s container `main` once it has written at least three lines more than
/// when this was called: a holder that keeps opening its device has gone on doing so.
pub fn log_after_new_lines(c: &Cluster, pod: &str) -> String {
    let log = || c.container_log(pod, "main").unwrap_or_default();
    let lines = log().lines().count();
    poll("new lines from the holder", SLOW, || {
        Ok((log().lines().count() > lines + 2).then_some(()))
    })
    .unwrap();
    log()
}

/// `kubectl rollout status` of DaemonSet `ds` in [`NS`]; panics with the logs when it does not
/// complete.
pub fn rollout(c: &Cluster, ds: &str) {
    c.kubectl(&[
        "-n",
        NS,
        "rollout",
        "status",
        &format!("ds/{ds}"),
        "--timeout=180s",
    ])
    .unwrap_or_else(|e| panic!("rollout of {ds}: {e:#}\n{}", c.logs()));
}

/// Asserts that the uninstall left nothing in the node's `/opt/devinject` and `/etc/devinject`.
pub fn assert_files_gone(c: &Cluster) {
    assert_eq!(
        files_in(c, "/opt/devinject"),
        Vec::<String>::new(),
        "binaries gone"
    );
    assert_eq!(
        files_in(c, "/etc/devinject"),
        Vec::<String>::new(),
        "config gone"
    );
}

/// Files under `dir` as the node sees it (none when it does not exist).
pub fn files_in(c: &Cluster, dir: &str) -> Vec<String> {
    let root = c.in_node_ns(dir).unwrap();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    out
}

/// How the example pods reach devinject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// As shipped: `runtimeClassName: devinject`, the runtime shim.
    RuntimeClass,
    /// The default runtime, adjusted by `devinject-nri` or run with the hook through hooks.d:
    /// the `runtimeClassName` line goes.
    DefaultRuntime,
}

/// The shipped examples of real host devices: name, node, `ls -l`'s numbers.
pub const EXAMPLES: [(&str, &str, &str); 3] = [
    ("kvm", "/dev/kvm", "10, 232"),
    ("tun", "/dev/net/tun", "10, 200"),
    ("fuse", "/dev/fuse", "10, 229"),
];

/// Deletes the devinject DaemonSet (`kubectl -n devinject-system delete ds/devinject`) and waits
/// until its pods are gone.
pub fn delete_node_daemonset(c: &Cluster) {
    c.kubectl(&["-n", NS, "delete", "ds/devinject"]).unwrap();
    poll("the DaemonSet's pods to go", SLOW, || {
        Ok(pods(c, NS, NODE_PODS).is_empty().then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
}

/// Runs the shipped uninstall DaemonSet, on the host network and nothing else, for an install
/// that configured no engine: its output names no engine step and asks for nothing, and every
/// file of devinject is gone from the node.
pub fn uninstall_touching_no_engine(c: &Cluster) {
    let uninstall = host_network(&workspace_file("deploy/uninstall/daemonset.yaml"));
    c.apply(&uninstall).expect("apply the uninstall DaemonSet");
    let removed = init_output(c, "app.kubernetes.io/component=uninstall", "uninstall");
    eprintln!(
        "$ kubectl -n {NS} logs <pod> -c uninstall\n{}",
        removed.trim_end()
    );
    assert!(
        !removed.contains("ACTION NEEDED") && !removed.contains("unconfigure-"),
        "the uninstaller touched no engine:\n{removed}"
    );
    rollout(c, "devinject-uninstall");
    assert_files_gone(c);
}

/// Prints what a user sees (the DaemonSet, its pods, the node's allocatable resources), then
/// runs each of [`EXAMPLES`] as `via` says.
pub fn show_and_run_examples(c: &Cluster, via: Via) {
    for args in [
        &["-n", NS, "get", "ds,pods", "-o", "wide"][..],
        &["get", "node", NODE, "-o", "jsonpath={.status.allocatable}"][..],
    ] {
        let out = c.kubectl(args).unwrap_or_default();
        eprintln!("$ kubectl {}\n{out}", args.join(" "));
    }
    for (name, node, rdev) in EXAMPLES {
        run_example(
            c,
            name,
            node,
            rdev,
            &format!("devinject-example-{name}"),
            via,
        );
    }
}

/// Runs deploy/examples/`name`.yaml as shipped but for the host network, the runtime class as
/// `via` says, and its name (`pod`): it must succeed and list `node` as a char device `rdev`.
pub fn run_example(c: &Cluster, name: &str, node: &str, rdev: &str, pod: &str, via: Via) {
    let yaml = workspace_file(&format!("deploy/examples/{name}.yaml"));
    let runtime_class = match via {
        Via::RuntimeClass => "  runtimeClassName: devinject\n",
        Via::DefaultRuntime => "",
    };
    let yaml = patch(
        &yaml,
        "spec:\n  runtimeClassName: devinject\n",
        &format!("spec:\n  hostNetwork: true\n{runtime_class}"),
        1,
    );
    let yaml = patch(
        &yaml,
        &format!("name: devinject-example-{name}\n"),
        &format!("name: {pod}\n"),
        1,
    );
    c.apply(&yaml).expect("apply the example");
    let phase = c.wait_pod_done(pod).expect("example finishes");
    let out = c.container_log(pod, "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{pod}: {out}\n{}", c.logs());
    eprintln!("$ kubectl logs {pod}\n{}", out.trim_end());
    assert!(
        out.starts_with('c') && out.contains(rdev) && out.trim_end().ends_with(node),
        "{pod} sees its device: {out}"
    );
    if via == Via::DefaultRuntime {
        assert!(
            c.pod(pod).expect("pod")["spec"]["runtimeClassName"].is_null(),
            "{pod} ran on the default runtime"
        );
    }
}

/// After an install that configured the node's containerd (`--restart-mode=none`): the
/// installer asked for a restart and changed containerd's config from `before`; restarts
/// containerd as it asks, waits for the rollout and for one of each of `resources`.
pub fn restart_and_serve(c: &mut Cluster, before: &[u8], resources: &[&str]) {
    let install = init_output(c, NODE_PODS, "install");
    assert!(
        install.contains("systemctl restart containerd"),
        "the installer asks for a containerd restart:\n{install}"
    );
    assert_ne!(
        std::fs::read(c.containerd_config()).unwrap(),
        before,
        "the installer configured containerd"
    );
    c.restart_containerd().expect("restart containerd");
    rollout(c, "devinject");
    for resource in resources {
        c.wait_allocatable(resource, "1")
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
}

/// The name of the pod [`start_kvm_holder`] starts.
pub const KVM_HOLDER: &str = "kvm-holder";

/// Starts a pod that opens `/dev/kvm` twice a second through the RuntimeClass and says each
/// time whether it could; returns once it runs.
pub fn start_kvm_holder(c: &Cluster) {
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {KVM_HOLDER}\nspec:\n  hostNetwork: true\n  \
         runtimeClassName: devinject\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  \
         containers:\n  - name: main\n    image: busybox:1.36\n    command: [sh, -c, 'while true; \
         do if head -c 0 /dev/kvm; then echo kvm-open-ok; else echo kvm-open-failed; fi; sleep 0.5; done']\n    \
         resources: {{limits: {{devinject.io/kvm: 1}}}}\n",
    ))
    .expect("apply the holder");
    c.wait_pod(KVM_HOLDER, "running", |p| {
        (p["status"]["phase"] == "Running").then_some(())
    })
    .expect("the holder runs");
}

/// Asserts that the [`start_kvm_holder`] pod opened its device every time since it was last
/// read (`through` says across what), and returns how many times.
pub fn assert_kvm_held(c: &Cluster, through: &str) -> usize {
    let seen = log_after_new_lines(c, KVM_HOLDER);
    assert!(
        !seen.contains("kvm-open-failed") && seen.lines().last() == Some("kvm-open-ok"),
        "the running pod kept its device through {through}:\n{seen}"
    );
    seen.lines().count()
}

/// Tags the node's imported `devinject:0.1.0` as `devinject:<tag>` (the same build under another
/// tag: what an upgrade test tests is the rollout over running pods, not a change of code).
pub fn retag_image(c: &Cluster, tag: &str) {
    let mut retag = c.node_containerd().ctr();
    retag.args([
        "-n",
        K8S_NAMESPACE,
        "images",
        "tag",
        "docker.io/library/devinject:0.1.0",
        &format!("docker.io/library/devinject:{tag}"),
    ]);
    run_ok(retag).unwrap_or_else(|e| panic!("tag devinject:{tag}: {e:#}"));
}

/// After the uninstall DaemonSet has been applied for an install that configured containerd:
/// the uninstaller asked for a restart; restarts containerd, and asserts its config is `before`
/// byte for byte and no file of devinject is left on the node.
pub fn uninstalled_byte_for_byte(c: &mut Cluster, before: &[u8]) {
    let removed = init_output(c, "app.kubernetes.io/component=uninstall", "uninstall");
    assert!(
        removed.contains("systemctl restart containerd"),
        "the uninstaller asks for a containerd restart:\n{removed}"
    );
    rollout(c, "devinject-uninstall");
    c.restart_containerd().expect("restart containerd");
    assert!(
        std::fs::read(c.containerd_config()).unwrap() == before,
        "containerd's config.toml is byte-identical to before the install"
    );
    assert_files_gone(c);
}
