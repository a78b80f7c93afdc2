//! Prepare before binding: for a profile whose `[prepare]` says `before_binding`, the driver
//! runs the prepare step when the scheduler allocates a claim one of this node's devices,
//! before the pod is bound, and reports the outcome in the claim's device status. The devices
//! carry the binding condition [`PREPARED_CONDITION`] and the binding failure condition
//! [`PREPARE_FAILED_CONDITION`] ([`crate::slices`]), so the scheduler waits in its PreBind
//! step until one of them is `True` (Kubernetes' `DRADeviceBindingConditions`, KEP-5007):
//! - success: `Prepared` is set, the pod is bound and the kubelet's prepare writes the CDI spec
//!   without running the step again;
//! - failure: `PrepareFailed` is set with the program's message; the scheduler gives the claim
//!   back and tries again, and the failed device carries the taint `<driver>/prepare-failed`
//!   for [`FAILED_HOLD`], so the next try goes to another device or node instead of the one
//!   that just failed.
//!
//! The claims are watched cluster-wide (the API has no field selector for an allocation's
//! node), and only those allocated this node's devices that wait for the condition are acted
//! on; one claim is handled once at a time.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tracing::{info, warn};

use crate::claim::AllocatedDevice;
use crate::claim_status::{self, Applied};
use crate::driver::{BeforeBinding, Driver};
use crate::slices::{PREPARED_CONDITION, PREPARE_FAILED_CONDITION};
use crate::watch_log::WatchLog;

/// The devices whose prepare step failed before binding within [`FAILED_HOLD`]: device ids by
/// profile name.
pub type PrepareFailures = BTreeMap<String, BTreeSet<String>>;

/// How long a device whose prepare step failed stays tainted `<driver>/prepare-failed`: long
/// enough for the scheduler to place the pod elsewhere, short enough that a passing fault does
/// not take the device away for good.
pub const FAILED_HOLD: Duration = Duration::from_secs(300);

/// The field manager of the driver's claim status applies.
const FIELD_MANAGER: &str = "devinject-dra";

/// The longest message a condition carries (the program's stderr excerpt is already bounded).
const MAX_MESSAGE: usize = 1024;

/// How often a failed status apply is tried again before the claim is left to the scheduler's
/// binding timeout.
const STATUS_TRIES: u32 = 5;

/// What the prepare steps of this node's claims found: the failures, each until it expires.
#[derive(Clone)]
struct Failures {
    until: Arc<Mutex<BTreeMap<(String, String), Instant>>>,
    out: watch::Sender<PrepareFailures>,
}

