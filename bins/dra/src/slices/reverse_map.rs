//! From the device name in a claim's allocation back to the device discovery found: every id a
//! device may be published under, whatever fields the API server kept when the claim was
//! allocated, named as the slices name it ([`crate::naming::DeviceNames`]), healthy or not, so
//! that a name never depends on another device's health and a collision shows as soon as both
//! devices exist. The driver prepares a claim through it, and the health stream reports
//! through it.

use devinject_devices::{Inventory, Profile};

use super::error::Result;
use super::field_probe::ApiFields;
use super::published_ids::published_ids;
use crate::naming::DeviceNames;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::NamingError;
    use crate::slices::fixtures::{
        build, device, inventory, partitioned_profile, profile, LEFT_OUT,
    };
    use crate::slices::SliceError;
    use std::path::Path;

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

    #[test]
    fn every_published_id_holds_the_ids_of_either_way_of_sharing() {
        let kvm = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\nreplicas = 2\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n[capacity]\npods = 3\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        assert_eq!(every_published_id(&kvm, "0"), ["0", "0::0", "0::1"]);
        assert_eq!(every_published_id(&profile(), "0"), ["0"]);
        assert_eq!(
            every_published_id(&partitioned_profile(2, "one = 1\n"), "7"),
            ["7", "7@one0", "7@one1"]
        );
    }

    #[test]
    fn a_name_maps_back_to_its_device_whatever_its_health_and_an_unknown_one_to_none() {
        let inv = inventory(vec![
            device("GPU-A", 0, None, true),
            device("GPU-B", 1, None, false),
        ]);
        let names = device_names(&profile(), &inv).unwrap();
        assert_eq!(names.id("demo-gpu-a"), Some("GPU-A"));
        assert_eq!(
            names.id("demo-gpu-b"),
            Some("GPU-B"),
            "unhealthy, still named"
        );
        assert_eq!(names.id("demo-gpu-c"), None);
        assert_eq!(names.id("other-gpu-a"), None, "another profile's name");
    }

    #[test]
    fn two_ids_of_one_name_are_refused_by_the_map_itself() {
        let inv = inventory(vec![
            device("a.b", 0, None, true),
            device("a_b", 1, None, true),
        ]);
        let err = device_names(&profile(), &inv).unwrap_err();
        assert!(
            matches!(err, SliceError::Naming(NamingError::Collision { .. })),
            "{err}"
        );
    }
}
