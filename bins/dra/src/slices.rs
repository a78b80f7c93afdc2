//! What the driver publishes to the API server: one pool of ResourceSlices per profile and node
//! holding the profile's devices, and one DeviceClass per profile that selects them.
//!
//! # Layout
//! - One pool per node and profile ([`naming::pool`]), published as one slice
//!   (`resourceSliceCount: 1`) while its devices fit the API server's limit for one:
//!   [`MAX_DEVICES_PER_SLICE`], or [`MAX_DEVICES_WITH_TAINTS`] when one of them has a taint or
//!   consumes counters. A larger pool is cut into as many slices as it needs
//!   ([`devices_slice_name`]), each naming the pool's count, up to [`MAX_DEVICES_PER_POOL`].
//! - Each device is named by [`naming::DeviceNames`] (collisions are an error, never a merge)
//!   and carries the attributes `profile` (string), `id` (string, the profile's device id, what
//!   the device plugin advertises), `index` (int, the discovery index) and `numaNode` (int,
//!   when sysfs tells one), and the profile's `discovery.attributes_sysfs` (strings, e.g. a PCI
//!   `vendor`). The names are unqualified, so they take the driver's domain: a CEL
//!   selector reads `device.attributes["devinject.io"].profile`. A device on PCI also carries
//!   Kubernetes' standard attributes [`STD_PCIE_ROOT`] and [`STD_PCI_BUS_ID`], and one whose
//!   NUMA node is known [`STD_NUMA_NODE`], so claims can `matchAttribute` across drivers.
//! - A profile with a `[capacity]` ([`devinject_devices::capacity`]) publishes each device once
//!   with `allowMultipleAllocations` and that capacity (the `DRAConsumableCapacity` feature, on
//!   by default from Kubernetes 1.36): the scheduler allocates it to as many claims as the
//!   capacity holds, each consuming 1 unless it asks for more (the request policy's default and
//!   range, in whole units), and gives each allocation a share id.
//! - A profile that shares its devices by `replicas` = N > 1 instead (or where the API server
//!   drops consumable capacity) publishes each as N devices, one per share, named after the
//!   replica ids the device plugin advertises (`<id>::<n>`, see [`published_ids`]) and carrying
//!   the attribute `replica`; each share is allocated to one claim at a time, so N claims share
//!   the device, as N containers do through the plugin.
//! - An unhealthy device stays in the slice with a taint (the `DRADeviceTaints` feature, on by
//!   default from Kubernetes 1.36): key `<driver>/unhealthy`,
//!   value `health_sysfs` (what told it), and the effect the profile's
//!   `discovery.health_taint` names (`NoSchedule` unless it says `NoExecute`). The scheduler
//!   allocates it only to a claim that tolerates the taint; claims holding it keep it, or, for
//!   `NoExecute`, their pods are evicted. Where the API server drops taints (the gate off, as
//!   in 1.34 and 1.35; the publisher finds out from the slice it gets back, [`ApiFields`]),
//!   unhealthy devices are left out instead. A device that recovers loses its taint, or comes
//!   back.
//! - A profile with `[partitions]` ([`devinject_devices::partitions`]) publishes each device
//!   whole and as each partition its shapes allow (the `DRAPartitionableDevices` feature, on by
//!   default from Kubernetes 1.36): the device has a counter set of its own, named as the
//!   device, with one counter per unit, and each of its published devices consumes the units it
//!   covers, so the scheduler never allocates two that overlap. Counters and devices are never
//!   in one slice (1.35 on), so such a pool is one or more counters' slices of at most
//!   [`MAX_COUNTER_SETS`] sets ([`counters_slice_name`]) before its devices' slices. Where the
//!   API server drops counters, whole devices only.
//! - A device of a profile whose prepare step runs before binding (`[prepare]
//!   before_binding`) carries the binding condition [`PREPARED_CONDITION`] and the binding
//!   failure condition [`PREPARE_FAILED_CONDITION`] (the `DRADeviceBindingConditions` feature,
//!   on by default from Kubernetes 1.36): the scheduler binds a pod whose claim it allocated
//!   only once the driver has run the step and set the first in the claim's device status
//!   ([`crate::binding`]). A device whose step failed carries the taint
//!   `<driver>/prepare-failed` (`NoSchedule`) for a while ([`DeviceState`]), so that the pod,
//!   given back to the scheduler, goes to another device or node. Where the API server drops
//!   binding conditions, the step runs when the kubelet prepares the claim, as without the key.
//!
//! The caller sets the slice's owner reference (the node or the plugin's pod), bumps
//! `pool.generation` on a change, and uses [`same_content`] to skip updates that change nothing
//! but the generation.

