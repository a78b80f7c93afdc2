//! Finding a profile's devices and control nodes on the host.
//!
//! Each char/block node matching one of `discovery.nodes` (globs under the dev root) is one
//! device. Devices are ordered by glob, then naturally by name (`accel2` before `accel10`), and
//! that order gives indices. Ids come from the index, the node name or a sysfs attribute.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use devinject_devices::inventory::{Device, Inventory, Withdrawn, MAX_ATTRIBUTE_VALUE};
use devinject_devices::names::{DeviceId, ProfileName};
use devinject_devices::node_name::{substitute, trailing_number};
use devinject_devices::profile::{IdSource, NodeSpec, Profile};
use devinject_devices::{DeviceNode, HostRoots, NodeError};

use crate::alias::{keep_unambiguous, read_alias_files, usable};
use crate::bus_place::{self, BusPlace};
use crate::health::health_from_attr;
use crate::node;
use crate::sysfs_attr::read_attr;

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum DiscoveryError {
    /// A glob could not be walked.
    #[error("profile {profile}: cannot list {pattern}: {message}")]
    Glob {
        profile: ProfileName,
        /// The full pattern.
        pattern: String,
        /// What went wrong.
        message: String,
    },
    /// A node exists but could not be used.
    #[error("profile {profile}: {source}")]
    Node {
        profile: ProfileName,
        /// The node problem.
        source: NodeError,
    },
    /// A required node of a device or of the kind is missing.
    #[error("profile {profile}: required node {path} is missing: load the driver or mark the node optional in the profile")]
    Missing {
        profile: ProfileName,
        /// The missing node.
        path: PathBuf,
    },
    /// A device's id could not be read or is not a valid id.
    #[error("profile {profile}: device {node}: {problem}")]
    Id {
        profile: ProfileName,
        /// The device's node.
        node: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// Two devices ended up with the same id.
    #[error("profile {profile}: devices {first} and {second} both have id {id:?}: choose an id source that is unique")]
    DuplicateId {
        profile: ProfileName,
        id: String,
        /// The first device's node.
        first: PathBuf,
        /// The second device's node.
        second: PathBuf,
    },
}

/// Records `node` as withdrawn for `error`, and says so in the log.
fn withdraw(profile: &ProfileName, node: PathBuf, error: &DiscoveryError) -> Withdrawn {
    tracing::warn!(%profile, node = %node.display(), %error, "device withdrawn: the profile's other devices are served without it");
    Withdrawn {
        node,
        problem: error.to_string(),
    }
}

/// Finds the profile's devices and control nodes under `roots`.
pub fn discover(profile: &Profile, roots: &HostRoots) -> Result<Inventory, DiscoveryError> {
    let pname = profile.name.clone();
    // Sets and cached sort keys, not pairwise scans: a host can have hundreds of nodes, and the
    // hook, the shim and the plugin all discover.
    let mut matched: Vec<PathBuf> = Vec::new();
    let mut seen: HashSet<PathBuf> = HashSet::new();
    for g in &profile.discovery.nodes {
        let mut found = glob_under(&roots.dev_root, g, &pname)?;
        found.sort_by_cached_key(|p| natural_key(&file_name(p)));
        for p in found {
            if seen.insert(p.clone()) {
                matched.push(p);
            }
        }
    }
    let alias_spec = profile.discovery.aliases.as_ref();
    let alias_values = alias_spec
        .map(|spec| read_alias_files(spec, roots, &pname))
        .unwrap_or_default();
    let alias_keys = alias_spec.map_or(&[][..], |spec| &spec.keys[..]);
    let ctx = DeviceContext {
        profile,
        roots,
        alias_values: &alias_values,
        alias_keys,
    };
    let links = links_under(&roots.dev_root, &profile.discovery.links, &pname)?;
    let mut devices: Vec<Device> = Vec::new();
    let mut withdrawn: Vec<Withdrawn> = Vec::new();
    // The first node found with each id. Devices that share an id are all withdrawn: none of
    // them could be told apart in a request.
    let mut first_with: HashMap<DeviceId, PathBuf> = HashMap::new();
    for path in matched {
        let mut device = match ctx.device(&path, devices.len()) {
            Ok(Some(device)) => device,
            Ok(None) => continue,
            Err(error) => {
                withdrawn.push(withdraw(&pname, path, &error));
                continue;
            }
        };
        add_links(&mut device, &links);
        let Some(first) = first_with.get(&device.id) else {
            first_with.insert(device.id.clone(), path);
            devices.push(device);
            continue;
        };
        let error = DiscoveryError::DuplicateId {
            profile: pname.clone(),
            id: device.id.as_str().to_owned(),
            first: first.clone(),
            second: path.clone(),
        };
        if let Some(at) = devices.iter().position(|d| d.id == device.id) {
            devices.remove(at);
            withdrawn.push(withdraw(&pname, first.clone(), &error));
        }
        withdrawn.push(withdraw(&pname, path, &error));
    }
    // Positions count the devices kept.
    for (i, d) in devices.iter_mut().enumerate() {
        d.index = i;
    }
    {
        let mut pairs: Vec<_> = devices
            .iter_mut()
            .map(|d| (&d.id, &mut d.aliases))
            .collect();
        keep_unambiguous(&pname, &mut pairs);
    }
    let control_nodes = nodes_from_specs(&profile.control_nodes, roots, &pname, &|t| t.to_owned())?;
    Ok(Inventory {
        devices,
        control_nodes,
        withdrawn,
    })
}

/// What [`discover`] reads each device with.
struct DeviceContext<'a> {
    profile: &'a Profile,
    roots: &'a HostRoots,
    alias_values: &'a HashMap<u64, BTreeMap<String, String>>,
    alias_keys: &'a [String],
}

