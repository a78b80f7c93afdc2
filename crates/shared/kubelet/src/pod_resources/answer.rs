//! The answer about one container, from the kubelet's entries for its pod: what the policy
//! checks and `devinject-podresources` prints. Tested against the test kubelet
//! (`tests/tests/suite/podresources_helper.rs`).

use std::collections::BTreeMap;

use crate::answer::{Answer, PodEntry};

use crate::pod_resources::client::PodLookup;
use crate::pod_resources::v1::PodResources;

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