impl Failures {
    /// Holds `device` (profile, id) as failed for [`FAILED_HOLD`], and lets it go after.
    fn hold(&self, device: (String, String)) {
        let end = Instant::now() + FAILED_HOLD;
        self.lock().insert(device, end);
        self.send();
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(end).await;
            let now = Instant::now();
            this.lock().retain(|_, until| *until > now);
            this.send();
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Instant>> {
        lock(&self.until)
    }

    fn send(&self) {
        let mut failures = PrepareFailures::new();
        for (profile, id) in self.lock().keys() {
            failures
                .entry(profile.clone())
                .or_default()
                .insert(id.clone());
        }
        self.out.send_if_modified(|old| {
            let changed = *old != failures;
            *old = failures;
            changed
        });
    }
}

/// Watches the claims and prepares before binding those allocated this node's devices that wait
/// for it, until the watch ends. Failed devices go to `failures`.
pub async fn run(
    driver: Arc<Driver>,
    client: kube::Client,
    driver_name: String,
    failures: watch::Sender<PrepareFailures>,
) {
    let failures = Failures {
        until: Arc::default(),
        out: failures,
    };
    let api: Api<ResourceClaim> = Api::all(client.clone());
    let pools = driver.pools();
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut claims = std::pin::pin!(watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects());
    let mut log = WatchLog::new(
        "the ResourceClaims",
        "claims waiting for a prepare before binding wait meanwhile",
    );
    while let Some(event) = claims.next().await {
        let Some(claim) = log.event(event) else {
            continue;
        };
        if waiting(&claim, &driver_name, &pools).is_empty() {
            continue;
        }
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        if !lock(&in_flight).insert(uid.clone()) {
            continue;
        }
        let (driver, failures, in_flight) = (
            Arc::clone(&driver),
            failures.clone(),
            Arc::clone(&in_flight),
        );
        let api: Api<ResourceClaim> = Api::namespaced(
            client.clone(),
            claim.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let driver_name = driver_name.clone();
        tokio::spawn(async move {
            let outcome = driver.prepare_before_binding(&claim).await;
            report(&api, &claim, &driver_name, outcome, &failures).await;
            lock(&in_flight).remove(&uid);
        });
    }
}

/// `m` locked; a panic elsewhere while it was held leaves the data as it was, still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The devices of `claim` allocated from `pools` by `driver` that wait for the driver's binding
/// condition and have no outcome in the claim's device status yet.
pub fn waiting<'a>(
    claim: &'a ResourceClaim,
    driver: &str,
    pools: &BTreeSet<String>,
) -> Vec<&'a str> {
    let Some(status) = &claim.status else {
        return Vec::new();
    };
    let results = status
        .allocation
        .as_ref()
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref());
    let told = |pool: &str, device: &str| {
        status.devices.iter().flatten().any(|d| {
            d.driver == driver
                && d.pool == pool
                && d.device == device
                && d.conditions.iter().flatten().any(|c| {
                    c.status == "True"
                        && (c.type_ == PREPARED_CONDITION || c.type_ == PREPARE_FAILED_CONDITION)
                })
        })
    };
    results
        .into_iter()
        .flatten()
        .filter(|r| {
            r.driver == driver
                && pools.contains(&r.pool)
                && r.binding_conditions
                    .iter()
                    .flatten()
                    .any(|c| c == PREPARED_CONDITION)
                && !told(&r.pool, &r.device)
        })
        .map(|r| r.device.as_str())
        .collect()
}

/// Tells the scheduler how `outcome` went: the claim's device status for each device, and a
/// failed device held tainted.
async fn report(
    api: &Api<ResourceClaim>,
    claim: &ResourceClaim,
    driver: &str,
    outcome: BeforeBinding,
    failures: &Failures,
) {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let (devices, condition, reason, message) = match outcome {
        BeforeBinding::Nothing => return,
        BeforeBinding::Prepared(devices) => (
            devices,
            PREPARED_CONDITION,
            "PrepareStepSucceeded",
            "the profile's prepare step ran for the device".to_owned(),
        ),
        BeforeBinding::Failed {
            devices,
            failed,
            message,
        } => {
            warn!(claim = name, error = %message, "a prepare before binding failed; the scheduler gives the claim back");
            if let Some(device) = failed {
                failures.hold(device);
            }
            (
                devices,
                PREPARE_FAILED_CONDITION,
                "PrepareStepFailed",
                message,
            )
        }
    };
    let patch = status_patch(claim, driver, &devices, condition, reason, &message);
    match claim_status::apply_with_retries(api, name, FIELD_MANAGER, &patch, STATUS_TRIES).await {
        Applied::Done => {}
        Applied::Gone(e) => {
            info!(claim = name, error = %e, "the claim changed before its prepare was told");
        }
        Applied::Failed(e) => {
            warn!(claim = name, error = %e, "telling the claim's device status failed; the scheduler's binding timeout frees the claim");
        }
    }
}

