//! devinject on a Kubernetes node whose runtime is CRI-O (1.36, scripts/crio-build.sh, on
//! runc 1.4, and in a second pass on crun: `DEVINJECT_CRUN`, scripts/crun-build.sh), installed
//! and removed as users do it ([`devinject_tests::cluster`] with [`Shape::crio`]):
//!
//! 1. the image built by scripts/build-image.sh, loaded into CRI-O's storage;
//! 2. `kubectl kustomize deploy/overlays/crio` (the install docs' `kubectl apply -k`) with only
//!    the test overlay (`--restart-mode=none`: no systemd here, the test restarts CRI-O as the
//!    installer's message says; `hostNetwork: true`: no CNI here);
//! 3. the init container writes CRI-O's drop-in (the `devinject` runtime handler, the shim as
//!    its `runtime_path`), the plugin serves the node's real kvm, tun and fuse devices, and the
//!    shipped examples run through the RuntimeClass and see their devices;
//! 4. a pod asking for no kvm that sets `KVM_VISIBLE_DEVICES` is refused;
//! 5. CRI-O restarts under a pod that holds its device: the pod keeps it, and a new pod is
//!    granted one afterwards;
//! 6. the uninstall of docs/uninstall.md (with the CRI-O edits it names) restores `/etc/crio`
//!    byte for byte and leaves no file of devinject on the node.
//!
//! NRI as CRI-O 1.36 has it on by default: the NRI manifests install `devinject-nri` with no
//! edit of CRI-O's configuration and no restart; the examples run on the default runtime, a
//! forgery is refused at creation, and the uninstall leaves `/etc/crio` and CRI-O as they were.
//!
//! The hook through hooks.d (`deploy/overlays/crio-hook`, `--mode=hook`): the installer writes
//! the hook file and a drop-in adding its directory to CRI-O's `hooks_dir`; after the restart
//! the examples run on the default runtime, a forgery is refused, and the uninstall restores
//! `/etc/crio` and `/etc/containers/oci/hooks.d` byte for byte.
//!
//! And CDI as CRI-O has it on by default: the device plugin in `cdi-cri` mode names the devices
//! in its Allocate answer's `cdi_devices`, the kubelet passes them in CreateContainer, and CRI-O
//! injects them from the specs `devinject-ctl cdi generate` wrote, with nothing of devinject's
//! in its configuration.
//!
//! Needs what tests/tests/cluster/cluster_install.rs needs, plus CRI-O and podman; skipped otherwise, a
//! failure under CI.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use devinject_nri::session::REGISTERED;
use devinject_tests::cluster::install::{
    api_server_reachable, assert_files_gone, delete_node_daemonset, host_network, init_output,
    log_after_new_lines, patch, pods, rollout, run_example, show_and_run_examples, test_overlay,
    workspace_file, workspace_path, Via, EXAMPLE_IMAGE, NODE_PODS, NS,
};
use devinject_tests::cluster::userns::{
    assert_mapped_and_kvm_opened, cdi_user_namespaced_pods_open_kvm, user_namespaced,
    user_namespaced_pods_ready, GroupOwnedHostKvm, OPEN_KVM,
};
use devinject_tests::cluster::{image, Cluster, Setup, Shape, CDI_CRI_ALLOCATE_MODE, NODE, SLOW};
use devinject_tests::cri::Cri;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::daemons::poll;
use devinject_tests::probe::Report;
use devinject_tests::sim::{assert_demo_granted_exactly, demo_probe_args};
use devinject_tests::skip::require;
use k8s_cri::v1::ContainerState;

/// One cluster at a time: the nodes share the host's mount points.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// The CRI-O bin dir when this machine can run a CRI-O node with the install's needs.
fn ready() -> Option<PathBuf> {
    let crio = devinject_tests::crio::ready()?;
    (devinject_tests::cluster::install::ready()
        && require(
            devinject_tests::cluster::Kubernetes::find().is_some_and(|k| !k.is_legacy()),
            "a CRI-O node needs today's Kubernetes (DEVINJECT_KUBE_BIN: scripts/kube-module-build.sh)",
        ))
    .then_some(crio)
}

fn start(crio: PathBuf, setup: Setup) -> Cluster {
    let shape = Shape {
        crio: Some(crio),
        ..Shape::default()
    };
    let c = Cluster::start_shaped(setup, &shape).unwrap_or_else(|e| panic!("cluster: {e:#}"));
    let nodes = c
        .kubectl(&["get", "nodes", "-o", "wide"])
        .unwrap_or_default();
    assert!(
        nodes.contains("cri-o://1.36"),
        "the node runs CRI-O: {nodes}"
    );
    c
}

