//! Which container requests are honoured: the request policy shared by the hook and the shim.
//!
//! Anyone who writes a pod spec can set `DEMO_VISIBLE_DEVICES=all`, and CRI-O copies pod
//! annotations (so also `devinject.io/demo.devices`) into every container. Under
//! [`RequestPolicy::Kubernetes`] a Kubernetes container's request is therefore honoured only when
//! the kubelet's pod-resources API says the device plugin granted exactly those devices to that
//! container:
//!
//! 1. [`identity`] reads the pod (namespace, name, UID) and container name from the CRI
//!    runtime's annotations, refusing annotations that disagree.
//! 2. The kubelet is asked about that container ([`GrantSource`]; for real, [`kubelet`] calls
//!    `Get`, falling back to `List`), once, and only when a request asks for something:
//!    containers that ask for nothing, and non-Kubernetes containers, never reach the kubelet.
//! 3. [`grant`] compares each request with what the container got of the profile's resource.
//!
//! Under [`RequestPolicy::Env`] every request is honoured (plain docker or podman hosts, where
//! whoever starts a container is already trusted). See docs/policy.md.

pub mod grant;
pub mod identity;
pub mod kubelet;

use std::collections::{BTreeMap, BTreeSet};

use devinject_devices::{Excerpt, ProfileName, ProfileSet, Request, Resolve};
use devinject_hostconfig::{NonKubernetes, OnDenied, PolicySettings, RequestPolicy};
use devinject_kubelet::answer::Answer;
use devinject_kubelet::pod_resources::PodResourcesError;

use crate::container_plan::RequestSource;
use grant::{describe, Grant, Mismatch};
use identity::{Identity, IdentityError, PodRef};

/// Why a request was refused. Every variant exits with [`devinject_exit::ExitCode::Policy`].
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum PolicyError {
    /// The CRI annotations do not identify the container, or contradict each other.
    #[error("{profile} devices refused: {source}")]
    Identity {
        /// The first profile asked for.
        profile: ProfileName,
        /// What is wrong with the annotations.
        source: IdentityError,
    },
    /// A pod sandbox (pause container) asks for devices: only a pod annotation copied by CRI-O
    /// can do that.
    #[error("{profile} devices refused: the pod sandbox of {pod} asks for them ({origin}); sandboxes never get devices, and {origin} must not be set by the pod")]
    Sandbox {
        profile: ProfileName,
        /// The pod, as named.
        pod: String,
        /// Where the request came from.
        origin: String,
    },
    /// `non_kubernetes = "refuse"` and the container has no CRI annotations.
    #[error("{profile} devices refused: the container is not a Kubernetes container (no CRI annotations) and the devinject config says non_kubernetes = \"refuse\" ({origin})")]
    NonKubernetes {
        profile: ProfileName,
        /// Where the request came from.
        origin: String,
    },
    /// The kubelet could not be asked.
    #[error(
        "{profile} devices refused for pod {pod}: the device grant cannot be checked: {source}"
    )]
    Kubelet {
        profile: ProfileName,
        pod: String,
        source: PodResourcesError,
    },
    /// The kubelet does not know the pod.
    #[error("{profile} devices refused: the kubelet knows no pod {pod} (asked with {origin}); a container that names another pod in its annotations gets nothing")]
    PodUnknown {
        profile: ProfileName,
        pod: String,
        /// Where the request came from.
        origin: String,
    },
    /// Two pods of that name with different grants.
    #[error("{profile} devices refused: the kubelet lists more than one pod {pod} with different device grants (a pod of that name is being replaced); the container start is retried")]
    Ambiguous { profile: ProfileName, pod: String },
    /// The pod is known but not the container.
    #[error("{profile} devices refused: the kubelet lists no container {:?} in pod {pod} (it lists {listed}); ordinary init containers are not listed by the pod-resources API and cannot get devices under the kubernetes policy", Excerpt(.container))]
    ContainerUnknown {
        profile: ProfileName,
        pod: String,
        container: String,
        /// The containers listed.
        listed: String,
    },
    /// The request is not what the kubelet granted.
    #[error(transparent)]
    NotGranted(Box<NotGranted>),
}

