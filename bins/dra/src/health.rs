//! The resource-health stream (`v1.DRAResourceHealth`, and `v1alpha1.` for kubelets before 1.37:
//! KEP-4680): the kubelet opens it on the driver's socket and writes the health of each
//! allocated device into the status of the pods holding it
//! (`status.containerStatuses[].allocatedResourcesStatus`), so that a pod whose device failed
//! says so.
//!
//! The stream runs no discovery of its own: it reads what the slice publisher discovered
//! ([`Discovered`], a watch channel the publisher updates after each rescan, or each read of the
//! health attributes on its schedule, that changed something). Each stream sends the health of
//! every published device at once, then the devices whose health changed as soon as the
//! publisher saw it, and every [`REFRESH`] all of them again, well within the [`TIMEOUT`] after
//! which the kubelet would take a silent device's health for unknown. Health is the profile's
//! sysfs health attribute, as for the slice (where an unhealthy device stays, tainted, or is
//! left out where the API server drops device taints: [`crate::slices`]); a device that
//! disappears (unplugged) is reported unhealthy once, since pods may still hold it. A profile whose discovery fails keeps its last
//! inventory, so it reports nothing new until discovery works again. Devices are named as in
//! the slice, shares included ([`crate::slices::device_names`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use devinject_devices::{Inventory, ProfileSet};
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};
use tracing::{debug, info};

use crate::api::health_v1::dra_resource_health_server::{
    DraResourceHealth, DraResourceHealthServer,
};
use crate::api::health_v1::{
    DeviceHealth, DeviceIdentifier, HealthStatus, NodeWatchResourcesRequest,
    NodeWatchResourcesResponse,
};
use crate::api::health_v1alpha1;
use crate::naming;
use crate::slices::{device_names, every_published_id};

/// How often every device's health is sent again, changed or not.
pub const REFRESH: Duration = Duration::from_secs(20);
/// How long the kubelet trusts a device's last reported health (`health_check_timeout_seconds`).
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A device by pool and name, as the slice publishes it.
pub type DeviceKey = (String, String);

/// What is known of one device: healthy or not, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Whether the device is healthy.
    pub healthy: bool,
    /// Why not, when it is not.
    pub message: String,
}

/// The last inventory discovery found for each profile, by profile name.
pub type Discovered = Arc<BTreeMap<String, Inventory>>;

/// What the stream reports on.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    /// This node's name (the pools are `<node>/<profile>`).
    pub node: String,
    /// The profiles whose devices are published.
    pub profiles: ProfileSet,
    /// What the slice publisher discovered.
    pub discovered: watch::Receiver<Discovered>,
}

/// The health of every device in `discovered`, by pool and DRA device name.
pub fn observe(
    node: &str,
    profiles: &ProfileSet,
    discovered: &BTreeMap<String, Inventory>,
) -> BTreeMap<DeviceKey, Observation> {
    let mut now = BTreeMap::new();
    for profile in profiles.iter() {
        let Some(inventory) = discovered.get(profile.name.as_str()) else {
            continue;
        };
        // A naming conflict stops the publisher; nothing of such a profile is published.
        let Ok(names) = device_names(profile, inventory) else {
            continue;
        };
        let pool = naming::pool(node, profile.name.as_str());
        for device in &inventory.devices {
            let observation = Observation {
                healthy: device.healthy,
                message: if device.healthy {
                    String::new()
                } else {
                    format!(
                        "device {} of profile {} reports itself unhealthy (the profile's sysfs health attribute)",
                        device.id, profile.name
                    )
                },
            };
            for id in every_published_id(profile, device.id.as_str()) {
                if let Some(name) = names.name(&id) {
                    now.insert((pool.clone(), name.to_owned()), observation.clone());
                }
            }
        }
    }
    now
}

