//! The shared counters of a partitioned profile (KEP-4815, partitionable devices): each whole
//! device has a counter set of its own, named as the device, with one counter `unit<n>` of 1 per
//! unit, and each device published of it (the whole device, each partition) consumes the units
//! it covers, so that the scheduler never allocates two that overlap. Since Kubernetes 1.35 a
//! slice holds counters or devices, never both, so the sets go in slices of their own.

use devinject_devices::Partitions;
use k8s_openapi::api::resource::v1::{Counter, CounterSet, Device};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::attributes::ATTR_PARTITION;

/// The counter of each unit of a partitioned device, `unit<n>`: each counts 1, and every
/// partition covering the unit consumes it (KEP-4815's shared counters).
pub const UNIT_COUNTER: &str = "unit";

/// The counter sets the whole devices of `devices` (what [`super::devices::published_devices`]
/// gives for a profile with `partitions`) hold: one per device, named as the device, with one
/// counter per unit. Since Kubernetes 1.35 a slice holds counters or devices, never both
/// (pkg/apis/resource/validation: "only one of `sharedCounters` or `devices` is allowed"), and
/// a device may consume a set that another slice of its pool holds.
pub(super) fn counter_sets(partitions: &Partitions, devices: &[Device]) -> Vec<CounterSet> {
    devices
        .iter()
        .filter(|d| {
            d.attributes
                .as_ref()
                .is_some_and(|a| !a.contains_key(ATTR_PARTITION))
        })
        .map(|whole| CounterSet {
            name: whole.name.clone(),
            counters: (0..partitions.units)
                .map(|u| (unit_counter(u), one_unit()))
                .collect(),
        })
        .collect()
}

/// The counter of unit `u`: `unit<u>`.
pub(super) fn unit_counter(u: u32) -> String {
    format!("{UNIT_COUNTER}{u}")
}