/// A request that names other devices than the kubelet granted the container.
#[allow(missing_docs, reason = "each field is named in the message")]
#[derive(Debug, thiserror::Error)]
#[error("{profile} devices refused: container {:?} of pod {pod} asks for {} ({origin}), but the kubelet granted it {granted} of {resource}: request devices with `resources.limits: {{{resource}: N}}` instead of setting {origin_key} yourself", Excerpt(.container), Excerpt(.requested))]
pub struct NotGranted {
    pub profile: ProfileName,
    pub pod: String,
    pub container: String,
    /// The extended resource.
    pub resource: String,
    /// What was asked for.
    pub requested: String,
    /// What was granted.
    pub granted: String,
    /// Where the request came from.
    pub origin: String,
    /// The env variable or annotation key alone.
    pub origin_key: String,
}

/// Where the kubelet's view of a container comes from: its pod-resources API
/// ([`kubelet::PodResources`]), or a fake in tests.
pub trait GrantSource {
    /// What the kubelet lists for container `container` of pod `namespace/pod`.
    fn lookup(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<Answer, PodResourcesError>;
}

/// The requests the policy lets through, in order. Requests that ask for nothing (`void`, unset)
/// and requests that do not parse pass unchanged: the planner ignores the first and fails the
/// container on the second, so neither injects anything. Under [`OnDenied::Ignore`] refused
/// requests are dropped with a warning instead of failing.
pub fn authorize(
    settings: PolicySettings,
    profiles: &ProfileSet,
    requests: Vec<RequestSource>,
    annotations: &BTreeMap<String, String>,
    kubelet: &dyn GrantSource,
) -> Result<Vec<RequestSource>, PolicyError> {
    if settings.policy == RequestPolicy::Env {
        return Ok(requests);
    }
    let pending: Vec<(usize, Request)> = requests
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match Request::parse(Some(&r.value)) {
            Ok(parsed) if parsed.wants_anything() => Some((i, parsed)),
            _ => None,
        })
        .collect();
    if pending.is_empty() {
        return Ok(requests);
    }
    // Each refusal with the requests it refuses: one, or all of them for identity and
    // kubelet problems.
    let mut granted = BTreeSet::new();
    let denials: Vec<(Vec<usize>, PolicyError)> = match check_all(
        settings,
        profiles,
        &requests,
        &pending,
        annotations,
        kubelet,
    ) {
        Ok(verdicts) => pending
            .iter()
            .zip(verdicts)
            .filter_map(|((i, _), v)| match v {
                Ok(Honoured::Granted) => {
                    granted.insert(*i);
                    None
                }
                Ok(Honoured::Trusted) => None,
                Err(e) => Some((vec![*i], e)),
            })
            .collect(),
        Err(e) => vec![(pending.iter().map(|(i, _)| *i).collect(), e)],
    };
    let mut refused = BTreeSet::new();
    for (indices, e) in denials {
        if settings.on_denied == OnDenied::Fail {
            return Err(e);
        }
        for i in indices {
            let r = &requests[i];
            tracing::warn!(profile = %r.profile, origin = %r.origin, reason = %e, "request ignored by the kubernetes policy");
            refused.insert(i);
        }
    }
    Ok(requests
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !refused.contains(i))
        .map(|(i, mut r)| {
            // What the kubelet granted names devices by id, and only by id.
            if granted.contains(&i) {
                r.resolve = Resolve::Granted;
            }
            r
        })
        .collect())
}

/// Why a request the policy lets through is honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Honoured {
    /// The kubelet granted exactly these devices to the container.
    Granted,
    /// The container is not a Kubernetes container, and such requests are trusted.
    Trusted,
}