impl DeviceContext<'_> {
    /// The device whose node discovery matched at `path`, at position `index`; `None` when
    /// the match is no device of the profile (not a node, or the profile's sysfs attributes or
    /// bus selectors choose another).
    fn device(&self, path: &Path, index: usize) -> Result<Option<Device>, DiscoveryError> {
        let (profile, roots) = (self.profile, self.roots);
        let pname = profile.name.clone();
        let (alias_values, alias_keys) = (self.alias_values, self.alias_keys);
        let path = path.to_path_buf();
        let node = match node::read(&path, &roots.dev_root) {
            Ok(n) => n,
            // A glob may also match helper files (e.g. a sysfs-like README); only nodes count.
            Err(NodeError::NotDevice { .. }) => {
                tracing::debug!(profile = %pname, path = %path.display(), "skipping non-device match");
                return Ok(None);
            }
            Err(source) => {
                return Err(DiscoveryError::Node {
                    profile: pname.clone(),
                    source,
                })
            }
        };
        let name = file_name(&path);
        let n = trailing_number(&name);
        let subst = |t: &str| substitute(t, &name, n);
        // The node's sysfs link is read once, for the selectors and the bus id alike.
        let (usb, pci) = (&profile.discovery.usb, &profile.discovery.pci);
        let place = (!usb.is_empty() || !pci.is_empty() || profile.discovery.id == IdSource::Bus)
            .then(|| BusPlace::of(roots, &node))
            .flatten();
        let wanted = profile.discovery.require_sysfs.iter().all(|(attr, want)| {
            read_attr(&roots.in_sys_root(&subst(attr))).as_deref() == Some(want.as_str())
        }) && bus_place::chosen(place.as_ref(), usb, pci);
        if !wanted {
            tracing::debug!(profile = %pname, node = %name, "sysfs attributes do not match the profile");
            return Ok(None);
        }
        let own_values = n.and_then(|n| alias_values.get(&n));
        let mut aliases: Vec<DeviceId> = alias_keys
            .iter()
            .filter_map(|k| own_values?.get(k))
            .filter_map(|v| usable(v))
            .collect();
        let index_id = n.map_or_else(|| index.to_string(), |n| n.to_string());
        let id_text = match profile.discovery.id {
            // The node's own number (`accel2` → `2`, `nvidia1` → `1`) rather than its position,
            // so removing one device does not renumber the others under the kubelet's feet.
            IdSource::Index => index_id,
            IdSource::Alias => {
                match alias_keys
                    .first()
                    .and_then(|k| own_values?.get(k))
                    .and_then(|v| usable(v))
                {
                    Some(alias) => {
                        aliases.retain(|a| *a != alias);
                        alias.as_str().to_owned()
                    }
                    None => {
                        tracing::warn!(profile = %pname, node = %name, "no alias to take the id from; the device keeps its index as id");
                        index_id
                    }
                }
            }
            IdSource::Name => name.clone(),
            IdSource::Bus => place
                .as_ref()
                .and_then(BusPlace::address)
                .map(|a| a.as_str().to_owned())
                .ok_or_else(|| DiscoveryError::Id {
                    profile: pname.clone(),
                    node: path.clone(),
                    problem: format!(
                        "is on no USB or PCI bus (sysfs links no device of those to {}:{}): \
                     set discovery.id to another source",
                        node.major, node.minor
                    ),
                })?,
            IdSource::Sysfs => {
                let attr = profile.discovery.id_sysfs.as_deref().unwrap_or_default();
                let at = roots.in_sys_root(&subst(attr));
                read_attr(&at).ok_or_else(|| DiscoveryError::Id {
                    profile: pname.clone(),
                    node: path.clone(),
                    problem: format!("cannot read id attribute {}", at.display()),
                })?
            }
        };
        let id = DeviceId::new(&id_text).map_err(|e| DiscoveryError::Id {
            profile: pname.clone(),
            node: path.clone(),
            problem: e.to_string(),
        })?;
        let mut nodes = vec![node];
        nodes.extend(nodes_from_specs(
            &profile.device_nodes,
            roots,
            &pname,
            &|t| subst(t),
        )?);
        let numa_node = profile
            .discovery
            .numa_sysfs
            .as_deref()
            .and_then(|a| read_attr(&roots.in_sys_root(&subst(a))))
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|&v| v >= 0);
        let healthy = profile
            .discovery
            .health_sysfs
            .as_deref()
            .map(|a| health_from_attr(&roots.in_sys_root(&subst(a))))
            .unwrap_or(true);
        let attributes = read_attributes(profile, roots, &subst, &name);
        Ok(Some(Device {
            id,
            index,
            name,
            nodes,
            numa_node,
            healthy,
            attributes,
            aliases,
        }))
    }
}

