//! `devinject-podresources`, the helper the request policy executes, against a test kubelet
//! speaking the real v1 API: its answer for a granted container (NUMA-split entries merged), an
//! unknown pod and an unknown container; its exit codes and messages for a missing socket, a
//! stale one, a failing kubelet, a kubelet that does not answer and a bad command line; and the
//! hook's lookup executing it as the policy does. Needs no root; needs the workspace's binaries
//! built (`cargo build --workspace --bins`).

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use devinject_hook::policy::helper::{LookupError, PodResourcesHelper};
use devinject_hook::policy::GrantSource;
use devinject_podresources_protocol::{Answer, HelperExit, PodEntry, Request, Rpc};
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
    let cases: [(&Path, HelperExit, &[&str]); 4] = [
        (
            &missing,
            HelperExit::Socket,
            &[&missing_text, "pod_resources_socket"],
        ),
        (
            &stale,
            HelperExit::Connect,
            &["cannot connect", "stale.sock"],
        ),
        (
            failing.socket(),
            HelperExit::Kubelet,
            &["List on", "test kubelet failure"],
        ),
        (
            stalled.socket(),
            HelperExit::Timeout,
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
    assert_eq!(out.status.code(), Some(i32::from(HelperExit::Usage.code())));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--socket is required"), "{err}");
}

#[test]
fn the_hooks_lookup_executes_the_helper() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(&t.path().join("kubelet.sock"));
    let lookup = |socket: &Path| PodResourcesHelper {
        path: Some(bin("devinject-podresources")),
        socket: socket.to_owned(),
        timeout: Duration::from_secs(2),
    };
    let a = lookup(k.socket())
        .lookup("other", "trainer", "main")
        .unwrap();
    assert_eq!(a.pods, [PodEntry::found(&[(DEMO, &["3"])])]);
    // The kubelet's failure, in the words the hook used when it called the kubelet itself.
    let missing = t.path().join("nowhere.sock");
    let err = lookup(&missing)
        .lookup("ml", "trainer", "main")
        .unwrap_err();
    let LookupError::Kubelet { kind, message } = err else {
        panic!("a kubelet failure: {err}");
    };
    assert_eq!(kind, HelperExit::Socket);
    assert_eq!(
        message,
        devinject_podresources::PodResourcesError::SocketMissing { path: missing }.to_string()
    );
}