/// Checks every request that asks for something: an outer `Err` refuses them all (identity or
/// kubelet problems), an inner one refuses one request.
fn check_all(
    settings: PolicySettings,
    profiles: &ProfileSet,
    requests: &[RequestSource],
    pending: &[(usize, Request)],
    annotations: &BTreeMap<String, String>,
    kubelet: &dyn GrantSource,
) -> Result<Vec<Result<Honoured, PolicyError>>, PolicyError> {
    let first = &requests[pending[0].0];
    let (pod, container) = match identity::identify(annotations) {
        Err(source) => {
            return Err(PolicyError::Identity {
                profile: first.profile.clone(),
                source,
            })
        }
        Ok(Identity::NotKubernetes) => {
            return match settings.non_kubernetes {
                NonKubernetes::Env => Ok(pending.iter().map(|_| Ok(Honoured::Trusted)).collect()),
                NonKubernetes::Refuse => Err(PolicyError::NonKubernetes {
                    profile: first.profile.clone(),
                    origin: first.origin.clone(),
                }),
            }
        }
        Ok(Identity::Sandbox { pod }) => {
            return Err(PolicyError::Sandbox {
                profile: first.profile.clone(),
                pod: pod.map_or_else(|| "an unnamed pod".to_owned(), |p| p.to_string()),
                origin: first.origin.clone(),
            })
        }
        Ok(Identity::Container { pod, container }) => (pod, container),
    };
    let lookup = kubelet
        .lookup(&pod.namespace, &pod.name, &container)
        .map_err(|source| PolicyError::Kubelet {
            profile: first.profile.clone(),
            pod: pod.to_string(),
            source,
        })?;
    tracing::debug!(%pod, %container, entries = lookup.pods.len(), rpc = %lookup.answered_by, "kubelet grant looked up");
    let mut out = Vec::with_capacity(pending.len());
    for (i, request) in pending {
        let source = &requests[*i];
        let verdict = check_one(profiles, source, request, &pod, &container, &lookup)
            .map(|()| Honoured::Granted);
        if verdict.is_ok() {
            tracing::debug!(%pod, %container, profile = %source.profile, "request matches the kubelet's grant");
        }
        out.push(verdict);
    }
    Ok(out)
}