/// The server-side apply of `claim`'s device status: `condition` `True` for each of `devices`.
/// The claim's UID makes it apply to this claim only.
pub fn status_patch(
    claim: &ResourceClaim,
    driver: &str,
    devices: &[AllocatedDevice],
    condition: &str,
    reason: &str,
    message: &str,
) -> Value {
    let message: String = message.chars().take(MAX_MESSAGE).collect();
    let entries: Vec<Value> = devices
        .iter()
        .map(|d| {
            claim_status::entry(
                driver,
                &d.pool,
                &d.device,
                d.share_id.as_deref(),
                claim_status::true_condition(condition, reason, &message),
            )
        })
        .collect();
    let meta = &claim.metadata;
    claim_status::apply(
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default(),
        entries,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::{
        AllocatedDeviceStatus, AllocationResult, DeviceAllocationResult,
        DeviceRequestAllocationResult, ResourceClaimStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

    const DRIVER: &str = "devinject.io";

    fn result(pool: &str, device: &str, binding: bool) -> DeviceRequestAllocationResult {
        DeviceRequestAllocationResult {
            request: "fpga".into(),
            driver: DRIVER.into(),
            pool: pool.into(),
            device: device.into(),
            binding_conditions: binding.then(|| vec![PREPARED_CONDITION.into()]),
            binding_failure_conditions: binding.then(|| vec![PREPARE_FAILED_CONDITION.into()]),
            ..Default::default()
        }
    }

    fn claim(
        results: Vec<DeviceRequestAllocationResult>,
        told: Vec<AllocatedDeviceStatus>,
    ) -> ResourceClaim {
        ResourceClaim {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("fpga-claim".into()),
                uid: Some("7c4a8d09-ca37-4b7e-8a2f-3a1b2c3d4e5f".into()),
                ..Default::default()
            },
            status: Some(ResourceClaimStatus {
                allocation: Some(AllocationResult {
                    devices: Some(DeviceAllocationResult {
                        results: Some(results),
                        config: None,
                    }),
                    ..Default::default()
                }),
                devices: Some(told),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn told(pool: &str, device: &str, condition: &str, status: &str) -> AllocatedDeviceStatus {
        AllocatedDeviceStatus {
            driver: DRIVER.into(),
            pool: pool.into(),
            device: device.into(),
            conditions: Some(vec![Condition {
                type_: condition.into(),
                status: status.into(),
                reason: "R".into(),
                message: String::new(),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn only_this_nodes_devices_waiting_for_the_condition_and_not_yet_told_are_waiting() {
        let pools = BTreeSet::from(["node-a/fpga".to_owned()]);
        let c = claim(
            vec![
                result("node-a/fpga", "fpga-0", true),
                result("node-a/fpga", "fpga-1", false),
                result("node-b/fpga", "fpga-0", true),
                result("node-a/fpga", "fpga-2", true),
                result("node-a/fpga", "fpga-3", true),
            ],
            vec![
                told("node-a/fpga", "fpga-2", PREPARED_CONDITION, "True"),
                told("node-a/fpga", "fpga-3", PREPARED_CONDITION, "False"),
            ],
        );
        assert_eq!(waiting(&c, DRIVER, &pools), ["fpga-0", "fpga-3"]);
        assert!(waiting(&c, "other.example.com", &pools).is_empty());
        let failed = claim(
            vec![result("node-a/fpga", "fpga-0", true)],
            vec![told(
                "node-a/fpga",
                "fpga-0",
                PREPARE_FAILED_CONDITION,
                "True",
            )],
        );
        assert!(waiting(&failed, DRIVER, &pools).is_empty(), "told: failed");
        let unallocated = ResourceClaim::default();
        assert!(waiting(&unallocated, DRIVER, &pools).is_empty());
    }

    #[test]
    fn the_status_apply_names_the_claim_by_uid_and_each_device_with_its_condition() {
        let c = claim(vec![], vec![]);
        let device = |name: &str, share: Option<&str>| AllocatedDevice {
            request: "fpga".into(),
            pool: "node-a/fpga".into(),
            device: name.into(),
            admin_access: false,
            tolerations: Vec::new(),
            share_id: share.map(Into::into),
            prepared_before_binding: true,
        };
        let long = "x".repeat(5000);
        let patch = status_patch(
            &c,
            DRIVER,
            &[device("fpga-0", None), device("fpga-1", Some("s-1"))],
            PREPARE_FAILED_CONDITION,
            "PrepareStepFailed",
            &long,
        );
        assert_eq!(
            patch["metadata"]["uid"],
            "7c4a8d09-ca37-4b7e-8a2f-3a1b2c3d4e5f"
        );
        let devices = patch["status"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0]["device"], "fpga-0");
        assert_eq!(devices[0]["driver"], DRIVER);
        assert!(devices[0].get("shareID").is_none());
        assert_eq!(devices[1]["shareID"], "s-1");
        let condition = &devices[0]["conditions"][0];
        assert_eq!(condition["type"], PREPARE_FAILED_CONDITION);
        assert_eq!(condition["status"], "True");
        assert_eq!(
            condition["message"].as_str().unwrap().len(),
            MAX_MESSAGE,
            "bounded"
        );
        assert!(condition["lastTransitionTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')));
    }
}