/// The device nodes the symbolic links matching `globs` under `dev_root` lead to, each at the
/// link's path: the host's `/dev` is trusted, so the link is followed as the host resolves it.
/// What is not a link, or leads to no device node, is left out.
fn links_under(
    dev_root: &Path,
    globs: &[String],
    profile: &ProfileName,
) -> Result<Vec<DeviceNode>, DiscoveryError> {
    let mut out = Vec::new();
    for g in globs {
        let mut found = glob_under(dev_root, g, profile)?;
        found.sort();
        for path in found {
            let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
            match node::read(&path, dev_root) {
                Ok(node) if is_link => out.push(node),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(%profile, link = %path.display(), error = %e, "skipping link")
                }
            }
        }
    }
    Ok(out)
}

/// Gives `device` the links among `links` that lead to its own first node (the matched one):
/// the same type and numbers, at the link's path.
fn add_links(device: &mut Device, links: &[DeviceNode]) {
    let Some(own) = device.nodes.first() else {
        return;
    };
    let same = |l: &DeviceNode| (l.kind, l.major, l.minor) == (own.kind, own.major, own.minor);
    let mine: Vec<DeviceNode> = links
        .iter()
        .filter(|l| {
            same(l)
                && !device
                    .nodes
                    .iter()
                    .any(|n| n.container_path == l.container_path)
        })
        .cloned()
        .collect();
    device.nodes.extend(mine);
}

