//! The DeviceClasses that select each profile's devices
//! (<https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/>):
//! `<profile>.<driver>` for whole devices and, for a partitioned profile,
//! `partition.<profile>.<driver>` for its partitions, each a CEL selector on the driver and the
//! `profile` attribute. With the profile's device-plugin resource name, the class also serves
//! pods that ask for that resource in their limits (KEP-5004, extended resources backed by
//! DRA).

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::attributes::{ATTR_PARTITION, ATTR_PROFILE};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::profile;
    use devinject_devices::Profile;
    use std::path::Path;

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

    #[test]
    fn the_manifest_has_a_class_per_profile_and_a_partition_class_for_a_partitioned_one() {
        let parts = Profile::parse(
            "name = \"parts\"\nresource = \"devinject.io/parts\"\n[discovery]\nnodes = [\"parts/accel[0-9]*\"]\n\
             [partitions]\nunits = 2\nenv = \"PARTS_PARTITION\"\n[partitions.shapes]\nhalf = 1\n",
            Path::new("parts.toml"),
        )
        .unwrap();
        let profiles = devinject_devices::ProfileSet::from_profiles(
            vec![profile(), parts],
            Path::new("profiles"),
        )
        .unwrap();
        let classes = |extended| -> Vec<(String, Option<String>)> {
            device_classes_manifest("devinject.io", &profiles, extended)
                .split("---\n")
                .filter(|doc| !doc.is_empty())
                .map(|doc| {
                    let class: DeviceClass = serde_json::from_str(doc).unwrap();
                    (
                        class.metadata.name.unwrap(),
                        class.spec.extended_resource_name,
                    )
                })
                .collect()
        };
        assert_eq!(
            classes(false),
            [
                ("demo.devinject.io".to_owned(), None),
                ("parts.devinject.io".to_owned(), None),
                ("partition.parts.devinject.io".to_owned(), None),
            ]
        );
        assert_eq!(
            classes(true),
            [
                (
                    "demo.devinject.io".to_owned(),
                    Some("devinject.io/demo".to_owned())
                ),
                (
                    "parts.devinject.io".to_owned(),
                    Some("devinject.io/parts".to_owned())
                ),
                ("partition.parts.devinject.io".to_owned(), None),
            ]
        );
    }
}
