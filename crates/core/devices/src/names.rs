//! Validated names: profile names, Kubernetes resource names and device ids.
//!
//! Each is checked once at the boundary (profile load, request parse) so the rest of the code can
//! rely on it: a profile name is a DNS label, a resource name is `domain/name` outside
//! `kubernetes.io`, a device id is short and made of characters safe in env values, annotations
//! and file names.

use std::fmt;

/// Why a name was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NameError {
    /// A profile name that is not a lowercase DNS label.
    #[error("profile name {0:?} is invalid: use 1-63 lowercase letters, digits and '-', starting with a letter")]
    Profile(String),
    /// A Kubernetes extended resource name that is not `domain/name`.
    #[error("resource name {0:?} is invalid: use `<domain>/<name>` such as `example.com/tpu` (not under kubernetes.io)")]
    Resource(String),
    /// A device id with characters the kubelet or an env value cannot carry.
    #[error("device id {0:?} is invalid: use 1-63 characters from A-Z a-z 0-9 . _ - :")]
    DeviceId(String),
}

/// The CDI vendor of devinject's specs: our own domain, so a kind never collides with a vendor's
/// specs for the same hardware.
pub const CDI_VENDOR: &str = "devinject.io";

/// A profile's name: lowercase DNS label, e.g. `demo`, `coral-edgetpu`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ProfileName(String);

impl ProfileName {
    /// Checks `name` and wraps it.
    pub fn new(name: &str) -> Result<Self, NameError> {
        let ok = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if ok {
            Ok(Self(name.to_owned()))
        } else {
            Err(NameError::Profile(name.to_owned()))
        }
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The CDI kind (`vendor/class`) of this profile's devices: `devinject.io/<name>`, as
    /// `devinject-ctl cdi generate` writes it and the device plugin names its devices.
    pub fn cdi_kind(&self) -> String {
        format!("{CDI_VENDOR}/{}", self.0)
    }

    /// The default request variable: `<NAME>_VISIBLE_DEVICES`, upper-cased, '-' as '_'.
    pub fn default_request_env(&self) -> String {
        self.env_stem() + DEFAULT_REQUEST_SUFFIX
    }

    /// The name as the start of an env variable: `CORAL_EDGETPU` for `coral-edgetpu`.
    pub fn env_stem(&self) -> String {
        self.0.to_ascii_uppercase().replace('-', "_")
    }
}

/// How every default request variable ends.
pub const DEFAULT_REQUEST_SUFFIX: &str = "_VISIBLE_DEVICES";

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A Kubernetes extended resource name, e.g. `devinject.io/demo`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceName(String);

impl ResourceName {
    /// Checks `name` and wraps it.
    pub fn new(name: &str) -> Result<Self, NameError> {
        let bad = || NameError::Resource(name.to_owned());
        let (domain, local) = name.split_once('/').ok_or_else(bad)?;
        let domain_ok = domain.contains('.')
            && domain.len() <= 253
            && !domain.ends_with("kubernetes.io")
            && domain.split('.').all(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            });
        let local_ok = !local.is_empty()
            && local.len() <= 63
            && local.starts_with(|c: char| c.is_ascii_alphanumeric())
            && local.ends_with(|c: char| c.is_ascii_alphanumeric())
            && local
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if domain_ok && local_ok {
            Ok(Self(name.to_owned()))
        } else {
            Err(bad())
        }
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A device's stable id as advertised to the kubelet and accepted in requests.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct DeviceId(String);

impl DeviceId {
    /// Checks `id` and wraps it. The kubelet limits ids to 63 characters.
    pub fn new(id: &str) -> Result<Self, NameError> {
        let ok = !id.is_empty()
            && id.len() <= 63
            && !id.contains("::")
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
        if ok {
            Ok(Self(id.to_owned()))
        } else {
            Err(NameError::DeviceId(id.to_owned()))
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names() {
        assert!(ProfileName::new("demo").is_ok());
        assert!(ProfileName::new("coral-edgetpu").is_ok());
        for bad in ["", "Demo", "1gpu", "a_b", "x-", &"a".repeat(64)] {
            assert!(ProfileName::new(bad).is_err(), "{bad:?} accepted");
        }
        let n = ProfileName::new("coral-edgetpu").unwrap();
        assert_eq!(n.default_request_env(), "CORAL_EDGETPU_VISIBLE_DEVICES");
    }

    #[test]
    fn resource_names() {
        assert!(ResourceName::new("devinject.io/demo").is_ok());
        assert!(ResourceName::new("nvidia.com/gpu").is_ok());
        for bad in [
            "gpu",
            "kubernetes.io/gpu",
            "example.com/",
            "nodot/gpu",
            "a.b/-x",
        ] {
            assert!(ResourceName::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn names_display_as_given() {
        let r = ResourceName::new("devinject.io/demo").unwrap();
        assert_eq!(r.to_string(), "devinject.io/demo");
        assert_eq!(format!("[{r}]"), "[devinject.io/demo]");
        assert_eq!(ProfileName::new("demo").unwrap().to_string(), "demo");
        assert_eq!(
            DeviceId::new("0000:3b:00.0").unwrap().to_string(),
            "0000:3b:00.0"
        );
    }

    #[test]
    fn device_ids() {
        for good in ["0", "GPU-4a1c2e0b-7f3e", "0000:3b:00.0", "apex_0"] {
            assert!(DeviceId::new(good).is_ok(), "{good:?} rejected");
        }
        for bad in ["", "a b", "x::1", "a/b", "é", &"a".repeat(64)] {
            assert!(DeviceId::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
