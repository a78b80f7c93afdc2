//! The node the tests of the driver's parts run on: a temporary host root holding demo devices
//! (links to `/dev/null`) with a health attribute each, the profiles of them, a boot id, and a
//! driver whose API server refuses every connection: the parts tested here never ask it, or
//! are tested for how they fail when it does not answer.

use std::path::{Path, PathBuf};

use devinject_devices::{HostRoots, Profile, ProfileSet};
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;

use super::{Driver, DriverConfig};
use crate::checkpoint::ClaimEntry;
use crate::claim::{self, Allocation};
use crate::claim_spec::SpecContext;
use crate::prepared::ClaimRef;

/// The node's name.
pub(super) const NODE: &str = "node-a";
/// The driver's name.
pub(super) const DRIVER: &str = "devinject.io";
/// The claim most tests prepare.
pub(super) const UID: &str = "11111111-1111-4111-8111-111111111111";
/// Another claim, whose files must survive what is done to [`UID`]'s.
pub(super) const OTHER_UID: &str = "22222222-2222-4222-8222-222222222222";
/// The boot the node is in.
pub(super) const BOOT: &str = "boot-1";

/// A profile `name` of the devices `<name>/accel<n>`, ids by index, health read from
/// `class/<name>/accel<n>/health`; `top` goes before its tables, `tables` after them.
pub(super) fn profile_text(name: &str, top: &str, tables: &str) -> String {
    format!(
        "name = \"{name}\"\nresource = \"devinject.io/{name}\"\n{top}[discovery]\n\
         nodes = [\"{name}/accel[0-9]*\"]\nid = \"index\"\n\
         health_sysfs = \"class/{name}/{{name}}/health\"\n{tables}"
    )
}

/// The demo profile, `top` before its tables and `tables` after them.
pub(super) fn demo(top: &str, tables: &str) -> String {
    profile_text("demo", top, tables)
}

/// A prepare step of `/bin/true` with the functions `fast` and `slow`.
pub(super) const PREPARE: &str = "[prepare]\ncommand = [\"/bin/true\"]\ntimeout_ms = 5000\n\
     [[prepare.functions]]\nid = \"fast\"\n[[prepare.functions]]\nid = \"slow\"\n";

/// A node and the driver serving it.
pub(super) struct Node {
    _temp: tempfile::TempDir,
    /// The host root.
    pub(super) root: PathBuf,
    pub(super) driver: Driver,
}

impl Node {
    /// The CDI directory, on the host.
    pub(super) fn cdi(&self) -> PathBuf {
        self.root.join("cdi")
    }

    /// The device metadata directory, on the host.
    pub(super) fn metadata_dir(&self) -> PathBuf {
        self.root.join("plugins/devinject.io/metadata")
    }
}

/// A node with `devices` healthy devices of each profile in `profiles` (texts), in boot
/// [`BOOT`]. Makes the driver's API client, so it runs inside a Tokio runtime.
pub(super) fn node(profiles: &[String], devices: usize) -> Node {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().to_path_buf();
    let mut parsed = Vec::new();
    for text in profiles {
        let profile = Profile::parse(text, Path::new("profile.toml")).unwrap();
        let name = profile.name.as_str().to_owned();
        std::fs::create_dir_all(root.join("dev").join(&name)).unwrap();
        for i in 0..devices {
            std::os::unix::fs::symlink("/dev/null", root.join(format!("dev/{name}/accel{i}")))
                .unwrap();
            set_health(&root, &name, i, "ok");
        }
        parsed.push(profile);
    }
    let file = root.join("proc/sys/kernel/random/boot_id");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, format!("{BOOT}\n")).unwrap();
    let config = DriverConfig {
        node: NODE.into(),
        profiles: ProfileSet::from_profiles(parsed, Path::new("profiles")).unwrap(),
        roots: HostRoots {
            dev_root: root.join("dev"),
            sys_root: root.join("sys"),
            proc_root: root.join("proc"),
            driver_root: root.join("driver"),
        },
        spec: SpecContext {
            driver: DRIVER.into(),
            root: root.clone(),
            cdi_dir: PathBuf::from("/cdi"),
            hook_path: PathBuf::from("/opt/devinject/bin/devinject-hook"),
            hook_config: None,
            lib_dir: PathBuf::from("/usr/lib/x86_64-linux-gnu"),
        },
        checkpoint: root.join("plugins/devinject.io/checkpoint.json"),
        metadata_dir: PathBuf::from("/plugins/devinject.io/metadata"),
    };
    let driver = Driver::new(config, unreachable_api()).unwrap();
    Node {
        _temp: temp,
        root,
        driver,
    }
}

