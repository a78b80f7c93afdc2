//! The pod-resources client (in `devinject-podresources`, the helper the request policy
//! executes) against a test kubelet speaking the real v1 API: `Get`, the fall-back to `List`,
//! rate limiting, deadlines and the errors a misconfigured node gives. Needs no root.

use std::time::{Duration, Instant};

use devinject_kubelet::pod_resources::{PodResourcesClient, PodResourcesError, Rpc};
use devinject_tests::podresources::{pod, FakeKubelet};

const DEMO: &str = "devinject.io/demo";

fn kubelet(dir: &std::path::Path) -> FakeKubelet {
    FakeKubelet::start(
        &dir.join("kubelet.sock"),
        vec![
            pod("ns", "a", &[("main", &[(DEMO, &["0", "1"])])]),
            pod("other", "a", &[("main", &[])]),
            pod("ns", "b", &[("main", &[(DEMO, &["2"])]), ("side", &[])]),
        ],
    )
    .unwrap()
}

fn client(k: &FakeKubelet) -> PodResourcesClient {
    PodResourcesClient::new(k.socket(), Duration::from_secs(2))
}

#[test]
fn get_answers_by_name_and_namespace() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    let found = client(&k).pod("ns", "b").unwrap();
    assert_eq!(found.answered_by, Rpc::Get);
    assert_eq!(found.entries.len(), 1);
    assert_eq!(found.entries[0].containers[0].devices[0].device_ids, ["2"]);
    assert_eq!(k.calls(), ["Get"]);
}

#[test]
fn falls_back_to_list_when_get_is_disabled() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    k.disable_get();
    let found = client(&k).pod("ns", "a").unwrap();
    assert_eq!(found.answered_by, Rpc::List);
    // Only the pod of that namespace, not `other/a`.
    assert_eq!(found.entries.len(), 1);
    assert_eq!(found.entries[0].namespace, "ns");
    assert_eq!(k.calls(), ["Get", "List"]);
}

#[test]
fn unknown_pod_is_an_empty_answer_from_list() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    let found = client(&k).pod("ns", "ghost").unwrap();
    assert!(found.entries.is_empty());
    assert_eq!(found.answered_by, Rpc::List);
    assert_eq!(k.calls(), ["Get", "List"]);
    assert_eq!(client(&k).list().unwrap().len(), 3);
}

#[test]
fn rate_limited_calls_are_retried_within_the_deadline() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    k.rate_limit_next(3);
    let found = client(&k).pod("ns", "a").unwrap();
    assert_eq!(found.answered_by, Rpc::Get);
    assert_eq!(k.calls(), ["Get", "Get", "Get", "Get"]);
}

#[test]
fn a_kubelet_that_does_not_answer_times_out() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    k.stall();
    let start = Instant::now();
    let err = PodResourcesClient::new(k.socket(), Duration::from_millis(300))
        .pod("ns", "a")
        .unwrap_err();
    assert!(matches!(err, PodResourcesError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("within 300 ms"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn missing_socket_and_wrong_files_are_named() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("pod-resources/kubelet.sock");
    let err = PodResourcesClient::new(&missing, Duration::from_secs(1))
        .pod("ns", "a")
        .unwrap_err();
    assert!(
        matches!(err, PodResourcesError::SocketMissing { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&missing.display().to_string()) && text.contains("does not exist"),
        "{text}"
    );

    let file = t.path().join("plain");
    std::fs::write(&file, "").unwrap();
    let err = PodResourcesClient::new(&file, Duration::from_secs(1))
        .pod("ns", "a")
        .unwrap_err();
    assert!(matches!(err, PodResourcesError::NotASocket { .. }), "{err}");

    // A socket file nobody listens on (a kubelet that died without cleaning up).
    let stale = t.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let err = PodResourcesClient::new(&stale, Duration::from_secs(1))
        .pod("ns", "a")
        .unwrap_err();
    assert!(matches!(err, PodResourcesError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("stale.sock"), "{err}");
}
