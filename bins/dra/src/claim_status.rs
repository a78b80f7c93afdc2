//! The server-side apply of a claim's device status (`status.devices`): its entries, one per
//! device of this driver, and the object that names the claim by namespace, name and UID (the
//! UID makes the apply fail rather than touch another claim of the same name). The outcome of a
//! prepare before binding ([`crate::binding`]) and the report of each prepare
//! (`driver::device_status`) are both written so.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

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
