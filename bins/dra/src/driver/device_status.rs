//! What the driver tells of each device it prepared, in the claim's device status
//! (`status.devices`, KEP-4817, GA in Kubernetes 1.37), for `kubectl describe resourceclaim`:
//! a `Ready` condition and, as the entry's `data`, the profile, the host device the DRA device
//! stands for, the CDI devices the runtime injects and what the prepare step did.
//!
//! Written by server-side apply under a field manager of its own ([`FIELD_MANAGER`]): the
//! outcome of a prepare before binding ([`crate::binding`]) stays the other manager's, so
//! neither apply removes what the other wrote. The write runs after the kubelet has its answer
//! and is only told: a failure (an API server away, RBAC without `resourceclaims/status`) is
//! logged, and the claim stays prepared.

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use serde_json::{json, Value};
use tracing::{debug, warn};

use crate::claim_status::{self, Applied};
use crate::prepared::PreparedDevice;

/// The field manager of these applies.
pub const FIELD_MANAGER: &str = "devinject-dra-prepare";

/// The condition each prepared device carries.
pub const READY_CONDITION: &str = "Ready";

/// How many times a failed apply is tried.
const TRIES: u32 = 3;

/// What the prepare step did for a device, as its status says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareStep {
    /// The profile has no prepare step.
    None,
    /// It ran at this prepare and succeeded.
    Ran,
    /// It ran when the scheduler allocated the device, before the pod was bound.
    RanBeforeBinding,
}

impl PrepareStep {
    fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Ran => "ran",
            Self::RanBeforeBinding => "ran before binding",
        }
    }
}

/// What the status tells of a prepared device beyond what the kubelet was told of it.
#[derive(Debug, Clone)]
pub struct DeviceReport {
    /// The host device it stands for (the profile's device id).
    pub host_id: String,
    /// What the prepare step did.
    pub prepare_step: PrepareStep,
}

/// The server-side apply into the status of the claim `name` in `namespace` with `uid` (the UID
/// makes it apply to this claim only) of `driver`'s `devices`: each with its profile, the
/// device as the kubelet was told, and its report.
pub fn patch<'a>(
    namespace: &str,
    name: &str,
    uid: &str,
    driver: &str,
    devices: impl IntoIterator<Item = (&'a str, &'a PreparedDevice, &'a DeviceReport)>,
) -> Value {
    let entries: Vec<Value> = devices
        .into_iter()
        .map(|(profile, device, report)| {
            let message = format!(
                "device {} of profile {profile} prepared on the node; the runtime injects {}",
                report.host_id,
                device.cdi_device_ids.join(", ")
            );
            let mut entry = claim_status::entry(
                driver,
                &device.pool_name,
                &device.device_name,
                device.share_id.as_deref(),
                claim_status::true_condition(READY_CONDITION, "Prepared", &message),
            );
            entry["data"] = json!({
                "profile": profile,
                "deviceID": report.host_id,
                "cdiDeviceIDs": device.cdi_device_ids,
                "prepareStep": report.prepare_step.as_str(),
            });
            entry
        })
        .collect();
    claim_status::apply(namespace, name, uid, entries)
}

/// Applies `patch` to the status of claim `name` through `api`, a few times before it gives up
/// with a warning; `what` names the claim in the log.
pub async fn write(api: Api<ResourceClaim>, name: String, what: String, patch: Value) {
    match claim_status::apply_with_retries(&api, &name, FIELD_MANAGER, &patch, TRIES).await {
        Applied::Done => {
            debug!(claim = %what, "the claim's device status tells what was prepared");
        }
        Applied::Gone(e) => {
            debug!(claim = %what, error = %e, "the claim changed before its device status was written");
        }
        Applied::Failed(e) => {
            warn!(claim = %what, error = %e, "writing the claim's device status failed; the claim stays prepared without it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(name: &str, share: Option<&str>) -> PreparedDevice {
        PreparedDevice {
            request_names: vec!["gpu".into()],
            pool_name: "node-a/demo".into(),
            device_name: name.into(),
            cdi_device_ids: vec![format!("devinject.io/demo=claim-{name}")],
            share_id: share.map(str::to_owned),
        }
    }

    fn report(step: PrepareStep) -> DeviceReport {
        DeviceReport {
            host_id: "2".into(),
            prepare_step: step,
        }
    }

    #[test]
    fn each_device_gets_a_ready_condition_and_what_an_operator_wants_to_see() {
        let (whole, share) = (device("demo-2", None), device("demo-3", Some("share-1")));
        let (ran, before) = (
            report(PrepareStep::Ran),
            report(PrepareStep::RanBeforeBinding),
        );
        let p = patch(
            "ns",
            "claim",
            "uid-1",
            "devinject.io",
            [("demo", &whole, &ran), ("demo", &share, &before)],
        );
        assert_eq!(p["metadata"]["uid"], "uid-1");
        assert_eq!(p["metadata"]["namespace"], "ns");
        let devices = p["status"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 2);
        let first = &devices[0];
        assert_eq!(
            (&first["driver"], &first["pool"], &first["device"]),
            (
                &json!("devinject.io"),
                &json!("node-a/demo"),
                &json!("demo-2")
            )
        );
        assert!(first.get("shareID").is_none());
        let condition = &first["conditions"][0];
        assert_eq!(
            (
                &condition["type"],
                &condition["status"],
                &condition["reason"]
            ),
            (&json!("Ready"), &json!("True"), &json!("Prepared"))
        );
        assert!(condition["message"]
            .as_str()
            .unwrap()
            .contains("device 2 of profile demo"));
        assert_eq!(
            first["data"],
            json!({
                "profile": "demo",
                "deviceID": "2",
                "cdiDeviceIDs": ["devinject.io/demo=claim-demo-2"],
                "prepareStep": "ran",
            })
        );
        assert_eq!(devices[1]["shareID"], "share-1");
        assert_eq!(devices[1]["data"]["prepareStep"], "ran before binding");
    }
}
