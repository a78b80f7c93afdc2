//! The refusals the hook, the shim and the NRI plugin made on this node, counted from the
//! node's decision log (`devinject_decision_log`) into `devinject_node_refusals_total{path,
//! reason}`.
//!
//! # Why here, and why at scrape time
//! The hook and the shim are short-lived processes that cannot keep a counter; they append
//! each refusal to the node's decision log. The device plugin runs on every node for the whole
//! time and already serves metrics, so it reads that log. It reads it when Prometheus scrapes:
//! the [`Collector`] follows the log (across its rotations) for what was appended since the
//! last scrape and adds it to the counters before encoding them. No timer and no watch: the
//! scrape is the one moment the counts are looked at. A log rotated twice between two scrapes
//! loses the older entries to the count (the log holds thousands of lines; scrapes come every
//! minute at most).
//!
//! # Hostile input
//! The log is read through the decision-log crate's follower: its directory and files by
//! descriptor, never followed, regular single-link files only, every read bounded. A line that
//! is not a decision is skipped; labels are the engine path and the reason word, both closed
//! vocabularies (`other` for a reason this release does not know), never a container or profile.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use devinject_decision_log::{EnginePath, Follower, Reason};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The metric's name, before the counter's `_total`.
pub const NAME: &str = "devinject_node_refusals";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    path: &'static str,
    reason: &'static str,
}

/// Counts the node's decision log at each scrape.
pub struct NodeRefusals {
    dir: PathBuf,
    follower: Mutex<Follower>,
    counts: Family<RefusalLabels, Counter>,
}

impl std::fmt::Debug for NodeRefusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRefusals")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl NodeRefusals {
    /// Counts the refusals appended to the decision log in `dir` from now on. Every path and
    /// reason starts at 0, so that `increase()` sees the first refusal of each.
    pub fn new(dir: &Path) -> Self {
        let counts = Family::<RefusalLabels, Counter>::default();
        for path in [EnginePath::Hook, EnginePath::Shim, EnginePath::Nri] {
            for reason in Reason::ALL {
                // Creates the series at 0; the guard is dropped at once.
                let _ = counts.get_or_create(&RefusalLabels {
                    path: path.as_str(),
                    reason: reason.as_str(),
                });
            }
        }
        Self {
            dir: dir.to_owned(),
            follower: Mutex::new(Follower::new(dir)),
            counts,
        }
    }

    /// Adds what was appended to the log since the last look.
    fn catch_up(&self) {
        let mut follower = self
            .follower
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match follower.poll() {
            Ok(decisions) => {
                for decision in decisions {
                    self.counts
                        .get_or_create(&RefusalLabels {
                            path: decision.path.as_str(),
                            reason: decision.reason.as_str(),
                        })
                        .inc();
                }
            }
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "reading the decision log");
            }
        }
    }
}

impl Collector for NodeRefusals {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.catch_up();
        let metric = encoder.encode_descriptor(
            NAME,
            "Container starts the hook, the shim or the NRI plugin refused on this node, from the decision log",
            None,
            self.counts.metric_type(),
        )?;
        self.counts.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use devinject_decision_log::{record, Decision};
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn refusals_recorded_after_the_start_are_counted_by_path_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let refusal = |path, reason| Decision::now(path, "c1", vec!["demo".into()], reason, "no");
        // Before the plugin started: not counted.
        record(dir.path(), &refusal(EnginePath::Hook, Reason::Policy)).unwrap();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(NodeRefusals::new(dir.path())));
        let text = scrape(&registry);
        assert!(
            text.contains("devinject_node_refusals_total{path=\"hook\",reason=\"policy\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("devinject_node_refusals_total{path=\"nri\",reason=\"other\"} 0\n"),
            "{text}"
        );
        record(dir.path(), &refusal(EnginePath::Hook, Reason::Policy)).unwrap();
        record(dir.path(), &refusal(EnginePath::Shim, Reason::Request)).unwrap();
        record(dir.path(), &refusal(EnginePath::Shim, Reason::Request)).unwrap();
        let text = scrape(&registry);
        for line in [
            "# TYPE devinject_node_refusals counter\n",
            "devinject_node_refusals_total{path=\"hook\",reason=\"policy\"} 1\n",
            "devinject_node_refusals_total{path=\"shim\",reason=\"request\"} 2\n",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // Counted once: the next scrape adds only what is new.
        assert!(scrape(&registry)
            .contains("devinject_node_refusals_total{path=\"shim\",reason=\"request\"} 2\n"));
        // The container and profile are no labels.
        assert!(!text.contains("c1") && !text.contains("demo"), "{text}");
    }

    #[test]
    fn a_missing_directory_counts_nothing_and_fails_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(NodeRefusals::new(&dir.path().join("absent"))));
        assert!(scrape(&registry)
            .contains("devinject_node_refusals_total{path=\"hook\",reason=\"policy\"} 0\n"));
    }

    #[test]
    fn junk_in_the_log_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(NodeRefusals::new(dir.path())));
        scrape(&registry);
        std::fs::write(
            dir.path().join(devinject_decision_log::LOG_NAME),
            "not json\n{\"path\":\"hook\"}\n",
        )
        .unwrap();
        record(
            dir.path(),
            &Decision::now(EnginePath::Nri, "", vec![], Reason::Prepare, "x"),
        )
        .unwrap();
        let text = scrape(&registry);
        assert!(
            text.contains("devinject_node_refusals_total{path=\"nri\",reason=\"prepare\"} 1\n"),
            "{text}"
        );
    }
}
