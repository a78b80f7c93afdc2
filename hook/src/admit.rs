//! From what a container carries (its env and annotations) to its authorized plan: the steps
//! the hook, the runtime shim and the NRI plugin share. Each reads the container its own way
//! (the hook and the shim from `config.json`, the NRI plugin from containerd's description of
//! the container) and applies the plan its own way; what is asked for, what the policy allows
//! and what gets planned is decided here, once.
//!
//! Three steps, so that a caller can do what it must between them (the shim parses the spec
//! only after the first, the hook checks its stage before the last): [`may_be_asking`] tells
//! cheaply that a container asks for nothing, [`asked`] finds its requests, and
//! [`Asked::admit`] checks them against the host's request policy and plans them.

use std::collections::BTreeMap;

use devinject_devices::{ContainerLayout, FunctionRequest, ProfileError, ProfileSet};
use devinject_exit::ExitCode;
use devinject_hostconfig::HostConfig;

use crate::policy::helper::PodResourcesHelper;
use crate::policy::{self, PolicyError};
use crate::prepare::{
    find_functions, find_requests, plan_container, ContainerPlan, PrepareError, RequestSource,
};

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
    Prepare(#[from] PrepareError),
}

impl AdmitError {
    /// The documented exit code.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Profiles(_) => ExitCode::Config,
            Self::Policy(_) => ExitCode::Policy,
            Self::Prepare(
                PrepareError::Request { .. } | PrepareError::Plan(_) | PrepareError::Function(_),
            ) => ExitCode::Request,
            Self::Prepare(PrepareError::Discovery(_) | PrepareError::Resolve(_)) => ExitCode::Host,
        }
    }
}

/// A container's requests, found, not yet authorized.
#[derive(Debug)]
pub struct Asked {
    profiles: ProfileSet,
    requests: Vec<RequestSource>,
    functions: Vec<FunctionRequest>,
}

/// Whether a container whose text (env names or entries, annotation keys; a whole
/// `config.json`) is searched by `mentions` may be asking for anything: `Ok(None)` means it
/// certainly is not, and the profiles are not even parsed (the cheap path every container that
/// asks for nothing takes); else the profiles, loaded.
pub fn may_be_asking(
    config: &HostConfig,
    mentions: impl Fn(&str) -> bool,
) -> Result<Option<ProfileSet>, AdmitError> {
    if !ProfileSet::may_be_requested(&config.profiles_dir, &mentions)? {
        return Ok(None);
    }
    let profiles = ProfileSet::load_dir(&config.profiles_dir)?;
    if !mentions(crate::ANNOTATION_PREFIX) && !profiles.iter().any(|p| mentions(p.request_env())) {
        return Ok(None);
    }
    Ok(Some(profiles))
}

/// The container's requests and functions under `profiles` (`env` looks up its environment);
/// `None` when it asks for nothing.
pub fn asked<'a>(
    profiles: ProfileSet,
    env: impl Fn(&str) -> Option<&'a str> + Copy,
    annotations: &BTreeMap<String, String>,
) -> Option<Asked> {
    let requests = find_requests(&profiles, env, annotations);
    let functions = find_functions(&profiles, env, annotations);
    (!requests.is_empty() || !functions.is_empty()).then_some(Asked {
        profiles,
        requests,
        functions,
    })
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
        config: &HostConfig,
        annotations: &BTreeMap<String, String>,
        layout: impl FnOnce() -> ContainerLayout,
    ) -> Result<Option<ContainerPlan>, AdmitError> {
        let requests = policy::authorize(
            config.policy_settings(),
            &self.profiles,
            self.requests.clone(),
            annotations,
            &PodResourcesHelper::from_config(config),
        )?;
        Ok(plan_container(
            config,
            &self.profiles,
            &requests,
            &self.functions,
            layout,
        )?)
    }
}
