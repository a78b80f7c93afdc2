//! From what a container carries (its env and annotations) to its authorized plan: the steps
//! the hook, the runtime shim and the NRI plugin share. Each reads the container its own way
//! (the hook and the shim from `config.json`, the NRI plugin from containerd's description of
//! the container) and applies the plan its own way; what is asked for, what the policy allows
//! and what gets planned is decided here, once.
//!
//! Two calls, so that a caller reads the container only when it may be asking (the shim
//! parses `config.json` only then): [`Admission::may_be_asking`] tells cheaply that a container
//! asks for nothing, and [`Admission::admit`] finds its requests, lets the caller check what it
//! must once it knows the container asks for something (the hook its stage), checks the requests
//! against the host's request policy and plans them. They read only the settings in
//! [`Admission`] (where the profiles are, the policy, the kubelet to ask, the host roots), not the
//! whole host configuration: what else the config holds (how to mount, which linker cache
//! writer, which runtime) belongs to the callers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use devinject_devices::{ContainerLayout, HostRoots, ProfileError, ProfileSet};
use devinject_exit::ExitCode;
use devinject_hostconfig::{HostConfig, PolicySettings};

use crate::container_plan::{
    find_capabilities, find_functions, find_requests, plan_container, ContainerPlan,
    ContainerPlanError,
};
use crate::policy::kubelet::PodResources;
use crate::policy::{self, PolicyError};

/// Why a container's requests were not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// A profile is invalid.
    #[error(transparent)]
    Profiles(#[from] ProfileError),
    /// The request is not allowed by the host policy.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The request could not be planned.
    #[error(transparent)]
    Plan(#[from] ContainerPlanError),
}

impl AdmitError {
    /// The documented exit code.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Profiles(_) => ExitCode::Config,
            Self::Policy(_) => ExitCode::Policy,
            Self::Plan(
                ContainerPlanError::Request { .. }
                | ContainerPlanError::Plan(_)
                | ContainerPlanError::Function(_)
                | ContainerPlanError::Capability(_),
            ) => ExitCode::Request,
            Self::Plan(ContainerPlanError::Discovery(_) | ContainerPlanError::Resolve(_)) => {
                ExitCode::Host
            }
        }
    }
}

/// What admission reads of the host, taken from its configuration once.
#[derive(Debug, Clone)]
pub struct Admission {
    /// The profiles directory.
    pub profiles_dir: PathBuf,
    /// The request policy.
    pub policy: PolicySettings,
    /// The kubelet's pod-resources API, for the `kubernetes` policy.
    pub kubelet: PodResources,
    /// The host roots discovery and file resolution work under.
    pub roots: HostRoots,
}

impl Admission {
    /// The settings `config` gives admission.
    pub fn from_config(config: &HostConfig) -> Self {
        Self {
            profiles_dir: config.profiles_dir.clone(),
            policy: config.policy_settings(),
            kubelet: PodResources::from_config(config),
            roots: config.roots(),
        }
    }

    /// Whether a container whose text (env names or entries, annotation keys; a whole
    /// `config.json`) is searched by `mentions` may be asking for anything: `Ok(None)` means it
    /// certainly is not, and the profiles are not even parsed (the cheap path every container
    /// that asks for nothing takes); else the profiles, loaded.
    pub fn may_be_asking(
        &self,
        mentions: impl Fn(&str) -> bool,
    ) -> Result<Option<ProfileSet>, AdmitError> {
        if !ProfileSet::may_be_requested(&self.profiles_dir, &mentions)? {
            return Ok(None);
        }
        let profiles = ProfileSet::load_dir(&self.profiles_dir)?;
        if !mentions(devinject_devices::plan::ANNOTATION_PREFIX)
            && !profiles.iter().any(|p| mentions(p.request_env()))
        {
            return Ok(None);
        }
        Ok(Some(profiles))
    }
}

/// A container as an engine path reads it: the hook and the shim from `config.json`, the NRI
/// plugin from containerd's description of the container.
pub trait Container {
    /// The value of its environment variable `name` (the last entry wins, as the process sees
    /// it).
    fn env(&self, name: &str) -> Option<&str>;
    /// Its annotations.
    fn annotations(&self) -> &BTreeMap<String, String>;
}

