//! The real `devinject-device-plugin` binary against a test kubelet speaking v1beta1.
//!
//! Each test builds a simulated host (nodes made with mknod, sysfs attributes, a profile), runs
//! the plugin on it and plays the kubelet. Needs root for mknod: skipped with a reason locally,
//! a failure under `CI=true`.

use std::time::{Duration, Instant};

use devinject_device_plugin::api::v1beta1::{
    ContainerPreferredAllocationRequest, PreferredAllocationRequest,
};
use devinject_kubelet::pod_resources::testing::claim_pod;
use devinject_tests::cprog::SharedMapWriter;
use devinject_tests::kubelet::fake_kubelet::{
    allocate_request, health, string_map, DeviceList, FakeKubelet, Registration,
};
use devinject_tests::kubelet::host::TestHost;
use devinject_tests::kubelet::plugin_process::PluginProcess;
use devinject_tests::podresources::FakeKubelet as PodResourcesKubelet;
use devinject_tests::scrape::{self, ANY_LOOPBACK_PORT};
use devinject_tests::skip::require_root;
use nix::sys::signal::Signal;

/// Generous limit for things that involve process start-up on a loaded machine.
const SLOW: Duration = Duration::from_secs(20);
/// The health-change budget: how soon a device's change shows in `ListAndWatch`.
const HEALTH_BUDGET: Duration = Duration::from_millis(100);

/// A host with kind `demo` (`extra` profile lines), `count` devices, NUMA node `i / 2`.
fn demo_host(extra: &str, count: usize) -> TestHost {
    let host = TestHost::new();
    host.add_kind("demo", extra, count, |i| (i / 2) as i64);
    host
}

/// Starts the kubelet and the plugin and returns the first registration.
async fn start(host: &TestHost, args: &[&str]) -> (FakeKubelet, PluginProcess, Registration) {
    let mut kubelet = FakeKubelet::start(&host.kubelet_dir());
    let plugin = PluginProcess::spawn(host, &[], args);
    let registration = kubelet.next_registration(SLOW).await;
    (kubelet, plugin, registration)
}

/// The plugin's `/metrics`, scraped over TCP from the address it logged.
fn metrics(plugin: &PluginProcess) -> String {
    scrape::from_log(&plugin.log()).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The value of `series` in `text`, naming the series and the scrape when it is absent.
fn series(text: &str, series: &str) -> f64 {
    scrape::value(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Waits for the plugin to register on a socket other than `old`, list its devices there and
/// serve that socket only.
async fn registers_anew(kubelet: &mut FakeKubelet, host: &TestHost, old: &str) -> Registration {
    let mut reg = kubelet.next_registration_not_on(old, SLOW).await;
    reg.next_list(SLOW)
        .await
        .expect("list after re-registration");
    assert_eq!(host.plugin_sockets(), [reg.request.endpoint.clone()]);
    reg
}

#[tokio::test]
async fn registers_and_lists_devices_with_topology() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 3);
    let (_kubelet, _plugin, mut reg) = start(&host, &[]).await;
    assert_eq!(reg.request.version, "v1beta1");
    assert_eq!(reg.request.resource_name, "devinject.io/demo");
    let endpoint = &reg.request.endpoint;
    assert!(
        endpoint.starts_with("devinject-demo-") && endpoint.ends_with(".sock"),
        "{endpoint}"
    );
    assert_eq!(host.plugin_sockets(), std::slice::from_ref(endpoint));
    let options = reg.request.options.expect("options sent with Register");
    assert!(options.get_preferred_allocation_available);
    assert!(!options.pre_start_required);
    assert_eq!(reg.options, options);
    let list = reg.next_list(SLOW).await.expect("first list");
    assert_eq!(
        list,
        [
            ("accel0".to_owned(), "Healthy".to_owned(), vec![0]),
            ("accel1".to_owned(), "Healthy".to_owned(), vec![0]),
            ("accel2".to_owned(), "Healthy".to_owned(), vec![1]),
        ]
    );
}

/// The way back from DRA: a plugin started while a prepared claim of devinject's DRA driver holds
/// one of its devices reads the kubelet's pod-resources before it registers, so its first
/// `ListAndWatch` already lists that device unhealthy, though the kubelet answers late; the
/// kubelet never offers the device to a container. The pod-resources service is a test double
/// here (the real kubelet cannot be made slow); the cluster tier runs the move on the real one.
#[tokio::test]
async fn a_device_a_claim_holds_is_unhealthy_in_the_first_list_though_the_kubelet_answers_late() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 2);
    let socket = host.path("pod-resources.sock");
    let pool = devinject_devices::dra_names::dra_pool("node-a", "demo");
    let device = devinject_devices::dra_names::dra_device_name("demo", "accel0").unwrap();
    let claimed = claim_pod(
        "team",
        "trainer-gpu",
        &[(
            devinject_devices::dra_names::DEFAULT_DRA_DRIVER,
            &pool,
            &device,
        )],
    );
    let pod_resources = PodResourcesKubelet::start(&socket, vec![claimed]).unwrap();
    pod_resources.delay(Duration::from_millis(500));
    let socket = socket.to_str().unwrap();
    let (_kubelet, plugin, mut reg) = start(
        &host,
        &["--node-name", "node-a", "--pod-resources-socket", socket],
    )
    .await;
    let list = reg.next_list(SLOW).await.expect("first list");
    assert_eq!(
        health(&list),
        [("accel0", "Unhealthy"), ("accel1", "Healthy")],
        "{}",
        plugin.log()
    );
    assert_eq!(pod_resources.calls().first(), Some(&"List"));
}

