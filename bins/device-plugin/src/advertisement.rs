//! What the plugin advertises for one resource: every physical device ever seen, its health and
//! NUMA node, and the ids it is advertised as (several per device when it is shared).
//!
//! An [`Advertisement`] is immutable once built; the health monitor builds a new one on every
//! change and publishes it through a `tokio::sync::watch` channel, which `ListAndWatch`,
//! `Allocate` and `GetPreferredAllocation` read. A device that disappears stays listed as
//! unhealthy rather than vanishing: the kubelet keeps pods that hold it running, and only an empty
//! list withdraws devices (see `shared/reference/kubelet-and-runtimes.md`, section 2). A device
//! a prepared DRA claim holds ([`crate::claim_holds`]) is listed unhealthy too while it is held,
//! so the kubelet gives it to no new container.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use crate::api::v1beta1::{Device, ListAndWatchResponse, NumaNode, TopologyInfo};
use crate::api::{HEALTHY, UNHEALTHY};
use devinject_devices::request::replica_id;

/// What a device source reports for one present physical device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedDevice {
    /// The stable device id.
    pub id: String,
    /// The NUMA node the device is attached to, if the host says.
    pub numa_node: Option<i64>,
    /// False when a health signal (e.g. a sysfs attribute) says the device is broken.
    pub healthy: bool,
}

/// A physical device as tracked by the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalDevice {
    /// The stable device id.
    pub id: String,
    /// The NUMA node, if known.
    pub numa_node: Option<i64>,
    /// Present and not reported broken.
    pub healthy: bool,
}

/// One id as advertised to the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisedId {
    /// The id the kubelet sees: the device id, or `<id>::<n>` for a shared device (the syntax
    /// of [`devinject_devices::request`], which maps it back).
    pub id: String,
    /// Index of its physical device in [`Advertisement::physical`].
    pub physical: usize,
}

/// The device list of one resource at one moment.
#[derive(Debug, Clone, Default)]
pub struct Advertisement {
    physical: Vec<PhysicalDevice>,
    replicas: u32,
    ids: Vec<AdvertisedId>,
    by_id: HashMap<String, usize>,
    closing: bool,
    /// The devices prepared DRA claims hold, each with the claim (`<namespace>/<name>`).
    claimed: BTreeMap<String, String>,
}

impl PartialEq for Advertisement {
    fn eq(&self, other: &Self) -> bool {
        // `ids` and `by_id` are derived from the other fields.
        self.physical == other.physical
            && self.replicas == other.replicas
            && self.closing == other.closing
            && self.claimed == other.claimed
    }
}

impl Advertisement {
    /// An empty list for a resource whose devices are each advertised `replicas` times.
    pub fn new(replicas: u32) -> Self {
        Self {
            replicas: replicas.max(1),
            ..Self::default()
        }
    }

    /// The list after a scan: present devices take the scan's health and NUMA node, devices
    /// missing from the scan stay listed as unhealthy, new devices are added.
    pub fn with_scan(&self, scan: &[ScannedDevice]) -> Self {
        let mut physical = self.physical.clone();
        for known in &mut physical {
            known.healthy = false;
        }
        for found in scan {
            match physical.iter_mut().find(|p| p.id == found.id) {
                Some(known) => {
                    known.numa_node = found.numa_node;
                    known.healthy = found.healthy;
                }
                None => physical.push(PhysicalDevice {
                    id: found.id.clone(),
                    numa_node: found.numa_node,
                    healthy: found.healthy,
                }),
            }
        }
        physical.sort_by(|a, b| natural_cmp(&a.id, &b.id));
        Self {
            claimed: self.claimed.clone(),
            ..Self::build(physical, self.replicas, self.closing)
        }
    }

    /// The same devices, marked as withdrawn: `ListAndWatch` then sends an empty list.
    pub fn closed(&self) -> Self {
        Self {
            claimed: self.claimed.clone(),
            ..Self::build(self.physical.clone(), self.replicas, true)
        }
    }

    /// The same devices, with `claimed` (device id → claim) held by prepared DRA claims.
    pub fn with_claimed(&self, claimed: BTreeMap<String, String>) -> Self {
        Self {
            claimed,
            ..self.clone()
        }
    }

    /// The devices prepared DRA claims hold, each with the claim.
    pub fn claimed(&self) -> &BTreeMap<String, String> {
        &self.claimed
    }

    /// The claim that holds physical device `id` through DRA, if one does.
    pub fn claimed_by(&self, id: &str) -> Option<&str> {
        self.claimed.get(id).map(String::as_str)
    }

