//! The devices one pool publishes, before they are cut into slices: each discovered device under
//! each id it is published as, with its attributes, its taints (or left out where the API
//! server drops taints), its capacity or its replica, the units a partition consumes and, for a
//! profile that prepares before binding, the binding conditions the scheduler waits for
//! (KEP-5007, the `DRADeviceBindingConditions` feature).

use std::collections::{BTreeMap, BTreeSet};

use devinject_devices::{Inventory, PciLocation, Profile};
use k8s_openapi::api::resource::v1::{Device, DeviceCounterConsumption, DeviceTaint};
use tracing::debug;

use super::attributes::{device_attributes, int, string, ATTR_PARTITION, ATTR_REPLICA};
use super::capacity::device_capacity;
use super::counters::{one_unit, unit_counter};
use super::error::{Result, SliceError};
use super::field_probe::ApiFields;
use super::limits::MAX_DEVICES_PER_POOL;
use super::published_ids::{partitioned, published_ids, shared_by_capacity};
use super::reverse_map::device_names;
use super::taints::{plugin_held_taint, prepare_failed_taint, unhealthy_taint};
use crate::naming;

/// The binding condition of a device whose profile prepares before binding: the driver sets
/// it `True` in the claim's device status once the prepare step succeeded.
pub const PREPARED_CONDITION: &str = "Prepared";
/// The binding failure condition of such a device: `True` once its prepare step failed.
pub const PREPARE_FAILED_CONDITION: &str = "PrepareFailed";

/// What the driver knows of a profile's devices beyond what discovery finds, by device id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// Where each device sits on the PCI bus ([`super::pci_locations`]); devices off PCI are
    /// absent.
    pub locations: BTreeMap<String, PciLocation>,
    /// The devices whose prepare step failed before binding a short while ago: tainted
    /// `<driver>/prepare-failed`, or left out where taints are dropped.
    pub prepare_failed: BTreeSet<String>,
    /// The devices running containers hold through the device plugin, with the pod holding
    /// each ([`crate::plugin_holds`]): tainted `<driver>/device-plugin`, or left out where
    /// taints are dropped.
    pub plugin_held: BTreeMap<String, String>,
}

