//! The transient CDI spec of one prepared claim and one profile: built from the same renderer as
//! `devinject-ctl cdi generate`, written into the kubelet's CDI directory, removed on unprepare.
//!
//! # One renderer
//! [`build`] calls [`devinject_cdi::build_spec`] on the profile's inventory cut down to
//! the allocated devices, then renames what it made: the kind becomes
//! [`naming::cdi_kind`] (`k8s.<driver>/<profile>`), each device becomes
//! [`naming::cdi_device`] (`<claim uid>-<DRA device>`), and the `all` device is dropped (a claim
//! gets exactly the devices it was allocated). The spec-level edits (control nodes, library
//! mounts, env, the `createRuntime` finish hook, additional gids) are rendered in that one
//! place, so the DRA driver and the CDI export cannot drift apart.
//!
//! # Security
//! The CDI directory is a host directory a pod with a hostPath volume may be able to write
//! into. The spec is written through [`HostDir`]: the directory is resolved inside the host
//! root, a link, FIFO, device node or hard link at the spec's file name is refused and never
//! followed, and the file goes to a temporary file in the same directory, is given mode 0644
//! and renamed over the name (not fsynced: it is valid for this boot only). The directory's own
//! last component must be a directory, not a link (its parents may be links the host set up,
//! such as `/var/run` -> `/run`; they are followed inside the root). [`remove`] unlinks exactly one regular file, and a missing one is
//! already removed.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use devinject_cdi::{build_spec, min_version, validate, CdiError, CdiMount, CdiRequest, CdiSpec};
use devinject_devices::{DriverFiles, Inventory, Profile};
use devinject_hostfs::host_dir::{Entry, HostDir};
use devinject_hostfs::HostFsError;
use tracing::{debug, info};

use crate::naming::{self, NamingError};

/// The mode of a claim's spec file: the runtime reads it, nobody else needs to write it.
pub const SPEC_FILE_MODE: u32 = 0o644;

/// Where and how the claim specs are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecContext {
    /// The DRA driver name ([`naming::DEFAULT_DRIVER`] unless configured).
    pub driver: String,
    /// Prefix under which the host's `/` is reachable (`/` on the host, the host mount in a
    /// container).
    pub root: PathBuf,
    /// The CDI spec directory (host path) the runtime reads, e.g. `/var/run/cdi`.
    pub cdi_dir: PathBuf,
    /// `devinject-hook` (host path), for the `createRuntime` finish hook.
    pub hook_path: PathBuf,
    /// `--config` for the hook, when not the default.
    pub hook_config: Option<PathBuf>,
    /// Where libraries go in containers.
    pub lib_dir: PathBuf,
}

impl SpecContext {
    /// The CDI export request that renders a profile's edits exactly as this driver needs them.
    fn cdi_request(&self) -> CdiRequest {
        CdiRequest {
            root: self.root.clone(),
            output_dir: self.cdi_dir.clone(),
            hook_path: self.hook_path.clone(),
            hook_config: self.hook_config.clone(),
            lib_dir: self.lib_dir.clone(),
            // A claim is prepared once for every pod that shares it, before the kubelet says
            // which pods those are, so its spec serves both kinds of container: one with a user
            // namespace gets its nodes as copies it owns (`finish --node`), one without leaves
            // them to the runtime and the finish step does nothing for them.
            user_namespaces: true,
            ..CdiRequest::default()
        }
    }
}

