//! The injection plan: container edits in the shape of a CDI spec.
//!
//! A plan is data only. The hook applies it in the container's mount namespace, the runtime shim
//! writes it into `config.json`, and the CDI exporter writes it as a CDI spec. Fields mirror CDI's
//! `containerEdits` (env, deviceNodes, mounts, hooks) plus the cgroup rules that the OCI spec's
//! `linux.resources.devices` or the hook's cgroup writer need.

use std::path::PathBuf;

use devinject_device_rule::DeviceRule;
use serde::Serialize;

use crate::forward_compat::ForwardCompat;
use crate::names::{DeviceId, ProfileName};
use crate::node::DeviceNode;

/// Prefix of every annotation devinject reads or writes.
pub const ANNOTATION_PREFIX: &str = "devinject.io/";

/// A variable the plan sets in the container's env: typed, so that no consumer splits a
/// `NAME=value` string again (the NRI adjustment wants them apart, OCI and CDI together).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvVar {
    /// The variable's name (a profile's `[env]` key or request variable: never holds `=`).
    pub name: String,
    /// Everything after the first `=`, which may be empty.
    pub value: String,
}

impl EnvVar {
    /// `name=value`.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }

    /// The `NAME=value` entry of an OCI `process.env` or a CDI `env` list.
    pub fn entry(&self) -> String {
        format!("{}={}", self.name, self.value)
    }
}

/// A bind mount of a host file into the container (always read-only, nosuid, nodev).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// The host file.
    pub host_path: PathBuf,
    /// Where it appears in the container.
    pub container_path: PathBuf,
    /// What it is, for logs and for choosing container locations.
    pub kind: MountKind,
}

/// What a mount carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MountKind {
    /// A shared library in the container's lib dir.
    Library,
    /// An executable in the container's bin dir.
    Binary,
    /// Any other file.
    File,
}

impl Mount {
    /// The OCI mount options every injected file gets.
    pub const OPTIONS: [&'static str; 5] = ["ro", "nosuid", "nodev", "rbind", "rprivate"];
}

/// A symlink to create in the container, e.g. a soname link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Symlink {
    /// The link's absolute path in the container.
    pub link: PathBuf,
    /// What it points to (a file name in the same directory).
    pub target: String,
}

/// Edits to one container, CDI-shaped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ContainerEdits {
    /// Variables to set in the process env.
    pub env: Vec<EnvVar>,
    /// Device nodes to create.
    pub device_nodes: Vec<DeviceNode>,
    /// Files to bind-mount read-only.
    pub mounts: Vec<Mount>,
    /// Soname links to create among the injected libraries: work a spec cannot express, done
    /// by our finish hook (CDI would call it a hook).
    pub symlinks: Vec<Symlink>,
    /// Directories of injected libraries the container's linker cache must learn about: work
    /// for our finish hook too.
    pub ldcache_dirs: Vec<PathBuf>,
    /// The image's newer driver libraries to prefer in the linker cache, when the profile has
    /// such and its deciding library is injected ([`crate::forward_compat`]): work for our
    /// finish hook.
    pub forward_compat: Option<ForwardCompat>,
    /// Device cgroup rules (one per node).
    pub cgroup_rules: Vec<DeviceRule>,
}

impl ContainerEdits {
    /// The groups a non-root process needs to use the nodes ([`crate::access_groups`]): CDI's
    /// `additionalGids`, the shim's `process.user.additionalGids`.
    pub fn additional_gids(&self) -> Vec<u32> {
        crate::node::access_groups(&self.device_nodes)
    }

    /// True when there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.mounts.is_empty()
            && self.symlinks.is_empty()
            && self.ldcache_dirs.is_empty()
            && self.cgroup_rules.is_empty()
    }

    /// Appends `other`, skipping nodes, mounts and rules already present (two profiles may share
    /// a control node or library).
    pub fn merge(&mut self, other: ContainerEdits) {
        for e in other.env {
            if !self.env.contains(&e) {
                self.env.push(e);
            }
        }
        for n in other.device_nodes {
            if !self
                .device_nodes
                .iter()
                .any(|m| m.container_path == n.container_path)
            {
                self.device_nodes.push(n);
            }
        }
        for m in other.mounts {
            if !self
                .mounts
                .iter()
                .any(|x| x.container_path == m.container_path)
            {
                self.mounts.push(m);
            }
        }
        for l in other.symlinks {
            if !self.symlinks.contains(&l) {
                self.symlinks.push(l);
            }
        }
        for d in other.ldcache_dirs {
            if !self.ldcache_dirs.contains(&d) {
                self.ldcache_dirs.push(d);
            }
        }
        // One directory per container: the first profile's (two profiles deciding by one
        // library would be one driver described twice).
        if self.forward_compat.is_none() {
            self.forward_compat = other.forward_compat;
        }
        for r in other.cgroup_rules {
            if !self.cgroup_rules.contains(&r) {
                self.cgroup_rules.push(r);
            }
        }
    }
}

/// What one profile's request turns into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The profile the request named.
    pub profile: ProfileName,
    /// The devices granted, in request order.
    pub devices: Vec<DeviceId>,
    /// What the container gets for them, shaped like a CDI spec's `containerEdits`.
    pub edits: ContainerEdits,
}

#[cfg(test)]
mod tests {
    use super::*;
    use devinject_device_rule::{Access, DeviceKind};

    fn node(path: &str, minor: u32, mode: u32, gid: u32) -> DeviceNode {
        DeviceNode {
            host_path: path.into(),
            container_path: path.into(),
            kind: DeviceKind::Char,
            major: 226,
            minor,
            mode,
            uid: 0,
            gid,
        }
    }

