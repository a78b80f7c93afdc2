//! Refusals as Events on their pods: where a user looks (`kubectl describe pod`, `kubectl get
//! events`) when a container does not start.
//!
//! The hook, the shim and the NRI plugin record each refused start in the node's decision log,
//! with the pod its runtime named (`devinject_decision_log::Pod`). A long-running component
//! follows that log (`devinject_decision_log::Watcher`: the device plugin, or the DRA driver
//! where no device plugin runs) and hands each such decision to a [`Queue`]; [`post`] writes it as an
//! `events.k8s.io/v1` Event regarding the pod: type `Warning`, a reason word per refusal
//! ([`event_reason`]), the engine path and the first line of the message the user's runtime
//! showed as its note.
//!
//! # Bounds
//! - The queue holds [`QUEUE`] decisions; one offered while it is full is dropped, never
//!   waited for: the log's follower is never slowed by the API server.
//! - One Event per pod and reason in [`REPEAT_GAP`] (a crash-looping container is refused at
//!   every restart), and at most [`MAX_PER_MINUTE`] Events a minute on the node, whatever
//!   its pods do; at most [`MAX_REMEMBERED`] pods and reasons are remembered for that.
//! - The note is at most [`MAX_NOTE_BYTES`] (the API's limit for a note); the pod's names have
//!   the shapes Kubernetes gives them (`Pod::new`), and the message is the log's bounded first
//!   line, which names devices and variables but never their environment's other values.
//! - Each call to the API server ends within [`CALL_TIMEOUT`]; a failure is logged and the
//!   Event is not retried (the decision log and the metrics keep the refusal).
//!
//! # Permissions
//! `create` on `events.k8s.io` `events`, and nothing else (the manifests' ClusterRole
//! `devinject-events`).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use devinject_decision_log::{Decision, EnginePath, Pod, Reason, Sink};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// The decisions waiting to be posted.
pub const QUEUE: usize = 64;
/// The shortest time between two Events of one pod for one reason.
pub const REPEAT_GAP: Duration = Duration::from_secs(60);
/// The most Events posted in any minute.
pub const MAX_PER_MINUTE: usize = 30;
/// The most pods and reasons remembered for [`REPEAT_GAP`].
pub const MAX_REMEMBERED: usize = 4096;
/// The longest note (the API server refuses longer).
pub const MAX_NOTE_BYTES: usize = 1024;
/// The longest one call to the API server may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Who writes the Events: `reportingController` and `reportingInstance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// The component, e.g. `devinject.io/device-plugin`.
    pub controller: &'static str,
    /// The node it runs on.
    pub instance: String,
}

/// The Event's reason for a refusal's [`Reason`]: a word a user can filter on
/// (`kubectl get events --field-selector reason=DeviceRequestRefused`).
pub fn event_reason(reason: Reason) -> &'static str {
    match reason {
        Reason::Policy => "DeviceRequestRefused",
        Reason::Request => "DeviceRequestInvalid",
        Reason::Host => "DeviceUnavailable",
        Reason::Config => "DeviceConfigInvalid",
        Reason::Input => "ContainerSpecInvalid",
        Reason::Inject => "DeviceInjectFailed",
        Reason::Cgroup => "DeviceCgroupFailed",
        Reason::Prepare => "DevicePrepareFailed",
        Reason::Internal | Reason::Usage | Reason::Other => "DeviceStartFailed",
    }
}

/// Who refused, in the note's words.
fn refused_by(path: EnginePath) -> &'static str {
    match path {
        EnginePath::Hook => "devinject's OCI hook",
        EnginePath::Shim => "devinject's runtime shim",
        EnginePath::Nri => "devinject's NRI plugin",
    }
}

