//! The DRA driver's metric families (`devinject_dra_*`), registered by the binary and served by
//! `devinject_metrics`' endpoint.
//!
//! Labels stay bounded: `profile` is one of the served profiles, every other label comes from
//! a fixed vocabulary. No claim, pod or device is a label. docs/operations.md has the table.

use std::time::Duration;

use devinject_devices::Inventory;
use devinject_metrics::{OutcomeLabels, ReasonLabels};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    profile: String,
    health: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    profile: String,
    from: &'static str,
    to: &'static str,
}

/// How a claim's `NodePrepareResources` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    /// Prepared now: specs written, the checkpoint saved.
    Written,
    /// Answered from the checkpoint (prepared before, its specs still there).
    FromCheckpoint,
    /// Failed, for a fixed reason: `claim_uid`, `api`, `allocation`, `plan`, `prepare_step`,
    /// `spec`, `checkpoint`.
    Refused(&'static str),
}

impl Prepared {
    fn label(self) -> &'static str {
        match self {
            Self::Written => "prepared",
            Self::FromCheckpoint => "checkpoint",
            Self::Refused(_) => "refused",
        }
    }
}

/// The health label of a device.
fn health(healthy: bool) -> &'static str {
    if healthy {
        "healthy"
    } else {
        "unhealthy"
    }
}

/// A claim's preparation reads the API server, discovers and may run prepare programs: 1 ms to
/// about 4 min, for slow prepare steps.
fn prepare_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 3.0, 12))
}

/// Every metric family of the DRA driver. Clones share their series.
#[derive(Debug, Clone)]
pub struct DraMetrics {
    devices: Family<DeviceLabels, Gauge>,
    health_transitions: Family<TransitionLabels, Counter>,
    prepares: Family<OutcomeLabels, Counter>,
    refusals: Family<ReasonLabels, Counter>,
    prepare_seconds: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    unprepares: Family<OutcomeLabels, Counter>,
    registrations: Family<OutcomeLabels, Counter>,
    slice_applies: Family<OutcomeLabels, Counter>,
}

impl Default for DraMetrics {
    fn default() -> Self {
        Self {
            devices: Family::default(),
            health_transitions: Family::default(),
            prepares: Family::default(),
            refusals: Family::default(),
            prepare_seconds: Family::new_with_constructor(prepare_buckets),
            unprepares: Family::default(),
            registrations: Family::default(),
            slice_applies: Family::default(),
        }
    }
}