/// A fault the plugin must report as a health change and take back when it is undone.
struct HealthFault {
    /// Names the fault in failure messages.
    name: &'static str,
    /// Makes the fault on the host.
    make: fn(&TestHost),
    /// Undoes it.
    undo: fn(&TestHost),
    /// The devices the fault is about.
    watch: &'static [&'static str],
    /// The health of both devices while it lasts.
    faulty: [(&'static str, &'static str); 2],
}

#[tokio::test]
async fn health_faults_turn_devices_unhealthy_then_healthy_within_100ms() {
    if !require_root() {
        return;
    }
    let faults = [
        HealthFault {
            name: "device node removed and re-created",
            make: |host| host.remove_node("demo/accel1"),
            undo: |host| host.mknod("demo/accel1", 1, 3),
            watch: &["accel1"],
            faulty: [("accel0", "Healthy"), ("accel1", "Unhealthy")],
        },
        HealthFault {
            name: "sysfs health attribute",
            make: |host| host.write_sys("class/demo/accel0/device/health", "unhealthy\n"),
            undo: |host| host.write_sys("class/demo/accel0/device/health", "ok\n"),
            watch: &["accel0"],
            faulty: [("accel0", "Unhealthy"), ("accel1", "Healthy")],
        },
        HealthFault {
            name: "control node missing",
            make: |host| host.remove_node("demo/ctl"),
            undo: |host| host.mknod("demo/ctl", 1, 3),
            watch: &["accel0", "accel1"],
            faulty: [("accel0", "Unhealthy"), ("accel1", "Unhealthy")],
        },
    ];
    let healthy = [("accel0", "Healthy"), ("accel1", "Healthy")];
    for fault in faults {
        let name = fault.name;
        eprintln!("health fault: {name}");
        let host = demo_host("", 2);
        let (_kubelet, plugin, mut reg) = start(&host, &[ANY_LOOPBACK_PORT]).await;
        reg.next_list(SLOW)
            .await
            .unwrap_or_else(|| panic!("{name}: no first list"));
        // Wait for the watched devices' new health, then check the whole list.
        for (phase, change, expected) in [
            ("made", fault.make, fault.faulty),
            ("undone", fault.undo, healthy),
        ] {
            let started = Instant::now();
            change(&host);
            let watched = |l: &DeviceList| {
                let now = health(l);
                fault.watch.iter().all(|d| {
                    expected
                        .iter()
                        .filter(|(id, _)| id == d)
                        .all(|e| now.contains(e))
                })
            };
            let list = reg
                .wait_list(HEALTH_BUDGET, &format!("{name} {phase}"), watched)
                .await;
            assert_eq!(health(&list), expected, "{name} {phase}");
            eprintln!("{name} {phase}: listed after {:?}", started.elapsed());
        }
        // Each watched device went bad and came back once, and is counted so; all healthy.
        let text = metrics(&plugin);
        let r = "resource=\"devinject.io/demo\"";
        let turned = fault.watch.len() as f64;
        for (from, to) in [("healthy", "unhealthy"), ("unhealthy", "healthy")] {
            let name_ = format!(
                "devinject_device_plugin_health_transitions_total{{{r},from=\"{from}\",to=\"{to}\"}}"
            );
            assert_eq!(series(&text, &name_), turned, "{name}: {name_}");
        }
        assert_eq!(
            series(
                &text,
                &format!("devinject_device_plugin_devices{{{r},health=\"healthy\"}}")
            ),
            2.0,
            "{name}"
        );
    }
}

