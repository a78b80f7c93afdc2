//! The pod-resources client promises a process that may fork after a call (as the hook did
//! when it called the kubelet itself) that the call leaves no thread behind. Alone in its own
//! test binary so that no other test's threads come and go meanwhile.

use std::time::Duration;

use devinject_kubelet::pod_resources::PodResourcesClient;
use devinject_tests::podresources::{pod, FakeKubelet};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn a_pod_resources_call_leaves_no_thread_behind() {
    let t = tempfile::tempdir().unwrap();
    let k = FakeKubelet::start(
        &t.path().join("kubelet.sock"),
        vec![pod(
            "ns",
            "a",
            &[("main", &[("devinject.io/demo", &["0"])])],
        )],
    )
    .unwrap();
    let client = PodResourcesClient::new(k.socket(), Duration::from_secs(2));
    let before = threads();
    for _ in 0..3 {
        client.pod("ns", "a").unwrap();
        k.disable_get();
    }
    assert_eq!(threads(), before, "threads before and after the calls");
    assert_eq!(k.calls(), ["Get", "Get", "List", "Get", "List"]);
}
