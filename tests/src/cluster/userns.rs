//! User-namespaced pods (`hostUsers: false`) on the cluster: the manifests, and what every
//! path that serves them must give them (tests/tests/cluster/cluster.rs for the runtime class,
//! tests/tests/cluster/cluster_engine_paths.rs for NRI).

use crate::probe::Report;
use crate::sim::assert_demo_granted_exactly;

use super::{cni_plugins, Cluster, Kubernetes};
use crate::skip::require;

/// Whether pods may leave the host network on Kubernetes 1.37 ([`cni_plugins`] built), as a
/// user-namespaced pod must; says what is missing otherwise ([`crate::skip`]). `false` without a
/// word on the 1.20 compatibility release, which has no `hostUsers`.
pub fn user_namespaced_pods_ready() -> bool {
    if Kubernetes::find().is_some_and(|k| k.is_legacy()) {
        eprintln!("Kubernetes 1.20 has no hostUsers: no user-namespaced pods on it");
        return false;
    }
    require(
        cni_plugins().is_some(),
        "needs CNI's loopback, ptp and host-local plugins for pods off the host network \
         (DEVINJECT_CNI_BIN=$(scripts/cni-build.sh))",
    )
}

/// Pod manifest `pod` (one container `main`, on the host network) made user-namespaced:
/// `hostUsers: false` in place of `hostNetwork: true` (the two exclude each other; the pod gets
/// a network of its own, [`super::pod_network`]), its container running as `user` (uid and
/// gid; the image's root when `None`).
pub fn user_namespaced(pod: &str, user: Option<u32>) -> String {
    assert!(
        pod.contains("  hostNetwork: true\n") && pod.contains("  containers:\n  - name: main\n"),
        "not a host-network pod with one container main:\n{pod}"
    );
    let security = user
        .map(|id| format!("\n    securityContext: {{runAsUser: {id}, runAsGroup: {id}}}"))
        .unwrap_or_default();
    pod.replace("  hostNetwork: true\n", "  hostUsers: false\n")
        .replace(
            "  containers:\n  - name: main\n",
            &format!("  containers:\n  - name: main{security}\n"),
        )
}

/// A shell line printing who the container's process is, as it sees itself: `uid <id -u> gid
/// <id -g>`, then `uidmap <its uid map>`; [`assert_user_namespaced`] reads it.
pub const WHO_AM_I: &str = "echo uid $(id -u) gid $(id -g); echo uidmap $(cat /proc/self/uid_map)";

/// The demo probe's arguments `probe`, run after [`WHO_AM_I`]'s lines.
pub fn after_uid_map(probe: Vec<String>) -> Vec<String> {
    let mut command: Vec<String> = [
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        format!("{WHO_AM_I}; exec \"$@\""),
        "sh".to_owned(),
    ]
    .into();
    command.extend(probe);
    command
}

/// Asserts, from the output `out` of pod `name`'s [`WHO_AM_I`], what its process saw inside:
/// it runs as `user` (uid and gid; root when `None`), and in a user namespace of its own, whose
/// root is a host id other than 0 and whose range holds `user`. Not what the manifest asked:
/// what the runtime made. `ctx` is shown on failure.
pub fn assert_user_namespaced(name: &str, out: &str, user: Option<u32>, ctx: &str) {
    let line = |prefix: &str| -> &str {
        out.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("{name}: no `{prefix}` line ({ctx}): {out}"))
    };
    let id = user.unwrap_or(0);
    assert_eq!(
        line("uid "),
        format!("{id} gid {id}"),
        "{name}: `id -u` and `id -g` inside ({ctx}): {out}"
    );
    let map: Vec<u64> = line("uidmap ")
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    assert!(
        map.len() == 3 && map[0] == 0 && map[1] != 0 && u64::from(id) < map[2],
        "{name}: the container's root maps to a host id other than 0, its range holding uid \
         {id} ({ctx}): {out}"
    );
}

/// Makes the manifest of pod `name` asking for `devices` demo devices, with `env` set, running
/// as `user` (the image's root when `None`).
pub type PodMaker = dyn Fn(&str, u32, &[(&str, &str)], Option<u32>) -> String;

