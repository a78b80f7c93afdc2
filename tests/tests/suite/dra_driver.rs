//! The real `devinject-dra` binary against a stand-in API server (`FakeApiServer`) and a test
//! kubelet's pod-resources service: what the driver publishes when it starts, where the cluster
//! tier's real kubelet cannot be made to behave so (answering late).

use std::time::Duration;

use devinject_devices::dra_names::{dra_device_name, DEFAULT_DRA_DRIVER};
use devinject_tests::kubelet::dra_process::DraProcess;
use devinject_tests::kubelet::fake_apiserver::FakeApiServer;
use devinject_tests::kubelet::host::TestHost;
use devinject_tests::podresources::{pod, FakeKubelet as PodResourcesKubelet};
use devinject_tests::skip::require_root;

const SLOW: Duration = Duration::from_secs(20);

/// A node moving from the device plugin to DRA: the driver starts while a running pod holds a
/// device the plugin gave it. It reads the kubelet's grants before it publishes, so its first
/// ResourceSlice already carries that device tainted by the pod, though the kubelet answers
/// late: the scheduler never sees the device free.
#[tokio::test]
async fn a_device_the_plugin_gave_is_tainted_in_the_first_slice_though_the_kubelet_answers_late() {
    if !require_root() {
        return;
    }
    let host = TestHost::new();
    host.add_kind("demo", "", 2, |_| 0);
    // Where the driver's arguments (`dra_process::node_dir_args`) look for the kubelet.
    std::fs::create_dir_all(host.path("pod-resources")).unwrap();
    let pods = PodResourcesKubelet::start(
        &host.path("pod-resources/kubelet.sock"),
        vec![pod(
            "team",
            "trainer",
            &[("main", &[("devinject.io/demo", &["accel0"])])],
        )],
    )
    .unwrap();
    pods.delay(Duration::from_millis(500));
    let api = FakeApiServer::start().await;
    let driver = DraProcess::spawn(&host, &api, &[]);
    let first = api
        .wait_applied(SLOW, "the driver's first ResourceSlice", 0, |o| {
            o["kind"] == "ResourceSlice"
        })
        .await;
    let taints_of = |id: &str| {
        let name = dra_device_name("demo", id).unwrap();
        first.object["spec"]["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} in {}\n{}", first.object, driver.log()))["taints"]
            .clone()
    };
    let held = taints_of("accel0");
    let key = format!(
        "{DEFAULT_DRA_DRIVER}/{}",
        devinject_dra::slices::PLUGIN_HELD_TAINT
    );
    assert!(
        held.as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == key.as_str()
                && t["value"] == "team.trainer"
                && t["effect"] == "NoSchedule"),
        "the held device tainted in the first slice: {held}\n{}",
        driver.log()
    );
    assert!(taints_of("accel1").is_null(), "{}", first.object);
    assert_eq!(pods.calls().first(), Some(&"List"));
}
