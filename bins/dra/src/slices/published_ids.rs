//! Under which ids a discovered device is published: its own id once; once per share where
//! its profile shares it by `replicas` (`<id>::<n>`, the ids the device plugin advertises, each
//! held by one claim at a time); once for many claims where the profile has a `[capacity]` and
//! the API server keeps consumable capacity (KEP-5075); or whole and as each of its partitions
//! where the profile has `[partitions]` and the server keeps counters (KEP-4815,
//! `<id>@<shape><n>`).

use devinject_devices::{Partitions, Profile};

use super::field_probe::ApiFields;

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
pub(super) fn shared_by_capacity(profile: &Profile, fields: ApiFields) -> bool {
    profile.capacity.is_some() && fields.consumable_capacity
}

/// The ids device `id` of `profile` is published under: `id` itself and, where the profile
/// has `[partitions]` the server keeps, each partition's (`<id>@<shape><n>`); or, where the
/// profile shares its devices by `replicas` (> 1) and not by capacity, one replica id per share
/// (`<id>::<n>`, what the device plugin advertises), each a device of its own in the slice that
/// one claim at a time holds.
pub fn published_ids(profile: &Profile, id: &str, fields: ApiFields) -> Vec<String> {
    if let Some(partitions) = partitioned(profile, fields) {
        return partitions.published_ids(id);
    }
    if profile.replicas <= 1 || shared_by_capacity(profile, fields) {
        return vec![id.to_owned()];
    }
    (0..profile.replicas)
        .map(|n| devinject_devices::request::replica_id(id, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::{partitioned_profile, profile};
    use std::path::Path;

    fn shared(extra: &str) -> Profile {
        Profile::parse(
            &format!(
                "name = \"demo\"\nresource = \"devinject.io/demo\"\n{extra}[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n"
            ),
            Path::new("demo.toml"),
        )
        .unwrap()
    }

    #[test]
    fn a_device_not_shared_is_published_under_its_own_id() {
        assert_eq!(
            published_ids(&profile(), "GPU-A", ApiFields::ALL),
            ["GPU-A"]
        );
        assert_eq!(
            published_ids(&shared("replicas = 1\n"), "0", ApiFields::ALL),
            ["0"]
        );
    }

    #[test]
    fn replicas_publish_an_id_per_share_unless_a_capacity_the_server_keeps_shares_it() {
        assert_eq!(
            published_ids(&shared("replicas = 3\n"), "0", ApiFields::ALL),
            ["0::0", "0::1", "0::2"]
        );
        let kvm = shared("replicas = 2\n[capacity]\npods = 3\n");
        assert!(shared_by_capacity(&kvm, ApiFields::ALL));
        assert_eq!(published_ids(&kvm, "0", ApiFields::ALL), ["0"]);
        let without = ApiFields {
            consumable_capacity: false,
            ..ApiFields::ALL
        };
        assert!(!shared_by_capacity(&kvm, without));
        assert_eq!(published_ids(&kvm, "0", without), ["0::0", "0::1"]);
    }

    #[test]
    fn a_partitioned_device_is_published_whole_then_as_each_partition_while_counters_are_kept() {
        let parts = partitioned_profile(4, "half = 2\n");
        assert!(partitioned(&parts, ApiFields::ALL).is_some());
        assert_eq!(
            published_ids(&parts, "0", ApiFields::ALL),
            ["0", "0@half0", "0@half1"]
        );
        let off = ApiFields {
            partitionable_devices: false,
            ..ApiFields::ALL
        };
        assert!(partitioned(&parts, off).is_none());
        assert_eq!(published_ids(&parts, "0", off), ["0"]);
        assert!(partitioned(&profile(), ApiFields::ALL).is_none());
    }
}
