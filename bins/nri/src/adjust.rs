//! A container's plan as an NRI container adjustment: the nodes as devices (containerd also
//! allows each in the device cgroup), the profile's env, and the `createRuntime` hook that
//! mounts the files read-only and refreshes the linker cache, exactly as the runtime shim
//! writes them into `config.json` (both from one [`FinishInvocation`] and one
//! [`devinject_devices::env_merge`] rule). A node only its group
//! may use keeps the host's owner here; the finish hook gives it to the process's group when the
//! process lacks that one (`--group-node`): NRI's adjustment cannot add a group to the process.
//!
//! In a user namespace the runtime would bind each adjustment device from the host path equal to
//! its container path, seen there owned by nobody: the nodes are left out, their device cgroup
//! rules go in as resources, and the finish hook makes each node as a copy owned by the ids the
//! namespace maps (`--node`), as the runtime shim does. A runtime applies resource device rules
//! from NRI v0.10.0 on (containerd 2.2, CRI-O 1.34); an older one drops them, and the plugin
//! refuses such a container instead of letting it start with devices it cannot open.

use devinject_devices::{env_edits, ContainerEdits, Excerpt, FinishInvocation};

use crate::api;

/// Why a plan cannot be written as an adjustment.
#[derive(Debug, thiserror::Error)]
pub enum AdjustError {
    /// The runtime would make a node in a volume the container mounts.
    #[error(transparent)]
    NodeInVolume(#[from] devinject_devices::node_volume::NodeInVolume),
    /// The runtime's NRI drops device cgroup rules given without a node, which a container in
    /// a user namespace needs.
    #[error("container {} runs in a user namespace, where devinject gives devices as copies the container owns and device cgroup rules without nodes; this runtime ({runtime}) drops such rules, which NRI applies from v0.10.0 on (containerd 2.2, CRI-O 1.34): run the pod with the devinject runtime (runtimeClassName: devinject), or upgrade the runtime", Excerpt(.container))]
    UserNamespace {
        /// The container's name.
        container: String,
        /// The runtime, its version and its NRI's.
        runtime: String,
    },
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

/// Whether `container` has a user namespace of its own.
pub fn has_user_namespace(container: &api::Container) -> bool {
    container
        .linux
        .as_ref()
        .is_some_and(|l| l.namespaces.iter().any(|n| n.r#type == "user"))
}

/// What the runtime said of itself in `Configure`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// `containerd`, `cri-o`, ...
    pub name: String,
    /// The runtime's version (`2.1.9+unknown`, `v1.36.3`).
    pub version: String,
    /// The NRI version the runtime runs; runtimes report it from NRI v0.12 on (empty before).
    pub nri_version: String,
}

/// `major.minor` of a version such as `v0.10.0`, `2.1.9+unknown` or `1.36.3-rc.1`.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

impl RuntimeInfo {
    /// Whether the runtime applies device cgroup rules given as resources: NRI v0.10.0 and
    /// later do. A runtime that reports no NRI version is judged by its own release: containerd
    /// 2.2 and CRI-O 1.34 are the first built with NRI v0.10 (NRI's own table of runtime
    /// releases, `pkg/api/version.go`); anything else unknown is taken not to.
    pub fn applies_resource_device_rules(&self) -> bool {
        if !self.nri_version.is_empty() {
            return major_minor(&self.nri_version).is_some_and(|v| v >= (0, 10));
        }
        let first = match self.name.as_str() {
            "containerd" => (2, 2),
            "cri-o" => (1, 34),
            _ => return false,
        };
        major_minor(&self.version).is_some_and(|v| v >= first)
    }

    /// How the runtime is named in a message.
    fn described(&self) -> String {
        let nri = if self.nri_version.is_empty() {
            "NRI version not reported".to_owned()
        } else {
            format!("NRI {}", self.nri_version)
        };
        format!("{} {}, {nri}", self.name, self.version)
    }
}

/// The adjustment for `container`. `request_envs` are the request variables whose values are
/// replaced by the granted list (any other variable the container sets is kept); `finish` is
/// the `createRuntime` finish step, when files, group-only nodes or a user namespace need it;
/// `runtime` is what the runtime said of itself.
pub fn adjustment(
    container: &api::Container,
    edits: &ContainerEdits,
    request_envs: &[&str],
    finish: Option<&FinishInvocation>,
    runtime: &RuntimeInfo,
) -> Result<api::ContainerAdjustment, AdjustError> {
    let userns = has_user_namespace(container);
    if userns && !edits.device_nodes.is_empty() && !runtime.applies_resource_device_rules() {
        return Err(AdjustError::UserNamespace {
            container: container.name.clone(),
            runtime: runtime.described(),
        });
    }
    let resources = userns.then(|| api::LinuxResources {
        devices: edits
            .cgroup_rules
            .iter()
            .map(|r| api::LinuxDeviceCgroup {
                allow: true,
                r#type: r.kind.as_str().to_owned(),
                major: Some(api::OptionalInt {
                    value: i64::from(r.major),
                }),
                minor: Some(api::OptionalInt {
                    value: i64::from(r.minor),
                }),
                access: r.access.to_string(),
            })
            .collect(),
    });
    let devices = edits
        .device_nodes
        .iter()
        .filter(|_| !userns)
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
        linux: Some(api::LinuxContainerAdjustment { devices, resources }),
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
        let a = adjustment(
            &c,
            &edits(0o666, 0),
            &["DEMO_VISIBLE_DEVICES"],
            Some(&hook),
            &RuntimeInfo::default(),
        )
        .unwrap();
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

    fn user_namespaced() -> api::Container {
        let mut c = container(&[]);
        c.linux = Some(api::LinuxContainer {
            namespaces: vec![api::LinuxNamespace {
                r#type: "user".into(),
                path: String::new(),
            }],
        });
        c
    }

    fn runtime(name: &str, version: &str, nri_version: &str) -> RuntimeInfo {
        RuntimeInfo {
            name: name.into(),
            version: version.into(),
            nri_version: nri_version.into(),
        }
    }

    /// A runtime whose NRI drops resource device rules would start the container without its
    /// devices: refused, naming the runtime and the ways out.
    #[test]
    fn user_namespaces_on_an_older_nri_are_refused_with_the_way_out() {
        for old in [
            runtime("containerd", "2.1.9+unknown", ""),
            runtime("containerd", "2.3.0", "v0.9.4"),
            runtime("cri-o", "1.33.2", ""),
            runtime("other", "9.9.9", ""),
        ] {
            let e = adjustment(&user_namespaced(), &edits(0o666, 0), &[], None, &old)
                .unwrap_err()
                .to_string();
            assert!(e.contains("runtimeClassName: devinject"), "{e}");
            assert!(e.contains(&format!("{} {}", old.name, old.version)), "{e}");
        }
    }

    /// In a user namespace the nodes stay out of the adjustment (the runtime would bind the
    /// host's, owned by nobody there) and their rules go in as resources.
    #[test]
    fn user_namespaces_get_rules_without_nodes() {
        let mut e = edits(0o660, 44);
        e.cgroup_rules = vec![devinject_devices::DeviceRule::new(
            DeviceKind::Char,
            10,
            237,
            "rw".parse().unwrap(),
        )];
        let new = runtime("cri-o", "1.36.3", "");
        let a = adjustment(&user_namespaced(), &e, &[], None, &new).unwrap();
        let linux = a.linux.unwrap();
        assert!(linux.devices.is_empty(), "{:?}", linux.devices);
        let rules = linux.resources.unwrap().devices;
        assert_eq!(rules.len(), 1);
        let r = &rules[0];
        assert_eq!(
            (r.allow, r.r#type.as_str(), r.access.as_str()),
            (true, "c", "rw")
        );
        assert_eq!(
            (
                r.major.as_ref().map(|m| m.value),
                r.minor.as_ref().map(|m| m.value)
            ),
            (Some(10), Some(237))
        );
        // Outside a user namespace: nodes, and no resources, whatever the runtime.
        let old = runtime("containerd", "2.1.9", "");
        let a = adjustment(&container(&[]), &e, &[], None, &old).unwrap();
        let linux = a.linux.unwrap();
        assert_eq!(linux.devices.len(), 1);
        assert!(linux.resources.is_none());
    }

    #[test]
    fn resource_device_rules_are_applied_from_nri_0_10() {
        for (info, applied) in [
            (runtime("containerd", "2.1.9+unknown", "v0.12.2"), true),
            (runtime("containerd", "2.2.0", ""), true),
            (runtime("containerd", "v2.3.1", ""), true),
            (runtime("containerd", "2.1.9+unknown", ""), false),
            (runtime("containerd", "1.7.24", ""), false),
            (runtime("cri-o", "1.34.0", ""), true),
            (runtime("cri-o", "1.33.8", ""), false),
            (runtime("x", "1.0", "0.10.1-rc.1"), true),
            (runtime("x", "1.0", "v0.9.4"), false),
            (runtime("x", "1.0", "unknown"), false),
            (runtime("x", "99.0", ""), false),
        ] {
            assert_eq!(info.applies_resource_device_rules(), applied, "{info:?}");
        }
    }
}
