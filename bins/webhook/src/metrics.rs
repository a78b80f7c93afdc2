//! The webhook's metric families (`devinject_webhook_*`), registered by the binary and served by
//! `devinject_metrics`' endpoint.
//!
//! Every label comes from a fixed vocabulary ([`Outcome`], [`crate::mutate::Refusal::reason`]);
//! no pod, namespace or resource name a pod sent is a label. docs/operations.md has the table.

use std::time::Duration;

use devinject_metrics::{OutcomeLabels, ReasonLabels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// What a review was answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed with a patch (a friendly name mapped).
    Patched,
    /// Allowed unchanged (nothing to map, or not a pod).
    Unchanged,
    /// Refused, for a reason of [`crate::mutate::Refusal::reason`].
    Refused(&'static str),
    /// Not a readable AdmissionReview (answered 400 or 413).
    Malformed,
}

impl Outcome {
    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Patched => "patched",
            Self::Unchanged => "unchanged",
            Self::Refused(_) => "refused",
            Self::Malformed => "malformed",
        }
    }
}

/// A review is JSON work on one pod: 50 µs to about 3.3 s (the API server gives up at 5 s).
fn review_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 4.0, 9))
}

/// Every metric family of the webhook. Clones share their series.
#[derive(Debug, Clone)]
pub struct WebhookMetrics {
    reviews: Family<OutcomeLabels, Counter>,
    refusals: Family<ReasonLabels, Counter>,
    review_seconds: Histogram,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            reviews: Family::default(),
            refusals: Family::default(),
            review_seconds: review_buckets(),
        }
    }
}

impl WebhookMetrics {
    /// Registers every family in `registry` (counters get their `_total` there).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "devinject_webhook_reviews",
            "AdmissionReviews answered, by outcome",
            self.reviews.clone(),
        );
        registry.register(
            "devinject_webhook_refusals",
            "Pods refused, by reason",
            self.refusals.clone(),
        );
        registry.register_with_unit(
            "devinject_webhook_review_duration",
            "Time from a review's body read to its answer",
            Unit::Seconds,
            self.review_seconds.clone(),
        );
    }

    /// Records a review answered with `outcome` in `took`.
    pub fn reviewed(&self, outcome: Outcome, took: Duration) {
        self.reviews
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
        if let Outcome::Refused(reason) = outcome {
            self.refusals.get_or_create(&ReasonLabels { reason }).inc();
        }
        self.review_seconds.observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn reviews_by_outcome_refusals_by_reason_and_one_latency() {
        let metrics = WebhookMetrics::default();
        metrics.reviewed(Outcome::Patched, Duration::from_micros(60));
        metrics.reviewed(
            Outcome::Refused("unknown_resource"),
            Duration::from_micros(60),
        );
        metrics.reviewed(Outcome::Unchanged, Duration::from_micros(10));
        metrics.reviewed(Outcome::Malformed, Duration::from_micros(10));
        let t = devinject_metrics::text_of(|r| metrics.register(r));
        for line in [
            "devinject_webhook_reviews_total{outcome=\"patched\"} 1\n",
            "devinject_webhook_reviews_total{outcome=\"refused\"} 1\n",
            "devinject_webhook_reviews_total{outcome=\"unchanged\"} 1\n",
            "devinject_webhook_reviews_total{outcome=\"malformed\"} 1\n",
            "devinject_webhook_refusals_total{reason=\"unknown_resource\"} 1\n",
            "devinject_webhook_review_duration_seconds_count 4\n",
            "devinject_webhook_review_duration_seconds_bucket{le=\"0.00005\"} 2\n",
        ] {
            assert!(t.contains(line), "{line} not in\n{t}");
        }
    }
}
