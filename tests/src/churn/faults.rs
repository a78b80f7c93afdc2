//! The faults the churn injects, how each is injected and undone, and what says the node has
//! recovered from it. A fault's duration may be a pause; the wait for recovery is on readiness
//! signals (registrations in the logs, the node's Ready condition, its allocatable count, the
//! pod's end).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::cluster::{Cluster, Node, DEFAULT_CDI_DIR, KUBELET_ROOT};
use crate::daemons::run_ok;
use crate::sim::{mknod, ACCELS};

use super::pods::{EnginePath, RESOURCE};

/// The kinds of fault, each injected at least twice in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// The device plugin SIGKILLed (its socket left behind) and started again.
    PluginKill,
    /// The kubelet stopped and started again: it forgets the plugins and deletes their sockets.
    KubeletRestart,
    /// containerd stopped and started again under running containers (the shims stay).
    ContainerdRestart,
    /// CRI-O stopped and started again under running containers (their conmon stays).
    CrioRestart,
    /// A demo device node removed from the simulated host for a few seconds, then made again.
    Unplug,
    /// A pod holding devices allocates past its memory limit right after its start.
    OomKill,
    /// The CDI spec directory the node's containerd reads (`/var/run/cdi`) a small tmpfs,
    /// filled, for a few seconds.
    CdiFull,
    /// The kubelet's pod-resources socket moved away for a few seconds and back.
    PodResourcesGone,
    /// The DRA node's kubelet stopped and started again under `devinject-dra`: it deletes the
    /// node's ResourceSlices when it starts; the driver must publish them again.
    DraKubeletRestart,
    /// Every transient CDI spec of the DRA node's prepared claims removed while claimed pods
    /// run (a tmpfs remounted, a cleanup tool), and a claimed pod's container killed: the
    /// kubelet prepares nothing for a restarted container, so the driver must put the specs
    /// back for it to start with its device.
    CdiWipe,
}

impl FaultKind {
    /// Every kind, in the order a round injects them.
    pub const ALL: [Self; 10] = [
        Self::PluginKill,
        Self::Unplug,
        Self::PodResourcesGone,
        Self::OomKill,
        Self::CdiFull,
        Self::KubeletRestart,
        Self::ContainerdRestart,
        Self::CrioRestart,
        Self::DraKubeletRestart,
        Self::CdiWipe,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::PluginKill => "device plugin SIGKILL",
            Self::KubeletRestart => "kubelet restart",
            Self::ContainerdRestart => "containerd restart",
            Self::CrioRestart => "CRI-O restart",
            Self::Unplug => "device unplug/replug",
            Self::OomKill => "pod OOM-killed",
            Self::CdiFull => "CDI spec dir full",
            Self::PodResourcesGone => "pod-resources socket gone",
            Self::DraKubeletRestart => "kubelet restart under devinject-dra",
            Self::CdiWipe => "DRA claim specs wiped",
        }
    }
}

/// How long a fault that lasts stays injected.
const HOLD: Duration = Duration::from_secs(4);
/// The size of the tmpfs over the CDI directory.
const CDI_TMPFS_SIZE: &str = "64k";
/// The CDI directory containerd reads by default, `/var/run/cdi`, as a path with no link in it
/// (`/var/run` leads to `/run`; an absolute link would leave the node's namespace when followed
/// through `/proc/<pid>/root`).
const NODE_CDI_DIR: &str = "/run/cdi";
/// Where the pod-resources socket goes while it is away.
const AWAY: &str = "kubelet.sock.churn-away";

/// What undoes a fault that lasts.
#[derive(Debug)]
enum Undo {
    /// Make the device node again.
    Replug {
        path: PathBuf,
        major: u32,
        minor: u32,
    },
    /// Unmount the tmpfs over the CDI directory (and remove the directory where the run made
    /// it).
    CdiUnmount { made_dir: Option<PathBuf> },
    /// Move the pod-resources socket back.
    PodResourcesBack { away: PathBuf, socket: PathBuf },
}

