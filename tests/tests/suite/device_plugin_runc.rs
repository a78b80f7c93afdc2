//! Allocate → hook round trip: the env and annotations the real plugin returns from `Allocate`,
//! placed in a runc `config.json`, make the hook inject exactly the granted devices (real runc,
//! the simulated demo host with real device numbers, the cgroup deciding what opens).

use std::path::Path;
use std::time::Duration;

use devinject_device_plugin::api::v1beta1::ContainerAllocateResponse;
use devinject_tests::bins::bin;
use devinject_tests::kubelet::fake_kubelet::{allocate_request, FakeKubelet};
use devinject_tests::kubelet::plugin_process::PluginProcess;
use devinject_tests::probe::Report;
use devinject_tests::runc::{container_id, describe, Bundle};
use devinject_tests::sim::{
    assert_demo_granted_0_1, demo_host, demo_probe_args, without_partitions, SimHost,
};
use devinject_tests::skip::require_runc_demo;

const SLOW: Duration = Duration::from_secs(20);

/// Runs the plugin on `host`, registers it with a test kubelet and allocates `ids`.
async fn allocate(host: &SimHost, kubelet_dir: &Path, ids: &[&str]) -> ContainerAllocateResponse {
    std::fs::create_dir_all(kubelet_dir).expect("kubelet dir");
    let mut kubelet = FakeKubelet::start(kubelet_dir);
    let _plugin = PluginProcess::spawn_with(
        kubelet_dir,
        &host.profiles_dir,
        &host.dev_root,
        &host.dir.join("sys"),
        &[],
    );
    let mut reg = kubelet.next_registration(SLOW).await;
    let mut response = reg
        .client
        .allocate(allocate_request(ids))
        .await
        .expect("Allocate")
        .into_inner();
    response.container_responses.remove(0)
}

/// Puts the Allocate answer into a runc bundle with the hook, runs the probe and checks that
/// devices 0 and 1 (and nothing else) were injected.
fn run_with_answer(dir: &Path, host: &SimHost, answer: &ContainerAllocateResponse) {
    let args = demo_probe_args();
    let mut bundle = Bundle::new(&dir.join("bundle"), &args).expect("bundle");
    for (key, value) in &answer.envs {
        bundle.env(&format!("{key}={value}"));
    }
    for (key, value) in &answer.annotations {
        bundle.annotation(key, value);
    }
    bundle
        .hook("createRuntime", &bin("devinject-hook"), &host.config)
        // accel2 is present in the container but not granted.
        .bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    let out = bundle.run(&container_id("plugin")).expect("run runc");
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
}

/// One allocation of demo devices 0 and 1: how the profile shares them, the ids the kubelet asks
/// for, and the request the answer must carry in env and annotation.
struct Allocation {
    /// Names the allocation in failure messages.
    name: &'static str,
    /// A line added to the demo profile before `[discovery]` (empty: none).
    profile_line: &'static str,
    /// The ids asked for.
    ask: &'static [&'static str],
    /// `DEMO_VISIBLE_DEVICES` and `devinject.io/demo.devices` in the answer.
    request: &'static str,
}

#[tokio::test]
async fn allocate_answers_make_the_hook_inject_exactly_those_devices() {
    if !require_runc_demo() {
        return;
    }
    let allocations = [
        Allocation {
            name: "device ids",
            profile_line: "",
            ask: &["1", "0"],
            request: "0,1",
        },
        // Replica ids map back to their devices.
        Allocation {
            name: "replica ids",
            profile_line: "replicas = 2",
            ask: &["1::1", "0::0"],
            request: "0::0,1::1",
        },
    ];
    for a in allocations {
        let name = a.name;
        eprintln!("allocation: {name}");
        let t = tempfile::tempdir().expect("tempdir");
        let host = demo_host(&t.path().join("host"), &["demo"]).expect("demo host");
        if !a.profile_line.is_empty() {
            let profile = host.profiles_dir.join("demo.toml");
            let text = std::fs::read_to_string(&profile).expect("read demo profile");
            let edited = without_partitions(&text).replacen(
                "[discovery]",
                &format!("{}\n[discovery]", a.profile_line),
                1,
            );
            std::fs::write(&profile, edited).expect("write demo profile");
        }
        let answer = allocate(&host, &t.path().join("kubelet"), a.ask).await;
        assert_eq!(
            answer.envs.get("DEMO_VISIBLE_DEVICES").map(String::as_str),
            Some(a.request),
            "{name}: env"
        );
        assert_eq!(
            answer
                .annotations
                .get("devinject.io/demo.devices")
                .map(String::as_str),
            Some(a.request),
            "{name}: annotation"
        );
        run_with_answer(t.path(), &host, &answer);
    }
}
