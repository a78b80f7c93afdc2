//! What preparing a claim does, decided before anything runs or is written: each allocated
//! device mapped back to the device discovery finds on this node now (gone: refused; unhealthy:
//! refused unless the claim tolerates its taint, KEP-5055), a share or partition standing for
//! its device, the profile's prepare runs with the function the claim's opaque configuration
//! chose (none for a device already prepared before binding, KEP-5007, unless the claim is
//! prepared again), the attributes its device metadata tells the containers, and the spec of
//! each profile, built but not written.

use std::collections::BTreeMap;

use devinject_devices::request::split_replica;
use devinject_devices::{
    prepare_runs, DeviceId, Excerpt, FunctionRequest, Inventory, PrepareRun, Profile,
};
use devinject_discovery::{discover, resolve_driver_files};

use super::device_status::{DeviceReport, PrepareStep};
use super::Driver;
use crate::claim::{AllocatedDevice, Allocation};
use crate::claim_spec::{self, ClaimSpec};
use crate::device_metadata::{self, MetadataDevice};
use crate::prepared::PreparedDevice;
use crate::slices::{
    device_attributes, device_names, plugin_held_taint, unhealthy_taint, ATTR_PARTITION,
    ATTR_REPLICA,
};
use crate::taint_rules::{describe, untolerated};

