//! Which of `resource.k8s.io/v1`'s newer slice fields the API server keeps. Each is behind a
//! feature gate (`DRADeviceTaints`, KEP-5055; `DRAConsumableCapacity`, KEP-5075;
//! `DRAPartitionableDevices`, KEP-4815; `DRADeviceBindingConditions`, KEP-5007), and a server
//! with the gate off drops the field from what it stores without an error: the publisher
//! compares the slice it applied with the one it got back and stops sending what was dropped.

use k8s_openapi::api::resource::v1::{Device, ResourceSliceSpec};

/// The fields of `resource.k8s.io/v1` past its GA core that slices carry while the API server
/// keeps them. Each is behind a feature gate that is on by default from Kubernetes 1.36; where
/// it is off (1.34, 1.35) the server drops the field from what it stores, silently. The
/// publisher starts with [`ApiFields::ALL`] and stops sending a field once a slice it gets back
/// lacks it ([`ApiFields::learn`]): sending it again would be a change at every round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiFields {
    /// Device taints (`DRADeviceTaints`): an unhealthy device stays in the slice, tainted;
    /// without them it is left out, so no claim can be allocated it.
    pub device_taints: bool,
    /// Consumable capacity (`DRAConsumableCapacity`): a device of a profile with `[capacity]`
    /// is published once for many claims; without it, as the profile's `replicas` say.
    pub consumable_capacity: bool,
    /// Partitionable devices (`DRAPartitionableDevices`): a profile with `[partitions]`
    /// publishes each device's partitions and their counters; without them, whole devices only.
    pub partitionable_devices: bool,
    /// Binding conditions (`DRADeviceBindingConditions`): a profile preparing before binding
    /// publishes its devices with them; without them, its prepare step runs at the kubelet's
    /// prepare.
    pub binding_conditions: bool,
}

impl ApiFields {
    /// Every field, as Kubernetes 1.36 and later keep them by default.
    pub const ALL: Self = Self {
        device_taints: true,
        consumable_capacity: true,
        partitionable_devices: true,
        binding_conditions: true,
    };

    /// Turns off each field `applied` carried that `returned` (the API server's answer to
    /// the apply) lacks, and returns the feature gates found off, for the log.
    pub fn learn(
        &mut self,
        applied: &ResourceSliceSpec,
        returned: &ResourceSliceSpec,
    ) -> Vec<&'static str> {
        let mut off = Vec::new();
        if self.device_taints && taints_dropped(applied, returned) {
            self.device_taints = false;
            off.push("DRADeviceTaints");
        }
        if self.consumable_capacity && sharing_dropped(applied, returned) {
            self.consumable_capacity = false;
            off.push("DRAConsumableCapacity");
        }
        if self.partitionable_devices && counters_dropped(applied, returned) {
            self.partitionable_devices = false;
            off.push("DRAPartitionableDevices");
        }
        if self.binding_conditions && binding_dropped(applied, returned) {
            self.binding_conditions = false;
            off.push("DRADeviceBindingConditions");
        }
        off
    }
}

/// Whether the API server dropped a field from `returned`, its answer to the apply of
/// `applied`: `count` finds it in `applied` and nowhere in `returned`. A field behind a gate
/// that is off is dropped silently, so this is how the publisher learns a gate is off.
fn dropped(
    applied: &ResourceSliceSpec,
    returned: &ResourceSliceSpec,
    count: impl Fn(&ResourceSliceSpec) -> usize,
) -> bool {
    count(applied) > 0 && count(returned) == 0
}

/// How many devices of `spec` `has` holds for.
fn devices_with(spec: &ResourceSliceSpec, has: impl Fn(&Device) -> bool) -> usize {
    spec.devices.iter().flatten().filter(|d| has(d)).count()
}

/// Whether the API server dropped the device taints of `applied` from `returned`, its answer to
/// the apply: it does so where `DRADeviceTaints` is off, and the publisher then leaves unhealthy
/// devices out instead.
pub fn taints_dropped(applied: &ResourceSliceSpec, returned: &ResourceSliceSpec) -> bool {
    dropped(applied, returned, |spec| {
        devices_with(spec, |d| d.taints.as_ref().is_some_and(|t| !t.is_empty()))
    })
}

/// Whether the API server dropped `allowMultipleAllocations` of `applied` from `returned`: it
/// does so where `DRAConsumableCapacity` is off, and the device would then go to one claim at a
/// time; the publisher shares by the profile's `replicas` instead.
pub fn sharing_dropped(applied: &ResourceSliceSpec, returned: &ResourceSliceSpec) -> bool {
    dropped(applied, returned, |spec| {
        devices_with(spec, |d| d.allow_multiple_allocations == Some(true))
    })
}

