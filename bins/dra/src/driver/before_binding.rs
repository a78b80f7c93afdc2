//! The prepare steps that run before the scheduler binds a pod (KEP-5007, device binding
//! conditions): for the devices of a claim that carry the driver's binding condition, each
//! mapped back to a discovered device as for the kubelet's prepare, the profile's step runs
//! with the claim's function, under the claim's lock and one of the slots; the caller
//! ([`crate::binding`]) tells the scheduler how it went through the claim's device status.

use std::collections::BTreeMap;
use std::sync::Arc;

use devinject_contained::prepare_step::run_all;
use devinject_devices::{DeviceId, Excerpt, PrepareRun, Profile};
use devinject_discovery::discover;
use k8s_openapi::api::resource::v1::ResourceClaim;
use tracing::info;

use super::plan::runs;
use super::Driver;
use crate::claim::{self, AllocatedDevice, Allocation};
use crate::slices::device_names;

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

impl Driver {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::fixtures::{allocation, claim_object, demo, node, result, PREPARE, UID};
    use serde_json::json;

    /// A result of `device` carrying the driver's binding condition.
    fn bound(device: &str) -> serde_json::Value {
        let mut r = result("gpu", "node-a/demo", device);
        r["bindingConditions"] = json!(["Prepared"]);
        r
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_of_another_nodes_pool_is_nothing_to_do() {
        let node = node(&[demo("", PREPARE)], 1);
        let mut other = bound("demo-0");
        other["pool"] = json!("node-b/demo");
        let object = claim_object(UID, vec![other], None);
        assert_eq!(
            node.driver.prepare_before_binding(&object).await,
            BeforeBinding::Nothing
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_without_a_device_preparing_before_binding_is_nothing_to_do() {
        let node = node(&[demo("", PREPARE)], 1);
        let object = claim_object(UID, vec![result("gpu", "node-a/demo", "demo-0")], None);
        assert_eq!(
            node.driver.prepare_before_binding(&object).await,
            BeforeBinding::Nothing
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_device_gone_fails_the_claim_before_any_step_runs() {
        let node = node(&[demo("", PREPARE)], 1);
        let object = claim_object(UID, vec![bound("demo-0"), bound("demo-7")], None);
        match node.driver.prepare_before_binding(&object).await {
            BeforeBinding::Failed {
                devices,
                failed,
                message,
            } => {
                let names: Vec<&str> = devices.iter().map(|d| d.device.as_str()).collect();
                assert_eq!(names, ["demo-0", "demo-7"]);
                assert_eq!(failed, None, "no step ran");
                assert!(
                    message.starts_with("claim ns/claim: device demo-7 of pool node-a/demo is not on this node any more"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_device_runs_its_profiles_step_with_its_requests_function() {
        let node = node(&[demo("", PREPARE)], 2);
        let object = claim_object(UID, vec![bound("demo-1"), bound("demo-0")], Some("slow"));
        let allocation = allocation(&node, &object);
        let runs = node
            .driver
            .runs_before_binding("the claim", &allocation.devices, &allocation)
            .unwrap();
        let found: Vec<(&str, &str, Option<&str>)> = runs
            .iter()
            .map(|r| (r.profile.as_str(), r.device.as_str(), r.function.as_deref()))
            .collect();
        assert_eq!(
            found,
            [("demo", "1", Some("slow")), ("demo", "0", Some("slow"))]
        );
        assert!(runs
            .iter()
            .all(|r| r.program == std::path::Path::new("/bin/true")));
    }
}