/// What admission decided for a container that asks for something.
#[derive(Debug)]
pub struct Admitted<R = ()> {
    /// The plan: per profile, the devices granted and the edits; all edits merged; the prepare
    /// steps to run before the container starts.
    pub plan: ContainerPlan,
    /// The request variable of every profile, whose values the granted list replaces in the
    /// container's env.
    pub request_envs: Vec<String>,
    /// What the caller's own check gave ([`Admission::admit`]'s `ready`).
    pub ready: R,
}

impl<R> Admitted<R> {
    /// [`Self::request_envs`] borrowed, as the env merge takes them.
    pub fn request_env_names(&self) -> Vec<&str> {
        self.request_envs.iter().map(String::as_str).collect()
    }
}

impl Admission {
    /// Admits `container`, which [`Self::may_be_asking`] found may be asking under `profiles`:
    /// its requests and functions (a function chosen twice, differently, is refused); then
    /// `ready`, the caller's own check once the container is known to ask for something, before
    /// the kubelet is asked (what it gives comes back in [`Admitted::ready`]); then the host's
    /// request policy and the plan. `layout` is called at most once, with what `ready` gave,
    /// when files are injected. `Ok(None)`: the container asks for nothing, or nothing is left
    /// to inject.
    pub fn admit<R, E: From<AdmitError>>(
        &self,
        profiles: ProfileSet,
        container: &impl Container,
        ready: impl FnOnce() -> Result<R, E>,
        layout: impl FnOnce(&R) -> ContainerLayout,
    ) -> Result<Option<Admitted<R>>, E> {
        let env = |name: &str| container.env(name);
        let annotations = container.annotations();
        let requests = find_requests(&profiles, env, annotations);
        let functions =
            find_functions(&profiles, env, annotations).map_err(|e| AdmitError::Plan(e.into()))?;
        if requests.is_empty() && functions.is_empty() {
            return Ok(None);
        }
        let capabilities =
            find_capabilities(&profiles, env, &requests).map_err(|e| AdmitError::Plan(e.into()))?;
        let ready = ready()?;
        let requests =
            policy::authorize(self.policy, &profiles, requests, annotations, &self.kubelet)
                .map_err(AdmitError::from)?;
        let plan = plan_container(
            &self.roots,
            &profiles,
            &requests,
            &functions,
            &capabilities,
            || layout(&ready),
        )
        .map_err(AdmitError::from)?;
        Ok(plan.map(|plan| Admitted {
            plan,
            request_envs: profiles
                .iter()
                .map(|p| p.request_env().to_owned())
                .collect(),
            ready,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profiles dir holding the shipped kvm profile, whose request variable is the default
    /// `KVM_VISIBLE_DEVICES`.
    fn profiles_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let kvm = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiles/kvm.toml");
        std::fs::copy(kvm, dir.path().join("kvm.toml")).unwrap();
        dir
    }

    fn admission(profiles_dir: &std::path::Path) -> Admission {
        Admission::from_config(&HostConfig {
            profiles_dir: profiles_dir.to_owned(),
            ..HostConfig::default()
        })
    }

    #[test]
    fn from_config_takes_the_settings_admission_reads() {
        let config = HostConfig {
            profiles_dir: "/etc/p".into(),
            dev_root: "/host/dev".into(),
            pod_resources_timeout_ms: 1234,
            ..HostConfig::default()
        };
        let a = Admission::from_config(&config);
        assert_eq!(a.profiles_dir, PathBuf::from("/etc/p"));
        assert_eq!(a.roots.dev_root, PathBuf::from("/host/dev"));
        assert_eq!(a.kubelet, PodResources::from_config(&config));
        assert_eq!(a.kubelet.timeout, std::time::Duration::from_millis(1234));
        assert_eq!(a.policy.policy, config.policy);
    }

    /// What [`Admission::may_be_asking`] says of a container whose whole text is `text`, with
    /// the kvm profile installed.
    fn asking(text: &str) -> Option<ProfileSet> {
        let dir = profiles_dir();
        admission(dir.path())
            .may_be_asking(|n| text.contains(n))
            .unwrap()
    }

    #[test]
    fn a_container_mentioning_no_request_is_not_asking() {
        assert!(asking("PATH=/bin HOME=/root").is_none());
    }

    #[test]
    fn a_container_naming_a_request_variable_or_our_annotation_may_be_asking() {
        let by_env = asking("KVM_VISIBLE_DEVICES=all");
        assert_eq!(by_env.map(|p| p.iter().count()), Some(1));
        let annotation = format!("{}kvm", devinject_devices::plan::ANNOTATION_PREFIX);
        assert!(asking(&annotation).is_some());
    }

    #[test]
    fn another_profiles_request_suffix_alone_is_not_asking() {
        // The suffix makes the cheap check load the profiles; no profile's variable matches.
        assert!(asking("GPU_VISIBLE_DEVICES=0").is_none());
    }

    #[test]
    fn an_invalid_profile_fails_when_the_profiles_are_read() {
        let dir = profiles_dir();
        std::fs::write(dir.path().join("bad.toml"), "name = ").unwrap();
        let err = admission(dir.path())
            .may_be_asking(|n| "KVM_VISIBLE_DEVICES=all".contains(n))
            .unwrap_err();
        assert!(matches!(err, AdmitError::Profiles(_)), "{err}");
        assert_eq!(err.exit_code(), ExitCode::Config);
    }

    /// A container with these env entries and annotations.
    struct Fake {
        env: Vec<String>,
        annotations: BTreeMap<String, String>,
    }

    impl Container for Fake {
        fn env(&self, name: &str) -> Option<&str> {
            devinject_devices::env_value(&self.env, name)
        }

        fn annotations(&self) -> &BTreeMap<String, String> {
            &self.annotations
        }
    }

    /// Why admission stopped, as a test error: the caller's own, or admission's.
    #[derive(Debug)]
    enum Stopped {
        NotReady,
        Admit(AdmitError),
    }

    impl From<AdmitError> for Stopped {
        fn from(e: AdmitError) -> Self {
            Self::Admit(e)
        }
    }

    /// Admits a container with `env` under the kvm profile and the default (kubernetes)
    /// policy, with no kubelet socket; `ready` answers as given. Returns the outcome and
    /// whether `ready` ran.
    fn admit_with(env: &[&str], ready_ok: bool) -> (Result<Option<Admitted>, Stopped>, bool) {
        let dir = profiles_dir();
        let admission = Admission::from_config(&HostConfig {
            profiles_dir: dir.path().to_owned(),
            pod_resources_socket: dir.path().join("no-kubelet.sock"),
            ..HostConfig::default()
        });
        let container = Fake {
            env: env.iter().map(|e| (*e).to_owned()).collect(),
            annotations: [
                ("io.kubernetes.cri.container-type", "container"),
                ("io.kubernetes.cri.sandbox-uid", "uid-1"),
                ("io.kubernetes.cri.sandbox-name", "pod"),
                ("io.kubernetes.cri.sandbox-namespace", "default"),
                ("io.kubernetes.cri.container-name", "main"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        };
        let profiles = admission
            .may_be_asking(|n| env.iter().any(|e| e.contains(n)))
            .unwrap()
            .expect("the profiles are loaded");
        let ran = std::cell::Cell::new(false);
        let out = admission.admit(
            profiles,
            &container,
            || {
                ran.set(true);
                if ready_ok {
                    Ok(())
                } else {
                    Err(Stopped::NotReady)
                }
            },
            |()| ContainerLayout::default(),
        );
        (out, ran.get())
    }

    /// A container that mentions a request variable without setting it asks for nothing: not
    /// admitted, and the caller's check does not run. One that sets it to `void` asks, for no
    /// device: checked by the caller, then nothing to inject, and no kubelet needed.
    #[test]
    fn asking_for_nothing_admits_nothing() {
        let (out, ran) = admit_with(&["NOTE=KVM_VISIBLE_DEVICES"], true);
        assert!(matches!(out, Ok(None)), "{out:?}");
        assert!(!ran);
        let (out, ran) = admit_with(&["KVM_VISIBLE_DEVICES=void"], true);
        assert!(matches!(out, Ok(None)), "{out:?}");
        assert!(ran);
    }

    /// The caller's check runs once the container asks for something, before the policy: its
    /// error stops admission before the kubelet is asked.
    #[test]
    fn the_callers_check_runs_before_the_policy() {
        let (out, ran) = admit_with(&["KVM_VISIBLE_DEVICES=all"], false);
        assert!(ran);
        assert!(matches!(out, Err(Stopped::NotReady)), "{out:?}");
        // Ready: the policy runs, and with no kubelet it refuses.
        let (out, ran) = admit_with(&["KVM_VISIBLE_DEVICES=all"], true);
        assert!(ran);
        let Err(Stopped::Admit(e @ AdmitError::Policy(_))) = out else {
            panic!("a policy refusal: {out:?}");
        };
        assert!(e.to_string().contains("no-kubelet.sock"), "{e}");
        assert_eq!(e.exit_code(), ExitCode::Policy);
    }
}
