//! Churn on a real cluster: pods created and deleted continuously, a few at a time, each asking
//! for a seeded random mix, through both engine paths, while faults are injected on a
//! schedule; every start checked from inside the container, every running pod against the
//! others, and the nodes checked for leaks and the daemons for growth at the end.
//!
//! The cluster ([`crate::cluster`], four nodes): node 0 runs the runtime shim (`devinject`
//! RuntimeClass, [`Setup::Ctl`]) and node 1 `devinject-nri` on containerd's NRI socket with
//! pods on plain runc ([`Setup::Nri`]), both on containerd 2 under the `kubernetes` policy;
//! node 2 runs CRI-O, which injects the CDI specs `devinject-ctl cdi generate` wrote as the
//! plugin's answers name them ([`Setup::Cdi`]); node 3 runs `devinject-dra` alone
//! ([`Setup::Dra`]), whose claims' transient CDI specs containerd 2 injects. Every node has
//! four demo devices and `/dev/kvm` shared as three replicas ([`host`]), served by the real
//! device plugin or, on node 3, published by the DRA driver. Each pod asks for 0–2 demo
//! devices and a kvm replica or not, on one path (through claims on the DRA path); every tenth
//! is a forger (no resources, the request variable set itself, and on the CDI path a CDI
//! annotation on the pod), on each path in turn.
//!
//! The checks ([`pods::probe_problems`], the exclusivity of every device, [`leaks::leaks`],
//! [`procstat::unbounded`]) collect violations instead of panicking; the caller fails on any.
//! `tests/tests/cluster/cluster_churn.rs` runs the short setting, `churn-soak` (scripts/bench.sh
//! churn) the long one; docs/testing.md and docs/benchmarks.md describe both.
//!
//! # Why a node per path
//! One containerd with both the shim and NRI would run a shim pod through both paths (NRI sees
//! every container): each path needs a node of its own. The DRA driver publishes the same
//! devices the node's device plugin advertises, and the two allocate independently: beside a
//! plugin it would give a claim the device a plugin pod holds.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::cluster::{Cluster, DraBeside, Setup, Shape, CDI_CRI_ALLOCATE_MODE, KUBELET_ROOT};
use crate::sim::ACCELS;

pub mod faults;
pub mod host;
pub mod leaks;
pub mod metrics;
pub mod pods;
pub mod procstat;
pub mod rng;

use faults::{ActiveFault, FaultKind};
use pods::{device_key, EnginePath, Grant, KernelDevice, Kind, PodPlan, KERNEL_DEVICES, PROBED};
use procstat::Sample;
use rng::Rng;

/// The environment variable that sets the number of starts (the soak: 1000).
pub const STARTS_VAR: &str = "DEVINJECT_CHURN_STARTS";
/// The environment variable that sets the seed (default: from the clock, printed).
pub const SEED_VAR: &str = "DEVINJECT_CHURN_SEED";
/// The starts of the CI setting.
pub const CI_STARTS: usize = 150;
/// How long a pod may take to start or be refused before it is a violation, and how long a
/// node may take to recover from a fault.
const STUCK: Duration = Duration::from_secs(180);
/// How long two running pods may seem to hold one device before it is a violation: the API's
/// phase of a pod the kubelet has just ended lags (its status is sent asynchronously).
const OVERLAP_GRACE: Duration = Duration::from_secs(20);
/// How long the nodes may take to clean up once the last pod is deleted.
const CLEANUP: Duration = Duration::from_secs(180);
/// One pod in this many is a forger.
const FORGER_EVERY: usize = 10;
/// The pause between two looks at the cluster.
const TICK: Duration = Duration::from_millis(250);

/// How long and how hard to churn.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Pod starts to reach (a start: the container ran and its probe reported).
    pub starts: usize,
    /// The seed of every random choice.
    pub seed: u64,
    /// Pods alive at once.
    pub concurrency: usize,
    /// Rounds of faults (each round injects every [`FaultKind`] once).
    pub rounds: usize,
}

impl Settings {
    /// `starts` starts with the seed from [`SEED_VAR`] or the clock, four pods at once, and a
    /// round of faults per 75 starts (at least two rounds).
    pub fn new(starts: usize) -> Self {
        let seed = std::env::var(SEED_VAR)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rng::clock_seed);
        Self {
            starts,
            seed,
            concurrency: 4,
            rounds: (starts / 75).max(2),
        }
    }

    /// The settings from the environment: [`STARTS_VAR`] or the CI setting.
    pub fn from_env() -> Self {
        let starts = std::env::var(STARTS_VAR)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(CI_STARTS);
        Self::new(starts)
    }
}

/// A daemon's readings: the first and the last of each process it ran as.
#[derive(Debug, Clone)]
pub struct Readings {
    /// The component and node.
    pub component: String,
    /// Per pid: first and last reading.
    pub by_pid: Vec<(u32, Sample, Sample)>,
    /// Whether the run killed it on purpose (its first and last process differ).
    pub killed_by_fault: bool,
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The settings' seed.
    pub seed: u64,
    /// Starts checked, per engine path.
    pub starts: BTreeMap<&'static str, usize>,
    /// Starts that failed while a fault was active or recovering, by reason.
    pub failed_under_fault: BTreeMap<String, usize>,
    /// Forged requests refused (shim, NRI) or run with nothing (CDI), per engine path.
    pub forgers_refused: BTreeMap<&'static str, usize>,
    /// The most running pods that held a replica of kvm on one node at once.
    pub most_sharing: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// Pods the kernel OOM-killed after their start.
    pub oom_killed: usize,
    /// Every invariant violation, with its pod or node.
    pub violations: Vec<String>,
    /// The daemons' readings.
    pub readings: Vec<Readings>,
    /// containerd's own leftovers at the end ([`leaks::Found::engine_leftovers`]).
    pub engine_leftovers: Vec<String>,
    /// The end-of-run metrics scrapes.
    pub scrapes: Vec<metrics::Scrape>,
    /// How long the churn ran (cluster start and teardown excluded).
    pub churn_time: Duration,
}

