//! CDI export (`devinject-ctl cdi generate`): one Container Device Interface spec per profile
//! with devices on this host, so that engines that inject CDI devices natively (containerd >=
//! 1.7, CRI-O >= 1.24, podman >= 4.1, docker >= 25) need neither the shim nor the hook for
//! nodes and mounts.
//!
//! The spec is the planner's plan for "all devices", split the way CDI applies edits:
//! - `kind` is `devinject.io/<profile>` (our vendor prefix, so it never collides with a
//!   vendor's own specs for the same hardware);
//! - one device per discovered device, named by its id, carrying its own nodes, plus `all`;
//! - spec-level `containerEdits` (applied once whenever any device of the kind is injected): the
//!   control nodes, the read-only mounts of libraries, binaries and files, the profile's env,
//!   and — when libraries are injected — a `createRuntime` hook running `devinject-hook finish`
//!   for the soname links and the linker cache, as the runtime shim wires it (the libraries named
//!   `--mounted-library`: the runtime mounts them, the hook only lists them in the cache).
//!
//! The request variable (`<NAME>_VISIBLE_DEVICES`) is deliberately not set: it would make a
//! container started through the shim or hook as well ask for the devices again.
//!
//! `cdiVersion` is the lowest version that holds what the spec uses (runtimes reject specs whose
//! version is newer than they know, and CDI rejects specs using a field newer than their
//! version): 0.3.0, or 0.5.0 when a device name starts with a digit or a node's host path differs
//! from its container path, or 0.6.0 when the kind's class contains a dot, or 0.7.0 when an edit
//! has `additionalGids`.
//!
//! `additionalGids`: a node only its group may use (`0660 root:render`) adds that group, so a
//! container running as a non-root user with no supplementary groups can open what it was
//! granted; the root group is never added ([`devinject_devices::DeviceNode::access_group`]).

use std::path::{Path, PathBuf};

use devinject_devices::{
    access_groups, discover, plan, resolve_driver_files, ContainerLayout, DeviceNode, EnvVar,
    FinishArgs, FinishInvocation, HostRoots, Mount, MountKind, PlanInput, ProfileSet, Request,
    CDI_VENDOR,
};
use serde::Serialize;

use crate::diff;
use crate::engines::docker::render_json;
use crate::engines::hooksd::hook_command;
use crate::error::{Result, RuntimeConfigError};
use crate::host_dir::{HostDir, Name};
use crate::report::{Action, FileChange};

/// Default directory CDI specs are written to (CDI's static directory).
pub const DEFAULT_OUTPUT_DIR: &str = "/etc/cdi";
/// Default profiles directory, as for the hook.
pub use devinject_devices::profile_set::DEFAULT_PROFILES_DIR;

/// A CDI spec (the subset devinject writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiSpec {
    /// The CDI version the spec needs.
    pub cdi_version: String,
    /// `vendor/class`.
    pub kind: String,
    /// The devices.
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
    /// Device nodes.
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

/// A CDI device node.
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

/// A CDI mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// Host file.
    pub host_path: String,
    /// Where it appears in the container.
    pub container_path: String,
    /// Mount options.
    pub options: Vec<String>,
}

/// A CDI hook.
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

/// What to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiRequest {
    /// Prefix under which the host's `/` is reachable (see [`crate::HostPaths::root`]).
    pub root: PathBuf,
    /// Profiles directory (host path).
    pub profiles_dir: PathBuf,
    /// Device, sysfs and driver roots (host paths).
    pub roots: HostRoots,
    /// Directory the specs go to (host path).
    pub output_dir: PathBuf,
    /// `devinject-hook` (host path), for the soname/ldcache hook.
    pub hook_path: PathBuf,
    /// `--config` for the hook, when not the default.
    pub hook_config: Option<PathBuf>,
    /// Where libraries go in containers.
    pub lib_dir: PathBuf,
    /// Report only.
    pub dry_run: bool,
}