/// Why a claim's spec could not be built, written or removed.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum ClaimSpecError {
    /// A claim UID or device name that cannot name a file or CDI device.
    #[error(transparent)]
    Naming(#[from] NamingError),
    /// An allocated device that discovery does not know (any more).
    #[error("claim {uid}: device {id} (DRA device {device}) of profile {profile} is not on this node any more: the pod cannot start with it; delete the pod so that its claim is allocated again")]
    UnknownDevice {
        /// The claim UID.
        uid: String,
        profile: String,
        /// The DRA device name.
        device: String,
        /// The device id.
        id: String,
    },
    /// Nothing to write.
    #[error("claim {uid}: no devices of profile {profile} to write a CDI spec for")]
    NoDevices {
        /// The claim UID.
        uid: String,
        profile: String,
    },
    /// The renderer failed or made a spec CDI would reject.
    #[error("claim {uid}: profile {profile}: cannot build the CDI spec: {source}")]
    Build {
        /// The claim UID.
        uid: String,
        profile: String,
        /// What the renderer said.
        source: Box<CdiError>,
    },
    /// The renamed spec breaks a rule CDI's parser enforces.
    #[error("claim {uid}: profile {profile}: the CDI spec would be invalid: {problem}")]
    Invalid {
        /// The claim UID.
        uid: String,
        profile: String,
        /// The rule broken.
        problem: String,
    },
    /// The CDI directory is not a directory (a link there is refused, not followed).
    #[error("CDI spec directory {} is a {what}, not a directory: devinject does not follow it; replace it with a directory (or point the driver's --cdi-dir at the real one)", path.display())]
    NotADirectory {
        /// The directory as this process names it.
        path: PathBuf,
        /// What is there.
        what: &'static str,
    },
    /// Reading, writing or removing in the CDI directory failed.
    #[error("CDI spec {file}: {source}")]
    Files {
        /// The spec's file name.
        file: String,
        /// What failed, naming the path.
        source: Box<HostFsError>,
    },
    /// A spec file name to remove that is not one of this driver's.
    #[error("CDI spec {file}: {file:?} is not a claim spec name of driver {driver}: nothing was removed")]
    NotOurs {
        /// The name given.
        file: String,
        /// This driver.
        driver: String,
    },
}

/// A `Result` with a [`ClaimSpecError`].
pub type Result<T> = std::result::Result<T, ClaimSpecError>;

/// The spec of one claim and one profile, ready to write.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct ClaimSpec {
    /// Its file name in the CDI directory ([`naming::claim_spec_file`]).
    pub file_name: String,
    pub spec: CdiSpec,
    /// DRA device name to the fully qualified CDI device id the kubelet hands the runtime
    /// ([`naming::cdi_device_id`]).
    pub cdi_device_ids: BTreeMap<String, String>,
}

/// Builds the spec of claim `uid` for `profile`, holding one CDI device per allocated device.
///
/// `devices` are the allocated devices as (DRA device name, device id) pairs; a pair listed
/// twice (one device shared by two requests) is one CDI device. A partition's id
/// (`<id>@<shape><n>`, [`devinject_devices::partitions`]) names its device, and its CDI device
/// also sets the profile's `partitions.env` to the units it covers. `inventory` and
/// `driver_files` are what discovery found for the profile on this node.
pub fn build<'a>(
    ctx: &SpecContext,
    uid: &str,
    profile: &Profile,
    inventory: &Inventory,
    driver_files: &DriverFiles,
    devices: &'a [(String, String)],
) -> Result<ClaimSpec> {
    let uid = naming::claim_uid(uid)?;
    let pname = profile.name.as_str();
    // The device of an allocated id, and what its container is told of its partition.
    let split = |id: &'a str| -> (&'a str, Option<String>) {
        match &profile.partitions {
            Some(partitions) => {
                let (device, partition) = partitions.split(id);
                (
                    device,
                    partition.map(|p| format!("{}={}", partitions.env, p.env_value())),
                )
            }
            None => (id, None),
        }
    };
    // Each DRA device once: its name, its device's id and its partition's env.
    let mut wanted: Vec<(&'a str, &'a str, Option<String>)> = Vec::new();
    for (name, id) in devices {
        if !wanted.iter().any(|(n, _, _)| n == name) {
            let (id, partition_env) = split(id);
            wanted.push((name, id, partition_env));
        }
    }
    let mut allocated = Inventory {
        withdrawn: Vec::new(),
        devices: Vec::with_capacity(wanted.len()),
        control_nodes: inventory.control_nodes.clone(),
    };
    for &(name, id, _) in &wanted {
        let Some(device) = inventory.by_id(id) else {
            return Err(ClaimSpecError::UnknownDevice {
                uid: uid.to_owned(),
                profile: pname.to_owned(),
                device: (*name).to_owned(),
                id: (*id).to_owned(),
            });
        };
        // Two shares of one shared device are one device to the renderer.
        if allocated.by_id(id).is_none() {
            allocated.devices.push(device.clone());
        }
    }
    let no_devices = || ClaimSpecError::NoDevices {
        uid: uid.to_owned(),
        profile: pname.to_owned(),
    };
    let rendered = build_spec(&ctx.cdi_request(), profile, &allocated, driver_files)
        .map_err(|source: CdiError| ClaimSpecError::Build {
            uid: uid.to_owned(),
            profile: pname.to_owned(),
            source: Box::new(source),
        })?
        .ok_or_else(no_devices)?;
    // The renderer names each device by its id (plus `all`, unless a device is called that):
    // take ours by id, in allocation order, and leave the rest.
    let by_id: BTreeMap<String, _> = rendered
        .devices
        .into_iter()
        .map(|d| (d.name.clone(), d))
        .collect();
    let mut spec = CdiSpec {
        cdi_version: String::new(),
        kind: naming::cdi_kind(&ctx.driver, pname),
        devices: Vec::with_capacity(wanted.len()),
        container_edits: rendered.container_edits,
    };
    let mut cdi_device_ids = BTreeMap::new();
    for (name, id, partition_env) in &wanted {
        let mut device = by_id.get(*id).cloned().ok_or_else(no_devices)?;
        device.name = naming::cdi_device(uid, name);
        device.container_edits.env.extend(partition_env.clone());
        spec.devices.push(device);
        cdi_device_ids.insert(
            (*name).to_owned(),
            naming::cdi_device_id(&ctx.driver, pname, uid, name),
        );
    }
    spec.cdi_version = min_version(&spec).to_string();
    validate(&spec).map_err(|problem| ClaimSpecError::Invalid {
        uid: uid.to_owned(),
        profile: pname.to_owned(),
        problem,
    })?;
    debug!(
        claim = uid,
        profile = pname,
        devices = spec.devices.len(),
        "built claim CDI spec"
    );
    Ok(ClaimSpec {
        file_name: naming::claim_spec_file(&ctx.driver, pname, uid),
        spec,
        cdi_device_ids,
    })
}