pub(super) fn one_unit() -> Counter {
    Counter {
        value: Quantity("1".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::{consumed, device, inventory, partitioned_profile, slices};
    use crate::slices::{counters_slice_name, device_names, ApiFields, ATTR_ID};
    use std::collections::BTreeMap;

    #[test]
    fn a_partitioned_device_is_published_whole_and_in_parts_consuming_its_units() {
        let profile = partitioned_profile(4, "half = 2\nquarter = 1\n");
        let inv = inventory(vec![device("0", 0, None, true), device("1", 1, None, true)]);
        let pool = slices(&profile, &inv, ApiFields::ALL).unwrap();
        assert_eq!(pool.len(), 2, "the counters' slice and the devices'");
        let (counters, devices) = (&pool[0], &pool[1]);
        assert_eq!(
            counters.metadata.name.as_deref(),
            Some(counters_slice_name("node-a", "demo", 0).as_str())
        );
        assert_ne!(counters.metadata.name, devices.metadata.name);
        for slice in &pool {
            assert_eq!(slice.spec.pool.name, "node-a/demo");
            assert_eq!(slice.spec.pool.resource_slice_count, 2);
            assert_eq!(slice.spec.pool.generation, 3);
            assert_eq!(slice.spec.node_name.as_deref(), Some("node-a"));
        }
        // A slice holds counters or devices, never both (1.35+ validation).
        assert_eq!(counters.spec.devices, None);
        assert_eq!(devices.spec.shared_counters, None);
        let sets = counters.spec.shared_counters.as_ref().unwrap();
        let names: Vec<_> = sets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["demo-0", "demo-1"]);
        for set in sets {
            let units: Vec<_> = set
                .counters
                .iter()
                .map(|(k, v)| (k.as_str(), v.value.0.as_str()))
                .collect();
            assert_eq!(
                units,
                [
                    ("unit0", "1"),
                    ("unit1", "1"),
                    ("unit2", "1"),
                    ("unit3", "1")
                ]
            );
        }
        let used = consumed(devices);
        assert_eq!(
            used.len(),
            14,
            "each device whole, as 2 halves and 4 quarters"
        );
        let units = |name: &str| used[name].1.clone();
        assert_eq!(used["demo-1"].0, "demo-1");
        assert_eq!(units("demo-1"), ["unit0", "unit1", "unit2", "unit3"]);
        assert_eq!(used["demo-1-half1"].0, "demo-1");
        assert_eq!(units("demo-1-half1"), ["unit2", "unit3"]);
        assert_eq!(units("demo-0-quarter2"), ["unit2"]);
        // Two devices of one device may be allocated together exactly when they share no unit:
        // each unit counts 1, so the scheduler refuses any pair whose units overlap.
        let list = devices.spec.devices.as_ref().unwrap();
        let d = |name: &str| list.iter().find(|d| d.name == name).unwrap();
        let whole = d("demo-0").attributes.as_ref().unwrap();
        assert!(
            !whole.contains_key(ATTR_PARTITION),
            "the whole device is no partition"
        );
        let half = d("demo-0-half1").attributes.as_ref().unwrap();
        assert_eq!(half[ATTR_PARTITION].string.as_deref(), Some("half"));
        assert_eq!(
            half[ATTR_ID].string.as_deref(),
            Some("0"),
            "its device's id"
        );
        for (a, (set_a, units_a)) in &used {
            for (b, (set_b, units_b)) in &used {
                if a == b || set_a != set_b {
                    continue;
                }
                let overlap = units_a.iter().any(|u| units_b.contains(u));
                let pa = a
                    .strip_prefix("demo-0")
                    .or(a.strip_prefix("demo-1"))
                    .unwrap();
                let pb = b
                    .strip_prefix("demo-0")
                    .or(b.strip_prefix("demo-1"))
                    .unwrap();
                let span = |p: &str| -> std::ops::Range<u32> {
                    match p {
                        "" => 0..4,
                        _ => {
                            let part = profile
                                .partitions
                                .as_ref()
                                .unwrap()
                                .split(&format!("x@{}", &p[1..]))
                                .1
                                .unwrap();
                            part.units()
                        }
                    }
                };
                let (ra, rb) = (span(pa), span(pb));
                assert_eq!(overlap, ra.start < rb.end && rb.start < ra.end, "{a} {b}");
            }
        }
        // Every name maps back to the device.
        let names = device_names(&profile, &inv).unwrap();
        assert_eq!(names.id("demo-1-quarter3"), Some("1@quarter3"));
    }

    fn published(name: &str, partition: Option<&str>) -> Device {
        let mut attributes = BTreeMap::new();
        if let Some(shape) = partition {
            attributes.insert(
                ATTR_PARTITION.to_owned(),
                k8s_openapi::api::resource::v1::DeviceAttribute {
                    string: Some(shape.into()),
                    ..Default::default()
                },
            );
        }
        Device {
            name: name.into(),
            attributes: Some(attributes),
            ..Device::default()
        }
    }

    #[test]
    fn each_whole_device_has_a_set_of_its_own_with_a_counter_of_one_per_unit() {
        let profile = partitioned_profile(3, "one = 1\n");
        let partitions = profile.partitions.as_ref().unwrap();
        let devices = [
            published("demo-0", None),
            published("demo-0-one0", Some("one")),
            published("demo-1", None),
            published("demo-1-one2", Some("one")),
        ];
        let sets = counter_sets(partitions, &devices);
        let found: Vec<(&str, Vec<(&str, &str)>)> = sets
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.counters
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.value.0.as_str()))
                        .collect(),
                )
            })
            .collect();
        let units = vec![("unit0", "1"), ("unit1", "1"), ("unit2", "1")];
        assert_eq!(found, [("demo-0", units.clone()), ("demo-1", units)]);
    }

    #[test]
    fn no_whole_device_no_counter_set() {
        let profile = partitioned_profile(2, "one = 1\n");
        let partitions = profile.partitions.as_ref().unwrap();
        assert!(counter_sets(partitions, &[]).is_empty());
        assert!(counter_sets(partitions, &[published("demo-0-one1", Some("one"))]).is_empty());
    }

    #[test]
    fn a_units_counter_is_named_by_its_number() {
        assert_eq!(unit_counter(0), "unit0");
        assert_eq!(unit_counter(31), "unit31");
        assert_eq!(one_unit().value.0, "1");
    }
}
