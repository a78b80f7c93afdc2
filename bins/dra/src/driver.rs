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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use devinject_contained::prepare_step::{run_all, run_all_by};
use devinject_devices::{
    prepare_runs, DeviceId, Excerpt, FunctionRequest, HostRoots, Inventory, PrepareRun, Profile,
    ProfileSet,
};
use devinject_discovery::{discover, resolve_driver_files};
use devinject_hostfs::host_dir::HostDir;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use tokio::sync::{Mutex, OwnedMutexGuard, Semaphore};
use tracing::{info, warn};

use crate::checkpoint::{Checkpoint, ClaimEntry, MetadataMount};
use crate::claim::{self, AllocatedDevice, Allocation};
use crate::claim_spec::{self, ClaimSpec, SpecContext};
use crate::device_metadata::{self, MetadataClaim, MetadataDevice, MetadataFile};
use crate::metrics::{DraMetrics, Prepared};
use crate::naming;
use crate::prepared::{ClaimRef, Claims, Deadline, PreparedDevice};
use crate::slices::{
    device_attributes, device_names, unhealthy_taint, ATTR_PARTITION, ATTR_REPLICA,
};
use devinject_devices::request::split_replica;

/// The prepare runs of `profile` for each function's devices in `by_function` (`None`: the
/// profile's default), the function checked against the profile.
fn runs(
    what: &str,
    profile: &Profile,
    inventory: &Inventory,
    by_function: &BTreeMap<Option<String>, Vec<DeviceId>>,
) -> Result<Vec<PrepareRun>, String> {
    let mut runs = Vec::new();
    for (function, ids) in by_function {
        let request = function.as_ref().map(|value| FunctionRequest {
            profile: profile.name.clone(),
            origin: format!("the opaque parameter `function` of {what}"),
            value: value.clone(),
        });
        runs.extend(
            prepare_runs(profile, inventory, ids, request.as_ref()).map_err(|e| e.to_string())?,
        );
    }
    Ok(runs)
}

/// The time between the steps of one prepare, in microseconds.
struct Steps(Instant);

impl Steps {
    fn new() -> Self {
        Self(Instant::now())
    }

    /// The microseconds since the last lap (or the start).
    fn lap(&mut self) -> u64 {
        let now = Instant::now();
        let us = now.duration_since(self.0).as_micros();
        self.0 = now;
        u64::try_from(us).unwrap_or(u64::MAX)
    }
}

/// How [`Driver::prepare_before_binding`] ended for a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeforeBinding {
    /// The claim has no device of this node that prepares before binding.
    Nothing,
    /// Every such device's prepare step succeeded.
    Prepared(Vec<AllocatedDevice>),
    /// A prepare step failed (`message`), that of `failed` (`None`: before any ran).
    Failed {
        /// The claim's devices that prepare before binding.
        devices: Vec<AllocatedDevice>,
        /// The device whose step failed: its profile and id.
        failed: Option<(String, String)>,
        /// Why, for the claim's device status and the log.
        message: String,
    },
}

/// What the driver logs for each claim it prepared, with `took_us`, the time from the kubelet's
/// call to the answer (the benchmark reads it).
pub const PREPARED: &str = "prepared";

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
}

/// What the driver logs for each lost claim spec it put back.
pub const RESTORED: &str = "restored a prepared claim's lost CDI spec";

/// A lock per claim UID, kept only while someone holds or waits for it.
#[derive(Default)]
struct ClaimLocks(Arc<std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>>);