impl Outcome {
    /// All starts.
    pub fn total_starts(&self) -> usize {
        self.starts.values().sum()
    }

    /// The report: settings, counts, faults, violations, readings, scrapes.
    pub fn report(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "churn: seed {} ({SEED_VAR}={} repeats the mix)\n",
            self.seed, self.seed
        ));
        s.push_str(&format!(
            "churn: {} starts in {:.0} s ({})\n",
            self.total_starts(),
            self.churn_time.as_secs_f64(),
            join_counts(&self.starts)
        ));
        s.push_str(&format!(
            "churn: forged requests refused (shim, NRI) or run with nothing (CDI, DRA): {}\n",
            join_counts(&self.forgers_refused)
        ));
        s.push_str(&format!(
            "churn: most running pods holding a replica of {} on one node at once: {}\n",
            pods::KVM.resource,
            self.most_sharing
        ));
        s.push_str(&format!(
            "churn: OOM-killed after start: {}\n",
            self.oom_killed
        ));
        s.push_str(&format!("churn: faults: {}\n", join_counts(&self.faults)));
        s.push_str(&format!(
            "churn: starts failed under a fault (expected): {}\n",
            match self.failed_under_fault.is_empty() {
                true => "none".to_owned(),
                false => join_counts(&self.failed_under_fault),
            }
        ));
        s.push_str("churn: daemons, first vs last reading (from /proc/<pid>):\n");
        for r in &self.readings {
            let killed = match r.killed_by_fault {
                true => " (an incarnation; the run SIGKILLs it)",
                false => "",
            };
            for (pid, first, last) in &r.by_pid {
                s.push_str(&format!(
                    "  {} pid {pid}{killed}: first {first}; last {last}\n",
                    r.component
                ));
            }
        }
        s.push_str(&format!("churn: leaks checked: {}\n", leaks::CHECKED));
        s.push_str(&format!(
            "churn: containerd's own leftovers (not devinject's: shims that lived through a \
             containerd restart, their task and pod gone, and idle shims containerd declared dead \
             and forgot): {}\n",
            self.engine_leftovers.len()
        ));
        for l in &self.engine_leftovers {
            s.push_str(&format!("  {l}\n"));
        }
        s.push_str(&format!("churn: {} violations\n", self.violations.len()));
        for v in &self.violations {
            s.push_str(&format!("  VIOLATION {v}\n"));
        }
        for m in &self.scrapes {
            s.push_str(&format!(
                "churn: /metrics of {}:\n{}\n",
                m.component, m.text
            ));
        }
        s
    }
}

/// Every id `grant` holds, as [`device_key`]s.
fn grant_keys(grant: &Grant) -> impl Iterator<Item = String> + '_ {
    grant
        .iter()
        .flat_map(|(resource, ids)| ids.iter().map(move |id| device_key(resource, id)))
}

fn join_counts<K: std::fmt::Display>(m: &BTreeMap<K, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The peers the churn's nodes run.
#[derive(Debug, Clone)]
pub struct Peers {
    /// The containerd release of the shim, NRI and DRA nodes.
    pub containerd: crate::runtimes::Release,
    /// CRI-O's bin dir (scripts/crio-build.sh), for the CDI node.
    pub crio: std::path::PathBuf,
}

/// Whether this machine can run the churn (see [`crate::cluster::ready_with_containerd`] and
/// [`crate::crio::ready`]); the peers when it can.
pub fn ready() -> Option<Peers> {
    let containerd = crate::cluster::ready_with_containerd("1.7")?;
    let crio = crate::crio::ready()?;
    Some(Peers { containerd, crio })
}

/// Starts the three-node cluster, churns as `settings` say, deletes every pod and checks the
/// nodes; the outcome lists every violation (none: the run passed).
pub fn run(settings: &Settings, peers: &Peers) -> Result<Outcome> {
    println!(
        "churn: seed {} ({SEED_VAR}), {} starts, {} pods at once, {} rounds of faults",
        settings.seed, settings.starts, settings.concurrency, settings.rounds
    );
    let setups = [
        Setup::Ctl,
        Setup::Nri {
            containerd: peers.containerd.bin.clone(),
        },
        Setup::Cdi {
            containerd: peers.containerd.bin.clone(),
            allocate_mode: CDI_CRI_ALLOCATE_MODE,
        },
        Setup::Dra {
            containerd: peers.containerd.bin.clone(),
            beside: DraBeside::Nothing,
        },
    ];
    let shape = Shape {
        crio: Some(peers.crio.clone()),
        crio_nodes: vec![EnginePath::Cdi.node()],
        node_host: Some(host::NODE_HOST),
        dra_devices: Some(host::dra_devices()),
        ..Shape::default()
    };
    let cluster = Cluster::start_per_node(&setups, &shape)?;
    let plugin_nodes: Vec<usize> = EnginePath::ALL
        .into_iter()
        .filter(|p| *p != EnginePath::Dra)
        .map(EnginePath::node)
        .collect();
    for d in KERNEL_DEVICES {
        cluster.wait_allocatable_on(&plugin_nodes, d.resource, &d.replicas.to_string())?;
    }
    cluster.runtime_class()?;
    cluster.apply_dra_device_classes()?;
    cluster.apply(&pods::claim_templates())?;
    let mut churn = Churn::new(cluster, settings.clone());
    let started = Instant::now();
    let result = churn.churn();
    churn.outcome.churn_time = started.elapsed();
    if let Err(e) = result {
        churn.violate(format!("the run stopped: {e:#}"));
    }
    churn.finish();
    Ok(churn.outcome)
}

/// What the run knows of its pods, for [`faults::holds`].
struct Progress<'a> {
    finished: &'a BTreeSet<String>,
    restarted: &'a BTreeSet<String>,
}

