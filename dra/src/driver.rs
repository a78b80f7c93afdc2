//! The driver behind the node service: prepares a claim by reading its allocation from the API
//! server, checking every device against what discovery finds on this node now, and writing one
//! transient CDI spec per profile; unprepares it by removing exactly the files its checkpoint
//! entry names. The checkpoint is saved before the kubelet hears of a prepared claim, so a
//! driver killed at any point unprepares after its restart what it wrote before.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use devinject_devices::{discover, resolve_driver_files, HostRoots, Profile, ProfileSet};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use tokio::sync::Mutex;
use tracing::{info, warn};

use crate::checkpoint::{Checkpoint, ClaimEntry};
use crate::claim::{self, AllocatedDevice};
use crate::claim_spec::{self, SpecContext};
use crate::naming::{self, DeviceNames};
use crate::prepared::{ClaimRef, Claims, PreparedDevice};

/// What the driver serves and where it writes.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// This node's name, as its kubelet registers it.
    pub node: String,
    /// The profiles.
    pub profiles: ProfileSet,
    /// Where device nodes, sysfs and driver files are.
    pub roots: HostRoots,
    /// How claim specs are rendered and where they go.
    pub spec: SpecContext,
    /// The checkpoint file.
    pub checkpoint: PathBuf,
}