/// What to tell the kubelet going from `before` to `now`: every device whose health changed or
/// that is new, and, once, each device that disappeared, as unhealthy. With `all`, every device
/// of `now` (the refresh) as well as the disappeared ones.
pub fn changes(
    before: &BTreeMap<DeviceKey, Observation>,
    now: &BTreeMap<DeviceKey, Observation>,
    all: bool,
) -> Vec<(DeviceKey, Observation)> {
    let mut out: Vec<(DeviceKey, Observation)> = now
        .iter()
        .filter(|(k, v)| all || before.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.extend(
        before
            .iter()
            .filter(|(k, v)| !now.contains_key(*k) && v.healthy)
            .map(|(k, _)| {
                (
                    k.clone(),
                    Observation {
                        healthy: false,
                        message:
                            "the device is gone from the node (unplugged or its driver unloaded)"
                                .into(),
                    },
                )
            }),
    );
    out
}

/// `changes` as the stream's message.
fn response(changes: Vec<(DeviceKey, Observation)>) -> NodeWatchResourcesResponse {
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    NodeWatchResourcesResponse {
        devices: changes
            .into_iter()
            .map(|((pool_name, device_name), o)| DeviceHealth {
                device: Some(DeviceIdentifier {
                    pool_name,
                    device_name,
                }),
                health: if o.healthy {
                    HealthStatus::Healthy
                } else {
                    HealthStatus::Unhealthy
                } as i32,
                last_updated_time: at,
                health_check_timeout_seconds: i64::try_from(TIMEOUT.as_secs()).unwrap_or(60),
                message: o.message,
            })
            .collect(),
    }
}

/// The `DRAResourceHealth` service, v1.
#[derive(Debug, Clone)]
pub struct HealthService {
    config: Arc<HealthConfig>,
}

/// The same service under its v1alpha1 name, for kubelets before 1.37 and those that find only
/// that name advertised: [`HealthService`]'s stream, each message carried across as its bytes
/// (the two versions' messages are the same fields: `crate::api`'s tests pin both).
#[derive(Debug, Clone)]
pub struct HealthServiceV1Alpha1(HealthService);

impl HealthService {
    /// A service reporting the devices of `config`.
    pub fn new(config: HealthConfig) -> Self {
        Self {
            config: Arc::new(config),
        }
    }

    /// The v1 service, to serve beside the node service.
    pub fn server(self) -> DraResourceHealthServer<Self> {
        DraResourceHealthServer::new(self)
    }

    /// The v1alpha1 service, to serve beside the v1 one.
    pub fn server_v1alpha1(
        self,
    ) -> health_v1alpha1::dra_resource_health_server::DraResourceHealthServer<HealthServiceV1Alpha1>
    {
        health_v1alpha1::dra_resource_health_server::DraResourceHealthServer::new(
            HealthServiceV1Alpha1(self),
        )
    }

    /// The stream of one kubelet's watch.
    fn watch(
        &self,
        api: &'static str,
    ) -> ReceiverStream<Result<NodeWatchResourcesResponse, Status>> {
        info!(api, "{OPENED}");
        let (tx, rx) = mpsc::channel(4);
        let config = Arc::clone(&self.config);
        tokio::spawn(async move {
            let mut discovered = config.discovered.clone();
            let mut known = BTreeMap::new();
            let mut refresh = tokio::time::interval(REFRESH);
            loop {
                // The first tick is at once: a new stream hears of every device.
                let all = tokio::select! {
                    () = tx.closed() => break,
                    _ = refresh.tick() => true,
                    changed = discovered.changed() => {
                        if changed.is_err() {
                            break; // the publisher stopped, and the driver with it
                        }
                        false
                    }
                };
                let now = observe(
                    &config.node,
                    &config.profiles,
                    &discovered.borrow_and_update(),
                );
                let sent = changes(&known, &now, all);
                known = now;
                if sent.is_empty() {
                    continue;
                }
                debug!(devices = sent.len(), "sending device health");
                if tx.send(Ok(response(sent))).await.is_err() {
                    break;
                }
            }
            debug!("the health stream ended");
        });
        ReceiverStream::new(rx)
    }
}

/// What the driver logs when a kubelet opens the health stream, with the API version (`api`):
/// tests and operators look for it.
pub const OPENED: &str = "the kubelet opened the device health stream";

#[tonic::async_trait]
impl DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = ReceiverStream<Result<NodeWatchResourcesResponse, Status>>;

    async fn node_watch_resources(
        &self,
        _request: Request<NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        Ok(Response::new(self.watch(crate::api::HEALTH_V1)))
    }
}

/// A v1 message as its v1alpha1 twin, through its bytes.
fn to_v1alpha1(
    message: NodeWatchResourcesResponse,
) -> Result<health_v1alpha1::NodeWatchResourcesResponse, Status> {
    health_v1alpha1::NodeWatchResourcesResponse::decode(message.encode_to_vec().as_slice())
        .map_err(|e| Status::internal(format!("device health as v1alpha1: {e}")))
}

#[tonic::async_trait]
impl health_v1alpha1::dra_resource_health_server::DraResourceHealth for HealthServiceV1Alpha1 {
    type NodeWatchResourcesStream = std::pin::Pin<
        Box<
            dyn tokio_stream::Stream<
                    Item = Result<health_v1alpha1::NodeWatchResourcesResponse, Status>,
                > + Send,
        >,
    >;

