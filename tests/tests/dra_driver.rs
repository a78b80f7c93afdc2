//! The real `devinject-dra` binary on a simulated host, against a stand-in API server that
//! records the ResourceSlices it applies: what the driver publishes as the host changes, without
//! a cluster. Needs root for mknod: skipped with a reason locally, a failure under `CI=true`.
//! The same on a real cluster, the taint's effect on pods included, is `cluster_dra.rs`.

use std::time::{Duration, Instant};

use devinject_tests::cprog::SharedMapWriter;
use devinject_tests::kubelet::dra_process::DraProcess;
use devinject_tests::kubelet::fake_apiserver::FakeApiServer;
use devinject_tests::kubelet::host::{profile, TestHost};
use devinject_tests::skip::require_root;
use serde_json::Value;

/// Generous limit for things that involve process start-up on a loaded machine.
const SLOW: Duration = Duration::from_secs(20);
/// The health interval the test's profile sets (`discovery.health_interval_ms`).
const HEALTH_INTERVAL: Duration = Duration::from_millis(300);

/// The taints of device `name` in an applied slice; `None` when the slice lacks the device.
fn taints<'a>(slice: &'a Value, name: &str) -> Option<Vec<&'a str>> {
    let device = slice["spec"]["devices"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == name)?;
    Some(
        device["taints"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["key"].as_str()).collect())
            .unwrap_or_default(),
    )
}

/// A driver that does not call `sysfs_notify` changes its health attribute without an inotify
/// event: the driver reads it on the profile's `discovery.health_interval_ms` and applies the
/// slice with the device tainted `devinject.io/unhealthy`, then untainted, each within the
/// interval (a generous deadline of several intervals on a loaded machine). The health stream
/// reads the same inventory (`bins/dra/src/health.rs`); on a real cluster the taint's effect
/// and the pods' status need the cluster tier.
///
/// The change is a store through a `MAP_SHARED` mapping of the simulated attribute, which
/// raises no inotify event (checked here before it is relied on). What the simulation cannot
/// show: a real attribute is produced by the driver's `show` at each read, so a read may block
/// or fail as the device does, and it is on sysfs, not on the test's filesystem.
#[tokio::test]
async fn health_that_raises_no_inotify_event_taints_the_device_within_the_interval() {
    if !require_root() {
        return;
    }
    let host = TestHost::new();
    host.add_kind("demo", "", 2, |_| 0);
    host.write_profile(
        "demo",
        &profile("demo", "").replace(
            "[discovery]\n",
            &format!(
                "[discovery]\nhealth_interval_ms = {}\n",
                HEALTH_INTERVAL.as_millis()
            ),
        ),
    );
    let program = host.path("shared-map-writer");
    devinject_tests::cprog::shared_map_writer(&program).expect("build the writer");
    let attribute = host.sys_root().join("class/demo/accel0/device/health");
    let mut writer = SharedMapWriter::map(&program, &attribute).expect("map the attribute");
    let api = FakeApiServer::start().await;
    let _driver = DraProcess::spawn(&host, &api, &[]);
    let first = api
        .wait_applied(SLOW, "the demo slice", 0, |s| {
            taints(s, "demo-accel0").is_some()
        })
        .await;
    assert_eq!(taints(&first.object, "demo-accel0"), Some(vec![]));
    assert_eq!(taints(&first.object, "demo-accel1"), Some(vec![]));

    let mut inotify = inotify::Inotify::init().expect("inotify");
    inotify
        .watches()
        .add(&attribute, {
            use inotify::WatchMask as M;
            M::MODIFY | M::CLOSE_WRITE | M::ATTRIB | M::MOVE_SELF | M::DELETE_SELF
        })
        .expect("watch the attribute");
    let unhealthy = vec!["devinject.io/unhealthy"];
    for (text, expected) in [("bad", unhealthy), ("ok", vec![])] {
        let applied = api.applied().len();
        let started = Instant::now();
        writer.store(text).expect("store through the mapping");
        let mut buffer = [0u8; 1024];
        let seen: Vec<_> = match inotify.read_events(&mut buffer) {
            Ok(events) => events.map(|e| e.mask).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Vec::new(),
            Err(e) => panic!("read inotify events: {e}"),
        };
        assert_eq!(
            seen,
            [],
            "the store raised inotify events: the simulation no longer holds on this kernel"
        );
        let slice = api
            .wait_applied(
                HEALTH_INTERVAL * 10,
                &format!("demo-accel0 with taints {expected:?}"),
                applied,
                |s| taints(s, "demo-accel0").as_ref() == Some(&expected),
            )
            .await;
        assert_eq!(
            taints(&slice.object, "demo-accel1"),
            Some(vec![]),
            "the other device"
        );
        eprintln!(
            "demo-accel0 taints {expected:?} {:?} after the store (interval {HEALTH_INTERVAL:?})",
            started.elapsed()
        );
    }
}
