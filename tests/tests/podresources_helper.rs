//! `devinject-podresources`, the helper the request policy executes, against a test kubelet
//! speaking the real v1 API: its answer for a granted container, an unknown pod and an unknown
//! container; its exit codes and messages for a missing socket, a failing kubelet, a kubelet that
//! does not answer and a bad command line; and the hook's lookup executing it as the policy does.
//! Needs no root; needs the workspace's binaries built (`cargo build --workspace --bins`).

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

fn kubelet(dir: &Path) -> FakeKubelet {
    FakeKubelet::start(
        &dir.join("kubelet.sock"),
        vec![
            pod(
                "ml",
                "trainer",
                &[("main", &[(DEMO, &["1", "0"])]), ("side", &[])],
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

fn answered(out: &Output) -> Answer {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Answer::parse(&out.stdout).unwrap()
}

/// The exit code and the one line on stderr.
fn failed(out: &Output, kind: HelperExit) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(i32::from(kind.code())), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

#[test]
fn answers_with_the_containers_devices() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    let a = answered(&helper(
        &request(k.socket(), "trainer", "main", 2000).to_args(),
    ));
    assert_eq!(a.answered_by, Rpc::Get);
    assert_eq!(
        a.pods,
        [PodEntry::Found {
            devices: [(DEMO.to_owned(), vec!["1".to_owned(), "0".to_owned()])].into()
        }]
    );
    // A container that got nothing: found, without devices.
    let a = answered(&helper(
        &request(k.socket(), "trainer", "side", 2000).to_args(),
    ));
    assert_eq!(
        a.pods,
        [PodEntry::Found {
            devices: Default::default()
        }]
    );
    assert_eq!(k.calls(), ["Get", "Get"]);
}

#[test]
fn unknown_pods_and_containers_are_told_apart() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    let a = answered(&helper(
        &request(k.socket(), "ghost", "main", 2000).to_args(),
    ));
    assert_eq!(
        a.answered_by,
        Rpc::List,
        "Get does not know it: List decides"
    );
    assert!(a.pods.is_empty(), "{a:?}");
    assert_eq!(k.calls(), ["Get", "List"]);
    let a = answered(&helper(
        &request(k.socket(), "trainer", "init", 2000).to_args(),
    ));
    assert_eq!(
        a.pods,
        [PodEntry::Missing {
            listed: vec!["main".into(), "side".into()]
        }]
    );
}

#[test]
fn failures_have_their_exit_code_and_one_line() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("pod-resources/kubelet.sock");
    let err = failed(
        &helper(&request(&missing, "trainer", "main", 2000).to_args()),
        HelperExit::Socket,
    );
    assert!(
        err.contains(&format!(
            "the kubelet's pod-resources socket {} does not exist",
            missing.display()
        )) && err.contains("pod_resources_socket"),
        "{err}"
    );

    let stale = t.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let err = failed(
        &helper(&request(&stale, "trainer", "main", 2000).to_args()),
        HelperExit::Connect,
    );
    assert!(
        err.contains("cannot connect") && err.contains("stale.sock"),
        "{err}"
    );

    let k = kubelet(t.path());
    k.fail();
    let err = failed(
        &helper(&request(k.socket(), "trainer", "main", 2000).to_args()),
        HelperExit::Kubelet,
    );
    assert!(
        err.contains("List on") && err.contains("test kubelet failure"),
        "{err}"
    );

    let out = helper(&["--pod=x".into()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--socket is required"),
        "{out:?}"
    );
}

#[test]
fn a_kubelet_that_does_not_answer_times_out() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    k.stall();
    let start = Instant::now();
    let err = failed(
        &helper(&request(k.socket(), "trainer", "main", 300).to_args()),
        HelperExit::Timeout,
    );
    assert!(err.contains("did not answer within 300 ms"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn the_hooks_lookup_executes_the_helper() {
    let t = tempfile::tempdir().unwrap();
    let k = kubelet(t.path());
    let lookup = |socket: &Path| PodResourcesHelper {
        path: Some(bin("devinject-podresources")),
        socket: socket.to_owned(),
        timeout: Duration::from_secs(2),
    };
    let a = lookup(k.socket())
        .lookup("other", "trainer", "main")
        .unwrap();
    assert_eq!(
        a.pods,
        [PodEntry::Found {
            devices: [(DEMO.to_owned(), vec!["3".to_owned()])].into()
        }]
    );
    // The kubelet's failure, in the words the hook used when it called the kubelet itself.
    let missing = t.path().join("nowhere.sock");
    let err = lookup(&missing)
        .lookup("ml", "trainer", "main")
        .unwrap_err();
    assert!(
        matches!(
            err,
            LookupError::Kubelet {
                kind: HelperExit::Socket,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        devinject_podresources::PodResourcesError::SocketMissing { path: missing }.to_string()
    );
}