/// A held [`ClaimLocks`] entry; dropping it forgets the entry when nobody else wants it.
struct ClaimGuard {
    locks: Arc<std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>>,
    uid: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl ClaimLocks {
    /// Waits for claim `uid`'s lock.
    async fn lock(&self, uid: &str) -> ClaimGuard {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(map.entry(uid.to_owned()).or_default())
        };
        let mut guard = ClaimGuard {
            locks: Arc::clone(&self.0),
            uid: uid.to_owned(),
            guard: None,
        };
        guard.guard = Some(lock.lock_owned().await);
        guard
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        // Only the map holds it now: nobody holds or waits for this claim.
        if map
            .get(&self.uid)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            map.remove(&self.uid);
        }
    }
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
        })
    }

    /// Puts back every spec of a claim prepared in this boot that is missing from the CDI
    /// directory (emptied by a remount, a cleanup tool or an operator while its pods run: the
    /// kubelet prepares a claim only when it creates a sandbox, so a restarting container of
    /// such a pod would find no spec). Each spec is built again from the claim's devices as
    /// the checkpoint records them and discovery finds them now; the prepare steps do not run
    /// again (the devices hold what they loaded). Claims prepared before a reboot are left to
    /// the kubelet's prepare, which runs their steps. Returns how many specs were put back;
    /// what cannot be is logged.
    pub async fn restore_specs(&self) -> usize {
        let Some(boot) = &self.boot_id else {
            return 0;
        };
        let mut restored = 0;
        for listed in self.prepared() {
            if listed.boot_id.as_ref() != Some(boot) {
                continue;
            }
            let uid = listed.claim.uid.clone();
            // Under the claim's lock, as it stands then: an unprepare may have removed it.
            let _claim = self.busy.lock(&uid).await;
            let Some(entry) = self.entry(&uid) else {
                continue;
            };
            for (profile, file) in entry.profiles.iter().zip(&entry.spec_files) {
                match claim_spec::present(&self.config.spec, file) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => {
                        warn!(file = %file, error = %e, "cannot look for a prepared claim's CDI spec");
                        continue;
                    }
                }
                let what = format!(
                    "claim {}/{} ({})",
                    Excerpt(&entry.claim.namespace),
                    Excerpt(&entry.claim.name),
                    Excerpt(&uid)
                );
                match self.rebuild(&uid, profile, &entry.devices, &entry.metadata) {
                    Ok(spec) if spec.file_name == *file => {
                        match claim_spec::write(&self.config.spec, &spec) {
                            Ok(()) => {
                                restored += 1;
                                warn!(claim = %what, %file, "{RESTORED}");
                            }
                            Err(e) => {
                                warn!(claim = %what, %file, error = %e, "cannot put back a prepared claim's lost CDI spec")
                            }
                        }
                    }
                    Ok(spec) => {
                        warn!(claim = %what, %file, built = %spec.file_name, "a prepared claim's spec name changed; not put back")
                    }
                    Err(e) => {
                        warn!(claim = %what, %file, error = %e, "cannot put back a prepared claim's lost CDI spec")
                    }
                }
            }
        }
        restored
    }

    /// The spec of claim `uid` for `profile`, built again from `devices` (as prepared), with
    /// the `metadata` mounts it had.
    fn rebuild(
        &self,
        uid: &str,
        profile: &str,
        devices: &[PreparedDevice],
        metadata: &[MetadataMount],
    ) -> Result<ClaimSpec, String> {
        let p = self
            .config
            .profiles
            .get(profile)
            .ok_or_else(|| format!("profile {profile} is not served any more"))?;
        let pool = naming::pool(&self.config.node, profile);
        let inventory = discover(p, &self.config.roots)
            .map_err(|e| format!("profile {profile}: discovery: {e}"))?;
        let names = device_names(p, &inventory).map_err(|e| e.to_string())?;
        let mut pairs = Vec::new();
        for d in devices.iter().filter(|d| d.pool_name == pool) {
            let published = names.id(&d.device_name).ok_or_else(|| {
                format!(
                    "device {} is not on this node any more",
                    Excerpt(&d.device_name)
                )
            })?;
            let id = split_replica(published).map_or(published, |(id, _)| id);
            pairs.push((d.device_name.clone(), id.to_owned()));
        }
        let files = resolve_driver_files(p, &self.config.roots)
            .map_err(|e| format!("profile {profile}: driver files: {e}"))?;
        let mut spec = claim_spec::build(&self.config.spec, uid, p, &inventory, &files, &pairs)
            .map_err(|e| e.to_string())?;
        claim_spec::mount_metadata(&mut spec, uid, metadata, &self.config.metadata_dir);
        Ok(spec)
    }

    /// Keeps the specs of the claims prepared in this boot in the CDI directory: puts back
    /// what is missing now, then whenever an entry of the directory, or the directory itself,
    /// is removed or moved away (inotify). Runs until the watch cannot be made again.
    pub async fn keep_specs(self: Arc<Self>) {
        loop {
            let dir = match claim_spec::create_dir_shown(&self.config.spec) {
                Ok(dir) => dir,
                Err(e) => {
                    warn!(error = %e, "cannot make the CDI spec directory to watch it; lost claim specs are put back only at the next start");
                    return;
                }
            };
            let inotify = match inotify::Inotify::init() {
                Ok(i) => i,
                Err(e) => {
                    warn!(error = %e, "inotify is not available; lost claim specs are put back only at the next start");
                    return;
                }
            };
            use inotify::WatchMask as M;
            let mask = M::DELETE
                | M::MOVED_FROM
                | M::DELETE_SELF
                | M::MOVE_SELF
                | M::ONLYDIR
                | M::DONT_FOLLOW;
            if let Err(e) = inotify.watches().add(&dir, mask) {
                warn!(dir = %dir.display(), error = %e, "cannot watch the CDI spec directory; lost claim specs are put back only at the next start");
                return;
            }
            let mut events = match inotify.into_event_stream([0u8; 4096]) {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "cannot read inotify events; lost claim specs are put back only at the next start");
                    return;
                }
            };
            // Watching first, then looking: nothing removed in between is missed.
            self.restore_specs().await;
            loop {
                let Some(Ok(event)) = tokio_stream::StreamExt::next(&mut events).await else {
                    break;
                };
                let gone = event.mask.intersects(
                    inotify::EventMask::DELETE_SELF
                        | inotify::EventMask::MOVE_SELF
                        | inotify::EventMask::IGNORED,
                );
                // Only a claim spec's name (ours, `k8s.<driver>-*.json`) can be one to put back;
                // the temporary files of atomic writes come and go by the thousand.
                let vendor = format!("{}-", naming::cdi_vendor(&self.config.spec.driver));
                let ours = event
                    .name
                    .as_ref()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&vendor) && n.ends_with(".json"));
                if gone || ours {
                    self.restore_specs().await;
                }
                if gone {
                    // The directory went away: make it again and watch the new one.
                    break;
                }
            }
        }
    }

    /// The checkpoint entry of claim `uid`, copied out under a short lock.
    fn entry(&self, uid: &str) -> Option<ClaimEntry> {
        let checkpoint = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        checkpoint.get(uid).cloned()
    }

    /// Every claim the checkpoint holds, copied out under a short lock.
    pub fn prepared(&self) -> Vec<ClaimEntry> {
        let checkpoint = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        checkpoint.claims().map(|(_, e)| e.clone()).collect()
    }

    /// Records (`Some`) or forgets (`None`) claim `uid` and saves the checkpoint, off the
    /// async thread, the lock held for this one update and the atomic write only.
    async fn save(
        &self,
        uid: &str,
        entry: Option<ClaimEntry>,
    ) -> Result<(), crate::checkpoint::CheckpointError> {
        let checkpoint = Arc::clone(&self.checkpoint);
        let uid = uid.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut checkpoint = checkpoint.lock().unwrap_or_else(|p| p.into_inner());
            match entry {
                Some(entry) => checkpoint.insert(&uid, entry),
                None => checkpoint.remove(&uid).map(drop),
            }
        })
        .await
        .unwrap_or_else(|e| {
            Err(crate::checkpoint::CheckpointError::Entry {
                uid: String::new(),
                problem: format!("the checkpoint's task failed: {e}"),
            })
        })
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

    /// Plans `claim`'s devices (its UID checked: `uid`), grouped by profile: each device mapped
    /// back to a discovered, healthy one, the profile's prepare runs with the function the
    /// claim's configuration chose for its request (but for devices prepared before binding,
    /// unless `again`: the claim is prepared again, e.g. after the node rebooted), and the
    /// spec, built but not written.
    fn plan(
        &self,
        what: &str,
        uid: &str,
        allocation: &Allocation,
        requests: &mut BTreeMap<String, Vec<MetadataDevice>>,
        again: bool,
    ) -> Result<Vec<ProfilePlan>, String> {
        let mut by_profile: BTreeMap<String, Vec<&AllocatedDevice>> = BTreeMap::new();
        for d in &allocation.devices {
            let profile = self
                .profile_of(&d.pool)
                .ok_or_else(|| format!("pool {} is not one of this node's", Excerpt(&d.pool)))?;
            by_profile
                .entry(profile.name.as_str().to_owned())
                .or_default()
                .push(d);
        }
        let mut plans = Vec::new();
        for (name, devices) in by_profile {
            let profile = self.config.profiles.get(&name).ok_or("profile vanished")?;
            let inventory = discover(profile, &self.config.roots)
                .map_err(|e| format!("profile {name}: discovery: {e}"))?;
            let names = device_names(profile, &inventory).map_err(|e| e.to_string())?;
            let mut pairs = Vec::new();
            // The devices of each chosen function (none: the profile's default), in claim order.
            let mut by_function: BTreeMap<Option<String>, Vec<DeviceId>> = BTreeMap::new();
            for d in &devices {
                let published = names.id(&d.device).ok_or_else(|| {
                    format!(
                        "device {} of pool {} is not on this node any more (unplugged since it \
                         was allocated): delete the pod so that the claim is allocated again",
                        Excerpt(&d.device),
                        Excerpt(&d.pool)
                    )
                })?;
                // A partition, or a share of a shared device, stands for the device itself.
                let (device_id, partition) = match &profile.partitions {
                    Some(partitions) => partitions.split(published),
                    None => (published, None),
                };
                let (id, replica) = split_replica(device_id).unwrap_or((device_id, None));
                // An unhealthy device is prepared only for a claim that tolerated its taint
                // (docs/dra.md, "Health").
                let tolerated = || {
                    let taint = unhealthy_taint(&self.config.spec.driver, profile);
                    d.tolerations.iter().any(|t| t.tolerates(&taint))
                };
                let device = inventory
                    .by_id(id)
                    .filter(|dev| dev.healthy || tolerated())
                    .ok_or_else(|| {
                        format!(
                            "device {} of pool {} is unhealthy and the claim does not tolerate \
                             its taint: delete the pod so that the claim is allocated again",
                            Excerpt(&d.device),
                            Excerpt(&d.pool)
                        )
                    })?;
                // What the containers are told of the device: the attributes of its slice.
                let listed = requests
                    .entry(device_metadata::base_request(&d.request).to_owned())
                    .or_default();
                if !listed.iter().any(|m| m.name == d.device) {
                    let location = device.nodes.first().and_then(|node| {
                        devinject_discovery::pci_location(&self.config.roots, node)
                    });
                    let mut attributes = device_attributes(profile, device, location.as_ref());
                    if let Some(p) = &partition {
                        attributes.insert(
                            ATTR_PARTITION.to_owned(),
                            k8s_openapi::api::resource::v1::DeviceAttribute {
                                string: Some(p.shape.clone()),
                                ..Default::default()
                            },
                        );
                    }
                    if let Some(n) = replica {
                        attributes.insert(
                            ATTR_REPLICA.to_owned(),
                            k8s_openapi::api::resource::v1::DeviceAttribute {
                                int: Some(i64::from(n)),
                                ..Default::default()
                            },
                        );
                    }
                    listed.push(MetadataDevice {
                        pool: d.pool.clone(),
                        name: d.device.clone(),
                        attributes,
                    });
                }
                // The partition's id: the spec gives its container the units it covers.
                let spec_id = if partition.is_some() { published } else { id };
                pairs.push((d.device.clone(), spec_id.to_owned()));
                if again || !d.prepared_before_binding {
                    by_function
                        .entry(allocation.config(&d.request).function)
                        .or_default()
                        .push(device.id.clone());
                }
            }
            let runs = runs(what, profile, &inventory, &by_function)?;
            let files = resolve_driver_files(profile, &self.config.roots)
                .map_err(|e| format!("profile {name}: driver files: {e}"))?;
            let spec =
                claim_spec::build(&self.config.spec, uid, profile, &inventory, &files, &pairs)
                    .map_err(|e| e.to_string())?;
            let answer = devices
                .iter()
                .map(|d| PreparedDevice {
                    request_names: vec![d.request.clone()],
                    pool_name: d.pool.clone(),
                    device_name: d.device.clone(),
                    cdi_device_ids: spec
                        .cdi_device_ids
                        .get(&d.device)
                        .into_iter()
                        .cloned()
                        .collect(),
                    share_id: d.share_id.clone(),
                })
                .collect();
            plans.push(ProfilePlan {
                profile: name,
                runs,
                spec,
                answer,
            });
        }
        Ok(plans)
    }

    /// Writes the planned specs; returns the claim's checkpoint entry, which holds the answer.
    /// A failure removes what this call wrote.
    /// The claim's device metadata files come first, so that no spec names a missing one.
    fn write(
        &self,
        claim: &ClaimRef,
        plans: Vec<ProfilePlan>,
        metadata: Vec<(MetadataFile, MetadataMount)>,
    ) -> Result<ClaimEntry, String> {
        let mut entry = ClaimEntry {
            claim: claim.clone(),
            profiles: Vec::new(),
            spec_files: Vec::new(),
            devices: Vec::new(),
            boot_id: self.boot_id.clone(),
            metadata: Vec::new(),
        };
        let (files, mounts): (Vec<_>, Vec<_>) = metadata.into_iter().unzip();
        if let Err(e) = self.write_metadata(&files) {
            self.remove_metadata(&claim.uid);
            return Err(e);
        }
        entry.metadata = mounts;
        for plan in plans {
            if let Err(e) = claim_spec::write(&self.config.spec, &plan.spec) {
                self.undo(&claim.uid, &entry.spec_files);
                return Err(e.to_string());
            }
            entry.profiles.push(plan.profile);
            entry.spec_files.push(plan.spec.file_name);
            entry.devices.extend(plan.answer);
        }
        Ok(entry)
    }

    /// Removes the specs and device metadata files of claim `uid` a failed prepare wrote;
    /// what cannot be removed is logged (the kubelet's next prepare or unprepare of the claim
    /// removes it).
    fn undo(&self, uid: &str, spec_files: &[String]) {
        for file in spec_files {
            if let Err(e) = claim_spec::remove_file(&self.config.spec, file) {
                warn!(%file, error = %e, "could not remove a claim spec after a failed prepare");
            }
        }
        self.remove_metadata(uid);
    }

    /// The device metadata file of each of the claim's requests (`requests`, by base request
    /// name), and where its spec mounts it: on the request's first device.
    fn metadata(
        &self,
        object: &ResourceClaim,
        requests: BTreeMap<String, Vec<MetadataDevice>>,
    ) -> Result<Vec<(MetadataFile, MetadataMount)>, String> {
        let meta = &object.metadata;
        let claim = MetadataClaim {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            generation: meta.generation.unwrap_or_default(),
            pod_claim: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(device_metadata::POD_CLAIM_ANNOTATION))
                .cloned(),
        };
        let mut out = Vec::with_capacity(requests.len());
        for (request, devices) in requests {
            let Some(first) = devices.first() else {
                continue;
            };
            let device = first.name.clone();
            let file = device_metadata::file(&self.config.spec.driver, &claim, &request, &devices)
                .map_err(|e| e.to_string())?;
            let mount = MetadataMount {
                device,
                file: file.file_name.clone(),
                container_path: file.container_path.clone(),
            };
            out.push((file, mount));
        }
        Ok(out)
    }

    /// Writes device metadata `files` into the metadata directory, made when missing.
    fn write_metadata(&self, files: &[MetadataFile]) -> Result<(), String> {
        if files.is_empty() {
            return Ok(());
        }
        let (dir, _) = HostDir::create(&self.config.spec.root, &self.config.metadata_dir)
            .map_err(|e| format!("the device metadata directory: {e}"))?;
        for f in files {
            // Valid for this boot only, as the claim's spec is.
            dir.write_for_this_boot(
                OsStr::new(&f.file_name),
                f.contents.as_bytes(),
                Some(claim_spec::SPEC_FILE_MODE),
            )
            .map_err(|e| format!("device metadata: {e}"))?;
        }
        Ok(())
    }

    /// Removes claim `uid`'s device metadata files; returns how many went. Only regular files
    /// named for the claim are removed; what cannot be is logged.
    fn remove_metadata(&self, uid: &str) -> usize {
        let dir = match HostDir::open(&self.config.spec.root, &self.config.metadata_dir) {
            Ok(Some(dir)) => dir,
            Ok(None) => return 0,
            Err(e) => {
                warn!(error = %e, "cannot open the device metadata directory to remove a claim's files");
                return 0;
            }
        };
        let names: Vec<String> = match std::fs::read_dir(dir.path()) {
            Ok(entries) => entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| device_metadata::is_claims(name, uid))
                .collect(),
            Err(e) => {
                warn!(dir = %dir.path().display(), error = %e, "cannot list the device metadata directory");
                return 0;
            }
        };
        let mut removed = 0;
        for name in names {
            match dir.remove(OsStr::new(&name)) {
                Ok(true) => removed += 1,
                Ok(false) => {}
                Err(e) => {
                    warn!(file = %name, error = %e, "cannot remove a claim's device metadata file")
                }
            }
        }
        removed
    }
}

