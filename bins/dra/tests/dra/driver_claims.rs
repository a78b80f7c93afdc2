//! The driver's claim handling end to end without a cluster: the real [`Driver`] reads its
//! claims from a small HTTP server that answers as the API server does, discovers devices in a
//! temporary `/dev`, runs the profile's real prepare program and writes its specs and
//! checkpoint into a temporary directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devinject_devices::{HostRoots, Profile, ProfileSet};
use devinject_dra::claim_spec::SpecContext;
use devinject_dra::driver::{Driver, DriverConfig};
use devinject_dra::prepared::{ClaimRef, Claims, Deadline};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const NODE: &str = "node-a";

/// A stand-in for the API server: answers `GET .../namespaces/<ns>/resourceclaims/<name>` with
/// the claim stored under that name, 404 otherwise, and keeps the body of each `PATCH
/// .../resourceclaims/<name>/status` (the driver's device status), answering with the claim.
#[derive(Clone, Default)]
struct ApiServer {
    claims: Arc<Mutex<BTreeMap<String, serde_json::Value>>>,
    statuses: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
}

impl ApiServer {
    async fn start(&self) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let claims = Arc::clone(&self.claims);
        let statuses = Arc::clone(&self.statuses);
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let claims = Arc::clone(&claims);
                let statuses = Arc::clone(&statuses);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 4096];
                        let Ok(n) = conn.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            let length: usize = head
                                .lines()
                                .find_map(|l| {
                                    let (k, v) = l.split_once(':')?;
                                    k.eq_ignore_ascii_case("content-length")
                                        .then(|| v.trim().parse().ok())?
                                })
                                .unwrap_or(0);
                            if buf.len() < end + 4 + length {
                                break; // the rest of the body is still to come
                            }
                            let body: Vec<u8> =
                                buf.drain(..end + 4 + length).skip(end + 4).collect();
                            let path = head.split(' ').nth(1).unwrap_or_default();
                            let path = path.split('?').next().unwrap_or_default();
                            let mut segments = path.rsplit('/');
                            let mut name = segments.next().unwrap_or_default();
                            if head.starts_with("PATCH ") && name == "status" {
                                name = segments.next().unwrap_or_default();
                                let patch = serde_json::from_slice(&body).unwrap_or_default();
                                statuses.lock().unwrap().push((name.to_owned(), patch));
                            }
                            let found = claims.lock().unwrap().get(name).cloned();
                            let (status, body) = match found {
                                Some(claim) => ("200 OK", claim.to_string()),
                                None => (
                                    "404 Not Found",
                                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                        "reason": "NotFound", "code": 404,
                                        "message": format!("resourceclaims {name:?} not found")})
                                    .to_string(),
                                ),
                            };
                            let answer = format!(
                                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                                 Content-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if conn.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        url
    }

    /// Stores claim `name` (uid `uid`) allocated device `device` of the demo pool, its opaque
    /// parameters choosing `function`.
    fn allocate(&self, name: &str, uid: &str, device: &str, function: &str) {
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": "ns", "name": name, "uid": uid},
            "spec": {"devices": {}},
            "status": {"allocation": {"devices": {
                "results": [{"request": "dev", "driver": "devinject.io",
                    "pool": format!("{NODE}/demo"), "device": device}],
                "config": [{"source": "FromClaim", "opaque": {"driver": "devinject.io",
                    "parameters": {"function": function}}}]
            }}}
        });
        self.claims.lock().unwrap().insert(name.to_owned(), claim);
    }
}

struct Node {
    _temp: tempfile::TempDir,
    root: PathBuf,
    driver: Arc<Driver>,
    config: DriverConfig,
    client: kube::Client,
}

/// Sets the node's boot id, as the kernel tells it.
fn set_boot_id(root: &Path, id: &str) {
    let file = root.join("proc/sys/kernel/random/boot_id");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, format!("{id}\n")).unwrap();
}

