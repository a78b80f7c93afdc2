//! The pod a refused container belongs to, as its runtime named it: what turns a refusal into
//! an Event on that pod (`kubectl describe pod`).
//!
//! The names come from the container's CRI annotations, which the runtime writes and which the
//! admission core checks for a pod's forgery (`devinject_admission::policy::identity`). They are
//! kept only when they have the shape Kubernetes gives them ([`Pod::new`]): a pod's namespace is
//! a DNS label, its name a DNS subdomain, its UID a UUID. So a log line stays within its bound,
//! and an Event never carries bytes the API server would refuse or a terminal would act on.

use serde::{Deserialize, Serialize};

/// The longest namespace kept (a DNS label).
pub const MAX_NAMESPACE_BYTES: usize = 63;
/// The longest pod name kept (a DNS subdomain).
pub const MAX_POD_NAME_BYTES: usize = 253;
/// The longest pod UID kept (Kubernetes writes 36-character UUIDs).
pub const MAX_UID_BYTES: usize = 64;

/// A pod, by namespace, name and UID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pod {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID (`metadata.uid`).
    pub uid: String,
}

impl Pod {
    /// The pod, when each part has the shape Kubernetes gives it: lower-case letters, digits,
    /// `-` and `.` (the UID: also none but hex digits and `-`), within its bound; `None`
    /// otherwise.
    pub fn new(namespace: &str, name: &str, uid: &str) -> Option<Pod> {
        let dns = |s: &str, max: usize| {
            !s.is_empty()
                && s.len() <= max
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        };
        let uuid = !uid.is_empty()
            && uid.len() <= MAX_UID_BYTES
            && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        (dns(namespace, MAX_NAMESPACE_BYTES) && dns(name, MAX_POD_NAME_BYTES) && uuid).then(|| {
            Pod {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                uid: uid.to_owned(),
            }
        })
    }

    /// Whether a pod read back from a line still has that shape (a line is not trusted).
    pub fn is_well_formed(&self) -> bool {
        Pod::new(&self.namespace, &self.name, &self.uid).is_some()
    }
}

impl std::fmt::Display for Pod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_shapes_kubernetes_gives_are_kept() {
        let uid = "0f9c1c2e-5b7a-4c1e-9d53-3f2b8f1a6c10";
        assert!(Pod::new("default", "web-0.a", uid).is_some());
        for (ns, name, uid) in [
            ("", "p", uid),
            ("Default", "p", uid),
            ("default", "p\n", uid),
            ("default", "p\"", uid),
            ("default", &"p".repeat(254), uid),
            (&"n".repeat(64), "p", uid),
            ("default", "p", ""),
            ("default", "p", "not-a-uid!"),
            ("default", "p", &"a".repeat(65)),
        ] {
            assert_eq!(Pod::new(ns, name, uid), None, "{ns:?} {name:?} {uid:?}");
        }
    }
}