/// The health interval the schedule tests give their profile (`discovery.health_interval_ms`).
const HEALTH_INTERVAL: Duration = Duration::from_millis(300);

/// A host with kind `demo` and `count` devices whose profile reads health every
/// [`HEALTH_INTERVAL`].
fn scheduled_health_host(count: usize) -> TestHost {
    let host = demo_host("", count);
    host.write_profile(
        "demo",
        &devinject_tests::kubelet::host::profile("demo", "").replace(
            "[discovery]\n",
            &format!(
                "[discovery]\nhealth_interval_ms = {}\n",
                HEALTH_INTERVAL.as_millis()
            ),
        ),
    );
    host
}

/// The inotify events that would tell a watcher a file's content changed.
fn content_events() -> inotify::WatchMask {
    use inotify::WatchMask as M;
    M::MODIFY | M::CLOSE_WRITE | M::ATTRIB | M::MOVE_SELF | M::DELETE_SELF
}

/// A driver that does not call `sysfs_notify` changes its health attribute without an inotify
/// event: the plugin reads it on the profile's `discovery.health_interval_ms` and lists the
/// device Unhealthy, then Healthy again, each within the interval (a generous deadline of
/// several intervals on a loaded machine).
///
/// The change is a store through a `MAP_SHARED` mapping of the simulated attribute, which
/// raises no inotify event (checked here before it is relied on). What the simulation cannot
/// show: a real attribute is produced by the driver's `show` at each read, so a read may block
/// or fail as the device does, and it is on sysfs, not on the test's filesystem.
#[tokio::test]
async fn health_that_raises_no_inotify_event_is_read_within_the_interval() {
    if !require_root() {
        return;
    }
    let host = scheduled_health_host(2);
    let program = host.path("shared-map-writer");
    devinject_tests::cprog::shared_map_writer(&program).expect("build the writer");
    let attribute = host.sys_root().join("class/demo/accel0/device/health");
    let mut writer = SharedMapWriter::map(&program, &attribute).expect("map the attribute");
    let (_kubelet, _plugin, mut reg) = start(&host, &[]).await;
    let first = reg.next_list(SLOW).await.expect("first list");
    assert_eq!(
        health(&first),
        [("accel0", "Healthy"), ("accel1", "Healthy")]
    );
    let mut inotify = inotify::Inotify::init().expect("inotify");
    inotify
        .watches()
        .add(&attribute, content_events())
        .expect("watch the attribute");
    let deadline = HEALTH_INTERVAL * 10;
    for (text, expected) in [("bad", "Unhealthy"), ("ok", "Healthy")] {
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
        let list = reg
            .wait_list(deadline, &format!("accel0 {expected}"), |l| {
                health(l).contains(&("accel0", expected))
            })
            .await;
        assert_eq!(health(&list), [("accel0", expected), ("accel1", "Healthy")]);
        eprintln!(
            "accel0 {expected} {:?} after the store (interval {HEALTH_INTERVAL:?})",
            started.elapsed()
        );
    }
}

/// Writes to a node in a watched node directory (as every `2>/dev/null` writes to `/dev/null`
/// in `/dev`) change nothing discovery finds and wake no rescan: 100 writes at 100 a second,
/// then a device's node removed, which is one rescan.
#[tokio::test]
async fn writes_to_a_node_in_a_watched_directory_run_no_rescan() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 1);
    // Not a device of the profile (`accel[0-9]*`), in the directory its nodes are in.
    host.mknod("demo/null", 1, 3);
    let (_kubelet, plugin, mut reg) = start(&host, &[ANY_LOOPBACK_PORT]).await;
    reg.next_list(SLOW).await.expect("first list");
    let rescans = || {
        series(
            &metrics(&plugin),
            "devinject_device_plugin_rescans_total{resource=\"devinject.io/demo\"}",
        )
    };
    let before = rescans();
    let null = host.dev_root().join("demo/null");
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    for _ in 0..100 {
        pace.tick().await;
        std::fs::write(&null, "discarded").expect("write to the node");
    }
    host.remove_node("demo/accel0");
    reg.wait_list(SLOW, "accel0 unhealthy", |l| {
        health(l) == [("accel0", "Unhealthy")]
    })
    .await;
    assert_eq!(
        rescans() - before,
        1.0,
        "rescans for 100 writes and one node removed"
    );
}