/// A readiness signal the run waits for after a fault.
#[derive(Debug, Clone)]
pub enum Condition {
    /// The node reports Ready.
    NodeReady(usize),
    /// The node advertises all its demo devices again.
    Allocatable(usize),
    /// The node's device plugin has registered more often than `before` (its current log).
    PluginRegistered { node: usize, before: usize },
    /// The node's `devinject-nri` has registered more often than `before`.
    NriRegistered { node: usize, before: usize },
    /// The named pod has ended and its outcome was recorded.
    PodFinished(String),
    /// The kubelet has registered the node's `devinject-dra` more often than `before`, and the
    /// node's ResourceSlices list all its devices (`devices`).
    DraRecovered {
        node: usize,
        before: usize,
        devices: usize,
    },
    /// The node's ResourceSlices list all its devices again (`devices`).
    SlicesComplete { node: usize, devices: usize },
    /// Each of these spec files of the node's CDI directory is there again, or its claim (the
    /// uid in its name) is gone from the API.
    SpecsRestored(Vec<PathBuf>),
    /// The named pod's container, killed, has started again and its probe was checked.
    PodRestarted(String),
}

/// What the run knows of its pods that a [`Condition`] asks.
pub trait PodProgress {
    /// Whether the pod's outcome was recorded (it ended).
    fn finished(&self, name: &str) -> bool;
    /// Whether the pod's container started again after a kill and its probe was checked.
    fn restarted(&self, name: &str) -> bool;
}

/// A fault in progress.
#[derive(Debug)]
pub struct ActiveFault {
    pub kind: FaultKind,
    /// The node it hit.
    pub node: usize,
    /// When it was injected.
    pub began: Instant,
    /// What was done, for the log.
    pub detail: String,
    hold_until: Option<Instant>,
    undo: Option<Undo>,
    /// What must hold before the next fault.
    pub waiting_for: Vec<Condition>,
}

impl ActiveFault {
    /// Whether the fault is still injected (not yet undone).
    pub fn injected(&self) -> bool {
        self.undo.is_some()
    }
}

/// Injects a fault of `kind` into node `node` of `cluster` (`devices` demo devices each);
/// `pick` chooses among devices. [`FaultKind::OomKill`] only names the node: the run creates
/// the pod and adds [`Condition::PodFinished`].
pub fn inject(
    cluster: &mut Cluster,
    kind: FaultKind,
    node: usize,
    devices: usize,
    pick: u64,
) -> Result<ActiveFault> {
    let began = Instant::now();
    let mut fault = ActiveFault {
        kind,
        node,
        began,
        detail: String::new(),
        hold_until: None,
        undo: None,
        waiting_for: Vec::new(),
    };
    let dra = node == EnginePath::Dra.node();
    let n = &mut cluster.nodes_mut()[node];
    let name = n.name().to_owned();
    match kind {
        FaultKind::PluginKill => {
            let pid = n.plugin_pid();
            n.restart_plugin()
                .with_context(|| format!("restart the device plugin of {name}"))?;
            fault.detail = format!("SIGKILLed the device plugin (pid {pid:?}) on {name}");
            fault.waiting_for = vec![Condition::Allocatable(node)];
        }
        FaultKind::KubeletRestart | FaultKind::DraKubeletRestart if dra => {
            let before = n.dra_registrations();
            n.restart_kubelet()
                .with_context(|| format!("restart the kubelet of {name}"))?;
            fault.detail = format!("restarted the kubelet of {name} under devinject-dra");
            fault.waiting_for = vec![
                Condition::NodeReady(node),
                Condition::DraRecovered {
                    node,
                    before,
                    devices: super::host::dra_devices(),
                },
            ];
        }
        FaultKind::KubeletRestart | FaultKind::DraKubeletRestart => {
            let before = n.plugin_registrations();
            n.restart_kubelet()
                .with_context(|| format!("restart the kubelet of {name}"))?;
            fault.detail = format!("restarted the kubelet of {name}");
            fault.waiting_for = vec![
                Condition::PluginRegistered { node, before },
                Condition::NodeReady(node),
                Condition::Allocatable(node),
            ];
        }
        FaultKind::ContainerdRestart => {
            let before = n.nri_registrations();
            let nri = n.nri_plugin_pid().is_some();
            n.restart_containerd_keeping_tasks()
                .with_context(|| format!("restart the containerd of {name}"))?;
            fault.detail = format!("restarted the containerd of {name}");
            fault.waiting_for = vec![Condition::NodeReady(node)];
            if nri {
                fault
                    .waiting_for
                    .push(Condition::NriRegistered { node, before });
            }
        }
        FaultKind::CrioRestart => {
            n.restart_crio()
                .with_context(|| format!("restart the CRI-O of {name}"))?;
            fault.detail = format!("restarted the CRI-O of {name}");
            fault.waiting_for = vec![Condition::NodeReady(node)];
        }
        FaultKind::Unplug => {
            let (accel, major, minor) = ACCELS[(pick % devices as u64) as usize];
            let path = n.host.dev_root.join("demo").join(accel);
            std::fs::remove_file(&path).with_context(|| format!("unplug {}", path.display()))?;
            fault.detail = format!("unplugged {accel} on {name}");
            fault.undo = Some(Undo::Replug { path, major, minor });
            fault.hold_until = Some(began + HOLD);
            fault.waiting_for = vec![match dra {
                true => Condition::SlicesComplete {
                    node,
                    devices: super::host::dra_devices(),
                },
                false => Condition::Allocatable(node),
            }];
        }
        FaultKind::OomKill => {
            fault.detail = format!("a pod on {name} allocating past its memory limit");
        }
        FaultKind::CdiFull => {
            let made_dir = fill_cdi_dir(n)?;
            fault.detail = format!("{DEFAULT_CDI_DIR} on {name} a full {CDI_TMPFS_SIZE} tmpfs");
            fault.undo = Some(Undo::CdiUnmount { made_dir });
            fault.hold_until = Some(began + HOLD);
        }
        FaultKind::PodResourcesGone => {
            let socket = n.in_node_ns(&format!("{KUBELET_ROOT}/pod-resources/kubelet.sock"))?;
            let away = socket.with_file_name(AWAY);
            std::fs::rename(&socket, &away)
                .with_context(|| format!("move {} away", socket.display()))?;
            fault.detail = format!("moved the pod-resources socket of {name} away");
            fault.undo = Some(Undo::PodResourcesBack { away, socket });
            fault.hold_until = Some(began + HOLD);
        }
        FaultKind::CdiWipe => {
            let dir = n.cdi_spec_dir();
            let mut wiped = Vec::new();
            for e in std::fs::read_dir(&dir)
                .with_context(|| format!("list {}", dir.display()))?
                .flatten()
            {
                std::fs::remove_file(e.path())
                    .with_context(|| format!("remove {}", e.path().display()))?;
                wiped.push(e.path());
            }
            fault.detail = format!(
                "removed the {} CDI specs of prepared claims on {name}",
                wiped.len()
            );
            fault.waiting_for = vec![Condition::SpecsRestored(wiped)];
        }
    }
    Ok(fault)
}

