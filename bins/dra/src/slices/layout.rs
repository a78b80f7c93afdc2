//! How one pool's devices are cut into ResourceSlices within the API's limits: the counters'
//! slices of a partitioned profile first (a slice holds shared counters or devices, never both,
//! from Kubernetes 1.35), then the devices' slices, each of at most [`MAX_DEVICES_PER_SLICE`]
//! devices or [`MAX_DEVICES_WITH_TAINTS`] where one has a taint or consumes counters; every
//! slice names the pool, its generation and the pool's slice count, so that the scheduler knows
//! when it has seen the whole pool (KEP-4381, structured parameters).

use devinject_devices::{Inventory, Profile};
use k8s_openapi::api::resource::v1::{ResourcePool, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::counters::counter_sets;
use super::devices::{published_devices, DeviceState};
use super::error::Result;
use super::field_probe::ApiFields;
use super::limits::{MAX_COUNTER_SETS, MAX_DEVICES_PER_SLICE, MAX_DEVICES_WITH_TAINTS};
use super::published_ids::partitioned;
use super::slice_names::{counters_slice_name, devices_slice_name};
use crate::naming;

/// The ResourceSlices of `profile`'s devices in `inventory` on `node`, published by `driver`
/// as generation `generation` of the node's pool for the profile, with the fields the API
/// server keeps (`fields`); `state` places devices on the PCI bus and names those whose
/// prepare step failed. The pool is as many slices as the API's limits ask (see the module
/// docs): first the counters' slices of a partitioned profile ([`counters_slice_name`]), then
/// the devices' ([`devices_slice_name`]), every one naming their count.
pub fn resource_slices(
    driver: &str,
    node: &str,
    profile: &Profile,
    inventory: &Inventory,
    generation: i64,
    fields: ApiFields,
    state: &DeviceState,
) -> Result<Vec<ResourceSlice>> {
    let pname = profile.name.as_str();
    let devices = published_devices(driver, node, profile, inventory, fields, state)?;
    let counter_sets = partitioned(profile, fields)
        .map(|p| counter_sets(p, &devices))
        .unwrap_or_default();
    let advanced = devices
        .iter()
        .any(|d| d.taints.is_some() || d.consumes_counters.is_some());
    let per_slice = if advanced {
        MAX_DEVICES_WITH_TAINTS
    } else {
        MAX_DEVICES_PER_SLICE
    };
    let counters = chunks(counter_sets, MAX_COUNTER_SETS);
    let mut devices = chunks(devices, per_slice);
    if devices.is_empty() {
        // A pool with no device left is still published, empty, so that its slice tells the
        // scheduler the devices are gone.
        devices.push(Vec::new());
    }
    let pool = ResourcePool {
        name: naming::pool(node, pname),
        generation,
        resource_slice_count: i64::try_from(counters.len() + devices.len()).unwrap_or(i64::MAX),
    };
    let slice = |name: String, spec: ResourceSliceSpec| ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name),
            ..ObjectMeta::default()
        },
        spec: ResourceSliceSpec {
            driver: driver.to_owned(),
            node_name: Some(node.to_owned()),
            pool: pool.clone(),
            ..spec
        },
    };
    let counters = counters.into_iter().enumerate().map(|(k, sets)| {
        slice(
            counters_slice_name(node, pname, k),
            ResourceSliceSpec {
                shared_counters: Some(sets),
                ..ResourceSliceSpec::default()
            },
        )
    });
    let devices = devices.into_iter().enumerate().map(|(k, devices)| {
        slice(
            devices_slice_name(node, pname, k),
            ResourceSliceSpec {
                devices: Some(devices),
                ..ResourceSliceSpec::default()
            },
        )
    });
    Ok(counters.chain(devices).collect())
}