fn check_one(
    profiles: &ProfileSet,
    source: &RequestSource,
    request: &Request,
    pod: &PodRef,
    container: &str,
    lookup: &Answer,
) -> Result<(), PolicyError> {
    let Some(profile) = profiles.get(source.profile.as_str()) else {
        // find_requests only returns profiles of the set.
        return Ok(());
    };
    let resource = profile.resource_name();
    let granted = match grant::granted(&lookup.pods, resource) {
        Grant::Devices(ids) => ids,
        Grant::PodUnknown => {
            return Err(PolicyError::PodUnknown {
                profile: source.profile.clone(),
                pod: pod.to_string(),
                origin: source.origin.clone(),
            })
        }
        Grant::Ambiguous => {
            return Err(PolicyError::Ambiguous {
                profile: source.profile.clone(),
                pod: pod.to_string(),
            })
        }
        Grant::ContainerUnknown { listed } => {
            return Err(PolicyError::ContainerUnknown {
                profile: source.profile.clone(),
                pod: pod.to_string(),
                container: container.to_owned(),
                listed: if listed.is_empty() {
                    "none".to_owned()
                } else {
                    listed.join(", ")
                },
            })
        }
    };
    grant::check(request, &granted).map_err(|m| {
        PolicyError::NotGranted(Box::new(NotGranted {
            profile: source.profile.clone(),
            pod: pod.to_string(),
            container: container.to_owned(),
            resource: resource.to_owned(),
            requested: match m {
                Mismatch::Keyword(k) => format!("`{k}`"),
                Mismatch::Devices { requested } => describe(&requested),
            },
            granted: describe(&granted),
            origin: source.origin.clone(),
            origin_key: source
                .origin
                .split_once(' ')
                .map_or(source.origin.as_str(), |(_, k)| k)
                .to_owned(),
        }))
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::path::Path;

    use devinject_devices::Profile;
    use devinject_kubelet::answer::{PodEntry, Rpc};

    use super::identity::{CONTAINERD, CRIO};
    use super::*;

    const DEMO: &str = "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel*\"]\n";
    const TPU: &str =
        "name = \"tpu\"\nresource = \"example.com/tpu\"\n[discovery]\nnodes = [\"apex_*\"]\n";

    fn profiles() -> ProfileSet {
        let p = |t: &str, n: &str| Profile::parse(t, Path::new(n)).unwrap();
        ProfileSet::from_profiles(
            vec![p(DEMO, "demo.toml"), p(TPU, "tpu.toml")],
            Path::new("/p"),
        )
        .unwrap()
    }

    /// A pod as the fake kubelet lists it: one container and what it got.
    struct ListedPod {
        namespace: String,
        name: String,
        container: String,
        grant: PodEntry,
    }

    /// A kubelet that answers from a fixed list, as the client reduces it, and records what it
    /// was asked.
    struct FakeKubelet {
        pods: Option<Vec<ListedPod>>,
        asked: RefCell<Vec<String>>,
    }

    impl FakeKubelet {
        fn new(pods: Vec<ListedPod>) -> Self {
            Self {
                pods: Some(pods),
                asked: RefCell::new(Vec::new()),
            }
        }

        fn down() -> Self {
            Self {
                pods: None,
                asked: RefCell::new(Vec::new()),
            }
        }
    }

    impl GrantSource for FakeKubelet {
        fn lookup(
            &self,
            namespace: &str,
            pod: &str,
            container: &str,
        ) -> Result<Answer, PodResourcesError> {
            self.asked.borrow_mut().push(format!("{namespace}/{pod}"));
            let Some(pods) = &self.pods else {
                return Err(PodResourcesError::SocketMissing {
                    path: "/var/lib/kubelet/pod-resources/kubelet.sock".into(),
                });
            };
            let entries = pods
                .iter()
                .filter(|p| p.namespace == namespace && p.name == pod)
                .map(|p| {
                    if p.container == container {
                        p.grant.clone()
                    } else {
                        PodEntry::Missing {
                            listed: vec![p.container.clone()],
                        }
                    }
                })
                .collect();
            Ok(Answer::new(Rpc::List, entries))
        }
    }

    fn pod(ns: &str, name: &str, container: &str, grants: &[(&str, &[&str])]) -> ListedPod {
        ListedPod {
            namespace: ns.into(),
            name: name.into(),
            container: container.into(),
            grant: PodEntry::found(grants),
        }
    }

    fn cri(
        keys: &identity::CriKeys,
        ns: &str,
        name: &str,
        uid: &str,
        c: &str,
    ) -> BTreeMap<String, String> {
        [
            (keys.kind, "container"),
            (keys.namespace, ns),
            (keys.name, name),
            (keys.uid, uid),
            (keys.container, c),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
    }

    fn env(profile: &str, var: &str, value: &str) -> RequestSource {
        RequestSource {
            profile: ProfileName::new(profile).unwrap(),
            origin: format!("env {var}"),
            value: value.into(),
            resolve: Resolve::IdsOrPositions,
        }
    }

    fn demo_env(value: &str) -> RequestSource {
        env("demo", "DEMO_VISIBLE_DEVICES", value)
    }

    fn settings(policy: RequestPolicy) -> PolicySettings {
        PolicySettings {
            policy,
            non_kubernetes: NonKubernetes::Env,
            on_denied: OnDenied::Fail,
        }
    }

    fn k8s() -> PolicySettings {
        settings(RequestPolicy::Kubernetes)
    }

    fn run(
        s: PolicySettings,
        requests: Vec<RequestSource>,
        annotations: &BTreeMap<String, String>,
        kubelet: &FakeKubelet,
    ) -> Result<Vec<RequestSource>, PolicyError> {
        authorize(s, &profiles(), requests, annotations, kubelet)
    }

    #[test]
    fn env_policy_honours_everything_without_asking() {
        let kubelet = FakeKubelet::down();
        let a = cri(&CONTAINERD, "ns", "p", "u", "main");
        let r = run(
            settings(RequestPolicy::Env),
            vec![demo_env("all")],
            &a,
            &kubelet,
        )
        .unwrap();
        assert_eq!(r, vec![demo_env("all")]);
        assert!(kubelet.asked.borrow().is_empty());
    }

    #[test]
    fn granted_ids_pass() {
        let kubelet = FakeKubelet::new(vec![pod(
            "ns",
            "p",
            "main",
            &[("devinject.io/demo", &["0", "1"])],
        )]);
        for keys in [&CONTAINERD, &CRIO] {
            let a = cri(keys, "ns", "p", "u", "main");
            let r = run(k8s(), vec![demo_env("1,0")], &a, &kubelet).unwrap();
            let granted = RequestSource {
                resolve: Resolve::Granted,
                ..demo_env("1,0")
            };
            assert_eq!(
                r,
                vec![granted],
                "what the kubelet granted resolves as ids only"
            );
        }
        assert_eq!(*kubelet.asked.borrow(), ["ns/p", "ns/p"]);
    }

    #[test]
    fn pod_setting_the_variable_itself_is_refused() {
        let kubelet = FakeKubelet::new(vec![pod("ns", "p", "main", &[("devinject.io/demo", &[])])]);
        let a = cri(&CONTAINERD, "ns", "p", "u", "main");
        let err = run(k8s(), vec![demo_env("all")], &a, &kubelet).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PolicyError::NotGranted(_)), "{text}");
        for needle in [
            "asks for `all` (env DEMO_VISIBLE_DEVICES)",
            "granted it none of devinject.io/demo",
            "resources.limits: {devinject.io/demo: N}",
            "instead of setting DEMO_VISIBLE_DEVICES yourself",
            "\"main\" of pod ns/p (uid u)",
        ] {
            assert!(text.contains(needle), "{needle:?} in {text}");
        }
        // More than granted, or other devices.
        let kubelet = FakeKubelet::new(vec![pod(
            "ns",
            "p",
            "main",
            &[("devinject.io/demo", &["0"])],
        )]);
        for value in ["0,1", "1", "none"] {
            let err = run(k8s(), vec![demo_env(value)], &a, &kubelet).unwrap_err();
            assert!(matches!(err, PolicyError::NotGranted(_)), "{value}: {err}");
        }
    }

    #[test]
    fn annotation_copied_from_another_pod_is_refused() {
        // Pod "victim" got 0,1; pod "thief" copied its annotation (CRI-O copies pod annotations
        // into the container spec).
        let kubelet = FakeKubelet::new(vec![
            pod(
                "ns",
                "victim",
                "main",
                &[("devinject.io/demo", &["0", "1"])],
            ),
            pod("ns", "thief", "main", &[]),
        ]);
        let a = cri(&CRIO, "ns", "thief", "u2", "main");
        let copied = RequestSource {
            profile: ProfileName::new("demo").unwrap(),
            origin: "annotation devinject.io/demo.devices".into(),
            value: "0,1".into(),
            resolve: Resolve::Ids,
        };
        let err = run(k8s(), vec![copied.clone()], &a, &kubelet).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("setting devinject.io/demo.devices yourself"),
            "{text}"
        );
        assert!(text.contains("asks for 0, 1"), "{text}");
        // Copying the victim's containerd identity as well makes the annotations disagree.
        let mut forged = a.clone();
        forged.extend(cri(&CONTAINERD, "ns", "victim", "u1", "main"));
        let err = run(k8s(), vec![copied], &forged, &kubelet).unwrap_err();
        assert!(matches!(err, PolicyError::Identity { .. }), "{err}");
        assert_eq!(
            kubelet.asked.borrow().len(),
            1,
            "a forged identity is never looked up"
        );
    }

    #[test]
    fn unknown_pod_container_and_sandbox() {
        let kubelet = FakeKubelet::new(vec![pod(
            "ns",
            "p",
            "main",
            &[("devinject.io/demo", &["0"])],
        )]);
        let err = run(
            k8s(),
            vec![demo_env("0")],
            &cri(&CONTAINERD, "ns", "ghost", "u9", "main"),
            &kubelet,
        )
        .unwrap_err();
        assert!(matches!(err, PolicyError::PodUnknown { .. }), "{err}");
        assert!(err.to_string().contains("ns/ghost (uid u9)"), "{err}");
        let err = run(
            k8s(),
            vec![demo_env("0")],
            &cri(&CONTAINERD, "ns", "p", "u", "init"),
            &kubelet,
        )
        .unwrap_err();
        assert!(err.to_string().contains("lists main"), "{err}");
        assert!(err.to_string().contains("init containers"), "{err}");
        let mut sandbox = cri(&CRIO, "ns", "p", "u", "POD");
        sandbox.insert(CRIO.kind.into(), "sandbox".into());
        let err = run(k8s(), vec![demo_env("0")], &sandbox, &kubelet).unwrap_err();
        assert!(matches!(err, PolicyError::Sandbox { .. }), "{err}");
    }

    #[test]
    fn kubelet_unreachable_is_a_clear_refusal() {
        let kubelet = FakeKubelet::down();
        let err = run(
            k8s(),
            vec![demo_env("0")],
            &cri(&CONTAINERD, "ns", "p", "u", "main"),
            &kubelet,
        )
        .unwrap_err();
        let text = devinject_exit::describe(&err);
        assert!(text.contains("cannot be checked"), "{text}");
        assert!(
            text.contains("/var/lib/kubelet/pod-resources/kubelet.sock does not exist"),
            "{text}"
        );
    }

    #[test]
    fn non_kubernetes_containers() {
        let kubelet = FakeKubelet::down();
        let none = BTreeMap::new();
        let r = run(k8s(), vec![demo_env("all")], &none, &kubelet).unwrap();
        assert_eq!(r.len(), 1, "honoured like the env policy");
        assert!(
            kubelet.asked.borrow().is_empty(),
            "non-Kubernetes containers pay nothing"
        );
        let refuse = PolicySettings {
            non_kubernetes: NonKubernetes::Refuse,
            ..k8s()
        };
        let err = run(refuse, vec![demo_env("all")], &none, &kubelet).unwrap_err();
        assert!(matches!(err, PolicyError::NonKubernetes { .. }), "{err}");
    }

    #[test]
    fn nothing_asked_means_no_kubelet_call() {
        let kubelet = FakeKubelet::down();
        let a = cri(&CONTAINERD, "ns", "p", "u", "main");
        let r = run(k8s(), vec![demo_env("void"), demo_env("")], &a, &kubelet).unwrap();
        assert_eq!(r.len(), 2);
        // A malformed value is left for the planner, which refuses it with exit code 5.
        let r = run(k8s(), vec![demo_env("0;1")], &a, &kubelet).unwrap();
        assert_eq!(r.len(), 1);
        assert!(kubelet.asked.borrow().is_empty());
    }

    #[test]
    fn each_profile_is_checked_against_its_own_resource() {
        let kubelet = FakeKubelet::new(vec![pod(
            "ns",
            "p",
            "main",
            &[
                ("devinject.io/demo", &["0"]),
                ("example.com/tpu", &["apex_0"]),
            ],
        )]);
        let a = cri(&CONTAINERD, "ns", "p", "u", "main");
        let tpu = |v: &str| env("tpu", "TPU_VISIBLE_DEVICES", v);
        let r = run(k8s(), vec![demo_env("0"), tpu("apex_0")], &a, &kubelet).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            kubelet.asked.borrow().len(),
            1,
            "one kubelet call per container"
        );
        let err = run(
            k8s(),
            vec![demo_env("0"), tpu("apex_0,apex_1")],
            &a,
            &kubelet,
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("tpu devices refused"), "{err}");
    }

    #[test]
    fn on_denied_ignore_drops_only_what_was_refused() {
        let kubelet = FakeKubelet::new(vec![pod(
            "ns",
            "p",
            "main",
            &[("devinject.io/demo", &["0"])],
        )]);
        let a = cri(&CONTAINERD, "ns", "p", "u", "main");
        let ignore = PolicySettings {
            on_denied: OnDenied::Ignore,
            ..k8s()
        };
        let tpu = env("tpu", "TPU_VISIBLE_DEVICES", "all");
        let r = run(ignore, vec![demo_env("0"), tpu], &a, &kubelet).unwrap();
        let granted = RequestSource {
            resolve: Resolve::Granted,
            ..demo_env("0")
        };
        assert_eq!(r, vec![granted]);
        let r = run(ignore, vec![demo_env("0")], &a, &FakeKubelet::down()).unwrap();
        assert!(r.is_empty(), "unverifiable requests are dropped too");
    }
}