/// Adds to `spec` the mounts of claim `uid`'s device metadata files (in `host_dir`, a host
/// path) that belong to its devices: each on the CDI device of the request's first device,
/// read-only. The spec's `cdiVersion` then declares what a typed mount needs, or CDI would
/// refuse the whole spec.
pub fn mount_metadata(
    spec: &mut ClaimSpec,
    uid: &str,
    mounts: &[crate::checkpoint::MetadataMount],
    host_dir: &Path,
) {
    for m in mounts {
        let name = naming::cdi_device(uid, &m.device);
        if let Some(device) = spec.spec.devices.iter_mut().find(|d| d.name == name) {
            device.container_edits.mounts.push(CdiMount::read_only_bind(
                &host_dir.join(&m.file),
                Path::new(&m.container_path),
            ));
        }
    }
    spec.spec.cdi_version = min_version(&spec.spec).to_string();
}

/// Writes `spec` into the CDI directory (created when missing), replacing an earlier version
/// atomically (see the module docs).
pub fn write(ctx: &SpecContext, spec: &ClaimSpec) -> Result<()> {
    let files = |source: HostFsError| ClaimSpecError::Files {
        file: spec.file_name.clone(),
        source: Box::new(source),
    };
    let text = spec.spec.to_text();
    let dir = create_dir(ctx)?;
    // A claim's spec is valid for this boot only: after a reboot the driver prepares the claim
    // again ([`crate::driver`]), so no fsync stands between the kubelet and its answer.
    dir.write_for_this_boot(
        OsStr::new(&spec.file_name),
        text.as_bytes(),
        Some(SPEC_FILE_MODE),
    )
    .map_err(files)?;
    info!(file = %dir.shown(OsStr::new(&spec.file_name)).display(), devices = spec.spec.devices.len(), "wrote claim CDI spec");
    Ok(())
}

/// Removes the spec of claim `uid` for `profile`; returns whether there was one. Only that one
/// regular file is removed; anything else at its name is refused and left.
pub fn remove(ctx: &SpecContext, profile: &str, uid: &str) -> Result<bool> {
    let uid = naming::claim_uid(uid)?;
    remove_file(ctx, &naming::claim_spec_file(&ctx.driver, profile, uid))
}

