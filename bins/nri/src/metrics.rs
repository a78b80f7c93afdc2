//! The NRI plugin's metric families (`devinject_nri_*`), registered by the binary and served by
//! `devinject_metrics`' endpoint (a thread: this plugin has no async runtime).
//!
//! Every label comes from a fixed vocabulary ([`Outcome`]); no pod, container or device is a
//! label. docs/operations.md has the table.

use std::time::Duration;

use devinject_metrics::{OutcomeLabels, ReasonLabels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// What the plugin answered a `CreateContainer` with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An adjustment with devices.
    Injected,
    /// The container asked for nothing: no adjustment.
    Unchanged,
    /// A failure: the container is not created. The reason is a fixed word (see
    /// docs/operations.md): `policy`, `request`, `host`, `profiles`, `node_in_volume`,
    /// `user_namespace`, `prepare_step`, `budget`, `busy`, `malformed`, `internal`.
    Refused(&'static str),
}

impl Outcome {
    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Injected => "injected",
            Self::Unchanged => "unchanged",
            Self::Refused(_) => "refused",
        }
    }
}

/// The answer's time: admission, the kubelet's pod-resources call and prepare steps, up to the
/// request budget (seconds): 0.5 ms to about 16 s.
fn answer_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_5, 2.5, 12))
}

/// Every metric family of the NRI plugin. Clones share their series.
#[derive(Debug, Clone)]
pub struct NriMetrics {
    adjustments: Counter,
    refusals: Family<ReasonLabels, Counter>,
    answer_seconds: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    registrations: Counter,
    connected: Gauge,
}

impl Default for NriMetrics {
    fn default() -> Self {
        Self {
            adjustments: Counter::default(),
            refusals: Family::default(),
            answer_seconds: Family::new_with_constructor(answer_buckets),
            registrations: Counter::default(),
            connected: Gauge::default(),
        }
    }
}

impl NriMetrics {
    /// Registers every family in `registry` (counters get their `_total` there).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "devinject_nri_adjustments",
            "Containers the plugin adjusted with devices",
            self.adjustments.clone(),
        );
        registry.register(
            "devinject_nri_refusals",
            "Container creations the plugin failed, by reason",
            self.refusals.clone(),
        );
        registry.register_with_unit(
            "devinject_nri_create_container_duration",
            "Time from a CreateContainer request to the plugin's answer, by outcome",
            Unit::Seconds,
            self.answer_seconds.clone(),
        );
        registry.register(
            "devinject_nri_registrations",
            "Registrations the runtime accepted (one more after each runtime restart)",
            self.registrations.clone(),
        );
        registry.register(
            "devinject_nri_connected",
            "1 while the plugin is registered with the runtime, else 0",
            self.connected.clone(),
        );
    }

    /// Records a `CreateContainer` answered with `outcome`, `took` after it arrived.
    pub fn answered(&self, outcome: Outcome, took: Duration) {
        match outcome {
            Outcome::Injected => {
                self.adjustments.inc();
            }
            Outcome::Unchanged => {}
            Outcome::Refused(reason) => {
                self.refusals.get_or_create(&ReasonLabels { reason }).inc();
            }
        }
        self.answer_seconds
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts a registration the runtime accepted; the plugin is connected.
    pub fn registered(&self) {
        self.registrations.inc();
        self.connected.set(1);
    }

    /// The session ended: the plugin is not connected.
    pub fn disconnected(&self) {
        self.connected.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(metrics: &NriMetrics) -> String {
        devinject_metrics::text_of(|r| metrics.register(r))
    }

    #[test]
    fn answers_are_counted_by_outcome_and_refusals_by_reason() {
        let metrics = NriMetrics::default();
        metrics.answered(Outcome::Injected, Duration::from_millis(2));
        metrics.answered(Outcome::Unchanged, Duration::from_micros(100));
        metrics.answered(Outcome::Refused("policy"), Duration::from_millis(1));
        metrics.answered(Outcome::Refused("policy"), Duration::from_millis(1));
        let t = text(&metrics);
        for line in [
            "devinject_nri_adjustments_total 1\n",
            "devinject_nri_refusals_total{reason=\"policy\"} 2\n",
            "devinject_nri_create_container_duration_seconds_count{outcome=\"injected\"} 1\n",
            "devinject_nri_create_container_duration_seconds_count{outcome=\"unchanged\"} 1\n",
            "devinject_nri_create_container_duration_seconds_count{outcome=\"refused\"} 2\n",
            "devinject_nri_create_container_duration_seconds_bucket{le=\"0.0005\",outcome=\"unchanged\"} 1\n",
            "devinject_nri_create_container_duration_seconds_bucket{le=\"0.0005\",outcome=\"injected\"} 0\n",
        ] {
            assert!(t.contains(line), "{line} not in\n{t}");
        }
    }

    #[test]
    fn connected_follows_the_session() {
        let metrics = NriMetrics::default();
        assert!(text(&metrics).contains("devinject_nri_connected 0\n"));
        metrics.registered();
        let t = text(&metrics);
        assert!(t.contains("devinject_nri_connected 1\n"), "{t}");
        assert!(t.contains("devinject_nri_registrations_total 1\n"), "{t}");
        metrics.disconnected();
        metrics.registered();
        let t = text(&metrics);
        assert!(t.contains("devinject_nri_registrations_total 2\n"), "{t}");
    }
}
