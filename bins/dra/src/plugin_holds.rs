//! The devices this node's running containers hold through devinject's device plugin, so that
//! the driver never hands out a device the plugin gave a container: the driver reads the
//! kubelet's pod-resources `List` on a schedule and, for each profile whose devices are
//! exclusive, collects the device ids the kubelet records for the profile's extended resource.
//!
//! The kubelet keeps a container's device-plugin grants in its own checkpoint for as long as
//! the pod exists, whether or not the plugin is still registered: while a node moves from the
//! device plugin to this driver, the pods started before keep their devices and pod-resources
//! keeps naming them (docs/dra.md, "From the device plugin to DRA"). A held device is published
//! with the taint `<driver>/device-plugin` (`NoSchedule`), or left out where the API server
//! drops taints, and a claim the scheduler gave it anyway (allocated before the driver saw the
//! hold) is not prepared until the holder ends: the kubelet retries the prepare, so the pod
//! waits.
//!
//! A profile whose devices are shared (`replicas` above 1, or a `[capacity]`) is left alone:
//! both paths may hand out its shares, as either one does by itself.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;

use devinject_devices::request::split_replica;
use devinject_devices::{Profile, ProfileSet};
use devinject_kubelet::pod_resources::poll::poll_list;
use devinject_kubelet::pod_resources::v1::PodResources;
use tokio::sync::{oneshot, watch};
use tracing::info;

/// The devices held through the device plugin: profile name → device id → who holds it
/// (`<namespace>/<pod>`, the first such pod the kubelet lists).
pub type PluginHolds = BTreeMap<String, BTreeMap<String, String>>;

/// The devices of `profiles`' exclusive profiles that the containers of `pods` hold through
/// the device plugin. A replica id (`<id>::<n>`) stands for its device; an id the profile
/// could not have advertised is kept as it is (it matches no device).
pub fn holds(pods: &[PodResources], profiles: &ProfileSet) -> PluginHolds {
    let by_resource: BTreeMap<&str, &Profile> = profiles
        .iter()
        .filter(|p| p.exclusive())
        .map(|p| (p.resource.as_str(), p))
        .collect();
    let mut held = PluginHolds::new();
    for pod in pods {
        for container in &pod.containers {
            for grant in &container.devices {
                let Some(profile) = by_resource.get(grant.resource_name.as_str()) else {
                    continue;
                };
                for id in &grant.device_ids {
                    let device = split_replica(id).map_or(id.as_str(), |(base, _)| base);
                    held.entry(profile.name.to_string())
                        .or_default()
                        .entry(device.to_owned())
                        .or_insert_with(|| format!("{}/{}", pod.namespace, pod.name));
                }
            }
        }
    }
    held
}

/// Asks the kubelet at `socket` every [`devinject_kubelet::pod_resources::poll::INTERVAL`] and
/// sends what `profiles`' exclusive devices are held by to `out`, until every receiver is gone
/// (noticed at the next answer). A failed call keeps the last answer; a node without the API
/// (or with no exclusive profile) holds nothing. `first_call` is told (or dropped) once the
/// first answer is in `out` or the first call failed: the driver publishes only then, so that a
/// driver started on a node whose pods hold the plugin's devices never offers them.
pub async fn poll(
    socket: PathBuf,
    profiles: ProfileSet,
    out: watch::Sender<PluginHolds>,
    first_call: oneshot::Sender<()>,
) {
    if !profiles.iter().any(Profile::exclusive) {
        return;
    }
    poll_list(socket, first_call, |pods| {
        if out.is_closed() {
            return ControlFlow::Break(());
        }
        let now = holds(pods, &profiles);
        out.send_if_modified(|known| {
            let changed = *known != now;
            if changed {
                info!(held = ?now, "devices held through the device plugin changed");
                *known = now;
            }
            changed
        });
        ControlFlow::Continue(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use devinject_kubelet::pod_resources::testing::pod;
    use std::collections::BTreeSet;
    use std::path::Path;

    /// The held devices of `profile` in `holds`, by id.
    fn of_profile<'a>(holds: &'a PluginHolds, profile: &str) -> BTreeSet<&'a str> {
        holds
            .get(profile)
            .map(|ids| ids.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    fn profiles(extra: &str) -> ProfileSet {
        let demo = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let shared = Profile::parse(
            &format!(
                "name = \"kvm\"\nresource = \"devinject.io/kvm\"\n{extra}\n[discovery]\nnodes = [\"kvm\"]\n"
            ),
            Path::new("kvm.toml"),
        )
        .unwrap();
        ProfileSet::from_profiles(vec![demo, shared], Path::new("profiles")).unwrap()
    }

    #[test]
    fn an_exclusive_profiles_granted_devices_are_held_by_the_first_pod_listed() {
        let pods = [
            pod(
                "team",
                "trainer",
                &[
                    ("main", &[("devinject.io/demo", &["accel1"])]),
                    ("side", &[("example.com/gpu", &["accel0"])]),
                ],
            ),
            pod(
                "team",
                "other",
                &[("main", &[("devinject.io/demo", &["accel1", "accel2"])])],
            ),
        ];
        let held = holds(&pods, &profiles("replicas = 1"));
        assert_eq!(
            held,
            PluginHolds::from([(
                "demo".into(),
                BTreeMap::from([
                    ("accel1".into(), "team/trainer".into()),
                    ("accel2".into(), "team/other".into()),
                ])
            )]),
            "another vendor's resource holds none of ours"
        );
        assert_eq!(
            of_profile(&held, "demo"),
            BTreeSet::from(["accel1", "accel2"])
        );
        assert!(of_profile(&held, "kvm").is_empty());
    }

    #[test]
    fn a_replica_stands_for_its_device_and_a_shared_profile_holds_nothing() {
        let pods = [pod(
            "ns",
            "p",
            &[(
                "main",
                &[
                    ("devinject.io/demo", &["accel0::1"]),
                    ("devinject.io/kvm", &["kvm::0"]),
                ],
            )],
        )];
        let held = holds(&pods, &profiles("replicas = 4"));
        assert_eq!(of_profile(&held, "demo"), BTreeSet::from(["accel0"]));
        assert!(!held.contains_key("kvm"), "{held:?}");
        assert!(!profiles("replicas = 4").get("kvm").unwrap().exclusive());
        assert!(profiles("replicas = 1").get("kvm").unwrap().exclusive());
        // The same grant on an exclusive kvm profile is held.
        let held = holds(&pods, &profiles("replicas = 1"));
        assert_eq!(of_profile(&held, "kvm"), BTreeSet::from(["kvm"]));
    }

    #[tokio::test]
    async fn while_the_kubelet_cannot_answer_the_last_holds_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = watch::channel(PluginHolds::from([(
            "demo".into(),
            BTreeMap::from([("accel0".into(), "a/b".into())]),
        )]));
        let (first_call, read) = oneshot::channel();
        let polling = tokio::spawn(poll(
            dir.path().join("kubelet.sock"),
            profiles("replicas = 1"),
            tx,
            first_call,
        ));
        // The driver goes on serving what it had once the first call failed.
        read.await.expect("the failed first call is told");
        assert!(!rx.has_changed().unwrap());
        assert_eq!(of_profile(&rx.borrow_and_update(), "demo").len(), 1);
        polling.abort();
    }
}
