//! The driver behind the node service: prepares a claim by reading its allocation from the API
//! server, checking every device against what discovery finds on this node now, running the
//! profile's prepare step with the function the claim's configuration chose, and writing one
//! transient CDI spec per profile; unprepares it by removing exactly the files its checkpoint
//! entry names. The checkpoint is saved before the kubelet hears of a prepared claim, so a
//! driver killed at any point unprepares after its restart what it wrote before.
//!
//! # Concurrency
//! One claim's prepare never waits for another's (docs/security.md): no lock shared by claims
//! is held across the API server read or a prepare program. Each claim has its own lock, so
//! the prepare and unprepare of one claim never interleave; at most
//! [`MAX_CONCURRENT_PREPARES`] claims read the API server and run their programs at once; the
//! checkpoint's lock is held only around one claim's in-memory update and the atomic file
//! write, off the async thread. Everything a claim waits for (its lock, a slot, the API server,
//! its programs) ends by the kubelet's deadline for the call ([`crate::prepared::Deadline`]), so
//! a slow claim fails alone, with a message, instead of making the others miss theirs.
//!
//! # Parts
//! `prepare.rs` answers the kubelet's prepare: from the checkpoint (`entries.rs`) when the
//! claim's specs are still there, else through `plan.rs` (each device mapped back to a
//! discovered one, its prepare runs and its spec built), the prepare programs, `metadata.rs`'s
//! device metadata files and `spec_write.rs`'s specs (undone on failure), and the entry saved.
//! `unprepare.rs` removes what a prepare wrote; `restore.rs` puts back the lost specs of claims
//! prepared in this boot; `before_binding.rs` runs the prepare steps the scheduler waits for.
//! `claim_locks.rs` keeps one claim's calls apart, and `claim_label.rs` names a claim and checks
//! its names before they name a file or an API path.

mod before_binding;
mod claim_label;
mod claim_locks;
mod device_status;
mod entries;
#[cfg(test)]
mod fixtures;
mod metadata;
mod plan;
mod prepare;
mod restore;
mod spec_write;
mod unprepare;

pub use before_binding::BeforeBinding;
pub use prepare::PREPARED;
pub use restore::RESTORED;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use devinject_devices::{HostRoots, Profile, ProfileSet};
use tokio::sync::Semaphore;

use crate::checkpoint::Checkpoint;
use crate::claim_spec::SpecContext;
use crate::metrics::{DraMetrics, Prepared};
use crate::naming;
use crate::plugin_holds::PluginHolds;
use crate::prepared::{ClaimRef, Claims, Deadline, PreparedDevice};
use crate::taint_rules::TaintRules;
use claim_locks::ClaimLocks;

/// The most claims that read the API server and run their prepare programs at the same time.
pub const MAX_CONCURRENT_PREPARES: usize = 8;

/// What the driver serves and where it writes.
#[derive(Debug, Clone)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct DriverConfig {
    /// This node's name, as its kubelet registers it.
    pub node: String,
    pub profiles: ProfileSet,
    /// Where device nodes, sysfs and driver files are.
    pub roots: HostRoots,
    /// How claim specs are rendered and where they go.
    pub spec: SpecContext,
    /// The checkpoint file.
    pub checkpoint: PathBuf,
    /// Where the claims' device metadata files go (host path; [`crate::device_metadata`]).
    pub metadata_dir: PathBuf,
}

/// The DRA driver's claim handling ([`Claims`]).
pub struct Driver {
    config: DriverConfig,
    client: kube::Client,
    /// The prepared claims. Locked only around one claim's in-memory update and file write
    /// (never across the API server or a program), so the file has one writer at a time.
    checkpoint: Arc<std::sync::Mutex<Checkpoint>>,
    /// One lock per claim being handled: its prepare and unprepare never interleave.
    busy: ClaimLocks,
    /// Slots for the claims' API server reads and prepare programs.
    slots: Arc<Semaphore>,
    /// This boot of the node (`<proc>/sys/kernel/random/boot_id`), recorded with each claim.
    boot_id: Option<String>,
    metrics: DraMetrics,
    /// The devices running containers hold through the device plugin: a claim allocated one
    /// of them is not prepared until the holder ends ([`crate::plugin_holds`]).
    plugin_holds: tokio::sync::watch::Receiver<PluginHolds>,
    /// The DeviceTaintRules that can select this driver's devices: a claim allocated a device
    /// one of them taints is not prepared unless it tolerates the taint
    /// ([`crate::taint_rules`]).
    taint_rules: tokio::sync::watch::Receiver<TaintRules>,
}

/// Why the driver could not start.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The checkpoint could not be read.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
}

