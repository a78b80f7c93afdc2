//! The device plugin's metric families (`devinject_device_plugin_*`), registered by the binary
//! and served by `devinject_metrics`' endpoint.
//!
//! Labels stay bounded: `resource` is one of the served extended resources (one per profile),
//! every other label comes from a fixed vocabulary. No device id, pod or container name is a
//! label. docs/operations.md has the table.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::advertisement::Advertisement;

/// A resource's series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// The extended resource, e.g. `devinject.io/demo`.
    pub resource: String,
}

/// Devices of a resource in one health state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabels {
    /// The extended resource.
    pub resource: String,
    /// `healthy` or `unhealthy` (which includes devices that went away).
    pub health: &'static str,
}

/// A resource's events of one kind.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The extended resource.
    pub resource: String,
    /// From a fixed vocabulary (`PluginError::reason`, `RestartReason::label`).
    pub reason: &'static str,
}

/// A device's health change.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// The extended resource.
    pub resource: String,
    /// `healthy` or `unhealthy`.
    pub from: &'static str,
    /// `healthy` or `unhealthy`.
    pub to: &'static str,
}

type Latency = Family<ResourceLabels, Histogram, fn() -> Histogram>;

/// `Allocate` is pure computation on the plugin's side: 50 µs to about 3.3 s.
fn allocate_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 4.0, 9))
}

/// The health label of a device.
pub fn health(healthy: bool) -> &'static str {
    if healthy {
        "healthy"
    } else {
        "unhealthy"
    }
}

/// Every metric family of the device plugin. Clones share their series.
#[derive(Debug, Clone)]
pub struct PluginMetrics {
    devices: Family<DeviceLabels, Gauge>,
    allocations: Family<ResourceLabels, Counter>,
    refusals: Family<ReasonLabels, Counter>,
    allocate_seconds: Latency,
    registrations: Family<ResourceLabels, Counter>,
    reregistrations: Family<ReasonLabels, Counter>,
    health_transitions: Family<TransitionLabels, Counter>,
    rescans: Family<ResourceLabels, Counter>,
}

impl Default for PluginMetrics {
    fn default() -> Self {
        Self {
            devices: Family::default(),
            allocations: Family::default(),
            refusals: Family::default(),
            allocate_seconds: Family::new_with_constructor(allocate_buckets),
            registrations: Family::default(),
            reregistrations: Family::default(),
            health_transitions: Family::default(),
            rescans: Family::default(),
        }
    }
}