/// How a claim is named in messages (every part through the escaping excerpt), and its UID,
/// checked before it names files; its namespace and name are checked before they name an API
/// path.
fn label(claim: &ClaimRef) -> Result<(String, String), String> {
    let what = format!(
        "claim {}/{} ({})",
        Excerpt(&claim.namespace),
        Excerpt(&claim.name),
        Excerpt(&claim.uid)
    );
    let uid = naming::claim_uid(&claim.uid).map_err(|e| e.to_string())?;
    naming::object_name("namespace", &claim.namespace)
        .and_then(|_| naming::object_name("name", &claim.name))
        .map_err(|e| format!("{what}: {e}"))?;
    Ok((what, uid.to_owned()))
}

/// What preparing a claim does for one profile.
struct ProfilePlan {
    profile: String,
    /// The profile's prepare runs, one per device, with the claim's function.
    runs: Vec<PrepareRun>,
    spec: ClaimSpec,
    /// The devices as the kubelet is told.
    answer: Vec<PreparedDevice>,
}

/// A claim not prepared: its message for the kubelet, and its reason for the metrics.
struct Refused {
    reason: &'static str,
    message: String,
}

/// The mapping of an error message to a [`Refused`] with `reason`.
fn refused(reason: &'static str) -> impl Fn(String) -> Refused {
    move |message| Refused { reason, message }
}

