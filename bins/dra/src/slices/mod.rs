//! What the driver publishes to the API server: one pool of ResourceSlices per profile and node
//! holding the profile's devices, and one DeviceClass per profile that selects them.
//!
//! # Layout
//! - One pool per node and profile ([`crate::naming::pool`]), published as one slice
//!   (`resourceSliceCount: 1`) while its devices fit the API server's limit for one:
//!   [`MAX_DEVICES_PER_SLICE`], or [`MAX_DEVICES_WITH_TAINTS`] when one of them has a taint or
//!   consumes counters. A larger pool is cut into as many slices as it needs
//!   ([`devices_slice_name`]), each naming the pool's count, up to [`MAX_DEVICES_PER_POOL`].
//! - Each device is named by [`crate::naming::DeviceNames`] (collisions are an error, never a
//!   merge) and carries the attributes `profile` (string), `id` (string, the profile's device id,
//!   what the device plugin advertises), `index` (int, the discovery index) and `numaNode` (int,
//!   when sysfs tells one), and the profile's `discovery.attributes_sysfs` (strings, e.g. a PCI
//!   `vendor`). The names are unqualified, so they take the driver's domain: a CEL selector reads
//!   `device.attributes["devinject.io"].profile`. A device on PCI also carries Kubernetes' standard
//!   attributes [`STD_PCIE_ROOT`] and [`STD_PCI_BUS_ID`], and one whose NUMA node is known
//!   [`STD_NUMA_NODE`], so claims can `matchAttribute` across drivers.
//! - A profile with a `[capacity]` ([`devinject_devices::capacity`]) publishes each device once
//!   with `allowMultipleAllocations` and that capacity (the `DRAConsumableCapacity` feature, on
//!   by default from Kubernetes 1.36): the scheduler allocates it to as many claims as the
//!   capacity holds, each consuming 1 unless it asks for more (the request policy's default and
//!   range, in whole units), and gives each allocation a share id.
//! - A profile that shares its devices by `replicas` = N > 1 instead (or where the API server
//!   drops consumable capacity) publishes each as N devices, one per share, named after the
//!   replica ids the device plugin advertises (`<id>::<n>`, see [`published_ids()`]) and carrying
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
//! - A device of an exclusive profile that a running container holds through devinject's
//!   device plugin carries the taint `<driver>/device-plugin` (`NoSchedule`, the value names
//!   the pod; [`crate::plugin_holds`]) until that pod ends, or is left out where taints are
//!   dropped: one node may serve a profile through both paths while it moves from one to the
//!   other, and no device goes to two containers.
//!
//! The caller sets the slice's owner reference (the node or the plugin's pod), bumps
//! `pool.generation` on a change, and uses [`same_content`] to skip updates that change nothing
//! but the generation.
//!
//! # Parts
//! [`resource_slices`] (`layout.rs`) cuts into slices the devices `devices.rs` publishes for a
//! pool: each device under the ids of `published_ids.rs`, with the attributes of
//! `attributes.rs`, the taints of `taints.rs`, the capacity of `capacity.rs` and the counters of
//! `counters.rs`, within the bounds of `limits.rs`, in slices named by `slice_names.rs`.
//! `field_probe.rs` learns which of these fields the API server keeps, `content.rs` tells a
//! changed slice from one with a new generation only, `reverse_map.rs` maps an allocated
//! device's name back to the device, and `device_classes.rs` writes the classes that select
//! the devices. No part imports one that imports it.

mod attributes;
mod capacity;
mod content;
mod counters;
mod device_classes;
mod devices;
mod error;
mod field_probe;
#[cfg(test)]
mod fixtures;
mod layout;
mod limits;
mod published_ids;
mod reverse_map;
mod slice_names;
mod taints;

pub use attributes::{
    device_attributes, pci_locations, ATTR_ID, ATTR_INDEX, ATTR_NUMA_NODE, ATTR_PARTITION,
    ATTR_PROFILE, ATTR_REPLICA, STD_NUMA_NODE, STD_PCIE_ROOT, STD_PCI_BUS_ID,
};
pub use content::same_content;
pub use counters::UNIT_COUNTER;
pub use device_classes::{device_class, device_classes_manifest, partition_class};
pub use devices::{DeviceState, PREPARED_CONDITION, PREPARE_FAILED_CONDITION};
pub use error::{Result, SliceError};
pub use field_probe::{
    binding_dropped, counters_dropped, sharing_dropped, taints_dropped, ApiFields,
};
pub use layout::resource_slices;
pub use limits::{
    MAX_COUNTER_SETS, MAX_DEVICES_PER_POOL, MAX_DEVICES_PER_SLICE, MAX_DEVICES_WITH_TAINTS,
};
pub use published_ids::{partitioned, published_ids};
pub use reverse_map::{device_names, every_published_id};
pub use slice_names::{counters_slice_name, devices_slice_name, slice_name};
pub use taints::{
    plugin_held_taint, prepare_failed_taint, unhealthy_taint, PLUGIN_HELD_TAINT,
    PREPARE_FAILED_TAINT, UNHEALTHY_TAINT, UNHEALTHY_TAINT_VALUE,
};
