//! One profile's plan for "all devices" as a CDI spec.

use std::path::{Path, PathBuf};

use devinject_devices::{
    access_groups, plan, ContainerLayout, DecidedNode, DeviceNode, EnvVar, FinishArgs, HookCommand,
    Mount, MountKind, PlanInput, Request,
};

use crate::error::{devices_error, CdiError, Result};
use crate::request::CdiRequest;
use crate::spec::{CdiDevice, CdiDeviceNode, CdiEdits, CdiHook, CdiMount, CdiSpec};
use crate::validate::validate;
use crate::version::min_version;

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

/// `devinject-hook` as the spec's hooks run it. A relative configuration path is taken where
/// the command line named it, as for the hooks.d files `devinject-ctl` writes
/// (runtime-config's `hooksd::hook_command`).
fn hook_command(req: &CdiRequest) -> HookCommand {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    HookCommand::new(&req.hook_path, req.hook_config.as_deref(), &cwd)
}

/// The `createRuntime` hook entry for soname links and the linker cache: the same
/// `devinject-hook finish` the runtime shim adds (see the hook crate's `finish`), but naming the
/// libraries with `--mounted-library`, since the runtime mounts them from the spec: the hook
/// then writes the cache itself instead of running ldconfig over the directories. With
/// [`CdiRequest::user_namespaces`], the control nodes go with it as `--node`.
fn finish_hook(
    req: &CdiRequest,
    hook: &HookCommand,
    edits: &devinject_devices::ContainerEdits,
    control_nodes: &[DeviceNode],
    host_view: &dyn Fn(&Path) -> PathBuf,
) -> Option<CdiHook> {
    let nodes = owned_copies(req, control_nodes, host_view);
    if edits.symlinks.is_empty() && edits.ldcache_dirs.is_empty() && nodes.is_empty() {
        return None;
    }
    let finish = FinishArgs {
        nodes,
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
    hook.finish(finish).as_ref().map(CdiHook::create_runtime)
}

/// `nodes` as decided, at their host paths, for `finish --node`, when the spec gives nodes to
/// user-namespaced containers as copies they own ([`CdiRequest::user_namespaces`]); none
/// otherwise. Each carries its kind and numbers, as the spec's `deviceNodes` do.
fn owned_copies(
    req: &CdiRequest,
    nodes: &[DeviceNode],
    host_view: &dyn Fn(&Path) -> PathBuf,
) -> Vec<DecidedNode> {
    if !req.user_namespaces {
        return Vec::new();
    }
    nodes
        .iter()
        .map(|n| DecidedNode::new(n, host_view(&n.host_path)))
        .collect()
}

/// The `createRuntime` hook that gives `nodes` to a user-namespaced container as copies it
/// owns (`devinject-hook finish --node`), with [`CdiRequest::user_namespaces`].
fn node_copies_hook(
    req: &CdiRequest,
    hook: &HookCommand,
    nodes: &[DeviceNode],
    host_view: &dyn Fn(&Path) -> PathBuf,
) -> Option<CdiHook> {
    hook.finish(FinishArgs {
        nodes: owned_copies(req, nodes, host_view),
        ..FinishArgs::default()
    })
    .as_ref()
    .map(CdiHook::create_runtime)
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
    let hook = hook_command(req);
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
        hooks: finish_hook(
            req,
            &hook,
            &plan.edits,
            &inventory.control_nodes,
            &host_view,
        )
        .into_iter()
        .collect(),
        mounts: plan
            .edits
            .mounts
            .iter()
            .map(|m| CdiMount::read_only_bind(&host_view(&m.host_path), &m.container_path))
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
                hooks: node_copies_hook(req, &hook, &d.nodes, &host_view)
                    .into_iter()
                    .collect(),
                ..CdiEdits::default()
            },
        })
        .collect();
    if !devices.iter().any(|d| d.name == "all") {
        let all_nodes: Vec<DeviceNode> = inventory
            .devices
            .iter()
            .flat_map(|d| d.nodes.iter().cloned())
            .collect();
        devices.push(CdiDevice {
            name: "all".to_string(),
            container_edits: CdiEdits {
                device_nodes: devices
                    .iter()
                    .flat_map(|d| d.container_edits.device_nodes.iter().cloned())
                    .collect(),
                additional_gids: access_groups(inventory.devices.iter().flat_map(|d| &d.nodes)),
                hooks: node_copies_hook(req, &hook, &all_nodes, &host_view)
                    .into_iter()
                    .collect(),
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
    validate(&spec).map_err(|problem| CdiError::Devices {
        message: format!(
            "profile {}: the CDI spec would be invalid: {problem}",
            profile.name.as_str()
        ),
    })?;
    Ok(Some(spec))
}
