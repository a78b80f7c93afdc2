//! The resource-health stream (`v1alpha1.DRAResourceHealth`, KEP-4680): the kubelet opens it on
//! the driver's socket and writes the health of each allocated device into the status of the
//! pods holding it (`status.containerStatuses[].allocatedResourcesStatus`), so that a pod whose
//! device failed says so.
//!
//! Each stream sends the health of every published device at once, then, every
//! [`HealthConfig::rescan`] (the publisher's), the devices whose health changed, and every
//! [`REFRESH`] all of them again, well within the [`TIMEOUT`] after which the kubelet would take
//! a silent device's health for unknown. Health is the profile's sysfs health attribute, as for
//! the slice (an unhealthy device also leaves the slice); a device that disappears (unplugged)
//! is reported unhealthy once, since pods may still hold it. A profile whose discovery fails
//! reports nothing new until it works again. Devices are named as in the slice, shares
//! included ([`crate::slices::device_names`]).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use devinject_devices::{discover, HostRoots, ProfileSet};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::debug;

use crate::api::health_v1alpha1::dra_resource_health_server::{
    DraResourceHealth, DraResourceHealthServer,
};
use crate::api::health_v1alpha1::{
    DeviceHealth, DeviceIdentifier, HealthStatus, NodeWatchResourcesRequest,
    NodeWatchResourcesResponse,
};
use crate::naming;
use crate::slices::{device_names, published_ids};

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

/// Where the devices are, for the stream.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    /// This node's name (the pools are `<node>/<profile>`).
    pub node: String,
    /// The profiles whose devices are published.
    pub profiles: ProfileSet,
    /// Where device nodes and sysfs are.
    pub roots: HostRoots,
    /// How often health is read again.
    pub rescan: Duration,
}

/// The health of every device of `config`'s profiles now; a profile whose discovery fails keeps
/// what `before` knew of its pool.
pub fn observe(
    config: &HealthConfig,
    before: &BTreeMap<DeviceKey, Observation>,
) -> BTreeMap<DeviceKey, Observation> {
    let mut now = BTreeMap::new();
    for profile in config.profiles.iter() {
        let pool = naming::pool(&config.node, profile.name.as_str());
        let named = discover(profile, &config.roots).ok().and_then(|inventory| {
            let names = device_names(profile, &inventory).ok()?;
            Some((inventory, names))
        });
        let Some((inventory, names)) = named else {
            now.extend(
                before
                    .iter()
                    .filter(|((p, _), _)| *p == pool)
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            continue;
        };
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
            for id in published_ids(profile, device.id.as_str()) {
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

/// The `DRAResourceHealth` service.
#[derive(Debug, Clone)]
pub struct HealthService {
    config: std::sync::Arc<HealthConfig>,
}

impl HealthService {
    /// A service reporting the devices of `config`.
    pub fn new(config: HealthConfig) -> Self {
        Self {
            config: std::sync::Arc::new(config),
        }
    }

    /// The service, to serve beside the node service.
    pub fn server(self) -> DraResourceHealthServer<Self> {
        DraResourceHealthServer::new(self)
    }
}

#[tonic::async_trait]
impl DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = ReceiverStream<Result<NodeWatchResourcesResponse, Status>>;

    async fn node_watch_resources(
        &self,
        _request: Request<NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let config = std::sync::Arc::clone(&self.config);
        tokio::spawn(async move {
            let mut known = BTreeMap::new();
            let mut last_refresh: Option<tokio::time::Instant> = None;
            loop {
                let now = observe(&config, &known);
                let all = last_refresh.is_none_or(|t| t.elapsed() >= REFRESH);
                let changed = changes(&known, &now, all);
                if all {
                    last_refresh = Some(tokio::time::Instant::now());
                }
                if !changed.is_empty() {
                    debug!(devices = changed.len(), "sending device health");
                    if tx.send(Ok(response(changed))).await.is_err() {
                        break;
                    }
                }
                known = now;
                tokio::select! {
                    () = tx.closed() => break,
                    () = tokio::time::sleep(config.rescan) => {}
                }
            }
            debug!("the kubelet closed the health stream");
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