impl Default for CdiRequest {
    fn default() -> Self {
        CdiRequest {
            root: PathBuf::from("/"),
            profiles_dir: PathBuf::from(DEFAULT_PROFILES_DIR),
            roots: HostRoots::default(),
            output_dir: PathBuf::from(DEFAULT_OUTPUT_DIR),
            hook_path: PathBuf::from(crate::request::DEFAULT_HOOK_PATH),
            hook_config: None,
            lib_dir: ContainerLayout::default().lib_dir,
            dry_run: false,
        }
    }
}

impl CdiRequest {
    /// Where the host path `host` is for this process: below [`CdiRequest::root`], the host's
    /// own absolute links followed inside it ([`crate::host_root::resolve_in_root`]).
    pub fn access(&self, host: &Path) -> PathBuf {
        crate::host_root::resolve_in_root(&self.root, host)
    }

    /// The device, sysfs and driver roots as this process reaches them.
    pub fn access_roots(&self) -> HostRoots {
        HostRoots {
            dev_root: self.access(&self.roots.dev_root),
            sys_root: self.access(&self.roots.sys_root),
            proc_root: self.access(&self.roots.proc_root),
            driver_root: self.access(&self.roots.driver_root),
        }
    }
}

/// What happened to one profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileOutcome {
    /// The profile.
    pub profile: String,
    /// Devices found.
    pub devices: usize,
    /// Their ids, in discovery order: the spec's device names besides `all`.
    pub device_ids: Vec<String>,
    /// The spec file (host path), when one is written.
    pub file: Option<PathBuf>,
    /// Its `cdiVersion`.
    pub cdi_version: Option<String>,
    /// Why the profile's devices are not exported although it has some.
    pub not_exported: Option<String>,
}

/// Why a profile with a prepare step gets no CDI spec.
pub const PREPARE_NOT_EXPORTED: &str = "the profile has a prepare step, which a CDI spec cannot \
    run (its devices would start unprepared): inject them through the runtime shim or NRI \
    (docs/prepare.md)";

/// The result of [`generate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiReport {
    /// One entry per profile.
    pub profiles: Vec<ProfileOutcome>,
    /// Files created, changed or removed (stale specs of profiles without devices).
    pub changes: Vec<FileChange>,
    /// Nothing was written.
    pub dry_run: bool,
}

/// The spec file name for a profile.
pub fn file_name(profile: &str) -> String {
    format!("{CDI_VENDOR}-{profile}.json")
}

fn devices_error(e: impl std::fmt::Display) -> RuntimeConfigError {
    RuntimeConfigError::Devices {
        message: e.to_string(),
    }
}

fn cdi_node(node: &DeviceNode, host_view: &dyn Fn(&Path) -> PathBuf) -> CdiDeviceNode {
    let host = host_view(&node.host_path);
    CdiDeviceNode {
        path: node.container_path.display().to_string(),
        host_path: (host != node.container_path).then(|| host.display().to_string()),
        kind: node.kind.to_string(),
        major: i64::from(node.major),
        minor: i64::from(node.minor),
        file_mode: node.mode & 0o777,
        permissions: node.rule().access.to_string(),
        uid: node.uid,
        gid: node.gid,
    }
}

/// The lowest CDI version that holds what `spec` uses.
pub fn min_version(spec: &CdiSpec) -> &'static str {
    let edits = || {
        std::iter::once(&spec.container_edits)
            .chain(spec.devices.iter().map(|d| &d.container_edits))
    };
    if edits().any(|e| !e.additional_gids.is_empty()) {
        return "0.7.0";
    }
    let class = spec.kind.split_once('/').map_or("", |(_, c)| c);
    if class.contains('.') {
        return "0.6.0";
    }
    let host_paths = edits()
        .flat_map(|e| e.device_nodes.iter())
        .any(|n| n.host_path.is_some());
    let digit_names = spec
        .devices
        .iter()
        .any(|d| !d.name.starts_with(|c: char| c.is_ascii_alphabetic()));
    if host_paths || digit_names {
        "0.5.0"
    } else {
        "0.3.0"
    }
}

