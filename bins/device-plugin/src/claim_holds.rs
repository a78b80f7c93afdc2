//! The devices prepared DRA claims hold, so that the plugin never gives a container a device
//! devinject's DRA driver prepared for a claim on the same node: the plugin reads the
//! kubelet's pod-resources `List` on a schedule and, for each exclusive profile it serves,
//! collects the devices the kubelet records for the claims of the driver's pool on this node
//! (`dynamic_resources`, KEP-3695). Those devices are listed unhealthy while held, so the
//! kubelet picks them for no new container, and `Allocate` refuses one the kubelet chose before
//! the plugin saw the claim (docs/dra.md, "From the device plugin to DRA").
//!
//! The kubelet records a claim from its prepare until its pods are gone, so the way back from
//! DRA to the device plugin keeps the claims' devices while their pods run. A profile whose
//! devices are shared (`replicas`, `[capacity]`) is left alone, as the DRA driver leaves it.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use devinject_devices::dra_names::{dra_device_name, dra_pool};
use devinject_devices::Profile;
use devinject_kubelet::pod_resources::poll::poll_list;
use devinject_kubelet::pod_resources::v1::PodResources;
use tokio::sync::{oneshot, watch};
use tracing::info;

use crate::advertisement::Advertisement;

/// Where to ask and which claims are devinject's on this node.
#[derive(Debug, Clone)]
pub struct ClaimHoldsConfig {
    /// The kubelet's pod-resources socket.
    pub socket: PathBuf,
    /// The DRA driver name devinject's driver publishes under.
    pub driver: String,
    /// This node's name, as its pools are named.
    pub node: String,
}

/// The devices of `profile` among `ids` that the claims of `pods` hold through `driver`'s pool
/// on `node`: device id → claim (`<namespace>/<name>`, the first listed). A partition stands
/// for its device. None for a profile whose devices are shared.
pub fn held_by_claims(
    pods: &[PodResources],
    config: &ClaimHoldsConfig,
    profile: &Profile,
    ids: &[&str],
) -> BTreeMap<String, String> {
    let mut held = BTreeMap::new();
    if !profile.exclusive() {
        return held;
    }
    let name = profile.name.as_str();
    let pool = dra_pool(&config.node, name);
    // Every name the driver may publish a device under: whole, and as each partition.
    let mut names: BTreeMap<String, &str> = BTreeMap::new();
    for &id in ids {
        let published = match &profile.partitions {
            Some(partitions) => partitions.published_ids(id),
            None => vec![id.to_owned()],
        };
        for published in published {
            if let Ok(device) = dra_device_name(name, &published) {
                names.insert(device, id);
            }
        }
    }
    let claims = pods
        .iter()
        .flat_map(|pod| &pod.containers)
        .flat_map(|container| &container.dynamic_resources);
    for claim in claims {
        for resource in &claim.claim_resources {
            if resource.driver_name != config.driver || resource.pool_name != pool {
                continue;
            }
            if let Some(id) = names.get(resource.device_name.as_str()) {
                held.entry((*id).to_owned())
                    .or_insert_with(|| format!("{}/{}", claim.claim_namespace, claim.claim_name));
            }
        }
    }
    held
}

/// Asks the kubelet every [`devinject_kubelet::pod_resources::poll::INTERVAL`] and marks on
/// each resource's advertisement the devices claims hold, until the daemon stops. A failed call
/// keeps the last answer. `first_call` is told (or dropped) once the first answer is marked or
/// the first call failed: the plugin registers only then, so that a plugin started on a node
/// whose claims hold its devices never offers them to the kubelet.
pub async fn poll(
    config: ClaimHoldsConfig,
    resources: Vec<(Profile, Arc<watch::Sender<Arc<Advertisement>>>)>,
    first_call: oneshot::Sender<()>,
) {
    let resources: Vec<_> = resources
        .into_iter()
        .filter(|(profile, _)| profile.exclusive())
        .collect();
    if resources.is_empty() {
        drop(first_call);
        return std::future::pending().await;
    }
    poll_list(config.socket.clone(), first_call, |pods| {
        for (profile, sender) in &resources {
            sender.send_if_modified(|current| {
                let ids: Vec<&str> = current.physical().iter().map(|d| d.id.as_str()).collect();
                let held = held_by_claims(pods, &config, profile, &ids);
                if current.claimed() == &held {
                    return false;
                }
                info!(resource = %profile.resource_name(), held = ?held, "devices held by DRA claims changed");
                *current = Arc::new(current.with_claimed(held));
                true
            });
        }
        ControlFlow::Continue(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config() -> ClaimHoldsConfig {
        ClaimHoldsConfig {
            socket: PathBuf::from("/nonexistent"),
            driver: "devinject.io".into(),
            node: "node-a".into(),
        }
    }

    /// A pod of the namespace `team` holding the prepared claim `claim`.
    fn claim_pod(claim: &str, held: &[(&str, &str, &str)]) -> PodResources {
        devinject_kubelet::pod_resources::testing::claim_pod("team", claim, held)
    }

    fn profile(top: &str, tables: &str) -> Profile {
        Profile::parse(
            &format!(
                "name = \"demo\"\nresource = \"devinject.io/demo\"\n{top}\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n{tables}"
            ),
            Path::new("demo.toml"),
        )
        .unwrap()
    }

    #[test]
    fn a_claims_device_in_this_nodes_pool_of_our_driver_is_held_by_that_claim() {
        let pods = [
            claim_pod("first", &[("devinject.io", "node-a/demo", "demo-1")]),
            claim_pod(
                "others",
                &[
                    ("example.com", "node-a/demo", "demo-2"),
                    ("devinject.io", "node-b/demo", "demo-3"),
                    ("devinject.io", "node-a/kvm", "demo-0"),
                    ("devinject.io", "node-a/demo", "demo-9"),
                ],
            ),
        ];
        let held = held_by_claims(&pods, &config(), &profile("", ""), &["0", "1", "2", "3"]);
        assert_eq!(
            held,
            BTreeMap::from([("1".to_owned(), "team/first".to_owned())]),
            "another driver's, another node's, another profile's pool and an unknown device hold nothing"
        );
    }

    #[test]
    fn a_partition_holds_its_device_and_a_shared_profile_holds_nothing() {
        let partitioned = profile(
            "",
            "[partitions]\nunits = 4\nenv = \"DEMO_PARTITION\"\n[partitions.shapes]\nhalf = 2\n",
        );
        let half = partitioned.partitions.as_ref().unwrap().all()[0].id("2");
        let device = dra_device_name("demo", &half).unwrap();
        let pods = [claim_pod(
            "part",
            &[("devinject.io", "node-a/demo", &device)],
        )];
        let held = held_by_claims(&pods, &config(), &partitioned, &["1", "2"]);
        assert_eq!(held.keys().collect::<Vec<_>>(), ["2"], "{device}");
        let pods = [claim_pod(
            "share",
            &[("devinject.io", "node-a/demo", "demo-1")],
        )];
        assert!(held_by_claims(&pods, &config(), &profile("replicas = 2", ""), &["1"]).is_empty());
    }
}