#[tokio::test]
async fn hot_plugged_node_appears() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 1);
    let (_kubelet, _plugin, mut reg) = start(&host, &[]).await;
    reg.next_list(SLOW).await.expect("first list");
    host.add_device("demo", 7, 1);
    let list = reg
        .wait_list(HEALTH_BUDGET, "accel7 listed", |l| l.len() == 2)
        .await;
    assert_eq!(
        list,
        [
            ("accel0".to_owned(), "Healthy".to_owned(), vec![0]),
            ("accel7".to_owned(), "Healthy".to_owned(), vec![1]),
        ]
    );
}

#[tokio::test]
async fn kubelet_restart_re_registers_on_a_new_socket() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 2);
    let (mut kubelet, plugin, reg) = start(&host, &[ANY_LOOPBACK_PORT]).await;
    let old = reg.request.endpoint.clone();
    // The kubelet process dies, its connections with it: the plugin loses its stream, starts a
    // new socket and keeps trying to register against the dead kubelet.sock.
    kubelet.stop();
    drop(reg);
    let waiting = host
        .wait_plugin_socket(std::slice::from_ref(&old), SLOW)
        .await;
    // The new kubelet wipes every socket (the waiting one too) and serves kubelet.sock again.
    kubelet.restart();
    let mut reg = kubelet.next_registration_not_on(&old, SLOW).await;
    assert_ne!(
        reg.request.endpoint, waiting,
        "registered on a socket the kubelet deleted"
    );
    let list = reg.next_list(SLOW).await.expect("list after restart");
    assert_eq!(
        health(&list),
        [("accel0", "Healthy"), ("accel1", "Healthy")]
    );
    // The plugin serves exactly one socket, the registered one.
    assert_eq!(host.plugin_sockets(), [reg.request.endpoint.clone()]);
    // And the new registration works.
    let response = reg
        .client
        .allocate(allocate_request(&["accel1"]))
        .await
        .expect("Allocate after restart");
    assert_eq!(response.into_inner().container_responses.len(), 1);
    // Two registrations the kubelets accepted, and at least one new socket with its reason
    // (the stream lost with the old kubelet, then the socket the new one wiped).
    let text = metrics(&plugin);
    let r = "resource=\"devinject.io/demo\"";
    assert_eq!(
        series(
            &text,
            &format!("devinject_device_plugin_registrations_total{{{r}}}")
        ),
        2.0
    );
    let again: f64 = text
        .lines()
        .filter(|l| l.starts_with("devinject_device_plugin_reregistrations_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(again >= 1.0, "no re-registration counted:\n{text}");
}

/// How a registered plugin loses its registration while the kubelet process lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// The kubelet restarts with the stream still open: only the re-created kubelet.sock and the
    /// wiped plugin socket tell.
    KubeletRestartWhileConnected,
    /// The plugin's socket file is removed.
    SocketRemoved,
    /// The kubelet's end of the stream goes away; it would never dial back by itself.
    StreamLost,
}

#[tokio::test]
async fn re_registers_on_a_new_socket_after_losing_its_registration() {
    if !require_root() {
        return;
    }
    for loss in [
        Loss::KubeletRestartWhileConnected,
        Loss::SocketRemoved,
        Loss::StreamLost,
    ] {
        eprintln!("registration lost: {loss:?}");
        let host = demo_host("", 1);
        let (mut kubelet, _plugin, mut reg) = start(&host, &[]).await;
        reg.next_list(SLOW)
            .await
            .unwrap_or_else(|| panic!("{loss:?}: no first list"));
        let old = reg.request.endpoint.clone();
        // The old stream stays open unless it is what is lost.
        let _old = match loss {
            Loss::KubeletRestartWhileConnected => {
                kubelet.restart();
                Some(reg)
            }
            Loss::SocketRemoved => {
                std::fs::remove_file(host.kubelet_dir().join(&old)).expect("remove plugin socket");
                Some(reg)
            }
            Loss::StreamLost => {
                drop(reg);
                None
            }
        };
        let _new = registers_anew(&mut kubelet, &host, &old).await;
        if loss == Loss::StreamLost {
            assert!(kubelet.pending().is_empty(), "registered more than once");
        }
    }
}