/// Checks the rules CDI's parser enforces on what we write: the kind, device names, absolute
/// paths, known hook stages, at least one device.
pub fn validate(spec: &CdiSpec) -> std::result::Result<(), String> {
    let (vendor, class) = spec
        .kind
        .split_once('/')
        .ok_or_else(|| format!("kind {:?} is not vendor/class", spec.kind))?;
    let label = |s: &str, extra: &[char]| {
        !s.is_empty()
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    };
    if !label(vendor, &['-', '.']) || !vendor.contains('.') {
        return Err(format!("vendor {vendor:?} is not a domain name"));
    }
    if !label(class, &['-', '_', '.']) {
        return Err(format!("class {class:?} is invalid"));
    }
    if spec.devices.is_empty() {
        return Err("a spec needs at least one device".to_string());
    }
    let mut names = std::collections::BTreeSet::new();
    for d in &spec.devices {
        if !label(&d.name, &['-', '_', '.', ':']) {
            return Err(format!("device name {:?} is invalid", d.name));
        }
        if !names.insert(&d.name) {
            return Err(format!("device name {:?} is used twice", d.name));
        }
    }
    let edits = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits));
    for e in edits {
        for n in &e.device_nodes {
            if !n.path.starts_with('/') || n.host_path.as_ref().is_some_and(|h| !h.starts_with('/'))
            {
                return Err(format!("device node {:?} has a relative path", n.path));
            }
            if !matches!(n.kind.as_str(), "c" | "b") {
                return Err(format!("device node {:?} has type {:?}", n.path, n.kind));
            }
        }
        for m in &e.mounts {
            if !m.host_path.starts_with('/') || !m.container_path.starts_with('/') {
                return Err(format!("mount {:?} has a relative path", m.container_path));
            }
        }
        for h in &e.hooks {
            let stages = [
                "prestart",
                "createRuntime",
                "createContainer",
                "startContainer",
                "poststart",
                "poststop",
            ];
            if !stages.contains(&h.hook_name.as_str()) || !h.path.starts_with('/') {
                return Err(format!("hook {:?} at {:?} is invalid", h.path, h.hook_name));
            }
        }
        for v in &e.env {
            if !v.contains('=') {
                return Err(format!("env entry {v:?} has no '='"));
            }
        }
    }
    Ok(())
}