impl Driver {
    /// [`Claims::prepare`], saying how it ended.
    async fn prepare_claim(
        &self,
        claim: ClaimRef,
        deadline: Deadline,
        started: Instant,
    ) -> Result<(Vec<PreparedDevice>, Prepared), Refused> {
        let (what, uid) = label(&claim).map_err(refused("claim_uid"))?;
        let late = |step: &str| Refused {
            reason: "deadline",
            message: format!(
                "{what}: not prepared within the kubelet's deadline ({} ms), {step}; the \
                     kubelet will retry",
                deadline.budget().as_millis()
            ),
        };
        let _claim = deadline
            .run(self.busy.lock(&uid))
            .await
            .ok_or_else(|| late("waiting for the claim's unprepare or earlier prepare"))?;
        let entry = self.entry(&uid);
        let again = entry.is_some();
        if let Some(entry) = entry {
            // Prepared before: answered from the checkpoint while its specs are there and it
            // was prepared in this boot. A node's reboot resets what the prepare steps loaded
            // and may lose the specs (written for this boot only, unsynced; a CDI directory
            // below /run is emptied), while the checkpoint stays: then the claim is prepared
            // again, its prepare steps included. A boot unknown on either side is this one.
            let rebooted =
                matches!((&entry.boot_id, &self.boot_id), (Some(then), Some(now)) if then != now);
            let mut missing = Vec::new();
            for file in &entry.spec_files {
                if rebooted
                    || !claim_spec::present(&self.config.spec, file)
                        .map_err(|e| e.to_string())
                        .map_err(refused("spec"))?
                {
                    missing.push(file.clone());
                }
            }
            if missing.is_empty() {
                return Ok((entry.devices.clone(), Prepared::FromCheckpoint));
            }
            if rebooted {
                warn!(claim = %what, "a claim prepared before the node rebooted; preparing it again");
            } else {
                warn!(claim = %what, missing = ?missing, "a prepared claim's CDI spec is gone; preparing it again");
            }
            self.undo(&uid, &entry.spec_files);
            self.save(&uid, None)
                .await
                .map_err(|e| format!("{what}: {e}"))
                .map_err(refused("checkpoint"))?;
        }
        let _slot = deadline
            .run(Arc::clone(&self.slots).acquire_owned())
            .await
            .and_then(Result::ok)
            .ok_or_else(|| late("waiting for one of the claims being prepared to finish"))?;
        // Where the time goes, for the log line (the benchmark reads it): the API server's read,
        // the plan (discovery, driver files, the spec built), the prepare programs, the files
        // written and the checkpoint saved.
        let mut steps = Steps::new();
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let object = deadline
            .run(api.get(&claim.name))
            .await
            .ok_or_else(|| late("reading it from the API server"))?
            .map_err(|e| format!("{what}: reading it from the API server: {e}"))
            .map_err(refused("api"))?;
        let read_us = steps.lap();
        let allocation = claim::read(
            &object,
            &uid,
            self.config.spec.driver.as_str(),
            &self.pools(),
        )
        .map_err(|e| e.to_string())
        .map_err(refused("allocation"))?;
        let mut requests = BTreeMap::new();
        let mut plans = self
            .plan(&what, &uid, &allocation, &mut requests, again)
            .map_err(|e| format!("{what}: {e}"))
            .map_err(refused("plan"))?;
        let metadata = self
            .metadata(&object, requests)
            .map_err(|e| format!("{what}: {e}"))
            .map_err(refused("plan"))?;
        let mounts: Vec<MetadataMount> = metadata.iter().map(|(_, m)| m.clone()).collect();
        for plan in &mut plans {
            claim_spec::mount_metadata(&mut plan.spec, &uid, &mounts, &self.config.metadata_dir);
        }
        let plan_us = steps.lap();
        // The prepare programs run before any spec is written, each contained (its own PID
        // namespace, deadline, bounded output), off the async thread, and killed when the
        // kubelet's deadline comes first: a failure leaves nothing.
        let runs: Vec<PrepareRun> = plans.iter().flat_map(|p| p.runs.iter().cloned()).collect();
        if !runs.is_empty() {
            let by = deadline.instant();
            tokio::task::spawn_blocking(move || run_all_by(&runs, by))
                .await
                .map_err(|e| format!("{what}: the prepare step's task: {e}"))
                .map_err(refused("prepare_step"))?
                .map_err(|e| format!("{what}: {e}"))
                .map_err(refused("prepare_step"))?;
        }
        let run_us = steps.lap();
        let entry = self
            .write(&claim, plans, metadata)
            .map_err(|e| format!("{what}: {e}"))
            .map_err(refused("spec"))?;
        let write_us = steps.lap();
        let (spec_files, devices) = (entry.spec_files.clone(), entry.devices.clone());
        if let Err(e) = self.save(&uid, Some(entry)).await {
            self.undo(&uid, &spec_files);
            return Err(refused("checkpoint")(format!("{what}: {e}")));
        }
        let save_us = steps.lap();
        info!(
            claim = %what,
            devices = devices.len(),
            took_us = started.elapsed().as_micros() as u64,
            read_us,
            plan_us,
            run_us,
            write_us,
            save_us,
            "{PREPARED}"
        );
        Ok((devices, Prepared::Written))
    }

