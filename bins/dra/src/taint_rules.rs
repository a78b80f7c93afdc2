//! The taints an administrator puts on devices through `DeviceTaintRule`s (KEP-5055, GA and
//! served as `resource.k8s.io/v1` since Kubernetes 1.37). The scheduler keeps a device a rule
//! taints from every claim that does not tolerate the taint, but a rule made after a claim was
//! allocated, before the kubelet asks for the prepare, reaches the node only through the
//! driver: it watches the rules that can select its devices, and prepare refuses a device one
//! of them taints (`NoSchedule` or `NoExecute`; `None` only informs) unless the claim
//! tolerates the taint, as it refuses a device its own health taint marks (docs/dra.md,
//! "Taints").
//!
//! k8s-openapi 0.28 knows the kind only as `v1beta2` (Kubernetes 1.36, where it is served only
//! with that group version enabled); 1.37 serves the same fields as `v1`. A rule is therefore
//! read as a [`DynamicObject`] of `v1`, its spec into [`RuleSpec`]. Where `v1` does not serve
//! the kind (before 1.37), or the driver's account may not list it, the driver says so once
//! and honours no rule.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::DeviceTaint;
use kube::api::ListParams;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use serde::Deserialize;
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tracing::{info, warn};

use crate::claim::Toleration;
use crate::watch_log::WatchLog;

/// The most rules kept; more are left out, with a warning (each is an administrator's object,
/// and a prepare checks every device against each kept rule).
pub const MAX_RULES: usize = 4096;

/// The kept rules, by name.
pub type TaintRules = BTreeMap<String, TaintRule>;

/// What a `DeviceTaintRule`'s spec says, as far as the driver reads it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSpec {
    /// Which devices the taint is on; none: no device.
    #[serde(default)]
    pub device_selector: Option<RuleSelector>,
    /// The taint.
    pub taint: DeviceTaint,
}

/// A rule's device selector: each field set must equal the device's; the empty selector
/// selects every device.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RuleSelector {
    /// The driver (a slice's `spec.driver`).
    #[serde(default)]
    pub driver: Option<String>,
    /// The pool (a slice's `spec.pool.name`).
    #[serde(default)]
    pub pool: Option<String>,
    /// The device (a slice's `spec.devices[].name`).
    #[serde(default)]
    pub device: Option<String>,
}

/// One rule the driver keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct TaintRule {
    /// The rule's name.
    pub name: String,
    /// Its spec.
    pub spec: RuleSpec,
}

impl TaintRule {
    /// Whether the rule taints device `device` of pool `pool` of driver `driver`.
    pub fn selects(&self, driver: &str, pool: &str, device: &str) -> bool {
        let Some(s) = &self.spec.device_selector else {
            return false;
        };
        let is = |field: &Option<String>, value: &str| field.as_deref().is_none_or(|f| f == value);
        is(&s.driver, driver) && is(&s.pool, pool) && is(&s.device, device)
    }

    /// Whether the rule's taint keeps a device from a claim that does not tolerate it
    /// (`NoSchedule`, `NoExecute`, or an effect this driver does not know: refused, the
    /// safe side), rather than only informing (`None`).
    pub fn refuses(&self) -> bool {
        self.spec.taint.effect != "None"
    }
}

/// The first rule of `rules` that taints device `device` of pool `pool` of driver `driver`
/// with a taint that refuses it, and that `tolerations` do not tolerate.
pub fn untolerated<'a>(
    rules: &'a TaintRules,
    driver: &str,
    pool: &str,
    device: &str,
    tolerations: &[Toleration],
) -> Option<&'a TaintRule> {
    rules.values().find(|r| {
        r.refuses()
            && r.selects(driver, pool, device)
            && !tolerations.iter().any(|t| t.tolerates(&r.spec.taint))
    })
}

/// A taint as `kubectl` shows one: `key=value:effect`.
pub fn describe(taint: &DeviceTaint) -> String {
    match &taint.value {
        Some(v) => format!("{}={v}:{}", taint.key, taint.effect),
        None => format!("{}:{}", taint.key, taint.effect),
    }
}

/// The rule in `object`, if it can select a device of `driver` (its selector names no other
/// driver); an object whose spec cannot be read is an error naming it.
pub fn rule_of(object: &DynamicObject, driver: &str) -> Result<Option<TaintRule>, String> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let spec = object
        .data
        .get("spec")
        .cloned()
        .ok_or_else(|| format!("DeviceTaintRule {name} has no spec"))?;
    let spec: RuleSpec = serde_json::from_value(spec)
        .map_err(|e| format!("DeviceTaintRule {name}: its spec cannot be read: {e}"))?;
    let ours = spec
        .device_selector
        .as_ref()
        .is_some_and(|s| s.driver.as_deref().is_none_or(|d| d == driver));
    Ok(ours.then_some(TaintRule { name, spec }))
}

/// The `resource.k8s.io/v1` DeviceTaintRule kind.
fn api_resource() -> ApiResource {
    ApiResource {
        group: "resource.k8s.io".into(),
        version: "v1".into(),
        api_version: "resource.k8s.io/v1".into(),
        kind: "DeviceTaintRule".into(),
        plural: "devicetaintrules".into(),
    }
}

