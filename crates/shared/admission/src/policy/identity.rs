//! Which pod and container a spec belongs to, from the annotations the CRI runtime writes.
//!
//! | | containerd | CRI-O |
//! |---|---|---|
//! | container or sandbox | `io.kubernetes.cri.container-type` | `io.kubernetes.cri-o.ContainerType` |
//! | pod UID | `io.kubernetes.cri.sandbox-uid` | `io.kubernetes.pod.uid` |
//! | pod name | `io.kubernetes.cri.sandbox-name` | `io.kubernetes.pod.name` |
//! | pod namespace | `io.kubernetes.cri.sandbox-namespace` | `io.kubernetes.pod.namespace` |
//! | container name | `io.kubernetes.cri.container-name` | `io.kubernetes.container.name` |
//!
//! Who can write these keys matters. CRI-O copies the pod's own annotations into every
//! container's spec, then writes the kubelet's labels (the CRI-O column) over them, so those are
//! the kubelet's; but a pod can still add the *containerd* keys. containerd passes pod
//! annotations only when `pod_annotations` allow-lists them. So a spec that carries both sets
//! must have them agree: a disagreement means one set was written by the pod, and the container
//! is refused rather than trusting either.
//!
//! Any `io.kubernetes.cri.` key, or one of the CRI-O identity keys (pod UID, name, namespace,
//! container name), marks a CRI container: it must then name its pod and container completely.
//! A pod can add annotations but not remove the runtime's, so a kubelet container cannot pass
//! for anything else. Only a spec with none of them is a non-Kubernetes container (`docker
//! run`, `ctr run`, podman, `runc` by hand). CRI-O's own `io.kubernetes.cri-o.` keys are not a
//! mark: podman writes some of them too (`io.kubernetes.cri-o.Created`, `.TTY`, and
//! `.ContainerType` for its pods' infra containers), and CRI-O always writes the identity keys.

use std::collections::BTreeMap;
use std::fmt;

use devinject_devices::Excerpt;

/// The keys one CRI runtime writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CriKeys {
    /// The runtime, for messages.
    pub runtime: &'static str,
    /// `container` or `sandbox`.
    pub kind: &'static str,
    /// Pod UID.
    pub uid: &'static str,
    /// Pod name.
    pub name: &'static str,
    /// Pod namespace.
    pub namespace: &'static str,
    /// Container name.
    pub container: &'static str,
}

/// containerd's CRI plugin.
pub const CONTAINERD: CriKeys = CriKeys {
    runtime: "containerd",
    kind: "io.kubernetes.cri.container-type",
    uid: "io.kubernetes.cri.sandbox-uid",
    name: "io.kubernetes.cri.sandbox-name",
    namespace: "io.kubernetes.cri.sandbox-namespace",
    container: "io.kubernetes.cri.container-name",
};

/// CRI-O (the identity keys are the kubelet's container labels).
pub const CRIO: CriKeys = CriKeys {
    runtime: "CRI-O",
    kind: "io.kubernetes.cri-o.ContainerType",
    uid: "io.kubernetes.pod.uid",
    name: "io.kubernetes.pod.name",
    namespace: "io.kubernetes.pod.namespace",
    container: "io.kubernetes.container.name",
};

/// The key prefix only containerd's CRI plugin writes.
const CONTAINERD_PREFIX: &str = "io.kubernetes.cri.";

/// A pod, as the annotations name it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "a pod's namespace and name, as Kubernetes names them"
)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    /// UID, when the runtime wrote it.
    pub uid: Option<String>,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A pod can write these annotations itself (see the module docs): bounded, escaped.
        write!(f, "{}/{}", Excerpt(&self.namespace), Excerpt(&self.name))?;
        if let Some(uid) = &self.uid {
            write!(f, " (uid {})", Excerpt(uid))?;
        }
        Ok(())
    }
}

/// What the annotations say the spec is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// No CRI annotations: not created through the kubelet.
    NotKubernetes,
    /// A pod's sandbox (pause) container.
    Sandbox {
        /// Its pod, as far as named.
        pod: Option<PodRef>,
    },
    /// A container of a pod.
    Container {
        /// The pod the annotations name.
        pod: PodRef,
        /// The container's name in the pod spec.
        container: String,
    },
}