    /// Runs the prepare steps of `object`'s devices on this node that prepare before binding
    /// (their allocation carries the driver's binding condition), each device checked against
    /// discovery as for the kubelet's prepare, under the claim's lock and one of the slots. The
    /// caller tells the scheduler how it went ([`crate::binding`]).
    pub async fn prepare_before_binding(&self, object: &ResourceClaim) -> BeforeBinding {
        let uid = object.metadata.uid.clone().unwrap_or_default();
        let what = format!(
            "claim {}/{}",
            Excerpt(object.metadata.namespace.as_deref().unwrap_or_default()),
            Excerpt(object.metadata.name.as_deref().unwrap_or_default())
        );
        // A claim of another node's pools is not this driver's to prepare.
        let Ok(allocation) = claim::read(
            object,
            &uid,
            self.config.spec.driver.as_str(),
            &self.pools(),
        ) else {
            return BeforeBinding::Nothing;
        };
        let devices: Vec<AllocatedDevice> = allocation
            .devices
            .iter()
            .filter(|d| d.prepared_before_binding)
            .cloned()
            .collect();
        if devices.is_empty() {
            return BeforeBinding::Nothing;
        }
        let _claim = self.busy.lock(&uid).await;
        let Ok(_slot) = Arc::clone(&self.slots).acquire_owned().await else {
            return BeforeBinding::Nothing;
        };
        let failed = |failed, message| BeforeBinding::Failed {
            devices: devices.clone(),
            failed,
            message,
        };
        let runs = match self.runs_before_binding(&what, &devices, &allocation) {
            Ok(runs) => runs,
            Err(message) => return failed(None, format!("{what}: {message}")),
        };
        for run in runs {
            let device = (
                run.profile.as_str().to_owned(),
                run.device.as_str().to_owned(),
            );
            let outcome = tokio::task::spawn_blocking(move || run_all(std::slice::from_ref(&run)))
                .await
                .map_err(|e| format!("the prepare step's task: {e}"))
                .and_then(|r| r.map_err(|e| e.to_string()));
            if let Err(message) = outcome {
                return failed(Some(device), format!("{what}: {message}"));
            }
        }
        info!(claim = %what, devices = devices.len(), "prepared before binding");
        BeforeBinding::Prepared(devices)
    }