/// Removes the spec file `file_name` (a name [`write()`] wrote, as a checkpoint records it);
/// returns whether there was one. A name with a `/`, or that is not one of this driver's spec
/// names, is refused.
pub fn remove_file(ctx: &SpecContext, file_name: &str) -> Result<bool> {
    let files = |source: HostFsError| ClaimSpecError::Files {
        file: file_name.to_owned(),
        source: Box::new(source),
    };
    let ours = file_name.starts_with(&format!("{}-", naming::cdi_vendor(&ctx.driver)))
        && file_name.ends_with(".json")
        && !file_name.contains('/');
    if !ours {
        return Err(ClaimSpecError::NotOurs {
            file: file_name.to_owned(),
            driver: ctx.driver.clone(),
        });
    }
    let Some(dir) = open_dir(ctx)? else {
        return Ok(false);
    };
    let removed = dir.remove(OsStr::new(file_name)).map_err(files)?;
    if removed {
        info!(file = %dir.shown(OsStr::new(file_name)).display(), "removed claim CDI spec");
    }
    Ok(removed)
}

/// Whether the spec file `file_name` is in the CDI directory as a regular file (a checkpointed
/// claim whose spec is gone, as after a node's reboot empties `/run`, must be prepared again).
pub fn present(ctx: &SpecContext, file_name: &str) -> Result<bool> {
    let Some(dir) = open_dir(ctx)? else {
        return Ok(false);
    };
    Ok(matches!(
        entry(&dir, OsStr::new(file_name))?,
        Entry::File(_)
    ))
}

/// What is at `name` in `dir`, looked at without following a link.
fn entry(dir: &HostDir, name: &OsStr) -> Result<Entry> {
    dir.entry(name)
        .map_err(|source: HostFsError| ClaimSpecError::Files {
            file: dir.shown(name).display().to_string(),
            source: Box::new(source),
        })
}

/// Opens the CDI directory; `None` when it does not exist.
fn open_dir(ctx: &SpecContext) -> Result<Option<HostDir>> {
    if let (Some(parent), Some(name)) = (ctx.cdi_dir.parent(), ctx.cdi_dir.file_name()) {
        let Some(parent_dir) = HostDir::open(&ctx.root, parent).map_err(|e| dir_error(ctx, e))?
        else {
            return Ok(None);
        };
        if !is_directory(&parent_dir, name)? {
            return Ok(None);
        }
    }
    HostDir::open(&ctx.root, &ctx.cdi_dir).map_err(|e| dir_error(ctx, e))
}

/// Makes the CDI directory when missing (as [`write()`] does) and returns its path as this
/// process names it, for a watch.
pub fn create_dir_shown(ctx: &SpecContext) -> Result<PathBuf> {
    create_dir(ctx)?;
    let host: &Path = &ctx.cdi_dir;
    Ok(ctx.root.join(host.strip_prefix("/").unwrap_or(host)))
}

/// Opens the CDI directory, creating it and its parents (mode 0755) when missing.
fn create_dir(ctx: &SpecContext) -> Result<HostDir> {
    if let (Some(parent), Some(name)) = (ctx.cdi_dir.parent(), ctx.cdi_dir.file_name()) {
        let (parent_dir, _) = HostDir::create(&ctx.root, parent).map_err(|e| dir_error(ctx, e))?;
        is_directory(&parent_dir, name)?;
    }
    Ok(HostDir::create(&ctx.root, &ctx.cdi_dir)
        .map_err(|e| dir_error(ctx, e))?
        .0)
}

/// Whether `name` in `parent` is a directory (`false`: nothing there); anything else there, a
/// link included, is [`ClaimSpecError::NotADirectory`].
fn is_directory(parent: &HostDir, name: &OsStr) -> Result<bool> {
    let what = match entry(parent, name)? {
        Entry::Missing => return Ok(false),
        Entry::Other("directory") => return Ok(true),
        Entry::File(_) => "regular file",
        Entry::Other(what) => what,
    };
    Err(ClaimSpecError::NotADirectory {
        path: parent.shown(name),
        what,
    })
}

fn dir_error(ctx: &SpecContext, source: HostFsError) -> ClaimSpecError {
    ClaimSpecError::Files {
        file: ctx.cdi_dir.display().to_string(),
        source: Box::new(source),
    }
}