/// Why the annotations cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// A CRI container that does not name its pod or container.
    #[error("the container carries CRI annotations but no {missing} ({runtime} writes it): cannot tell which pod it belongs to")]
    Incomplete {
        /// The runtime whose keys were found.
        runtime: &'static str,
        /// The key that is missing.
        missing: &'static str,
    },
    /// containerd and CRI-O keys disagree.
    #[error("the container's annotations disagree: {first_key}={:?} but {second_key}={:?}: one of them was set by the pod, so neither is trusted", Excerpt(.first_value), Excerpt(.second_value))]
    Conflict {
        /// containerd's key.
        first_key: &'static str,
        /// Its value.
        first_value: String,
        /// CRI-O's key.
        second_key: &'static str,
        /// Its value.
        second_value: String,
    },
}

/// Reads the identity from a spec's annotations.
pub fn identify(annotations: &BTreeMap<String, String>) -> Result<Identity, IdentityError> {
    // The container type alone does not mark a family: podman writes CRI-O's for its pods.
    let present = |keys: &CriKeys| {
        [keys.uid, keys.name, keys.namespace, keys.container]
            .iter()
            .any(|k| annotations.contains_key(*k))
            || (keys == &CONTAINERD && annotations.contains_key(keys.kind))
    };
    let families: Vec<&CriKeys> = [&CONTAINERD, &CRIO]
        .into_iter()
        .filter(|k| present(k))
        .collect();
    let marked = annotations.keys().any(|k| k.starts_with(CONTAINERD_PREFIX));
    if families.is_empty() {
        if marked {
            return Err(IdentityError::Incomplete {
                runtime: "the CRI runtime",
                missing: "pod name, namespace or container name",
            });
        }
        return Ok(Identity::NotKubernetes);
    }
    // Every field must agree between the families that set it.
    let field = |pick: fn(&CriKeys) -> &'static str| -> Result<Option<String>, IdentityError> {
        let mut found: Option<(&'static str, &String)> = None;
        for keys in &families {
            let key = pick(keys);
            if let Some(value) = annotations.get(key) {
                match found {
                    Some((first_key, first_value)) if first_value != value => {
                        return Err(IdentityError::Conflict {
                            first_key,
                            first_value: first_value.clone(),
                            second_key: key,
                            second_value: value.clone(),
                        })
                    }
                    Some(_) => {}
                    None => found = Some((key, value)),
                }
            }
        }
        Ok(found.map(|(_, v)| v.clone()))
    };
    let kind = field(|k| k.kind)?;
    let uid = field(|k| k.uid)?;
    let name = field(|k| k.name)?;
    let namespace = field(|k| k.namespace)?;
    let container = field(|k| k.container)?;
    let keys = families[0];
    let missing = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
    let pod = if missing(&namespace) || missing(&name) {
        None
    } else {
        Some(PodRef {
            namespace: namespace.clone().unwrap_or_default(),
            name: name.clone().unwrap_or_default(),
            uid: uid.filter(|u| !u.is_empty()),
        })
    };
    if kind.as_deref() == Some("sandbox") {
        return Ok(Identity::Sandbox { pod });
    }
    let incomplete = |missing| IdentityError::Incomplete {
        runtime: keys.runtime,
        missing,
    };
    let Some(pod) = pod else {
        return Err(incomplete(if missing(&namespace) {
            keys.namespace
        } else {
            keys.name
        }));
    };
    match container {
        Some(container) if !container.is_empty() => Ok(Identity::Container { pod, container }),
        _ => Err(incomplete(keys.container)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn containerd(ns: &str, pod: &str, uid: &str, container: &str) -> Vec<(String, String)> {
        vec![
            (CONTAINERD.kind.into(), "container".into()),
            (CONTAINERD.namespace.into(), ns.into()),
            (CONTAINERD.name.into(), pod.into()),
            (CONTAINERD.uid.into(), uid.into()),
            (CONTAINERD.container.into(), container.into()),
            ("io.kubernetes.cri.sandbox-id".into(), "abc".into()),
        ]
    }

    fn crio(ns: &str, pod: &str, uid: &str, container: &str) -> Vec<(String, String)> {
        vec![
            (CRIO.kind.into(), "container".into()),
            (CRIO.namespace.into(), ns.into()),
            (CRIO.name.into(), pod.into()),
            (CRIO.uid.into(), uid.into()),
            (CRIO.container.into(), container.into()),
        ]
    }

    fn container(ns: &str, pod: &str, uid: &str, c: &str) -> Identity {
        Identity::Container {
            pod: PodRef {
                namespace: ns.into(),
                name: pod.into(),
                uid: Some(uid.into()),
            },
            container: c.into(),
        }
    }

    #[test]
    fn no_cri_annotations_is_not_kubernetes() {
        assert_eq!(identify(&map(&[])), Ok(Identity::NotKubernetes));
        let other = map(&[
            ("devinject.io/demo.devices", "0"),
            ("org.opencontainers.x", "y"),
        ]);
        assert_eq!(identify(&other), Ok(Identity::NotKubernetes));
    }

    #[test]
    fn containerd_and_crio_containers() {
        let a: BTreeMap<_, _> = containerd("ns", "p", "u1", "main").into_iter().collect();
        assert_eq!(identify(&a), Ok(container("ns", "p", "u1", "main")));
        let b: BTreeMap<_, _> = crio("ns", "p", "u1", "main").into_iter().collect();
        assert_eq!(identify(&b), Ok(container("ns", "p", "u1", "main")));
        // Both, agreeing (containerd with the CRI-O keys allow-listed, or a pod that copied
        // its own values): fine.
        let both: BTreeMap<_, _> = containerd("ns", "p", "u1", "main")
            .into_iter()
            .chain(crio("ns", "p", "u1", "main"))
            .collect();
        assert_eq!(identify(&both), Ok(container("ns", "p", "u1", "main")));
    }

    #[test]
    fn a_pod_adding_the_other_runtimes_keys_is_a_conflict() {
        // CRI-O pod "thief" annotated with containerd keys naming pod "victim".
        let forged: BTreeMap<_, _> = crio("ns", "thief", "u2", "main")
            .into_iter()
            .chain(containerd("ns", "victim", "u1", "main"))
            .collect();
        let err = identify(&forged).unwrap_err();
        assert!(matches!(err, IdentityError::Conflict { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("\"u1\"") && text.contains("\"u2\""), "{text}");
    }

    #[test]
    fn podman_containers_are_not_kubernetes() {
        // What podman 4 writes into a container's and a pod infra container's spec.
        let container = map(&[
            ("io.container.manager", "libpod"),
            (
                "io.kubernetes.cri-o.Created",
                "2024-07-29T11:36:40.51830451+05:30",
            ),
            ("io.kubernetes.cri-o.TTY", "true"),
            ("io.podman.annotations.autoremove", "TRUE"),
            ("io.podman.annotations.privileged", "FALSE"),
        ]);
        assert_eq!(identify(&container), Ok(Identity::NotKubernetes));
        let infra = map(&[
            ("io.kubernetes.cri-o.ContainerType", "sandbox"),
            ("io.kubernetes.cri-o.TTY", "false"),
            ("io.podman.annotations.init", "FALSE"),
        ]);
        assert_eq!(identify(&infra), Ok(Identity::NotKubernetes));
    }

    #[test]
    fn sandboxes() {
        let mut a: BTreeMap<_, _> = containerd("ns", "p", "u1", "").into_iter().collect();
        a.insert(CONTAINERD.kind.into(), "sandbox".into());
        a.remove(CONTAINERD.container);
        assert!(matches!(
            identify(&a),
            Ok(Identity::Sandbox { pod: Some(_) })
        ));
        let b = map(&[(CRIO.kind, "sandbox"), (CRIO.container, "POD")]);
        assert_eq!(identify(&b), Ok(Identity::Sandbox { pod: None }));
    }

    #[test]
    fn incomplete_identities_are_refused() {
        let mut a: BTreeMap<_, _> = containerd("ns", "p", "u1", "main").into_iter().collect();
        a.remove(CONTAINERD.container);
        assert_eq!(
            identify(&a),
            Err(IdentityError::Incomplete {
                runtime: "containerd",
                missing: CONTAINERD.container
            })
        );
        let mut b: BTreeMap<_, _> = crio("ns", "p", "u1", "main").into_iter().collect();
        b.remove(CRIO.namespace);
        assert_eq!(
            identify(&b),
            Err(IdentityError::Incomplete {
                runtime: "CRI-O",
                missing: CRIO.namespace
            })
        );
        // Only a CRI marker, no identity at all.
        let c = map(&[("io.kubernetes.cri.sandbox-id", "abc")]);
        assert!(matches!(
            identify(&c),
            Err(IdentityError::Incomplete { .. })
        ));
        // Empty values count as missing.
        let d: BTreeMap<_, _> = containerd("ns", "", "u1", "main").into_iter().collect();
        assert!(matches!(
            identify(&d),
            Err(IdentityError::Incomplete { .. })
        ));
    }

    #[test]
    fn uid_is_optional_but_shown() {
        let mut a: BTreeMap<_, _> = containerd("ns", "p", "u1", "main").into_iter().collect();
        a.remove(CONTAINERD.uid);
        let Ok(Identity::Container { pod, .. }) = identify(&a) else {
            panic!("container")
        };
        assert_eq!(pod.to_string(), "ns/p");
        let full = PodRef {
            uid: Some("u".into()),
            ..pod
        };
        assert_eq!(full.to_string(), "ns/p (uid u)");
    }
}

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default).

    use proptest::collection::btree_map;
    use proptest::prelude::*;

    use super::*;

    fn key() -> impl Strategy<Value = String> {
        let keys: Vec<&'static str> = [CONTAINERD, CRIO]
            .iter()
            .flat_map(|k| [k.kind, k.uid, k.name, k.namespace, k.container])
            .chain([
                "io.kubernetes.cri.sandbox-id",
                "devinject.io/demo.devices",
                "other",
            ])
            .collect();
        proptest::sample::select(keys).prop_map(str::to_owned)
    }

    proptest! {
        #[test]
        fn identity_never_contradicts_an_annotation(
            annotations in btree_map(key(), prop_oneof![Just(""), Just("a"), Just("b"), Just("sandbox"), Just("container")].prop_map(str::to_owned), 0..12),
        ) {
            match identify(&annotations) {
                Ok(Identity::NotKubernetes) => {
                    // Only keys that mark no CRI container: ours, others, CRI-O's type.
                    let unmarked =
                        |k: &String| k == "devinject.io/demo.devices" || k == "other" || k == CRIO.kind;
                    prop_assert!(annotations.keys().all(unmarked));
                }
                Ok(Identity::Container { pod, container }) => {
                    for keys in [CONTAINERD, CRIO] {
                        for (k, v) in [
                            (keys.namespace, &pod.namespace),
                            (keys.name, &pod.name),
                            (keys.container, &container),
                        ] {
                            if let Some(a) = annotations.get(k) {
                                prop_assert_eq!(a, v, "{} contradicts the identity", k);
                            }
                        }
                        if let Some(a) = annotations.get(keys.uid) {
                            prop_assert!(a.is_empty() || pod.uid.as_ref() == Some(a));
                        }
                        // CRI-O's type counts only with its identity keys (podman writes it).
                        let marks = [keys.uid, keys.name, keys.namespace, keys.container]
                            .iter()
                            .any(|k| annotations.contains_key(*k));
                        if marks || keys == CONTAINERD {
                            prop_assert_ne!(annotations.get(keys.kind).map(String::as_str), Some("sandbox"));
                        }
                    }
                    prop_assert!(!pod.namespace.is_empty() && !pod.name.is_empty() && !container.is_empty());
                }
                Ok(Identity::Sandbox { .. }) => {
                    prop_assert!([CONTAINERD, CRIO].iter().any(|k| annotations.get(k.kind).map(String::as_str) == Some("sandbox")));
                }
                Err(IdentityError::Conflict { first_key, first_value, second_key, second_value }) => {
                    prop_assert_ne!(&first_value, &second_value);
                    prop_assert_eq!(annotations.get(first_key), Some(&first_value));
                    prop_assert_eq!(annotations.get(second_key), Some(&second_value));
                }
                Err(IdentityError::Incomplete { .. }) => {}
            }
        }
    }
}