    /// The prepare runs of `devices` (of `allocation`, each of this node's pools), by profile:
    /// each device mapped back to a discovered one, with its request's function.
    fn runs_before_binding(
        &self,
        what: &str,
        devices: &[AllocatedDevice],
        allocation: &Allocation,
    ) -> Result<Vec<PrepareRun>, String> {
        let mut by_profile: BTreeMap<&str, (&Profile, Vec<&AllocatedDevice>)> = BTreeMap::new();
        for d in devices {
            let profile = self
                .profile_of(&d.pool)
                .ok_or_else(|| format!("pool {} is not one of this node's", Excerpt(&d.pool)))?;
            by_profile
                .entry(profile.name.as_str())
                .or_insert_with(|| (profile, Vec::new()))
                .1
                .push(d);
        }
        let mut all = Vec::new();
        for (name, (profile, devices)) in by_profile {
            let inventory = discover(profile, &self.config.roots)
                .map_err(|e| format!("profile {name}: discovery: {e}"))?;
            let names = device_names(profile, &inventory).map_err(|e| e.to_string())?;
            let mut by_function: BTreeMap<Option<String>, Vec<DeviceId>> = BTreeMap::new();
            for d in devices {
                let device = names
                    .id(&d.device)
                    .and_then(|id| inventory.by_id(id))
                    .ok_or_else(|| {
                        format!(
                            "device {} of pool {} is not on this node any more",
                            Excerpt(&d.device),
                            Excerpt(&d.pool)
                        )
                    })?;
                by_function
                    .entry(allocation.config(&d.request).function)
                    .or_default()
                    .push(device.id.clone());
            }
            all.extend(runs(what, profile, &inventory, &by_function)?);
        }
        Ok(all)
    }