use std::collections::{BTreeMap, BTreeSet};

use devinject_devices::{Inventory, Partitions, PciLocation, Profile};
use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, CapacityRequestPolicy, CapacityRequestPolicyRange, Counter, CounterSet,
    Device, DeviceAttribute, DeviceCapacity, DeviceClass, DeviceClassSpec,
    DeviceCounterConsumption, DeviceSelector, DeviceTaint, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tracing::debug;

use crate::naming::{self, DeviceNames, NamingError};

/// The most devices one ResourceSlice may hold (without taints or counters).
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// The most devices one ResourceSlice may hold when one of them has a taint or consumes
/// counters (the API's `ResourceSliceMaxDevicesWithAdvancedFeatures`).
pub const MAX_DEVICES_WITH_TAINTS: usize = 64;
/// The most devices the driver publishes in one pool (one profile on one node), shares and
/// partitions included: 16 slices of [`MAX_DEVICES_WITH_TAINTS`]. A bound on what one
/// profile's discovery makes the driver send, far above any node's devices.
pub const MAX_DEVICES_PER_POOL: usize = 16 * MAX_DEVICES_WITH_TAINTS;
/// The taint key of an unhealthy device, below the driver's name: `<driver>/unhealthy`.
pub const UNHEALTHY_TAINT: &str = "unhealthy";
/// The taint value of an unhealthy device: the profile key whose attribute told it.
pub const UNHEALTHY_TAINT_VALUE: &str = "health_sysfs";
/// The taint key of a device whose prepare step failed before binding, below the driver's
/// name: `<driver>/prepare-failed` (effect `NoSchedule`).
pub const PREPARE_FAILED_TAINT: &str = "prepare-failed";
/// The binding condition of a device whose profile prepares before binding: the driver sets
/// it `True` in the claim's device status once the prepare step succeeded.
pub const PREPARED_CONDITION: &str = "Prepared";
/// The binding failure condition of such a device: `True` once its prepare step failed.
pub const PREPARE_FAILED_CONDITION: &str = "PrepareFailed";

/// What the driver knows of a profile's devices beyond what discovery finds, by device id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// Where each device sits on the PCI bus ([`pci_locations`]); devices off PCI are absent.
    pub locations: BTreeMap<String, PciLocation>,
    /// The devices whose prepare step failed before binding a short while ago: tainted
    /// `<driver>/prepare-failed`, or left out where taints are dropped.
    pub prepare_failed: BTreeSet<String>,
}

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
/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// Attribute: the profile the device belongs to (string).
pub const ATTR_PROFILE: &str = "profile";
/// Attribute: the device's id in its profile (string).
pub const ATTR_ID: &str = "id";
/// Attribute: the device's discovery index (int).
pub const ATTR_INDEX: &str = "index";
/// Attribute: the device's NUMA node (int), when known.
pub const ATTR_NUMA_NODE: &str = "numaNode";
/// Kubernetes' standard attribute (k8s.io/dynamic-resource-allocation, `deviceattribute`): the
/// device's PCIe root complex, `pci<domain>:<bus>` (string), when it is on PCI.
pub const STD_PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
/// Kubernetes' standard attribute: the device's PCI function, `<domain>:<bus>:<dev>.<fn>`
/// (string), when it is on PCI.
pub const STD_PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// Kubernetes' standard attribute (1.37): the device's NUMA node (int), when known: the
/// profile's `numa_sysfs`, else its PCI function's `numa_node`.
pub const STD_NUMA_NODE: &str = "resource.kubernetes.io/numaNode";
/// Attribute: which share of a shared device this is (int, 0 to `replicas` - 1), on the
/// devices of a profile with `replicas` > 1 only.
pub const ATTR_REPLICA: &str = "replica";
/// Attribute: which shape of its device a partition is (string, a `[partitions.shapes]` name),
/// on the partitions of a profile with `[partitions]` only; the whole device carries none.
pub const ATTR_PARTITION: &str = "partition";
/// The counter of each unit of a partitioned device, `unit<n>`: each counts 1, and every
/// partition covering the unit consumes it (KEP-4815's shared counters).
pub const UNIT_COUNTER: &str = "unit";
/// The most counter sets one slice may hold (the API's `ResourceSliceMaxCounterSets`): one per
/// partitioned device, so a pool of more devices has more counters' slices.
pub const MAX_COUNTER_SETS: usize = 8;

