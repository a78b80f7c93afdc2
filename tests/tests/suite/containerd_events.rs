//! The CRI client's wait on containerd's container events (`GetContainerEvents`, containerd
//! 1.7 and 2.x), which `devinject-cri-bench` times container starts with: each wait must end on
//! its own container's stop, with that container's exit code, also when another container
//! stopped first and its event was read on the way.
//!
//! The releases come from scripts/runtimes-fetch.sh (run by scripts/test.sh). Needs root, runc
//! and busybox; skipped otherwise (fails under `CI=true`).

use std::time::{Duration, Instant};

use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::cri_release::{ready, Paths, ReleaseNode};

/// A busybox container named `name` running `script`.
fn shell(name: &str, script: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        image: BUSYBOX.into(),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        log_path: format!("{name}.log"),
        ..ContainerSpec::default()
    }
}

fn waits_end_on_their_own_container(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let mut node =
        ReleaseNode::start(&release, &Paths::default()).unwrap_or_else(|e| panic!("{e:#}"));
    node.cri.follow_events().expect("follow events");
    let (pod, config) = node.pod("events", "").unwrap_or_else(|e| panic!("{e:#}"));
    let cri = &mut node.cri;
    let slow = cri
        .create_container(&pod, &shell("slow", "sleep 1; exit 4").config(), &config)
        .expect("create slow");
    let quick = cri
        .create_container(&pod, &shell("quick", "exit 3").config(), &config)
        .expect("create quick");
    let start = Instant::now();
    cri.start_container(&slow).expect("start slow");
    cri.start_container(&quick).expect("start quick");
    let deadline = Duration::from_secs(20);
    let status = cri.wait_exited(&slow, deadline).expect("slow exits");
    assert_eq!(
        status.exit_code, 4,
        "the wait for `slow` ended on another container"
    );
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "the wait for `slow` ended after {:?}, before it could have exited",
        start.elapsed()
    );
    // `quick` stopped first: its event was read while waiting for `slow`.
    let status = cri
        .wait_exited(&quick, deadline)
        .expect("quick's stop, read earlier");
    assert_eq!(status.exit_code, 3);
    for id in [slow, quick] {
        cri.remove_container(&id).expect("remove");
    }
}

#[test]
fn containerd_1_7_reports_each_containers_stop() {
    waits_end_on_their_own_container("1.7");
}

#[test]
fn containerd_2_reports_each_containers_stop() {
    waits_end_on_their_own_container("2");
}
