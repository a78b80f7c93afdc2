//! The names the DRA driver gives things in the API server, on the node and in CDI, each made in
//! one place from a profile, a device and a claim.
//!
//! - **Driver**: one DRA driver name for every profile (`devinject.io` unless configured), so a
//!   DeviceClass selects a profile by the `profile` attribute, not by driver.
//! - **Pool**: one pool per node and profile, `<node>/<profile>`: pool names are unique per
//!   driver across the cluster, so the node is part of it.
//! - **Device**: `<profile>-<id>` as a DNS label (what ResourceSlices require): the id lower-cased,
//!   anything else than `[a-z0-9-]` as `-`. Two devices of one pool with the same name are an error
//!   ([`DeviceNames`]), never a silent merge.
//! - **CDI**: kind `k8s.<driver>/<profile>` (apart from `devinject-ctl cdi generate`'s
//!   `<driver>/<profile>`, so the two never conflict), device `<claim uid>-<device>`, one transient
//!   spec file per claim `k8s.<driver>-<profile>_<claim uid>.json`.

use std::collections::BTreeMap;

use devinject_devices::Excerpt;

/// The driver name when none is configured.
pub const DEFAULT_DRIVER: &str = devinject_devices::dra_names::DEFAULT_DRA_DRIVER;

/// Why a name could not be made.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum NamingError {
    /// Two devices of one profile map to the same DRA device name.
    #[error("profile {profile}: devices {first} and {second} both become DRA device {name}; give the profile an id scheme whose ids differ in more than case and punctuation (discovery.id)")]
    Collision {
        profile: String,
        /// The first device id.
        first: String,
        /// The second device id.
        second: String,
        /// The name both map to.
        name: String,
    },
    /// A device name would be too long or empty.
    #[error("profile {profile}: device {id} cannot be named as a DRA device ({why}); shorten the profile name or the device ids")]
    Unusable {
        profile: String,
        /// The device id.
        id: String,
        /// What is wrong.
        why: devinject_devices::dra_names::UnusableDraName,
    },
    /// A claim UID that is not one.
    #[error("claim uid {uid} is not a Kubernetes UID (letters, digits and '-', at most 64)")]
    ClaimUid {
        /// The UID as given, quoted, bounded and escaped.
        uid: String,
    },
    /// A claim's namespace or name that is not a Kubernetes object name.
    #[error("claim {what} {name} is not a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253)")]
    ObjectName {
        /// `namespace` or `name`.
        what: &'static str,
        /// The value as given, quoted, bounded and escaped.
        name: String,
    },
}

/// The pool of `profile` on `node`.
pub fn pool(node: &str, profile: &str) -> String {
    devinject_devices::dra_names::dra_pool(node, profile)
}

/// The DRA device name of device `id` of `profile`: a DNS label.
pub fn device(profile: &str, id: &str) -> Result<String, NamingError> {
    devinject_devices::dra_names::dra_device_name(profile, id).map_err(|why| {
        NamingError::Unusable {
            profile: profile.to_owned(),
            id: id.chars().take(64).collect(),
            why,
        }
    })
}

/// DRA device names of one profile's devices, checked for collisions: device name to id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceNames(BTreeMap<String, String>);

impl DeviceNames {
    /// Names every id of `profile`.
    pub fn new<'a>(
        profile: &str,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, NamingError> {
        let mut names = BTreeMap::new();
        for id in ids {
            let name = device(profile, id)?;
            if let Some(first) = names.insert(name.clone(), id.to_owned()) {
                return Err(NamingError::Collision {
                    profile: profile.to_owned(),
                    first,
                    second: id.to_owned(),
                    name,
                });
            }
        }
        Ok(Self(names))
    }

    /// The device id a DRA device name stands for.
    pub fn id(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The DRA device name of device `id`.
    pub fn name(&self, id: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(_, i)| i.as_str() == id)
            .map(|(n, _)| n.as_str())
    }
}

/// Checks a claim UID before it becomes part of a file or CDI device name.
pub fn claim_uid(uid: &str) -> Result<&str, NamingError> {
    let ok = !uid.is_empty()
        && uid.len() <= 64
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(uid)
    } else {
        Err(NamingError::ClaimUid {
            uid: format!("{:?}", Excerpt(uid)),
        })
    }
}