/// The partitions `profile`'s devices are published with: its `[partitions]` where the API
/// server keeps them.
pub fn partitioned(profile: &Profile, fields: ApiFields) -> Option<&Partitions> {
    profile
        .partitions
        .as_ref()
        .filter(|_| fields.partitionable_devices)
}

/// Whether `profile`'s devices are published once each for many claims (it has a
/// `[capacity]` and the API server keeps consumable capacity).
fn shared_by_capacity(profile: &Profile, fields: ApiFields) -> bool {
    profile.capacity.is_some() && fields.consumable_capacity
}

/// The ids device `id` of `profile` is published under: `id` itself and, where the profile
/// has `[partitions]` the server keeps, each partition's (`<id>@<shape><n>`); or, where the
/// profile shares its devices by `replicas` (> 1) and not by capacity, one replica id per share
/// (`<id>::<n>`, what the device plugin advertises), each a device of its own in the slice that
/// one claim at a time holds.
pub fn published_ids(profile: &Profile, id: &str, fields: ApiFields) -> Vec<String> {
    if let Some(partitions) = partitioned(profile, fields) {
        return std::iter::once(id.to_owned())
            .chain(partitions.all().iter().map(|p| p.id(id)))
            .collect();
    }
    if profile.replicas <= 1 || shared_by_capacity(profile, fields) {
        return vec![id.to_owned()];
    }
    (0..profile.replicas)
        .map(|n| devinject_devices::request::replica_id(id, n))
        .collect()
}

/// Every id device `id` of `profile` may be published under, whatever [`ApiFields`] the
/// publisher found: what claims allocated under either may name.
pub fn every_published_id(profile: &Profile, id: &str) -> Vec<String> {
    let mut ids = published_ids(profile, id, ApiFields::ALL);
    let without_capacity = ApiFields {
        consumable_capacity: false,
        ..ApiFields::ALL
    };
    for other in published_ids(profile, id, without_capacity) {
        if !ids.contains(&other) {
            ids.push(other);
        }
    }
    ids
}

/// The DRA names of every device of `profile` in `inventory`, shares included (see
/// [`every_published_id`]): healthy or not, so that a device's name does not depend on
/// another's health and a collision shows as soon as both exist.
pub fn device_names(profile: &Profile, inventory: &Inventory) -> Result<DeviceNames> {
    let ids: Vec<String> = inventory
        .devices
        .iter()
        .flat_map(|d| every_published_id(profile, d.id.as_str()))
        .collect();
    Ok(DeviceNames::new(
        profile.name.as_str(),
        ids.iter().map(String::as_str),
    )?)
}

/// Why a profile's devices cannot be published.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum SliceError {
    /// A device could not be given a DRA name.
    #[error(transparent)]
    Naming(#[from] NamingError),
    /// More devices, shares and partitions included, than the driver publishes in one pool.
    #[error("profile {profile} on node {node}: {count} devices to publish (each share and partition counts), more than the {max} the driver publishes for one profile and node: narrow the profile's discovery.nodes, or lower its replicas or drop a shape from [partitions.shapes]")]
    TooManyDevices {
        profile: String,
        node: String,
        /// How many devices there are to publish.
        count: usize,
        /// [`MAX_DEVICES_PER_POOL`].
        max: usize,
    },
}

/// A `Result` with a [`SliceError`].
pub type Result<T> = std::result::Result<T, SliceError>;

/// The name of the slice of `profile` on `node`: `<node>-<profile>-<hash>`, a DNS subdomain of
/// at most 253 characters. The hash (of the pool name) keeps it stable across restarts and
/// apart from another node's and profile's whose names join to the same text (`a-b` + `c` and
/// `a` + `b-c`).
pub fn slice_name(node: &str, profile: &str) -> String {
    let hash = format!(
        "{:08x}",
        fnv1a(naming::pool(node, profile).as_bytes()) as u32
    );
    let mut prefix = subdomain(&format!("{node}-{profile}"));
    let room = MAX_NAME - 1 - hash.len();
    if prefix.len() > room {
        prefix.truncate(room);
        prefix = prefix.trim_end_matches(['-', '.']).to_owned();
    }
    if prefix.is_empty() {
        hash
    } else {
        format!("{prefix}-{hash}")
    }
}

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