/// A node with two demo devices (links to `/dev/null`), a demo profile whose prepare program
/// sleeps for the function `slow` and returns at once for `fast`, and a driver asking `api`.
async fn node(api: &ApiServer) -> Node {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().to_path_buf();
    let dev = root.join("dev");
    std::fs::create_dir_all(dev.join("demo")).unwrap();
    for i in 0..2 {
        std::os::unix::fs::symlink("/dev/null", dev.join(format!("demo/accel{i}"))).unwrap();
    }
    let program = root.join("program");
    // Written and closed before any run: a file still open for writing cannot be executed.
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\necho \"$DEVINJECT_FUNCTION\" >> {}\n\
             case \"$DEVINJECT_FUNCTION\" in slow) : > {}; exec /bin/sleep 30;; esac\n\
             exit 0\n",
            root.join("runs").display(),
            root.join("slow-started").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let profile = Profile::parse(
        &format!(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\n\
             nodes = [\"demo/accel[0-9]*\"]\nid = \"index\"\n[prepare]\ncommand = [{:?}]\n\
             timeout_ms = 60000\n[[prepare.functions]]\nid = \"slow\"\n\
             [[prepare.functions]]\nid = \"fast\"\n",
            program.display().to_string()
        ),
        Path::new("demo.toml"),
    )
    .unwrap();
    let profiles = ProfileSet::from_profiles(vec![profile], Path::new("profiles")).unwrap();
    let url = api.start().await;
    devinject_apiserver::install_tls_provider();
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let config = DriverConfig {
        node: NODE.into(),
        profiles,
        roots: HostRoots {
            dev_root: dev,
            sys_root: root.join("sys"),
            proc_root: root.join("proc"),
            driver_root: root.join("driver"),
        },
        spec: SpecContext {
            driver: "devinject.io".into(),
            root: root.clone(),
            cdi_dir: PathBuf::from("/cdi"),
            hook_path: PathBuf::from("/opt/devinject/bin/devinject-hook"),
            hook_config: None,
            lib_dir: PathBuf::from("/usr/lib/x86_64-linux-gnu"),
        },
        checkpoint: root.join("plugins/devinject.io/checkpoint.json"),
        metadata_dir: PathBuf::from("/plugins/devinject.io/metadata"),
    };
    set_boot_id(&root, "boot-1");
    let driver = Arc::new(Driver::new(config.clone(), client.clone()).unwrap());
    Node {
        _temp: temp,
        root,
        driver,
        config,
        client,
    }
}

fn claim(name: &str, uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

const SLOW_UID: &str = "11111111-1111-4111-8111-111111111111";
const FAST_UID: &str = "22222222-2222-4222-8222-222222222222";

/// The same concurrency runs on the real cluster (`tests/tests/cluster/cluster_dra.rs`,
/// `a_claims_function_is_loaded_into_its_device_before_the_pod_starts`): a pod's claim is
/// prepared and its pod runs while another claim's program hangs. What the cluster cannot give,
/// this test checks, calling the driver as the kubelet does but with a deadline of its own:
/// the kubelet's deadline for a call is fixed at 45 s, so only here does the slow claim reach
/// its deadline within the test's seconds (failing alone, its program killed, no spec written,
/// the checkpoint holding only the other claim), and only here is the other claim's prepare
/// timed by itself (under a second) rather than with scheduling and a container start. The
/// stand-in API server only answers the claim reads the driver makes; a kube-apiserver of its
/// own would cost this test an etcd and a control plane's start for the same JSON.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_prepare_step_does_not_hold_up_another_claim() {
    let api = ApiServer::default();
    api.allocate("slow", SLOW_UID, "demo-0", "slow");
    api.allocate("fast", FAST_UID, "demo-1", "fast");
    let node = node(&api).await;

    // The slow claim's program sleeps far beyond its call's deadline.
    let slow_deadline = Deadline::after(Duration::from_secs(4));
    let driver = Arc::clone(&node.driver);
    let slow =
        tokio::spawn(async move { driver.prepare(claim("slow", SLOW_UID), slow_deadline).await });
    // Until the slow claim's program runs: its lock, its slot and its API read are taken.
    let started = Instant::now();
    while !program_running(&node.root) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the slow program never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The deadline the feature promises: another claim is prepared within a second meanwhile.
    let started = Instant::now();
    let devices = node
        .driver
        .prepare(
            claim("fast", FAST_UID),
            Deadline::after(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the fast claim took {took:?}"
    );
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].device_name, "demo-1");
    assert!(
        !slow.is_finished(),
        "the slow claim finished first: the test proves nothing"
    );
    let cdi = node.root.join("cdi");
    assert!(cdi
        .join(format!("k8s.devinject.io-demo_{FAST_UID}.json"))
        .is_file());

    // The slow claim fails alone, by its deadline, with its program killed, and writes nothing.
    let err = slow.await.unwrap().unwrap_err();
    assert!(
        err.starts_with(&format!("claim ns/slow ({SLOW_UID}): the prepare program "))
            && err.contains("(function slow) did not finish within the"),
        "{err}"
    );
    assert!(!cdi
        .join(format!("k8s.devinject.io-demo_{SLOW_UID}.json"))
        .exists());
    let prepared: Vec<_> = node
        .driver
        .prepared()
        .into_iter()
        .map(|e| e.claim.uid)
        .collect();
    assert_eq!(prepared, [FAST_UID]);
}

