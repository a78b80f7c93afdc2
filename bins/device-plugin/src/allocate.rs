//! The `Allocate` answer: which ids a container got, told to the runtime as env or annotations.
//!
//! The answer is a pure function of the request, the profile and the set of advertised ids: the
//! kubelet checkpoints it and replays it on container restarts and after its own restart without
//! calling the plugin again, so it must not carry state (no nonces, no timestamps, no pod
//! identity, which `Allocate` does not have). Ids are put in the advertised order, so the same
//! set always gives the same bytes. No device nodes or mounts are returned: the devinject
//! runtime shim, hook or the CDI runtime injects them from the profile.

use std::collections::BTreeMap;

use crate::advertisement::Advertisement;
use crate::api::v1beta1::{CdiDevice, ContainerAllocateResponse};
use crate::error::PluginError;
use crate::resource::{AllocateMode, ResourceConfig};

/// The answer for one container request (`index` is its position, for messages).
pub fn container_response(
    resource: &ResourceConfig,
    advertisement: &Advertisement,
    requested: &[String],
    index: usize,
) -> Result<ContainerAllocateResponse, PluginError> {
    if requested.is_empty() {
        return Err(PluginError::EmptyRequest {
            resource: resource.resource_name.clone(),
            index,
        });
    }
    let mut positions = Vec::with_capacity(requested.len());
    for id in requested {
        let position = advertisement
            .position(id)
            .ok_or_else(|| PluginError::UnknownDevice {
                resource: resource.resource_name.clone(),
                id: id.clone(),
            })?;
        let claimed = advertisement
            .device_of(id)
            .and_then(|device| advertisement.claimed_by(&device.id));
        if let Some(claim) = claimed {
            return Err(PluginError::HeldByClaim {
                resource: resource.resource_name.clone(),
                id: id.clone(),
                claim: claim.to_owned(),
            });
        }
        positions.push(position);
    }
    positions.sort_unstable();
    if let Some(pair) = positions.windows(2).find(|w| w[0] == w[1]) {
        return Err(PluginError::DuplicateDevice {
            resource: resource.resource_name.clone(),
            id: advertisement.ids()[pair[0]].id.clone(),
        });
    }
    let ids = advertisement.ids();
    let mut response = ContainerAllocateResponse::default();
    match resource.mode {
        AllocateMode::Envvar => {
            let list = join(positions.iter().map(|&p| ids[p].id.as_str()));
            response.envs = BTreeMap::from([(resource.request_env.clone(), list.clone())]);
            response.annotations = BTreeMap::from([(resource.request_annotation.clone(), list)]);
        }
        AllocateMode::CdiAnnotations => {
            let names = cdi_names(resource, advertisement, &positions);
            response.annotations =
                BTreeMap::from([(resource.cdi_annotation(), join(names.iter()))]);
        }
        AllocateMode::CdiCri => {
            response.cdi_devices = cdi_names(resource, advertisement, &positions)
                .into_iter()
                .map(|name| CdiDevice { name })
                .collect();
        }
    }
    Ok(response)
}

/// Fully qualified CDI names of the physical devices behind `positions`: replicas of one device
/// are one CDI device.
fn cdi_names(
    resource: &ResourceConfig,
    advertisement: &Advertisement,
    positions: &[usize],
) -> Vec<String> {
    let kind = resource.cdi_kind();
    let mut physical: Vec<usize> = positions
        .iter()
        .map(|&p| advertisement.ids()[p].physical)
        .collect();
    physical.dedup();
    physical
        .into_iter()
        .map(|i| format!("{kind}={}", advertisement.physical()[i].id))
        .collect()
}

