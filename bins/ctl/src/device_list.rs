//! `devinject-ctl devices list`: the devices each profile finds on this host (id, index, nodes
//! with major:minor, NUMA node, health), as the device plugin would advertise them and as the
//! hook and shim would inject them.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use devinject_devices::{DeviceNode, HostRoots};
use devinject_discovery::{discover, profile_dir};
use serde::Serialize;

/// Why `devices list` found nothing or not everything: a profile that does not load, or a
/// profile whose discovery failed (the message names the profile and the file). Bad input to
/// the program's exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DeviceListError {
    /// The devices crate's message, or how many profiles failed.
    pub message: String,
}

/// What to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceListRequest {
    /// Prefix under which the host's `/` is reachable.
    pub root: PathBuf,
    /// Profiles directory (host path).
    pub profiles_dir: PathBuf,
    /// Device and sysfs roots (host paths; the driver root is not used).
    pub roots: HostRoots,
}

impl Default for DeviceListRequest {
    fn default() -> Self {
        DeviceListRequest {
            root: PathBuf::from("/"),
            profiles_dir: PathBuf::from(devinject_cdi::DEFAULT_PROFILES_DIR),
            roots: HostRoots::default(),
        }
    }
}

/// One device node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedNode {
    /// Where it appears in containers.
    pub path: PathBuf,
    /// Where it is on the host.
    pub host_path: PathBuf,
    /// `c` or `b`.
    #[serde(rename = "type")]
    pub kind: char,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Permission bits, octal (`0666`).
    pub mode: String,
}

/// One device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct ListedDevice {
    /// Its id (what requests and the kubelet use).
    pub id: String,
    /// Its index in discovery order (requests may use it too).
    pub index: usize,
    /// The matched node's name.
    pub name: String,
    pub nodes: Vec<ListedNode>,
    /// NUMA node, when sysfs tells.
    pub numa_node: Option<i64>,
    /// `healthy` or `unhealthy`.
    pub health: &'static str,
}

/// One profile's devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct ProfileDevices {
    pub profile: String,
    /// Its Kubernetes resource name.
    pub resource: String,
    /// The variable containers set to ask for its devices.
    pub request_env: String,
    /// The devices found.
    pub devices: Vec<ListedDevice>,
    /// Nodes every container with any of its devices gets.
    pub control_nodes: Vec<ListedNode>,
    /// Why discovery failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The result of [`list`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeviceList {
    /// One entry per profile, by name.
    pub profiles: Vec<ProfileDevices>,
}

impl DeviceList {
    /// The profiles whose discovery failed.
    pub fn failed(&self) -> usize {
        self.profiles.iter().filter(|p| p.error.is_some()).count()
    }
}

fn under(root: &Path, host: &Path) -> PathBuf {
    root.join(host.strip_prefix("/").unwrap_or(host))
}

fn listed(root: &Path, node: &DeviceNode) -> ListedNode {
    let host_path = match node.host_path.strip_prefix(root) {
        Ok(rel) if root != Path::new("/") => Path::new("/").join(rel),
        _ => node.host_path.clone(),
    };
    ListedNode {
        path: node.container_path.clone(),
        host_path,
        kind: node.kind.letter(),
        major: node.major,
        minor: node.minor,
        mode: format!("{:04o}", node.mode & 0o7777),
    }
}

/// Loads the profiles and discovers each one's devices. A profile whose discovery fails is
/// listed with its error; profiles that do not load fail the whole listing, as they fail the
/// hook and the shim.
pub fn list(req: &DeviceListRequest) -> Result<DeviceList, DeviceListError> {
    let profiles =
        profile_dir::load(&under(&req.root, &req.profiles_dir)).map_err(|e| DeviceListError {
            message: e.to_string(),
        })?;
    let roots = HostRoots {
        dev_root: under(&req.root, &req.roots.dev_root),
        sys_root: under(&req.root, &req.roots.sys_root),
        proc_root: under(&req.root, &req.roots.proc_root),
        driver_root: under(&req.root, &req.roots.driver_root),
    };
    let mut out = DeviceList::default();
    for p in profiles.iter() {
        let mut entry = ProfileDevices {
            profile: p.name.as_str().to_string(),
            resource: p.resource_name().to_string(),
            request_env: p.request_env().to_string(),
            devices: Vec::new(),
            control_nodes: Vec::new(),
            error: None,
        };
        match discover(p, &roots) {
            Ok(inv) => {
                entry.devices = inv
                    .devices
                    .iter()
                    .map(|d| ListedDevice {
                        id: d.id.as_str().to_string(),
                        index: d.index,
                        name: d.name.clone(),
                        nodes: d.nodes.iter().map(|n| listed(&req.root, n)).collect(),
                        numa_node: d.numa_node,
                        health: if d.healthy { "healthy" } else { "unhealthy" },
                    })
                    .collect();
                entry.control_nodes = inv
                    .control_nodes
                    .iter()
                    .map(|n| listed(&req.root, n))
                    .collect();
            }
            Err(e) => entry.error = Some(e.to_string()),
        }
        out.profiles.push(entry);
    }
    Ok(out)
}