#[tokio::test]
async fn sigterm_withdraws_devices_and_removes_the_socket() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 2);
    let (_kubelet, mut plugin, mut reg) = start(&host, &[]).await;
    assert_eq!(reg.next_list(SLOW).await.expect("first list").len(), 2);
    plugin.signal(Signal::SIGTERM);
    let last = reg.next_list(SLOW).await.expect("a list after SIGTERM");
    assert!(last.is_empty(), "expected an empty list, got {last:?}");
    assert!(reg.next_list(SLOW).await.is_none(), "stream should end");
    let status = plugin.wait(SLOW).await;
    assert!(status.success(), "exit status {status}");
    assert!(
        host.plugin_sockets().is_empty(),
        "{:?}",
        host.plugin_sockets()
    );
}

/// One allocate mode: the profile lines and devices it runs with, and what the plugin lists and
/// answers `Allocate` with.
struct AllocateMode {
    /// Names the mode in failure messages.
    name: &'static str,
    /// Extra profile lines.
    profile: &'static str,
    /// Devices on the host.
    count: usize,
    /// The ids of the first list.
    listed: &'static [&'static str],
    /// The ids asked for, in the kubelet's order.
    ask: &'static [&'static str],
    /// The container's env in the answer.
    envs: &'static [(&'static str, &'static str)],
    /// The container's annotations in the answer.
    annotations: &'static [(&'static str, &'static str)],
    /// The CDI devices in the answer.
    cdi_devices: &'static [&'static str],
}

#[tokio::test]
async fn allocate_modes() {
    if !require_root() {
        return;
    }
    let modes = [
        AllocateMode {
            name: "envvar",
            profile: "",
            count: 3,
            listed: &["accel0", "accel1", "accel2"],
            ask: &["accel2", "accel0"],
            envs: &[("DEMO_VISIBLE_DEVICES", "accel0,accel2")],
            annotations: &[("devinject.io/demo.devices", "accel0,accel2")],
            cdi_devices: &[],
        },
        AllocateMode {
            name: "cdi-annotations",
            profile: "allocate_mode = \"cdi-annotations\"",
            count: 2,
            listed: &["accel0", "accel1"],
            ask: &["accel1", "accel0"],
            envs: &[],
            annotations: &[(
                "cdi.k8s.io/devinject_demo",
                "devinject.io/demo=accel0,devinject.io/demo=accel1",
            )],
            cdi_devices: &[],
        },
        AllocateMode {
            name: "cdi-cri with replicas",
            profile: "allocate_mode = \"cdi-cri\"\nreplicas = 2",
            count: 2,
            listed: &["accel0::0", "accel0::1", "accel1::0", "accel1::1"],
            ask: &["accel1::1", "accel1::0"],
            envs: &[],
            annotations: &[],
            cdi_devices: &["devinject.io/demo=accel1"],
        },
    ];
    for mode in modes {
        let name = mode.name;
        eprintln!("allocate mode: {name}");
        let host = demo_host(mode.profile, mode.count);
        let (_kubelet, plugin, mut reg) = start(&host, &[ANY_LOOPBACK_PORT]).await;
        let list = reg
            .next_list(SLOW)
            .await
            .unwrap_or_else(|| panic!("{name}: no first list"));
        let ids: Vec<&str> = list.iter().map(|(id, _, _)| id.as_str()).collect();
        assert_eq!(ids, mode.listed, "{name}: listed ids");

        let response = reg
            .client
            .allocate(allocate_request(mode.ask))
            .await
            .unwrap_or_else(|e| panic!("{name}: Allocate: {e}"))
            .into_inner();
        let container = &response.container_responses[0];
        assert_eq!(container.envs, string_map(mode.envs), "{name}: envs");
        assert_eq!(
            container.annotations,
            string_map(mode.annotations),
            "{name}: annotations"
        );
        let cdi: Vec<&str> = container
            .cdi_devices
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(cdi, mode.cdi_devices, "{name}: CDI devices");
        assert!(
            container.devices.is_empty() && container.mounts.is_empty(),
            "{name}: devices and mounts are the runtime's to add"
        );

        let refused = reg
            .client
            .allocate(allocate_request(&[mode.ask[0], "accel9"]))
            .await
            .expect_err("unknown id must be refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{name}");
        assert!(
            refused.message().contains("accel9"),
            "{name}: {}",
            refused.message()
        );

        // Scraped as Prometheus would: one allocation, one refusal for its reason (the id it
        // named is no label), both timed; the build, the registration and the devices.
        let text = metrics(&plugin);
        let r = "resource=\"devinject.io/demo\"";
        for (name_, want) in [
            (format!("devinject_device_plugin_allocations_total{{{r}}}"), 1.0),
            (
                format!("devinject_device_plugin_allocation_refusals_total{{{r},reason=\"unknown_device\"}}"),
                1.0,
            ),
            (format!("devinject_device_plugin_allocate_duration_seconds_count{{{r}}}"), 2.0),
            (format!("devinject_device_plugin_registrations_total{{{r}}}"), 1.0),
            (
                format!("devinject_device_plugin_devices{{{r},health=\"healthy\"}}"),
                mode.count as f64,
            ),
        ] {
            assert_eq!(series(&text, &name_), want, "{name}: {name_}");
        }
        assert!(
            text.contains(&format!(
                "devinject_build_info{{component=\"device-plugin\",version=\"{}\"}} 1\n",
                env!("CARGO_PKG_VERSION")
            )),
            "{name}:\n{text}"
        );
        assert!(
            !text.contains("accel9"),
            "{name}: a device id as a label:\n{text}"
        );
    }
}

