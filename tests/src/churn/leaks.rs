//! What must be gone from each node once every pod of the run is: CDI specs, mount points,
//! device-plugin sockets, pod cgroups and their device entries, processes, temp files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::cluster::{Cluster, Node, KUBELET_ROOT};
use crate::sim::ACCELS;

use super::pods::KERNEL_DEVICES;

/// The CDI directories an engine reads by default, as paths with no link in them.
const CDI_DIRS: [&str; 2] = ["/etc/cdi", "/run/cdi"];
/// Parts of a mount point that only a pod's or container's mount has.
const POD_MOUNTS: [&str; 4] = [
    "/var/lib/kubelet/pods/",
    "io.containerd.runtime.v2.task/k8s.io/",
    "io.containerd.grpc.v1.cri/sandboxes/",
    // CRI-O's pod and container run files (the sandbox's shm).
    "/userdata/",
];
/// The programs that may run in a node's mount namespace once its pods are gone (`comm`,
/// which the kernel cuts at 15 bytes): the namespace's holder, the kubelet, containerd or
/// CRI-O and devinject's daemons.
const NODE_DAEMONS: [&str; 7] = [
    "sleep",
    "kubelet",
    "containerd",
    "crio",
    "devinject-devic",
    "devinject-nri",
    "devinject-dra",
];

/// What the nodes had before the first pod: files in the CDI directories and pod mounts
/// (none, on a fresh node), per node.
#[derive(Debug, Clone, Default)]
pub struct Baseline {
    cdi_files: Vec<BTreeSet<PathBuf>>,
}

/// Reads the baseline of every node of `cluster`.
pub fn baseline(cluster: &Cluster) -> Baseline {
    Baseline {
        cdi_files: cluster.nodes().iter().map(cdi_files).collect(),
    }
}

/// A containerd shim of `node`'s containerd (`comm` `containerd-shim`, its `-address` the node's
/// socket): their pids.
pub fn shim_pids(node: &Node) -> BTreeSet<u32> {
    let Ok(socket) = node.cri_socket() else {
        return BTreeSet::new();
    };
    let socket = socket.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (comm.trim() == "containerd-shim" && cmdline.contains(&socket)).then_some(pid)
        })
        .collect()
}

/// What the end-of-run look found.
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// Leaks of devinject's or of the node under it: violations.
    pub leaks: Vec<String>,
    /// containerd's own leftovers, reported but not devinject's: shims that lived through a
    /// containerd restart and stayed after their task and pod went (the NRI node, where nothing
    /// of devinject's runs in the runtime, leaves them too), and idle shims containerd itself
    /// declared dead and forgot (a childless shim whose sandbox containerd's log says it cleaned
    /// up as a dead shim).
    pub engine_leftovers: Vec<String>,
}

/// Every leak found on the nodes of `cluster` against `base`, each naming the node, what leaked
/// and where; `restart_survivors`: the pids of shims alive when their containerd restarted.
pub fn leaks(cluster: &Cluster, base: &Baseline, restart_survivors: &BTreeSet<u32>) -> Found {
    let mut found = Vec::new();
    let mut engine_leftovers = Vec::new();
    for (i, node) in cluster.nodes().iter().enumerate() {
        let name = node.name();
        for stray in stray_processes(node) {
            let item = format!("{name}: process: {}", stray.report);
            match restart_survivors.contains(&stray.pid) || stray.abandoned_by_containerd {
                true => engine_leftovers.push(item),
                false => found.push(item),
            }
        }
        let mut add = |what: &str, item: String| found.push(format!("{name}: {what}: {item}"));
        let before = base.cdi_files.get(i).cloned().unwrap_or_default();
        for f in cdi_files(node).difference(&before) {
            add("CDI spec dir", f.display().to_string());
        }
        let mounts = node_mounts(node);
        for m in &mounts {
            if CDI_DIRS.iter().any(|d| m == Path::new(d)) {
                add("CDI dir still a mount", m.display().to_string());
            }
            let text = m.to_string_lossy();
            if POD_MOUNTS.iter().any(|p| text.contains(p)) {
                add("mount point", text.into_owned());
            }
        }
        for s in stale_plugin_sockets(node) {
            add("device-plugin socket no process listens on", s);
        }
        for c in pod_cgroups(node) {
            add("cgroup", c);
        }
        for t in temp_files(node) {
            add("temp file", t);
        }
        if node.dra_plugin_pid().is_some() {
            for e in std::fs::read_dir(node.cdi_spec_dir())
                .into_iter()
                .flatten()
                .flatten()
            {
                add("claim spec", e.path().display().to_string());
            }
        }
    }
    match cluster.kubectl(&["get", "resourceclaims", "-o", "name"]) {
        Ok(claims) => found.extend(claims.lines().map(|c| format!("cluster: {c}"))),
        Err(e) => found.push(format!("cluster: cannot list the ResourceClaims: {e:#}")),
    }
    Found {
        leaks: found,
        engine_leftovers,
    }
}

