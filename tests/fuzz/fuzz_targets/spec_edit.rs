//! The shim's spec editor on any JSON `config.json`: never panics; when it succeeds, applying
//! again changes nothing and fields it does not own are kept.
#![no_main]

use std::path::{Path, PathBuf};

use devinject_devices::{
    ContainerEdits, DeviceKind, DeviceNode, EnvVar, Mount, MountKind, Symlink,
};
use devinject_oci::shim::spec_edit::{apply, finish_hook, GroupAccess};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn edits(selector: u8) -> ContainerEdits {
    let node = |n: u32| DeviceNode {
        host_path: PathBuf::from(format!("/h/dev/demo/accel{n}")),
        container_path: PathBuf::from(format!("/dev/demo/accel{n}")),
        kind: DeviceKind::Char,
        major: 10,
        minor: 230 + n,
        mode: 0o666,
        uid: 0,
        gid: 0,
    };
    let nodes: Vec<DeviceNode> = (0..u32::from(selector % 3)).map(node).collect();
    ContainerEdits {
        env: vec![
            EnvVar::new("DEMO_VISIBLE_DEVICES", "0,1"),
            EnvVar::new("DEMO_DRIVER_VERSION", "1.0"),
        ],
        cgroup_rules: nodes.iter().map(DeviceNode::rule).collect(),
        device_nodes: nodes,
        mounts: vec![Mount {
            host_path: PathBuf::from("/h/lib/libdemo.so.1.0.0"),
            container_path: PathBuf::from("/usr/lib/libdemo.so.1.0.0"),
            kind: MountKind::Library,
        }],
        symlinks: if selector & 4 != 0 {
            vec![Symlink {
                link: PathBuf::from("/usr/lib/libdemo.so.1"),
                target: "libdemo.so.1.0.0".into(),
            }]
        } else {
            vec![]
        },
        ldcache_dirs: if selector & 4 != 0 {
            vec![PathBuf::from("/usr/lib")]
        } else {
            vec![]
        },
        forward_compat: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, json)) = data.split_first() else {
        return;
    };
    let Ok(original) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let e = edits(selector);
    // Both ways of giving group-only nodes to the container, chosen by the input.
    let access = if selector & 8 == 0 {
        GroupAccess::ProcessGroups
    } else {
        GroupAccess::NodeGroup
    };
    let hook = finish_hook(Path::new("/opt/devinject/bin/devinject-hook"), None, &e, access);
    let mut once = original.clone();
    if apply(&mut once, &e, &["DEMO_VISIBLE_DEVICES"], hook.clone()).is_err() {
        return;
    }
    let mut twice = once.clone();
    apply(&mut twice, &e, &["DEMO_VISIBLE_DEVICES"], hook).expect("second apply");
    assert_eq!(twice, once, "not idempotent");
    if let (Some(o), Some(n)) = (original.as_object(), once.as_object()) {
        for (k, v) in o {
            if !matches!(k.as_str(), "linux" | "mounts" | "process" | "hooks") {
                assert_eq!(n.get(k), Some(v), "field {k} changed");
            }
        }
    }
});