    async fn node_watch_resources(
        &self,
        _request: Request<health_v1alpha1::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let stream = self
            .0
            .watch(crate::api::HEALTH_V1ALPHA1)
            .map(|item| item.and_then(to_v1alpha1));
        Ok(Response::new(Box::pin(stream)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use health_v1alpha1::dra_resource_health_server::DraResourceHealth as _;

    fn key(d: &str) -> DeviceKey {
        ("n/demo".into(), d.into())
    }

    fn ok() -> Observation {
        Observation {
            healthy: true,
            message: String::new(),
        }
    }

    fn bad() -> Observation {
        Observation {
            healthy: false,
            message: "sick".into(),
        }
    }

    /// The demo profile with two replicas per device, and discovery's find: device 0 healthy,
    /// device 1 not.
    fn demo() -> (ProfileSet, BTreeMap<String, Inventory>) {
        let profiles = ProfileSet::from_profiles(vec![devinject_devices::Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\nreplicas = 2\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n",
            std::path::Path::new("demo.toml"),
        )
        .unwrap()], std::path::Path::new("profiles"))
        .unwrap();
        let device = |id: &str, index, healthy| devinject_devices::Device {
            id: devinject_devices::DeviceId::new(id).unwrap(),
            index,
            name: format!("accel{index}"),
            nodes: Vec::new(),
            numa_node: None,
            healthy,
            attributes: Default::default(),
            aliases: Vec::new(),
        };
        let discovered = BTreeMap::from([(
            "demo".to_owned(),
            Inventory {
                withdrawn: Vec::new(),
                devices: vec![device("0", 0, true), device("1", 1, false)],
                control_nodes: Vec::new(),
            },
        )]);
        (profiles, discovered)
    }

    #[test]
    fn every_share_of_a_discovered_device_is_observed_under_its_slice_name() {
        let (profiles, discovered) = demo();
        let seen = observe("n", &profiles, &discovered);
        let names: Vec<_> = seen.keys().map(|(p, d)| format!("{p} {d}")).collect();
        assert_eq!(
            names,
            [
                "n/demo demo-0--0",
                "n/demo demo-0--1",
                "n/demo demo-1--0",
                "n/demo demo-1--1"
            ]
        );
        assert!(seen[&key("demo-0--1")].healthy);
        let sick = &seen[&key("demo-1--0")];
        assert!(!sick.healthy && sick.message.contains("device 1 of profile demo"));
        assert!(observe("n", &profiles, &BTreeMap::new()).is_empty());
    }

    #[test]
    fn only_changes_are_sent_but_a_refresh_sends_everything() {
        let before = BTreeMap::from([(key("demo-0"), ok()), (key("demo-1"), ok())]);
        let now = BTreeMap::from([(key("demo-0"), ok()), (key("demo-1"), bad())]);
        assert_eq!(changes(&before, &now, false), [(key("demo-1"), bad())]);
        assert_eq!(changes(&now, &now, false), []);
        assert_eq!(changes(&now, &now, true).len(), 2);
        assert_eq!(
            changes(&BTreeMap::new(), &now, false).len(),
            2,
            "a new stream hears of every device"
        );
    }

    #[test]
    fn a_device_that_disappears_is_reported_unhealthy_once() {
        let before = BTreeMap::from([(key("demo-0"), ok()), (key("demo-1"), ok())]);
        let now = BTreeMap::from([(key("demo-0"), ok())]);
        let sent = changes(&before, &now, false);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, key("demo-1"));
        assert!(!sent[0].1.healthy && sent[0].1.message.contains("gone"));
        assert_eq!(changes(&now, &now, true).len(), 1, "not again");
    }

    #[test]
    fn the_message_names_the_device_its_health_and_the_kubelets_timeout() {
        let r = response(vec![(key("demo-1"), bad())]);
        let d = &r.devices[0];
        assert_eq!(d.health, HealthStatus::Unhealthy as i32);
        let id = d.device.as_ref().unwrap();
        assert_eq!(
            (id.pool_name.as_str(), id.device_name.as_str()),
            ("n/demo", "demo-1")
        );
        assert_eq!(d.health_check_timeout_seconds, 60);
        assert!(d.last_updated_time > 1_700_000_000);
        assert_eq!(d.message, "sick");
    }

    /// Both versions of the service send the same first message: every device, its health and
    /// why, the v1alpha1 one carried across byte for byte.
    #[tokio::test]
    async fn the_v1_and_v1alpha1_streams_say_the_same() {
        let (profiles, discovered) = demo();
        let (_publisher, discovered) = watch::channel(Arc::new(discovered));
        let service = HealthService::new(HealthConfig {
            node: "n".into(),
            profiles,
            discovered,
        });
        let mut v1 = DraResourceHealth::node_watch_resources(
            &service,
            Request::new(NodeWatchResourcesRequest {}),
        )
        .await
        .unwrap()
        .into_inner();
        let first = v1.next().await.unwrap().unwrap();
        assert_eq!(first.devices.len(), 4, "{first:?}");
        let sick: Vec<_> = first
            .devices
            .iter()
            .filter(|d| d.health == HealthStatus::Unhealthy as i32)
            .map(|d| d.device.as_ref().unwrap().device_name.as_str())
            .collect();
        assert_eq!(sick, ["demo-1--0", "demo-1--1"]);
        let alpha = HealthServiceV1Alpha1(service);
        let mut v1alpha1 = alpha
            .node_watch_resources(Request::new(health_v1alpha1::NodeWatchResourcesRequest {}))
            .await
            .unwrap()
            .into_inner();
        let first_alpha = v1alpha1.next().await.unwrap().unwrap();
        let mut same = first.clone();
        // Sent a moment apart: the same second or the next.
        for (d, a) in same.devices.iter_mut().zip(&first_alpha.devices) {
            assert!((a.last_updated_time - d.last_updated_time).abs() <= 1);
            d.last_updated_time = a.last_updated_time;
        }
        assert_eq!(first_alpha.encode_to_vec(), same.encode_to_vec());
        assert_eq!(first_alpha.devices[2].message, first.devices[2].message);
        assert!(first_alpha.devices[2]
            .message
            .contains("device 1 of profile demo"));
    }
}
