//! One hook invocation, start to end.
//!
//! 1. Read the OCI state (bounded) and the bundle's `config.json`.
//! 2. Find the container's requests (our annotation, else the profile's env variable), then
//! 3. check them against the request policy ([`devinject_admission::policy`]: in Kubernetes, what the kubelet
//!    granted, asked of its pod-resources API in-process, before anything forks) and
//! 4. plan, discovery and file resolution only for profiles that were asked for: steps 2 to 4
//!    are [`devinject_admission::admit`], shared with the shim and the NRI plugin.
//! 5. Run the profiles' prepare steps on the host ([`devinject_contained::prepare_step`]), then
//! 6. apply in the container's mount namespace, then set device cgroup rules.
//!
//! Nothing is injected unless every step up to the plan succeeded: a bad request fails the
//! container before anything is touched.

use std::io::Read;

use devinject_hostconfig::HostConfig;

use crate::cgroup_rules;
use crate::error::HookError;
use crate::inject::ldcache::Ldconfig;
use crate::inject::{self, layout, rootfs::Rootfs, Target};
use crate::oci::{read_bounded, Spec, State, MAX_STATE_BYTES};
use devinject_admission::admit::{asked, Admission};
use devinject_contained::prepare_step;

/// What the hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The container asked for nothing.
    Nothing,
    /// Devices and files were injected.
    Injected {
        /// Profile and device ids, for logs.
        devices: Vec<String>,
        /// What the applier did.
        report: inject::Report,
    },
}

/// Runs the hook with the state read from `stdin`.
pub fn run(config: &HostConfig, stdin: impl Read) -> Result<Outcome, HookError> {
    let bytes = read_bounded(stdin, MAX_STATE_BYTES, "OCI state on stdin")?;
    let state = State::parse(&bytes)?;
    let spec = Spec::load(&state.bundle)?;
    let mut annotations = spec.annotations.clone();
    annotations.extend(state.annotations.clone());

    // Most containers ask for nothing: tell that without parsing every profile.
    let env_names = || {
        spec.process
            .iter()
            .flat_map(|p| &p.env)
            .filter_map(|e| e.split_once('=').map(|(k, _)| k))
    };
    let mentions = |needle: &str| {
        env_names().any(|k| k.contains(needle)) || annotations.keys().any(|k| k.contains(needle))
    };
    let admission = Admission::from_config(config);
    let Some(profiles) = admission.may_be_asking(mentions)? else {
        return Ok(Outcome::Nothing);
    };
    let Some(asked) = asked(profiles, |name| spec.env(name), &annotations)? else {
        return Ok(Outcome::Nothing);
    };
    if state.status != "creating" || state.pid <= 0 {
        return Err(HookError::Stage {
            status: state.status,
        });
    }
    let rootfs_path = spec.rootfs(&state.bundle)?;
    let span = tracing::info_span!("hook", container = %state.id);
    let _guard = span.enter();
    let plan = asked.admit(&admission, &annotations, || {
        Rootfs::open(&rootfs_path)
            .map(|r| layout::detect(&r))
            .unwrap_or_default()
    })?;
    let Some(plan) = plan else {
        return Ok(Outcome::Nothing);
    };
    prepare_step::run_all(&plan.prepare).map_err(|source| HookError::Prepare {
        id: state.id.clone(),
        source,
    })?;
    // The effective uid, not the capability sets (the `caps` crate): CAP_MKNOD held in a user
    // namespace other than the initial one still cannot make device nodes, so the sets would
    // say yes where mknod fails. A spec with a user namespace binds the nodes too (below).
    let rootless = !nix::unistd::geteuid().is_root();
    let bind_nodes = rootless || spec.has_user_namespace();
    let target = Target {
        pid: state.pid,
        rootfs: rootfs_path,
        bind_nodes,
        readonly_rootfs: spec.root.as_ref().is_some_and(|r| r.readonly),
        // A bound node keeps the host's owner: nothing to give.
        user: (!bind_nodes)
            .then(|| spec.process.as_ref().map(|p| p.user.clone()))
            .flatten(),
        regroup: Vec::new(),
        mounted_libraries: Vec::new(),
    };
    let report = inject::apply(
        &target,
        &plan.edits,
        config.mount_api,
        &Ldconfig::from_config(config),
    )
    .map_err(|source| HookError::Inject {
        id: state.id.clone(),
        source,
    })?;
    cgroup_rules::grant(state.pid, &plan.edits.cgroup_rules, rootless).map_err(|source| {
        HookError::Cgroup {
            id: state.id.clone(),
            source,
        }
    })?;
    let devices = plan.granted();
    tracing::info!(
        ?devices,
        nodes = report.nodes,
        mounts = report.mounts,
        "injected"
    );
    Ok(Outcome::Injected { devices, report })
}
