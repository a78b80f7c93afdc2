//! The profiles, devices and pools the tests of the `slices` parts are built from: a demo
//! profile (plain, or partitioned), devices with a node each, and the pools
//! [`super::resource_slices`] publishes of them for the driver `devinject.io`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use devinject_devices::{DeviceId, DeviceKind, DeviceNode, Inventory, Profile};
use k8s_openapi::api::resource::v1::ResourceSlice;

use super::{resource_slices, ApiFields, DeviceState, Result};

/// What a 1.34 or 1.35 API server keeps of device taints: nothing.
pub(super) const LEFT_OUT: ApiFields = ApiFields {
    device_taints: false,
    ..ApiFields::ALL
};

/// The one slice of `pool`, a pool [`resource_slices`] published as one slice.
pub(super) fn only(pool: Result<Vec<ResourceSlice>>) -> Result<ResourceSlice> {
    let mut pool = pool?;
    assert_eq!(pool.len(), 1, "a pool of one slice");
    Ok(pool.remove(0))
}

/// The one slice of the pool [`resource_slices`] publishes for the driver `devinject.io`.
pub(super) fn build(
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

pub(super) fn profile() -> Profile {
    Profile::parse(
        "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n",
        Path::new("demo.toml"),
    )
    .unwrap()
}

pub(super) fn device(
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

pub(super) fn inventory(devices: Vec<devinject_devices::Device>) -> Inventory {
    Inventory {
        withdrawn: Vec::new(),
        devices,
        control_nodes: vec![],
    }
}

pub(super) fn partitioned_profile(units: u32, shapes: &str) -> Profile {
    Profile::parse(
        &format!(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n\
             [partitions]\nunits = {units}\nenv = \"DEMO_PARTITION\"\n[partitions.shapes]\n{shapes}"
        ),
        Path::new("demo.toml"),
    )
    .unwrap()
}

pub(super) fn slices(
    profile: &Profile,
    inv: &Inventory,
    fields: ApiFields,
) -> Result<Vec<ResourceSlice>> {
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
pub(super) fn consumed(slice: &ResourceSlice) -> BTreeMap<String, (String, Vec<String>)> {
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