impl faults::PodProgress for Progress<'_> {
    fn finished(&self, name: &str) -> bool {
        self.finished.contains(name)
    }

    fn restarted(&self, name: &str) -> bool {
        self.restarted.contains(name)
    }
}

/// A pod's place in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Created; not yet started, refused or failed.
    Waiting,
    /// Started and checked; holding its devices.
    Holding,
    /// Started and checked, an OOM pod waiting for the kernel.
    AwaitingOom,
    /// Deleted; still in the API until its node is done with it.
    Deleting,
}

#[derive(Debug, Clone)]
struct Tracked {
    plan: PodPlan,
    created: Instant,
    /// Faults begun when it was created, and whether one was active: a pod created and ended
    /// with no fault in between must start.
    faults_at_create: usize,
    fault_at_create: bool,
    state: State,
    /// The devices its probe showed it holding.
    observed: Vec<String>,
    /// It must start whatever fault is around (a claim prepared after a CDI wipe).
    must_start: bool,
    /// Its container was killed when it had started this many times; the next start's probe
    /// is checked again.
    killed_at: Option<u64>,
}

struct Churn {
    cluster: Cluster,
    settings: Settings,
    rng: Rng,
    pods: BTreeMap<String, Tracked>,
    next_pod: usize,
    /// Pods whose outcome was recorded (for [`faults::Condition::PodFinished`]).
    finished: BTreeSet<String>,
    /// Pods whose killed container started again and was checked
    /// ([`faults::Condition::PodRestarted`]).
    restarted: BTreeSet<String>,
    fault: Option<ActiveFault>,
    faults_begun: usize,
    /// Device overlaps seen, by (node, pod, pod, device), since when.
    overlaps: BTreeMap<(usize, String, String, String), Instant>,
    reported_overlaps: BTreeSet<(usize, String, String, String)>,
    /// Pod uid → name, for reports.
    uids: BTreeMap<String, String>,
    readings: BTreeMap<String, Vec<(u32, Sample, Sample)>>,
    baseline: leaks::Baseline,
    /// The shims alive when their node's containerd restarted.
    restart_survivors: BTreeSet<u32>,
    outcome: Outcome,
}

impl Churn {
    fn new(cluster: Cluster, settings: Settings) -> Self {
        let baseline = leaks::baseline(&cluster);
        let outcome = Outcome {
            seed: settings.seed,
            ..Outcome::default()
        };
        let mut c = Self {
            rng: Rng::new(settings.seed),
            cluster,
            settings,
            pods: BTreeMap::new(),
            next_pod: 0,
            finished: BTreeSet::new(),
            restarted: BTreeSet::new(),
            fault: None,
            faults_begun: 0,
            overlaps: BTreeMap::new(),
            reported_overlaps: BTreeSet::new(),
            uids: BTreeMap::new(),
            readings: BTreeMap::new(),
            baseline,
            restart_survivors: BTreeSet::new(),
            outcome,
        };
        c.read_daemons();
        c
    }

    fn violate(&mut self, v: String) {
        println!("churn: VIOLATION {v}");
        self.outcome.violations.push(v);
    }

    fn starts(&self) -> usize {
        self.outcome.total_starts()
    }

    fn schedule_len(&self) -> usize {
        self.settings.rounds * FaultKind::ALL.len()
    }

    /// The start count at which fault `i` is due: spread evenly over the run.
    fn fault_due(&self, i: usize) -> usize {
        (i + 1) * self.settings.starts / (self.schedule_len() + 1)
    }

