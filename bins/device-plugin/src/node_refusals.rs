//! The refusals the hook, the shim and the NRI plugin made on this node, counted from the
//! node's decision log (`devinject_decision_log`) into `devinject_node_refusals_total{path,
//! reason}`, and, with `--pod-events`, handed on to be posted as Events on their pods
//! (`devinject_apiserver::pod_events`: the queue never waits, the posting is rate-limited).
//!
//! # Why here, and why on a thread of its own
//! The hook and the shim are short-lived processes that cannot keep a counter; they append
//! each refusal to the node's decision log. The device plugin runs on every node for the whole
//! time and already serves metrics, so it reads that log. It reads it on a thread of its own
//! (`devinject_decision_log::Watcher`: woken by inotify on the log's directory), never on a
//! scrape's: the metrics endpoint gives each connection one short deadline, and a slow disk or a
//! log written faster than it is read must not spend it (docs/security.md, the metrics
//! endpoint's row). A scrape only encodes the counters.
//!
//! # Hostile input
//! The log is read through the decision-log crate's follower: its directory and files by
//! descriptor, never followed, regular single-link files only, every read bounded (at most
//! `MAX_POLLS` reads of its bounded size per wake, the rest at the next). A line that is not
//! a decision is skipped; labels are the engine path and the reason word, both closed
//! vocabularies (`other` for a reason this release does not know), never a container or profile.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use devinject_apiserver::pod_events::Queue;
use devinject_decision_log::{Decision, EnginePath, Reason, Sink, Watcher};
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

/// How many times the thread has read the log, and how many decisions it has counted;
/// signalled at each look.
#[derive(Debug, Default)]
struct Progress {
    /// (looks, decisions counted)
    counted: Mutex<(u64, u64)>,
    changed: Condvar,
}

/// Counts the node's decision log from a thread of its own; a scrape encodes the counts.
/// Dropping it stops the thread.
pub struct NodeRefusals {
    dir: PathBuf,
    counts: Family<RefusalLabels, Counter>,
    #[cfg(test)]
    progress: Arc<Progress>,
    /// The thread; dropped, it ends.
    _watcher: Watcher,
}

impl std::fmt::Debug for NodeRefusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRefusals")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl NodeRefusals {
    /// Counts the refusals appended to the decision log in `dir` from now on, and offers each
    /// to `events` when given. Every path and reason starts at 0, so that `increase()` sees the
    /// first refusal of each.
    pub fn new(dir: &Path, events: Option<Queue>) -> std::io::Result<Self> {
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
        let progress = Arc::new(Progress::default());
        let reader = Reader {
            counts: counts.clone(),
            events,
            progress: Arc::clone(&progress),
        };
        let watcher = Watcher::spawn(dir, reader)?;
        Ok(Self {
            dir: dir.to_owned(),
            counts,
            #[cfg(test)]
            progress,
            _watcher: watcher,
        })
    }

    /// How far the thread has counted, to wait on.
    #[cfg(test)]
    fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }
}

#[cfg(test)]
impl Progress {
    /// Waits until the log was read `looks` times and `n` decisions are counted, for `within`
    /// at most; true when they are.
    fn wait(&self, looks: u64, n: u64, within: std::time::Duration) -> bool {
        let counted = self
            .counted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (counted, _) = self
            .changed
            .wait_timeout_while(counted, within, |&mut (l, c)| l < looks || c < n)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        counted.0 >= looks && counted.1 >= n
    }
}

/// What the thread hands each batch to: the counters, the Events' queue, the progress.
struct Reader {
    counts: Family<RefusalLabels, Counter>,
    /// Where refusals go to become Events on their pods.
    events: Option<Queue>,
    progress: Arc<Progress>,
}

impl Sink for Reader {
    fn looked(&mut self) {
        self.count_read(0);
    }

    fn read(&mut self, decisions: Vec<Decision>) {
        for decision in &decisions {
            self.counts
                .get_or_create(&RefusalLabels {
                    path: decision.path.as_str(),
                    reason: decision.reason.as_str(),
                })
                .inc();
        }
        let handed = decisions.len();
        if let Some(events) = &mut self.events {
            events.read(decisions);
        }
        self.count_read(handed);
    }
}

