//! From what a container carries (its env and annotations) to its authorized plan: the steps
//! the hook, the runtime shim and the NRI plugin share. Each reads the container its own way
//! (the hook and the shim from `config.json`, the NRI plugin from containerd's description of
//! the container) and applies the plan its own way; what is asked for, what the policy allows
//! and what gets planned is decided here, once.
//!
//! Three steps, so that a caller can do what it must between them (the shim parses the spec
//! only after the first, the hook checks its stage before the last):
//! [`Admission::may_be_asking`] tells cheaply that a container asks for nothing, [`asked`] finds
//! its requests, and [`Asked::admit`] checks them against the host's request policy and plans
//! them. The steps read only the settings in [`Admission`] (where the profiles are, the policy,
//! the kubelet to ask, the host roots), not the whole host configuration: what else the config
//! holds (how to mount, which linker cache writer, which runtime) belongs to the callers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use devinject_devices::{ContainerLayout, FunctionRequest, HostRoots, ProfileError, ProfileSet};
use devinject_exit::ExitCode;
use devinject_hostconfig::{HostConfig, PolicySettings};

use crate::container_plan::{
    find_functions, find_requests, plan_container, ContainerPlan, ContainerPlanError, RequestSource,
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
                | ContainerPlanError::Function(_),
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

/// A container's requests, found, not yet authorized.
#[derive(Debug)]
pub struct Asked {
    profiles: ProfileSet,
    requests: Vec<RequestSource>,
    functions: Vec<FunctionRequest>,
}

/// The container's requests and functions under `profiles` (`env` looks up its environment);
/// `Ok(None)` when it asks for nothing. A function chosen twice, differently, is refused here.
pub fn asked<'a>(
    profiles: ProfileSet,
    env: impl Fn(&str) -> Option<&'a str> + Copy,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Asked>, AdmitError> {
    let requests = find_requests(&profiles, env, annotations);
    let functions =
        find_functions(&profiles, env, annotations).map_err(ContainerPlanError::from)?;
    Ok(
        (!requests.is_empty() || !functions.is_empty()).then_some(Asked {
            profiles,
            requests,
            functions,
        }),
    )
}

impl Asked {
    /// The request variables of every profile (whose values the granted list replaces).
    pub fn request_envs(&self) -> Vec<&str> {
        self.profiles.iter().map(|p| p.request_env()).collect()
    }

    /// The requests checked by the host policy and planned. `layout` is called at most once,
    /// when files are injected. `Ok(None)`: nothing left to inject.
    pub fn admit(
        &self,
        admission: &Admission,
        annotations: &BTreeMap<String, String>,
        layout: impl FnOnce() -> ContainerLayout,
    ) -> Result<Option<ContainerPlan>, AdmitError> {
        let requests = policy::authorize(
            admission.policy,
            &self.profiles,
            self.requests.clone(),
            annotations,
            &admission.kubelet,
        )?;
        Ok(plan_container(
            &admission.roots,
            &self.profiles,
            &requests,
            &self.functions,
            layout,
        )?)
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
}
