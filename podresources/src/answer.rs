//! The helper's answer for one container, from the kubelet's entries for its pod.

use std::collections::BTreeMap;

use devinject_podresources_protocol::{Answer, PodEntry};

use crate::client::PodLookup;
use crate::v1::PodResources;

/// What `lookup` says about container `container`: per listed pod, its device ids by resource
/// name, or the containers listed instead.
pub fn for_container(lookup: &PodLookup, container: &str) -> Answer {
    Answer::new(
        lookup.answered_by,
        lookup
            .entries
            .iter()
            .map(|pod| entry(pod, container))
            .collect(),
    )
}

fn entry(pod: &PodResources, container: &str) -> PodEntry {
    let Some(c) = pod.containers.iter().find(|c| c.name == container) else {
        return PodEntry::Missing {
            listed: pod.containers.iter().map(|c| c.name.clone()).collect(),
        };
    };
    // The kubelet lists one entry per resource and NUMA placement: merge them.
    let mut devices: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in &c.devices {
        devices
            .entry(d.resource_name.clone())
            .or_default()
            .extend(d.device_ids.iter().cloned());
    }
    PodEntry::Found { devices }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::{ContainerDevices, ContainerResources};
    use crate::Rpc;

    fn container(name: &str, devices: &[(&str, &[&str])]) -> ContainerResources {
        ContainerResources {
            name: name.into(),
            devices: devices
                .iter()
                .map(|(r, ids)| ContainerDevices {
                    resource_name: (*r).into(),
                    device_ids: ids.iter().map(|i| (*i).to_owned()).collect(),
                    topology: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|i| (*i).to_owned()).collect()
    }

    #[test]
    fn merges_numa_entries_and_names_the_other_containers() {
        let pod = PodResources {
            name: "p".into(),
            namespace: "ns".into(),
            containers: vec![
                container("side", &[("a.io/x", &["9"])]),
                container(
                    "main",
                    &[("a.io/x", &["1"]), ("b.io/y", &["7"]), ("a.io/x", &["0"])],
                ),
            ],
        };
        let lookup = PodLookup {
            entries: vec![pod.clone(), pod],
            answered_by: Rpc::List,
        };
        let a = for_container(&lookup, "main");
        assert_eq!(a.answered_by, Rpc::List);
        let expected = PodEntry::Found {
            devices: [
                ("a.io/x".to_owned(), ids(&["1", "0"])),
                ("b.io/y".to_owned(), ids(&["7"])),
            ]
            .into(),
        };
        assert_eq!(a.pods, [expected.clone(), expected]);
        let a = for_container(&lookup, "init");
        assert_eq!(
            a.pods[0],
            PodEntry::Missing {
                listed: ids(&["side", "main"])
            }
        );
        let none = PodLookup {
            entries: vec![],
            answered_by: Rpc::Get,
        };
        assert!(for_container(&none, "main").pods.is_empty());
    }
}