/// What a CRI-O node of this machine differs in from the manifests' target: [`test_overlay`],
/// and no `system-node-critical` priority. The kubelet gives a critical pod's containers an
/// `oom_score_adj` of -997, which this machine refuses even to root; containerd is told to
/// clamp it (`restrict_oom_score_adj`), CRI-O has no such setting.
fn crio_overlay(manifest: &str) -> String {
    no_critical_priority(&test_overlay(manifest))
}

/// `manifest` without its `system-node-critical` priority (see [`crio_overlay`]).
fn no_critical_priority(manifest: &str) -> String {
    patch(
        manifest,
        "      priorityClassName: system-node-critical\n",
        "",
        1,
    )
}

/// `manifest`'s `times` images named as `podman load` names them on a CRI-O node (see
/// deploy/overlays/crio).
fn local_image(manifest: &str, times: usize) -> String {
    patch(
        manifest,
        "image: devinject:0.1.0\n",
        "image: localhost/devinject:0.1.0\n",
        times,
    )
}

/// Readies the node for the manifests: the image archive in CRI-O's storage, the examples'
/// image tagged, the node labelled.
fn prepare_crio_node(c: &Cluster, archive: &Path) {
    c.node()
        .crio_load(archive)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let podman = c.node().crio_podman().unwrap();
    let tagged = podman.run(&["tag", BUSYBOX, EXAMPLE_IMAGE]).unwrap();
    assert!(tagged.status.success(), "podman tag: {tagged:?}");
    let images = podman
        .run(&["images", "--format", "{{.Repository}}:{{.Tag}}"])
        .unwrap();
    eprintln!(
        "CRI-O's images:\n{}",
        String::from_utf8_lossy(&images.stdout)
    );
    c.kubectl(&["label", "node", NODE, "devinject.io/enabled=true"])
        .unwrap();
}

/// The uninstall DaemonSet as docs/uninstall.md has it edited for CRI-O: the engine and image
/// as for the install (`--runtime=crio`, the node's `/etc/crio` in place of `/etc/containerd`,
/// the image's local name), with [`crio_overlay`]'s test edits.
fn crio_uninstall() -> String {
    let uninstall = crio_overlay(&workspace_file("deploy/uninstall/daemonset.yaml"));
    let uninstall = patch(&uninstall, "--runtime=containerd", "--runtime=crio", 1);
    let uninstall = patch(
        &uninstall,
        "mountPath: /host/etc/containerd",
        "mountPath: /host/etc/crio",
        1,
    );
    let uninstall = patch(
        &uninstall,
        "path: /etc/containerd\n",
        "path: /etc/crio\n",
        1,
    );
    local_image(&uninstall, 2)
}