fn nodes_from_specs(
    specs: &[NodeSpec],
    roots: &HostRoots,
    profile: &ProfileName,
    subst: &dyn Fn(&str) -> String,
) -> Result<Vec<DeviceNode>, DiscoveryError> {
    let mut out = Vec::new();
    for spec in specs {
        let path = roots.dev_root.join(subst(&spec.path));
        match node::read(&path, &roots.dev_root) {
            Ok(n) => out.push(n),
            Err(NodeError::Stat { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && spec.optional => {}
            Err(NodeError::Stat { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(DiscoveryError::Missing {
                    profile: profile.clone(),
                    path,
                })
            }
            Err(source) => {
                return Err(DiscoveryError::Node {
                    profile: profile.clone(),
                    source,
                })
            }
        }
    }
    Ok(out)
}

fn glob_under(
    root: &Path,
    pattern: &str,
    profile: &ProfileName,
) -> Result<Vec<PathBuf>, DiscoveryError> {
    let full = format!(
        "{}/{}",
        glob::Pattern::escape(&root.to_string_lossy()),
        pattern
    );
    let err = |message: String| DiscoveryError::Glob {
        profile: profile.clone(),
        pattern: full.clone(),
        message,
    };
    let paths = glob::glob(&full).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    for p in paths {
        match p {
            Ok(p) => out.push(p),
            // Unreadable directory entries are not devices we could inject anyway.
            Err(e) => tracing::debug!(%profile, error = %e, "skipping unreadable glob entry"),
        }
    }
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Orders `a2` before `a10`: compares the text before the trailing number, then the number.
/// The natural sort key of a node name: the name without its trailing number, the number, then
/// the whole name (`accel2` before `accel10`).
fn natural_key(s: &str) -> (String, Option<u64>, String) {
    let n = trailing_number(s);
    let digits = n.map(|_| s.chars().rev().take_while(char::is_ascii_digit).count());
    (
        s[..s.len() - digits.unwrap_or(0)].to_owned(),
        n,
        s.to_owned(),
    )
}

#[cfg(test)]
fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    natural_key(a).cmp(&natural_key(b))
}

/// The device's sysfs attributes the profile names that can be read and published.
fn read_attributes(
    profile: &Profile,
    roots: &HostRoots,
    subst: &dyn Fn(&str) -> String,
    device: &str,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, attr) in &profile.discovery.attributes_sysfs {
        let at = roots.in_sys_root(&subst(attr));
        match read_attr(&at) {
            Some(v) if v.len() <= MAX_ATTRIBUTE_VALUE => {
                out.insert(name.clone(), v);
            }
            Some(v) => tracing::debug!(
                profile = %profile.name, device, attribute = %name, len = v.len(),
                "attribute value too long to publish; left out"
            ),
            None => tracing::debug!(
                profile = %profile.name, device, attribute = %name, path = %at.display(),
                "attribute unreadable; left out"
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["accel10", "accel2", "accel1", "accelx"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["accel1", "accel2", "accel10", "accelx"]);
    }

    /// A control node that cannot be looked up for another reason than its absence (here a
    /// path through a regular file, `ENOTDIR`) is a node error, not a "missing node" advice.
    #[test]
    fn a_node_path_through_a_file_is_a_node_error_not_missing() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        std::fs::write(dev.join("ctl"), "a file").unwrap();
        let roots = HostRoots {
            dev_root: dev,
            sys_root: dir.path().join("sys"),
            proc_root: dir.path().join("proc"),
            driver_root: "/".into(),
        };
        for optional in [false, true] {
            let profile = Profile::parse(
                &format!(
                    "name = \"sim\"\nresource = \"devinject.io/sim\"\n[discovery]\nnodes = [\"sim/accel*\"]\n[[control_nodes]]\npath = \"ctl/x\"\noptional = {optional}\n"
                ),
                Path::new("sim.toml"),
            )
            .unwrap();
            let err = discover(&profile, &roots).unwrap_err();
            assert!(
                matches!(
                    &err,
                    DiscoveryError::Node {
                        source: NodeError::Stat { .. },
                        ..
                    }
                ),
                "optional = {optional}: {err}"
            );
        }
        let profile = Profile::parse(
            "name = \"sim\"\nresource = \"devinject.io/sim\"\n[discovery]\nnodes = [\"sim/accel*\"]\n[[control_nodes]]\npath = \"gone\"\n",
            Path::new("sim.toml"),
        )
        .unwrap();
        let err = discover(&profile, &roots).unwrap_err();
        assert!(matches!(err, DiscoveryError::Missing { .. }), "{err}");
    }
}