/// Checks a claim's namespace (`what` = `namespace`) or name before it is used in an API path
/// and in messages: a DNS subdomain, as the API server requires of both.
pub fn object_name<'a>(what: &'static str, name: &'a str) -> Result<&'a str, NamingError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
    if ok {
        Ok(name)
    } else {
        Err(NamingError::ObjectName {
            what,
            name: format!("{:?}", Excerpt(name)),
        })
    }
}

/// The CDI vendor of the driver's transient specs.
pub fn cdi_vendor(driver: &str) -> String {
    format!("k8s.{driver}")
}

/// The CDI kind of `profile`'s claim specs.
pub fn cdi_kind(driver: &str, profile: &str) -> String {
    format!("{}/{profile}", cdi_vendor(driver))
}

/// The CDI device name of DRA device `device` in the claim `uid`.
pub fn cdi_device(uid: &str, device: &str) -> String {
    format!("{uid}-{device}")
}

/// The fully qualified CDI device id the kubelet hands the runtime.
pub fn cdi_device_id(driver: &str, profile: &str, uid: &str, device: &str) -> String {
    format!("{}={}", cdi_kind(driver, profile), cdi_device(uid, device))
}

/// The file name of the transient spec of claim `uid` for `profile`.
pub fn claim_spec_file(driver: &str, profile: &str, uid: &str) -> String {
    format!("{}-{profile}_{uid}.json", cdi_vendor(driver))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_are_dns_labels_from_profile_and_id() {
        assert_eq!(device("demo", "0").unwrap(), "demo-0");
        assert_eq!(device("nvidia", "GPU-1a2B_3").unwrap(), "nvidia-gpu-1a2b-3");
        assert_eq!(device("amd", "0000:03:00.0").unwrap(), "amd-0000-03-00-0");
        assert!(matches!(
            device("demo", "__"),
            Err(NamingError::Unusable { .. })
        ));
        let long = "x".repeat(60);
        let err = device("demo", &long).unwrap_err();
        assert!(err.to_string().contains("over 63"), "{err}");
    }

    #[test]
    fn two_ids_with_one_name_are_an_error_that_names_both() {
        let err = DeviceNames::new("demo", ["a.b", "a_b"]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("a.b") && text.contains("a_b") && text.contains("demo-a-b"),
            "{text}"
        );
        let names = DeviceNames::new("demo", ["0", "1"]).unwrap();
        assert_eq!(names.id("demo-1"), Some("1"));
        assert_eq!(names.name("0"), Some("demo-0"));
        assert_eq!(names.id("demo-2"), None);
    }

    #[test]
    fn claim_uids_are_checked_before_they_name_files() {
        assert!(claim_uid("0b5e6f4c-2a7d-4f1e-9c3b-1d2e3f4a5b6c").is_ok());
        for bad in [
            "",
            "../../etc/passwd",
            "a/b",
            "x".repeat(65).as_str(),
            "a b",
        ] {
            assert!(claim_uid(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn object_names_are_dns_subdomains_and_others_are_named_escaped() {
        for good in ["default", "gpu-claim-x7k2p", "a.b-c", "0"] {
            assert!(object_name("name", good).is_ok(), "{good}");
        }
        for bad in ["", "A", "a_b", "-a", "a-", "a..b", &"a".repeat(254)] {
            assert!(object_name("name", bad).is_err(), "{bad}");
        }
        assert_eq!(
            object_name("namespace", "ns\u{202e}\u{9b}")
                .unwrap_err()
                .to_string(),
            "claim namespace \"ns\\u{202e}\\u{9b}\" is not a Kubernetes object name (lower-case \
             letters, digits, '-' and '.', at most 253)"
        );
        assert_eq!(
            claim_uid("u\u{85}\u{1b}[0m").unwrap_err().to_string(),
            "claim uid \"u\\u{85}\\u{1b}[0m\" is not a Kubernetes UID (letters, digits and '-', at most 64)"
        );
    }

    #[test]
    fn cdi_names_keep_claims_and_the_static_specs_apart() {
        assert_eq!(cdi_kind("devinject.io", "demo"), "k8s.devinject.io/demo");
        assert_eq!(
            cdi_device_id("devinject.io", "demo", "u1", "demo-0"),
            "k8s.devinject.io/demo=u1-demo-0"
        );
        assert_eq!(
            claim_spec_file("devinject.io", "demo", "u1"),
            "k8s.devinject.io-demo_u1.json"
        );
        assert_eq!(pool("node-a", "demo"), "node-a/demo");
    }
}