/// The devices `profile`'s pool on `node` publishes of `inventory` (see [`resource_slices`]):
/// unhealthy devices tainted, or left out where taints are dropped; shared by capacity or by
/// replicas; each with its partitions, consuming the units they cover; with the binding
/// conditions of a profile that prepares before binding.
fn published_devices(
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
    let sick = inventory
        .devices
        .iter()
        .filter(|d| !d.healthy || failed(d))
        .count();
    let tainted = fields.device_taints && sick > 0;
    let published: Vec<_> = inventory
        .devices
        .iter()
        .filter(|d| (d.healthy && !failed(d)) || tainted)
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
    if sick > 0 && !tainted {
        debug!(
            profile = pname,
            node,
            unhealthy = sick,
            "unhealthy devices left out of the slice"
        );
    }
    Ok(devices)
}

/// The name of the `k`th slice (from 0) of the devices of `profile`'s pool on `node`: the
/// first is [`slice_name`]'s, the others those of `<profile>/<k>`, apart from every profile's
/// (a profile name holds no `/`).
pub fn devices_slice_name(node: &str, profile: &str, k: usize) -> String {
    match k {
        0 => slice_name(node, profile),
        k => slice_name(node, &format!("{profile}/{k}")),
    }
}

/// The name of the `k`th slice (from 0) of the counters of `profile`'s partitioned devices on
/// `node`: those of `<profile>/counters` and `<profile>/counters/<k>`, apart from every
/// devices' slice.
pub fn counters_slice_name(node: &str, profile: &str, k: usize) -> String {
    match k {
        0 => slice_name(node, &format!("{profile}/counters")),
        k => slice_name(node, &format!("{profile}/counters/{k}")),
    }
}

