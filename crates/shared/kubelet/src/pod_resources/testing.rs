//! Pods as the kubelet reports them, built from plain values: for the tests of the hook's policy
//! and for the test kubelet.

use crate::pod_resources::v1::{ContainerDevices, ContainerResources, PodResources};

/// One container's grants: (resource name, device ids) pairs.
pub type Grants<'a> = &'a [(&'a str, &'a [&'a str])];

/// A pod as the kubelet reports it: `pod("ns", "name", &[("main", &[("devinject.io/demo",
/// &["0", "1"])])])`.
pub fn pod(namespace: &str, name: &str, containers: &[(&str, Grants)]) -> PodResources {
    PodResources {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        containers: containers
            .iter()
            .map(|(container, grants)| ContainerResources {
                name: (*container).to_owned(),
                devices: grants
                    .iter()
                    .map(|(resource, ids)| ContainerDevices {
                        resource_name: (*resource).to_owned(),
                        device_ids: ids.iter().map(|i| (*i).to_owned()).collect(),
                        topology: None,
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
    }
}
