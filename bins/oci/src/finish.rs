//! `devinject-hook finish`: the createRuntime hook the shim adds for what it keeps out of the spec.
//!
//! The shim already put nodes and cgroup rules into `config.json`; this mounts the files
//! read-only (through the same fd-based applier as the hook, so a hostile or raced rootfs cannot
//! redirect them), makes the soname links and refreshes the linker cache, from explicit arguments
//! (no profile lookup, no request parsing: the shim did that once).
//!
//! A CDI spec carries the same step, but the runtime itself mounts the spec's libraries: it names
//! them with `--mounted-library`, so the linker cache lists them (written by the hook, as for the
//! shim) without mounting them a second time.
//!
//! For a container with a user namespace it makes the nodes named by `--node` itself, as copies
//! the container owns (the runtime would bind the host's, seen owned by nobody there; see
//! [`crate::inject::nodes`]); without one it leaves them to the runtime.
//!
//! For the NRI plugin, whose adjustment cannot add a group to the process, it also gives the
//! nodes named by `--group-node` (which the runtime made from `linux.devices`) to the process's
//! group when the process lacks theirs ([`crate::inject::nodes::regroup`]).

pub use devinject_devices::FinishArgs;
use devinject_devices::{ContainerEdits, DecidedNode};
use devinject_discovery::node;
use devinject_hostconfig::HostConfig;
use std::io::Read;

use crate::error::HookError;
use crate::inject::ldconfig::Ldconfig;
use crate::inject::{self, Target};
use crate::oci::{read_bounded, OciError, State, MAX_STATE_BYTES};
use crate::refusal::Seen;

/// Runs the finish step for the container described by the state on `stdin`; its id goes into
/// `seen`, for the decision log when it fails ([`crate::refusal`]).
pub fn finish(
    config: &HostConfig,
    args: &FinishArgs,
    stdin: impl Read,
    seen: &mut Seen,
) -> Result<inject::Report, HookError> {
    let bytes = read_bounded(stdin, MAX_STATE_BYTES, "OCI state on stdin")?;
    let state = State::parse(&bytes)?;
    seen.container.clone_from(&state.id);
    if !state.is_being_created() {
        return Err(HookError::Stage {
            status: state.status,
        });
    }
    let (bundle, spec) = crate::bundle::load(&state)?;
    seen.annotated(&spec.annotations);
    let paths = args
        .links
        .iter()
        .map(|l| ("finish --link", &l.link))
        .chain(
            args.mounts
                .iter()
                .chain(&args.mounted_libraries)
                .flat_map(|m| {
                    [
                        ("finish --mount", &m.host_path),
                        ("finish --mount", &m.container_path),
                    ]
                }),
        )
        .chain(args.group_nodes.iter().map(|p| ("finish --group-node", p)))
        .chain(args.nodes.iter().map(|n| ("finish --node", &n.host_path)))
        .chain(
            args.forward_compat
                .iter()
                .map(|f| ("finish --forward-compat", &f.dir)),
        );
    for (what, p) in paths {
        if !p.is_absolute() {
            return Err(HookError::Input(OciError::Invalid {
                what: what.into(),
                problem: format!("{} is not absolute", p.display()),
            }));
        }
    }
    // Each node is the device the admission decided (its kind and numbers come with it), found
    // under the dev root the config names for its mode and owner, and refused when its path now
    // leads to another device: a stable link retargeted since the decision must not hand the
    // container a copy of a device it was not granted. Without a user namespace the runtime
    // made the nodes from the spec, and they stay as it made them (a CDI spec names `--node`
    // for every container, for those that have one).
    let copies: &[DecidedNode] = if spec.has_user_namespace() {
        &args.nodes
    } else {
        &[]
    };
    let device_nodes = copies
        .iter()
        .map(|n| {
            node::read_decided(&n.host_path, &config.dev_root, n.number).map_err(|e| {
                OciError::Invalid {
                    what: "finish --node".into(),
                    problem: e.to_string(),
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let edits = ContainerEdits {
        device_nodes,
        mounts: args.mounts.clone(),
        symlinks: args.links.clone(),
        ldcache_dirs: args.ldcache_dirs.clone(),
        forward_compat: args.forward_compat.clone(),
        ..ContainerEdits::default()
    };
    let regroup = args
        .group_nodes
        .iter()
        .map(|p| spec.device_node(p))
        .collect::<Result<Vec<_>, _>>()?;
    let target = Target {
        pid: state.pid,
        rootfs: spec.rootfs(&bundle)?,
        bind_nodes: true,
        readonly_rootfs: spec.root.as_ref().is_some_and(|r| r.readonly),
        user: spec.process.as_ref().map(|p| p.user.clone()),
        regroup,
        mounted_libraries: args.mounted_libraries.clone(),
    };
    inject::apply(
        &target,
        &edits,
        config.mount_api,
        &Ldconfig::from_config(config),
    )
    .map_err(|source| HookError::Inject {
        id: state.id,
        source,
    })
}
