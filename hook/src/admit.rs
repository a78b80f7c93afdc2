//! From what a container carries (its env and annotations) to its authorized plan: the step
//! the runtime shim and the NRI plugin share. Each reads the container its own way (the shim
//! from `config.json`, the NRI plugin from containerd's description of the container) and
//! writes the plan its own way; what is asked for, what the policy allows and what gets
//! planned is decided here, once.

use std::collections::BTreeMap;

use devinject_devices::{ContainerLayout, ProfileError, ProfileSet};

use crate::config::HostConfig;
use crate::exit::ExitCode;
use crate::policy::{self, PolicyError};
use crate::prepare::{find_requests, plan_container, ContainerPlan, PrepareError};

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
            Self::Prepare(PrepareError::Request { .. } | PrepareError::Plan(_)) => {
                ExitCode::Request
            }
            Self::Prepare(_) => ExitCode::Host,
        }
    }
}

/// Whether a container whose text (env entries, annotation keys) is searched by `mentions` may
/// be asking for anything: `false` means it certainly is not, and the profiles are not even
/// parsed (the cheap path every container that asks for nothing takes).
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

/// The container's requests (`env` looks up its environment), checked by the host policy and
/// planned. `layout` is called at most once, when files are injected. `Ok(None)`: nothing asked.
pub fn admit<'a>(
    config: &HostConfig,
    profiles: &ProfileSet,
    env: impl Fn(&str) -> Option<&'a str>,
    annotations: &BTreeMap<String, String>,
    layout: impl FnOnce() -> ContainerLayout,
) -> Result<Option<ContainerPlan>, AdmitError> {
    let requests = find_requests(profiles, env, annotations);
    if requests.is_empty() {
        return Ok(None);
    }
    let requests = policy::authorize(
        config.policy_settings(),
        profiles,
        requests,
        annotations,
        &config.pod_resources(),
    )?;
    Ok(plan_container(config, profiles, &requests, layout)?)
}