/// What is checked, for reports and docs.
pub const CHECKED: &str = "no new file in the node's /etc/cdi or /run/cdi, neither a mount any \
    more; no mount point of a pod volume (/var/lib/kubelet/pods/), a task bundle or a sandbox \
    or CRI-O's run files of a pod (userdata) in the node's mount namespace; every device-plugin \
    socket but kubelet.sock bound by a live process; no pod cgroup left under the node's cgroup \
    root on any hierarchy, and no cgroup there allowing a demo device or kvm explicitly; \
    no process in the node's mount namespace but its holder, the kubelet, containerd or CRI-O, \
    the device plugin, devinject-nri and devinject-dra (no conmon, no shim of ours), and none in a pod \
    cgroup; no temp file (.tmp*) or task bundle under containerd's state directory, no pod \
    directory under the kubelet's; on the DRA node no claim's spec in devinject-dra's CDI \
    directory, and no ResourceClaim left in the API";

fn cdi_files(node: &Node) -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::new();
    for dir in CDI_DIRS {
        let Ok(path) = node.in_node_ns(dir) else {
            continue;
        };
        for e in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            files.insert(Path::new(dir).join(e.file_name()));
        }
    }
    files
}

/// The mount points of the node's mount namespace.
fn node_mounts(node: &Node) -> Vec<PathBuf> {
    let Some(pid) = node.namespace_pid() else {
        return Vec::new();
    };
    let Ok(text) = std::fs::read(format!("/proc/{pid}/mountinfo")) else {
        return Vec::new();
    };
    devinject_mountinfo::parse(&text)
        .filter_map(Result::ok)
        .map(|m| m.mount_point)
        .collect()
}

/// The sockets in the node's device-plugins directory (but `kubelet.sock`) that no process
/// has bound: a plugin that died without removing its own.
fn stale_plugin_sockets(node: &Node) -> Vec<String> {
    let dir = format!("{KUBELET_ROOT}/device-plugins");
    let Ok(path) = node.in_node_ns(&dir) else {
        return Vec::new();
    };
    let bound: BTreeSet<String> = std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7).map(str::to_owned))
        .collect();
    std::fs::read_dir(&path)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".sock") && n != "kubelet.sock")
        .map(|n| format!("{dir}/{n}"))
        .filter(|p| !bound.contains(p))
        .collect()
}

/// Pod cgroups left under the node's cgroup root, on every hierarchy, and cgroups there whose
/// device list names a demo device.
fn pod_cgroups(node: &Node) -> Vec<String> {
    let mut found = Vec::new();
    for top in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let root = top.path().join(node.name());
        let mut dirs = Vec::new();
        collect_dirs(&root, &mut dirs);
        for d in dirs {
            let name = d.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name.starts_with("pod") {
                found.push(d.display().to_string());
            }
            if let Ok(list) = std::fs::read_to_string(d.join("devices.list")) {
                for line in list.lines() {
                    let numbers = ACCELS
                        .iter()
                        .map(|(_, ma, mi)| (*ma, *mi))
                        .chain(KERNEL_DEVICES.iter().map(|d| (d.major, d.minor)));
                    if numbers
                        .into_iter()
                        .any(|(ma, mi)| line.starts_with(&format!("c {ma}:{mi} ")))
                    {
                        found.push(format!("{} allows {line}", d.display()));
                    }
                }
            }
        }
    }
    found
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    out.push(dir.to_owned());
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect_dirs(&e.path(), out);
        }
    }
}

/// A process left on a node.
struct Stray {
    pid: u32,
    /// What it is, for the report: pid, `comm`, where it waits, its children, its command line
    /// and, for a shim, whose it was.
    report: String,
    /// A shim containerd itself declared dead and forgot ([`declared_dead`]).
    abandoned_by_containerd: bool,
}

/// Processes in the node's mount namespace that are none of its daemons, and processes in one
/// of its pod cgroups.
fn stray_processes(node: &Node) -> Vec<Stray> {
    let Some(ns_pid) = node.namespace_pid() else {
        return Vec::new();
    };
    let Ok(ns) = std::fs::read_link(format!("/proc/{ns_pid}/ns/mnt")) else {
        return Vec::new();
    };
    let pods = format!("/{}/kubepods", node.name());
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let proc = e.path();
        let comm = std::fs::read_to_string(proc.join("comm")).unwrap_or_default();
        let comm = comm.trim();
        let in_ns = std::fs::read_link(proc.join("ns/mnt")).is_ok_and(|m| m == ns);
        let in_pod = std::fs::read_to_string(proc.join("cgroup")).is_ok_and(|c| {
            c.lines()
                .any(|l| l.split(':').nth(2).is_some_and(|p| p.starts_with(&pods)))
        });
        if (in_ns && !NODE_DAEMONS.contains(&comm)) || in_pod {
            let cmdline = std::fs::read(proc.join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            let kids = children(pid);
            let shim = shim_id(&cmdline).filter(|_| comm == "containerd-shim");
            found.push(Stray {
                pid,
                report: format!(
                    "{pid} {comm} (waiting in {}; children: {kids:?}): {}{}",
                    std::fs::read_to_string(proc.join("wchan")).unwrap_or_default(),
                    cmdline.trim(),
                    shim.map(|id| shim_owner(node, id)).unwrap_or_default()
                ),
                abandoned_by_containerd: kids.is_empty()
                    && shim.is_some_and(|id| declared_dead(node, id)),
            });
        }
    }
    found
}