/// Watches the DeviceTaintRules and sends those that can select `driver`'s devices to `out`,
/// until every receiver is gone (noticed at the next change). A rule whose spec cannot be read
/// is left out with a warning; where the kind is not served or may not be listed, nothing is
/// sent and the driver says once why.
pub async fn watch(client: kube::Client, driver: String, out: watch::Sender<TaintRules>) {
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource());
    match api.list(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            info!("the API server serves no resource.k8s.io/v1 DeviceTaintRule (before Kubernetes 1.37): prepare honours the driver's own taints only");
            return;
        }
        Err(kube::Error::Api(e)) if e.code == 403 => {
            warn!(error = %e.message, "the driver may not list DeviceTaintRules: prepare honours the driver's own taints only; grant list and watch on resource.k8s.io devicetaintrules (deploy/overlays/dra/rbac.yaml)");
            return;
        }
        // Anything else is retried by the watch below.
        _ => {}
    }
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    let mut listing: Option<TaintRules> = None;
    let mut log = WatchLog::new(
        "the DeviceTaintRules",
        "prepare honours the rules last seen",
    );
    let keep = |rules: &mut TaintRules, object: &DynamicObject| match rule_of(object, &driver) {
        Ok(Some(rule)) if rules.len() < MAX_RULES || rules.contains_key(&rule.name) => {
            rules.insert(rule.name.clone(), rule);
        }
        Ok(Some(rule)) => {
            warn!(rule = %rule.name, max = MAX_RULES, "too many DeviceTaintRules select this driver's devices: this one is not honoured");
        }
        Ok(None) => {
            rules.remove(object.metadata.name.as_deref().unwrap_or_default());
        }
        Err(e) => warn!(error = %e, "a DeviceTaintRule is not honoured"),
    };
    while let Some(event) = events.next().await {
        if out.is_closed() {
            return;
        }
        let Some(event) = log.event(event) else {
            continue;
        };
        let mut now = out.borrow().clone();
        match event {
            watcher::Event::Init => listing = Some(TaintRules::new()),
            watcher::Event::InitApply(object) => keep(listing.get_or_insert_default(), &object),
            watcher::Event::InitDone => now = listing.take().unwrap_or_default(),
            watcher::Event::Apply(object) => keep(&mut now, &object),
            watcher::Event::Delete(object) => {
                now.remove(object.metadata.name.as_deref().unwrap_or_default());
            }
        }
        out.send_if_modified(|known| {
            let changed = *known != now;
            if changed {
                let names: Vec<&str> = now.keys().map(String::as_str).collect();
                info!(rules = ?names, "the DeviceTaintRules selecting this driver's devices changed");
                *known = now;
            }
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, selector: serde_json::Value, effect: &str) -> DynamicObject {
        let mut object = DynamicObject::new(name, &api_resource());
        object.data = serde_json::json!({
            "spec": {
                "deviceSelector": selector,
                "taint": {"key": "example.com/maintenance", "value": "planned", "effect": effect},
            }
        });
        object
    }

    fn kept(object: &DynamicObject) -> TaintRule {
        rule_of(object, "devinject.io")
            .expect("readable")
            .expect("kept")
    }

    #[test]
    fn a_rule_selects_by_every_field_it_sets_and_no_selector_selects_nothing() {
        let all = kept(&rule("all", serde_json::json!({}), "NoSchedule"));
        assert!(all.selects("devinject.io", "node-a-demo", "demo-0"));
        let one = kept(&rule(
            "one",
            serde_json::json!({"driver": "devinject.io", "pool": "node-a-demo", "device": "demo-1"}),
            "NoSchedule",
        ));
        assert!(one.selects("devinject.io", "node-a-demo", "demo-1"));
        assert!(!one.selects("devinject.io", "node-a-demo", "demo-0"));
        assert!(!one.selects("devinject.io", "node-b-demo", "demo-1"));
        let pool = kept(&rule(
            "pool",
            serde_json::json!({"pool": "node-a-demo"}),
            "NoExecute",
        ));
        assert!(pool.selects("devinject.io", "node-a-demo", "demo-7"));
        assert!(!pool.selects("devinject.io", "node-b-demo", "demo-7"));

        let mut none = rule("none", serde_json::Value::Null, "NoSchedule");
        none.data["spec"]
            .as_object_mut()
            .unwrap()
            .remove("deviceSelector");
        assert_eq!(rule_of(&none, "devinject.io").unwrap(), None);
    }

    #[test]
    fn a_rule_for_another_driver_is_not_kept_and_a_broken_one_is_named() {
        let other = rule(
            "gpus",
            serde_json::json!({"driver": "gpu.example.com"}),
            "NoSchedule",
        );
        assert_eq!(rule_of(&other, "devinject.io").unwrap(), None);
        let mut broken = rule("broken", serde_json::json!({}), "NoSchedule");
        broken.data["spec"]["taint"] = serde_json::json!("not a taint");
        let err = rule_of(&broken, "devinject.io").unwrap_err();
        assert!(err.contains("DeviceTaintRule broken"), "{err}");
    }

    #[test]
    fn only_an_untolerated_refusing_taint_refuses_a_device() {
        let mut rules = TaintRules::new();
        for (name, effect) in [("informs", "None"), ("keeps", "NoSchedule")] {
            let r = kept(&rule(name, serde_json::json!({"device": "demo-0"}), effect));
            rules.insert(r.name.clone(), r);
        }
        let found = untolerated(&rules, "devinject.io", "pool", "demo-0", &[]);
        assert_eq!(found.map(|r| r.name.as_str()), Some("keeps"));
        assert!(untolerated(&rules, "devinject.io", "pool", "demo-1", &[]).is_none());

        let tolerating = |key: &str| Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".to_owned()),
            value: None,
            effect: None,
        };
        let tolerated = [tolerating("example.com/maintenance")];
        assert!(untolerated(&rules, "devinject.io", "pool", "demo-0", &tolerated).is_none());
        let other = [tolerating("example.com/other")];
        assert!(untolerated(&rules, "devinject.io", "pool", "demo-0", &other).is_some());
        assert_eq!(
            describe(&rules["keeps"].spec.taint),
            "example.com/maintenance=planned:NoSchedule"
        );
    }
}