/// Whether the API server dropped the binding conditions of `applied` from `returned`: it does
/// so where `DRADeviceBindingConditions` is off (1.34, 1.35), and the profiles' prepare steps
/// then run at the kubelet's prepare.
pub fn binding_dropped(applied: &ResourceSliceSpec, returned: &ResourceSliceSpec) -> bool {
    dropped(applied, returned, |spec| {
        devices_with(spec, |d| {
            d.binding_conditions.as_ref().is_some_and(|c| !c.is_empty())
        })
    })
}

/// Whether the API server dropped the counters of `applied` from `returned`: the counter sets
/// of a counters' slice, or the consumption of a devices' slice. It does so where
/// `DRAPartitionableDevices` is off (1.34), and the publisher then publishes whole devices
/// only.
pub fn counters_dropped(applied: &ResourceSliceSpec, returned: &ResourceSliceSpec) -> bool {
    dropped(applied, returned, |spec| {
        spec.shared_counters.as_ref().map_or(0, Vec::len)
            + devices_with(spec, |d| {
                d.consumes_counters.as_ref().is_some_and(|c| !c.is_empty())
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::{build, device, inventory, partitioned_profile, profile, slices};
    use crate::slices::{same_content, slice_name};
    use devinject_devices::Profile;
    use std::path::Path;

    #[test]
    fn a_slice_whose_sharing_the_server_drops_turns_consumable_capacity_off() {
        let kvm = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n[capacity]\npods = 3\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let inv = inventory(vec![device("0", 0, None, true)]);
        let applied = build("n", &kvm, &inv, 1, ApiFields::ALL).unwrap().spec;
        let mut fields = ApiFields::ALL;
        assert!(fields.learn(&applied, &applied).is_empty());
        assert_eq!(fields, ApiFields::ALL);
        // What a server with the gate off stores: no allowMultipleAllocations, no policy.
        let mut dropped = applied.clone();
        for d in dropped.devices.iter_mut().flatten() {
            d.allow_multiple_allocations = None;
            for c in d.capacity.iter_mut().flat_map(|c| c.values_mut()) {
                c.request_policy = None;
            }
        }
        assert!(!same_content(&applied, &dropped));
        assert_eq!(fields.learn(&applied, &dropped), ["DRAConsumableCapacity"]);
        assert!(!fields.consumable_capacity && fields.device_taints);
        let again = build("n", &kvm, &inv, 2, fields).unwrap().spec;
        assert_eq!(
            again.devices.as_ref().unwrap()[0].allow_multiple_allocations,
            None
        );
        assert!(fields.learn(&again, &again).is_empty(), "learnt once");
    }

    #[test]
    fn a_slice_whose_taints_the_server_drops_is_told_apart_and_stamps_are_no_change() {
        let inv = inventory(vec![
            device("0", 0, None, true),
            device("1", 1, None, false),
        ]);
        let applied = build("n", &profile(), &inv, 1, ApiFields::ALL)
            .unwrap()
            .spec;
        let mut kept = applied.clone();
        kept.devices.as_mut().unwrap()[1].taints.as_mut().unwrap()[0].time_added = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        assert!(!taints_dropped(&applied, &kept));
        assert!(
            same_content(&applied, &kept),
            "the server's time stamp changes nothing"
        );
        let mut dropped = applied.clone();
        dropped.devices.as_mut().unwrap()[1].taints = None;
        assert!(taints_dropped(&applied, &dropped));
        assert!(!same_content(&applied, &dropped));
        let healthy = build(
            "n",
            &profile(),
            &inventory(vec![device("0", 0, None, true)]),
            1,
            ApiFields::ALL,
        )
        .unwrap()
        .spec;
        assert!(!taints_dropped(&healthy, &healthy), "nothing to drop");
    }

    #[test]
    fn a_server_that_drops_counters_gets_whole_devices_in_one_slice() {
        let profile = partitioned_profile(4, "half = 2\n");
        let inv = inventory(vec![device("0", 0, None, true)]);
        let pool = slices(&profile, &inv, ApiFields::ALL).unwrap();
        let mut fields = ApiFields::ALL;
        assert!(fields.learn(&pool[0].spec, &pool[0].spec).is_empty());
        assert!(fields.learn(&pool[1].spec, &pool[1].spec).is_empty());
        // What a 1.34 server stores: neither counter sets nor consumption.
        let mut dropped = pool[0].spec.clone();
        dropped.shared_counters = None;
        assert_eq!(
            fields.learn(&pool[0].spec, &dropped),
            ["DRAPartitionableDevices"]
        );
        assert!(
            !fields.partitionable_devices && fields.device_taints && fields.consumable_capacity
        );
        let mut fields = ApiFields::ALL;
        let mut dropped = pool[1].spec.clone();
        for d in dropped.devices.iter_mut().flatten() {
            d.consumes_counters = None;
        }
        assert_eq!(
            fields.learn(&pool[1].spec, &dropped),
            ["DRAPartitionableDevices"]
        );
        let pool = slices(&profile, &inv, fields).unwrap();
        assert_eq!(pool.len(), 1);
        let spec = &pool[0].spec;
        assert_eq!(spec.pool.resource_slice_count, 1);
        assert_eq!(
            pool[0].metadata.name.as_deref(),
            Some(slice_name("node-a", "demo").as_str())
        );
        let devices = spec.devices.as_ref().unwrap();
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].name, "demo-0");
        assert_eq!(devices[0].consumes_counters, None);
        // A profile without partitions: one slice, as before.
        let plain = slices(&super::tests::profile(), &inv, ApiFields::ALL).unwrap();
        assert_eq!(plain.len(), 1);
        assert_eq!(plain[0].spec.pool.resource_slice_count, 1);
    }

    /// A spec of `devices`, as a devices' slice carries them.
    fn spec(devices: Vec<Device>) -> ResourceSliceSpec {
        ResourceSliceSpec {
            devices: Some(devices),
            ..ResourceSliceSpec::default()
        }
    }

    fn tainted(name: &str) -> Device {
        Device {
            name: name.into(),
            taints: Some(vec![k8s_openapi::api::resource::v1::DeviceTaint {
                key: "devinject.io/unhealthy".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Device::default()
        }
    }

    #[test]
    fn a_field_that_was_not_sent_is_never_found_dropped() {
        let plain = spec(vec![Device {
            name: "demo-0".into(),
            ..Device::default()
        }]);
        let empty = ResourceSliceSpec::default();
        for returned in [&plain, &empty] {
            assert!(!taints_dropped(&plain, returned));
            assert!(!sharing_dropped(&plain, returned));
            assert!(!binding_dropped(&plain, returned));
            assert!(!counters_dropped(&plain, returned));
        }
        let mut fields = ApiFields::ALL;
        assert!(fields.learn(&plain, &empty).is_empty());
        assert_eq!(fields, ApiFields::ALL);
    }

    #[test]
    fn a_field_kept_on_one_device_of_several_is_not_dropped() {
        let applied = spec(vec![tainted("demo-0"), tainted("demo-1")]);
        let mut returned = applied.clone();
        returned.devices.as_mut().unwrap()[0].taints = Some(Vec::new());
        assert!(!taints_dropped(&applied, &returned));
        returned.devices.as_mut().unwrap()[1].taints = None;
        assert!(taints_dropped(&applied, &returned), "an empty list is none");
    }

    #[test]
    fn learn_turns_off_only_the_gates_whose_fields_went_missing_and_each_once() {
        let mut both = tainted("demo-0");
        both.binding_conditions = Some(vec!["Prepared".into()]);
        let applied = spec(vec![both]);
        let mut returned = applied.clone();
        returned.devices.as_mut().unwrap()[0].binding_conditions = None;
        let mut fields = ApiFields::ALL;
        assert_eq!(
            fields.learn(&applied, &returned),
            ["DRADeviceBindingConditions"]
        );
        assert_eq!(
            fields,
            ApiFields {
                binding_conditions: false,
                ..ApiFields::ALL
            }
        );
        assert!(
            fields.learn(&applied, &returned).is_empty(),
            "a gate found off is not reported again"
        );
    }

    #[test]
    fn counters_count_as_a_counters_slices_sets_and_as_a_devices_consumption() {
        let counters = ResourceSliceSpec {
            shared_counters: Some(vec![k8s_openapi::api::resource::v1::CounterSet {
                name: "demo-0".into(),
                counters: Default::default(),
            }]),
            ..ResourceSliceSpec::default()
        };
        assert!(!counters_dropped(&counters, &counters));
        let emptied = ResourceSliceSpec {
            shared_counters: Some(Vec::new()),
            ..ResourceSliceSpec::default()
        };
        assert!(counters_dropped(&counters, &emptied));
        let consuming = spec(vec![Device {
            name: "demo-0-half0".into(),
            consumes_counters: Some(vec![
                k8s_openapi::api::resource::v1::DeviceCounterConsumption {
                    counter_set: "demo-0".into(),
                    counters: Default::default(),
                },
            ]),
            ..Device::default()
        }]);
        let mut dropped = consuming.clone();
        dropped.devices.as_mut().unwrap()[0].consumes_counters = None;
        assert!(counters_dropped(&consuming, &dropped));
        assert!(!taints_dropped(&consuming, &dropped));
    }
}