impl DraMetrics {
    /// Registers every family in `registry` (counters get their `_total` there).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "devinject_dra_devices",
            "Devices discovery finds, by profile and health",
            self.devices.clone(),
        );
        registry.register(
            "devinject_dra_health_transitions",
            "Devices changing health, appearing or going away (absent), by profile",
            self.health_transitions.clone(),
        );
        registry.register(
            "devinject_dra_claim_prepares",
            "Claims NodePrepareResources answered, by outcome",
            self.prepares.clone(),
        );
        registry.register(
            "devinject_dra_prepare_refusals",
            "Claims not prepared, by reason",
            self.refusals.clone(),
        );
        registry.register_with_unit(
            "devinject_dra_prepare_duration",
            "Time to prepare one claim (NodePrepareResources, per claim), by outcome",
            Unit::Seconds,
            self.prepare_seconds.clone(),
        );
        registry.register(
            "devinject_dra_claim_unprepares",
            "Claims NodeUnprepareResources answered, by outcome",
            self.unprepares.clone(),
        );
        registry.register(
            "devinject_dra_registrations",
            "What the kubelet said of the driver's registration: registered or refused",
            self.registrations.clone(),
        );
        registry.register(
            "devinject_dra_resourceslice_applies",
            "ResourceSlice applies to the API server, by outcome",
            self.slice_applies.clone(),
        );
    }

    /// Sets `profile`'s device counts from `now` and counts the changes since `before` (none on
    /// a profile's first discovery).
    pub fn discovered(&self, profile: &str, before: Option<&Inventory>, now: &Inventory) {
        let healthy = now.devices.iter().filter(|d| d.healthy).count();
        for (state, count) in [(true, healthy), (false, now.devices.len() - healthy)] {
            self.devices
                .get_or_create(&DeviceLabels {
                    profile: profile.to_owned(),
                    health: health(state),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        let Some(before) = before else {
            return;
        };
        let count = |from: &'static str, to: &'static str| {
            self.health_transitions
                .get_or_create(&TransitionLabels {
                    profile: profile.to_owned(),
                    from,
                    to,
                })
                .inc();
        };
        for device in &now.devices {
            match before.by_id(device.id.as_str()) {
                None => count("absent", health(device.healthy)),
                Some(old) if old.healthy != device.healthy => {
                    count(health(old.healthy), health(device.healthy))
                }
                Some(_) => {}
            }
        }
        for old in &before.devices {
            if now.by_id(old.id.as_str()).is_none() {
                count(health(old.healthy), "absent");
            }
        }
    }

    /// Records one claim's preparation, which took `took`.
    pub fn prepared(&self, outcome: Prepared, took: Duration) {
        let labels = OutcomeLabels {
            outcome: outcome.label(),
        };
        self.prepares.get_or_create(&labels).inc();
        if let Prepared::Refused(reason) = outcome {
            self.refusals.get_or_create(&ReasonLabels { reason }).inc();
        }
        self.prepare_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Records one claim's unpreparation.
    pub fn unprepared(&self, ok: bool) {
        let outcome = if ok { "unprepared" } else { "failed" };
        self.unprepares
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Records what the kubelet said of the registration.
    pub fn registration(&self, registered: bool) {
        let outcome = if registered { "registered" } else { "refused" };
        self.registrations
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Records a ResourceSlice apply.
    pub fn slice_applied(&self, ok: bool) {
        let outcome = if ok { "applied" } else { "failed" };
        self.slice_applies
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use devinject_devices::{Device, DeviceId};

    use super::*;

    fn text(metrics: &DraMetrics) -> String {
        devinject_metrics::text_of(|r| metrics.register(r))
    }

    fn inventory(devices: &[(&str, bool)]) -> Inventory {
        Inventory {
            withdrawn: Vec::new(),
            devices: devices
                .iter()
                .enumerate()
                .map(|(index, (id, healthy))| Device {
                    id: DeviceId::new(id).unwrap(),
                    index,
                    name: id.to_string(),
                    nodes: Vec::new(),
                    numa_node: None,
                    healthy: *healthy,
                    attributes: Default::default(),
                    aliases: Vec::new(),
                })
                .collect(),
            control_nodes: Vec::new(),
        }
    }

    #[test]
    fn devices_by_health_and_their_transitions() {
        let metrics = DraMetrics::default();
        let first = inventory(&[("a", true), ("b", true)]);
        metrics.discovered("demo", None, &first);
        let t = text(&metrics);
        assert!(
            t.contains("devinject_dra_devices{profile=\"demo\",health=\"healthy\"} 2\n"),
            "{t}"
        );
        assert!(
            !t.contains("devinject_dra_health_transitions_total{"),
            "{t}"
        );
        let second = inventory(&[("b", false), ("c", true)]);
        metrics.discovered("demo", Some(&first), &second);
        let t = text(&metrics);
        for line in [
            "devinject_dra_devices{profile=\"demo\",health=\"healthy\"} 1\n",
            "devinject_dra_devices{profile=\"demo\",health=\"unhealthy\"} 1\n",
            "devinject_dra_health_transitions_total{profile=\"demo\",from=\"healthy\",to=\"unhealthy\"} 1\n",
            "devinject_dra_health_transitions_total{profile=\"demo\",from=\"absent\",to=\"healthy\"} 1\n",
            "devinject_dra_health_transitions_total{profile=\"demo\",from=\"healthy\",to=\"absent\"} 1\n",
        ] {
            assert!(t.contains(line), "{line} not in\n{t}");
        }
    }

    #[test]
    fn prepares_by_outcome_refusals_by_reason() {
        let metrics = DraMetrics::default();
        metrics.prepared(Prepared::Written, Duration::from_millis(20));
        metrics.prepared(Prepared::FromCheckpoint, Duration::from_micros(20));
        metrics.prepared(Prepared::Refused("allocation"), Duration::from_millis(2));
        metrics.unprepared(true);
        metrics.registration(true);
        metrics.slice_applied(false);
        let t = text(&metrics);
        for line in [
            "devinject_dra_claim_prepares_total{outcome=\"prepared\"} 1\n",
            "devinject_dra_claim_prepares_total{outcome=\"checkpoint\"} 1\n",
            "devinject_dra_claim_prepares_total{outcome=\"refused\"} 1\n",
            "devinject_dra_prepare_refusals_total{reason=\"allocation\"} 1\n",
            "devinject_dra_prepare_duration_seconds_count{outcome=\"prepared\"} 1\n",
            "devinject_dra_prepare_duration_seconds_bucket{le=\"0.001\",outcome=\"checkpoint\"} 1\n",
            "devinject_dra_claim_unprepares_total{outcome=\"unprepared\"} 1\n",
            "devinject_dra_registrations_total{outcome=\"registered\"} 1\n",
            "devinject_dra_resourceslice_applies_total{outcome=\"failed\"} 1\n",
        ] {
            assert!(t.contains(line), "{line} not in\n{t}");
        }
    }
}