/// Undoes `fault` once its time is up; true once it is undone (or had nothing to undo).
pub fn undo_when_due(cluster: &mut Cluster, fault: &mut ActiveFault) -> Result<bool> {
    if fault.hold_until.is_some_and(|t| Instant::now() < t) {
        return Ok(false);
    }
    let node = &cluster.nodes()[fault.node];
    match fault.undo.take() {
        None => {}
        Some(Undo::Replug { path, major, minor }) => {
            mknod(&path, major, minor, "0666")
                .with_context(|| format!("replug {}", path.display()))?;
        }
        Some(Undo::CdiUnmount { made_dir }) => {
            let mut umount = node.command_in_node(std::path::Path::new("umount"))?;
            umount.arg(NODE_CDI_DIR);
            run_ok(umount).context("unmount the full CDI directory")?;
            if let Some(dir) = made_dir {
                std::fs::remove_dir(&dir).with_context(|| format!("remove {}", dir.display()))?;
            }
        }
        Some(Undo::PodResourcesBack { away, socket }) => {
            std::fs::rename(&away, &socket)
                .with_context(|| format!("move {} back", socket.display()))?;
        }
    }
    Ok(true)
}

/// Mounts a small tmpfs over the node's CDI directory and fills it; returns the directory when
/// the run had to make it (to remove it again).
fn fill_cdi_dir(node: &Node) -> Result<Option<PathBuf>> {
    let dir = node.in_node_ns(NODE_CDI_DIR)?;
    let made = match dir.exists() {
        true => None,
        false => {
            std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
            Some(dir.clone())
        }
    };
    let mut mount = node.command_in_node(std::path::Path::new("mount"))?;
    mount.args([
        "-t",
        "tmpfs",
        "-o",
        &format!("size={CDI_TMPFS_SIZE},mode=0755"),
        "devinject-churn-cdi",
        NODE_CDI_DIR,
    ]);
    run_ok(mount).context("mount a tmpfs over the CDI directory")?;
    // dd stops at ENOSPC, which is the point.
    let mut fill = node.command_in_node(std::path::Path::new("dd"))?;
    fill.args([
        "if=/dev/zero",
        &format!("of={NODE_CDI_DIR}/churn-fill"),
        "bs=4096",
    ]);
    let _ = fill.output();
    let room = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(node.in_node_ns(&format!("{NODE_CDI_DIR}/churn-room"))?)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, &[0u8; 8192]).and_then(|()| f.sync_all())
        });
    anyhow::ensure!(
        room.is_err(),
        "the CDI tmpfs still has room after filling it"
    );
    Ok(made)
}

