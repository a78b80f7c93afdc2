//! The injection plan: container edits in the shape of a CDI spec.
//!
//! A plan is data only. The hook applies it in the container's mount namespace, the runtime shim
//! writes it into `config.json`, and the CDI exporter writes it as a CDI spec. Fields mirror CDI's
//! `containerEdits` (env, deviceNodes, mounts, hooks) plus the cgroup rules that the OCI spec's
//! `linux.resources.devices` or the hook's cgroup writer need.

use std::path::PathBuf;

use serde::Serialize;

use crate::names::DeviceId;
use crate::node::{DeviceNode, NodeKind};

/// Prefix of every annotation devinject reads or writes.
pub const ANNOTATION_PREFIX: &str = "devinject.io/";

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

/// Work a spec cannot express, done by our hook (CDI would call these hooks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum HookAction {
    /// Create these symlinks (soname links).
    CreateSymlinks(Vec<Symlink>),
    /// Refresh the container's linker cache with these extra directories.
    UpdateLdcache {
        /// Directories holding injected libraries.
        dirs: Vec<PathBuf>,
    },
}

/// One device cgroup rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct CgroupRule {
    /// Char or block.
    pub kind: NodeKind,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Access letters, a subset of `rwm`.
    pub access: &'static str,
}

impl CgroupRule {
    /// The rule letting a container read, write and mknod `node`.
    pub fn for_node(node: &DeviceNode) -> Self {
        Self {
            kind: node.kind,
            major: node.major,
            minor: node.minor,
            access: "rwm",
        }
    }

    /// The cgroup v1 `devices.allow` line: `c 1:3 rwm`.
    pub fn v1_line(&self) -> String {
        format!(
            "{} {}:{} {}",
            self.kind.letter(),
            self.major,
            self.minor,
            self.access
        )
    }
}

/// Edits to one container, CDI-shaped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ContainerEdits {
    /// `KEY=value` entries to add to the process env.
    pub env: Vec<String>,
    /// Device nodes to create.
    pub device_nodes: Vec<DeviceNode>,
    /// Files to bind-mount read-only.
    pub mounts: Vec<Mount>,
    /// Work for our hook.
    pub hooks: Vec<HookAction>,
    /// Device cgroup rules (one per node).
    pub cgroup_rules: Vec<CgroupRule>,
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
            && self.hooks.is_empty()
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
        for h in other.hooks {
            match h {
                HookAction::CreateSymlinks(mut v) => {
                    if let Some(HookAction::CreateSymlinks(mine)) = self
                        .hooks
                        .iter_mut()
                        .find(|x| matches!(x, HookAction::CreateSymlinks(_)))
                    {
                        v.retain(|s| !mine.contains(s));
                        mine.extend(v);
                    } else {
                        self.hooks.push(HookAction::CreateSymlinks(v));
                    }
                }
                HookAction::UpdateLdcache { dirs } => {
                    if let Some(HookAction::UpdateLdcache { dirs: mine }) = self
                        .hooks
                        .iter_mut()
                        .find(|x| matches!(x, HookAction::UpdateLdcache { .. }))
                    {
                        for d in dirs {
                            if !mine.contains(&d) {
                                mine.push(d);
                            }
                        }
                    } else {
                        self.hooks.push(HookAction::UpdateLdcache { dirs });
                    }
                }
            }
        }
        for r in other.cgroup_rules {
            if !self.cgroup_rules.contains(&r) {
                self.cgroup_rules.push(r);
            }
        }
    }

    /// The soname links to create, if any.
    pub fn symlinks(&self) -> &[Symlink] {
        self.hooks
            .iter()
            .find_map(|h| match h {
                HookAction::CreateSymlinks(v) => Some(v.as_slice()),
                _ => None,
            })
            .unwrap_or(&[])
    }

    /// The directories the linker cache must learn about, if any.
    pub fn ldcache_dirs(&self) -> &[PathBuf] {
        self.hooks
            .iter()
            .find_map(|h| match h {
                HookAction::UpdateLdcache { dirs } => Some(dirs.as_slice()),
                _ => None,
            })
            .unwrap_or(&[])
    }
}

/// What one profile's request turns into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The profile.
    pub profile: String,
    /// The devices granted, in request order.
    pub devices: Vec<DeviceId>,
    /// The edits.
    pub edits: ContainerEdits,
}