impl PluginMetrics {
    /// Registers every family in `registry` (counters get their `_total` there).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "devinject_device_plugin_devices",
            "Physical devices the plugin advertises, by resource and health",
            self.devices.clone(),
        );
        registry.register(
            "devinject_device_plugin_allocations",
            "Container allocations answered (one per container request of an Allocate call)",
            self.allocations.clone(),
        );
        registry.register(
            "devinject_device_plugin_allocation_refusals",
            "Allocate and GetPreferredAllocation calls refused, by reason",
            self.refusals.clone(),
        );
        registry.register_with_unit(
            "devinject_device_plugin_allocate_duration",
            "Time the plugin took to answer Allocate",
            Unit::Seconds,
            self.allocate_seconds.clone(),
        );
        registry.register(
            "devinject_device_plugin_registrations",
            "Registrations the kubelet accepted (the first one and every one after)",
            self.registrations.clone(),
        );
        registry.register(
            "devinject_device_plugin_reregistrations",
            "New sockets served and registered again, by reason",
            self.reregistrations.clone(),
        );
        registry.register(
            "devinject_device_plugin_health_transitions",
            "Health changes of advertised devices",
            self.health_transitions.clone(),
        );
        registry.register(
            "devinject_device_plugin_rescans",
            "Discoveries run, the first included: one per burst of inotify events on what discovery reads",
            self.rescans.clone(),
        );
    }

    /// Sets the device counts of `resource` from what it advertises now.
    pub fn advertised(&self, resource: &str, advertisement: &Advertisement) {
        let healthy = advertisement
            .physical()
            .iter()
            .filter(|d| d.healthy)
            .count();
        let unhealthy = advertisement.physical().len() - healthy;
        for (state, count) in [(true, healthy), (false, unhealthy)] {
            self.devices
                .get_or_create(&DeviceLabels {
                    resource: resource.to_owned(),
                    health: health(state),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Counts a device of `resource` going from `from` to `to` health.
    pub fn health_changed(&self, resource: &str, from: bool, to: bool) {
        self.health_transitions
            .get_or_create(&TransitionLabels {
                resource: resource.to_owned(),
                from: health(from),
                to: health(to),
            })
            .inc();
    }

    /// Counts a discovery of `resource`'s devices.
    pub fn rescanned(&self, resource: &str) {
        self.rescans
            .get_or_create(&ResourceLabels {
                resource: resource.to_owned(),
            })
            .inc();
    }

    /// Counts `containers` container allocations of `resource`.
    pub fn allocated(&self, resource: &str, containers: usize) {
        self.allocations
            .get_or_create(&ResourceLabels {
                resource: resource.to_owned(),
            })
            .inc_by(u64::try_from(containers).unwrap_or(u64::MAX));
    }

    /// Counts a refused call of `resource`.
    pub fn refused(&self, resource: &str, reason: &'static str) {
        self.refusals
            .get_or_create(&ReasonLabels {
                resource: resource.to_owned(),
                reason,
            })
            .inc();
    }

    /// Records how long an `Allocate` of `resource` took.
    pub fn allocate_took(&self, resource: &str, took: Duration) {
        self.allocate_seconds
            .get_or_create(&ResourceLabels {
                resource: resource.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts a registration of `resource` the kubelet accepted.
    pub fn registered(&self, resource: &str) {
        self.registrations
            .get_or_create(&ResourceLabels {
                resource: resource.to_owned(),
            })
            .inc();
    }

    /// Counts a new incarnation of `resource`, started for `reason`.
    pub fn reregistering(&self, resource: &str, reason: &'static str) {
        self.reregistrations
            .get_or_create(&ReasonLabels {
                resource: resource.to_owned(),
                reason,
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advertisement::ScannedDevice;

    fn text(metrics: &PluginMetrics) -> String {
        devinject_metrics::text_of(|r| metrics.register(r))
    }

    fn scanned(id: &str, healthy: bool) -> ScannedDevice {
        ScannedDevice {
            id: id.into(),
            numa_node: None,
            healthy,
        }
    }

    #[test]
    fn devices_are_counted_by_health_and_follow_the_advertisement() {
        let metrics = PluginMetrics::default();
        let r = "devinject.io/demo";
        let ad = Advertisement::new(2).with_scan(&[scanned("a", true), scanned("b", false)]);
        metrics.advertised(r, &ad);
        let t = text(&metrics);
        assert!(t.contains("devinject_device_plugin_devices{resource=\"devinject.io/demo\",health=\"healthy\"} 1\n"), "{t}");
        assert!(t.contains("devinject_device_plugin_devices{resource=\"devinject.io/demo\",health=\"unhealthy\"} 1\n"), "{t}");
        // Device a goes away: it stays advertised, unhealthy.
        metrics.advertised(r, &ad.with_scan(&[scanned("b", true)]));
        let t = text(&metrics);
        assert!(t.contains("devinject_device_plugin_devices{resource=\"devinject.io/demo\",health=\"healthy\"} 1\n"), "{t}");
        assert!(t.contains("devinject_device_plugin_devices{resource=\"devinject.io/demo\",health=\"unhealthy\"} 1\n"), "{t}");
        metrics.advertised(
            r,
            &Advertisement::new(1).with_scan(&[scanned("b", true), scanned("c", true)]),
        );
        assert!(text(&metrics).contains("devinject_device_plugin_devices{resource=\"devinject.io/demo\",health=\"unhealthy\"} 0\n"));
    }

    #[test]
    fn counters_get_their_total_suffix_and_bounded_labels() {
        let metrics = PluginMetrics::default();
        let r = "devinject.io/demo";
        metrics.allocated(r, 2);
        metrics.refused(r, "unknown_device");
        metrics.registered(r);
        metrics.registered(r);
        metrics.reregistering(r, "kubelet_restarted");
        metrics.health_changed(r, true, false);
        metrics.rescanned(r);
        metrics.allocate_took(r, Duration::from_micros(70));
        let t = text(&metrics);
        for line in [
            "devinject_device_plugin_allocations_total{resource=\"devinject.io/demo\"} 2\n",
            "devinject_device_plugin_allocation_refusals_total{resource=\"devinject.io/demo\",reason=\"unknown_device\"} 1\n",
            "devinject_device_plugin_registrations_total{resource=\"devinject.io/demo\"} 2\n",
            "devinject_device_plugin_reregistrations_total{resource=\"devinject.io/demo\",reason=\"kubelet_restarted\"} 1\n",
            "devinject_device_plugin_health_transitions_total{resource=\"devinject.io/demo\",from=\"healthy\",to=\"unhealthy\"} 1\n",
            "devinject_device_plugin_rescans_total{resource=\"devinject.io/demo\"} 1\n",
            "# UNIT devinject_device_plugin_allocate_duration_seconds seconds\n",
            "devinject_device_plugin_allocate_duration_seconds_count{resource=\"devinject.io/demo\"} 1\n",
            "devinject_device_plugin_allocate_duration_seconds_bucket{le=\"0.00005\",resource=\"devinject.io/demo\"} 0\n",
            "devinject_device_plugin_allocate_duration_seconds_bucket{le=\"0.0002\",resource=\"devinject.io/demo\"} 1\n",
        ] {
            assert!(t.contains(line), "{line} not in\n{t}");
        }
    }
}