fn node_text(n: &ListedNode) -> String {
    format!("{} {} {}:{}", n.path.display(), n.kind, n.major, n.minor)
}

/// The list as a table: one row per device; a profile without devices gets one row saying so.
pub fn render_table(list: &DeviceList) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "PROFILE".into(),
        "ID".into(),
        "INDEX".into(),
        "NODES".into(),
        "NUMA".into(),
        "HEALTH".into(),
    ]];
    for p in &list.profiles {
        if let Some(e) = &p.error {
            let dash = || "-".to_string();
            rows.push([
                p.profile.clone(),
                dash(),
                dash(),
                format!("error: {e}"),
                dash(),
                dash(),
            ]);
            continue;
        }
        if p.devices.is_empty() {
            let dash = || "-".to_string();
            rows.push([
                p.profile.clone(),
                dash(),
                dash(),
                "no devices".into(),
                dash(),
                dash(),
            ]);
            continue;
        }
        for d in &p.devices {
            let nodes: Vec<String> = d.nodes.iter().map(node_text).collect();
            rows.push([
                p.profile.clone(),
                d.id.clone(),
                d.index.to_string(),
                nodes.join(", "),
                d.numa_node
                    .map_or_else(|| "-".to_string(), |n| n.to_string()),
                d.health.to_string(),
            ]);
        }
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let controls: Vec<String> = list
        .profiles
        .iter()
        .filter(|p| !p.devices.is_empty() && !p.control_nodes.is_empty())
        .map(|p| {
            let nodes: Vec<String> = p.control_nodes.iter().map(node_text).collect();
            format!("{}: {}", p.profile, nodes.join(", "))
        })
        .collect();
    if !controls.is_empty() {
        let _ = writeln!(
            out,
            "\ncontrol nodes (with any device): {}",
            controls.join("; ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_and_marks_empty_profiles() {
        let node = ListedNode {
            path: PathBuf::from("/dev/demo/accel0"),
            host_path: PathBuf::from("/dev/demo/accel0"),
            kind: 'c',
            major: 10,
            minor: 237,
            mode: "0666".into(),
        };
        let list = DeviceList {
            profiles: vec![
                ProfileDevices {
                    profile: "demo".into(),
                    resource: "devinject.io/demo".into(),
                    request_env: "DEMO_VISIBLE_DEVICES".into(),
                    devices: vec![ListedDevice {
                        id: "0".into(),
                        index: 0,
                        name: "accel0".into(),
                        nodes: vec![node.clone()],
                        numa_node: Some(1),
                        health: "healthy",
                    }],
                    control_nodes: vec![node],
                    error: None,
                },
                ProfileDevices {
                    profile: "kvm".into(),
                    resource: "devinject.io/kvm".into(),
                    request_env: "KVM_VISIBLE_DEVICES".into(),
                    devices: Vec::new(),
                    control_nodes: Vec::new(),
                    error: None,
                },
            ],
        };
        let text = render_table(&list);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "PROFILE  ID  INDEX  NODES                      NUMA  HEALTH"
        );
        assert_eq!(
            lines[1],
            "demo     0   0      /dev/demo/accel0 c 10:237  1     healthy"
        );
        assert_eq!(
            lines[2],
            "kvm      -   -      no devices                 -     -"
        );
        assert!(lines[4].starts_with("control nodes"), "{text}");
    }
}