impl Driver {
    /// The driver of `config`, asking the API server through `client`; loads the checkpoint.
    pub fn new(config: DriverConfig, client: kube::Client) -> Result<Self, DriverError> {
        let checkpoint = Checkpoint::load(&config.checkpoint)?;
        let boot_id =
            std::fs::read_to_string(config.roots.proc_root.join("sys/kernel/random/boot_id"))
                .ok()
                .map(|id| id.trim().to_owned())
                .filter(|id| !id.is_empty());
        Ok(Self {
            config,
            client,
            checkpoint: Arc::new(std::sync::Mutex::new(checkpoint)),
            busy: ClaimLocks::default(),
            slots: Arc::new(Semaphore::new(MAX_CONCURRENT_PREPARES)),
            boot_id,
            metrics: DraMetrics::default(),
            plugin_holds: tokio::sync::watch::channel(PluginHolds::default()).1,
            taint_rules: tokio::sync::watch::channel(TaintRules::default()).1,
        })
    }

    /// The same driver, refusing to prepare devices that `holds` says the device plugin gave
    /// a running container.
    pub fn with_plugin_holds(mut self, holds: tokio::sync::watch::Receiver<PluginHolds>) -> Self {
        self.plugin_holds = holds;
        self
    }

    /// The same driver, refusing to prepare devices that `rules` taint for a claim that does
    /// not tolerate the taint.
    pub fn with_taint_rules(mut self, rules: tokio::sync::watch::Receiver<TaintRules>) -> Self {
        self.taint_rules = rules;
        self
    }

    /// The same driver, counting its claims into `metrics`.
    pub fn with_metrics(mut self, metrics: DraMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// This node's pools, one per profile.
    pub(crate) fn pools(&self) -> BTreeSet<String> {
        self.config
            .profiles
            .iter()
            .map(|p| naming::pool(&self.config.node, p.name.as_str()))
            .collect()
    }

    /// The profile of `pool` (one of [`Driver::pools`]).
    fn profile_of(&self, pool: &str) -> Option<&Profile> {
        let name = pool.strip_prefix(&format!("{}/", self.config.node))?;
        self.config.profiles.get(name)
    }
}

impl Claims for Driver {
    async fn prepare(
        &self,
        claim: ClaimRef,
        deadline: Deadline,
    ) -> Result<Vec<PreparedDevice>, String> {
        let started = Instant::now();
        let result = self.prepare_claim(claim, deadline, started).await;
        let outcome = match &result {
            Ok((_, outcome)) => *outcome,
            Err(refused) => Prepared::Refused(refused.reason),
        };
        self.metrics.prepared(outcome, started.elapsed());
        result.map(|(devices, _)| devices).map_err(|r| r.message)
    }

    async fn unprepare(&self, claim: ClaimRef, deadline: Deadline) -> Result<(), String> {
        let result = self.unprepare_claim(claim, deadline).await;
        self.metrics.unprepared(result.is_ok());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::fixtures::{demo, node, profile_text, BOOT, NODE};

    #[tokio::test(flavor = "current_thread")]
    async fn the_nodes_pools_are_one_per_profile() {
        let node = node(&[demo("", ""), profile_text("kvm", "", "")], 1);
        let pools: Vec<String> = node.driver.pools().into_iter().collect();
        assert_eq!(pools, ["node-a/demo", "node-a/kvm"]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_pool_maps_back_to_its_profile_only_on_this_node() {
        let node = node(&[demo("", ""), profile_text("kvm", "", "")], 1);
        let profile = |pool: &str| node.driver.profile_of(pool).map(|p| p.name.to_string());
        assert_eq!(profile(&format!("{NODE}/kvm")).as_deref(), Some("kvm"));
        assert_eq!(profile("node-b/kvm"), None, "another node's pool");
        assert_eq!(profile(&format!("{NODE}/other")), None, "no such profile");
        assert_eq!(profile(NODE), None);
        assert_eq!(profile("node-a-kvm"), None);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_boot_id_is_read_trimmed_and_an_empty_one_is_none() {
        let node = node(&[demo("", "")], 1);
        assert_eq!(node.driver.boot_id.as_deref(), Some(BOOT));
        let file = node.root.join("proc/sys/kernel/random/boot_id");
        std::fs::write(&file, "\n").unwrap();
        let again = Driver::new(
            node.driver.config.clone(),
            crate::driver::fixtures::unreachable_api(),
        )
        .unwrap();
        assert_eq!(again.boot_id, None);
        std::fs::remove_file(&file).unwrap();
        let unknown = Driver::new(
            node.driver.config.clone(),
            crate::driver::fixtures::unreachable_api(),
        )
        .unwrap();
        assert_eq!(unknown.boot_id, None);
    }
}