    /// [`Claims::unprepare`].
    async fn unprepare_claim(&self, claim: ClaimRef, deadline: Deadline) -> Result<(), String> {
        let (what, uid) = label(&claim)?;
        let _claim = deadline.run(self.busy.lock(&uid)).await.ok_or_else(|| {
            format!(
                "{what}: not unprepared within the kubelet's deadline ({} ms), waiting for its \
                 prepare to finish; the kubelet will retry",
                deadline.budget().as_millis()
            )
        })?;
        // The names a prepare of this claim can have written, whether or not its checkpoint
        // entry was saved (a driver killed between the spec and the checkpoint): each is this
        // claim's own, so removing them removes nothing of another's.
        let mut files: BTreeSet<String> = self
            .config
            .profiles
            .iter()
            .map(|p| naming::claim_spec_file(&self.config.spec.driver, p.name.as_str(), &uid))
            .collect();
        if let Some(entry) = self.entry(&uid) {
            files.extend(entry.spec_files.iter().cloned());
        }
        let mut removed = 0;
        for file in &files {
            if claim_spec::remove_file(&self.config.spec, file)
                .map_err(|e| format!("{what}: {e}"))?
            {
                removed += 1;
            }
        }
        let metadata = self.remove_metadata(&uid);
        self.save(&uid, None)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        info!(claim = %what, specs = removed, metadata, "unprepared");
        Ok(())
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
