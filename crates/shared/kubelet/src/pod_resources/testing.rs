//! Pods as the kubelet reports them, built from plain values: for the tests of the hook's policy
//! and for the test kubelet.

use crate::pod_resources::v1::{
    ClaimResource, ContainerDevices, ContainerResources, DynamicResource, PodResources,
};

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

/// A pod whose one container `main` holds the prepared claim `namespace/claim`, as the kubelet
/// reports it (KEP-3695): the pod `<claim>-pod`, its devices `held` as (driver, pool, device).
pub fn claim_pod(namespace: &str, claim: &str, held: &[(&str, &str, &str)]) -> PodResources {
    PodResources {
        name: format!("{claim}-pod"),
        namespace: namespace.to_owned(),
        containers: vec![ContainerResources {
            name: "main".to_owned(),
            dynamic_resources: vec![DynamicResource {
                claim_name: claim.to_owned(),
                claim_namespace: namespace.to_owned(),
                claim_resources: held
                    .iter()
                    .map(|(driver, pool, device)| ClaimResource {
                        driver_name: (*driver).to_owned(),
                        pool_name: (*pool).to_owned(),
                        device_name: (*device).to_owned(),
                        ..Default::default()
                    })
                    .collect(),
            }],
            ..Default::default()
        }],
    }
}
