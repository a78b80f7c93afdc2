//! The fixed facts about one served resource, taken from its profile at start-up.

pub use devinject_devices::AllocateMode;
use devinject_devices::{Profile, ProfileName};

/// One resource served by the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceConfig {
    /// The profile name, e.g. `demo`.
    pub profile: ProfileName,
    /// The Kubernetes extended resource, e.g. `devinject.io/demo`.
    pub resource_name: String,
    /// The env variable that carries granted ids, e.g. `DEMO_VISIBLE_DEVICES`.
    pub request_env: String,
    /// The annotation that carries granted ids, e.g. `devinject.io/demo.devices`.
    pub request_annotation: String,
    /// How many ids each physical device is advertised as.
    pub replicas: u32,
    /// How `Allocate` answers: `envvar` (env plus our annotation, for the devinject shim or
    /// hook), `cdi-annotations` (a `cdi.k8s.io/` annotation) or `cdi-cri` (the `cdi_devices`
    /// field, kubelet 1.28+).
    pub mode: AllocateMode,
}

impl ResourceConfig {
    /// The resource a profile describes.
    pub fn from_profile(profile: &Profile) -> Self {
        Self {
            profile: profile.name.clone(),
            resource_name: profile.resource_name().to_owned(),
            request_env: profile.request_env().to_owned(),
            request_annotation: profile.request_annotation(),
            replicas: profile.replicas,
            mode: profile.allocate_mode,
        }
    }

    /// The CDI kind (`vendor/class`) of this profile's devices, as `devinject-ctl cdi generate`
    /// writes it.
    pub fn cdi_kind(&self) -> String {
        self.profile.cdi_kind()
    }

    /// The annotation key for CDI device names in `cdi-annotations` mode: the `cdi.k8s.io/`
    /// prefix, then a name unique to this plugin and resource.
    pub fn cdi_annotation(&self) -> String {
        format!("cdi.k8s.io/devinject_{}", self.profile)
    }

    /// The socket file name for an incarnation started at `stamp` (a Unix time in
    /// milliseconds): unique per incarnation, so a stale registration never matches a new one.
    pub fn socket_name(&self, stamp: u128) -> String {
        format!("devinject-{}-{stamp}.sock", self.profile)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The demo profile's resource, as the unit tests use it.
    pub(crate) fn demo(mode: AllocateMode, replicas: u32) -> ResourceConfig {
        ResourceConfig {
            profile: ProfileName::new("demo").unwrap(),
            resource_name: "devinject.io/demo".into(),
            request_env: "DEMO_VISIBLE_DEVICES".into(),
            request_annotation: "devinject.io/demo.devices".into(),
            replicas,
            mode,
        }
    }

    #[test]
    fn names() {
        let r = demo(AllocateMode::Envvar, 1);
        assert_eq!(r.cdi_kind(), "devinject.io/demo");
        assert_eq!(r.cdi_annotation(), "cdi.k8s.io/devinject_demo");
        assert_eq!(
            r.socket_name(1700000000123),
            "devinject-demo-1700000000123.sock"
        );
    }
}
