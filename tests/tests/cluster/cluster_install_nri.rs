//! devinject installed through NRI on a real cluster ([`devinject_tests::cluster`]) the way
//! users install it, with no engine configuration edit and no engine restart, and removed the
//! same way:
//!
//! 1. the node's containerd is containerd 2 on Kubernetes 1.37 (the 1.7 release on 1.20) with NRI
//!    enabled on its default socket
//!    ([`Setup::DaemonSetNri`]), nothing of devinject on the node; the image built by
//!    scripts/build-image.sh (which ships `devinject-nri`) is imported into it;
//! 2. `kubectl apply -f deploy/devinject-nri.yaml` with only `hostNetwork: true` patched in (no
//!    CNI here): the init container installs the files and configures no engine, the `nri`
//!    container runs `devinject-nri` chrooted into the node's `/` and registers on the node
//!    containerd's NRI socket, the device plugin serves the node's real kvm, tun and fuse;
//! 3. `deploy/examples/{kvm,tun,fuse}.yaml` without their `runtimeClassName` (NRI needs none)
//!    see their device, and a pod forging `KVM_VISIBLE_DEVICES` is refused at creation;
//! 4. the DaemonSet deleted, the plugin is out of containerd at once: the same forgery starts
//!    and sees no `/dev/kvm`; the shipped uninstall DaemonSet, again only on the host network,
//!    removes every file of devinject from the node.
//!
//! From before the install to after the uninstall, containerd's `config.toml` stays byte for
//! byte the same and containerd is the same process: nothing edited it, nothing restarted it.
//!
//! Needs what tests/tests/cluster/cluster_install.rs needs, plus the node's containerd (scripts/runtimes-fetch.sh);
//! skipped otherwise, a failure under CI.

use devinject_nri::session::REGISTERED;
use devinject_tests::cluster::install::{
    delete_node_daemonset, host_network, init_output, pods, prepare_node, ready, rollout,
    show_and_run_examples, uninstall_touching_no_engine, workspace_file, workspace_path, Via,
    NODE_PODS, NS,
};
use devinject_tests::cluster::{image, ready_with_containerd, Cluster, Setup, NRI_SOCKET, SLOW};
use devinject_tests::cri_node::HANDLER;
use devinject_tests::daemons::poll;

/// A pod on the default runtime that sets `KVM_VISIBLE_DEVICES=all` itself, asking the
/// scheduler for nothing, and says whether it sees `/dev/kvm`.
fn kvm_forger(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    \
         image: busybox:1.36\n    command: [sh, -c, 'if [ -e /dev/kvm ]; then echo kvm-present; \
         else echo kvm-absent; fi; echo KVM_VISIBLE_DEVICES=$KVM_VISIBLE_DEVICES']\n    \
         env: [{{name: KVM_VISIBLE_DEVICES, value: all}}]\n"
    )
}

/// Asserts that containerd is still the process that ran before the install, with the
/// configuration it had then.
fn untouched(c: &Cluster, pid: u32, config: &[u8], when: &str) {
    assert_eq!(
        c.containerd_pid(),
        Some(pid),
        "containerd was not restarted ({when})"
    );
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "containerd runs ({when})\n{}",
        c.logs()
    );
    assert!(
        std::fs::read(c.containerd_config()).unwrap() == config,
        "containerd's config.toml is byte-identical to before the install ({when})"
    );
}

