//! From what a container carries (its env and annotations) to its authorized plan: the steps
//! the hook, the runtime shim and the NRI plugin share. Each reads the container its own way
//! (the hook and the shim from `config.json`, the NRI plugin from containerd's description of
//! the container) and applies the plan its own way; what is asked for, what the policy allows
//! and what gets planned is decided here, once.
//!
//! [`Admission::asked`] tells what a container asks for, or that it asks for nothing: one rule
//! for whether a container mentions a request at all ([`mentions`]), then its requests,
//! functions and driver parts, once; [`Asked`] also names the profiles asked for, for the
//! decision log. Each path then does its own check in plain code (the hook: its stage and
//! where the rootfs is) and calls [`Admission::admit`], which runs the host's request policy
//! and then the planner. They read only the settings in [`Admission`] (where the profiles are,
//! the policy, the kubelet to ask, the host roots), not the whole host configuration: what
//! else the config holds (how to mount, which linker cache writer, which runtime) belongs to
//! the callers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use devinject_devices::{
    env_value, ContainerLayout, FunctionRequest, HostRoots, ProfileError, ProfileSet,
};
use devinject_discovery::profile_dir;
use devinject_exit::ExitCode;
use devinject_hostconfig::{HostConfig, PolicySettings};

use crate::container_plan::{
    find_capabilities, find_functions, find_requests, plan_container, ChosenCapabilities,
    ContainerPlan, ContainerPlanError, RequestSource,
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
    /// A function or a driver's parts the container chose cannot be honoured; `asked` names
    /// the profiles it asks devices of, for the decision log.
    #[error("{error}")]
    Chosen {
        /// The profiles the container asks devices of.
        asked: Vec<String>,
        /// Why the choice cannot be honoured.
        error: Box<ContainerPlanError>,
    },
}

