//! A container's plan as an NRI container adjustment: the nodes as devices (containerd also
//! allows each in the device cgroup), the profile's env, and the `createRuntime` hook that
//! mounts the files read-only and refreshes the linker cache, exactly as the runtime shim
//! writes them into `config.json` (both from one [`FinishInvocation`] and one
//! [`devinject_devices::env_merge`] rule). A node only its group
//! may use keeps the host's owner here; the finish hook gives it to the process's group when the
//! process lacks that one (`--group-node`): NRI's adjustment cannot add a group to the process.

use devinject_devices::{env_edits, ContainerEdits, Excerpt, FinishInvocation};

use crate::api;

/// Why a plan cannot be written as an adjustment.
#[derive(Debug, thiserror::Error)]
pub enum AdjustError {
    /// The runtime would make a node in a volume the container mounts.
    #[error(transparent)]
    NodeInVolume(#[from] devinject_devices::node_volume::NodeInVolume),
    /// NRI's adjustment has no bind mount for a node in a user namespace.
    #[error("container {} runs in a user namespace, where devices must be bind-mounted; NRI mode does not do that yet: run it with the devinject runtime (runtimeClassName: devinject)", Excerpt(.container))]
    UserNamespace { container: String },
}

/// Refuses nodes of `edits` that the runtime would make in a volume `container` mounts over
/// `/dev` or below it: the runtime makes the adjustment's nodes by path, after the container's
/// mounts (the rule is [`devinject_devices::node_volume`]).
pub fn refuse_nodes_in_volumes(
    container: &api::Container,
    edits: &ContainerEdits,
) -> Result<(), AdjustError> {
    use devinject_devices::node_volume::{check_edits, SpecMount};
    let mounts: Vec<SpecMount<'_>> = container
        .mounts
        .iter()
        .map(|m| {
            SpecMount::new(
                &m.destination,
                &m.r#type,
                m.options.iter().map(String::as_str),
            )
        })
        .collect();
    check_edits(edits, &mounts)?;
    Ok(())
}

/// The adjustment for `container`. `request_envs` are the request variables whose values are
/// replaced by the granted list (any other variable the container sets is kept); `finish` is
/// the `createRuntime` finish step, when files or group-only nodes need it.
pub fn adjustment(
    container: &api::Container,
    edits: &ContainerEdits,
    request_envs: &[&str],
    finish: Option<&FinishInvocation>,
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
    let devices = edits
        .device_nodes
        .iter()
        .map(|n| api::LinuxDevice {
            path: n.container_path.display().to_string(),
            r#type: n.kind.to_string(),
            major: i64::from(n.major),
            minor: i64::from(n.minor),
            file_mode: Some(api::OptionalFileMode { value: n.mode }),
            uid: Some(api::OptionalUInt32 { value: n.uid }),
            gid: Some(api::OptionalUInt32 { value: n.gid }),
        })
        .collect();
    let container_env = container.env.iter().map(String::as_str);
    let env = env_edits(container_env, &edits.env, request_envs)
        .into_iter()
        .map(|var| api::KeyValue {
            key: var.name.clone(),
            value: var.value.clone(),
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

/// `finish` as an NRI hook.
pub fn hook(finish: &FinishInvocation) -> api::Hook {
    api::Hook {
        path: finish.path().to_string_lossy().into_owned(),
        args: finish.argv(),
        env: finish.env(),
        timeout: Some(api::OptionalInt {
            value: i64::from(finish.timeout_secs()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use devinject_devices::{DeviceKind, DeviceNode, EnvVar, FinishArgs, HookCommand};

    use super::*;

    fn edits(mode: u32, gid: u32) -> ContainerEdits {
        ContainerEdits {
            env: vec![
                EnvVar::new("DEMO_VISIBLE_DEVICES", "0"),
                EnvVar::new("DEMO_DRIVER", "1"),
            ],
            device_nodes: vec![DeviceNode {
                host_path: PathBuf::from("/h/dev/demo/accel0"),
                container_path: PathBuf::from("/dev/demo/accel0"),
                kind: DeviceKind::Char,
                major: 10,
                minor: 237,
                mode,
                uid: 0,
                gid,
            }],
            ..ContainerEdits::default()
        }
    }

    fn container(env: &[&str]) -> api::Container {
        api::Container {
            name: "main".into(),
            env: env.iter().map(|e| e.to_string()).collect(),
            ..api::Container::default()
        }
    }

    fn mount(destination: &str, kind: &str, options: &[&str]) -> api::Mount {
        api::Mount {
            destination: destination.into(),
            r#type: kind.into(),
            source: "/var/lib/kubelet/pods/x/volumes/dir".into(),
            options: options.iter().map(|o| o.to_string()).collect(),
        }
    }

    /// containerd makes the adjustment's nodes by path after the container's mounts; a volume over
    /// the node's directory is refused, naming both.
    #[test]
    fn a_volume_over_a_node_directory_is_refused() {
        let dev = mount("/dev", "tmpfs", &["nosuid", "strictatime", "mode=755"]);
        let mut c = container(&[]);
        c.mounts = vec![dev.clone(), mount("/data", "bind", &["rbind", "rw"])];
        refuse_nodes_in_volumes(&c, &edits(0o666, 0)).unwrap();
        c.mounts = vec![dev, mount("/dev/demo", "bind", &["rbind", "rw"])];
        let err = refuse_nodes_in_volumes(&c, &edits(0o666, 0)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("/dev/demo/accel0") && text.contains("at /dev/demo"),
            "{text}"
        );
    }

    #[test]
    fn nodes_env_and_the_finish_hook_become_the_adjustment() {
        let links = FinishArgs {
            ldcache_dirs: vec![PathBuf::from("/usr/lib")],
            ..FinishArgs::default()
        };
        let hook = HookCommand::new(
            Path::new("/opt/devinject/bin/devinject-hook"),
            None,
            Path::new("/"),
        )
        .finish(links)
        .unwrap();
        let c = container(&["DEMO_VISIBLE_DEVICES=all", "DEMO_DRIVER=mine"]);
        let a = adjustment(&c, &edits(0o666, 0), &["DEMO_VISIBLE_DEVICES"], Some(&hook)).unwrap();
        let d = &a.linux.unwrap().devices[0];
        assert_eq!(
            (d.path.as_str(), d.r#type.as_str(), d.major, d.minor),
            ("/dev/demo/accel0", "c", 10, 237)
        );
        assert_eq!(d.file_mode.as_ref().map(|m| m.value), Some(0o666));
        // The request variable is replaced by the grant; the container's own DEMO_DRIVER stays.
        let env: Vec<(&str, &str)> = a
            .env
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.as_str()))
            .collect();
        assert_eq!(env, [("DEMO_VISIBLE_DEVICES", "0")]);
        let h = &a.hooks.unwrap().create_runtime[0];
        assert_eq!(h.path, "/opt/devinject/bin/devinject-hook");
        assert_eq!(
            h.args,
            ["devinject-hook", "finish", "--ldcache-dir", "/usr/lib"]
        );
        assert_eq!(h.timeout.as_ref().map(|t| t.value), Some(30));
    }

    #[test]
    fn user_namespaces_are_refused_with_the_way_out() {
        let mut c = container(&[]);
        c.linux = Some(api::LinuxContainer {
            namespaces: vec![api::LinuxNamespace {
                r#type: "user".into(),
                path: String::new(),
            }],
        });
        let e = adjustment(&c, &edits(0o666, 0), &[], None).unwrap_err();
        assert!(e.to_string().contains("runtimeClassName: devinject"), "{e}");
    }
}
