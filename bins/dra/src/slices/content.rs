//! Whether a slice changed: two specs publish the same thing when they differ only in the
//! pool's generation, in the times the API server stamps on taints, or in fields absent on one
//! side and empty on the other, as the server's copy holds them. The publisher applies a slice
//! only when it changed, so that an unchanged pool costs the API server nothing.

use k8s_openapi::api::resource::v1::ResourceSliceSpec;

/// Whether two slice specs publish the same thing, their pool generations aside: when they do,
/// the publisher leaves the slice as it is. An absent field and an empty one (list, map) are
/// the same, so that the API server's copy of a slice compares equal to the slice applied.
pub fn same_content(a: &ResourceSliceSpec, b: &ResourceSliceSpec) -> bool {
    let normal = |s: &ResourceSliceSpec| {
        let mut s = s.clone();
        s.pool.generation = 0;
        // The API server stamps each taint with the time it first saw it.
        for d in s.devices.iter_mut().flatten() {
            for t in d.taints.iter_mut().flatten() {
                t.time_added = None;
            }
        }
        let mut value = serde_json::to_value(&s).unwrap_or_default();
        prune(&mut value);
        value
    };
    normal(a) == normal(b)
}

/// Drops nulls, empty lists and empty maps from `value`, at every depth.
fn prune(value: &mut serde_json::Value) {
    use serde_json::Value;
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match value {
        Value::Array(items) => items.iter_mut().for_each(prune),
        Value::Object(map) => {
            map.values_mut().for_each(prune);
            map.retain(|_, v| !empty(v));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::{build, device, inventory, profile, LEFT_OUT};
    use k8s_openapi::api::resource::v1::{Device, DeviceTaint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn specs_that_differ_only_in_generation_are_the_same() {
        let inv = inventory(vec![device("0", 0, None, true), device("1", 1, None, true)]);
        let one = build("n", &profile(), &inv, 1, LEFT_OUT).unwrap().spec;
        let two = build("n", &profile(), &inv, 2, LEFT_OUT).unwrap().spec;
        assert!(same_content(&one, &two));
        let mut sick = inv.clone();
        sick.devices[1].healthy = false;
        let three = build("n", &profile(), &sick, 3, LEFT_OUT).unwrap().spec;
        assert!(!same_content(&one, &three));
        let mut numa = inv;
        numa.devices[0].numa_node = Some(0);
        let four = build("n", &profile(), &numa, 1, LEFT_OUT).unwrap().spec;
        assert!(!same_content(&one, &four));
        let none = build("n", &profile(), &inventory(vec![]), 1, LEFT_OUT)
            .unwrap()
            .spec;
        let mut absent = none.clone();
        absent.devices = None;
        assert!(same_content(&none, &absent));
        // As the API server returns it: empty maps where none were set, still the same; a
        // device another writer changed is not.
        let mut served = one.clone();
        for d in served.devices.as_mut().unwrap() {
            d.capacity = Some(Default::default());
        }
        served.pool.generation = 9;
        assert!(same_content(&one, &served));
        let mut changed = one.clone();
        changed.devices.as_mut().unwrap()[0].name = "demo-x".into();
        assert!(!same_content(&one, &changed));
        let mut tainted = one.clone();
        tainted.devices.as_mut().unwrap()[0].allow_multiple_allocations = Some(true);
        assert!(!same_content(&one, &tainted));
    }

    #[test]
    fn prune_drops_nulls_and_empty_lists_and_maps_at_every_depth() {
        let mut value = serde_json::json!({
            "null": null,
            "list": [],
            "map": {},
            "nested": {"list": [], "kept": 1},
            "items": [{"null": null}, []],
            "zero": 0,
            "text": "",
            "no": false,
        });
        prune(&mut value);
        assert_eq!(
            value,
            serde_json::json!({
                "nested": {"kept": 1},
                "items": [{}, []],
                "zero": 0,
                "text": "",
                "no": false,
            })
        );
    }

    #[test]
    fn a_taints_time_stamp_is_no_change_but_its_effect_is() {
        let spec = |time: Option<Time>, effect: &str| ResourceSliceSpec {
            devices: Some(vec![Device {
                name: "demo-0".into(),
                taints: Some(vec![DeviceTaint {
                    key: "devinject.io/unhealthy".into(),
                    effect: effect.into(),
                    time_added: time,
                    ..Default::default()
                }]),
                ..Device::default()
            }]),
            ..ResourceSliceSpec::default()
        };
        let applied = spec(None, "NoSchedule");
        assert!(same_content(
            &applied,
            &spec(Some(Time(Default::default())), "NoSchedule")
        ));
        assert!(!same_content(&applied, &spec(None, "NoExecute")));
    }
}