/// The devices `profile`'s pool on `node` publishes of `inventory` (see
/// [`super::resource_slices`]): unhealthy devices tainted, or left out where taints are
/// dropped; shared by capacity or by replicas; each with its partitions, consuming the units
/// they cover; with the binding conditions of a profile that prepares before binding.
pub(super) fn published_devices(
    driver: &str,
    node: &str,
    profile: &Profile,
    inventory: &Inventory,
    fields: ApiFields,
    state: &DeviceState,
) -> Result<Vec<Device>> {
    let pname = profile.name.as_str();
    device_names(profile, inventory)?;
    let capacity = profile
        .capacity
        .as_ref()
        .filter(|_| shared_by_capacity(profile, fields))
        .map(device_capacity);
    let partitions = partitioned(profile, fields);
    let shares = match partitions {
        Some(p) => p.published_per_device(),
        None if capacity.is_some() => 1,
        None => usize::try_from(profile.replicas.max(1)).unwrap_or(usize::MAX),
    };
    let failed = |d: &devinject_devices::Device| state.prepare_failed.contains(d.id.as_str());
    let held = |d: &devinject_devices::Device| state.plugin_held.get(d.id.as_str());
    let free = |d: &devinject_devices::Device| d.healthy && !failed(d) && held(d).is_none();
    let tainted = fields.device_taints && inventory.devices.iter().any(|d| !free(d));
    let published: Vec<_> = inventory
        .devices
        .iter()
        .filter(|d| free(d) || tainted)
        .collect();
    let binding =
        fields.binding_conditions && profile.prepare.as_ref().is_some_and(|p| p.before_binding);
    let count = published.len().saturating_mul(shares);
    if count > MAX_DEVICES_PER_POOL {
        return Err(SliceError::TooManyDevices {
            profile: pname.to_owned(),
            node: node.to_owned(),
            count,
            max: MAX_DEVICES_PER_POOL,
        });
    }
    let taint = unhealthy_taint(driver, profile);
    let failed_taint = prepare_failed_taint(driver);
    // What each of a device's published ids is, in [`published_ids`]' order: the device
    // itself, then each partition.
    let parts: Vec<Option<devinject_devices::Partition>> = partitions
        .map(|p| {
            std::iter::once(None)
                .chain(p.all().into_iter().map(Some))
                .collect()
        })
        .unwrap_or_default();
    let mut devices = Vec::with_capacity(count);
    for d in &published {
        let common = device_attributes(profile, d, state.locations.get(d.id.as_str()));
        let taints: Vec<DeviceTaint> = [
            (!d.healthy).then(|| taint.clone()),
            failed(d).then(|| failed_taint.clone()),
            held(d).map(|holder| plugin_held_taint(driver, holder)),
        ]
        .into_iter()
        .flatten()
        .collect();
        for (replica, id) in published_ids(profile, d.id.as_str(), fields)
            .iter()
            .enumerate()
        {
            let mut attributes = common.clone();
            let mut consumes = None;
            if let Some(partitions) = partitions {
                let set = naming::device(pname, d.id.as_str())?;
                let units = match parts.get(replica).and_then(Option::as_ref) {
                    Some(p) => {
                        attributes.insert(ATTR_PARTITION.to_owned(), string(&p.shape));
                        p.units()
                    }
                    None => 0..partitions.units,
                };
                consumes = Some(vec![DeviceCounterConsumption {
                    counter_set: set,
                    counters: units.map(|u| (unit_counter(u), one_unit())).collect(),
                }]);
            } else if shares > 1 {
                attributes.insert(
                    ATTR_REPLICA.to_owned(),
                    int(i64::try_from(replica).unwrap_or(i64::MAX)),
                );
            }
            devices.push(Device {
                name: naming::device(pname, id)?,
                attributes: Some(attributes),
                taints: (!taints.is_empty()).then(|| taints.clone()),
                binding_conditions: binding.then(|| vec![PREPARED_CONDITION.to_owned()]),
                binding_failure_conditions: binding
                    .then(|| vec![PREPARE_FAILED_CONDITION.to_owned()]),
                allow_multiple_allocations: capacity.is_some().then_some(true),
                capacity: capacity.clone(),
                consumes_counters: consumes,
                ..Device::default()
            });
        }
    }
    let left_out = inventory.devices.len() - published.len();
    if left_out > 0 {
        debug!(
            profile = pname,
            node, left_out, "unhealthy, failed or held devices left out of the slice"
        );
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::{build, device, inventory, only, profile, LEFT_OUT};
    use crate::slices::resource_slices;
    use std::path::Path;

    #[test]
    fn a_shared_profile_publishes_a_device_per_share_of_each_healthy_device() {
        let shared = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\nreplicas = 3\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let inv = inventory(vec![
            device("0", 0, None, true),
            device("1", 1, None, false),
        ]);
        let slice = build("node-a", &shared, &inv, 1, LEFT_OUT).unwrap();
        let devices = slice.spec.devices.unwrap();
        let names: Vec<_> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["demo-0--0", "demo-0--1", "demo-0--2"]);
        for (n, d) in devices.iter().enumerate() {
            let a = d.attributes.as_ref().unwrap();
            assert_eq!(a["id"].string.as_deref(), Some("0"), "the physical device");
            assert_eq!(a["replica"].int, Some(n as i64));
        }
        let names = device_names(&shared, &inv).unwrap();
        assert_eq!(
            names.id("demo-1--2"),
            Some("1::2"),
            "named even while unhealthy"
        );
        let plain = build("node-a", &profile(), &inv, 1, LEFT_OUT).unwrap();
        let devices = plain.spec.devices.unwrap();
        assert!(
            !devices[0]
                .attributes
                .as_ref()
                .unwrap()
                .contains_key("replica"),
            "no replica attribute where nothing is shared"
        );
    }

    #[test]
    fn a_profile_with_a_capacity_publishes_each_device_once_for_many_claims() {
        let kvm = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\nreplicas = 2\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n[capacity]\npods = 3\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let inv = inventory(vec![device("0", 0, None, true)]);
        let slice = build("node-a", &kvm, &inv, 1, ApiFields::ALL).unwrap();
        let devices = slice.spec.devices.unwrap();
        assert_eq!(devices.len(), 1, "once, not once per replica");
        let d = &devices[0];
        assert_eq!(d.name, "demo-0");
        assert_eq!(d.allow_multiple_allocations, Some(true));
        assert!(!d.attributes.as_ref().unwrap().contains_key("replica"));
        let pods = &d.capacity.as_ref().unwrap()["pods"];
        assert_eq!(pods.value.0, "3");
        let policy = pods.request_policy.as_ref().unwrap();
        assert_eq!(policy.default.as_ref().unwrap().0, "1", "a claim takes one");
        assert_eq!(policy.valid_range.as_ref().unwrap().min.0, "1");

        // Where the server drops consumable capacity, the replicas share the device.
        let without = ApiFields {
            consumable_capacity: false,
            ..ApiFields::ALL
        };
        let slice = build("node-a", &kvm, &inv, 1, without).unwrap();
        let devices = slice.spec.devices.unwrap();
        let names: Vec<_> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["demo-0--0", "demo-0--1"]);
        assert!(devices
            .iter()
            .all(|d| d.allow_multiple_allocations.is_none() && d.capacity.is_none()));
        // Claims allocated under either shape map back to the device.
        let names = device_names(&kvm, &inv).unwrap();
        assert_eq!(names.id("demo-0"), Some("0"));
        assert_eq!(names.id("demo-0--1"), Some("0::1"));
    }

    #[test]
    fn an_unhealthy_device_stays_in_the_slice_with_the_profiles_taint() {
        let inv = inventory(vec![
            device("GPU-A", 0, None, true),
            device("GPU-B", 1, None, false),
        ]);
        let slice = build("n", &profile(), &inv, 1, ApiFields::ALL).unwrap();
        let devices = slice.spec.devices.unwrap();
        let names: Vec<_> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["demo-gpu-a", "demo-gpu-b"], "both published");
        assert_eq!(devices[0].taints, None, "the healthy one untainted");
        let taints = devices[1].taints.as_ref().unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0].key, "devinject.io/unhealthy");
        assert_eq!(taints[0].value.as_deref(), Some("health_sysfs"));
        assert_eq!(taints[0].effect, "NoSchedule");

        let evicting = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n\
             health_sysfs = \"class/demo/{name}/health\"\nhealth_taint = \"NoExecute\"\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let slice = build("n", &evicting, &inv, 1, ApiFields::ALL).unwrap();
        let devices = slice.spec.devices.unwrap();
        assert_eq!(devices[1].taints.as_ref().unwrap()[0].effect, "NoExecute");
    }

    #[test]
    fn a_profile_preparing_before_binding_publishes_binding_conditions_and_failed_devices_tainted()
    {
        let binding = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n\
             [prepare]\ncommand = [\"/bin/program\"]\nbefore_binding = true\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let inv = inventory(vec![
            device("0", 0, None, true),
            device("1", 1, None, true),
            device("2", 2, None, false),
        ]);
        let state = DeviceState {
            prepare_failed: BTreeSet::from(["1".to_owned(), "2".to_owned()]),
            ..DeviceState::default()
        };
        let slice = |profile: &Profile, fields| {
            only(resource_slices(
                "devinject.io",
                "n",
                profile,
                &inv,
                1,
                fields,
                &state,
            ))
            .unwrap()
            .spec
        };
        let spec = slice(&binding, ApiFields::ALL);
        let devices = spec.devices.as_ref().unwrap();
        assert_eq!(devices.len(), 3, "failed devices stay, tainted");
        for d in devices {
            assert_eq!(
                d.binding_conditions.as_deref(),
                Some(&[PREPARED_CONDITION.to_owned()][..])
            );
            assert_eq!(
                d.binding_failure_conditions.as_deref(),
                Some(&[PREPARE_FAILED_CONDITION.to_owned()][..])
            );
        }
        let keys = |d: &Device| -> Vec<String> {
            d.taints.iter().flatten().map(|t| t.key.clone()).collect()
        };
        assert!(keys(&devices[0]).is_empty());
        assert_eq!(keys(&devices[1]), ["devinject.io/prepare-failed"]);
        assert_eq!(devices[1].taints.as_ref().unwrap()[0].effect, "NoSchedule");
        assert_eq!(
            keys(&devices[2]),
            ["devinject.io/unhealthy", "devinject.io/prepare-failed"]
        );

        // A profile that prepares at the kubelet's prepare has none.
        let plain = slice(&profile(), ApiFields::ALL);
        assert!(plain
            .devices
            .iter()
            .flatten()
            .all(|d| d.binding_conditions.is_none() && d.binding_failure_conditions.is_none()));

        // The server dropping them is told apart, and the next slice goes without.
        let mut fields = ApiFields::ALL;
        let mut returned = spec.clone();
        for d in returned.devices.iter_mut().flatten() {
            d.binding_conditions = None;
            d.binding_failure_conditions = None;
        }
        assert_eq!(
            fields.learn(&spec, &returned),
            ["DRADeviceBindingConditions"]
        );
        assert!(!fields
            .learn(&spec, &spec)
            .contains(&"DRADeviceBindingConditions"));
        let without = slice(&binding, fields);
        assert!(without
            .devices
            .iter()
            .flatten()
            .all(|d| d.binding_conditions.is_none()));

        // Without taints, a failed device is left out, as an unhealthy one is.
        let untainted = slice(&binding, LEFT_OUT);
        let names: Vec<_> = untainted
            .devices
            .iter()
            .flatten()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(names, ["demo-0"]);
    }

    #[test]
    fn a_pool_past_the_bound_is_refused_counting_each_share() {
        let shared = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\nreplicas = 4\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let many = |n: usize| {
            inventory(
                (0..n)
                    .map(|i| device(&i.to_string(), i, None, true))
                    .collect(),
            )
        };
        let publish = |inv: &Inventory| {
            published_devices(
                "devinject.io",
                "n",
                &shared,
                inv,
                LEFT_OUT,
                &DeviceState::default(),
            )
        };
        let fit = publish(&many(MAX_DEVICES_PER_POOL / 4)).unwrap();
        assert_eq!(fit.len(), MAX_DEVICES_PER_POOL);
        let err = publish(&many(MAX_DEVICES_PER_POOL / 4 + 1)).unwrap_err();
        assert!(
            matches!(
                err,
                SliceError::TooManyDevices { count, max, .. }
                    if count == MAX_DEVICES_PER_POOL + 4 && max == MAX_DEVICES_PER_POOL
            ),
            "{err}"
        );
    }

    #[test]
    fn a_device_left_out_while_taints_are_dropped_does_not_count_to_the_bound() {
        let mut inv = inventory(
            (0..=MAX_DEVICES_PER_POOL)
                .map(|i| device(&i.to_string(), i, None, true))
                .collect(),
        );
        inv.devices[0].healthy = false;
        let state = DeviceState::default();
        let left_out =
            published_devices("devinject.io", "n", &profile(), &inv, LEFT_OUT, &state).unwrap();
        assert_eq!(left_out.len(), MAX_DEVICES_PER_POOL);
        assert!(left_out.iter().all(|d| d.taints.is_none()));
        let tainted = published_devices(
            "devinject.io",
            "n",
            &profile(),
            &inv,
            ApiFields::ALL,
            &state,
        );
        assert!(matches!(tainted, Err(SliceError::TooManyDevices { .. })));
    }

    #[test]
    fn a_failed_devices_taint_goes_with_its_id_and_lifts_once_it_is_forgotten() {
        let inv = inventory(vec![device("0", 0, None, true), device("1", 1, None, true)]);
        let failed = DeviceState {
            prepare_failed: BTreeSet::from(["1".to_owned()]),
            ..DeviceState::default()
        };
        let keys = |state: &DeviceState| -> Vec<Vec<String>> {
            published_devices("devinject.io", "n", &profile(), &inv, ApiFields::ALL, state)
                .unwrap()
                .iter()
                .map(|d| d.taints.iter().flatten().map(|t| t.key.clone()).collect())
                .collect()
        };
        assert_eq!(
            keys(&failed),
            [vec![], vec!["devinject.io/prepare-failed".to_owned()]]
        );
        assert_eq!(
            keys(&DeviceState::default()),
            [Vec::<String>::new(), vec![]]
        );
    }

    #[test]
    fn a_device_held_through_the_plugin_is_tainted_with_its_pod_or_left_out_until_released() {
        let inv = inventory(vec![device("0", 0, None, true), device("1", 1, None, true)]);
        let held = DeviceState {
            plugin_held: BTreeMap::from([("1".to_owned(), "team/trainer".to_owned())]),
            ..DeviceState::default()
        };
        let taints = |state: &DeviceState, fields| -> Vec<(String, Vec<DeviceTaint>)> {
            published_devices("devinject.io", "n", &profile(), &inv, fields, state)
                .unwrap()
                .into_iter()
                .map(|d| (d.name, d.taints.unwrap_or_default()))
                .collect()
        };
        let published = taints(&held, ApiFields::ALL);
        assert_eq!(published.len(), 2, "{published:?}");
        assert!(published[0].1.is_empty());
        assert_eq!(
            published[1].1,
            [DeviceTaint {
                key: "devinject.io/device-plugin".into(),
                value: Some("team.trainer".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }]
        );
        // Where the API server drops taints, the held device is not published at all.
        let untainted = ApiFields {
            device_taints: false,
            ..ApiFields::ALL
        };
        let published = taints(&held, untainted);
        assert_eq!(published.len(), 1, "{published:?}");
        assert_eq!(published[0].0, naming::device("demo", "0").unwrap());
        // Released: both free again.
        let free = taints(&DeviceState::default(), ApiFields::ALL);
        assert!(free.iter().all(|(_, t)| t.is_empty()), "{free:?}");
    }
}