impl Reader {
    /// Notes one more look, or `decisions` more counted.
    fn count_read(&self, decisions: usize) {
        let mut counted = self
            .progress
            .counted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if decisions == 0 {
            counted.0 += 1;
        }
        counted.1 += decisions as u64;
        self.progress.changed.notify_all();
    }
}

impl Collector for NodeRefusals {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
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
    use devinject_decision_log::record;
    use devinject_decision_log::watcher::RETRY;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;
    use std::time::Duration;

    /// Far beyond an inotify wake: the watcher has no timer while the directory is watched, so
    /// a count that comes within it came from an event.
    const WAKE: Duration = Duration::from_secs(10);

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    }

    fn registered(dir: &Path) -> (Registry, Arc<Progress>) {
        let refusals = NodeRefusals::new(dir, None).unwrap();
        let progress = refusals.progress();
        // Its first look done: what comes next is read on an event (or a retry).
        assert!(progress.wait(1, 0, WAKE), "the thread never looked");
        let mut registry = Registry::default();
        registry.register_collector(Box::new(refusals));
        (registry, progress)
    }

    #[test]
    fn refusals_recorded_after_the_start_are_counted_by_path_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let refusal = |path, reason| Decision::now(path, "c1", vec!["demo".into()], reason, "no");
        // Before the plugin started: not counted.
        record(dir.path(), &refusal(EnginePath::Hook, Reason::Policy)).unwrap();
        let (registry, progress) = registered(dir.path());
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
        // Counted by the thread, woken by the writes, with no scrape in between.
        assert!(progress.wait(1, 3, WAKE), "not counted without a scrape");
        let text = scrape(&registry);
        for line in [
            "# TYPE devinject_node_refusals counter\n",
            "devinject_node_refusals_total{path=\"hook\",reason=\"policy\"} 1\n",
            "devinject_node_refusals_total{path=\"shim\",reason=\"request\"} 2\n",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // Counted once: another scrape adds nothing.
        assert!(scrape(&registry)
            .contains("devinject_node_refusals_total{path=\"shim\",reason=\"request\"} 2\n"));
        // The container and profile are no labels.
        assert!(!text.contains("c1") && !text.contains("demo"), "{text}");
    }

    #[tokio::test]
    async fn refusals_of_a_pod_are_handed_on_for_its_event_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let (queue, mut posting) = devinject_apiserver::pod_events::queue();
        let refusals = NodeRefusals::new(dir.path(), Some(queue)).unwrap();
        let progress = refusals.progress();
        assert!(progress.wait(1, 0, WAKE), "the thread never looked");
        let pod = devinject_decision_log::Pod::new("shop", "web", "5f0c-11");
        let of_pod = Decision::now(EnginePath::Shim, "c1", vec![], Reason::Policy, "forged")
            .of_pod(pod.clone());
        record(
            dir.path(),
            &Decision::now(EnginePath::Hook, "c0", vec![], Reason::Host, "no pod"),
        )
        .unwrap();
        record(dir.path(), &of_pod).unwrap();
        let handed = tokio::time::timeout(WAKE, posting.next())
            .await
            .expect("handed on within a wake")
            .expect("the queue is open");
        assert_eq!((handed.pod, handed.message.as_str()), (pod, "forged"));
        drop(refusals);
    }

    #[test]
    fn a_directory_made_after_the_start_is_counted_once_it_appears() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("late");
        let (registry, progress) = registered(&dir);
        assert!(scrape(&registry)
            .contains("devinject_node_refusals_total{path=\"hook\",reason=\"policy\"} 0\n"));
        record(
            &dir,
            &Decision::now(EnginePath::Hook, "", vec![], Reason::Policy, "x"),
        )
        .unwrap();
        // Looked for every RETRY until it exists, then followed from its start.
        assert!(progress.wait(1, 1, RETRY + WAKE), "never counted");
        assert!(scrape(&registry)
            .contains("devinject_node_refusals_total{path=\"hook\",reason=\"policy\"} 1\n"));
    }

    #[test]
    fn junk_in_the_log_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, progress) = registered(dir.path());
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
        assert!(progress.wait(1, 1, WAKE), "never counted");
        let text = scrape(&registry);
        assert!(
            text.contains("devinject_node_refusals_total{path=\"nri\",reason=\"prepare\"} 1\n"),
            "{text}"
        );
    }
}