/// The `createRuntime` hook entry for soname links and the linker cache: the same
/// `devinject-hook finish` the runtime shim adds (see the hook crate's `finish`), but naming the
/// libraries with `--mounted-library`, since the runtime mounts them from the spec: the hook
/// then writes the cache itself instead of running ldconfig over the directories.
fn finish_hook(
    req: &CdiRequest,
    edits: &devinject_devices::ContainerEdits,
    host_view: &dyn Fn(&Path) -> PathBuf,
) -> Option<CdiHook> {
    if edits.symlinks.is_empty() && edits.ldcache_dirs.is_empty() {
        return None;
    }
    let finish = FinishArgs {
        mounted_libraries: edits
            .mounts
            .iter()
            .filter(|m| m.kind == MountKind::Library)
            .map(|m| Mount {
                host_path: host_view(&m.host_path),
                ..m.clone()
            })
            .collect(),
        links: edits.symlinks.clone(),
        ldcache_dirs: edits.ldcache_dirs.clone(),
        forward_compat: edits.forward_compat.clone(),
        ..FinishArgs::default()
    };
    hook_command(&req.hook_path, req.hook_config.as_deref())
        .finish(finish)
        .as_ref()
        .map(CdiHook::create_runtime)
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

/// Builds the spec for one profile from what was found on the host; `None` without devices.
pub fn build_spec(
    req: &CdiRequest,
    profile: &devinject_devices::Profile,
    inventory: &devinject_devices::Inventory,
    driver_files: &devinject_devices::DriverFiles,
) -> Result<Option<CdiSpec>> {
    if inventory.devices.is_empty() {
        return Ok(None);
    }
    let layout = ContainerLayout {
        lib_dir: req.lib_dir.clone(),
    };
    let Some(plan) = plan(PlanInput {
        profile,
        inventory,
        request: &Request::All,
        resolve: devinject_devices::Resolve::Ids,
        driver_files,
        // A spec cannot read the container's env: it carries every part of the driver, as
        // NVIDIA's generated specs do.
        capabilities: &devinject_devices::Capabilities::All,
        layout: &layout,
    })
    .map_err(devices_error)?
    else {
        return Ok(None);
    };
    let root = req.root.clone();
    let host_view = move |p: &Path| -> PathBuf {
        match p.strip_prefix(&root) {
            Ok(rel) if root != Path::new("/") => Path::new("/").join(rel),
            _ => p.to_path_buf(),
        }
    };
    let mut common = CdiEdits {
        env: plan
            .edits
            .env
            .iter()
            .filter(|e| e.name != profile.request_env())
            .map(EnvVar::entry)
            .collect(),
        device_nodes: inventory
            .control_nodes
            .iter()
            .map(|n| cdi_node(n, &host_view))
            .collect(),
        hooks: finish_hook(req, &plan.edits, &host_view)
            .into_iter()
            .collect(),
        mounts: plan
            .edits
            .mounts
            .iter()
            .map(|m| CdiMount {
                host_path: host_view(&m.host_path).display().to_string(),
                container_path: m.container_path.display().to_string(),
                options: Mount::OPTIONS.iter().map(|o| o.to_string()).collect(),
            })
            .collect(),
        additional_gids: access_groups(&inventory.control_nodes),
    };
    common.env.dedup();
    let mut devices: Vec<CdiDevice> = inventory
        .devices
        .iter()
        .map(|d| CdiDevice {
            name: d.id.as_str().to_string(),
            container_edits: CdiEdits {
                device_nodes: d.nodes.iter().map(|n| cdi_node(n, &host_view)).collect(),
                additional_gids: access_groups(&d.nodes),
                ..CdiEdits::default()
            },
        })
        .collect();
    if !devices.iter().any(|d| d.name == "all") {
        devices.push(CdiDevice {
            name: "all".to_string(),
            container_edits: CdiEdits {
                device_nodes: devices
                    .iter()
                    .flat_map(|d| d.container_edits.device_nodes.iter().cloned())
                    .collect(),
                additional_gids: access_groups(inventory.devices.iter().flat_map(|d| &d.nodes)),
                ..CdiEdits::default()
            },
        });
    }
    let mut spec = CdiSpec {
        cdi_version: String::new(),
        kind: profile.name.cdi_kind(),
        devices,
        container_edits: common,
    };
    spec.cdi_version = min_version(&spec).to_string();
    validate(&spec).map_err(|problem| RuntimeConfigError::Devices {
        message: format!(
            "profile {}: the CDI spec would be invalid: {problem}",
            profile.name.as_str()
        ),
    })?;
    Ok(Some(spec))
}

/// Writes (or, for a dry run, diffs) a CDI spec per profile with devices, and removes our
/// specs of profiles without devices.
pub fn generate(req: &CdiRequest) -> Result<CdiReport> {
    let roots = req.access_roots();
    let profiles = ProfileSet::load_dir(&req.access(&req.profiles_dir)).map_err(devices_error)?;
    let mut report = CdiReport {
        profiles: Vec::new(),
        changes: Vec::new(),
        dry_run: req.dry_run,
    };
    let mut writes: Vec<(PathBuf, Option<String>)> = Vec::new();
    for profile in profiles.iter() {
        let name = profile.name.as_str().to_string();
        let inventory = discover(profile, &roots).map_err(devices_error)?;
        let not_exported = (profile.prepare.is_some() && !inventory.devices.is_empty())
            .then(|| PREPARE_NOT_EXPORTED.to_owned());
        let spec = if inventory.devices.is_empty() || not_exported.is_some() {
            None
        } else {
            let files = resolve_driver_files(profile, &roots).map_err(devices_error)?;
            build_spec(req, profile, &inventory, &files)?
        };
        let host_file = req.output_dir.join(file_name(&name));
        report.profiles.push(ProfileOutcome {
            profile: name,
            devices: inventory.devices.len(),
            device_ids: inventory
                .devices
                .iter()
                .map(|d| d.id.as_str().to_string())
                .collect(),
            file: spec.as_ref().map(|_| host_file.clone()),
            cdi_version: spec.as_ref().map(|s| s.cdi_version.clone()),
            not_exported,
        });
        let content = spec.map(|s| {
            render_json(
                &serde_json::to_value(&s).expect("a CDI spec serialises"),
                None,
            )
        });
        writes.push((host_file, content));
    }
    // Every spec name is looked at before anything is written, so a refusal leaves all specs as
    // they were. The names are ours: nothing at them is followed or opened before its type is
    // known, whatever the root.
    let mut dir = HostDir::open(&req.root, &req.output_dir)?;
    let mut steps = Vec::new();
    for (host_file, content) in writes {
        let name = std::ffi::OsString::from(host_file.file_name().unwrap_or_default());
        let current = match &dir {
            Some(d) => d.read(&name, Name::Ours)?,
            None => None,
        };
        if current == content {
            continue;
        }
        let action = match (&current, &content) {
            (None, _) => Action::Create,
            (_, None) => Action::Remove,
            _ => Action::Modify,
        };
        report.changes.push(FileChange {
            diff: diff::unified(
                &host_file.display().to_string(),
                current.as_deref(),
                content.as_deref(),
            ),
            path: host_file,
            action,
        });
        steps.push((name, content));
    }
    if req.dry_run {
        return Ok(report);
    }
    for (name, content) in steps {
        match content {
            Some(text) => {
                if dir.is_none() {
                    dir = Some(HostDir::create(&req.root, &req.output_dir)?.0);
                }
                if let Some(d) = &dir {
                    d.write(&name, text.as_bytes(), None)?;
                }
            }
            None => {
                if let Some(d) = &dir {
                    d.remove(&name)?;
                }
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str, names: &[&str], host_path: Option<&str>) -> CdiSpec {
        CdiSpec {
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
        }
    }

    #[test]
    fn version_is_the_lowest_that_holds_the_spec() {
        assert_eq!(
            min_version(&spec("devinject.io/kvm", &["kvm", "all"], None)),
            "0.3.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/demo", &["0", "all"], None)),
            "0.5.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/kvm", &["kvm"], Some("/h/dev/x"))),
            "0.5.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/a.b", &["x"], None)),
            "0.6.0"
        );
        let mut grouped = spec("devinject.io/a.b", &["0"], Some("/h/dev/x"));
        grouped.devices[0].container_edits.additional_gids = vec![44];
        assert_eq!(min_version(&grouped), "0.7.0");
        grouped.devices[0].container_edits.additional_gids.clear();
        grouped.container_edits.additional_gids = vec![44];
        assert_eq!(min_version(&grouped), "0.7.0", "spec-level edits count too");
    }

    #[test]
    fn validation_rejects_what_cdi_rejects() {
        assert!(validate(&spec("devinject.io/kvm", &["kvm"], None)).is_ok());
        assert!(validate(&spec("devinject.io/gpu", &["0000:01:00.0"], None)).is_ok());
        assert!(validate(&spec("devinject/kvm", &["kvm"], None)).is_err());
        assert!(validate(&spec("devinject.io/kvm", &["-x"], None)).is_err());
        assert!(validate(&spec("devinject.io/kvm", &["a", "a"], None)).is_err());
        assert!(validate(&spec("devinject.io/kvm", &[], None)).is_err());
        assert!(validate(&spec("devinject.io/kvm", &["k"], Some("rel"))).is_err());
    }
}