/// The path of `spec`'s file as this process names it, for messages and tests.
pub fn shown_path(ctx: &SpecContext, file_name: &str) -> PathBuf {
    let host: &Path = &ctx.cdi_dir;
    ctx.root
        .join(host.strip_prefix("/").unwrap_or(host))
        .join(file_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::MetadataMount;
    use devinject_devices::driver_files::DriverLibrary;
    use devinject_devices::{Device, DeviceId, DeviceKind, DeviceNode};
    use std::os::unix::fs::{symlink, PermissionsExt};

    const UID: &str = "0b5e6f4c-2a7d-4f1e-9c3b-1d2e3f4a5b6c";

    /// [`build`], then [`write()`], as the driver does with its prepare runs in between.
    fn prepare(
        ctx: &SpecContext,
        uid: &str,
        profile: &Profile,
        inventory: &Inventory,
        driver_files: &DriverFiles,
        devices: &[(String, String)],
    ) -> Result<ClaimSpec> {
        let spec = build(ctx, uid, profile, inventory, driver_files, devices)?;
        write(ctx, &spec)?;
        Ok(spec)
    }

    fn profile() -> Profile {
        let text = r#"
name = "demo"
resource = "devinject.io/demo"
[discovery]
nodes = ["demo/accel[0-9]*"]
id = "index"
[[control_nodes]]
path = "demo/ctl"
[[libraries]]
glob = "/opt/devinject-demo/lib/libdemo.so.*"
[env]
DEMO_DRIVER_VERSION = "1.0"
"#;
        Profile::parse(text, Path::new("demo.toml")).unwrap()
    }

    fn node(path: &str, minor: u32, mode: u32, gid: u32) -> DeviceNode {
        DeviceNode {
            host_path: PathBuf::from(path),
            container_path: PathBuf::from(path),
            kind: DeviceKind::Char,
            major: 240,
            minor,
            mode,
            uid: 0,
            gid,
        }
    }

    fn inventory() -> Inventory {
        let devices = (0..3)
            .map(|i| Device {
                id: DeviceId::new(&i.to_string()).unwrap(),
                index: i,
                name: format!("accel{i}"),
                nodes: vec![node(&format!("/dev/demo/accel{i}"), i as u32, 0o660, 44)],
                numa_node: None,
                healthy: true,
                attributes: Default::default(),
                aliases: Vec::new(),
            })
            .collect();
        Inventory {
            withdrawn: Vec::new(),
            devices,
            control_nodes: vec![node("/dev/demo/ctl", 100, 0o666, 0)],
        }
    }

    fn driver_files() -> DriverFiles {
        DriverFiles {
            libraries: vec![DriverLibrary {
                path: PathBuf::from("/opt/devinject-demo/lib/libdemo.so.1.0"),
                file_name: "libdemo.so.1.0".into(),
                soname: Some("libdemo.so.1".into()),
                capability: None,
                links: Vec::new(),
            }],
            ..DriverFiles::default()
        }
    }

    fn ctx(root: &Path) -> SpecContext {
        SpecContext {
            driver: "devinject.io".into(),
            root: root.to_path_buf(),
            cdi_dir: PathBuf::from("/var/run/cdi"),
            hook_path: PathBuf::from("/usr/local/bin/devinject-hook"),
            hook_config: None,
            lib_dir: PathBuf::from("/usr/lib/x86_64-linux-gnu"),
        }
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// The demo claim spec of `UID` for `(DRA device, id)` pairs, rooted at `/`.
    fn build_demo(p: &[(&str, &str)]) -> ClaimSpec {
        build(
            &ctx(Path::new("/")),
            UID,
            &profile(),
            &inventory(),
            &driver_files(),
            &pairs(p),
        )
        .unwrap()
    }

    #[test]
    fn the_spec_holds_exactly_the_allocated_devices_under_claim_names() {
        let spec = build_demo(&[("demo-2", "2"), ("demo-0", "0"), ("demo-2", "2")]);
        assert_eq!(spec.file_name, format!("k8s.devinject.io-demo_{UID}.json"));
        assert_eq!(spec.spec.kind, "k8s.devinject.io/demo");
        let names: Vec<_> = spec.spec.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, [format!("{UID}-demo-2"), format!("{UID}-demo-0")]);
        let nodes: Vec<_> = spec.spec.devices[0]
            .container_edits
            .device_nodes
            .iter()
            .map(|n| (n.path.as_str(), n.minor))
            .collect();
        assert_eq!(nodes, [("/dev/demo/accel2", 2)]);
        assert_eq!(spec.spec.devices[0].container_edits.additional_gids, [44]);
        assert_eq!(
            spec.cdi_device_ids.get("demo-0").map(String::as_str),
            Some(format!("k8s.devinject.io/demo={UID}-demo-0").as_str())
        );
        assert_eq!(spec.cdi_device_ids.len(), 2);
        // Additional gids need CDI 0.7.0.
        assert_eq!(spec.spec.cdi_version, "0.7.0");
    }

    #[test]
    fn a_metadata_mount_raises_the_declared_version_to_what_it_needs() {
        // A UID starting with a letter, no libraries and no group: nothing else needs more
        // than CDI 0.3.0.
        let uid = "ab5e6f4c-2a7d-4f1e-9c3b-1d2e3f4a5b6c";
        let mut plain = inventory();
        for n in plain.devices.iter_mut().flat_map(|d| d.nodes.iter_mut()) {
            n.gid = 0;
        }
        let mut spec = build(
            &ctx(Path::new("/")),
            uid,
            &profile(),
            &plain,
            &DriverFiles::default(),
            &pairs(&[("demo-0", "0")]),
        )
        .unwrap();
        assert_eq!(spec.spec.cdi_version, "0.3.0");
        let mount = MetadataMount {
            device: "demo-0".into(),
            file: "m.json".into(),
            container_path: "/var/run/dra-device-attributes/m.json".into(),
        };
        mount_metadata(
            &mut spec,
            uid,
            &[mount],
            Path::new("/run/devinject/metadata"),
        );
        assert_eq!(spec.spec.devices[0].container_edits.mounts.len(), 1);
        assert_eq!(spec.spec.cdi_version, "0.4.0");
        assert_eq!(validate(&spec.spec), Ok(()));
    }

    #[test]
    fn two_shares_of_one_shared_device_are_two_cdi_devices_with_its_node() {
        let spec = build_demo(&[("demo-1--0", "1"), ("demo-1--1", "1")]);
        let names: Vec<_> = spec.spec.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [format!("{UID}-demo-1--0"), format!("{UID}-demo-1--1")]
        );
        for d in &spec.spec.devices {
            let nodes: Vec<_> = d
                .container_edits
                .device_nodes
                .iter()
                .map(|n| n.path.as_str())
                .collect();
            assert_eq!(nodes, ["/dev/demo/accel1"], "{}", d.name);
        }
        assert_eq!(spec.cdi_device_ids.len(), 2);
    }

    #[test]
    fn a_partition_is_its_devices_node_and_the_units_it_covers() {
        let text = "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\n\
                    nodes = [\"demo/accel[0-9]*\"]\nid = \"index\"\n[partitions]\nunits = 4\n\
                    env = \"DEMO_PARTITION\"\n[partitions.shapes]\nhalf = 2\nquarter = 1\n";
        let profile = Profile::parse(text, Path::new("demo.toml")).unwrap();
        let spec = build(
            &ctx(Path::new("/")),
            UID,
            &profile,
            &inventory(),
            &driver_files(),
            &pairs(&[
                ("demo-1-half1", "1@half1"),
                ("demo-2-quarter0", "2@quarter0"),
                ("demo-0", "0"),
            ]),
        )
        .unwrap();
        let seen: Vec<_> = spec
            .spec
            .devices
            .iter()
            .map(|d| {
                (
                    d.name.clone(),
                    d.container_edits
                        .device_nodes
                        .iter()
                        .map(|n| n.path.clone())
                        .collect::<Vec<_>>(),
                    d.container_edits.env.clone(),
                )
            })
            .collect();
        let node = |i: u32| vec![format!("/dev/demo/accel{i}")];
        assert_eq!(
            seen,
            [
                (
                    format!("{UID}-demo-1-half1"),
                    node(1),
                    vec!["DEMO_PARTITION=2-3".to_owned()]
                ),
                (
                    format!("{UID}-demo-2-quarter0"),
                    node(2),
                    vec!["DEMO_PARTITION=0-0".to_owned()]
                ),
                (format!("{UID}-demo-0"), node(0), vec![]),
            ]
        );
    }

    #[test]
    fn the_common_edits_come_from_the_cdi_renderer() {
        let spec = build_demo(&[("demo-1", "1")]).spec;
        let common = &spec.container_edits;
        assert_eq!(common.env, ["DEMO_DRIVER_VERSION=1.0"]);
        assert_eq!(common.device_nodes.len(), 1);
        assert_eq!(common.device_nodes[0].path, "/dev/demo/ctl");
        let mounts: Vec<_> = common
            .mounts
            .iter()
            .map(|m| (m.host_path.as_str(), m.container_path.as_str()))
            .collect();
        assert_eq!(
            mounts,
            [(
                "/opt/devinject-demo/lib/libdemo.so.1.0",
                "/usr/lib/x86_64-linux-gnu/libdemo.so.1.0"
            )]
        );
        assert_eq!(common.hooks.len(), 1);
        assert_eq!(common.hooks[0].hook_name, "createRuntime");
        assert_eq!(common.hooks[0].path, "/usr/local/bin/devinject-hook");
        assert!(
            common.hooks[0]
                .args
                .iter()
                .any(|a| a.contains("libdemo.so.1")),
            "{:?}",
            common.hooks[0].args
        );
    }

    /// A claim's spec serves user-namespaced containers too: each device runs the finish step
    /// naming its own host node (`--node`), the spec-level step names the control node, and
    /// nothing names a device the claim was not allocated.
    #[test]
    fn each_device_and_the_control_node_are_named_for_user_namespaced_copies() {
        let spec = build_demo(&[("demo-1", "1")]).spec;
        let nodes_of = |hooks: &[devinject_cdi::CdiHook]| -> Vec<String> {
            hooks
                .iter()
                .filter(|h| h.hook_name == "createRuntime")
                .flat_map(|h| h.args.windows(2))
                .filter(|w| w[0] == "--node")
                .map(|w| w[1].clone())
                .collect()
        };
        assert_eq!(spec.devices.len(), 1);
        assert_eq!(
            nodes_of(&spec.devices[0].container_edits.hooks),
            ["/dev/demo/accel1"]
        );
        assert_eq!(nodes_of(&spec.container_edits.hooks), ["/dev/demo/ctl"]);
    }

    #[test]
    fn a_device_discovery_no_longer_finds_is_an_error_naming_it() {
        let err = build(
            &ctx(Path::new("/")),
            UID,
            &profile(),
            &inventory(),
            &driver_files(),
            &pairs(&[("demo-7", "7")]),
        )
        .unwrap_err();
        assert!(matches!(&err, ClaimSpecError::UnknownDevice { id, .. } if id == "7"));
        assert!(err.to_string().contains("demo-7"), "{err}");
        let err = build(
            &ctx(Path::new("/")),
            "../etc",
            &profile(),
            &inventory(),
            &driver_files(),
            &pairs(&[("demo-0", "0")]),
        )
        .unwrap_err();
        assert!(matches!(err, ClaimSpecError::Naming(_)));
        let err = build(
            &ctx(Path::new("/")),
            UID,
            &profile(),
            &inventory(),
            &driver_files(),
            &[],
        )
        .unwrap_err();
        assert!(matches!(err, ClaimSpecError::NoDevices { .. }));
    }

    #[test]
    fn a_device_called_all_is_kept_and_no_all_device_is_added() {
        let mut inv = inventory();
        inv.devices[1].id = DeviceId::new("all").unwrap();
        let spec = build(
            &ctx(Path::new("/")),
            UID,
            &profile(),
            &inv,
            &driver_files(),
            &pairs(&[("demo-all", "all")]),
        )
        .unwrap()
        .spec;
        assert_eq!(spec.devices.len(), 1);
        assert_eq!(spec.devices[0].name, format!("{UID}-demo-all"));
        assert_eq!(
            spec.devices[0].container_edits.device_nodes[0].path,
            "/dev/demo/accel1"
        );
    }

    #[test]
    fn written_with_mode_0644_replaced_atomically_and_removed_exactly() {
        let root = tempfile::tempdir().unwrap();
        let ctx = ctx(root.path());
        let spec = prepare(
            &ctx,
            UID,
            &profile(),
            &inventory(),
            &driver_files(),
            &pairs(&[("demo-0", "0")]),
        )
        .unwrap();
        let path = root.path().join("var/run/cdi").join(&spec.file_name);
        assert_eq!(shown_path(&ctx, &spec.file_name), path);
        let text = std::fs::read_to_string(&path).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["kind"], "k8s.devinject.io/demo");
        assert_eq!(json["devices"][0]["name"], format!("{UID}-demo-0"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o644);
        // A second prepare with another device replaces it; no temporary file is left.
        prepare(
            &ctx,
            UID,
            &profile(),
            &inventory(),
            &driver_files(),
            &pairs(&[("demo-1", "1")]),
        )
        .unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(json["devices"][0]["name"], format!("{UID}-demo-1"));
        // Another claim's spec stays when this one is removed.
        let other = naming::claim_spec_file("devinject.io", "demo", "other-uid");
        std::fs::write(root.path().join("var/run/cdi").join(&other), "{}").unwrap();
        assert!(remove(&ctx, "demo", UID).unwrap());
        assert!(!path.exists());
        assert!(!remove(&ctx, "demo", UID).unwrap(), "absent is fine");
        let left: Vec<_> = std::fs::read_dir(root.path().join("var/run/cdi"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, [other]);
    }

    #[test]
    fn a_written_spec_is_present_and_a_removed_or_linked_one_is_not() {
        let root = tempfile::tempdir().unwrap();
        let ctx = ctx(root.path());
        assert!(
            !present(&ctx, "k8s.devinject.io-demo_x.json").unwrap(),
            "no directory"
        );
        let spec = build_demo(&[("demo-0", "0")]);
        write(&ctx, &spec).unwrap();
        assert!(present(&ctx, &spec.file_name).unwrap());
        assert!(remove(&ctx, "demo", UID).unwrap());
        assert!(!present(&ctx, &spec.file_name).unwrap());
        symlink("/etc/passwd", shown_path(&ctx, &spec.file_name)).unwrap();
        assert!(
            !present(&ctx, &spec.file_name).unwrap(),
            "a link is not our spec"
        );
    }

    #[test]
    fn remove_without_a_cdi_directory_is_nothing_to_do() {
        let root = tempfile::tempdir().unwrap();
        assert!(!remove(&ctx(root.path()), "demo", UID).unwrap());
    }

    #[test]
    fn a_symlink_at_the_spec_name_is_refused_and_left() {
        let root = tempfile::tempdir().unwrap();
        let ctx = ctx(root.path());
        let dir = root.path().join("var/run/cdi");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(root.path().join("canary"), "c").unwrap();
        let name = naming::claim_spec_file("devinject.io", "demo", UID);
        symlink("/canary", dir.join(&name)).unwrap();
        let err = prepare(
            &ctx,
            UID,
            &profile(),
            &inventory(),
            &driver_files(),
            &pairs(&[("demo-0", "0")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(remove(&ctx, "demo", UID).is_err());
        assert!(dir.join(&name).is_symlink());
        assert_eq!(
            std::fs::read_to_string(root.path().join("canary")).unwrap(),
            "c"
        );
    }

    #[test]
    fn a_symlink_at_the_cdi_directory_is_refused_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let ctx = ctx(root.path());
        std::fs::create_dir_all(root.path().join("etc/elsewhere")).unwrap();
        std::fs::create_dir_all(root.path().join("var/run")).unwrap();
        symlink("/etc/elsewhere", root.path().join("var/run/cdi")).unwrap();
        let err = prepare(
            &ctx,
            UID,
            &profile(),
            &inventory(),
            &driver_files(),
            &pairs(&[("demo-0", "0")]),
        )
        .unwrap_err();
        assert!(
            matches!(&err, ClaimSpecError::NotADirectory { what, .. } if *what == "symbolic link"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(root.path().join("etc/elsewhere"))
                .unwrap()
                .count(),
            0
        );
        assert!(matches!(
            remove(&ctx, "demo", UID),
            Err(ClaimSpecError::NotADirectory { .. })
        ));
    }

    #[test]
    fn remove_file_refuses_names_that_are_not_claim_specs() {
        let root = tempfile::tempdir().unwrap();
        let ctx = ctx(root.path());
        for bad in [
            "../../etc/passwd",
            "devinject.io-demo.json",
            "k8s.devinject.io-demo/../../x.json",
            "k8s.devinject.io-demo_u1.toml",
        ] {
            assert!(remove_file(&ctx, bad).is_err(), "{bad}");
        }
        assert!(!remove_file(&ctx, "k8s.devinject.io-demo_u1.json").unwrap());
    }
}