/// User-namespaced pods asking the device plugin's `resource` for demo devices, made by
/// `pod(name, devices, env, user)` (a [`user_namespaced`] pod running [`after_uid_map`] and the
/// demo probe): the kubelet gives each its own range of host ids, and a root and a uid 1000 pod
/// open exactly the two devices the kubelet allocated (the host's nodes, bound as they are,
/// would be owned by nobody there). The request policy holds as before: a forger setting the
/// request variable with no device asked for gets nothing, refused with the policy's message.
pub fn user_namespaced_pods_get_theirs_and_forgers_nothing(
    c: &Cluster,
    resource: &str,
    pod: &PodMaker,
) {
    for (name, user) in [("userns-root", None), ("userns-user", Some(1000))] {
        c.apply(&pod(name, 2, &[], user)).expect("create pod");
        let phase = c.wait_pod_done(name).expect("pod finishes");
        let out = c.container_log(name, "main").unwrap_or_default();
        assert_eq!(phase, "Succeeded", "{name}: {out}\n{}", c.logs());
        let manifest = c.pod(name).unwrap();
        assert_eq!(manifest["spec"]["hostUsers"], false, "{manifest:#}");
        let uid = manifest["metadata"]["uid"].as_str().unwrap().to_owned();
        // A user namespace of the kubelet's choosing: the container's root is not the host's.
        assert_user_namespaced(name, &out, user, resource);
        let ids = c.allocated(&uid, "main", resource).unwrap();
        assert_eq!(
            ids.len(),
            2,
            "{name}: the kubelet allocated two devices: {ids:?}"
        );
        assert_demo_granted_exactly(&Report::parse(&out), &ids, &format!("{name}: {out}"));
    }
    c.apply(&pod(
        "userns-forger",
        0,
        &[("DEMO_VISIBLE_DEVICES", "all")],
        None,
    ))
    .expect("create pod");
    let message = c
        .wait_refusal("userns-forger")
        .expect("the forged request is refused");
    assert!(
        message.contains(&format!("the kubelet granted it none of {resource}")),
        "{message}"
    );
}

/// The group a group-only node of [`machine_node`] is `0660` of, as distributions make kvm's:
/// one no pod's process has.
pub const KVM_GROUP: u32 = 36;

/// The machine's `/dev/kvm` made `root:`[`KVM_GROUP`] `0660`, as distributions ship it, while
/// this lives, for a path that serves the host's own node (a DaemonSet's device plugin with the
/// runtime class, the hook or NRI); its owner, group and mode as they were once dropped. The
/// change widens nothing: group 36 is one no process of the machine has.
pub struct GroupOwnedHostKvm {
    uid: u32,
    gid: u32,
    mode: u32,
}

impl GroupOwnedHostKvm {
    const NODE: &'static str = "/dev/kvm";

    /// Regroups the machine's `/dev/kvm`; panics where it cannot.
    pub fn regroup() -> Self {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(Self::NODE)
            .unwrap_or_else(|e| panic!("{}: {e} (the machine must have it)", Self::NODE));
        let was = Self {
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode() & 0o7777,
        };
        std::os::unix::fs::chown(Self::NODE, Some(0), Some(KVM_GROUP)).expect("chown /dev/kvm");
        std::fs::set_permissions(Self::NODE, std::fs::Permissions::from_mode(0o660))
            .expect("chmod /dev/kvm");
        was
    }
}

impl Drop for GroupOwnedHostKvm {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let owner = std::os::unix::fs::chown(Self::NODE, Some(self.uid), Some(self.gid));
        let mode = std::fs::set_permissions(Self::NODE, std::fs::Permissions::from_mode(self.mode));
        if let Err(e) = owner.and(mode) {
            eprintln!(
                "restoring {} to {}:{} {:o}: {e}",
                Self::NODE,
                self.uid,
                self.gid,
                self.mode
            );
        }
    }
}

/// Makes `dev_root/<dev>` a node with the numbers of the machine's `/dev/<dev>` (so opening it
/// opens the kernel's device) and returns them: `0666`, or with `group_only` `root:`
/// [`KVM_GROUP`] `0660`, as distributions make kvm.
pub fn machine_node(dev_root: &std::path::Path, dev: &str, group_only: bool) -> (u32, u32) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    let real = std::path::Path::new("/dev").join(dev);
    let meta = std::fs::metadata(&real)
        .unwrap_or_else(|e| panic!("{}: {e} (the machine must have it)", real.display()));
    let (major, minor) = (
        nix::sys::stat::major(meta.rdev()) as u32,
        nix::sys::stat::minor(meta.rdev()) as u32,
    );
    let node = dev_root.join(dev);
    std::fs::create_dir_all(node.parent().expect("parent")).expect("mkdir");
    crate::sim::mknod(&node, major, minor, "0666").expect("mknod");
    if group_only {
        std::os::unix::fs::chown(&node, Some(0), Some(KVM_GROUP)).expect("chown");
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o660)).expect("chmod");
    }
    (major, minor)
}