/// The Event for `decision`, a refusal of a container of `pod`, written at `now`.
pub fn event(decision: &Decision, pod: &Pod, reporter: &Reporter, now: jiff::Timestamp) -> Event {
    let mut note = format!(
        "{} refused to start the container: {}",
        refused_by(decision.path),
        decision.message
    );
    if note.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    Event {
        metadata: ObjectMeta {
            // The API server checks a prefix as a name with one trailing `-` allowed (not `.`),
            // and cuts a long one to fit the random suffix.
            generate_name: Some(format!("{}-", pod.name)),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".to_owned()),
        reason: Some(event_reason(decision.reason).to_owned()),
        action: Some("StartContainer".to_owned()),
        note: Some(note),
        regarding: Some(ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            namespace: Some(pod.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: Some(pod.uid.clone()),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(reporter.controller.to_owned()),
        reporting_instance: Some(reporter.instance.clone()),
        ..Event::default()
    }
}

/// Which Events may be posted now ([`REPEAT_GAP`], [`MAX_PER_MINUTE`]).
#[derive(Debug, Default)]
pub struct Limiter {
    last: HashMap<(Pod, Reason), Instant>,
    recent: VecDeque<Instant>,
}

impl Limiter {
    /// Whether an Event for `pod` and `reason` may be posted at `now`; if so, it is counted.
    pub fn allows(&mut self, pod: &Pod, reason: Reason, now: Instant) -> bool {
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            self.recent.pop_front();
        }
        let key = (pod.clone(), reason);
        if self
            .last
            .get(&key)
            .is_some_and(|t| now.duration_since(*t) < REPEAT_GAP)
        {
            return false;
        }
        if self.recent.len() >= MAX_PER_MINUTE {
            return false;
        }
        if self.last.len() >= MAX_REMEMBERED {
            self.last.retain(|_, t| now.duration_since(*t) < REPEAT_GAP);
            if self.last.len() >= MAX_REMEMBERED {
                // Every one is recent: at most MAX_PER_MINUTE a minute can be, so this needs
                // a minute of more pods than that; forget them rather than grow.
                self.last.clear();
            }
        }
        self.last.insert(key, now);
        self.recent.push_back(now);
        true
    }
}

/// Where a log's follower hands refusals to [`post`].
#[derive(Debug, Clone)]
pub struct Queue(mpsc::Sender<Decision>);

/// What [`post`] reads.
#[derive(Debug)]
pub struct Posting(mpsc::Receiver<Decision>);

/// A queue of [`QUEUE`] decisions and its reading end.
pub fn queue() -> (Queue, Posting) {
    let (tx, rx) = mpsc::channel(QUEUE);
    (Queue(tx), Posting(rx))
}

impl Posting {
    /// The next queued decision; `None` once every [`Queue`] is dropped.
    pub async fn next(&mut self) -> Option<Decision> {
        self.0.recv().await
    }
}

impl Queue {
    /// Offers `decision` without waiting: one without a pod is not an Event, and one offered
    /// while the queue is full is dropped. Whether it was queued.
    pub fn offer(&self, decision: Decision) -> bool {
        decision.pod.is_some() && self.0.try_send(decision).is_ok()
    }
}

/// A queue is where a log's [`devinject_decision_log::Watcher`] can hand refusals directly.
impl Sink for Queue {
    fn read(&mut self, decisions: Vec<Decision>) {
        for decision in decisions {
            self.offer(decision);
        }
    }
}

/// Posts the queued refusals as Events until every [`Queue`] is dropped.
pub async fn post(client: kube::Client, reporter: Reporter, mut posting: Posting) {
    let mut limiter = Limiter::default();
    while let Some(decision) = posting.next().await {
        let Some(pod) = &decision.pod else {
            continue;
        };
        if !limiter.allows(pod, decision.reason, Instant::now()) {
            debug!(%pod, reason = %decision.reason, "refusal not posted as an Event: rate-limited");
            continue;
        }
        let event = event(&decision, pod, &reporter, jiff::Timestamp::now());
        let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), &pod.namespace);
        match tokio::time::timeout(CALL_TIMEOUT, events.create(&PostParams::default(), &event))
            .await
        {
            Ok(Ok(_)) => debug!(%pod, reason = %decision.reason, "refusal posted as an Event"),
            Ok(Err(error)) => {
                warn!(%pod, %error, "cannot post the refusal as an Event on its pod (the ClusterRole devinject-events grants create on events.k8s.io events)");
            }
            Err(_) => warn!(
                %pod,
                "posting the refusal as an Event took over {} s: left out",
                CALL_TIMEOUT.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Pod {
        Pod::new("shop", name, "5f0c-11").unwrap()
    }

    #[test]
    fn one_event_per_pod_and_reason_in_the_gap_and_a_ceiling_per_minute() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        assert!(l.allows(&pod("a"), Reason::Policy, t0));
        assert!(!l.allows(&pod("a"), Reason::Policy, t0 + Duration::from_secs(59)));
        assert!(l.allows(&pod("a"), Reason::Host, t0 + Duration::from_secs(1)));
        assert!(l.allows(&pod("a"), Reason::Policy, t0 + REPEAT_GAP));
        let t1 = t0 + Duration::from_secs(600);
        let allowed = (0..100)
            .filter(|i| l.allows(&pod(&format!("p{i}")), Reason::Policy, t1))
            .count();
        assert_eq!(allowed, MAX_PER_MINUTE);
        assert!(l.allows(&pod("late"), Reason::Policy, t1 + Duration::from_secs(60)));
    }

    #[test]
    fn the_remembered_pods_stay_bounded() {
        let mut l = Limiter::default();
        let mut now = Instant::now();
        for i in 0..(MAX_REMEMBERED * 3) {
            now += Duration::from_secs(3);
            l.allows(&pod(&format!("p{i}")), Reason::Policy, now);
            assert!(l.last.len() <= MAX_REMEMBERED && l.recent.len() <= MAX_PER_MINUTE);
        }
    }

    #[test]
    fn the_event_regards_the_pod_and_its_note_is_bounded() {
        let reporter = Reporter {
            controller: "devinject.io/device-plugin",
            instance: "node-1".into(),
        };
        let d = Decision::now(
            EnginePath::Shim,
            "c1",
            vec!["demo".into()],
            Reason::Policy,
            "é".repeat(2000),
        )
        .of_pod(Some(pod("web")));
        let e = event(&d, &pod("web"), &reporter, jiff::Timestamp::UNIX_EPOCH);
        let regarding = e.regarding.unwrap();
        assert_eq!(
            (
                regarding.kind.as_deref(),
                regarding.namespace.as_deref(),
                regarding.name.as_deref(),
                regarding.uid.as_deref()
            ),
            (Some("Pod"), Some("shop"), Some("web"), Some("5f0c-11"))
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(e.reason.as_deref(), Some("DeviceRequestRefused"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        let note = e.note.unwrap();
        assert!(note.len() <= MAX_NOTE_BYTES && note.len() > MAX_NOTE_BYTES - 4);
        assert!(note.starts_with("devinject's runtime shim refused to start the container: é"));
    }

    #[tokio::test]
    async fn only_refusals_of_a_pod_are_queued_and_a_full_queue_drops() {
        let (q, mut p) = queue();
        let d = Decision::now(EnginePath::Hook, "c", vec![], Reason::Policy, "m");
        assert!(!q.offer(d.clone()), "no pod, no Event");
        let d = d.of_pod(Some(pod("web")));
        for _ in 0..QUEUE {
            assert!(q.offer(d.clone()));
        }
        assert!(!q.offer(d.clone()), "full: dropped, not waited for");
        assert_eq!(p.next().await.unwrap(), d);
    }
}