/// The refusals the hook, the shim and the NRI plugin append to the node's decision log while
/// the plugin runs are counted by path and reason at the next scrape; what was there before it
/// started is not.
#[tokio::test]
async fn counts_the_refusals_the_node_recorded_in_its_decision_log() {
    use devinject_decision_log::{record, Decision, EnginePath, Reason};
    if !require_root() {
        return;
    }
    let host = demo_host("", 1);
    let log = tempfile::tempdir().expect("tempdir");
    let refusal = |path, reason| Decision::now(path, "c0ffee", vec!["demo".into()], reason, "no");
    record(log.path(), &refusal(EnginePath::Shim, Reason::Policy)).expect("record");
    let dir_arg = format!("--decision-log-dir={}", log.path().display());
    let (_kubelet, plugin, _reg) = start(&host, &[ANY_LOOPBACK_PORT, &dir_arg]).await;
    let policy = "devinject_node_refusals_total{path=\"shim\",reason=\"policy\"}";
    assert_eq!(series(&metrics(&plugin), policy), 0.0);
    record(log.path(), &refusal(EnginePath::Shim, Reason::Policy)).expect("record");
    record(log.path(), &refusal(EnginePath::Hook, Reason::Request)).expect("record");
    // Counted on the plugin's own thread, woken by inotify: at a scrape soon after.
    let hook = "devinject_node_refusals_total{path=\"hook\",reason=\"request\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = metrics(&plugin);
    while series(&text, hook) < 1.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        text = metrics(&plugin);
    }
    assert_eq!(series(&text, policy), 1.0);
    assert_eq!(series(&text, hook), 1.0);
    assert!(
        !text.contains("c0ffee"),
        "a container id as a label:\n{text}"
    );
}

/// Available ids, must-include ids, size, expected answer.
type PreferredCase = (
    &'static [&'static str],
    &'static [&'static str],
    i32,
    &'static [&'static str],
);

#[tokio::test]
async fn preferred_allocation_keeps_a_numa_node_whole() {
    if !require_root() {
        return;
    }
    // accel0, accel1 on NUMA 0; accel2, accel3 on NUMA 1.
    let host = demo_host("", 4);
    let (_kubelet, _plugin, mut reg) = start(&host, &[]).await;
    let ask = |available: &[&str], must: &[&str], size| PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_i_ds: available.iter().map(|s| (*s).to_owned()).collect(),
            must_include_device_i_ds: must.iter().map(|s| (*s).to_owned()).collect(),
            allocation_size: size,
        }],
    };
    let cases: [PreferredCase; 3] = [
        // accel0 is taken: the single device goes to NUMA 0, keeping NUMA 1 whole.
        (&["accel3", "accel2", "accel1"], &[], 1, &["accel1"]),
        (
            &["accel1", "accel2", "accel3"],
            &[],
            2,
            &["accel2", "accel3"],
        ),
        (
            &["accel0", "accel1", "accel2", "accel3"],
            &["accel2"],
            2,
            &["accel2", "accel3"],
        ),
    ];
    for (available, must, size, expected) in cases {
        let response = reg
            .client
            .get_preferred_allocation(ask(available, must, size))
            .await
            .expect("GetPreferredAllocation")
            .into_inner();
        assert_eq!(
            response.container_responses[0].device_i_ds, expected,
            "available {available:?}, must {must:?}, size {size}"
        );
    }
    let refused = reg
        .client
        .get_preferred_allocation(ask(&["accel0", "nope"], &[], 1))
        .await
        .expect_err("unknown id");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn serves_several_profiles_each_on_its_own_socket() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 1);
    host.add_kind("other", "", 2, |_| 0);
    // A profile without devices is not served unless named.
    host.write_profile(
        "absent",
        &devinject_tests::kubelet::host::profile("absent", ""),
    );
    let (mut kubelet, _plugin, first) = start(&host, &[]).await;
    let second = kubelet.next_registration(SLOW).await;
    let mut resources = [
        first.request.resource_name.clone(),
        second.request.resource_name.clone(),
    ];
    resources.sort();
    assert_eq!(resources, ["devinject.io/demo", "devinject.io/other"]);
    assert_ne!(first.request.endpoint, second.request.endpoint);
    assert_eq!(host.plugin_sockets().len(), 2);
}

