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

use std::collections::BTreeMap;
use std::io::Read;

use devinject_admission::admit::{Admission, Container};
use devinject_contained::prepare_step;
use devinject_devices::Excerpt;
use devinject_hostconfig::HostConfig;

use crate::cgroup_rules;
use crate::error::HookError;
use crate::inject::ldconfig::Ldconfig;
use crate::inject::{self, layout, Target};
use crate::oci::{read_bounded, Spec, State, MAX_STATE_BYTES};
use crate::refusal::Seen;

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

/// The container as the hook reads it: its `config.json`, and the annotations of the spec and
/// the state together.
struct Bundle<'a> {
    spec: &'a Spec,
    annotations: &'a BTreeMap<String, String>,
}

impl Container for Bundle<'_> {
    fn env_entries(&self) -> &[String] {
        Container::env_entries(self.spec)
    }

    fn annotations(&self) -> &BTreeMap<String, String> {
        self.annotations
    }
}

/// Runs the hook with the state read from `stdin`; what it learns of the container on the way
/// goes into `seen`, for the decision log when it fails ([`crate::refusal`]).
pub fn run(config: &HostConfig, stdin: impl Read, seen: &mut Seen) -> Result<Outcome, HookError> {
    let bytes = read_bounded(stdin, MAX_STATE_BYTES, "OCI state on stdin")?;
    let state = State::parse(&bytes)?;
    seen.container.clone_from(&state.id);
    let (bundle, spec) = crate::bundle::load(&state)?;
    let mut annotations = spec.annotations.clone();
    annotations.extend(state.annotations.clone());

    let container = Bundle {
        spec: &spec,
        annotations: &annotations,
    };
    // Most containers ask for nothing: told without parsing every profile.
    let admission = Admission::from_config(config);
    let asked = admission.asked(&container);
    seen.asked(&asked, &annotations);
    let Some(asked) = asked? else {
        return Ok(Outcome::Nothing);
    };
    let span = tracing::info_span!("hook", container = %Excerpt(&state.id));
    let _guard = span.enter();
    // Checked once the container asks for something, and only then: the stage, and where
    // the rootfs is.
    if !state.is_being_created() {
        return Err(HookError::Stage {
            status: state.status.clone(),
        });
    }
    let rootfs_path = spec.rootfs(&bundle)?;
    let Some(admitted) = admission.admit(asked, &container, || layout::of_rootfs(&rootfs_path))?
    else {
        return Ok(Outcome::Nothing);
    };
    let plan = admitted.plan;
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
        // The process's group decides a group-only node's group, made here or, in a user
        // namespace, as the copy the container owns.
        user: spec.process.as_ref().map(|p| p.user.clone()),
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use devinject_exit::ExitCode;
    use devinject_hostconfig::RequestPolicy;

    use super::*;

    /// A bundle whose container has `env`, a host config with the shipped kvm profile under
    /// the env policy, and the OCI state of that bundle at `status`.
    fn start(dir: &Path, env: &str, status: &str) -> (HostConfig, Vec<u8>) {
        let profiles = dir.join("profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        let kvm = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles/kvm.toml");
        std::fs::copy(kvm, profiles.join("kvm.toml")).unwrap();
        let bundle = dir.join("bundle");
        std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
        std::fs::write(
            bundle.join("config.json"),
            serde_json::json!({
                "ociVersion": "1.1.0",
                "root": {"path": "rootfs"},
                "process": {"env": [env], "user": {"uid": 0, "gid": 0}},
            })
            .to_string(),
        )
        .unwrap();
        let state = serde_json::json!({
            "ociVersion": "1.1.0", "id": "c1", "status": status, "pid": 4242,
            "bundle": bundle,
        });
        let config = HostConfig {
            profiles_dir: profiles,
            policy: RequestPolicy::Env,
            ..HostConfig::default()
        };
        (config, state.to_string().into_bytes())
    }

    /// A refused start leaves what its decision-log entry names: the container and the
    /// profiles it asked for.
    #[test]
    fn a_refused_start_has_seen_its_container_and_profiles() {
        let t = tempfile::tempdir().unwrap();
        let (config, state) = start(t.path(), "KVM_VISIBLE_DEVICES=all", "running");
        let mut seen = Seen::default();
        run(&config, state.as_slice(), &mut seen).unwrap_err();
        assert_eq!(seen.container, "c1");
        assert_eq!(seen.profiles, ["kvm"]);
    }

    /// The stage is checked once the container asks for something, before anything else: a
    /// hook configured at the wrong stage fails such a container with the fix, and leaves one
    /// that asks for nothing alone.
    #[test]
    fn the_stage_is_checked_only_for_a_container_that_asks() {
        let t = tempfile::tempdir().unwrap();
        let (config, state) = start(t.path(), "KVM_VISIBLE_DEVICES=all", "running");
        let err = run(&config, state.as_slice(), &mut Seen::default()).unwrap_err();
        assert!(matches!(err, HookError::Stage { .. }), "{err}");
        assert!(
            err.to_string().contains("\"running\"")
                && err.to_string().contains("prestart or createRuntime"),
            "{err}"
        );
        assert_eq!(err.exit_code(), ExitCode::Input);
        let t = tempfile::tempdir().unwrap();
        let (config, state) = start(t.path(), "NOTE=KVM_VISIBLE_DEVICES", "running");
        assert_eq!(
            run(&config, state.as_slice(), &mut Seen::default()).unwrap(),
            Outcome::Nothing
        );
    }
}