/// The prepare runs of `profile` for each function's devices in `by_function` (`None`: the
/// profile's default), the function checked against the profile.
pub(super) fn runs(
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

/// What preparing a claim does for one profile.
pub(super) struct ProfilePlan {
    pub(super) profile: String,
    /// The profile's prepare runs, one per device, with the claim's function.
    pub(super) runs: Vec<PrepareRun>,
    pub(super) spec: ClaimSpec,
    /// The devices as the kubelet is told.
    pub(super) answer: Vec<PreparedDevice>,
    /// What the claim's device status tells of each device beyond [`Self::answer`], in its order.
    pub(super) reports: Vec<DeviceReport>,
}

impl Driver {
    /// Plans `claim`'s devices (its UID checked: `uid`), grouped by profile: each device mapped
    /// back to a discovered, healthy one, the profile's prepare runs with the function the
    /// claim's configuration chose for its request (but for devices prepared before binding,
    /// unless `again`: the claim is prepared again, e.g. after the node rebooted), and the
    /// spec, built but not written.
    pub(super) fn plan(
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
            let held = self
                .plugin_holds
                .borrow()
                .get(name.as_str())
                .cloned()
                .unwrap_or_default();
            let mut pairs = Vec::new();
            // Whether each device's prepare step ran before binding, for the claim's device
            // status (with its host id, the spec's id in `pairs`).
            let mut before_binding = Vec::new();
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
                // A device a running container holds through the device plugin waits for it
                // to end, unless the claim tolerates the hold (docs/dra.md, "From the device
                // plugin to DRA"): the kubelet retries the prepare meanwhile.
                if let Some(holder) = held.get(id) {
                    let taint = plugin_held_taint(&self.config.spec.driver, holder);
                    if !d.tolerations.iter().any(|t| t.tolerates(&taint)) {
                        return Err(format!(
                            "device {} of pool {} is held by pod {} through the device plugin \
                             ({}): the claim's pod starts once that pod ends",
                            Excerpt(&d.device),
                            Excerpt(&d.pool),
                            Excerpt(holder),
                            profile.resource.as_str()
                        ));
                    }
                }
                // A DeviceTaintRule made after the claim was allocated taints the device as
                // the driver's own taints do (docs/dra.md, "Taints").
                if let Some(rule) = untolerated(
                    &self.taint_rules.borrow(),
                    &self.config.spec.driver,
                    &d.pool,
                    &d.device,
                    &d.tolerations,
                ) {
                    return Err(format!(
                        "device {} of pool {} is tainted {} by DeviceTaintRule {} and the \
                         claim does not tolerate it: delete the rule, or delete the pod so \
                         that the claim is allocated again",
                        Excerpt(&d.device),
                        Excerpt(&d.pool),
                        Excerpt(&describe(&rule.spec.taint)),
                        Excerpt(&rule.name)
                    ));
                }
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
                before_binding.push((device.id.clone(), d.prepared_before_binding && !again));
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
            let reports = pairs
                .into_iter()
                .zip(before_binding)
                .map(|((_, host_id), (id, before))| DeviceReport {
                    host_id,
                    prepare_step: if before {
                        PrepareStep::RanBeforeBinding
                    } else if runs.iter().any(|r| r.device == id) {
                        PrepareStep::Ran
                    } else {
                        PrepareStep::None
                    },
                })
                .collect();
            plans.push(ProfilePlan {
                profile: name,
                runs,
                spec,
                answer,
                reports,
            });
        }
        Ok(plans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::fixtures::{
        allocation, claim_object, demo, node, result, set_health, Node, DRIVER, PREPARE, UID,
    };
    use crate::naming;
    use serde_json::json;
    use std::path::Path;

    /// Plans claim [`UID`] of `results` on `node`, its opaque parameters choosing `function`.
    fn plan_of(
        node: &Node,
        results: Vec<serde_json::Value>,
        function: Option<&str>,
        again: bool,
    ) -> (
        Result<Vec<ProfilePlan>, String>,
        BTreeMap<String, Vec<MetadataDevice>>,
    ) {
        let object = claim_object(UID, results, function);
        let allocation = allocation(node, &object);
        let mut requests = BTreeMap::new();
        let plans = node
            .driver
            .plan("the claim", UID, &allocation, &mut requests, again);
        (plans, requests)
    }

    fn ids(runs: &[PrepareRun]) -> Vec<(String, Option<String>)> {
        runs.iter()
            .map(|r| (r.device.as_str().to_owned(), r.function.clone()))
            .collect()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_device_maps_back_to_its_discovered_device_with_its_cdi_device() {
        let node = node(&[demo("", "")], 2);
        let (plans, requests) = plan_of(
            &node,
            vec![result("gpu", "node-a/demo", "demo-1")],
            None,
            false,
        );
        let plans = plans.unwrap();
        assert_eq!(plans.len(), 1);
        let plan = &plans[0];
        assert_eq!(plan.profile, "demo");
        assert_eq!(
            plan.spec.file_name,
            naming::claim_spec_file(DRIVER, "demo", UID)
        );
        assert!(
            plan.runs.is_empty(),
            "a profile without a prepare step runs nothing"
        );
        assert_eq!(
            plan.answer,
            [PreparedDevice {
                request_names: vec!["gpu".into()],
                pool_name: "node-a/demo".into(),
                device_name: "demo-1".into(),
                cdi_device_ids: vec![naming::cdi_device_id(DRIVER, "demo", UID, "demo-1")],
                share_id: None,
            }]
        );
        // What the containers are told of the device: its slice's attributes.
        let told = &requests["gpu"];
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].pool, "node-a/demo");
        assert_eq!(told[0].name, "demo-1");
        assert_eq!(told[0].attributes["id"].string.as_deref(), Some("1"));
        assert_eq!(told[0].attributes["index"].int, Some(1));
        assert_eq!(
            told[0].attributes["profile"].string.as_deref(),
            Some("demo")
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_device_gone_from_the_node_is_refused_naming_the_fix() {
        let node = node(&[demo("", "")], 1);
        let (plans, _) = plan_of(
            &node,
            vec![result("gpu", "node-a/demo", "demo-5")],
            None,
            false,
        );
        let err = plans.err().unwrap();
        assert!(
            err.contains("device demo-5 of pool node-a/demo is not on this node any more"),
            "{err}"
        );
        assert!(err.contains("delete the pod"), "{err}");
    }

    /// The plan of one claim for demo device `device`, tolerating the taint keys `tolerates`.
    fn plan_device(
        node: &Node,
        device: &str,
        tolerates: &[&str],
    ) -> Result<Vec<ProfilePlan>, String> {
        let mut claimed = result("gpu", "node-a/demo", device);
        if !tolerates.is_empty() {
            claimed["tolerations"] = tolerates
                .iter()
                .map(|key| json!({"key": key, "operator": "Exists"}))
                .collect();
        }
        plan_of(node, vec![claimed], None, false).0
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_unhealthy_device_is_prepared_only_for_a_claim_that_tolerates_its_taint() {
        let node = node(&[demo("", "")], 2);
        set_health(&node.root, "demo", 1, "bad");
        let err = plan_device(&node, "demo-1", &[]).err().unwrap();
        assert!(
            err.contains("is unhealthy and the claim does not tolerate its taint"),
            "{err}"
        );
        let plans = plan_device(&node, "demo-1", &["devinject.io/unhealthy"]);
        assert_eq!(plans.unwrap()[0].answer[0].device_name, "demo-1");
        // Tolerating another taint is not enough.
        assert!(plan_device(&node, "demo-1", &["devinject.io/prepare-failed"]).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_device_held_through_the_device_plugin_waits_for_its_pod_unless_tolerated() {
        let mut node = node(&[demo("", "")], 2);
        let (holds, held) =
            tokio::sync::watch::channel(crate::plugin_holds::PluginHolds::from([(
                "demo".to_owned(),
                BTreeMap::from([("1".to_owned(), "team/trainer".to_owned())]),
            )]));
        node.driver.plugin_holds = held;
        let err = plan_device(&node, "demo-1", &[]).err().unwrap();
        assert!(
            err.contains("device demo-1 of pool node-a/demo is held by pod team/trainer through the device plugin (devinject.io/demo)"),
            "{err}"
        );
        // The other device is free.
        let plans = plan_device(&node, "demo-0", &[]);
        assert_eq!(plans.unwrap()[0].answer[0].device_name, "demo-0");
        // A claim that tolerates the hold gets it; tolerating another taint is not enough.
        assert!(plan_device(&node, "demo-1", &["devinject.io/device-plugin"]).is_ok());
        assert!(plan_device(&node, "demo-1", &["devinject.io/unhealthy"]).is_err());
        // Once the holder ends, the device is prepared.
        holds.send_replace(Default::default());
        let plans = plan_device(&node, "demo-1", &[]);
        assert_eq!(plans.unwrap()[0].answer[0].device_name, "demo-1");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_device_a_taint_rule_taints_is_prepared_only_for_a_claim_that_tolerates_it() {
        let mut node = node(&[demo("", "")], 2);
        let rule = |effect: &str| crate::taint_rules::TaintRule {
            name: "maintenance".to_owned(),
            spec: serde_json::from_value(json!({
                "deviceSelector": {"driver": "devinject.io", "device": "demo-1"},
                "taint": {"key": "example.com/maintenance", "effect": effect},
            }))
            .unwrap(),
        };
        let (rules, seen) = tokio::sync::watch::channel(crate::taint_rules::TaintRules::from([(
            "maintenance".to_owned(),
            rule("NoSchedule"),
        )]));
        node.driver.taint_rules = seen;
        let err = plan_device(&node, "demo-1", &[]).err().unwrap();
        assert!(
            err.contains("device demo-1 of pool node-a/demo is tainted example.com/maintenance:NoSchedule by DeviceTaintRule maintenance"),
            "{err}"
        );
        // The other device is not selected; a claim tolerating the taint gets this one.
        assert!(plan_device(&node, "demo-0", &[]).is_ok());
        assert!(plan_device(&node, "demo-1", &["example.com/maintenance"]).is_ok());
        assert!(plan_device(&node, "demo-1", &["devinject.io/unhealthy"]).is_err());
        // A taint that only informs refuses nothing; a deleted rule neither.
        rules.send_replace([("maintenance".to_owned(), rule("None"))].into());
        assert!(plan_device(&node, "demo-1", &[]).is_ok());
        rules.send_replace(Default::default());
        assert!(plan_device(&node, "demo-1", &[]).is_ok());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_prepare_runs_carry_the_function_the_claim_chose() {
        let node = node(&[demo("", PREPARE)], 2);
        let both = vec![
            result("a", "node-a/demo", "demo-0"),
            result("b", "node-a/demo", "demo-1"),
        ];
        let (plans, _) = plan_of(&node, both.clone(), Some("fast"), false);
        let plans = plans.unwrap();
        assert_eq!(
            ids(&plans[0].runs),
            [
                ("0".into(), Some("fast".into())),
                ("1".into(), Some("fast".into()))
            ]
        );
        let (plans, _) = plan_of(&node, both, None, false);
        assert_eq!(
            ids(&plans.unwrap()[0].runs),
            [("0".into(), None), ("1".into(), None)]
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_device_prepared_before_binding_runs_again_only_when_the_claim_is_prepared_again() {
        let node = node(&[demo("", PREPARE)], 2);
        let mut bound = result("gpu", "node-a/demo", "demo-0");
        bound["bindingConditions"] = json!(["Prepared"]);
        let results = vec![bound, result("gpu", "node-a/demo", "demo-1")];
        let (plans, _) = plan_of(&node, results.clone(), None, false);
        let plans = plans.unwrap();
        assert_eq!(
            ids(&plans[0].runs),
            [("1".into(), None)],
            "its step ran before binding"
        );
        assert_eq!(
            plans[0].answer.len(),
            2,
            "both devices are prepared all the same"
        );
        let (plans, _) = plan_of(&node, results, None, true);
        assert_eq!(
            ids(&plans.unwrap()[0].runs),
            [("0".into(), None), ("1".into(), None)]
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_share_of_a_device_is_prepared_as_the_device_with_its_replica_told() {
        let node = node(&[demo("replicas = 2\n", "")], 2);
        let (plans, requests) = plan_of(
            &node,
            vec![result("gpu", "node-a/demo", "demo-1--0")],
            None,
            false,
        );
        let plans = plans.unwrap();
        assert_eq!(plans[0].answer[0].device_name, "demo-1--0");
        // The spec gives the share's container the device itself.
        let spec = serde_json::to_string(&plans[0].spec.spec).unwrap();
        assert!(spec.contains("/dev/demo/accel1"), "{spec}");
        assert!(!spec.contains("accel0"), "{spec}");
        let told = &requests["gpu"][0];
        assert_eq!(told.attributes["id"].string.as_deref(), Some("1"));
        assert_eq!(told.attributes[crate::slices::ATTR_REPLICA].int, Some(0));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_pool_of_another_node_is_refused() {
        let node = node(&[demo("", "")], 1);
        let object = claim_object(UID, vec![result("gpu", "node-b/demo", "demo-0")], None);
        let pools = ["node-b/demo".to_owned()].into();
        let allocation = crate::claim::read(&object, UID, DRIVER, &pools).unwrap();
        let err = node
            .driver
            .plan("the claim", UID, &allocation, &mut BTreeMap::new(), false)
            .err()
            .unwrap();
        assert_eq!(err, "pool node-b/demo is not one of this node's");
    }

    #[test]
    fn runs_refuse_a_function_the_profile_does_not_have_naming_where_it_came_from() {
        let profile = Profile::parse(&demo("", PREPARE), Path::new("demo.toml")).unwrap();
        let inventory = Inventory {
            withdrawn: Vec::new(),
            devices: Vec::new(),
            control_nodes: Vec::new(),
        };
        let by_function =
            BTreeMap::from([(Some("turbo".to_owned()), vec![DeviceId::new("0").unwrap()])]);
        let err = runs("claim ns/c", &profile, &inventory, &by_function).unwrap_err();
        assert!(err.contains("turbo"), "{err}");
        assert!(
            err.contains("the opaque parameter `function` of claim ns/c"),
            "{err}"
        );
        let plain = Profile::parse(&demo("", ""), Path::new("demo.toml")).unwrap();
        let none = BTreeMap::from([(None, vec![DeviceId::new("0").unwrap()])]);
        assert_eq!(
            runs("claim ns/c", &plain, &inventory, &none),
            Ok(Vec::new())
        );
    }
}