fn join<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    let mut out = String::new();
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item.as_ref());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::ScannedDevice;
    use crate::resource::tests::demo;

    fn advertisement(replicas: u32) -> Advertisement {
        let scan: Vec<_> = ["0", "1", "2", "10"]
            .iter()
            .map(|id| ScannedDevice {
                id: (*id).into(),
                numa_node: None,
                healthy: true,
            })
            .collect();
        Advertisement::new(replicas).with_scan(&scan)
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn envvar_mode_sets_env_and_annotation_in_advertised_order() {
        let r = container_response(
            &demo(AllocateMode::Envvar, 1),
            &advertisement(1),
            &ids(&["10", "2"]),
            0,
        )
        .unwrap();
        assert_eq!(r.envs, map(&[("DEMO_VISIBLE_DEVICES", "2,10")]));
        assert_eq!(r.annotations, map(&[("devinject.io/demo.devices", "2,10")]));
        assert!(r.devices.is_empty() && r.mounts.is_empty() && r.cdi_devices.is_empty());
    }

    #[test]
    fn same_set_same_answer() {
        let resource = demo(AllocateMode::Envvar, 1);
        let ad = advertisement(1);
        let a = container_response(&resource, &ad, &ids(&["1", "0", "2"]), 0).unwrap();
        let b = container_response(&resource, &ad, &ids(&["2", "1", "0"]), 0).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn cdi_annotation_mode() {
        let r = container_response(
            &demo(AllocateMode::CdiAnnotations, 1),
            &advertisement(1),
            &ids(&["1", "0"]),
            0,
        )
        .unwrap();
        assert_eq!(
            r.annotations,
            map(&[(
                "cdi.k8s.io/devinject_demo",
                "devinject.io/demo=0,devinject.io/demo=1"
            )])
        );
        assert!(r.envs.is_empty() && r.cdi_devices.is_empty());
    }

    #[test]
    fn cdi_cri_mode_names_each_physical_device_once() {
        let r = container_response(
            &demo(AllocateMode::CdiCri, 2),
            &advertisement(2),
            &ids(&["1::1", "1::0", "0::1"]),
            0,
        )
        .unwrap();
        let names: Vec<_> = r.cdi_devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["devinject.io/demo=0", "devinject.io/demo=1"]);
        assert!(r.envs.is_empty() && r.annotations.is_empty());
    }

    #[test]
    fn replica_ids_are_passed_through_in_envvar_mode() {
        let r = container_response(
            &demo(AllocateMode::Envvar, 2),
            &advertisement(2),
            &ids(&["1::1", "0::0"]),
            0,
        )
        .unwrap();
        assert_eq!(r.envs, map(&[("DEMO_VISIBLE_DEVICES", "0::0,1::1")]));
    }

    #[test]
    fn a_device_a_dra_claim_holds_is_refused_naming_the_claim() {
        let resource = demo(AllocateMode::Envvar, 2);
        let ad = advertisement(2).with_claimed(map(&[("1", "team/c")]));
        let err = container_response(&resource, &ad, &ids(&["0::0", "1::1"]), 0).unwrap_err();
        assert_eq!(
            err,
            PluginError::HeldByClaim {
                resource: "devinject.io/demo".into(),
                id: "1::1".into(),
                claim: "team/c".into(),
            }
        );
        assert_eq!(err.reason(), "held_by_claim");
        assert!(container_response(&resource, &ad, &ids(&["0::1"]), 0).is_ok());
    }

    #[test]
    fn bad_requests() {
        let resource = demo(AllocateMode::Envvar, 1);
        let ad = advertisement(1);
        let cases: [(&[&str], PluginError); 4] = [
            (
                &["0", "7"],
                PluginError::UnknownDevice {
                    resource: "devinject.io/demo".into(),
                    id: "7".into(),
                },
            ),
            (
                &["0::0"],
                PluginError::UnknownDevice {
                    resource: "devinject.io/demo".into(),
                    id: "0::0".into(),
                },
            ),
            (
                &["1", "0", "1"],
                PluginError::DuplicateDevice {
                    resource: "devinject.io/demo".into(),
                    id: "1".into(),
                },
            ),
            (
                &[],
                PluginError::EmptyRequest {
                    resource: "devinject.io/demo".into(),
                    index: 3,
                },
            ),
        ];
        for (request, expected) in cases {
            let err = container_response(&resource, &ad, &ids(request), 3).unwrap_err();
            assert_eq!(err, expected, "{request:?}");
        }
    }
}