    fn mount(path: &str) -> Mount {
        Mount {
            host_path: path.into(),
            container_path: path.into(),
            kind: MountKind::Library,
        }
    }

    fn link(link: &str, target: &str) -> Symlink {
        Symlink {
            link: link.into(),
            target: target.into(),
        }
    }

    #[test]
    fn edits_are_empty_only_without_any_part() {
        assert!(ContainerEdits::default().is_empty());
        let n = node("/dev/dri/renderD128", 128, 0o660, 107);
        let one_part = [
            ContainerEdits {
                env: vec![EnvVar::new("A", "1")],
                ..Default::default()
            },
            ContainerEdits {
                device_nodes: vec![n.clone()],
                ..Default::default()
            },
            ContainerEdits {
                mounts: vec![mount("/usr/lib/libx.so.1")],
                ..Default::default()
            },
            ContainerEdits {
                symlinks: vec![link("/usr/lib/libx.so", "libx.so.1")],
                ..Default::default()
            },
            ContainerEdits {
                ldcache_dirs: vec!["/usr/lib".into()],
                ..Default::default()
            },
            ContainerEdits {
                cgroup_rules: vec![n.rule()],
                ..Default::default()
            },
        ];
        for (i, edits) in one_part.iter().enumerate() {
            assert!(!edits.is_empty(), "part {i}");
        }
    }

    #[test]
    fn additional_gids_are_the_nodes_access_groups() {
        let edits = ContainerEdits {
            device_nodes: vec![
                node("/dev/dri/renderD129", 129, 0o660, 107),
                node("/dev/dri/card1", 1, 0o660, 44),
                node("/dev/dri/renderD128", 128, 0o660, 107),
                node("/dev/null", 3, 0o666, 5),
            ],
            ..Default::default()
        };
        assert_eq!(edits.additional_gids(), [44, 107]);
        assert_eq!(
            ContainerEdits::default().additional_gids(),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn a_rule_allows_its_node_in_v1_words() {
        let rule = node("/dev/dri/renderD128", 128, 0o660, 107).rule();
        assert_eq!(rule.to_string(), "c 226:128 rwm");
        let block = DeviceRule::new(DeviceKind::Block, 8, 16, Access::RW);
        assert_eq!(block.to_string(), "b 8:16 rw");
    }

    /// The plan's JSON form of a rule is what it was when the access was a string.
    #[test]
    fn a_rule_serializes_with_its_access_letters() {
        let rule = node("/dev/dri/renderD128", 128, 0o660, 107).rule();
        assert_eq!(
            serde_json::to_string(&rule).expect("serializes"),
            r#"{"kind":"Char","major":226,"minor":128,"access":"rwm"}"#
        );
    }

    /// Two profiles may share a control node, a library, a soname link or a cache dir: each
    /// appears once, in first-come order.
    #[test]
    fn merge_keeps_one_of_each_in_order() {
        let ctl = node("/dev/ctl", 0, 0o666, 0);
        let mut a = ContainerEdits {
            env: vec![EnvVar::new("A", "1")],
            device_nodes: vec![node("/dev/accel0", 1, 0o666, 0), ctl.clone()],
            mounts: vec![mount("/usr/lib/liba.so.1")],
            symlinks: vec![link("/usr/lib/liba.so", "liba.so.1")],
            ldcache_dirs: vec!["/usr/lib".into()],
            forward_compat: None,
            cgroup_rules: vec![ctl.rule()],
        };
        let b = ContainerEdits {
            env: vec![EnvVar::new("A", "1"), EnvVar::new("B", "2")],
            device_nodes: vec![ctl.clone(), node("/dev/accel1", 2, 0o666, 0)],
            mounts: vec![mount("/usr/lib/liba.so.1"), mount("/usr/lib/libb.so.1")],
            symlinks: vec![
                link("/usr/lib/liba.so", "liba.so.1"),
                link("/usr/lib/libb.so", "libb.so.1"),
            ],
            ldcache_dirs: vec!["/usr/lib".into(), "/opt/lib".into()],
            forward_compat: Some(crate::ForwardCompat {
                dir: "/opt/compat".into(),
                library: "libb.so".into(),
                host_major: 2,
            }),
            cgroup_rules: vec![ctl.rule(), node("/dev/accel1", 2, 0o666, 0).rule()],
        };
        a.merge(b);
        assert_eq!(a.forward_compat.as_ref().unwrap().library, "libb.so");
        assert_eq!(a.env, [EnvVar::new("A", "1"), EnvVar::new("B", "2")]);
        let paths = |v: &[DeviceNode]| -> Vec<PathBuf> {
            v.iter().map(|n| n.container_path.clone()).collect()
        };
        assert_eq!(
            paths(&a.device_nodes),
            [
                PathBuf::from("/dev/accel0"),
                "/dev/ctl".into(),
                "/dev/accel1".into()
            ]
        );
        let mounts: Vec<_> = a.mounts.iter().map(|m| m.container_path.clone()).collect();
        assert_eq!(
            mounts,
            [
                PathBuf::from("/usr/lib/liba.so.1"),
                "/usr/lib/libb.so.1".into()
            ]
        );
        assert_eq!(
            a.symlinks,
            [
                link("/usr/lib/liba.so", "liba.so.1"),
                link("/usr/lib/libb.so", "libb.so.1")
            ]
        );
        assert_eq!(
            a.ldcache_dirs,
            [PathBuf::from("/usr/lib"), "/opt/lib".into()]
        );
        assert_eq!(
            a.cgroup_rules,
            [ctl.rule(), node("/dev/accel1", 2, 0o666, 0).rule()]
        );
    }
}
