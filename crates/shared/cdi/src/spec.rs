//! The CDI spec as devinject writes it: the subset of the Container Device Interface's
//! `specs-go` types that a device profile's plan fills.

use serde::Serialize;

use devinject_devices::{FinishInvocation, Mount};
use std::path::Path;

/// A CDI spec (the subset devinject writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiSpec {
    /// The CDI version the spec needs.
    pub cdi_version: String,
    /// `vendor/class`.
    pub kind: String,
    /// One entry per device name a request may use (`vendor/class=name`).
    pub devices: Vec<CdiDevice>,
    /// Edits applied when any device of the spec is injected.
    pub container_edits: CdiEdits,
}

/// One CDI device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiDevice {
    /// The name requested as `kind=name`.
    pub name: String,
    /// Its edits.
    pub container_edits: CdiEdits,
}

/// CDI container edits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiEdits {
    /// `KEY=value` entries.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Nodes the runtime creates in the container and allows in its device cgroup.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<CdiDeviceNode>,
    /// OCI hooks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<CdiHook>,
    /// Bind mounts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<CdiMount>,
    /// Groups the container's process joins, for nodes only a group may use (CDI 0.7.0).
    #[serde(rename = "additionalGids", skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
}

/// An entry of `deviceNodes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiDeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host, when it differs (CDI 0.5.0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// `c` or `b`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
    /// Permission bits.
    pub file_mode: u32,
    /// Cgroup access, `rwm`.
    pub permissions: String,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// An entry of `mounts`: a host path bound into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// Host file.
    pub host_path: String,
    /// Where it appears in the container.
    pub container_path: String,
    /// Mount options.
    pub options: Vec<String>,
    /// The mount's type, which the runtime spec leaves optional for a bind mount. Always
    /// written: crun (1.21 to at least 1.29) reads every mount's type when a user-namespaced
    /// container joins an existing IPC or PID namespace, as CRI-O's containers join their
    /// pod's, and crashes on a mount without one. Empty (left out) only for an engine whose
    /// CDI predates the field ([`crate::version::fit`]).
    #[serde(rename = "type", skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
}

impl CdiMount {
    /// The read-only bind mount of `host_path` at `container_path`, with the options every
    /// injected file gets ([`Mount::OPTIONS`]).
    pub fn read_only_bind(host_path: &Path, container_path: &Path) -> Self {
        Self {
            host_path: host_path.display().to_string(),
            container_path: container_path.display().to_string(),
            options: Mount::OPTIONS.iter().map(|o| o.to_string()).collect(),
            fs_type: "bind".into(),
        }
    }
}

/// An entry of `hooks`: an OCI hook the runtime runs for the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiHook {
    /// The OCI stage.
    pub hook_name: String,
    /// The executable (host path).
    pub path: String,
    /// argv.
    pub args: Vec<String>,
    /// Environment: empty, so nothing of the container's reaches it.
    pub env: Vec<String>,
    /// Seconds.
    pub timeout: u32,
}

impl CdiSpec {
    /// Every edit of the spec: its own, then each device's.
    pub fn edits(&self) -> impl Iterator<Item = &CdiEdits> {
        std::iter::once(&self.container_edits)
            .chain(self.devices.iter().map(|d| &d.container_edits))
    }

    /// [`CdiSpec::edits`], to change.
    pub fn edits_mut(&mut self) -> impl Iterator<Item = &mut CdiEdits> {
        std::iter::once(&mut self.container_edits)
            .chain(self.devices.iter_mut().map(|d| &mut d.container_edits))
    }

    /// The spec as the JSON text of its file: four spaces of indentation and a final newline,
    /// as the engines' JSON files `devinject-ctl` writes.
    pub fn to_text(&self) -> String {
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        self.serialize(&mut ser)
            .expect("a CDI spec serialises: strings, numbers and lists only");
        let mut text = String::from_utf8(out).expect("serde_json writes UTF-8");
        text.push('\n');
        text
    }
}

impl CdiHook {
    /// `finish` as a CDI `createRuntime` hook.
    pub fn create_runtime(finish: &FinishInvocation) -> Self {
        CdiHook {
            hook_name: "createRuntime".to_string(),
            path: finish.path().display().to_string(),
            args: finish.argv(),
            env: finish.env(),
            timeout: finish.timeout_secs(),
        }
    }
}

#[cfg(test)]
pub(crate) mod sample {
    use super::*;

    /// A spec with one node per named device, for the version and validation tests, declaring
    /// the lowest version that holds it.
    pub(crate) fn spec(kind: &str, names: &[&str], host_path: Option<&str>) -> CdiSpec {
        let mut spec = CdiSpec {
            cdi_version: String::new(),
            kind: kind.to_string(),
            devices: names
                .iter()
                .map(|n| CdiDevice {
                    name: n.to_string(),
                    container_edits: CdiEdits {
                        device_nodes: vec![CdiDeviceNode {
                            path: "/dev/x".into(),
                            host_path: host_path.map(str::to_string),
                            kind: "c".into(),
                            major: 1,
                            minor: 3,
                            file_mode: 0o666,
                            permissions: "rwm".into(),
                            uid: 0,
                            gid: 0,
                        }],
                        ..CdiEdits::default()
                    },
                })
                .collect(),
            container_edits: CdiEdits::default(),
        };
        spec.cdi_version = crate::version::min_version(&spec).to_string();
        spec
    }

    /// [`spec`] of one device `kvm` that also mounts a library, still declaring the version
    /// that held it before the mount.
    pub(crate) fn mounted() -> CdiSpec {
        let mut spec = spec("devinject.io/kvm", &["kvm"], None);
        spec.devices[0]
            .container_edits
            .mounts
            .push(CdiMount::read_only_bind(
                std::path::Path::new("/h/lib/libx.so"),
                std::path::Path::new("/usr/lib/libx.so"),
            ));
        spec
    }
}