/// The DRA driver's claim handling ([`Claims`]).
pub struct Driver {
    config: DriverConfig,
    client: kube::Client,
    /// One claim at a time: prepare and unprepare of one claim never interleave, and the
    /// checkpoint file is written by one writer.
    checkpoint: Mutex<Checkpoint>,
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
        info!(
            claims = checkpoint.claims().count(),
            file = %config.checkpoint.display(),
            "checkpoint loaded"
        );
        Ok(Self {
            config,
            client,
            checkpoint: Mutex::new(checkpoint),
        })
    }

    /// This node's pools, one per profile.
    fn pools(&self) -> BTreeSet<String> {
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

    /// Writes the specs of `claim`'s devices (its UID checked: `uid`), grouped by profile;
    /// returns its checkpoint entry, which holds the answer. A failure removes what this call
    /// wrote.
    fn write_specs(
        &self,
        claim: &ClaimRef,
        uid: &str,
        devices: &[AllocatedDevice],
    ) -> Result<ClaimEntry, String> {
        let mut by_profile: BTreeMap<String, Vec<&AllocatedDevice>> = BTreeMap::new();
        for d in devices {
            let profile = self
                .profile_of(&d.pool)
                .ok_or_else(|| format!("pool {} is not one of this node's", d.pool))?;
            by_profile
                .entry(profile.name.as_str().to_owned())
                .or_default()
                .push(d);
        }
        let mut written: Vec<String> = Vec::new();
        let mut answer = Vec::new();
        let result = (|| {
            for (name, devices) in &by_profile {
                let profile = self.config.profiles.get(name).ok_or("profile vanished")?;
                if profile.prepare.is_some() {
                    return Err(format!(
                        "profile {name} has a prepare step, which devinject-dra does not run \
                         yet: serve it through the device plugin with the runtime shim or NRI \
                         (docs/prepare.md)"
                    ));
                }
                let inventory = discover(profile, &self.config.roots)
                    .map_err(|e| format!("profile {name}: discovery: {e}"))?;
                let names = DeviceNames::new(name, inventory.devices.iter().map(|d| d.id.as_str()))
                    .map_err(|e| e.to_string())?;
                let mut pairs = Vec::new();
                for d in devices {
                    let id = names.id(&d.device).ok_or_else(|| {
                        format!(
                            "device {} of pool {} is not on this node any more (unplugged since \
                             it was allocated): delete the pod so that the claim is allocated \
                             again",
                            d.device, d.pool
                        )
                    })?;
                    let healthy = inventory.by_id(id).is_some_and(|dev| dev.healthy);
                    if !healthy {
                        return Err(format!(
                            "device {} of pool {} is unhealthy: delete the pod so that the \
                             claim is allocated again",
                            d.device, d.pool
                        ));
                    }
                    pairs.push((d.device.clone(), id.to_owned()));
                }
                let files = resolve_driver_files(profile, &self.config.roots)
                    .map_err(|e| format!("profile {name}: driver files: {e}"))?;
                let spec =
                    claim_spec::build(&self.config.spec, uid, profile, &inventory, &files, &pairs)
                        .map_err(|e| e.to_string())?;
                claim_spec::write(&self.config.spec, &spec).map_err(|e| e.to_string())?;
                written.push(spec.file_name.clone());
                for d in devices {
                    answer.push(PreparedDevice {
                        request_names: vec![d.request.clone()],
                        pool_name: d.pool.clone(),
                        device_name: d.device.clone(),
                        cdi_device_ids: spec
                            .cdi_device_ids
                            .get(&d.device)
                            .into_iter()
                            .cloned()
                            .collect(),
                    });
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(ClaimEntry {
                claim: claim.clone(),
                profiles: by_profile.into_keys().collect(),
                spec_files: written,
                devices: answer,
            }),
            Err(e) => {
                for file in &written {
                    if let Err(undo) = claim_spec::remove_file(&self.config.spec, file) {
                        warn!(%file, error = %undo, "could not remove a claim spec after a failed prepare");
                    }
                }
                Err(e)
            }
        }
    }
}

impl Claims for Driver {
    async fn prepare(&self, claim: ClaimRef) -> Result<Vec<PreparedDevice>, String> {
        let what = format!("claim {}/{} ({})", claim.namespace, claim.name, claim.uid);
        let uid = naming::claim_uid(&claim.uid)
            .map_err(|e| e.to_string())?
            .to_owned();
        let mut checkpoint = self.checkpoint.lock().await;
        if let Some(entry) = checkpoint.get(&uid) {
            return Ok(entry.devices.clone());
        }
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let object = api
            .get(&claim.name)
            .await
            .map_err(|e| format!("{what}: reading it from the API server: {e}"))?;
        let allocation = claim::read(
            &object,
            &uid,
            self.config.spec.driver.as_str(),
            &self.pools(),
        )
        .map_err(|e| e.to_string())?;
        let entry = self
            .write_specs(&claim, &uid, &allocation.devices)
            .map_err(|e| format!("{what}: {e}"))?;
        let (spec_files, devices) = (entry.spec_files.clone(), entry.devices.clone());
        if let Err(e) = checkpoint.insert(&uid, entry) {
            for file in &spec_files {
                let _ = claim_spec::remove_file(&self.config.spec, file);
            }
            return Err(format!("{what}: {e}"));
        }
        info!(claim = %what, devices = devices.len(), "prepared");
        Ok(devices)
    }

    async fn unprepare(&self, claim: ClaimRef) -> Result<(), String> {
        let what = format!("claim {}/{} ({})", claim.namespace, claim.name, claim.uid);
        let uid = naming::claim_uid(&claim.uid)
            .map_err(|e| e.to_string())?
            .to_owned();
        let mut checkpoint = self.checkpoint.lock().await;
        // The names a prepare of this claim can have written, whether or not its checkpoint
        // entry was saved (a driver killed between the spec and the checkpoint): each is this
        // claim's own, so removing them removes nothing of another's.
        let mut files: BTreeSet<String> = self
            .config
            .profiles
            .iter()
            .map(|p| naming::claim_spec_file(&self.config.spec.driver, p.name.as_str(), &uid))
            .collect();
        if let Some(entry) = checkpoint.get(&uid) {
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
        checkpoint
            .remove(&uid)
            .map_err(|e| format!("{what}: {e}"))?;
        info!(claim = %what, specs = removed, "unprepared");
        Ok(())
    }
}