    fn build(physical: Vec<PhysicalDevice>, replicas: u32, closing: bool) -> Self {
        let mut ids = Vec::with_capacity(physical.len() * replicas as usize);
        for (index, device) in physical.iter().enumerate() {
            if replicas == 1 {
                ids.push(AdvertisedId {
                    id: device.id.clone(),
                    physical: index,
                });
            } else {
                ids.extend((0..replicas).map(|n| AdvertisedId {
                    id: replica_id(&device.id, n),
                    physical: index,
                }));
            }
        }
        let by_id = ids
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id.clone(), i))
            .collect();
        Self {
            physical,
            replicas,
            ids,
            by_id,
            closing,
            claimed: BTreeMap::new(),
        }
    }

    /// True once the plugin is stopping.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// The physical devices, in natural id order.
    pub fn physical(&self) -> &[PhysicalDevice] {
        &self.physical
    }

    /// The advertised ids, in natural order of their devices, replicas in order.
    pub fn ids(&self) -> &[AdvertisedId] {
        &self.ids
    }

    /// How many ids each physical device is advertised as.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// The position of an advertised id in [`Self::ids`].
    pub fn position(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// The physical device behind an advertised id.
    pub fn device_of(&self, id: &str) -> Option<&PhysicalDevice> {
        self.position(id)
            .map(|i| &self.physical[self.ids[i].physical])
    }

    /// The `ListAndWatch` message for this list: empty once closing.
    pub fn to_response(&self) -> ListAndWatchResponse {
        if self.closing {
            return ListAndWatchResponse::default();
        }
        let devices = self
            .ids
            .iter()
            .map(|a| {
                let device = &self.physical[a.physical];
                let usable = device.healthy && !self.claimed.contains_key(&device.id);
                Device {
                    id: a.id.clone(),
                    health: if usable { HEALTHY } else { UNHEALTHY }.to_owned(),
                    topology: device.numa_node.map(|id| TopologyInfo {
                        nodes: vec![NumaNode { id }],
                    }),
                }
            })
            .collect();
        ListAndWatchResponse { devices }
    }
}

/// Orders ids the way people count: `gpu2` before `gpu10`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (&a[..da], &b[..db]);
                let (ta, tb) = (trim_zeros(na), trim_zeros(nb));
                let ord = ta
                    .len()
                    .cmp(&tb.len())
                    .then_with(|| ta.cmp(tb))
                    .then_with(|| na.len().cmp(&nb.len()));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[da..];
                b = &b[db..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&c| c == b'0').count();
    &digits[zeros..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(id: &str, numa: Option<i64>) -> ScannedDevice {
        ScannedDevice {
            id: id.into(),
            numa_node: numa,
            healthy: true,
        }
    }

    fn health(ad: &Advertisement) -> Vec<(String, String)> {
        ad.to_response()
            .devices
            .into_iter()
            .map(|d| (d.id, d.health))
            .collect()
    }

    #[test]
    fn natural_order() {
        let mut ids = vec!["gpu10", "gpu2", "gpu1", "a", "gpu02", "b0"];
        ids.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(ids, ["a", "b0", "gpu1", "gpu2", "gpu02", "gpu10"]);
    }

    #[test]
    fn missing_devices_stay_listed_as_unhealthy_and_come_back() {
        let ad = Advertisement::new(1).with_scan(&[scanned("1", None), scanned("0", None)]);
        assert_eq!(
            health(&ad),
            [
                ("0".into(), "Healthy".into()),
                ("1".into(), "Healthy".into())
            ]
        );
        let gone = ad.with_scan(&[scanned("1", None)]);
        assert_eq!(
            health(&gone),
            [
                ("0".into(), "Unhealthy".into()),
                ("1".into(), "Healthy".into())
            ]
        );
        assert_ne!(gone, ad);
        let back = gone.with_scan(&[scanned("0", None), scanned("1", None)]);
        assert_eq!(back, ad);
    }

    #[test]
    fn replicas_and_topology() {
        let ad = Advertisement::new(2).with_scan(&[scanned("gpu0", Some(1))]);
        let response = ad.to_response();
        let ids: Vec<_> = response.devices.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["gpu0::0", "gpu0::1"]);
        let topology = response.devices[1].topology.clone().unwrap();
        assert_eq!(topology.nodes, [NumaNode { id: 1 }]);
        assert_eq!(ad.device_of("gpu0::1").unwrap().id, "gpu0");
        assert!(ad.device_of("gpu0").is_none());
    }

    #[test]
    fn closing_sends_an_empty_list() {
        let ad = Advertisement::new(1)
            .with_scan(&[scanned("0", None)])
            .closed();
        assert!(ad.to_response().devices.is_empty());
        // A later scan keeps it closed.
        assert!(ad.with_scan(&[scanned("0", None)]).is_closing());
    }

    #[test]
    fn a_device_a_claim_holds_is_unhealthy_while_held_across_scans() {
        let ad = Advertisement::new(2)
            .with_scan(&[scanned("0", None), scanned("1", None)])
            .with_claimed(BTreeMap::from([("1".to_owned(), "team/c".to_owned())]));
        let health = |ad: &Advertisement| -> Vec<(String, String)> {
            ad.to_response()
                .devices
                .into_iter()
                .map(|d| (d.id, d.health))
                .collect()
        };
        let expected = [
            ("0::0", HEALTHY),
            ("0::1", HEALTHY),
            ("1::0", UNHEALTHY),
            ("1::1", UNHEALTHY),
        ]
        .map(|(id, h)| (id.to_owned(), h.to_owned()));
        assert_eq!(health(&ad), expected);
        // A rescan keeps the hold; a change of it is a change to send.
        let rescanned = ad.with_scan(&[scanned("0", None), scanned("1", None)]);
        assert_eq!(health(&rescanned), expected);
        assert_eq!(rescanned.claimed_by("1"), Some("team/c"));
        assert_eq!(rescanned, ad);
        let released = ad.with_claimed(BTreeMap::new());
        assert_ne!(released, ad);
        assert!(health(&released).iter().all(|(_, h)| h == HEALTHY));
    }
}