#[tokio::test]
async fn named_profile_is_served_before_its_devices_appear() {
    if !require_root() {
        return;
    }
    let host = TestHost::new();
    host.write_profile("demo", &devinject_tests::kubelet::host::profile("demo", ""));
    let mut kubelet = FakeKubelet::start(&host.kubelet_dir());
    let _plugin = PluginProcess::spawn(&host, &["demo"], &[]);
    let mut reg = kubelet.next_registration(SLOW).await;
    assert!(reg.next_list(SLOW).await.expect("first list").is_empty());
    host.mknod("demo/ctl", 1, 3);
    host.add_device("demo", 0, 0);
    reg.wait_list(SLOW, "accel0 appears", |l| {
        health(l) == [("accel0", "Healthy")]
    })
    .await;
}

#[tokio::test]
async fn registers_when_the_kubelet_starts_after_the_plugin() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 1);
    let _plugin = PluginProcess::spawn(&host, &[], &[]);
    // The plugin serves its socket, finds no kubelet, and waits for kubelet.sock.
    host.wait_plugin_socket(&[], SLOW).await;
    let mut kubelet = FakeKubelet::start(&host.kubelet_dir());
    let mut reg = kubelet.next_registration(SLOW).await;
    reg.next_list(SLOW).await.expect("first list");
}

#[tokio::test]
async fn json_logs() {
    if !require_root() {
        return;
    }
    let host = demo_host("", 1);
    let (_kubelet, mut plugin, _reg) = start(&host, &["--log-format", "json"]).await;
    plugin.signal(Signal::SIGTERM);
    assert!(plugin.wait(SLOW).await.success());
    let log = plugin.log();
    let lines: Vec<&str> = log.lines().collect();
    assert!(!lines.is_empty());
    for line in lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            value["level"].is_string() && value["fields"].is_object(),
            "{line}"
        );
    }
    assert!(log.contains("\"message\":\"serving\""), "{log}");
}

#[tokio::test]
async fn unknown_profile_exits_with_code_3() {
    let host = TestHost::new();
    host.write_profile("demo", &devinject_tests::kubelet::host::profile("demo", ""));
    let mut plugin = PluginProcess::spawn(&host, &["nope"], &[]);
    let status = plugin.wait(SLOW).await;
    assert_eq!(status.code(), Some(3), "{}", plugin.log());
    assert!(plugin.log().contains("\"nope\""), "{}", plugin.log());
}

#[tokio::test]
async fn configuration_errors_exit_with_code_3() {
    let host = TestHost::new();
    host.write_profile("demo", "name = \"demo\"\nresourze = \"x\"\n");
    let mut plugin = PluginProcess::spawn(&host, &[], &[]);
    let status = plugin.wait(SLOW).await;
    assert_eq!(status.code(), Some(3), "{}", plugin.log());
    assert!(plugin.log().contains("resourze"), "{}", plugin.log());
}

/// A USB device at `port` of bus 2 with `ids` (`vendor`, `product`) and device number `devnum`,
/// as the kernel shows it: its node `bus/usb/002/<devnum>` (char 189), its sysfs directory with
/// the ids, and the `/sys/dev/char` link to it.
fn plug_usb(host: &TestHost, port: &str, (vendor, product): (&str, &str), devnum: u64) {
    let dir = format!("devices/pci0000:00/0000:00:14.0/usb2/{port}");
    host.write_sys(&format!("{dir}/idVendor"), &format!("{vendor}\n"));
    host.write_sys(&format!("{dir}/idProduct"), &format!("{product}\n"));
    let minor = 128 + devnum - 1;
    let link = host.sys_root().join(format!("dev/char/189:{minor}"));
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(format!("../../{dir}"), &link).unwrap();
    host.mknod(&format!("bus/usb/002/{devnum:03}"), 189, minor);
}