    fn churn(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120 + 20 * self.settings.starts as u64);
        let mut next_reading = 25;
        while self.starts() < self.settings.starts
            || self.faults_begun < self.schedule_len()
            || self.fault.is_some()
        {
            anyhow::ensure!(
                Instant::now() < deadline,
                "not done by the run's deadline: {} starts, {} faults",
                self.starts(),
                self.faults_begun
            );
            let items = self.list_pods()?;
            let checkpoints = self.checkpoints();
            self.observe(&items, &checkpoints)?;
            self.exclusive(&items, &checkpoints);
            self.step_fault()?;
            self.replace_pods()?;
            if self.starts() >= next_reading {
                self.read_daemons();
                next_reading += 25;
            }
            std::thread::sleep(TICK);
        }
        Ok(())
    }

    fn list_pods(&self) -> Result<Vec<Value>> {
        let text =
            self.cluster
                .kubectl(&["get", "pods", "-l", "devinject-churn=1", "-o", "json"])?;
        let v: Value = serde_json::from_str(&text).context("parse the pod list")?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    /// Each node's kubelet checkpoint: pod uid → what it was granted of the run's resources;
    /// `None` for a node whose checkpoint cannot be read now (its kubelet restarting). On the
    /// DRA node, what stands for it: the ResourceClaims the API shows allocated, by the pod
    /// that owns each ([`Churn::claim_grants`]).
    fn checkpoints(&self) -> Vec<Option<BTreeMap<String, Grant>>> {
        self.cluster
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if i == EnginePath::Dra.node() {
                    return self.claim_grants();
                }
                let path = n
                    .in_node_ns(&format!(
                        "{KUBELET_ROOT}/device-plugins/kubelet_internal_checkpoint"
                    ))
                    .ok()?;
                let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
                let mut map: BTreeMap<String, Grant> = BTreeMap::new();
                for e in v["Data"]["PodDeviceEntries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let Some(resource) = e["ResourceName"]
                        .as_str()
                        .filter(|r| pods::resources().any(|known| known == *r))
                    else {
                        continue;
                    };
                    let uid = e["PodUID"].as_str().unwrap_or_default().to_owned();
                    let ids = map
                        .entry(uid)
                        .or_default()
                        .entry(resource.to_owned())
                        .or_default();
                    ids.extend(crate::cluster::node::entry_device_ids(e));
                    ids.sort();
                }
                Some(map)
            })
            .collect()
    }

    /// The ResourceClaims the API shows allocated, as pod uid → what they give it (its owner's;
    /// every claim of the run is made from a template for one pod). Two allocated claims are
    /// never to hold one device: the scheduler allocates a device again only once its claim is
    /// deallocated. `None` when the API cannot be read now.
    fn claim_grants(&self) -> Option<BTreeMap<String, Grant>> {
        let text = self
            .cluster
            .kubectl(&["get", "resourceclaims", "-o", "json"])
            .ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        let mut map: BTreeMap<String, Grant> = BTreeMap::new();
        for claim in v["items"].as_array().into_iter().flatten() {
            let owner = claim["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|o| o["kind"] == "Pod")
                .and_then(|o| o["uid"].as_str())
                .unwrap_or_else(|| claim["metadata"]["uid"].as_str().unwrap_or_default());
            for (resource, id) in pods::claim_devices(claim) {
                let ids = map
                    .entry(owner.to_owned())
                    .or_default()
                    .entry(resource)
                    .or_default();
                ids.push(id);
                ids.sort();
            }
        }
        Some(map)
    }

    /// Whether a pod created as `t` ran through no fault at all.
    fn quiet(&self, t: &Tracked) -> bool {
        !t.fault_at_create && t.faults_at_create == self.faults_begun && self.fault.is_none()
    }

    /// Looks at every tracked pod in `items` and records what it did.
    fn observe(
        &mut self,
        items: &[Value],
        checkpoints: &[Option<BTreeMap<String, Grant>>],
    ) -> Result<()> {
        let present: BTreeSet<String> = items
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        for p in items {
            if let (Some(uid), Some(name)) = (
                p["metadata"]["uid"].as_str(),
                p["metadata"]["name"].as_str(),
            ) {
                self.uids.insert(uid.to_owned(), name.to_owned());
            }
        }
        // Deleted pods the API has let go of.
        self.pods
            .retain(|name, t| t.state != State::Deleting || present.contains(name));
        let mut to_delete = Vec::new();
        for pod in items {
            let Some(name) = pod["metadata"]["name"].as_str() else {
                continue;
            };
            let Some(t) = self.pods.get(name).cloned() else {
                continue;
            };
            let status = &pod["status"]["containerStatuses"][0];
            let waiting = &status["state"]["waiting"];
            let terminated = &status["state"]["terminated"];
            let running = status["state"]["running"].is_object();
            let phase = pod["status"]["phase"].as_str().unwrap_or_default();
            let label = format!(
                "pod {name} ({}, {}, {:?})",
                t.plan.path.name(),
                t.plan.label(),
                t.plan.kind
            );
            match (t.state, t.plan.kind) {
                (State::Waiting, Kind::Forger) => {
                    let refusal = [&waiting["message"], &terminated["message"]]
                        .into_iter()
                        .filter_map(Value::as_str)
                        .find(|m| m.contains("devinject"));
                    let log = match running || terminated.is_object() {
                        true => self.cluster.pod_log(pod, "main").unwrap_or_default(),
                        false => String::new(),
                    };
                    // The CDI path injects only what the kubelet passed: the forger runs,
                    // with nothing.
                    let ignored = !t.plan.path.refuses_forgers()
                        && log.contains(PROBED)
                        && pods::probe_problems(&log, &Grant::new(), &t.plan).is_empty();
                    if refusal.is_some() || ignored {
                        *self
                            .outcome
                            .forgers_refused
                            .entry(t.plan.path.name())
                            .or_default() += 1;
                        self.record_end(name);
                        to_delete.push(name.to_owned());
                    } else if (running && log.contains(PROBED)) || terminated.is_object() {
                        self.violate(format!(
                            "{label}: a forged request was not refused; the container ran and held {:?}: {:?}",
                            pods::observed_devices(&log),
                            pods::probe_problems(&log, &Grant::new(), &t.plan)
                        ));
                        self.record_end(name);
                        to_delete.push(name.to_owned());
                    } else if t.created.elapsed() > STUCK {
                        self.violate(format!("{label}: neither refused nor run after {STUCK:?}"));
                        self.record_end(name);
                        to_delete.push(name.to_owned());
                    }
                }
                (State::Waiting, _) => {
                    let log = match running || terminated.is_object() {
                        true => self.cluster.pod_log(pod, "main").unwrap_or_default(),
                        false => String::new(),
                    };
                    if log.contains(PROBED) {
                        let node = t.plan.path.node();
                        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
                        let Some(checkpoint) = &checkpoints[node] else {
                            // The kubelet is restarting: look again next time.
                            continue;
                        };
                        let grant = checkpoint.get(uid).cloned().unwrap_or_default();
                        for p in pods::probe_problems(&log, &grant, &t.plan) {
                            self.violate(format!("{label}, checkpoint {grant:?}: {p}"));
                        }
                        let observed = pods::observed_devices(&log);
                        *self.outcome.starts.entry(t.plan.path.name()).or_default() += 1;
                        let tracked = self.pods.get_mut(name).expect("tracked");
                        tracked.observed = observed;
                        tracked.state = match t.plan.kind {
                            Kind::Oom => State::AwaitingOom,
                            _ => State::Holding,
                        };
                        if t.plan.kind == Kind::Oom && self.check_oom(name, &label, terminated) {
                            to_delete.push(name.to_owned());
                        }
                    } else if phase == "Failed"
                        || terminated.is_object()
                        || waiting["reason"]
                            .as_str()
                            .is_some_and(|r| r.contains("Error") || r.contains("BackOff"))
                    {
                        let reason = [
                            &pod["status"]["reason"],
                            &waiting["reason"],
                            &terminated["reason"],
                        ]
                        .into_iter()
                        .find_map(Value::as_str)
                        .unwrap_or("unknown")
                        .to_owned();
                        let message = [
                            &pod["status"]["message"],
                            &waiting["message"],
                            &terminated["message"],
                        ]
                        .into_iter()
                        .find_map(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                        if t.must_start {
                            self.violate(format!(
                                "{label}: failed to start after its fault: {reason}: {message}"
                            ));
                        } else if self.quiet(&t) {
                            self.violate(format!(
                                "{label}: failed to start with no fault around: {reason}: {message}"
                            ));
                        } else {
                            println!("churn: {label}: failed under a fault: {reason}: {message}");
                            *self.outcome.failed_under_fault.entry(reason).or_default() += 1;
                        }
                        self.record_end(name);
                        to_delete.push(name.to_owned());
                    } else if t.created.elapsed() > STUCK {
                        self.violate(format!(
                            "{label}: not started after {STUCK:?} (phase {phase}, waiting {waiting})"
                        ));
                        self.record_end(name);
                        to_delete.push(name.to_owned());
                    }
                }
                (State::AwaitingOom, _) => {
                    let ended = self.check_oom(name, &label, terminated);
                    to_delete.extend(ended.then(|| name.to_owned()));
                }
                (State::Holding, _) if t.killed_at.is_some() && !self.restarted.contains(name) => {
                    self.check_restart(pod, &t, &label, checkpoints)
                }
                _ => {}
            }
        }
        self.delete(&to_delete)
    }

    /// Checks the container of `pod` started again after its kill: its probe, as after its
    /// first start, against the pod's grant; a start that fails (the kubelet prepares nothing
    /// for a restarted container: its claims' specs must be where the runtime looks) is
    /// reported once it has lasted [`STUCK`].
    fn check_restart(
        &mut self,
        pod: &Value,
        t: &Tracked,
        label: &str,
        checkpoints: &[Option<BTreeMap<String, Grant>>],
    ) {
        let name = t.plan.name.clone();
        let status = &pod["status"]["containerStatuses"][0];
        let restarts = status["restartCount"].as_u64().unwrap_or_default();
        let running = status["state"]["running"].is_object();
        let since = self.fault.as_ref().map_or(t.created, |f| f.began);
        if restarts > t.killed_at.unwrap_or_default() && running {
            let log = self.cluster.pod_log(pod, "main").unwrap_or_default();
            if !log.contains(PROBED) {
                return;
            }
            let Some(checkpoint) = &checkpoints[t.plan.path.node()] else {
                return;
            };
            let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
            let grant = checkpoint.get(uid).cloned().unwrap_or_default();
            for p in pods::probe_problems(&log, &grant, &t.plan) {
                self.violate(format!(
                    "{label}, restarted after its kill, checkpoint {grant:?}: {p}"
                ));
            }
            println!("churn: {label}: its killed container started again with its devices");
            self.restarted.insert(name);
        } else if since.elapsed() > STUCK {
            self.violate(format!(
                "{label}: its killed container did not start again in {STUCK:?}: {status}"
            ));
            self.restarted.insert(name);
        }
    }

    /// Records the end of an OOM pod once its container has terminated; true then.
    fn check_oom(&mut self, name: &str, label: &str, terminated: &Value) -> bool {
        if !terminated.is_object() {
            return false;
        }
        match terminated["reason"].as_str() {
            Some("OOMKilled") => self.outcome.oom_killed += 1,
            other => self.violate(format!(
                "{label}: allocated past its memory limit and ended {other:?}, not OOMKilled"
            )),
        }
        self.record_end(name);
        true
    }

    fn record_end(&mut self, name: &str) {
        self.finished.insert(name.to_owned());
    }

    /// Never one exclusive device (or one replica id of a shared one) in two pods on a node at
    /// once:
    /// - in the kubelet's checkpoint, at any moment: the kubelet drops a pod it no longer runs
    ///   from it before it allocates that pod's devices again, so one device under two pods is
    ///   a double grant, whatever the API says of them;
    /// - among the pods the API shows running, by the checkpoint and by what each pod's probe
    ///   showed it holding; as the API's phase of a pod the kubelet has just ended lags, an
    ///   overlap there must last past [`OVERLAP_GRACE`] (each pod's probe is also held to its
    ///   own checkpoint entry, [`pods::probe_problems`]).
    fn exclusive(&mut self, items: &[Value], checkpoints: &[Option<BTreeMap<String, Grant>>]) {
        for (node, checkpoint) in checkpoints.iter().enumerate() {
            let mut by_device: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
            for (uid, grant) in checkpoint.iter().flatten() {
                for key in grant_keys(grant) {
                    by_device.entry(key).or_default().insert(uid);
                }
            }
            for (dev, uids) in by_device {
                let names: Vec<String> = uids
                    .iter()
                    .map(|u| self.uids.get(*u).cloned().unwrap_or_else(|| u.to_string()))
                    .collect();
                let key = (node, names.join(","), String::new(), dev.clone());
                let source = match node == EnginePath::Dra.node() {
                    true => "the API's allocated ResourceClaims",
                    false => "the kubelet's checkpoint",
                };
                if uids.len() > 1 && self.reported_overlaps.insert(key) {
                    self.violate(format!(
                        "device {dev} of node {node} allocated to {} pods at once in {source}: {names:?}",
                        uids.len()
                    ));
                }
            }
        }
        let mut seen = BTreeSet::new();
        for (node, checkpoint) in checkpoints.iter().enumerate() {
            let mut holders: Vec<(String, BTreeSet<String>)> = Vec::new();
            let mut sharing = 0;
            for pod in items {
                let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                let Some(t) = self.pods.get(name) else {
                    continue;
                };
                let running = pod["status"]["phase"] == "Running"
                    && pod["status"]["containerStatuses"][0]["state"]["running"].is_object();
                if !running || t.plan.path.node() != node {
                    continue;
                }
                let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
                let mut held: BTreeSet<String> = t.observed.iter().cloned().collect();
                if let Some(grant) = checkpoint.as_ref().and_then(|c| c.get(uid)) {
                    held.extend(grant_keys(grant));
                    sharing += usize::from(grant.contains_key(pods::KVM.resource));
                }
                holders.push((name.to_owned(), held));
            }
            self.outcome.most_sharing = self.outcome.most_sharing.max(sharing);
            for (i, (a, ha)) in holders.iter().enumerate() {
                for (b, hb) in &holders[i + 1..] {
                    for dev in ha.intersection(hb) {
                        seen.insert((node, a.clone(), b.clone(), dev.clone()));
                    }
                }
            }
        }
        self.overlaps.retain(|k, _| seen.contains(k));
        for k in seen {
            let since = *self.overlaps.entry(k.clone()).or_insert_with(Instant::now);
            if since.elapsed() > OVERLAP_GRACE && self.reported_overlaps.insert(k.clone()) {
                let (node, a, b, dev) = k;
                self.violate(format!(
                    "device {dev} of node {node} held by running pods {a} and {b} at once for {OVERLAP_GRACE:?}"
                ));
            }
        }
    }

    /// Advances the fault in progress, or injects the next one when it is due.
    fn step_fault(&mut self) -> Result<()> {
        if let Some(mut fault) = self.fault.take() {
            faults::undo_when_due(&mut self.cluster, &mut fault)?;
            if !fault.injected() {
                let progress = Progress {
                    finished: &self.finished,
                    restarted: &self.restarted,
                };
                fault
                    .waiting_for
                    .retain(|c| !faults::holds(&self.cluster, c, ACCELS.len(), &progress));
            }
            if fault.injected() || !fault.waiting_for.is_empty() {
                anyhow::ensure!(
                    fault.began.elapsed() < STUCK,
                    "no recovery from {} ({}) within {STUCK:?}: still waiting for {:?}\n{}",
                    fault.kind.name(),
                    fault.detail,
                    fault.waiting_for,
                    self.cluster.logs()
                );
                self.fault = Some(fault);
            } else {
                println!(
                    "churn: recovered from {} in {:.1} s",
                    fault.kind.name(),
                    fault.began.elapsed().as_secs_f64()
                );
            }
            return Ok(());
        }
        let i = self.faults_begun;
        if i >= self.schedule_len() || self.starts() < self.fault_due(i) {
            return Ok(());
        }
        let kind = FaultKind::ALL[i % FaultKind::ALL.len()];
        let round = i / FaultKind::ALL.len();
        // The CDI specs are wiped while a claimed pod runs, whose container is then killed.
        let victim = match kind {
            FaultKind::CdiWipe => match self.claimed_holder() {
                Some(v) => Some(v),
                None => return Ok(()),
            },
            _ => None,
        };
        // Each round moves every fault one node further (and the kinds start on different
        // nodes), but the device plugin is killed on the shim node only, so that the NRI
        // node's plugin lives through the whole run and its growth is measured; containerd
        // restarts on its two nodes in turn, CRI-O on its own; the DRA faults hit the DRA
        // node.
        let node = match kind {
            FaultKind::PluginKill => EnginePath::Shim.node(),
            FaultKind::ContainerdRestart => EnginePath::ALL[round % 2].node(),
            FaultKind::CrioRestart => EnginePath::Cdi.node(),
            FaultKind::DraKubeletRestart | FaultKind::CdiWipe => EnginePath::Dra.node(),
            _ => (round + i % FaultKind::ALL.len()) % EnginePath::ALL.len(),
        };
        if kind == FaultKind::ContainerdRestart {
            let shims = leaks::shim_pids(&self.cluster.nodes()[node]);
            self.restart_survivors.extend(shims);
        }
        let pick = self.rng.next_u64();
        let mut fault = faults::inject(&mut self.cluster, kind, node, ACCELS.len(), pick)?;
        self.faults_begun += 1;
        *self.outcome.faults.entry(kind.name()).or_default() += 1;
        println!(
            "churn: fault {}/{} at start {}: {}",
            i + 1,
            self.schedule_len(),
            self.starts(),
            fault.detail
        );
        let path = EnginePath::ALL[node];
        match kind {
            FaultKind::OomKill => {
                let devices = 1 + self.rng.below(2) as u32;
                let kernel = self.kernel_mix();
                let name = self.create(path, Kind::Oom, devices, kernel)?;
                fault.waiting_for.push(faults::Condition::PodFinished(name));
            }
            // Something must start on the node while its pod-resources socket is away; a claim
            // must be allocated once the DRA node's kubelet is back.
            FaultKind::PodResourcesGone | FaultKind::DraKubeletRestart => {
                self.create(path, Kind::Probe, 1, Vec::new())?;
            }
            // A new claim must be prepared after the wipe, and the killed container of a
            // claimed pod must start again with its devices.
            FaultKind::CdiWipe => {
                let name = self.create(path, Kind::Probe, 1, Vec::new())?;
                self.pods.get_mut(&name).expect("created").must_start = true;
                let (victim, restarts, container) = victim.expect("chosen");
                self.kill_container(&container)?;
                fault.detail += &format!(", killed the container of {victim}");
                self.pods.get_mut(&victim).expect("holding").killed_at = Some(restarts);
                fault
                    .waiting_for
                    .push(faults::Condition::PodRestarted(victim));
            }
            _ => {}
        }
        self.fault = Some(fault);
        Ok(())
    }

    /// A pod on the DRA path holding claims, started and checked, whose container may restart
    /// (its restart count and container id); `None` when none runs now.
    fn claimed_holder(&self) -> Option<(String, u64, String)> {
        let items = self.list_pods().ok()?;
        items.iter().find_map(|pod| {
            let name = pod["metadata"]["name"].as_str()?;
            let t = self.pods.get(name)?;
            let status = &pod["status"]["containerStatuses"][0];
            (t.plan.path == EnginePath::Dra
                && t.plan.kind == Kind::Probe
                && t.state == State::Holding
                && t.killed_at.is_none()
                && (t.plan.devices > 0 || !t.plan.kernel.is_empty())
                && status["state"]["running"].is_object())
            .then_some(())?;
            let id = status["containerID"]
                .as_str()?
                .strip_prefix("containerd://")?;
            Some((
                name.to_owned(),
                status["restartCount"].as_u64().unwrap_or_default(),
                id.to_owned(),
            ))
        })
    }

    /// SIGKILLs the container `id` on the DRA node (its task in containerd).
    fn kill_container(&self, id: &str) -> Result<()> {
        let node = &self.cluster.nodes()[EnginePath::Dra.node()];
        let mut kill = node.containerd()?.ctr();
        kill.args(["-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id]);
        crate::daemons::run_ok(kill).with_context(|| format!("kill container {id}"))?;
        Ok(())
    }

    /// Deletes the oldest holding pods beyond the ones the run keeps, then creates pods until
    /// [`Settings::concurrency`] are alive.
    fn replace_pods(&mut self) -> Result<()> {
        let alive = |pods: &BTreeMap<String, Tracked>| {
            pods.values().filter(|t| t.state != State::Deleting).count()
        };
        if alive(&self.pods) >= self.settings.concurrency {
            // A pod whose killed container is yet to start again is kept for that check.
            let mut holding: Vec<(Instant, String)> = self
                .pods
                .iter()
                .filter(|(_, t)| t.state == State::Holding)
                .filter(|(n, t)| t.killed_at.is_none() || self.restarted.contains(*n))
                .map(|(n, t)| (t.created, n.clone()))
                .collect();
            holding.sort();
            let excess = alive(&self.pods) + 1 - self.settings.concurrency;
            let names: Vec<String> = holding.into_iter().take(excess).map(|(_, n)| n).collect();
            self.delete(&names)?;
        }
        while alive(&self.pods) < self.settings.concurrency
            && (self.starts() + self.waiting() < self.settings.starts
                || self.faults_begun < self.schedule_len())
        {
            // Every tenth pod forges its request, on each path in turn; the others ask for a
            // random path, count and kernel devices.
            let forgers = self.next_pod / FORGER_EVERY;
            let paths = EnginePath::ALL.len();
            let (path, kind, devices, kernel) = match (self.next_pod + 1) % FORGER_EVERY {
                0 => (
                    EnginePath::ALL[forgers % paths],
                    Kind::Forger,
                    0,
                    Vec::new(),
                ),
                _ => (
                    EnginePath::ALL[self.rng.below(paths as u64) as usize],
                    Kind::Probe,
                    self.rng.below(3) as u32,
                    self.kernel_mix(),
                ),
            };
            self.create(path, kind, devices, kernel)?;
        }
        Ok(())
    }

    fn waiting(&self) -> usize {
        self.pods
            .values()
            .filter(|t| t.state == State::Waiting && t.plan.kind != Kind::Forger)
            .count()
    }

    /// The kernel devices a pod asks for: each one time in two (kvm: three replicas a node,
    /// so a pod asking it may wait for a holder's deletion).
    fn kernel_mix(&mut self) -> Vec<KernelDevice> {
        KERNEL_DEVICES
            .into_iter()
            .filter(|_| self.rng.below(2) == 0)
            .collect()
    }

    fn create(
        &mut self,
        path: EnginePath,
        kind: Kind,
        devices: u32,
        kernel: Vec<KernelDevice>,
    ) -> Result<String> {
        self.next_pod += 1;
        let plan = PodPlan {
            name: format!("churn-{}", self.next_pod),
            path,
            devices,
            kernel,
            kind,
        };
        let node = self.cluster.nodes()[path.node()].name().to_owned();
        self.cluster.apply(&plan.manifest(&node))?;
        let name = plan.name.clone();
        self.pods.insert(
            name.clone(),
            Tracked {
                plan,
                created: Instant::now(),
                faults_at_create: self.faults_begun,
                fault_at_create: self.fault.is_some(),
                state: State::Waiting,
                observed: Vec::new(),
                must_start: false,
                killed_at: None,
            },
        );
        Ok(name)
    }

    fn delete(&mut self, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let mut args = vec!["delete", "pod", "--wait=false", "--ignore-not-found"];
        args.extend(names.iter().map(String::as_str));
        self.cluster.kubectl(&args)?;
        for n in names {
            if let Some(t) = self.pods.get_mut(n) {
                t.state = State::Deleting;
            }
        }
        Ok(())
    }

    /// Reads the device plugins and `devinject-nri` of every node from `/proc`.
    fn read_daemons(&mut self) {
        for node in self.cluster.nodes() {
            for (component, pid) in [
                ("device plugin", node.plugin_pid()),
                ("devinject-nri", node.nri_plugin_pid()),
                ("devinject-dra", node.dra_plugin_pid()),
            ] {
                let Some(pid) = pid else {
                    continue;
                };
                let key = format!("{component} on {}", node.name());
                let Some(s) = procstat::sample(pid) else {
                    continue;
                };
                let entries = self.readings.entry(key).or_default();
                match entries.iter_mut().find(|(p, _, _)| *p == pid) {
                    Some(e) => e.2 = s,
                    None => entries.push((pid, s, s)),
                }
            }
        }
    }

    /// Deletes every pod, waits for the nodes to clean up, checks them for leaks and the
    /// daemons for growth, and scrapes their metrics.
    fn finish(&mut self) {
        if let Some(mut fault) = self.fault.take() {
            if let Err(e) = faults::undo_when_due(&mut self.cluster, &mut fault) {
                self.violate(format!("cannot undo {}: {e:#}", fault.detail));
            }
        }
        self.read_daemons();
        let _ =
            self.cluster
                .kubectl(&["delete", "pods", "-l", "devinject-churn=1", "--wait=false"]);
        let gone = crate::daemons::poll("the run's pods to go", CLEANUP, || {
            Ok(self
                .cluster
                .kubectl(&["get", "pods", "-l", "devinject-churn=1", "-o", "name"])?
                .is_empty()
                .then_some(()))
        });
        if let Err(e) = gone {
            self.violate(format!("{e:#}"));
        }
        // The nodes clean up asynchronously (sandboxes, volumes, cgroups): what is still
        // there when they have had their time is a leak.
        let mut found = leaks::Found::default();
        let clean = crate::daemons::poll("the nodes to clean up", CLEANUP, || {
            found = leaks::leaks(&self.cluster, &self.baseline, &self.restart_survivors);
            Ok(found.leaks.is_empty().then_some(()))
        });
        if clean.is_err() {
            for f in std::mem::take(&mut found.leaks) {
                self.violate(format!("leak: {f}"));
            }
        }
        self.outcome.engine_leftovers = found.engine_leftovers;
        self.read_daemons();
        for (component, by_pid) in std::mem::take(&mut self.readings) {
            let killed = by_pid.len() > 1;
            // The process that lived through the run: growth over it is a leak.
            if let (false, Some((pid, first, last))) = (killed, by_pid.first()) {
                if let Some(why) = procstat::unbounded(first, last) {
                    self.violate(format!("{component} pid {pid} grew: {why}"));
                }
            }
            self.outcome.readings.push(Readings {
                component,
                by_pid,
                killed_by_fault: killed,
            });
        }
        self.outcome.scrapes = metrics::scrape(&self.cluster);
        // Every forged request NRI refused reached the decision log and the NRI node's device
        // plugin's count of it (the plugin there lives through the run).
        let forged = self
            .outcome
            .forgers_refused
            .get("nri")
            .copied()
            .unwrap_or(0);
        let counted: u64 = self
            .outcome
            .scrapes
            .iter()
            .filter(|s| s.component.starts_with("devinject-device-plugin"))
            .map(|s| metrics::node_refusals(&s.text, "nri"))
            .sum();
        if counted < forged as u64 {
            self.violate(format!(
                "the device plugins counted {counted} refusals of devinject-nri in the node's decision log, fewer than the {forged} forged requests it refused"
            ));
        }
    }
}