/// The sandbox id a containerd shim's command line names (`-id <id>`).
fn shim_id(cmdline: &str) -> Option<&str> {
    let mut args = cmdline.split_whitespace();
    args.by_ref().skip_while(|a| *a != "-id").nth(1)
}

/// Whether containerd's log says it cleaned up the shim of sandbox `id` as a dead shim, so that
/// a childless shim of that id still alive is containerd's: containerd closed its connection
/// to the shim and forgot it while the shim lived. Seen (containerd 2.1, on the shim node and
/// the NRI node) when the kubelet restarts while a pod is in its termination grace: the pod's
/// sandbox and container exit at the same moment (137), containerd deletes the sandbox's task
/// first and asks the shim to shut down, which the shim declines while it still holds the
/// container; containerd then closes its connection ("shim disconnected"), and the container's
/// delete, a sandboxed one, sends no shutdown (`shimTask.delete` in containerd's runtime v2).
/// containerd's bookkeeping, not a process of devinject's: devinject's runtime is not a
/// daemon, and the shim has no child.
fn declared_dead(node: &Node, id: &str) -> bool {
    !node
        .log_lines_with(&[&format!("\"cleaning up dead shim\" id={id}")], 1)
        .is_empty()
}

/// The children of process `pid`: pid, `comm` and where each waits.
fn children(pid: u32) -> Vec<String> {
    let list =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    list.split_whitespace()
        .map(|c| {
            let read =
                |f: &str| std::fs::read_to_string(format!("/proc/{c}/{f}")).unwrap_or_default();
            format!("{c} {} in {}", read("comm").trim(), read("wchan"))
        })
        .collect()
}

/// For the containerd shim of sandbox `id`: the pods the node's logs name beside that id, what
/// containerd says of the task, and the kubelet's and containerd's lines naming the sandbox and
/// the containers created in it, so that a leaked shim says whose it was and what ended it, or
/// did not.
fn shim_owner(node: &Node, id: &str) -> String {
    let short = &id[..id.len().min(12)];
    let mut lines = node.log_lines_with(&[short], 200);
    let created: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            let needle = "returns container id \\\"";
            let rest = &l[l.find(needle)? + needle.len()..];
            Some(rest.chars().take(12).collect())
        })
        .collect();
    if !created.is_empty() {
        let needles: Vec<&str> = created.iter().map(String::as_str).collect();
        lines.extend(node.log_lines_with(&needles, 40 * needles.len()));
    }
    let pods: BTreeSet<String> = lines
        .iter()
        .filter_map(|l| {
            let rest = &l[l.find("pod=\"")? + 5..];
            Some(rest[..rest.find('"')?].to_owned())
        })
        .collect();
    let told: Vec<String> = lines
        .iter()
        .take(80)
        .map(|l| l.chars().take(400).collect())
        .collect();
    let task = node
        .containerd()
        .ok()
        .and_then(|c| {
            let mut ls = c.ctr();
            ls.args(["-n", "k8s.io", "tasks", "ls"]);
            crate::daemons::run_ok(ls).ok()
        })
        .and_then(|t| t.lines().find(|l| l.starts_with(id)).map(str::to_owned))
        .unwrap_or_else(|| "no task".to_owned());
    format!(" (pods in the kubelet log: {pods:?}; containerd: {task}; its log lines: {told:?})")
}

/// Temp files and task bundles under the node's containerd state, and pod directories under
/// its kubelet's root.
fn temp_files(node: &Node) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(ctd) = node.containerd() {
        let state = ctd.state_dir();
        let mut files = Vec::new();
        collect_files(&state, &mut files);
        found.extend(
            files
                .iter()
                .filter(|f| {
                    f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(".tmp"))
                })
                .map(|f| f.display().to_string()),
        );
        let bundles = state.join("io.containerd.runtime.v2.task/k8s.io");
        for e in std::fs::read_dir(&bundles).into_iter().flatten().flatten() {
            found.push(format!("task bundle {}", e.path().display()));
        }
    }
    if let Ok(pods) = node.in_node_ns(&format!("{KUBELET_ROOT}/pods")) {
        for e in std::fs::read_dir(&pods).into_iter().flatten().flatten() {
            found.push(format!(
                "pod directory {KUBELET_ROOT}/pods/{}",
                e.file_name().to_string_lossy()
            ));
        }
    }
    found
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() => collect_files(&e.path(), out),
            Ok(_) => out.push(e.path()),
            Err(_) => {}
        }
    }
}
