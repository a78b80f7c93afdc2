//! The kubelet's prepare of one claim, step by step: under the claim's lock, answered from the
//! checkpoint when it was prepared in this boot and its specs are still there; else, in one of
//! the slots, its allocation read from the API server, its plan made, its prepare programs run
//! (contained, killed at the kubelet's deadline), its files written and its entry saved before
//! the kubelet hears of it. Each step that fails refuses the claim with a message for the
//! kubelet and a reason for the metrics; the time of each step goes to the log line.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use devinject_contained::prepare_step::run_all_by;
use devinject_devices::PrepareRun;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use tracing::{info, warn};

use super::claim_label::label;
use super::device_status;
use super::Driver;
use crate::checkpoint::MetadataMount;
use crate::claim;
use crate::claim_spec;
use crate::metrics::Prepared;
use crate::prepared::{ClaimRef, Deadline, PreparedDevice};

/// What the driver logs for each claim it prepared, with `took_us`, the time from the kubelet's
/// call to the answer (the benchmark reads it).
pub const PREPARED: &str = "prepared";

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

/// A claim not prepared: its message for the kubelet, and its reason for the metrics.
pub(super) struct Refused {
    pub(super) reason: &'static str,
    pub(super) message: String,
}

/// The mapping of an error message to a [`Refused`] with `reason`.
pub(super) fn refused(reason: &'static str) -> impl Fn(String) -> Refused {
    move |message| Refused { reason, message }
}

impl Driver {
    /// [`crate::prepared::Claims::prepare`], saying how it ended.
    pub(super) async fn prepare_claim(
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
        // The claim's device status, told once the kubelet has its answer.
        let status = device_status::patch(
            &claim.namespace,
            &claim.name,
            &uid,
            self.config.spec.driver.as_str(),
            plans.iter().flat_map(|p| {
                p.answer
                    .iter()
                    .zip(&p.reports)
                    .map(|(device, report)| (p.profile.as_str(), device, report))
            }),
        );
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
        tokio::spawn(device_status::write(api, claim.name.clone(), what, status));
        Ok((devices, Prepared::Written))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::driver::fixtures::{claim_ref, demo, node, prepared, result, OTHER_UID, UID};

    fn deadline() -> Deadline {
        Deadline::after(Duration::from_secs(30))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_prepared_in_this_boot_is_answered_from_the_checkpoint_alone() {
        let node = node(&[demo("", "")], 1);
        let entry = prepared(&node, UID, vec![result("gpu", "node-a/demo", "demo-0")]).await;
        // The API server refuses every connection: only the checkpoint can answer.
        let (devices, how) = node
            .driver
            .prepare_claim(claim_ref(UID), deadline(), Instant::now())
            .await
            .map_err(|r| r.message)
            .unwrap();
        assert_eq!(how, Prepared::FromCheckpoint);
        assert_eq!(devices, entry.devices);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_not_prepared_is_read_from_the_api_server_and_refused_when_it_cannot_be() {
        let node = node(&[demo("", "")], 1);
        let refused = node
            .driver
            .prepare_claim(claim_ref(OTHER_UID), deadline(), Instant::now())
            .await
            .err()
            .unwrap();
        assert_eq!(refused.reason, "api");
        assert!(
            refused.message.starts_with(&format!(
                "claim ns/claim ({OTHER_UID}): reading it from the API server"
            )),
            "{}",
            refused.message
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_whose_spec_is_gone_is_forgotten_and_prepared_again() {
        let node = node(&[demo("", "")], 1);
        let entry = prepared(&node, UID, vec![result("gpu", "node-a/demo", "demo-0")]).await;
        std::fs::remove_file(node.cdi().join(&entry.spec_files[0])).unwrap();
        let refused = node
            .driver
            .prepare_claim(claim_ref(UID), deadline(), Instant::now())
            .await
            .err()
            .unwrap();
        assert_eq!(
            refused.reason, "api",
            "prepared again: read from the API server"
        );
        assert_eq!(node.driver.entry(UID), None, "its entry forgotten first");
        assert!(
            !node.metadata_dir().join(&entry.metadata[0].file).exists(),
            "what it wrote removed"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_prepared_before_a_reboot_is_prepared_again() {
        let node = node(&[demo("", "")], 1);
        let mut entry = crate::driver::fixtures::written(
            &node,
            UID,
            vec![result("gpu", "node-a/demo", "demo-0")],
        );
        entry.boot_id = Some("boot-0".into());
        node.driver.save(UID, Some(entry.clone())).await.unwrap();
        let refused = node
            .driver
            .prepare_claim(claim_ref(UID), deadline(), Instant::now())
            .await
            .err()
            .unwrap();
        assert_eq!(refused.reason, "api");
        assert_eq!(node.driver.entry(UID), None);
        assert!(
            !node.cdi().join(&entry.spec_files[0]).exists(),
            "its old spec removed"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_uid_that_could_name_another_file_is_refused_first() {
        let node = node(&[demo("", "")], 1);
        let refused = node
            .driver
            .prepare_claim(claim_ref("../x"), deadline(), Instant::now())
            .await
            .err()
            .unwrap();
        assert_eq!(refused.reason, "claim_uid");
    }

    #[test]
    fn a_refusal_keeps_its_reason_and_message() {
        let r = refused("plan")("claim ns/c: no".to_owned());
        assert_eq!((r.reason, r.message.as_str()), ("plan", "claim ns/c: no"));
    }
}