/// Whether `condition` holds now in `cluster` (`devices` demo devices per node; `pods`: what
/// the run knows of its pods).
pub fn holds(
    cluster: &Cluster,
    condition: &Condition,
    devices: usize,
    pods: &impl PodProgress,
) -> bool {
    let node_name = |i: usize| cluster.nodes()[i].name().to_owned();
    match condition {
        Condition::NodeReady(i) => cluster
            .kubectl(&[
                "get",
                "node",
                &node_name(*i),
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .is_ok_and(|s| s == "True"),
        Condition::Allocatable(i) => cluster
            .kubectl(&[
                "get",
                "node",
                &node_name(*i),
                "-o",
                &format!(
                    "jsonpath={{.status.allocatable.{}}}",
                    RESOURCE.replace('.', "\\.")
                ),
            ])
            .is_ok_and(|s| s == devices.to_string()),
        Condition::PluginRegistered { node, before } => {
            cluster.nodes()[*node].plugin_registrations() > *before
        }
        Condition::NriRegistered { node, before } => {
            cluster.nodes()[*node].nri_registrations() > *before
        }
        Condition::PodFinished(name) => pods.finished(name),
        Condition::PodRestarted(name) => pods.restarted(name),
        Condition::DraRecovered {
            node,
            before,
            devices,
        } => {
            cluster.nodes()[*node].dra_registrations() > *before
                && slices_complete(cluster, *node, *devices)
        }
        Condition::SlicesComplete { node, devices } => slices_complete(cluster, *node, *devices),
        Condition::SpecsRestored(files) => {
            let Ok(uids) = claim_uids(cluster) else {
                return false;
            };
            files.iter().all(|f| {
                f.exists()
                    || f.file_name()
                        .and_then(|n| n.to_str())
                        .and_then(spec_claim_uid)
                        .is_none_or(|uid| !uids.contains(uid))
            })
        }
    }
}

/// Whether the ResourceSlices of node `node` list `devices` devices of devinject's driver (its
/// pools are `<node>/<profile>`).
fn slices_complete(cluster: &Cluster, node: usize, devices: usize) -> bool {
    let pool = format!("{}/", cluster.nodes()[node].name());
    cluster
        .resource_slice_devices()
        .is_ok_and(|all| all.iter().filter(|(p, _)| p.starts_with(&pool)).count() == devices)
}

/// The uids of every ResourceClaim in the API.
pub fn claim_uids(cluster: &Cluster) -> Result<std::collections::BTreeSet<String>> {
    let uids = cluster.kubectl(&[
        "get",
        "resourceclaims",
        "-o",
        "jsonpath={.items[*].metadata.uid}",
    ])?;
    Ok(uids.split_whitespace().map(str::to_owned).collect())
}

/// The claim uid in the name of a DRA claim's transient spec file,
/// `k8s.<driver>-<profile>_<claim uid>.json`.
pub fn spec_claim_uid(file: &str) -> Option<&str> {
    file.strip_suffix(".json")?
        .rsplit_once('_')
        .map(|(_, uid)| uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_spec_file_names_its_claim() {
        assert_eq!(
            spec_claim_uid("k8s.devinject.io-demo_0b5c7e2a-1f0e-4a51-9d0e-3c1d2b3a4f5e.json"),
            Some("0b5c7e2a-1f0e-4a51-9d0e-3c1d2b3a4f5e")
        );
        assert_eq!(spec_claim_uid("devinject.io-demo.yaml"), None);
    }
}