/// The USB device at `port` with number `devnum` gone: its node, link and directory.
fn unplug_usb(host: &TestHost, port: &str, devnum: u64) {
    host.remove_node(&format!("bus/usb/002/{devnum:03}"));
    let minor = 128 + devnum - 1;
    std::fs::remove_file(host.sys_root().join(format!("dev/char/189:{minor}"))).unwrap();
    std::fs::remove_dir_all(
        host.sys_root()
            .join(format!("devices/pci0000:00/0000:00:14.0/usb2/{port}")),
    )
    .unwrap();
}

/// The shipped coral-usb profile on a simulated USB bus: the accelerator plugged in before its
/// firmware (`1a6e:089a`) is listed by its port, a keyboard plugged in beside it never is; when
/// the accelerator leaves it stays listed, unhealthy (as an unplugged device of any profile), and
/// when it comes back under Google's id and another number (its firmware loaded) it is the same
/// device, healthy again.
#[tokio::test]
async fn a_usb_device_is_listed_by_its_port_through_hot_plug_and_re_enumeration() {
    if !require_root() {
        return;
    }
    let host = TestHost::new();
    let shipped =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/coral-usb.toml");
    host.write_profile("coral-usb", &std::fs::read_to_string(shipped).unwrap());
    std::fs::create_dir_all(host.dev_root().join("bus/usb")).unwrap();
    // Served by name: no USB device is plugged in yet.
    let (_kubelet, _plugin, mut reg) = start(&host, &["--profile", "coral-usb"]).await;
    assert_eq!(reg.request.resource_name, "coral.ai/usb-tpu");
    let port = |health: &str| vec![("2-1".to_owned(), health.to_owned())];
    let seen = |l: &DeviceList| -> Vec<(String, String)> {
        l.iter()
            .map(|(id, health, _)| (id.clone(), health.clone()))
            .collect()
    };
    reg.next_list(SLOW).await.expect("first list");
    plug_usb(&host, "2-2", ("046d", "c31c"), 2);
    plug_usb(&host, "2-1", ("1a6e", "089a"), 3);
    let list = reg
        .wait_list(SLOW, "the accelerator listed", |l| !l.is_empty())
        .await;
    assert_eq!(seen(&list), port("Healthy"));
    unplug_usb(&host, "2-1", 3);
    let list = reg
        .wait_list(SLOW, "the accelerator unhealthy", |l| {
            seen(l) != port("Healthy")
        })
        .await;
    assert_eq!(seen(&list), port("Unhealthy"));
    plug_usb(&host, "2-1", ("18d1", "9302"), 4);
    let list = reg
        .wait_list(SLOW, "the accelerator back", |l| {
            seen(l) != port("Unhealthy")
        })
        .await;
    assert_eq!(seen(&list), port("Healthy"));
}

/// One bad device never fails another: when device 1's own node (`demo/dma1`, a per-device
/// node its profile requires) goes, device 1 is withdrawn and reported unhealthy while device 0
/// stays healthy and allocatable; back, both are healthy.
#[tokio::test]
async fn a_device_missing_its_own_node_is_withdrawn_alone() {
    if !require_root() {
        return;
    }
    let host = demo_host("[[device_nodes]]\npath = \"demo/dma{n}\"", 2);
    host.mknod("demo/dma0", 1, 3);
    host.mknod("demo/dma1", 1, 3);
    let (_kubelet, _plugin, mut reg) = start(&host, &[]).await;
    let both = |health: [&str; 2]| {
        vec![
            ("accel0".to_owned(), health[0].to_owned(), vec![0]),
            ("accel1".to_owned(), health[1].to_owned(), vec![0]),
        ]
    };
    let list = reg.next_list(SLOW).await.expect("first list");
    assert_eq!(list, both(["Healthy", "Healthy"]));
    host.remove_node("demo/dma1");
    let list = reg
        .wait_list(SLOW, "accel1 withdrawn", |l| {
            *l != both(["Healthy", "Healthy"])
        })
        .await;
    assert_eq!(list, both(["Healthy", "Unhealthy"]));
    let response = reg
        .client
        .allocate(allocate_request(&["accel0"]))
        .await
        .expect("Allocate of the healthy device")
        .into_inner();
    assert_eq!(response.container_responses.len(), 1);
    host.mknod("demo/dma1", 1, 3);
    let list = reg
        .wait_list(SLOW, "accel1 back", |l| {
            *l != both(["Healthy", "Unhealthy"])
        })
        .await;
    assert_eq!(list, both(["Healthy", "Healthy"]));
}