/// Waits, up to a bound far beyond what an inotify event takes, until `file` exists.
async fn wait_for(file: &Path) {
    let started = Instant::now();
    while !file.is_file() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} was not put back",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_lost_spec_of_this_boot_is_put_back_and_a_claim_of_an_earlier_boot_is_prepared_again() {
    let api = ApiServer::default();
    api.allocate("fast", FAST_UID, "demo-1", "fast");
    let node = node(&api).await;
    prepare_fast(&node.driver).await;
    let cdi = node.root.join("cdi");
    let spec = cdi.join(format!("k8s.devinject.io-demo_{FAST_UID}.json"));
    let written = std::fs::read(&spec).unwrap();
    // The request's device metadata: on the node, and mounted by the spec where Kubernetes'
    // metadata API says a pod naming the claim finds it.
    let text = String::from_utf8_lossy(&written);
    assert!(
        text.contains("\"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/fast/dev/devinject.io-metadata.json\""),
        "{text}"
    );
    let metadata = node
        .root
        .join(format!("plugins/devinject.io/metadata/{FAST_UID}_dev.json"));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&metadata).unwrap()).unwrap();
    let device = &doc["requests"][0]["devices"][0];
    assert_eq!(device["name"], "demo-1", "{doc}");
    assert_eq!(device["attributes"]["id"]["string"], "1", "{doc}");
    // The claim's device status tells what was prepared (applied once the kubelet has its
    // answer): its device, a Ready condition, and the profile, host device, CDI device and
    // what the prepare step did.
    let status = wait_status(&api, "fast").await;
    assert_eq!(status["metadata"]["uid"], FAST_UID, "{status}");
    let entry = &status["status"]["devices"][0];
    assert_eq!(entry["device"], "demo-1", "{status}");
    assert_eq!(entry["conditions"][0]["type"], "Ready", "{status}");
    assert_eq!(entry["data"]["profile"], "demo", "{status}");
    assert_eq!(entry["data"]["deviceID"], "1", "{status}");
    assert_eq!(entry["data"]["prepareStep"], "ran", "{status}");
    assert!(
        entry["data"]["cdiDeviceIDs"][0]
            .as_str()
            .is_some_and(|id| id.starts_with("k8s.devinject.io/demo=")),
        "{status}"
    );

    // Removed under the running driver: put back as it was, without a prepare call.
    let keeper = tokio::spawn(Arc::clone(&node.driver).keep_specs());
    std::fs::remove_file(&spec).unwrap();
    wait_for(&spec).await;
    assert_eq!(std::fs::read(&spec).unwrap(), written);
    // The whole directory removed: made again, the spec in it, and watched again.
    std::fs::remove_dir_all(&cdi).unwrap();
    wait_for(&spec).await;
    assert_eq!(std::fs::read(&spec).unwrap(), written);
    std::fs::remove_file(&spec).unwrap();
    wait_for(&spec).await;
    // Another file of the directory is not ours to restore: its removal puts nothing back,
    // and the keeper, past its events (inotify keeps their order), still puts ours back.
    let other = cdi.join("vendor.json");
    std::fs::write(&other, "{}").unwrap();
    std::fs::remove_file(&other).unwrap();
    std::fs::remove_file(&spec).unwrap();
    wait_for(&spec).await;
    assert_eq!(std::fs::read(&spec).unwrap(), written);
    assert!(!other.exists(), "another vendor's spec was put back");
    assert!(
        !keeper.is_finished(),
        "the keeper stopped on another file's events"
    );
    keeper.abort();

    // A driver started after a reboot (another boot id) puts back nothing of the claims
    // prepared before it: the kubelet prepares them again, their prepare steps included.
    std::fs::remove_file(&spec).unwrap();
    set_boot_id(&node.root, "boot-2");
    let rebooted = Driver::new(node.config.clone(), node.client.clone()).unwrap();
    assert_eq!(rebooted.restore_specs().await, 0);
    assert!(!spec.exists());
    // The kubelet's prepare then writes it again, its prepare step run again.
    prepare_fast(&rebooted).await;
    assert_eq!(std::fs::read(&spec).unwrap(), written);
    assert_eq!(runs(&node.root), ["fast", "fast"]);
    // After another reboot the spec is still there (a CDI directory that outlives a boot, or a
    // spec the reboot did not lose): what the step loaded is gone all the same, so the claim is
    // prepared again rather than answered from the checkpoint.
    set_boot_id(&node.root, "boot-3");
    let rebooted = Driver::new(node.config.clone(), node.client.clone()).unwrap();
    prepare_fast(&rebooted).await;
    assert_eq!(std::fs::read(&spec).unwrap(), written);
    assert_eq!(runs(&node.root), ["fast", "fast", "fast"]);
    // In the same boot, a prepare answered from the checkpoint runs nothing.
    prepare_fast(&rebooted).await;
    assert_eq!(runs(&node.root).len(), 3);
    // Unprepared: the spec and the metadata go.
    rebooted
        .unprepare(
            claim("fast", FAST_UID),
            Deadline::after(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert!(!spec.exists() && !metadata.exists());
}

/// The first device status the driver applied to claim `name`, waited for.
async fn wait_status(api: &ApiServer, name: &str) -> serde_json::Value {
    for _ in 0..100 {
        let found = api
            .statuses
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, patch)| patch.clone());
        if let Some(patch) = found {
            return patch;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no device status applied to claim {name}");
}

/// Prepares the claim `fast` as the kubelet would, with its deadline.
async fn prepare_fast(driver: &Driver) {
    driver
        .prepare(
            claim("fast", FAST_UID),
            Deadline::after(Duration::from_secs(30)),
        )
        .await
        .unwrap();
}

/// The functions the prepare program has run for, in order.
fn runs(root: &Path) -> Vec<String> {
    std::fs::read_to_string(root.join("runs"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether the slow program has started (it leaves a file before it sleeps).
fn program_running(root: &Path) -> bool {
    root.join("slow-started").exists()
}
