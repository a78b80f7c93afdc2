//! `devinject-podresources`, the tool that asks the kubelet what a container was granted as the
//! request policy does, against a test kubelet speaking the real v1 API: its answer for a
//! granted container (NUMA-split entries merged), an unknown pod and an unknown container; its
//! exit codes and messages for a missing socket, a stale one, a failing kubelet, a kubelet that
//! does not answer and a bad command line; and the policy's own lookup, in-process, giving the
//! same answer. Needs no root; needs the workspace's binaries built
//! (`cargo build --workspace --bins`).

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use devinject_admission::policy::kubelet::PodResources;
use devinject_admission::policy::GrantSource;
use devinject_kubelet::answer::{Answer, PodEntry, Rpc};
use devinject_kubelet::pod_resources::PodResourcesError;
use devinject_podresources::{Request, ToolExit};
use devinject_tests::bins::bin;
use devinject_tests::podresources::{pod, FakeKubelet};

const DEMO: &str = "devinject.io/demo";

/// Pod ml/trainer: `main` got demo 1 and 0 on two NUMA nodes and another resource, `side`
/// nothing; a pod of the same name in another namespace.
fn kubelet(socket: &Path) -> FakeKubelet {
    FakeKubelet::start(
        socket,
        vec![
            pod(
                "ml",
                "trainer",
                &[
                    (
                        "main",
                        &[
                            (DEMO, &["1"]),
                            ("example.com/tpu", &["apex_0"]),
                            (DEMO, &["0"]),
                        ],
                    ),
                    ("side", &[]),
                ],
            ),
            pod("other", "trainer", &[("main", &[(DEMO, &["3"])])]),
        ],
    )
    .unwrap()
}

fn request(socket: &Path, pod: &str, container: &str, timeout_ms: u64) -> Request {
    Request {
        socket: socket.to_owned(),
        timeout: Duration::from_millis(timeout_ms),
        namespace: "ml".into(),
        pod: pod.into(),
        container: container.into(),
    }
}

/// Runs the helper as the hook does: these arguments, no environment, no stdin.
fn helper(args: &[OsString]) -> Output {
    Command::new(bin("devinject-podresources"))
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The helper's answer about `pod`/`container` in namespace ml.
fn ask(k: &FakeKubelet, pod: &str, container: &str) -> Answer {
    let out = helper(&request(k.socket(), pod, container, 2000).to_args());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert!(err.is_empty(), "{err}");
    Answer::parse(&out.stdout).unwrap()
}

#[test]
fn answers_with_the_containers_devices() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(&t.path().join("kubelet.sock"));
    let a = ask(&k, "trainer", "main");
    assert_eq!(a.answered_by, Rpc::Get);
    assert_eq!(
        a.pods,
        [PodEntry::found(&[
            (DEMO, &["1", "0"]),
            ("example.com/tpu", &["apex_0"])
        ])]
    );
    // A container that got nothing: found, without devices.
    assert_eq!(ask(&k, "trainer", "side").pods, [PodEntry::found(&[])]);
    assert_eq!(k.calls(), ["Get", "Get"]);
}

#[test]
fn unknown_pods_and_containers_are_told_apart() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(&t.path().join("kubelet.sock"));
    let a = ask(&k, "ghost", "main");
    assert_eq!(
        a.answered_by,
        Rpc::List,
        "Get does not know it: List decides"
    );
    assert!(a.pods.is_empty(), "{a:?}");
    assert_eq!(k.calls(), ["Get", "List"]);
    assert_eq!(
        ask(&k, "trainer", "init").pods,
        [PodEntry::Missing {
            listed: vec!["main".into(), "side".into()]
        }]
    );
}

#[test]
fn each_failure_has_its_exit_code_and_one_line() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("pod-resources/kubelet.sock");
    let stale = t.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let failing = kubelet(&t.path().join("failing.sock"));
    failing.fail();
    let stalled = kubelet(&t.path().join("stalled.sock"));
    stalled.stall();
    let missing_text = format!(
        "the kubelet's pod-resources socket {} does not exist",
        missing.display()
    );
    let cases: [(&Path, ToolExit, &[&str]); 4] = [
        (
            &missing,
            ToolExit::Socket,
            &[&missing_text, "pod_resources_socket"],
        ),
        (&stale, ToolExit::Connect, &["cannot connect", "stale.sock"]),
        (
            failing.socket(),
            ToolExit::Kubelet,
            &["List on", "test kubelet failure"],
        ),
        (
            stalled.socket(),
            ToolExit::Timeout,
            &["did not answer within 300 ms"],
        ),
    ];
    for (socket, kind, needles) in cases {
        let start = Instant::now();
        let out = helper(&request(socket, "trainer", "main", 300).to_args());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(i32::from(kind.code())),
            "{kind:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{kind:?}: {out:?}");
        assert_eq!(err.lines().count(), 1, "{kind:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{kind:?}: {n:?} in {err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{kind:?}: {:?}",
            start.elapsed()
        );
    }

    let out = helper(&["--pod=x".into()]);
    assert_eq!(out.status.code(), Some(i32::from(ToolExit::Usage.code())));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--socket is required"), "{err}");
}

/// The policy's lookup (the hook's, the shim's and the NRI plugin's) asks the same kubelet
/// in-process and reduces the answer as the tool does; a kubelet that stalls costs it no more
/// than its deadline.
#[test]
fn the_policys_lookup_asks_the_kubelet_in_process() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(&t.path().join("kubelet.sock"));
    let lookup = |socket: &Path, timeout_ms: u64| PodResources {
        socket: socket.to_owned(),
        timeout: Duration::from_millis(timeout_ms),
    };
    let a = lookup(k.socket(), 2000)
        .lookup("other", "trainer", "main")
        .unwrap();
    assert_eq!(a.answered_by, Rpc::Get);
    assert_eq!(a.pods, [PodEntry::found(&[(DEMO, &["3"])])]);
    let in_process = lookup(k.socket(), 2000)
        .lookup("ml", "trainer", "main")
        .unwrap();
    assert_eq!(in_process, ask(&k, "trainer", "main"), "the tool's answer");
    k.stall();
    let start = Instant::now();
    let err = lookup(k.socket(), 300)
        .lookup("ml", "trainer", "main")
        .unwrap_err();
    assert!(matches!(err, PodResourcesError::Timeout { .. }), "{err}");
    assert!(
        err.to_string().contains("did not answer within 300 ms"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}