/// The CDI path (`c` started with [`super::Setup::Cdi`] in `allocate_mode`) serving a
/// user-namespaced pod: the machine's kvm (its numbers, `root:36 0660` in the node's device
/// root) and the shipped kvm profile, the node's specs written again by `devinject-ctl cdi
/// generate --user-namespaces`, and the device plugin restarted to serve them. A root and a
/// uid 1000 `hostUsers: false` pod asking for `devinject.io/kvm` on the default runtime open
/// it: the runtime binds the host's node, owned by nobody in the namespace, and each device's
/// finish step gives the container a copy owned by the ids it maps, with the process's own
/// group where it lacks the node's.
pub fn cdi_user_namespaced_pods_open_kvm(c: &mut Cluster, allocate_mode: &str) {
    use std::os::unix::fs::MetadataExt;

    let host = c.host().clone();
    let node = host.dev_root.join("kvm");
    machine_node(&host.dev_root, "kvm", true);
    let profile = host.profiles_dir.join("kvm.toml");
    std::fs::copy(crate::sim::shipped_profiles().join("kvm.toml"), &profile)
        .expect("copy the shipped kvm profile");
    super::node::set_allocate_mode(&host.profiles_dir, allocate_mode).expect("allocate mode");
    let report =
        crate::cri_node::cdi_generate_with(&host, &c.cdi_spec_dir(), &["--user-namespaces"])
            .unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("{report}");
    c.restart_plugin().unwrap_or_else(|e| panic!("{e:#}"));
    c.wait_allocatable("devinject.io/kvm", "1")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    for (name, user) in [("cdi-userns-root", None), ("cdi-userns-user", Some(1000))] {
        let security = user
            .map(|id| format!("\n    securityContext: {{runAsUser: {id}, runAsGroup: {id}}}"))
            .unwrap_or_default();
        c.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostUsers: false\n  \
             restartPolicy: Never\n  automountServiceAccountToken: false\n  \
             terminationGracePeriodSeconds: 0\n  containers:\n  - name: main{security}\n    \
             image: {image}\n    imagePullPolicy: Never\n    \
             command: {OPEN_KVM}\n    \
             resources: {{limits: {{devinject.io/kvm: 1}}}}\n",
            image = crate::cri_node::BUSYBOX,
        ))
        .expect("create pod");
        let phase = c.wait_pod_done(name).expect("pod finishes");
        let out = c.container_log(name, "main").unwrap_or_default();
        assert_eq!(phase, "Succeeded", "{name}: {out}\n{}", c.logs());
        assert_mapped_and_kvm_opened(name, &out, user, &format!("CDI:\n{report}"));
        c.kubectl(&["delete", "pod", name]).expect("delete pod");
    }
    let after = std::fs::metadata(&node).unwrap();
    assert_eq!(
        (after.uid(), after.gid(), after.mode() & 0o7777),
        (0, KVM_GROUP, 0o660),
        "the node's kvm is as it was"
    );
}

/// A container command (YAML flow sequence) printing [`WHO_AM_I`]'s lines and, when it can
/// open `/dev/kvm`, `kvm-open-ok`; [`assert_mapped_and_kvm_opened`] reads its output.
pub const OPEN_KVM: &str = "[sh, -c, 'echo uid $(id -u) gid $(id -g); \
                            echo uidmap $(cat /proc/self/uid_map); ls -ln /dev/kvm; \
                            head -c 0 /dev/kvm && echo kvm-open-ok']";

/// Asserts that pod `name`'s [`OPEN_KVM`] output `out` shows it running as `user` in a user
/// namespace of its own ([`assert_user_namespaced`]) and `/dev/kvm` opened; `ctx` is shown on
/// failure.
pub fn assert_mapped_and_kvm_opened(name: &str, out: &str, user: Option<u32>, ctx: &str) {
    assert_user_namespaced(name, out, user, ctx);
    assert!(
        out.lines().any(|l| l == "kvm-open-ok"),
        "{name} opens /dev/kvm ({ctx}): {out}"
    );
}

#[cfg(test)]
mod tests {
    use super::assert_user_namespaced;

    /// What a uid 1000 container of a namespace mapped at host id 65536 prints.
    const MAPPED: &str = "uid 1000 gid 1000\nuidmap 0 65536 65536\nnode /dev/kvm c 10:232\n";

    #[test]
    fn a_user_namespaced_process_is_seen_from_inside() {
        assert_user_namespaced("p", MAPPED, Some(1000), "");
        assert_user_namespaced("p", "uid 0 gid 0\nuidmap 0 65536 65536\n", None, "");
    }

    #[test]
    #[should_panic(expected = "`id -u` and `id -g` inside")]
    fn root_where_uid_1000_was_asked_is_refused() {
        assert_user_namespaced(
            "p",
            &MAPPED.replace("uid 1000 gid 1000", "uid 0 gid 0"),
            Some(1000),
            "",
        );
    }

    #[test]
    #[should_panic(expected = "maps to a host id other than 0")]
    fn the_hosts_own_namespace_is_refused() {
        assert_user_namespaced("p", "uid 0 gid 0\nuidmap 0 0 4294967295\n", None, "");
    }

    #[test]
    #[should_panic(expected = "no `uidmap ` line")]
    fn output_without_the_lines_is_refused() {
        assert_user_namespaced("p", "uid 0 gid 0\n", None, "");
    }
}