/// The counter sets the whole devices of `devices` (what [`published_devices`] gives for a
/// profile with `partitions`) hold: one per device, named as the device, with one counter per
/// unit. Since Kubernetes 1.35 a slice holds counters or devices, never both
/// (pkg/apis/resource/validation: "only one of `sharedCounters` or `devices` is allowed"), and
/// a device may consume a set that another slice of its pool holds.
fn counter_sets(partitions: &Partitions, devices: &[Device]) -> Vec<CounterSet> {
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
fn unit_counter(u: u32) -> String {
    format!("{UNIT_COUNTER}{u}")
}

fn one_unit() -> Counter {
    Counter {
        value: Quantity("1".to_owned()),
    }
}

/// The attributes device `d` of `profile` carries, whatever share of it is published (see the
/// module docs); `location` is where it sits on the PCI bus, if it does.
pub fn device_attributes(
    profile: &Profile,
    d: &devinject_devices::Device,
    location: Option<&PciLocation>,
) -> BTreeMap<String, DeviceAttribute> {
    let mut attributes = BTreeMap::new();
    attributes.insert(ATTR_PROFILE.to_owned(), string(profile.name.as_str()));
    attributes.insert(ATTR_ID.to_owned(), string(d.id.as_str()));
    attributes.insert(
        ATTR_INDEX.to_owned(),
        int(i64::try_from(d.index).unwrap_or(i64::MAX)),
    );
    if let Some(numa) = d.numa_node {
        attributes.insert(ATTR_NUMA_NODE.to_owned(), int(numa));
    }
    if let Some(at) = location {
        attributes.insert(STD_PCIE_ROOT.to_owned(), string(&at.root));
        attributes.insert(STD_PCI_BUS_ID.to_owned(), string(&at.bus_id));
    }
    if let Some(numa) = d.numa_node.or(location.and_then(|at| at.numa_node)) {
        attributes.insert(STD_NUMA_NODE.to_owned(), int(numa));
    }
    for (name, value) in &d.attributes {
        attributes.insert(name.clone(), string(value));
    }
    attributes
}

/// Where each device of `inventory` sits on the PCI bus (its first node's), by device id;
/// devices off PCI are absent.
pub fn pci_locations(
    inventory: &Inventory,
    roots: &devinject_devices::HostRoots,
) -> BTreeMap<String, PciLocation> {
    inventory
        .devices
        .iter()
        .filter_map(|d| {
            let node = d.nodes.first()?;
            Some((
                d.id.as_str().to_owned(),
                devinject_discovery::pci_location(roots, node)?,
            ))
        })
        .collect()
}

/// The taint an unhealthy device of `profile` carries in `driver`'s slices: key
/// `<driver>/unhealthy`, value `health_sysfs`, the profile's `discovery.health_taint` effect.
pub fn unhealthy_taint(driver: &str, profile: &Profile) -> DeviceTaint {
    DeviceTaint {
        key: format!("{driver}/{UNHEALTHY_TAINT}"),
        value: Some(UNHEALTHY_TAINT_VALUE.to_owned()),
        effect: profile
            .discovery
            .health_taint
            .unwrap_or_default()
            .as_str()
            .to_owned(),
        time_added: None,
    }
}

/// The taint a device whose prepare step failed before binding carries in `driver`'s slices:
/// key `<driver>/prepare-failed`, effect `NoSchedule` (the pods holding it keep it).
pub fn prepare_failed_taint(driver: &str) -> DeviceTaint {
    DeviceTaint {
        key: format!("{driver}/{PREPARE_FAILED_TAINT}"),
        value: None,
        effect: "NoSchedule".to_owned(),
        time_added: None,
    }
}

/// A device's capacity as `[capacity]` states it: each claim consumes 1 unless its request
/// asks for more, in whole units, up to all of it.
fn device_capacity(capacity: &devinject_devices::Capacity) -> BTreeMap<String, DeviceCapacity> {
    let one = || Quantity("1".to_owned());
    BTreeMap::from([(
        capacity.name.clone(),
        DeviceCapacity {
            value: Quantity(capacity.value.to_string()),
            request_policy: Some(CapacityRequestPolicy {
                default: Some(one()),
                valid_range: Some(CapacityRequestPolicyRange {
                    min: one(),
                    step: Some(one()),
                    max: None,
                }),
                valid_values: None,
            }),
        },
    )])
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

/// The DeviceClass `<profile>.<driver>` (e.g. `demo.devinject.io`) that selects `profile`'s
/// devices of `driver`: what a ResourceClaim names in `deviceClassName`. Where the profile is
/// `partitioned`, it selects whole devices only (those without the attribute
/// [`ATTR_PARTITION`]), so that a claim asking for a device gets one, as through the device
/// plugin; [`partition_class`] selects the partitions.
///
/// With `extended_resource` (the profile's device-plugin resource, e.g. `devinject.io/demo`) the
/// class also serves pods that ask for that resource in their limits, unchanged (KEP-5004, beta
/// in 1.36): the scheduler makes them a claim of this class on nodes where no device plugin
/// advertises the resource, and leaves them to the device plugin where one does.
pub fn device_class(
    driver: &str,
    profile: &str,
    partitioned: bool,
    extended_resource: Option<&str>,
) -> DeviceClass {
    let mut expression = profile_selector(driver, profile);
    if partitioned {
        expression += &format!(" && !has(device.attributes[\"{driver}\"].{ATTR_PARTITION})");
    }
    class(format!("{profile}.{driver}"), expression, extended_resource)
}

/// The DeviceClass `partition.<profile>.<driver>` (e.g. `partition.demo.devinject.io`) that
/// selects the partitions of a partitioned `profile`'s devices; a claim picks a shape with a
/// selector on [`ATTR_PARTITION`].
pub fn partition_class(driver: &str, profile: &str) -> DeviceClass {
    class(
        format!("partition.{profile}.{driver}"),
        format!(
            "{} && has(device.attributes[\"{driver}\"].{ATTR_PARTITION})",
            profile_selector(driver, profile)
        ),
        None,
    )
}

/// The CEL clause every class of `profile` starts with: the devices `driver` publishes for it.
fn profile_selector(driver: &str, profile: &str) -> String {
    format!(
        "device.driver == \"{driver}\" && device.attributes[\"{driver}\"].{ATTR_PROFILE} == \"{profile}\""
    )
}

fn class(name: String, expression: String, extended_resource: Option<&str>) -> DeviceClass {
    DeviceClass {
        metadata: ObjectMeta {
            name: Some(name),
            ..ObjectMeta::default()
        },
        spec: DeviceClassSpec {
            selectors: Some(vec![DeviceSelector {
                cel: Some(CELDeviceSelector { expression }),
            }]),
            extended_resource_name: extended_resource.map(str::to_owned),
            ..DeviceClassSpec::default()
        },
    }
}

/// The DeviceClasses of every profile in `profiles` ([`device_class`], and [`partition_class`]
/// for a partitioned one), as one manifest of YAML documents (each a `---` line and the class
/// in JSON): what `devinject-dra device-classes` prints and
/// deploy/overlays/dra/deviceclasses.yaml ships. With `extended_resources`, each profile's
/// class maps its resource name.
pub fn device_classes_manifest(
    driver: &str,
    profiles: &devinject_devices::ProfileSet,
    extended_resources: bool,
) -> String {
    let mut out = String::new();
    for profile in profiles.iter() {
        let name = profile.name.as_str();
        let extended = extended_resources.then(|| profile.resource_name());
        let partitioned = profile.partitions.is_some();
        let mut classes = vec![device_class(driver, name, partitioned, extended)];
        if partitioned {
            classes.push(partition_class(driver, name));
        }
        for class in classes {
            out.push_str("---\n");
            // A DeviceClass is plain data: serialising it cannot fail.
            out.push_str(&serde_json::to_string_pretty(&class).unwrap_or_default());
            out.push('\n');
        }
    }
    out
}

fn string(s: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(s.to_owned()),
        ..DeviceAttribute::default()
    }
}

fn int(i: i64) -> DeviceAttribute {
    DeviceAttribute {
        int: Some(i),
        ..DeviceAttribute::default()
    }
}

/// `s` as a DNS subdomain: lower case, anything but `[a-z0-9.-]` as `-`, each dot-separated
/// label trimmed of `-` at its ends, empty labels dropped.
fn subdomain(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    mapped
        .split('.')
        .map(|label| label.trim_matches('-'))
        .filter(|label| !label.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// 64-bit FNV-1a: a hash that, unlike std's, is the same in every build and release.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use devinject_devices::{DeviceId, DeviceKind, DeviceNode};
    use std::path::{Path, PathBuf};

    #[test]
    fn the_shipped_device_classes_are_those_of_the_shipped_profiles() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let profiles =
            devinject_discovery::profile_dir::load(&repo.join("deploy/base/profiles")).unwrap();
        let shipped =
            std::fs::read_to_string(repo.join("deploy/overlays/dra/deviceclasses.yaml")).unwrap();
        let body: String = shipped
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            body,
            device_classes_manifest(crate::naming::DEFAULT_DRIVER, &profiles, true),
            "deploy/overlays/dra/deviceclasses.yaml is stale: run scripts/render-manifests.sh"
        );
    }

    /// What a 1.34 or 1.35 API server keeps of device taints: nothing.
    const LEFT_OUT: ApiFields = ApiFields {
        device_taints: false,
        ..ApiFields::ALL
    };

    /// The one slice of `pool`, a pool [`resource_slices`] published as one slice.
    fn only(pool: Result<Vec<ResourceSlice>>) -> Result<ResourceSlice> {
        let mut pool = pool?;
        assert_eq!(pool.len(), 1, "a pool of one slice");
        Ok(pool.remove(0))
    }

    /// The one slice of the pool [`resource_slices`] publishes for the driver `devinject.io`.
    fn build(
        node: &str,
        profile: &Profile,
        inventory: &Inventory,
        generation: i64,
        fields: ApiFields,
    ) -> Result<ResourceSlice> {
        only(resource_slices(
            "devinject.io",
            node,
            profile,
            inventory,
            generation,
            fields,
            &DeviceState::default(),
        ))
    }

    fn profile() -> Profile {
        Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n",
            Path::new("demo.toml"),
        )
        .unwrap()
    }

    fn device(
        id: &str,
        index: usize,
        numa: Option<i64>,
        healthy: bool,
    ) -> devinject_devices::Device {
        devinject_devices::Device {
            id: DeviceId::new(id).unwrap(),
            index,
            name: format!("accel{index}"),
            nodes: vec![DeviceNode {
                host_path: PathBuf::from(format!("/dev/demo/accel{index}")),
                container_path: PathBuf::from(format!("/dev/demo/accel{index}")),
                kind: DeviceKind::Char,
                major: 240,
                minor: index as u32,
                mode: 0o666,
                uid: 0,
                gid: 0,
            }],
            numa_node: numa,
            healthy,
            attributes: Default::default(),
            aliases: Vec::new(),
        }
    }

    fn inventory(devices: Vec<devinject_devices::Device>) -> Inventory {
        Inventory {
            withdrawn: Vec::new(),
            devices,
            control_nodes: vec![],
        }
    }

    /// Kubernetes' IsDNS1123Subdomain: at most 253 characters, no limit per label.
    fn is_subdomain(s: &str) -> bool {
        s.len() <= 253
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    }

    #[test]
    fn the_attributes_every_device_carries_are_those_profiles_may_not_name() {
        assert_eq!(
            devinject_devices::profile::DEVICE_ATTRIBUTES,
            [
                ATTR_PROFILE,
                ATTR_ID,
                ATTR_INDEX,
                ATTR_NUMA_NODE,
                ATTR_REPLICA,
                ATTR_PARTITION
            ]
        );
    }

    #[test]
    fn a_devices_sysfs_attributes_are_published_as_strings() {
        let mut d = device("GPU-A", 0, None, true);
        d.attributes.insert("vendor".into(), "0x1002".into());
        let slice = build("node-a", &profile(), &inventory(vec![d]), 1, LEFT_OUT).unwrap();
        let devices = slice.spec.devices.unwrap();
        let a = devices[0].attributes.as_ref().unwrap();
        assert_eq!(a["vendor"].string.as_deref(), Some("0x1002"));
        assert_eq!(a["id"].string.as_deref(), Some("GPU-A"));
    }

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

    #[test]
    fn attribute_names_are_c_identifiers_of_at_most_32_characters() {
        for name in [ATTR_PROFILE, ATTR_ID, ATTR_INDEX, ATTR_NUMA_NODE] {
            assert!(name.len() <= 32, "{name}");
            assert!(
                name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'),
                "{name}"
            );
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{name}"
            );
        }
    }

    #[test]
    fn colliding_device_names_are_an_error_even_when_one_is_unhealthy() {
        let inv = inventory(vec![
            device("a.b", 0, None, true),
            device("a_b", 1, None, false),
        ]);
        let err = build("n", &profile(), &inv, 1, LEFT_OUT).unwrap_err();
        assert!(
            matches!(err, SliceError::Naming(NamingError::Collision { .. })),
            "{err}"
        );
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
    fn slice_names_are_stable_distinct_dns_subdomains() {
        let a = slice_name("node-a", "demo");
        assert_eq!(a, slice_name("node-a", "demo"));
        assert!(
            a.starts_with("node-a-demo-") && a.len() == "node-a-demo-".len() + 8,
            "{a}"
        );
        assert_ne!(slice_name("a-b", "c"), slice_name("a", "b-c"));
        for (node, profile) in [
            ("node-a", "demo"),
            ("Worker_1.Example.COM", "kvm"),
            ("-.x.-", "demo"),
            (&"n".repeat(253), "demo"),
            (
                &format!("{}.{}", "a".repeat(240), "b".repeat(12)),
                "coral-edgetpu",
            ),
        ] {
            let name = slice_name(node, profile);
            assert!(is_subdomain(&name), "{node} {profile}: {name}");
        }
        assert!(slice_name("Worker_1.Example.COM", "kvm").starts_with("worker-1.example.com-kvm-"));
    }

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
    fn a_device_on_pci_carries_the_standard_attributes() {
        let inv = inventory(vec![
            device("0", 0, None, true),
            device("1", 1, Some(3), true),
            device("2", 2, None, true),
        ]);
        let at = |bus_id: &str, numa_node| PciLocation {
            root: "pci0000:40".into(),
            bus_id: bus_id.into(),
            numa_node,
        };
        let locations = BTreeMap::from([
            ("0".to_owned(), at("0000:41:00.0", Some(1))),
            ("1".to_owned(), at("0000:42:00.0", Some(0))),
        ]);
        let slice = only(resource_slices(
            "devinject.io",
            "n",
            &profile(),
            &inv,
            1,
            ApiFields::ALL,
            &DeviceState {
                locations,
                ..DeviceState::default()
            },
        ))
        .unwrap();
        let devices = slice.spec.devices.unwrap();
        let a = devices[0].attributes.as_ref().unwrap();
        assert_eq!(a[STD_PCIE_ROOT].string.as_deref(), Some("pci0000:40"));
        assert_eq!(a[STD_PCI_BUS_ID].string.as_deref(), Some("0000:41:00.0"));
        assert_eq!(a[STD_NUMA_NODE].int, Some(1), "the function's NUMA node");
        assert!(
            !a.contains_key(ATTR_NUMA_NODE),
            "the profile's own stays the profile's"
        );
        let b = devices[1].attributes.as_ref().unwrap();
        assert_eq!(
            b[STD_NUMA_NODE].int,
            Some(3),
            "the profile's NUMA node first"
        );
        assert_eq!(b[ATTR_NUMA_NODE].int, Some(3));
        let c = devices[2].attributes.as_ref().unwrap();
        for std in [STD_PCIE_ROOT, STD_PCI_BUS_ID, STD_NUMA_NODE] {
            assert!(!c.contains_key(std), "a device off PCI has no {std}");
        }
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

    fn partitioned_profile(units: u32, shapes: &str) -> Profile {
        Profile::parse(
            &format!(
                "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n\
                 [partitions]\nunits = {units}\nenv = \"DEMO_PARTITION\"\n[partitions.shapes]\n{shapes}"
            ),
            Path::new("demo.toml"),
        )
        .unwrap()
    }

    fn slices(profile: &Profile, inv: &Inventory, fields: ApiFields) -> Result<Vec<ResourceSlice>> {
        resource_slices(
            "devinject.io",
            "node-a",
            profile,
            inv,
            3,
            fields,
            &DeviceState::default(),
        )
    }

    /// The units (`unit<n>` counters of its own device's set) each device consumes, by name.
    fn consumed(slice: &ResourceSlice) -> BTreeMap<String, (String, Vec<String>)> {
        slice
            .spec
            .devices
            .iter()
            .flatten()
            .map(|d| {
                let c = d.consumes_counters.as_ref().expect("consumes counters");
                assert_eq!(c.len(), 1, "{}", d.name);
                (
                    d.name.clone(),
                    (
                        c[0].counter_set.clone(),
                        c[0].counters.keys().cloned().collect(),
                    ),
                )
            })
            .collect()
    }

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
    fn a_partitioned_profile_has_a_class_for_whole_devices_and_one_for_partitions() {
        let whole = device_class("devinject.io", "demo", true, Some("devinject.io/demo"));
        assert_eq!(whole.metadata.name.as_deref(), Some("demo.devinject.io"));
        assert!(whole.spec.selectors.as_ref().unwrap()[0]
            .cel
            .as_ref()
            .unwrap()
            .expression
            .ends_with(r#" && !has(device.attributes["devinject.io"].partition)"#));
        let parts = partition_class("devinject.io", "demo");
        assert_eq!(
            parts.metadata.name.as_deref(),
            Some("partition.demo.devinject.io")
        );
        assert_eq!(
            parts.spec.selectors.unwrap()[0]
                .cel
                .as_ref()
                .unwrap()
                .expression,
            r#"device.driver == "devinject.io" && device.attributes["devinject.io"].profile == "demo" && has(device.attributes["devinject.io"].partition)"#
        );
        assert_eq!(parts.spec.extended_resource_name, None);
    }

    #[test]
    fn the_device_class_selects_the_profile_by_driver_and_attribute() {
        let class = device_class("devinject.io", "demo", false, Some("devinject.io/demo"));
        assert_eq!(class.metadata.name.as_deref(), Some("demo.devinject.io"));
        assert_eq!(
            class.spec.extended_resource_name.as_deref(),
            Some("devinject.io/demo")
        );
        let plain = device_class("devinject.io", "demo", false, None);
        assert_eq!(plain.spec.extended_resource_name, None);
        let selectors = class.spec.selectors.unwrap();
        assert_eq!(selectors.len(), 1);
        assert_eq!(
            selectors[0].cel.as_ref().unwrap().expression,
            r#"device.driver == "devinject.io" && device.attributes["devinject.io"].profile == "demo""#
        );
    }
}
