//! The server-side apply of a claim's device status (`status.devices`): its entries, one per
//! device of this driver, the object that names the claim by namespace, name and UID (the UID
//! makes the apply fail rather than touch another claim of the same name), and the apply itself,
//! tried again a few times. The outcome of a prepare before binding ([`crate::binding`]) and the
//! report of each prepare (`driver::device_status`) are both written so.

use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};
use tracing::warn;

/// A condition of `kind`, `True` from now, with `reason` and `message`.
pub fn true_condition(kind: &str, reason: &str, message: &str) -> Value {
    let now = serde_json::to_value(Time(jiff::Timestamp::now())).unwrap_or(Value::Null);
    json!({
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    })
}

/// A device's entry: `driver`'s device `device` of `pool` (with `share_id`, the allocation's
/// share of a device shared by capacity) carrying `condition`.
pub fn entry(
    driver: &str,
    pool: &str,
    device: &str,
    share_id: Option<&str>,
    condition: Value,
) -> Value {
    let mut entry = json!({
        "driver": driver,
        "pool": pool,
        "device": device,
        "conditions": [condition],
    });
    if let Some(share) = share_id {
        entry["shareID"] = json!(share);
    }
    entry
}

/// The apply of `entries` to the status of the claim `name` in `namespace` with `uid`.
pub fn apply(namespace: &str, name: &str, uid: &str, entries: Vec<Value>) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": { "name": name, "namespace": namespace, "uid": uid },
        "status": { "devices": entries },
    })
}

/// How an [`apply_with_retries`] ended.
#[derive(Debug)]
pub enum Applied {
    /// The status is written.
    Done,
    /// The claim is gone, or another claim has its name now (404, 409): nothing to tell.
    Gone(kube::Error),
    /// Every try failed; the last error.
    Failed(kube::Error),
}

/// Applies `patch` to the status of claim `name` through `api` as field manager `manager`, up to
/// `tries` times, waiting one second more after each failure; a claim gone ends it at once.
pub async fn apply_with_retries(
    api: &Api<ResourceClaim>,
    name: &str,
    manager: &str,
    patch: &Value,
    tries: u32,
) -> Applied {
    let params = PatchParams::apply(manager).force();
    let mut attempt = 1;
    loop {
        match api.patch_status(name, &params, &Patch::Apply(patch)).await {
            Ok(_) => return Applied::Done,
            Err(e) if gone(&e) => return Applied::Gone(e),
            Err(e) if attempt < tries => {
                warn!(claim = name, error = %e, attempt, "writing the claim's device status failed; retrying");
                tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
                attempt += 1;
            }
            Err(e) => return Applied::Failed(e),
        }
    }
}

/// Whether `error` says the claim is gone or is another claim now.
fn gone(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404 || status.code == 409)
}
