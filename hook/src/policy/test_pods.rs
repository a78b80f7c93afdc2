//! The kubelet's pod-resources answers, built for the policy's unit tests.

use devinject_podresources::v1::{ContainerDevices, ContainerResources, PodResources};

/// A container's grants: (resource, ids) pairs.
pub(crate) type Grants<'a> = &'a [(&'a str, &'a [&'a str])];

/// Pod `ns/name` with `containers`, each granted its devices.
pub(crate) fn pod(ns: &str, name: &str, containers: &[(&str, Grants<'_>)]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: containers
            .iter()
            .map(|(c, devices)| ContainerResources {
                name: (*c).into(),
                devices: devices
                    .iter()
                    .map(|(r, ids)| ContainerDevices {
                        resource_name: (*r).into(),
                        device_ids: ids.iter().map(|i| (*i).to_owned()).collect(),
                        topology: None,
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
    }
}
