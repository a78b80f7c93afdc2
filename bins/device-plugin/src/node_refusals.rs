//! The refusals the hook, the shim and the NRI plugin made on this node, counted from the
//! node's decision log (`devinject_decision_log`) into `devinject_node_refusals_total{path,
//! reason}`, and, with `--pod-events`, handed on to be posted as Events on their pods
//! (`devinject_apiserver::pod_events`: the queue never waits, the posting is rate-limited).
//!
//! # Why here, and why on a thread of its own
//! The hook and the shim are short-lived processes that cannot keep a counter; they append
//! each refusal to the node's decision log. The device plugin runs on every node for the whole
//! time and already serves metrics, so it reads that log. It reads it on a thread of its own,
//! never on a scrape's: the metrics endpoint gives each connection one short deadline, and a
//! slow disk or a log written faster than it is read must not spend it (docs/security.md, the
//! metrics endpoint's row). The thread follows the log (across its rotations) for what was
//! appended, woken by inotify on the log's directory, and adds it to the counters; a scrape
//! only encodes them. While the directory does not exist (nothing refused yet) or cannot be
//! watched, the thread looks again every [`RETRY`]; while watched, it also looks every
//! [`RESCAN`], for a filesystem that reports no events. A log rotated twice between two looks
//! loses the older entries to the count (the log holds thousands of lines).
//!
//! # Hostile input
//! The log is read through the decision-log crate's follower: its directory and files by
//! descriptor, never followed, regular single-link files only, every read bounded (at most
//! [`MAX_POLLS`] reads of its bounded size per wake, the rest at the next). A line that is not
//! a decision is skipped; labels are the engine path and the reason word, both closed
//! vocabularies (`other` for a reason this release does not know), never a container or profile.

use std::io::{PipeReader, PipeWriter};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use devinject_apiserver::pod_events::Queue;
use devinject_decision_log::{EnginePath, Follower, Reason};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The metric's name, before the counter's `_total`.
pub const NAME: &str = "devinject_node_refusals";
/// How often the directory is looked for while it is missing or cannot be watched.
pub const RETRY: Duration = Duration::from_secs(5);
/// How often the log is read while watched, events or not.
pub const RESCAN: Duration = Duration::from_secs(60);
/// The most follower reads per wake.
pub const MAX_POLLS: usize = 16;

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
    /// Closed on drop, which wakes the thread to end.
    _stop: PipeWriter,
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
        let (stop_reader, stop) = std::io::pipe()?;
        let progress = Arc::new(Progress::default());
        // Starts at the log's end now, before this returns.
        let follower = Follower::new(dir);
        let reader = Reader {
            dir: dir.to_owned(),
            follower,
            counts: counts.clone(),
            events,
            progress: Arc::clone(&progress),
        };
        std::thread::Builder::new()
            .name("decision-log".into())
            .spawn(move || reader.run(&stop_reader))?;
        Ok(Self {
            dir: dir.to_owned(),
            counts,
            #[cfg(test)]
            progress,
            _stop: stop,
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
    fn wait(&self, looks: u64, n: u64, within: Duration) -> bool {
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

/// What the thread owns: the follower and the counters it adds to.
struct Reader {
    dir: PathBuf,
    follower: Follower,
    counts: Family<RefusalLabels, Counter>,
    /// Where refusals go to become Events on their pods.
    events: Option<Queue>,
    progress: Arc<Progress>,
}

impl Reader {
    /// Reads what was appended, then waits for an event in the directory, for `stop` to be
    /// closed, or for [`RETRY`] or [`RESCAN`] to pass, and again.
    fn run(mut self, stop: &PipeReader) {
        let mut watch = Watch::new(&self.dir);
        loop {
            self.catch_up();
            let timeout = if watch.watching() { RESCAN } else { RETRY };
            let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
            if let Some(inotify) = &watch.inotify {
                fds.push(PollFd::new(inotify.as_fd(), PollFlags::POLLIN));
            }
            match poll(
                &mut fds,
                PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX),
            ) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(error) => {
                    tracing::warn!(%error, "waiting for the decision log: looking again later");
                    std::thread::sleep(RETRY);
                }
            }
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            if ready(&fds[0]) {
                return;
            }
            let events = fds.get(1).is_some_and(ready);
            drop(fds);
            if events {
                watch.drain();
            }
            watch.ensure(&self.dir);
        }
    }

    /// Adds what was appended to the log since the last look, [`MAX_POLLS`] reads at most.
    fn catch_up(&mut self) {
        self.count_read(0);
        for _ in 0..MAX_POLLS {
            let decisions = match self.follower.poll() {
                Ok(decisions) => decisions,
                Err(error) => {
                    tracing::warn!(dir = %self.dir.display(), %error, "reading the decision log");
                    return;
                }
            };
            if decisions.is_empty() {
                return;
            }
            for decision in &decisions {
                self.counts
                    .get_or_create(&RefusalLabels {
                        path: decision.path.as_str(),
                        reason: decision.reason.as_str(),
                    })
                    .inc();
            }
            let handed = decisions.len();
            if let Some(events) = &self.events {
                for decision in decisions {
                    events.offer(decision);
                }
            }
            self.count_read(handed);
        }
    }

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

/// inotify on the log's directory, when it exists and can be watched.
struct Watch {
    inotify: Option<Inotify>,
    wd: Option<WatchDescriptor>,
    buffer: Vec<u8>,
}

impl Watch {
    fn new(dir: &Path) -> Self {
        let inotify = Inotify::init()
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot watch the decision log: reading it every few seconds");
            })
            .ok();
        let mut watch = Watch {
            inotify,
            wd: None,
            buffer: vec![0; 4096],
        };
        watch.ensure(dir);
        watch
    }

    fn watching(&self) -> bool {
        self.wd.is_some()
    }

    /// Watches `dir` when it is not watched yet: the log's writes, its rotations, and the
    /// directory itself going away. Not followed when it is a link.
    fn ensure(&mut self, dir: &Path) {
        let (Some(inotify), None) = (&self.inotify, &self.wd) else {
            return;
        };
        let mask = WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::CREATE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::DELETE
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR
            | WatchMask::DONT_FOLLOW;
        // Missing until the first refusal on the node: looked for again every RETRY.
        self.wd = inotify.watches().add(dir, mask).ok();
    }

    /// Reads every queued event; forgets the watch when the directory went away or moved, so
    /// that the next [`Watch::ensure`] watches whatever holds its name then.
    fn drain(&mut self) {
        let Some(inotify) = &mut self.inotify else {
            return;
        };
        loop {
            let events = match inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // WouldBlock: all read. Another error: the next wake reads again.
                Err(_) => return,
            };
            for event in events {
                if event
                    .mask
                    .intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF)
                {
                    if let Some(wd) = self.wd.take() {
                        // Already gone with the directory; nothing else to undo.
                        let _ = inotify.watches().remove(wd);
                    }
                }
            }
        }
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
    use devinject_decision_log::{record, Decision};
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;

    /// Far beyond an inotify wake, and well short of [`RESCAN`]: a count that comes within it
    /// came from an event.
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