impl AdmitError {
    /// The documented exit code.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Profiles(_) => ExitCode::Config,
            Self::Policy(_) => ExitCode::Policy,
            Self::Chosen { .. }
            | Self::Plan(
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

    /// The profiles the container was found to ask devices of before this refusal, for the
    /// decision log: known only when it came from what the container chose beside them.
    pub fn asked_profiles(&self) -> &[String] {
        match self {
            Self::Chosen { asked, .. } => asked,
            _ => &[],
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

/// A container as an engine path reads it: the hook and the shim from `config.json`, the NRI
/// plugin from containerd's description of the container.
pub trait Container {
    /// Its environment, `NAME=value` entries in order.
    fn env_entries(&self) -> &[String];
    /// Its annotations, where a container may choose a profile's function.
    fn annotations(&self) -> &BTreeMap<String, String>;
}

/// The value of `container`'s environment variable `name`: the last entry wins, as the process
/// sees it.
fn env<'a>(container: &'a impl Container, name: &str) -> Option<&'a str> {
    env_value(container.env_entries(), name)
}

/// The one rule for whether `container` mentions `needle` (a request variable, our annotation
/// prefix): one of its env names or annotation keys contains it. Requests are read only from
/// env names and annotation keys ([`find_requests`]), so a container that mentions none asks
/// for nothing.
pub fn mentions(container: &impl Container, needle: &str) -> bool {
    container
        .env_entries()
        .iter()
        .filter_map(|e| e.split_once('=').map(|(k, _)| k))
        .any(|k| k.contains(needle))
        || container.annotations().keys().any(|k| k.contains(needle))
}

/// What a container asks for: its requests, functions and chosen driver parts, found once,
/// under the profiles that were loaded for it.
#[derive(Debug)]
pub struct Asked {
    profiles: ProfileSet,
    requests: Vec<RequestSource>,
    functions: Vec<FunctionRequest>,
    capabilities: ChosenCapabilities,
}

impl Asked {
    /// What `container` asks for under `profiles`: `Ok(None)` when it sets no request and no
    /// function. A function chosen twice, differently, or a driver part its profile does not
    /// have is refused.
    pub fn find(
        profiles: ProfileSet,
        container: &impl Container,
    ) -> Result<Option<Self>, AdmitError> {
        let env = |name: &str| env(container, name);
        let annotations = container.annotations();
        let requests = find_requests(&profiles, env, annotations);
        let chosen = |error: ContainerPlanError| AdmitError::Chosen {
            asked: requests.iter().map(|r| r.profile.to_string()).collect(),
            error: Box::new(error),
        };
        let functions =
            find_functions(&profiles, env, annotations).map_err(|e| chosen(e.into()))?;
        if requests.is_empty() && functions.is_empty() {
            return Ok(None);
        }
        let capabilities =
            find_capabilities(&profiles, env, &requests).map_err(|e| chosen(e.into()))?;
        Ok(Some(Self {
            profiles,
            requests,
            functions,
            capabilities,
        }))
    }

    /// The profiles the container asks devices of, as the decision log names them.
    pub fn profile_names(&self) -> Vec<String> {
        self.requests
            .iter()
            .map(|r| r.profile.to_string())
            .collect()
    }
}

/// The profiles a container asks devices of, from what [`Admission::asked`] or [`Asked::find`]
/// gave: what the decision log names, whether the container was found asking or refused.
pub fn asked_profiles(asked: &Result<Option<Asked>, AdmitError>) -> Vec<String> {
    match asked {
        Ok(Some(asked)) => asked.profile_names(),
        Ok(None) => Vec::new(),
        Err(e) => e.asked_profiles().to_vec(),
    }
}

/// What admission decided for a container that asks for something.
#[derive(Debug)]
pub struct Admitted {
    /// The plan: per profile, the devices granted and the edits; all edits merged; the prepare
    /// steps to run before the container starts.
    pub plan: ContainerPlan,
    /// The request variable of every profile, whose values the granted list replaces in the
    /// container's env.
    pub request_envs: Vec<String>,
}

impl Admitted {
    /// [`Self::request_envs`] borrowed, as the env merge takes them.
    pub fn request_env_names(&self) -> Vec<&str> {
        self.request_envs.iter().map(String::as_str).collect()
    }
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

    /// What `container` asks for, or `Ok(None)` when it asks for nothing. A container that
    /// [`mentions`] no request variable and not our annotation prefix stops before any profile
    /// is parsed: the cheap path every container that asks for nothing takes.
    pub fn asked(&self, container: &impl Container) -> Result<Option<Asked>, AdmitError> {
        match self.may_be_asking(|needle| mentions(container, needle))? {
            Some(profiles) => Asked::find(profiles, container),
            None => Ok(None),
        }
    }

    /// The profiles, loaded, when a container whose text is searched by `mentions` may be
    /// asking for anything; `Ok(None)` means it certainly is not, and the profiles are not even
    /// parsed. [`Self::asked`] searches a container by the [`mentions`] rule; a caller holding
    /// only the container's unparsed text (the shim, its `config.json`) may search that
    /// instead, as every env name and annotation key is in it, and then call [`Asked::find`].
    pub fn may_be_asking(
        &self,
        mentions: impl Fn(&str) -> bool,
    ) -> Result<Option<ProfileSet>, AdmitError> {
        if !profile_dir::may_be_requested(&self.profiles_dir, &mentions)? {
            return Ok(None);
        }
        let profiles = profile_dir::load(&self.profiles_dir)?;
        if !mentions(devinject_devices::plan::ANNOTATION_PREFIX)
            && !profiles.iter().any(|p| mentions(p.request_env()))
        {
            return Ok(None);
        }
        Ok(Some(profiles))
    }

    /// Admits what `container` asked for: the host's request policy (under `kubernetes`, the
    /// kubelet is asked), then the plan. `layout` is called at most once, when files are
    /// injected. `Ok(None)`: nothing is left to inject.
    pub fn admit(
        &self,
        asked: Asked,
        container: &impl Container,
        layout: impl FnOnce() -> ContainerLayout,
    ) -> Result<Option<Admitted>, AdmitError> {
        let Asked {
            profiles,
            requests,
            functions,
            capabilities,
        } = asked;
        let requests = policy::authorize(
            self.policy,
            &profiles,
            requests,
            container.annotations(),
            &self.kubelet,
        )?;
        let plan = plan_container(
            &self.roots,
            &profiles,
            &requests,
            &functions,
            &capabilities,
            layout,
        )?;
        Ok(plan.map(|plan| Admitted {
            plan,
            request_envs: profiles
                .iter()
                .map(|p| p.request_env().to_owned())
                .collect(),
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
        let kvm = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../profiles/kvm.toml");
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
        fn env_entries(&self) -> &[String] {
            &self.env
        }

        fn annotations(&self) -> &BTreeMap<String, String> {
            &self.annotations
        }
    }

    /// A container of a pod, with `env` and `extra` annotations.
    fn container(env: &[&str], extra: &[(&str, &str)]) -> Fake {
        Fake {
            env: env.iter().map(|e| (*e).to_owned()).collect(),
            annotations: [
                ("io.kubernetes.cri.container-type", "container"),
                ("io.kubernetes.cri.sandbox-uid", "uid-1"),
                ("io.kubernetes.cri.sandbox-name", "pod"),
                ("io.kubernetes.cri.sandbox-namespace", "default"),
                ("io.kubernetes.cri.container-name", "main"),
            ]
            .iter()
            .chain(extra)
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        }
    }

    /// Admission under the kvm profile and the default (kubernetes) policy, with no kubelet
    /// socket; the profiles dir is kept alive beside it.
    fn kubernetes_admission() -> (tempfile::TempDir, Admission) {
        let dir = profiles_dir();
        let admission = Admission::from_config(&HostConfig {
            profiles_dir: dir.path().to_owned(),
            pod_resources_socket: dir.path().join("no-kubelet.sock"),
            ..HostConfig::default()
        });
        (dir, admission)
    }

    /// What admission finds a container with `env` asks for, and, when it asks, what admitting
    /// it gives.
    fn admit_with(env: &[&str]) -> (bool, Result<Option<Admitted>, AdmitError>) {
        let (_dir, admission) = kubernetes_admission();
        let c = container(env, &[]);
        match admission.asked(&c).unwrap() {
            None => (false, Ok(None)),
            Some(asked) => (true, admission.admit(asked, &c, ContainerLayout::default)),
        }
    }

    /// One rule says whether a container mentions a request: its env names and annotation
    /// keys, not the values, which requests are never read from.
    #[test]
    fn only_env_names_and_annotation_keys_mention_a_request() {
        let annotation = format!("{}kvm.devices", devinject_devices::plan::ANNOTATION_PREFIX);
        assert!(mentions(
            &container(&["KVM_VISIBLE_DEVICES=0"], &[]),
            "KVM_VISIBLE_DEVICES"
        ));
        assert!(mentions(
            &container(&[], &[(annotation.as_str(), "kvm")]),
            devinject_devices::plan::ANNOTATION_PREFIX
        ));
        let in_values = container(&["NOTE=KVM_VISIBLE_DEVICES"], &[("note", &annotation)]);
        assert!(!mentions(&in_values, "KVM_VISIBLE_DEVICES"));
        assert!(!mentions(
            &in_values,
            devinject_devices::plan::ANNOTATION_PREFIX
        ));
        let (_dir, admission) = kubernetes_admission();
        assert!(admission.asked(&in_values).unwrap().is_none());
    }

    /// A container that mentions a request variable without setting it asks for nothing. One
    /// that sets it to `void` asks, for no device: nothing to inject, and no kubelet needed.
    #[test]
    fn asking_for_nothing_admits_nothing() {
        let (asked, out) = admit_with(&["NOTE=KVM_VISIBLE_DEVICES"]);
        assert!(matches!(out, Ok(None)), "{out:?}");
        assert!(!asked);
        let (asked, out) = admit_with(&["KVM_VISIBLE_DEVICES=void"]);
        assert!(matches!(out, Ok(None)), "{out:?}");
        assert!(asked);
    }

    /// A container that asks is found asking, with the profiles it asks devices of named for
    /// the decision log, before the policy runs; admitting it runs the policy, which with no
    /// kubelet refuses.
    #[test]
    fn the_policy_runs_when_the_asking_container_is_admitted() {
        let (_dir, admission) = kubernetes_admission();
        let c = container(&["KVM_VISIBLE_DEVICES=all"], &[]);
        let asked = admission.asked(&c).unwrap().expect("it asks");
        assert_eq!(asked.profile_names(), ["kvm"]);
        let e = admission
            .admit(asked, &c, ContainerLayout::default)
            .unwrap_err();
        assert!(matches!(e, AdmitError::Policy(_)), "{e}");
        assert!(e.to_string().contains("no-kubelet.sock"), "{e}");
        assert_eq!(e.exit_code(), ExitCode::Policy);
    }

    /// A function chosen twice, differently, refuses the container when its requests are
    /// found, naming the profiles it asks devices of for the decision log.
    #[test]
    fn a_refused_choice_names_the_profiles_asked_for() {
        let (_dir, admission) = kubernetes_admission();
        let function = format!("{}kvm.function", devinject_devices::plan::ANNOTATION_PREFIX);
        let c = container(
            &["KVM_VISIBLE_DEVICES=all", "KVM_FUNCTION=b"],
            &[(function.as_str(), "a")],
        );
        let e = admission.asked(&c).unwrap_err();
        assert!(matches!(e, AdmitError::Chosen { .. }), "{e}");
        assert_eq!(e.asked_profiles(), ["kvm"]);
        assert_eq!(e.exit_code(), ExitCode::Request);
        assert!(e.to_string().contains("KVM_FUNCTION"), "{e}");
    }
}