#[test]
fn installed_through_nri_with_no_engine_edit_nor_restart_it_serves_the_examples_and_uninstalls_the_same_way(
) {
    if !ready() {
        return;
    }
    let Some(release) = ready_with_containerd("1.7") else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let (archive, tag) = image::build(t.path()).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(tag, "devinject:0.1.0", "the manifests' image");
    let c = Cluster::start_with(Setup::DaemonSetNri {
        containerd: release.bin.clone(),
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("node containerd: package {}", release.version);
    let before = std::fs::read(c.containerd_config()).unwrap();
    let text = String::from_utf8_lossy(&before);
    assert!(
        text.contains(&format!("socket_path = \"{NRI_SOCKET}\""))
            && !text.contains(&format!("runtimes.{HANDLER}"))
            && !text.contains("devinject-runtime"),
        "NRI on its default socket, nothing of devinject: {text}"
    );
    let pid = c.containerd_pid().expect("containerd runs");
    prepare_node(&c, &archive);

    // Install: the rendered NRI manifest, on the host network.
    let manifest = host_network(&workspace_file("deploy/devinject-nri.yaml"));
    c.apply(&manifest)
        .expect("kubectl apply -f deploy/devinject-nri.yaml");
    let install = init_output(&c, NODE_PODS, "install");
    eprintln!(
        "$ kubectl -n {NS} logs <pod> -c install\n{}",
        install.trim_end()
    );
    assert!(
        !install.contains("ACTION NEEDED") && !install.contains("runtime-containerd"),
        "the installer configured no engine and asks for nothing:\n{install}"
    );
    untouched(&c, pid, &before, "after the installer");
    rollout(&c, "devinject");
    for resource in ["devinject.io/kvm", "devinject.io/tun", "devinject.io/fuse"] {
        c.wait_allocatable(resource, "1")
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    // devinject-nri, chrooted into the node's `/`, registered on the node containerd's socket.
    let mut nri_log = String::new();
    poll("devinject-nri to register", SLOW, || {
        if let Some(pod) = pods(&c, NS, NODE_PODS).first() {
            nri_log = c.pod_log(pod, "nri").unwrap_or_default();
        }
        Ok(nri_log.contains(REGISTERED).then_some(()))
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\n--- the nri container's log\n{nri_log}\n{}",
            c.logs()
        )
    });
    eprintln!(
        "$ kubectl -n {NS} logs <pod> -c nri\n{}",
        nri_log.trim_end()
    );
    assert_eq!(
        c.kubectl(&["get", "runtimeclass", "-o", "name"]).unwrap(),
        "",
        "no RuntimeClass: pods run on the default runtime"
    );
    untouched(&c, pid, &before, "after the rollout");
    // The examples, without their runtimeClassName, on the host network.
    show_and_run_examples(&c, Via::DefaultRuntime);
    // Asked for none, sets the request variable itself: refused at creation.
    c.apply(&kvm_forger("kvm-forger"))
        .expect("apply the forger");
    let refused = c.wait_refusal("kvm-forger").expect("the forger is refused");
    assert!(refused.contains("KVM_VISIBLE_DEVICES"), "{refused}");
    eprintln!("kvm-forger: {refused}");
    assert_ne!(
        c.pod("kvm-forger").unwrap()["status"]["phase"],
        "Succeeded",
        "the forger must not run"
    );
    untouched(&c, pid, &before, "after the pods");
    c.kubectl(&["delete", "pod", "kvm-forger", "--wait=false"])
        .unwrap();

    // Uninstall, as docs/uninstall.md says. The DaemonSet goes: the plugin is out of
    // containerd as soon as its pod has, and nothing adjusts a container any more.
    delete_node_daemonset(&c);
    c.apply(&kvm_forger("kvm-after"))
        .expect("apply the pod after the plugin");
    let phase = c.wait_pod_done("kvm-after").expect("the pod finishes");
    let out = c.container_log("kvm-after", "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "kvm-after: {out}\n{}", c.logs());
    eprintln!("$ kubectl logs kvm-after\n{}", out.trim_end());
    assert!(
        out.contains("kvm-absent") && out.contains("KVM_VISIBLE_DEVICES=all"),
        "with the plugin gone the pod starts unadjusted, without /dev/kvm: {out}"
    );
    // The shipped uninstall DaemonSet, on the host network and nothing else: the install
    // record names no engine, so it restores none and restarts none.
    uninstall_touching_no_engine(&c);
    untouched(&c, pid, &before, "after the uninstall");
    c.kubectl(&[
        "delete",
        "-f",
        &workspace_path("deploy/devinject-nri.yaml")
            .display()
            .to_string(),
        "--ignore-not-found",
        // The namespace's finalization can take minutes on a loaded node: not waited for.
        "--wait=false",
    ])
    .expect("the last uninstall step succeeds");
}