/// `items` cut in order into runs of at most `size` (> 0).
fn chunks<T>(mut items: Vec<T>, size: usize) -> Vec<Vec<T>> {
    let mut out = Vec::with_capacity(items.len().div_ceil(size));
    while !items.is_empty() {
        let rest = items.split_off(size.min(items.len()));
        out.push(std::mem::replace(&mut items, rest));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::{
        build, consumed, device, inventory, partitioned_profile, profile, slices, LEFT_OUT,
    };
    use crate::slices::{slice_name, SliceError, MAX_DEVICES_PER_POOL};
    use std::collections::BTreeSet;

    #[test]
    fn the_slice_holds_the_healthy_devices_with_their_attributes() {
        let inv = inventory(vec![
            device("GPU-A", 0, Some(1), true),
            device("GPU-B", 1, None, false),
            device("GPU-C", 2, None, true),
        ]);
        let slice = build("node-a", &profile(), &inv, 7, LEFT_OUT).unwrap();
        let spec = &slice.spec;
        assert_eq!(spec.driver, "devinject.io");
        assert_eq!(spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(
            spec.pool,
            ResourcePool {
                name: "node-a/demo".into(),
                generation: 7,
                resource_slice_count: 1,
            }
        );
        let devices = spec.devices.as_ref().unwrap();
        let names: Vec<_> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            ["demo-gpu-a", "demo-gpu-c"],
            "the unhealthy device is left out"
        );
        let a = devices[0].attributes.as_ref().unwrap();
        assert_eq!(a["profile"].string.as_deref(), Some("demo"));
        assert_eq!(a["id"].string.as_deref(), Some("GPU-A"));
        assert_eq!(a["index"].int, Some(0));
        assert_eq!(a["numaNode"].int, Some(1));
        let c = devices[1].attributes.as_ref().unwrap();
        assert_eq!(c["index"].int, Some(2));
        assert!(
            !c.contains_key("numaNode"),
            "unknown NUMA node is not published"
        );
        assert_eq!(c.len(), 3);
        assert_eq!(
            slice.metadata.name.as_deref(),
            Some(slice_name("node-a", "demo").as_str())
        );
        assert!(slice.metadata.owner_references.is_none());
    }

    /// The devices of each slice of `pool`, by slice name, checking that every slice names the
    /// pool's count and generation.
    fn devices_per_slice(pool: &[ResourceSlice]) -> Vec<(String, usize)> {
        for slice in pool {
            assert_eq!(slice.spec.pool.resource_slice_count as usize, pool.len());
            assert_eq!(slice.spec.pool.generation, pool[0].spec.pool.generation);
            assert_eq!(slice.spec.pool.name, pool[0].spec.pool.name);
        }
        pool.iter()
            .map(|s| {
                (
                    s.metadata.name.clone().unwrap(),
                    s.spec.devices.as_ref().map_or(0, Vec::len),
                )
            })
            .collect()
    }

    #[test]
    fn a_pool_larger_than_a_slice_is_cut_into_slices_up_to_a_bound() {
        let many = |n: usize| {
            inventory(
                (0..n)
                    .map(|i| device(&i.to_string(), i, None, true))
                    .collect(),
            )
        };
        let pool = |inv: &Inventory, fields| {
            resource_slices(
                "devinject.io",
                "n",
                &profile(),
                inv,
                1,
                fields,
                &DeviceState::default(),
            )
        };
        let fit = pool(&many(MAX_DEVICES_PER_SLICE), LEFT_OUT).unwrap();
        assert_eq!(
            devices_per_slice(&fit),
            [(slice_name("n", "demo"), MAX_DEVICES_PER_SLICE)]
        );
        let more = pool(&many(MAX_DEVICES_PER_SLICE + 1), LEFT_OUT).unwrap();
        assert_eq!(
            devices_per_slice(&more),
            [
                (devices_slice_name("n", "demo", 0), MAX_DEVICES_PER_SLICE),
                (devices_slice_name("n", "demo", 1), 1)
            ]
        );
        assert_ne!(
            devices_slice_name("n", "demo", 1),
            devices_slice_name("n", "demo-1", 0),
            "the second slice is apart from a profile demo-1's"
        );
        // Every device once, in discovery order.
        let names: Vec<String> = more
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
            .collect();
        let expected: Vec<String> = (0..=MAX_DEVICES_PER_SLICE)
            .map(|i| format!("demo-{i}"))
            .collect();
        assert_eq!(names, expected);
        // With a tainted device, slices hold 64: the unhealthy one stays, tainted.
        let mut sick = many(MAX_DEVICES_WITH_TAINTS + 1);
        sick.devices[3].healthy = false;
        let tainted = pool(&sick, ApiFields::ALL).unwrap();
        assert_eq!(
            devices_per_slice(&tainted)
                .into_iter()
                .map(|(_, n)| n)
                .collect::<Vec<_>>(),
            [MAX_DEVICES_WITH_TAINTS, 1]
        );
        assert!(tainted[0].spec.devices.as_ref().unwrap()[3]
            .taints
            .is_some());
        // Left out where the server drops taints: one slice of the healthy ones.
        let left_out = pool(&sick, LEFT_OUT).unwrap();
        assert_eq!(
            devices_per_slice(&left_out)[0].1,
            MAX_DEVICES_WITH_TAINTS,
            "the unhealthy one left out"
        );
        // Past the bound: refused, naming the fix.
        let err = pool(&many(MAX_DEVICES_PER_POOL + 1), LEFT_OUT).unwrap_err();
        assert!(
            matches!(
                err,
                SliceError::TooManyDevices {
                    count: 1025,
                    max: 1024,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err
            .to_string()
            .contains("narrow the profile's discovery.nodes"));
        assert_eq!(
            pool(&many(MAX_DEVICES_PER_POOL), LEFT_OUT).unwrap().len(),
            MAX_DEVICES_PER_POOL / MAX_DEVICES_PER_SLICE
        );
    }

    #[test]
    fn a_partitioned_pool_past_one_slice_has_more_counters_and_devices_slices() {
        let profile = partitioned_profile(4, "half = 2\nquarter = 1\n");
        let devices = |n: usize| {
            inventory(
                (0..n)
                    .map(|i| device(&i.to_string(), i, None, true))
                    .collect(),
            )
        };
        let sets = |slice: &ResourceSlice| -> Vec<String> {
            slice
                .spec
                .shared_counters
                .iter()
                .flatten()
                .map(|s| s.name.clone())
                .collect()
        };
        // Eight devices: one counters' slice of eight sets, and 8 x 7 = 56 devices in one.
        let eight = slices(&profile, &devices(MAX_COUNTER_SETS), ApiFields::ALL).unwrap();
        assert_eq!(eight.len(), 2);
        assert_eq!(sets(&eight[0]).len(), MAX_COUNTER_SETS);
        assert_eq!(eight[1].spec.devices.as_ref().unwrap().len(), 56);
        // Ten: ten sets in two counters' slices, 70 devices in two devices' slices, the pool
        // four slices, the counters first.
        let ten = slices(&profile, &devices(10), ApiFields::ALL).unwrap();
        let names: Vec<_> = ten
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                counters_slice_name("node-a", "demo", 0),
                counters_slice_name("node-a", "demo", 1),
                devices_slice_name("node-a", "demo", 0),
                devices_slice_name("node-a", "demo", 1),
            ]
        );
        assert_eq!(
            names.iter().collect::<BTreeSet<_>>().len(),
            4,
            "distinct names"
        );
        let per_slice: Vec<usize> = devices_per_slice(&ten)
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        assert_eq!(per_slice, [0, 0, MAX_DEVICES_WITH_TAINTS, 6]);
        assert_eq!(sets(&ten[0]).len(), MAX_COUNTER_SETS);
        assert_eq!(sets(&ten[1]), ["demo-8", "demo-9"]);
        for slice in &ten[2..] {
            assert_eq!(
                slice.spec.shared_counters, None,
                "devices or counters, never both"
            );
        }
        // Every device consumes a set the pool holds, and each set is its own device's.
        let held: BTreeSet<String> = ten.iter().flat_map(sets).collect();
        assert_eq!(held.len(), 10);
        for slice in &ten[2..] {
            for (name, (set, _)) in consumed(slice) {
                assert!(
                    held.contains(&set),
                    "{name} consumes {set}, which the pool holds"
                );
                let device = name.split('-').nth(1).unwrap();
                assert_eq!(set, format!("demo-{device}"), "{name}");
            }
        }
        // 32 units in halves to single units: 63 devices per device, so two devices' 126
        // take two slices.
        let fine = partitioned_profile(32, "a = 1\nb = 2\nc = 4\nd = 8\ne = 16\n");
        let two = slices(&fine, &devices(2), ApiFields::ALL).unwrap();
        assert_eq!(
            devices_per_slice(&two)
                .into_iter()
                .map(|(_, n)| n)
                .collect::<Vec<_>>(),
            [0, 64, 62]
        );
        // Past the bound: refused, naming the fix.
        let err = slices(&fine, &devices(17), ApiFields::ALL).unwrap_err();
        assert!(
            matches!(err, SliceError::TooManyDevices { count: 1071, .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("drop a shape from [partitions.shapes]"),
            "{err}"
        );
        // Gate off: the whole devices alone, one slice.
        let off = ApiFields {
            partitionable_devices: false,
            ..ApiFields::ALL
        };
        let whole = slices(&fine, &devices(17), off).unwrap();
        assert_eq!(devices_per_slice(&whole)[0].1, 17);
        assert_eq!(whole.len(), 1);
    }

    #[test]
    fn chunks_cuts_in_order_into_runs_of_at_most_the_size() {
        assert_eq!(
            chunks(vec![1, 2, 3, 4, 5], 2),
            [vec![1, 2], vec![3, 4], vec![5]]
        );
        assert_eq!(chunks(vec![1, 2], 2), [vec![1, 2]]);
        assert_eq!(chunks(vec![1], 8), [vec![1]]);
        assert!(chunks(Vec::<u8>::new(), 3).is_empty());
    }

    #[test]
    fn a_pool_with_no_device_left_is_one_empty_slice() {
        let pool = resource_slices(
            "devinject.io",
            "n",
            &profile(),
            &inventory(vec![]),
            4,
            ApiFields::ALL,
            &DeviceState::default(),
        )
        .unwrap();
        assert_eq!(pool.len(), 1);
        assert_eq!(pool[0].metadata.name, Some(slice_name("n", "demo")));
        assert_eq!(pool[0].spec.devices, Some(Vec::new()));
        assert_eq!(pool[0].spec.pool.resource_slice_count, 1);
        assert_eq!(pool[0].spec.pool.generation, 4);
    }

    #[test]
    fn every_slice_of_a_pool_names_the_driver_node_and_pool() {
        let inv = inventory(
            (0..=MAX_DEVICES_PER_SLICE)
                .map(|i| device(&i.to_string(), i, None, true))
                .collect(),
        );
        let pool = resource_slices(
            "example.com",
            "node-b",
            &profile(),
            &inv,
            2,
            LEFT_OUT,
            &DeviceState::default(),
        )
        .unwrap();
        assert_eq!(pool.len(), 2);
        for slice in &pool {
            assert_eq!(slice.spec.driver, "example.com");
            assert_eq!(slice.spec.node_name.as_deref(), Some("node-b"));
            assert_eq!(slice.spec.pool.name, "node-b/demo");
            assert_eq!(slice.spec.pool.resource_slice_count, 2);
            assert_eq!(slice.spec.shared_counters, None);
        }
    }
}