/// Every file and directory below `dir`, with the files' bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let rel = e.path().strip_prefix(dir).unwrap().to_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
                out.insert(rel, None);
            } else {
                out.insert(rel, Some(std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out
}

/// A pod on the RuntimeClass asking for `limits`, running `command`.
fn pod(name: &str, limits: &str, env: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         runtimeClassName: devinject\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  \
         containers:\n  - name: main\n    image: busybox:1.36\n    command: {command}\n    \
         env: [{env}]\n    resources: {{limits: {{{limits}}}}}\n"
    )
}

#[test]
fn installed_on_crio_from_the_manifests_it_injects_survives_a_restart_and_uninstalls() {
    let Some(crio) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let t = tempfile::tempdir().unwrap();
    let (archive, tag) = image::build(t.path()).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(tag, "devinject:0.1.0", "the manifests' image");
    let mut c = start(crio, Setup::DaemonSet);
    let etc = c.node().crio_etc();
    let before = tree(&etc);

    prepare_crio_node(&c, &archive);

    // Install, from the CRI-O overlay as `kubectl apply -k deploy/overlays/crio` renders it.
    let overlay = workspace_path("deploy/overlays/crio").display().to_string();
    let rendered = c
        .kubectl(&["kustomize", &overlay])
        .expect("kubectl kustomize");
    // The shim's runtime: CRI-O's default runtime's (the runc under test, or crun), as a CRI-O
    // 1.36 node has one that supports idmapped mounts. CRI-O tells the kubelet a handler serves
    // user-namespaced pods only when its runtime's `features` says so, and the shim answers
    // with its runtime's; this machine's own runc (1.1) has none.
    let runtime = devinject_tests::crio::node_runtime().unwrap();
    let manifest = patch(
        &crio_overlay(&rendered),
        "        - --restart-mode=none\n",
        &format!(
            "        - --restart-mode=none\n        - --oci-runtime={}\n",
            runtime.display()
        ),
        1,
    );
    c.apply(&manifest)
        .expect("kubectl apply -k deploy/overlays/crio");
    let install = init_output(&c, NODE_PODS, "install");
    assert!(
        install.contains("systemctl restart crio"),
        "the installer asks for a CRI-O restart:\n{install}"
    );
    let installed = tree(&etc);
    let drop_in = installed
        .iter()
        .find_map(|(p, b)| match b {
            Some(b) if p.parent() == Some(Path::new("crio.conf.d")) => {
                Some((p.clone(), String::from_utf8_lossy(b).into_owned()))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("the installer wrote a drop-in: {:?}", installed.keys()));
    eprintln!("{}:\n{}", drop_in.0.display(), drop_in.1);
    assert!(
        drop_in.1.contains("[crio.runtime.runtimes.devinject]")
            && drop_in.1.contains("/opt/devinject/"),
        "the drop-in names the devinject handler and its shim: {}",
        drop_in.1
    );
    assert_eq!(
        installed.get(Path::new("crio.conf")),
        before.get(Path::new("crio.conf")),
        "the main configuration is not edited"
    );
    restart_crio_for_the_install(&mut c);
    show_and_run_examples(&c, Via::RuntimeClass);
    if user_namespaced_pods_ready() {
        user_namespaced_pods_open_kvm(&c, Via::RuntimeClass);
    }

    // Asked for tun, sets the kvm request variable itself: refused, naming it.
    c.apply(&pod(
        "tun-forging-kvm",
        "devinject.io/tun: 1",
        "{name: KVM_VISIBLE_DEVICES, value: all}",
        "[ls, -l, /dev/kvm]",
    ))
    .expect("apply the forger");
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

    // CRI-O restarts under a pod that keeps opening its device.
    c.apply(&pod(
        "kvm-holder",
        "devinject.io/kvm: 1",
        "",
        "[sh, -c, 'while true; do if head -c 0 /dev/kvm; then echo kvm-open-ok; \
         else echo kvm-open-failed; fi; sleep 0.5; done']",
    ))
    .expect("apply the holder");
    c.wait_pod("kvm-holder", "running", |p| {
        (p["status"]["phase"] == "Running").then_some(())
    })
    .expect("the holder runs");
    let pid = c.node().crio_pid();
    c.restart_crio().expect("restart CRI-O");
    assert_ne!(c.node().crio_pid(), pid, "CRI-O restarted");
    let seen = log_after_new_lines(&c, "kvm-holder");
    assert!(
        !seen.contains("kvm-open-failed") && seen.lines().last() == Some("kvm-open-ok"),
        "the running pod kept its device through CRI-O's restart:\n{seen}"
    );
    let phase = c.pod("kvm-holder").unwrap()["status"]["phase"].clone();
    assert_eq!(phase, "Running", "the holder still runs");
    eprintln!(
        "kvm-holder: {} opens of /dev/kvm, all ok, across a CRI-O restart",
        seen.lines().count()
    );
    // After the restart a new pod is granted (tun: the holder has the node's only kvm).
    run_example(
        &c,
        "tun",
        "/dev/net/tun",
        "10, 200",
        "devinject-example-tun-after-restart",
        Via::RuntimeClass,
    );
    // Gone before the uninstall, which otherwise leaves the shim to the holder's conmon. With
    // no grace period the API object goes at once: the container is waited for on the node.
    let holder = c.pod("kvm-holder").unwrap()["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .and_then(|id| id.strip_prefix("cri-o://"))
        .expect("the holder's container id")
        .to_owned();
    c.kubectl(&["delete", "pod", "kvm-holder"]).unwrap();
    let socket = c.node().cri_socket().unwrap();
    poll("the holder's container to stop", SLOW, || {
        let status = Cri::connect(&socket)?.container_status(&holder);
        Ok(status
            .map_or(true, |s| s.state != ContainerState::ContainerRunning as i32)
            .then_some(()))
    })
    .unwrap();

    // Uninstall, as docs/uninstall.md says: the install's overlay, and the engine and image as
    // for the install (`--runtime=crio`, the node's /etc/crio in place of /etc/containerd, the
    // image's local name).
    c.kubectl(&["-n", NS, "delete", "ds/devinject"]).unwrap();
    uninstall_and_restart_crio(&mut c, &crio_uninstall());
    assert!(
        tree(&etc) == before,
        "/etc/crio is byte-identical to before the install: {:?}",
        tree(&etc).keys().collect::<Vec<_>>()
    );
    assert_files_gone(&c);
}

/// User-namespaced pods (`hostUsers: false`, so on the node's pod network) asking for kvm,
/// through the runtime class or (`via` the default runtime) NRI or the hook:
/// - the pod's root, mapped to a host id other than 0, opens `/dev/kvm` (this machine's is
///   `root 0600`, which the host's node, bound as it is, would refuse there), through the copy
///   of the node devinject gives it, owned by the ids the pod's namespace maps;
/// - with the machine's kvm made `root:36 0660`, as distributions ship it
///   ([`GroupOwnedHostKvm`]), a pod running as uid and gid 1000 (no group 36) opens it too:
///   its copy has the process's own group. Seen failing with that copy given the node's
///   group: `Permission denied`.
///
/// The host's node is untouched. On the runtime class a forger among them (asking for tun,
/// setting `KVM_VISIBLE_DEVICES`) is refused as anywhere. Seen failing on a node whose
/// kubelet's huge pages were hidden in CRI-O's own namespace: runc's sysfs mount refused
/// (`EPERM`).
fn user_namespaced_pods_open_kvm(c: &Cluster, via: Via) {
    let run = |name: &str, user: Option<u32>| {
        let mut manifest = user_namespaced(&pod(name, "devinject.io/kvm: 1", "", OPEN_KVM), user);
        if via == Via::DefaultRuntime {
            manifest = patch(&manifest, "  runtimeClassName: devinject\n", "", 1);
        }
        let host = std::fs::metadata("/dev/kvm").unwrap();
        c.apply(&manifest).expect("create pod");
        let phase = c.wait_pod_done(name).expect("pod finishes");
        let out = c.container_log(name, "main").unwrap_or_default();
        assert_eq!(phase, "Succeeded", "{name} ({via:?}): {out}\n{}", c.logs());
        assert_mapped_and_kvm_opened(name, &out, user, &format!("{via:?}"));
        eprintln!("{name} ({via:?}, uid {user:?}):\n{out}");
        c.kubectl(&["delete", "pod", name, "--wait=false"]).unwrap();
        let after = std::fs::metadata("/dev/kvm").unwrap();
        assert_eq!(
            (after.uid(), after.gid(), after.mode()),
            (host.uid(), host.gid(), host.mode()),
            "the host's /dev/kvm is as it was"
        );
    };
    run("userns-kvm", None);
    {
        let _group_owned = GroupOwnedHostKvm::regroup();
        run("userns-kvm-user", Some(1000));
    }
    if via == Via::RuntimeClass {
        c.apply(&user_namespaced(
            &pod(
                "userns-forger",
                "devinject.io/tun: 1",
                "{name: KVM_VISIBLE_DEVICES, value: all}",
                "[ls, -l, /dev/kvm]",
            ),
            None,
        ))
        .expect("apply the forger");
        let refused = c
            .wait_refusal("userns-forger")
            .expect("the user-namespaced forger is refused");
        assert!(refused.contains("KVM_VISIBLE_DEVICES"), "{refused}");
        c.kubectl(&["delete", "pod", "userns-forger", "--wait=false"])
            .unwrap();
    }
}

/// `cdi-cri` on CRI-O: the plugin's `cdi_devices` reach CRI-O through the kubelet, and CRI-O's
/// CDI (on by default) injects exactly the allocated devices into a pod on plain runc.
#[test]
fn with_cdi_devices_in_the_allocate_answer_crio_injects_exactly_the_allocated_devices() {
    let Some(crio) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start(
        crio,
        Setup::Cdi {
            containerd: PathBuf::new(),
            allocate_mode: CDI_CRI_ALLOCATE_MODE,
        },
    );
    let etc = c.node().crio_etc();
    let config = std::fs::read_to_string(etc.join("crio.conf")).unwrap();
    assert!(
        [
            "runtimes.devinject",
            "devinject-hook",
            "devinject-runtime",
            "/opt/devinject"
        ]
        .iter()
        .all(|s| !config.contains(s))
            && tree(&etc.join("crio.conf.d")).is_empty(),
        "nothing of devinject's in CRI-O's configuration: {config}"
    );
    let command = serde_json::to_string(&demo_probe_args()).unwrap();
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cdi\nspec:\n  hostNetwork: true\n  \
         restartPolicy: Never\n  automountServiceAccountToken: false\n  \
         terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    image: {BUSYBOX}\n    \
         imagePullPolicy: Never\n    command: {command}\n    \
         resources: {{limits: {{devinject.io/demo: 2}}}}\n"
    ))
    .expect("create pod");
    let phase = c.wait_pod_done("cdi").expect("pod finishes");
    let out = c.container_log("cdi", "main").unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{out}\n{}", c.logs());
    let uid = c.pod("cdi").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = c.allocated(&uid, "main", "devinject.io/demo").unwrap();
    assert_eq!(ids.len(), 2, "the kubelet allocated two devices: {ids:?}");
    let status = c.cri_container_status("cdi", "main").unwrap();
    assert!(
        !status
            .annotations
            .keys()
            .any(|k| k.starts_with("cdi.k8s.io/")),
        "no CDI annotation: {:?}",
        status.annotations
    );
    assert_demo_granted_exactly(&Report::parse(&out), &ids, &out);
    // User-namespaced pods, with the specs of `cdi generate --user-namespaces`.
    if user_namespaced_pods_ready() {
        cdi_user_namespaced_pods_open_kvm(&mut c, CDI_CRI_ALLOCATE_MODE);
    }
}

/// A pod on the default runtime that sets `KVM_VISIBLE_DEVICES=all` itself, asking the
/// scheduler for nothing, and says whether it sees `/dev/kvm`.
fn kvm_forger(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: main\n    \
         image: busybox:1.36\n    command: [sh, -c, 'if [ -e /dev/kvm ]; then echo kvm-present; \
         else echo kvm-absent; fi']\n    env: [{{name: KVM_VISIBLE_DEVICES, value: all}}]\n"
    )
}

/// CRI-O restarted as the installer asked, the DaemonSet rolled out and the node's kvm, tun and
/// fuse advertised.
fn restart_crio_for_the_install(c: &mut Cluster) {
    c.restart_crio().expect("restart CRI-O");
    rollout(c, "devinject");
    for resource in ["devinject.io/kvm", "devinject.io/tun", "devinject.io/fuse"] {
        c.wait_allocatable(resource, "1")
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
}

/// Applies the uninstall DaemonSet `manifest`, checks that its uninstaller asks for a CRI-O
/// restart, waits for it and restarts CRI-O as asked.
fn uninstall_and_restart_crio(c: &mut Cluster, manifest: &str) {
    c.apply(manifest).expect("apply the uninstall DaemonSet");
    let removed = init_output(c, "app.kubernetes.io/component=uninstall", "uninstall");
    eprintln!("uninstall:\n{removed}");
    assert!(
        removed.contains("systemctl restart crio"),
        "the uninstaller asks for a CRI-O restart:\n{removed}"
    );
    rollout(c, "devinject-uninstall");
    c.restart_crio().expect("restart CRI-O");
}

/// What refuses a forger on the default runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refuser {
    Nri,
    Hook,
}

/// A pod asking for nothing that sets `KVM_VISIBLE_DEVICES` itself is refused (`via` NRI or
/// the hook), naming the variable; the pod is then deleted. runc puts a failing hook's message
/// in its error, which the pod's status shows; crun only the hook's exit code (9, the request
/// policy: docs/hook.md), so on crun the message is read where the hook put it, the node's
/// decision log.
fn refuse_kvm_forger(c: &Cluster, via: Refuser) {
    c.apply(&kvm_forger("kvm-forger"))
        .expect("apply the forger");
    let refused = c.wait_refusal("kvm-forger").expect("the forger is refused");
    match devinject_tests::crio::crun_binary().filter(|_| via == Refuser::Hook) {
        Some(_) => {
            assert!(
                refused.contains("error executing hook") && refused.contains("(exit code: 9)"),
                "crun names the hook and its exit code: {refused}"
            );
            let uid = c.pod("kvm-forger").unwrap()["metadata"]["uid"]
                .as_str()
                .unwrap()
                .to_owned();
            let log = c
                .node()
                .in_node_ns("/run/devinject/decisions.log")
                .and_then(|p| Ok(std::fs::read_to_string(p)?))
                .unwrap_or_default();
            let entry = log
                .lines()
                .rfind(|l| l.contains("\"path\":\"hook\"") && l.contains(&uid))
                .unwrap_or_else(|| {
                    panic!("no hook entry for pod {uid} in the decision log:\n{log}")
                });
            assert!(entry.contains("KVM_VISIBLE_DEVICES"), "{entry}");
            eprintln!("kvm-forger: {refused}\ndecision log: {entry}");
        }
        None => {
            assert!(refused.contains("KVM_VISIBLE_DEVICES"), "{refused}");
            eprintln!("kvm-forger: {refused}");
        }
    }
    // Where the user looks: an Event on the pod, posted by the installed device plugin from
    // the node's decision log.
    let note = c
        .wait_pod_event("kvm-forger", "DeviceRequestRefused")
        .expect("the refusal is an Event on the pod");
    assert!(note.contains("KVM_VISIBLE_DEVICES"), "{note}");
    c.kubectl(&["delete", "pod", "kvm-forger", "--wait=false"])
        .unwrap();
}

/// NRI as CRI-O 1.36 has it by default (`enable_nri`, the default socket): the NRI manifests
/// install the plugin with no CRI-O edit and no restart, the examples run on the default
/// runtime, a forgery is refused at creation, and the uninstall leaves `/etc/crio` and CRI-O's
/// process as they were.
#[test]
fn installed_through_nri_on_crio_with_no_edit_nor_restart_it_serves_the_examples_and_uninstalls() {
    let Some(crio) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let t = tempfile::tempdir().unwrap();
    let (archive, _) = image::build(t.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let c = start(
        crio,
        Setup::DaemonSetNri {
            containerd: PathBuf::new(),
        },
    );
    let etc = c.node().crio_etc();
    let before = tree(&etc);
    let pid = c.node().crio_pid().expect("CRI-O runs");
    let untouched = |when: &str| {
        assert_eq!(
            c.node().crio_pid(),
            Some(pid),
            "CRI-O not restarted ({when})"
        );
        assert!(tree(&etc) == before, "/etc/crio as before ({when})");
    };
    prepare_crio_node(&c, &archive);

    let manifest = api_server_reachable(
        &host_network(&no_critical_priority(&local_image(
            &workspace_file("deploy/devinject-nri.yaml"),
            3,
        ))),
        c.api_port(),
    );
    c.apply(&manifest)
        .expect("kubectl apply -f deploy/devinject-nri.yaml");
    let install = init_output(&c, NODE_PODS, "install");
    assert!(
        !install.contains("ACTION NEEDED") && !install.contains("crio.conf.d"),
        "the installer configured no engine and asks for nothing:\n{install}"
    );
    rollout(&c, "devinject");
    for resource in ["devinject.io/kvm", "devinject.io/tun", "devinject.io/fuse"] {
        c.wait_allocatable(resource, "1")
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    let mut nri_log = String::new();
    poll("devinject-nri to register with CRI-O", SLOW, || {
        if let Some(pod) = pods(&c, NS, NODE_PODS).first() {
            nri_log = c.pod_log(pod, "nri").unwrap_or_default();
        }
        Ok(nri_log.contains(REGISTERED).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n--- nri\n{nri_log}\n{}", c.logs()));
    untouched("after the install");
    show_and_run_examples(&c, Via::DefaultRuntime);
    if user_namespaced_pods_ready() {
        user_namespaced_pods_open_kvm(&c, Via::DefaultRuntime);
    }
    refuse_kvm_forger(&c, Refuser::Nri);

    delete_node_daemonset(&c);
    let uninstall = host_network(&no_critical_priority(&local_image(
        &workspace_file("deploy/uninstall/daemonset.yaml"),
        2,
    )));
    c.apply(&uninstall).expect("apply the uninstall DaemonSet");
    let removed = init_output(&c, "app.kubernetes.io/component=uninstall", "uninstall");
    assert!(
        !removed.contains("ACTION NEEDED") && !removed.contains("unconfigure-"),
        "the uninstaller touched no engine:\n{removed}"
    );
    rollout(&c, "devinject-uninstall");
    assert_files_gone(&c);
    untouched("after the uninstall");
}

/// The hook through hooks.d, as CRI-O users who want an OCI hook rather than a runtime handler
/// configure it (`deploy/overlays/crio-hook`): the installer writes the hook file into the
/// node's `/etc/containers/oci/hooks.d` and a drop-in adding that directory to CRI-O's
/// `hooks_dir`; after the CRI-O restart it asks for, the examples run on the default runtime
/// (there is no RuntimeClass) and see their devices through the hook, a forged request is
/// refused, and the uninstall (with the hooks directory mounted, as docs/uninstall.md says)
/// restores `/etc/crio` and `/etc/containers/oci/hooks.d` byte for byte.
#[test]
fn installed_as_a_hooksd_hook_on_crio_it_serves_the_examples_refuses_a_forgery_and_uninstalls() {
    let Some(crio) = ready() else {
        return;
    };
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let t = tempfile::tempdir().unwrap();
    let (archive, _) = image::build(t.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let mut c = start(crio, Setup::DaemonSet);
    let etc = c.node().crio_etc();
    let hooks = c.node().oci_hooks_etc();
    let before = (tree(&etc), tree(&hooks));
    prepare_crio_node(&c, &archive);

    let overlay = workspace_path("deploy/overlays/crio-hook")
        .display()
        .to_string();
    let rendered = c
        .kubectl(&["kustomize", &overlay])
        .expect("kubectl kustomize");
    assert!(
        !rendered.contains("kind: RuntimeClass"),
        "the hook overlay ships no RuntimeClass:\n{rendered}"
    );
    c.apply(&api_server_reachable(
        &crio_overlay(&rendered),
        c.api_port(),
    ))
    .expect("kubectl apply -k deploy/overlays/crio-hook");
    let install = init_output(&c, NODE_PODS, "install");
    assert!(
        install.contains("systemctl restart crio"),
        "the installer asks for a CRI-O restart (for `hooks_dir`):\n{install}"
    );
    let hook_file = std::fs::read_to_string(hooks.join("devinject.json"))
        .unwrap_or_else(|e| panic!("the installer wrote the hook file: {e}\n{install}"));
    eprintln!("/etc/containers/oci/hooks.d/devinject.json:\n{hook_file}");
    assert!(
        hook_file.contains("/opt/devinject/") && hook_file.contains("createRuntime"),
        "the hook file runs the installed hook at createRuntime: {hook_file}"
    );
    let drop_in = std::fs::read_to_string(etc.join("crio.conf.d/99-devinject.conf"))
        .unwrap_or_else(|e| panic!("the installer wrote CRI-O's drop-in: {e}\n{install}"));
    eprintln!("crio.conf.d/99-devinject.conf:\n{drop_in}");
    assert!(
        drop_in.contains("hooks_dir") && drop_in.contains("/etc/containers/oci/hooks.d"),
        "the drop-in adds the hooks directory to CRI-O's hooks_dir: {drop_in}"
    );
    assert!(
        !drop_in.contains("runtimes.devinject"),
        "hook mode adds no runtime handler: {drop_in}"
    );
    restart_crio_for_the_install(&mut c);
    show_and_run_examples(&c, Via::DefaultRuntime);
    if user_namespaced_pods_ready() {
        user_namespaced_pods_open_kvm(&c, Via::DefaultRuntime);
    }
    refuse_kvm_forger(&c, Refuser::Hook);

    c.kubectl(&["-n", NS, "delete", "ds/devinject"]).unwrap();
    let uninstall = patch(
        &crio_uninstall(),
        "          volumeMounts:\n",
        "          volumeMounts:\n            - name: host-oci-hooks\n              \
         mountPath: /host/etc/containers/oci/hooks.d\n",
        1,
    );
    let uninstall = patch(
        &uninstall,
        "      volumes:\n",
        "      volumes:\n        - name: host-oci-hooks\n          hostPath:\n            \
         path: /etc/containers/oci/hooks.d\n            type: DirectoryOrCreate\n",
        1,
    );
    uninstall_and_restart_crio(&mut c, &uninstall);
    assert!(
        tree(&etc) == before.0,
        "/etc/crio is byte-identical to before the install: {:?}",
        tree(&etc).keys().collect::<Vec<_>>()
    );
    assert!(
        tree(&hooks) == before.1,
        "/etc/containers/oci/hooks.d is as before the install: {:?}",
        tree(&hooks).keys().collect::<Vec<_>>()
    );
    assert_files_gone(&c);
}
