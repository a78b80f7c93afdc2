//! A container the plugin refuses is recorded in the node's decision log, with the same words
//! containerd is sent; one it admits, or one asking for nothing, is not.

use std::time::{Duration, Instant};

use devinject_decision_log::{last, EnginePath, Pod, Reason};
use devinject_hostconfig::{HostConfig, RequestPolicy};
use prost::Message;

use crate::api;
use crate::plugin::{Plugin, SERVICE};

fn create(plugin: &Plugin, id: &str, env: &str) -> Result<Vec<u8>, crate::plugin::Failure> {
    let req = api::CreateContainerRequest {
        pod: Some(api::PodSandbox {
            name: "web".into(),
            namespace: "shop".into(),
            uid: "5f0c-11".into(),
            ..api::PodSandbox::default()
        }),
        container: Some(api::Container {
            id: id.into(),
            name: "main".into(),
            env: vec![env.into()],
            ..api::Container::default()
        }),
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    plugin.call(SERVICE, "CreateContainer", &req.encode_to_vec(), deadline)
}

#[test]
fn a_refused_container_is_in_the_decision_log_with_the_message_containerd_got() {
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles");
    std::fs::create_dir(&profiles).unwrap();
    let kvm = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles/kvm.toml");
    std::fs::copy(kvm, profiles.join("kvm.toml")).unwrap();
    let dev = dir.path().join("dev");
    std::fs::create_dir(&dev).unwrap();
    let log = dir.path().join("decisions");
    let plugin = Plugin::new(
        HostConfig {
            profiles_dir: profiles,
            dev_root: dev,
            policy: RequestPolicy::Env,
            decision_log_dir: log.clone(),
            ..HostConfig::default()
        },
        None,
    );
    create(&plugin, "quiet", "PATH=/bin").unwrap();
    let failure = create(&plugin, "c-nri", "KVM_VISIBLE_DEVICES=9").unwrap_err();
    let decisions = last(&log, 10).unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    let d = &decisions[0];
    assert_eq!(
        (d.path, d.container.as_str(), d.profiles.as_slice()),
        (EnginePath::Nri, "c-nri", &["kvm".to_string()][..])
    );
    assert!(matches!(d.reason, Reason::Request | Reason::Host), "{d:?}");
    assert_eq!(
        d.pod,
        Pod::new("shop", "web", "5f0c-11"),
        "the pod, for its Event"
    );
    assert_eq!(failure.message, format!("devinject: {}", d.message));
}
