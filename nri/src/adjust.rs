//! A container's plan as an NRI container adjustment: the nodes as devices (containerd also
//! allows each in the device cgroup), the profile's env, and the `createRuntime` hook that
//! mounts the files read-only and refreshes the linker cache, exactly as the runtime shim
//! writes them into `config.json` ([`devinject_hook::shim::spec_edit`]).

use devinject_devices::ContainerEdits;
use serde_json::Value;

use crate::api;

/// Why a plan cannot be written as an adjustment.
#[derive(Debug, thiserror::Error)]
pub enum AdjustError {
    /// NRI's adjustment has no bind mount for a node in a user namespace.
    #[error("container {container} runs in a user namespace, where devices must be bind-mounted; NRI mode does not do that yet: run it with the devinject runtime (runtimeClassName: devinject)")]
    UserNamespace {
        /// The container.
        container: String,
    },
    /// A node only its group may use, for a non-root process without that group: NRI's
    /// adjustment cannot add a group.
    #[error("container {container}: {node} is usable only by group {gid}, and NRI cannot add a group to the container's process: give the pod securityContext.supplementalGroups: [{gid}], or run it with the devinject runtime (runtimeClassName: devinject)")]
    GroupOnly {
        /// The container.
        container: String,
        /// The node.
        node: String,
        /// Its group.
        gid: u32,
    },
}

/// The adjustment for `container`. `request_envs` are the request variables whose values are
/// replaced by the granted list (any other variable the container sets is kept); `finish` is
/// the shim's `createRuntime` hook entry, when files are injected.
pub fn adjustment(
    container: &api::Container,
    edits: &ContainerEdits,
    request_envs: &[&str],
    finish: Option<&Value>,
) -> Result<api::ContainerAdjustment, AdjustError> {
    let userns = container
        .linux
        .as_ref()
        .is_some_and(|l| l.namespaces.iter().any(|n| n.r#type == "user"));
    if userns && !edits.device_nodes.is_empty() {
        return Err(AdjustError::UserNamespace {
            container: container.name.clone(),
        });
    }
    for n in &edits.device_nodes {
        let Some(gid) = n.access_group() else {
            continue;
        };
        if lacks_group(container, gid) {
            return Err(AdjustError::GroupOnly {
                container: container.name.clone(),
                node: n.container_path.display().to_string(),
                gid,
            });
        }
    }
    let devices = edits
        .device_nodes
        .iter()
        .map(|n| api::LinuxDevice {
            path: n.container_path.display().to_string(),
            r#type: n.kind.letter().to_string(),
            major: i64::from(n.major),
            minor: i64::from(n.minor),
            file_mode: Some(api::OptionalFileMode { value: n.mode }),
            uid: Some(api::OptionalUInt32 { value: n.uid }),
            gid: Some(api::OptionalUInt32 { value: n.gid }),
        })
        .collect();
    let has_key = |key: &str| {
        container
            .env
            .iter()
            .any(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) == key)
    };
    let env = edits
        .env
        .iter()
        .filter_map(|kv| {
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            // The granted list replaces what the container wrote; the profile's other
            // variables do not override the container's own.
            (request_envs.contains(&key) || !has_key(key)).then(|| api::KeyValue {
                key: key.to_owned(),
                value: value.to_owned(),
            })
        })
        .collect();
    let hooks = finish.map(|h| api::Hooks {
        prestart: Vec::new(),
        create_runtime: vec![hook(h)],
    });
    Ok(api::ContainerAdjustment {
        env,
        hooks,
        linux: Some(api::LinuxContainerAdjustment { devices }),
    })
}

/// Whether the container's process certainly cannot use a node of group `gid`: it runs as a
/// user other than root, and `gid` is neither its group nor one of its groups. Only containerd
/// 2.1 and later tell NRI plugins the user; before, nothing is known and nothing is refused
/// (a root process needs no group).
fn lacks_group(container: &api::Container, gid: u32) -> bool {
    container
        .user
        .as_ref()
        .is_some_and(|u| u.uid != 0 && u.gid != gid && !u.additional_gids.contains(&gid))
}

/// The shim's hook entry (`path`, `args`, `env`, `timeout`) as an NRI hook.
fn hook(entry: &Value) -> api::Hook {
    let strings = |key: &str| -> Vec<String> {
        entry[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    api::Hook {
        path: entry["path"].as_str().unwrap_or_default().to_owned(),
        args: strings("args"),
        env: strings("env"),
        timeout: entry["timeout"]
            .as_i64()
            .map(|value| api::OptionalInt { value }),
    }
}
