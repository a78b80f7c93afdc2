//! How a claim the kubelet names is named in the driver's messages and checked before its
//! names are used: its namespace, name and UID each through the escaping excerpt (they come
//! from the kubelet, and from whoever created the claim), its UID checked before it names a
//! file or a CDI device, its namespace and name before they name an API path (Kubernetes'
//! object names, <https://kubernetes.io/docs/concepts/overview/working-with-objects/names/>).

use devinject_devices::Excerpt;

use crate::naming;
use crate::prepared::ClaimRef;

/// How a claim is named in messages (every part through the escaping excerpt), and its UID,
/// checked before it names files; its namespace and name are checked before they name an API
/// path.
pub(super) fn label(claim: &ClaimRef) -> Result<(String, String), String> {
    let what = format!(
        "claim {}/{} ({})",
        Excerpt(&claim.namespace),
        Excerpt(&claim.name),
        Excerpt(&claim.uid)
    );
    let uid = naming::claim_uid(&claim.uid).map_err(|e| e.to_string())?;
    naming::object_name("namespace", &claim.namespace)
        .and_then(|_| naming::object_name("name", &claim.name))
        .map_err(|e| format!("{what}: {e}"))?;
    Ok((what, uid.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(namespace: &str, name: &str, uid: &str) -> ClaimRef {
        ClaimRef {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    const UID: &str = "11111111-1111-4111-8111-111111111111";

    #[test]
    fn a_claim_is_named_by_namespace_name_and_uid_and_its_uid_handed_back() {
        assert_eq!(
            label(&claim("ns", "claim", UID)),
            Ok((format!("claim ns/claim ({UID})"), UID.to_owned()))
        );
    }

    #[test]
    fn a_uid_that_could_name_another_file_is_refused() {
        for uid in ["../../etc/passwd", "", "a/b", "a_b", &"a".repeat(65)] {
            assert!(label(&claim("ns", "claim", uid)).is_err(), "{uid:?}");
        }
    }

    #[test]
    fn a_namespace_or_name_that_is_no_dns_subdomain_is_refused_naming_the_claim() {
        let err = label(&claim("Bad_NS", "claim", UID)).unwrap_err();
        assert!(err.starts_with("claim Bad_NS/claim ("), "{err}");
        assert!(err.contains("namespace"), "{err}");
        let err = label(&claim("ns", "-claim", UID)).unwrap_err();
        assert!(err.contains("name"), "{err}");
        assert!(label(&claim("ns", "a.b-c", UID)).is_ok());
    }

    #[test]
    fn what_the_kubelet_sent_is_shown_escaped() {
        let err = label(&claim("ns\nforged", "claim", UID)).unwrap_err();
        assert!(!err.contains('\n'), "{err}");
    }
}