/// A client of an API server that refuses every connection (nothing listens on port 1).
pub(super) fn unreachable_api() -> kube::Client {
    devinject_apiserver::install_tls_provider();
    kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap()
}

/// Writes the health attribute of device `<profile>/accel<index>`.
pub(super) fn set_health(root: &Path, profile: &str, index: usize, health: &str) {
    let dir = root.join(format!("sys/class/{profile}/accel{index}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("health"), format!("{health}\n")).unwrap();
}

/// The claim `ns/claim` of `uid`, as the kubelet names it.
pub(super) fn claim_ref(uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ns".into(),
        name: "claim".into(),
        uid: uid.into(),
    }
}

/// One allocation result of the driver: `device` of `pool` for request `request`.
pub(super) fn result(request: &str, pool: &str, device: &str) -> serde_json::Value {
    json!({"request": request, "driver": DRIVER, "pool": pool, "device": device})
}

/// The claim `ns/claim` of `uid`, allocated `results`, its opaque parameters choosing
/// `function` for every request when one is given.
pub(super) fn claim_object(
    uid: &str,
    results: Vec<serde_json::Value>,
    function: Option<&str>,
) -> ResourceClaim {
    let config: Vec<serde_json::Value> = function
        .map(|f| {
            json!({"source": "FromClaim", "opaque": {"driver": DRIVER,
                "parameters": {"function": f}}})
        })
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ns", "name": "claim", "uid": uid, "generation": 1},
        "spec": {"devices": {}},
        "status": {"allocation": {"devices": {"results": results, "config": config}}}
    }))
    .unwrap()
}

/// The allocation of `object` as the driver of `node` reads it.
pub(super) fn allocation(node: &Node, object: &ResourceClaim) -> Allocation {
    let uid = object.metadata.uid.clone().unwrap();
    claim::read(object, &uid, DRIVER, &node.driver.pools()).unwrap()
}

/// Claim `uid` prepared on `node` as the kubelet's prepare leaves it, but for its programs:
/// planned with `results`, its files written and its entry saved. Returns the entry.
pub(super) async fn prepared(
    node: &Node,
    uid: &str,
    results: Vec<serde_json::Value>,
) -> ClaimEntry {
    let entry = written(node, uid, results);
    node.driver.save(uid, Some(entry.clone())).await.unwrap();
    entry
}

/// Claim `uid`'s files written on `node` as a prepare writes them, its entry not saved.
pub(super) fn written(node: &Node, uid: &str, results: Vec<serde_json::Value>) -> ClaimEntry {
    let object = claim_object(uid, results, None);
    let allocation = allocation(node, &object);
    let mut requests = Default::default();
    let mut plans = node
        .driver
        .plan("the claim", uid, &allocation, &mut requests, false)
        .unwrap();
    let metadata = node.driver.metadata(&object, requests).unwrap();
    let mounts: Vec<_> = metadata.iter().map(|(_, m)| m.clone()).collect();
    for plan in &mut plans {
        crate::claim_spec::mount_metadata(
            &mut plan.spec,
            uid,
            &mounts,
            &node.driver.config.metadata_dir,
        );
    }
    node.driver.write(&claim_ref(uid), plans, metadata).unwrap()
}
