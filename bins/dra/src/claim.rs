//! What a ResourceClaim asks of this driver on this node: the devices the scheduler allocated
//! from our pools, and the opaque configuration that goes with each request.
//!
//! [`read`] is a pure function of the claim object the API server returned, the UID the kubelet
//! named, our driver name and this node's pools, so every refusal is unit-tested without a
//! cluster.
//!
//! # Checks
//! - **UID**: the kubelet names a claim by namespace, name and UID. A claim read by name may be
//!   a newer object under the same name (the old one deleted and re-created); preparing it would
//!   hand the pod devices allocated for another claim, so a different UID is
//!   [`ClaimError::UidMismatch`].
//! - **Allocation**: a claim without `status.allocation.devices` is not ready for the kubelet
//!   to prepare ([`ClaimError::NotAllocated`]).
//! - **Pools**: a result of our driver from a pool that is not one of this node's was
//!   allocated for another node; it is refused by name ([`ClaimError::ForeignPool`]) rather
//!   than matched by device name against the wrong host.
//! - **Messages**: every value of the claim a message quotes (names, UIDs, requests, pools,
//!   devices, keys and values of the opaque parameters) goes through
//!   [`devinject_devices::Excerpt`]: bounded, and escaped so that no control character or bidi
//!   override reaches the pod's events or the node's log (docs/security.md).
//! - **Bounds**: at most [`MAX_RESULTS`] results and [`MAX_CONFIGS`] configuration entries,
//!   so a malformed object cannot make the plugin do unbounded work.
//!
//! # Configuration
//! `status.allocation.devices.config[]` entries whose `opaque.driver` is ours carry a JSON
//! object in `opaque.parameters`. Its only key is `function` (a string): the prepare function
//! of the profile the devices get (docs/prepare.md). Any other key is
//! [`ClaimError::UnknownKey`], as a typo in our own config files is. Entries from the
//! DeviceClass apply before those from the claim, and within each in list order; a later entry
//! that sets a key overrides an earlier one. An entry with a `requests` list applies only to
//! those requests (a request `main` also covers its subrequests `main/sub`).

use std::collections::BTreeSet;

use devinject_devices::Excerpt;
use k8s_openapi::api::resource::v1::{DeviceAllocationConfiguration, DeviceTaint, ResourceClaim};
use tracing::debug;

/// The most allocation results a claim may carry (the API server allows far fewer).
pub const MAX_RESULTS: usize = 128;
/// The most configuration entries a claim's allocation may carry.
pub const MAX_CONFIGS: usize = 128;

/// The `source` of a configuration entry that comes from the DeviceClass.
const FROM_CLASS: &str = "FromClass";

/// Why a claim cannot be prepared on this node.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum ClaimError {
    /// The object read from the API server is another claim than the one the kubelet named.
    #[error("claim {claim}: the kubelet asked for uid {expected} but the API server has uid {found}: the claim was deleted and re-created; the kubelet will retry with the new one")]
    UidMismatch {
        /// `namespace/name`.
        claim: String,
        /// The UID the kubelet gave.
        expected: String,
        /// The UID of the object read.
        found: String,
    },
    /// The claim has no device allocation.
    #[error("claim {claim}: not allocated yet (status.allocation.devices is empty): wait for the scheduler to allocate it")]
    NotAllocated {
        /// `namespace/name`.
        claim: String,
    },
    /// More results or configuration entries than this driver reads.
    #[error(
        "claim {claim}: {count} {what}, more than the {max} this driver reads: split the claim"
    )]
    TooLarge {
        /// `namespace/name`.
        claim: String,
        /// What there are too many of.
        what: &'static str,
        /// How many there are.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A device of ours allocated from a pool of another node.
    #[error("claim {claim}: device {device} of request {request} is in pool {pool}, which is not one of this node's pools ({ours}): the claim was allocated for another node")]
    ForeignPool {
        /// `namespace/name`.
        claim: String,
        request: String,
        /// The pool named in the result.
        pool: String,
        /// The device named in the result.
        device: String,
        /// This node's pools, comma-separated.
        ours: String,
    },
    /// Opaque parameters for our driver that are not a JSON object.
    #[error("claim {claim}: opaque parameters for driver {driver} are not a JSON object: write them as {{\"function\": \"<id>\"}}")]
    NotAnObject {
        /// `namespace/name`.
        claim: String,
        /// Our driver name.
        driver: String,
    },
    /// A key this driver does not know in its opaque parameters.
    #[error("claim {claim}: unknown key {key} in the opaque parameters for driver {driver}: the only key is \"function\"")]
    UnknownKey {
        /// `namespace/name`.
        claim: String,
        /// Our driver name.
        driver: String,
        /// The key, quoted, bounded and escaped.
        key: String,
    },
    /// A `function` that is not a function id.
    #[error("claim {claim}: \"function\" in the opaque parameters for driver {driver} is {value}: give a string of 1-128 letters, digits, '.', '_' or '-' naming one of the profile's prepare functions")]
    BadFunction {
        /// `namespace/name`.
        claim: String,
        /// Our driver name.
        driver: String,
        /// The value (a string quoted, anything else as JSON), bounded and escaped.
        value: String,
    },
}

/// A `Result` with a [`ClaimError`].
pub type Result<T> = std::result::Result<T, ClaimError>;

/// One device of ours allocated to the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// The request (or `request/subrequest`) the device was allocated for.
    pub request: String,
    /// Its pool: one of this node's, `<node>/<profile>` ([`crate::naming::pool`]).
    pub pool: String,
    /// Its DRA device name in the pool ([`crate::naming::DeviceNames`]).
    pub device: String,
    /// Whether the device was allocated with admin access (monitoring or maintenance next to
    /// other users, without exclusive use).
    pub admin_access: bool,
    /// The taints of the device the claim tolerated when it was allocated (at most the API's
    /// 16 per request).
    pub tolerations: Vec<Toleration>,
    /// The allocation's share of a device many claims share by capacity (the API server's
    /// UID for it), `None` for a device allocated whole.
    pub share_id: Option<String>,
    /// Whether the allocation carries the driver's binding condition
    /// ([`crate::slices::PREPARED_CONDITION`]): the scheduler bound the pod only once the
    /// device's prepare step had run ([`crate::binding`]), so the kubelet's prepare does not
    /// run it again.
    pub prepared_before_binding: bool,
}

/// A claim's toleration of a device taint, as the allocation result records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toleration {
    /// The taint key; `None` with `Exists` matches every key.
    pub key: Option<String>,
    /// `Exists` (any value) or `Equal` (the default).
    pub operator: Option<String>,
    /// The taint value, for `Equal`.
    pub value: Option<String>,
    /// The effect; `None` matches every effect.
    pub effect: Option<String>,
}

impl Toleration {
    /// Whether it tolerates `taint`, by the API's rules (`resource.k8s.io/v1`
    /// `DeviceToleration`): an empty key matches every key and needs `Exists`; `Exists` matches
    /// every value, `Equal` (the default) the taint's; an empty effect matches every effect.
    pub fn tolerates(&self, taint: &DeviceTaint) -> bool {
        let exists = self.operator.as_deref() == Some("Exists");
        let key_matches = match self.key.as_deref() {
            None | Some("") => exists,
            Some(key) => key == taint.key,
        };
        let value_matches = exists
            || self.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default();
        let effect_matches = self
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        key_matches && value_matches && effect_matches
    }
}

/// The configuration of one request's devices, from our opaque parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimConfig {
    /// The prepare function the devices get (`function`); `None` runs the profile's default.
    pub function: Option<String>,
}

/// One of our configuration entries, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConfigEntry {
    /// The requests it applies to; `None` for all.
    requests: Option<Vec<String>>,
    config: ClaimConfig,
}

/// What a claim asks of this driver on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Our allocated devices, in the claim's order.
    pub devices: Vec<AllocatedDevice>,
    /// Our configuration entries, class entries first.
    configs: Vec<ConfigEntry>,
}

impl Allocation {
    /// The configuration of `request`'s devices: every entry that applies to it, in order, a
    /// later one overriding what an earlier one set.
    pub fn config(&self, request: &str) -> ClaimConfig {
        let mut out = ClaimConfig::default();
        for entry in &self.configs {
            let applies = entry.requests.as_ref().is_none_or(|names| {
                names.iter().any(|n| {
                    request == n
                        || request
                            .strip_prefix(n.as_str())
                            .is_some_and(|rest| rest.starts_with('/'))
                })
            });
            if applies {
                if let Some(f) = &entry.config.function {
                    out.function = Some(f.clone());
                }
            }
        }
        out
    }
}

/// Reads `claim`: checks that it is the claim `uid`, and returns the devices allocated to it by
/// `driver` (all from `pools`, this node's pools) with our configuration (see the module docs).
pub fn read(
    claim: &ResourceClaim,
    uid: &str,
    driver: &str,
    pools: &BTreeSet<String>,
) -> Result<Allocation> {
    let name = format!(
        "{}/{}",
        Excerpt(claim.metadata.namespace.as_deref().unwrap_or_default()),
        Excerpt(claim.metadata.name.as_deref().unwrap_or_default())
    );
    let found = claim.metadata.uid.as_deref().unwrap_or_default();
    if found != uid {
        return Err(ClaimError::UidMismatch {
            claim: name,
            expected: shown(uid),
            found: shown(found),
        });
    }
    let Some(alloc) = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
    else {
        return Err(ClaimError::NotAllocated { claim: name });
    };
    let results = alloc.results.as_deref().unwrap_or_default();
    if results.is_empty() {
        return Err(ClaimError::NotAllocated { claim: name });
    }
    let too_large = |what, count, max| ClaimError::TooLarge {
        claim: name.clone(),
        what,
        count,
        max,
    };
    if results.len() > MAX_RESULTS {
        return Err(too_large("allocation results", results.len(), MAX_RESULTS));
    }
    let configs = alloc.config.as_deref().unwrap_or_default();
    if configs.len() > MAX_CONFIGS {
        return Err(too_large(
            "configuration entries",
            configs.len(),
            MAX_CONFIGS,
        ));
    }
    let mut devices = Vec::new();
    for r in results.iter().filter(|r| r.driver == driver) {
        if !pools.contains(&r.pool) {
            return Err(ClaimError::ForeignPool {
                claim: name,
                request: shown(&r.request),
                pool: shown(&r.pool),
                device: shown(&r.device),
                ours: pools
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        devices.push(AllocatedDevice {
            request: r.request.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access.unwrap_or(false),
            tolerations: r
                .tolerations
                .iter()
                .flatten()
                .map(|t| Toleration {
                    key: t.key.clone(),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect(),
            share_id: r.share_id.clone(),
            prepared_before_binding: r
                .binding_conditions
                .iter()
                .flatten()
                .any(|c| c == crate::slices::PREPARED_CONDITION),
        });
    }
    // Class entries first: the claim's own configuration refines its class's.
    let ours =
        |c: &&DeviceAllocationConfiguration| c.opaque.as_ref().is_some_and(|o| o.driver == driver);
    let ordered = configs
        .iter()
        .filter(ours)
        .filter(|c| c.source == FROM_CLASS)
        .chain(
            configs
                .iter()
                .filter(ours)
                .filter(|c| c.source != FROM_CLASS),
        );
    let mut parsed = Vec::new();
    for c in ordered {
        let Some(opaque) = &c.opaque else { continue };
        parsed.push(ConfigEntry {
            requests: c.requests.clone().filter(|r| !r.is_empty()),
            config: parse_parameters(&opaque.parameters.0, &name, driver)?,
        });
    }
    debug!(
        claim = %name,
        uid,
        devices = devices.len(),
        configs = parsed.len(),
        "read claim allocation"
    );
    Ok(Allocation {
        devices,
        configs: parsed,
    })
}

/// Parses our opaque parameters: a JSON object whose only key is `function`.
fn parse_parameters(params: &serde_json::Value, claim: &str, driver: &str) -> Result<ClaimConfig> {
    let serde_json::Value::Object(map) = params else {
        return Err(ClaimError::NotAnObject {
            claim: claim.to_owned(),
            driver: driver.to_owned(),
        });
    };
    let mut config = ClaimConfig::default();
    for (key, value) in map {
        match (key.as_str(), value) {
            ("function", serde_json::Value::String(f))
                if devinject_devices::profile::is_function_id(f) =>
            {
                config.function = Some(f.clone());
            }
            ("function", other) => {
                return Err(ClaimError::BadFunction {
                    claim: claim.to_owned(),
                    driver: driver.to_owned(),
                    value: match other {
                        serde_json::Value::String(text) => format!("{:?}", Excerpt(text)),
                        other => shown(&other.to_string()),
                    },
                })
            }
            (key, _) => {
                return Err(ClaimError::UnknownKey {
                    claim: claim.to_owned(),
                    driver: driver.to_owned(),
                    key: format!("{:?}", Excerpt(key)),
                })
            }
        }
    }
    Ok(config)
}

/// `s` as a message shows it (values come from the API server, which any user with a claim can
/// steer): through the one escaping excerpt.
fn shown(s: &str) -> String {
    Excerpt(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
        OpaqueDeviceConfiguration, ResourceClaimStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
    use serde_json::json;

    const DRIVER: &str = "devinject.io";
    const UID: &str = "0b5e6f4c-2a7d-4f1e-9c3b-1d2e3f4a5b6c";

    fn pools() -> BTreeSet<String> {
        ["node-a/demo".to_owned(), "node-a/kvm".to_owned()].into()
    }

    fn result(
        request: &str,
        driver: &str,
        pool: &str,
        device: &str,
    ) -> DeviceRequestAllocationResult {
        DeviceRequestAllocationResult {
            request: request.into(),
            driver: driver.into(),
            pool: pool.into(),
            device: device.into(),
            ..Default::default()
        }
    }

    fn config(
        source: &str,
        driver: &str,
        requests: Option<&[&str]>,
        params: serde_json::Value,
    ) -> DeviceAllocationConfiguration {
        DeviceAllocationConfiguration {
            source: source.into(),
            requests: requests.map(|r| r.iter().map(|s| s.to_string()).collect()),
            opaque: Some(OpaqueDeviceConfiguration {
                driver: driver.into(),
                parameters: RawExtension(params),
            }),
        }
    }

    fn claim(
        results: Vec<DeviceRequestAllocationResult>,
        configs: Vec<DeviceAllocationConfiguration>,
    ) -> ResourceClaim {
        ResourceClaim {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("gpu-claim".into()),
                uid: Some(UID.into()),
                ..Default::default()
            },
            status: Some(ResourceClaimStatus {
                allocation: Some(AllocationResult {
                    devices: Some(DeviceAllocationResult {
                        results: Some(results),
                        config: Some(configs),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_toleration_matches_a_taint_by_the_apis_rules() {
        let t = |key: Option<&str>,
                 operator: Option<&str>,
                 value: Option<&str>,
                 effect: Option<&str>| Toleration {
            key: key.map(Into::into),
            operator: operator.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
        };
        let (k, v) = ("devinject.io/unhealthy", "health_sysfs");
        let taint = |effect: &str| DeviceTaint {
            key: k.into(),
            value: Some(v.into()),
            effect: effect.into(),
            time_added: None,
        };
        assert!(t(Some(k), Some("Exists"), None, None).tolerates(&taint("NoSchedule")));
        assert!(
            t(Some(k), Some("Exists"), None, Some("NoSchedule")).tolerates(&taint("NoSchedule"))
        );
        assert!(
            !t(Some(k), Some("Exists"), None, Some("NoSchedule")).tolerates(&taint("NoExecute"))
        );
        assert!(
            t(Some(k), None, Some(v), None).tolerates(&taint("NoExecute")),
            "Equal by default"
        );
        assert!(!t(Some(k), Some("Equal"), Some("other"), None).tolerates(&taint("NoSchedule")));
        assert!(
            t(None, Some("Exists"), None, None).tolerates(&taint("NoExecute")),
            "every key"
        );
        assert!(
            !t(None, None, None, None).tolerates(&taint("NoSchedule")),
            "no key needs Exists"
        );
        assert!(!t(Some("other.io/x"), Some("Exists"), None, None).tolerates(&taint("NoSchedule")));
    }

    #[test]
    fn only_our_drivers_results_are_kept_in_claim_order() {
        let mut admin = result("b", DRIVER, "node-a/kvm", "kvm-kvm");
        admin.admin_access = Some(true);
        admin.share_id = Some("5d2c9a61-0f3e-4b7a-8c1d-2e3f4a5b6c7d".into());
        admin.binding_conditions = Some(vec![crate::slices::PREPARED_CONDITION.into()]);
        let c = claim(
            vec![
                result("a", DRIVER, "node-a/demo", "demo-1"),
                result("a", "gpu.example.com", "elsewhere/x", "gpu-0"),
                admin,
            ],
            vec![],
        );
        let alloc = read(&c, UID, DRIVER, &pools()).unwrap();
        assert_eq!(
            alloc.devices,
            vec![
                AllocatedDevice {
                    request: "a".into(),
                    pool: "node-a/demo".into(),
                    device: "demo-1".into(),
                    admin_access: false,
                    tolerations: Vec::new(),
                    share_id: None,
                    prepared_before_binding: false,
                },
                AllocatedDevice {
                    request: "b".into(),
                    pool: "node-a/kvm".into(),
                    device: "kvm-kvm".into(),
                    admin_access: true,
                    tolerations: Vec::new(),
                    share_id: Some("5d2c9a61-0f3e-4b7a-8c1d-2e3f4a5b6c7d".into()),
                    prepared_before_binding: true,
                },
            ]
        );
    }

    #[test]
    fn another_uid_is_refused_naming_both() {
        let c = claim(vec![result("a", DRIVER, "node-a/demo", "demo-0")], vec![]);
        let err = read(&c, "1111-2222", DRIVER, &pools()).unwrap_err();
        assert_eq!(
            err,
            ClaimError::UidMismatch {
                claim: "ns/gpu-claim".into(),
                expected: "1111-2222".into(),
                found: UID.into(),
            }
        );
        let text = err.to_string();
        assert!(text.contains("1111-2222") && text.contains(UID), "{text}");
    }

    #[test]
    fn a_claim_without_allocation_is_not_allocated_yet() {
        let mut c = claim(vec![], vec![]);
        let err = read(&c, UID, DRIVER, &pools()).unwrap_err();
        assert!(err.to_string().contains("not allocated yet"), "{err}");
        c.status = None;
        assert_eq!(
            read(&c, UID, DRIVER, &pools()).unwrap_err(),
            ClaimError::NotAllocated {
                claim: "ns/gpu-claim".into()
            }
        );
    }

    #[test]
    fn a_device_in_another_nodes_pool_is_refused_naming_the_pool() {
        let c = claim(
            vec![
                result("a", DRIVER, "node-a/demo", "demo-0"),
                result("a", DRIVER, "node-b/demo", "demo-1"),
            ],
            vec![],
        );
        let err = read(&c, UID, DRIVER, &pools()).unwrap_err();
        assert!(matches!(&err, ClaimError::ForeignPool { pool, device, .. }
            if pool == "node-b/demo" && device == "demo-1"));
        let text = err.to_string();
        assert!(
            text.contains("node-b/demo") && text.contains("node-a/demo, node-a/kvm"),
            "{text}"
        );
    }

    #[test]
    fn more_than_128_results_are_refused() {
        let many = (0..=MAX_RESULTS)
            .map(|i| result("a", DRIVER, "node-a/demo", &format!("demo-{i}")))
            .collect();
        let err = read(&claim(many, vec![]), UID, DRIVER, &pools()).unwrap_err();
        assert!(matches!(
            err,
            ClaimError::TooLarge {
                count: 129,
                max: 128,
                ..
            }
        ));
        let exactly = (0..MAX_RESULTS)
            .map(|i| result("a", DRIVER, "node-a/demo", &format!("demo-{i}")))
            .collect();
        let alloc = read(&claim(exactly, vec![]), UID, DRIVER, &pools()).unwrap();
        assert_eq!(alloc.devices.len(), 128);
    }

    #[test]
    fn per_request_config_applies_only_to_its_requests_and_claim_overrides_class() {
        let c = claim(
            vec![
                result("gpu", DRIVER, "node-a/demo", "demo-0"),
                result("fpga/big", DRIVER, "node-a/demo", "demo-1"),
                result("other", DRIVER, "node-a/demo", "demo-2"),
            ],
            vec![
                // Listed first but from the claim: it still overrides the class default.
                config(
                    "FromClaim",
                    DRIVER,
                    Some(&["fpga"]),
                    json!({"function": "nlb3"}),
                ),
                config("FromClass", DRIVER, None, json!({"function": "default-fn"})),
                config("FromClaim", DRIVER, Some(&["gpu"]), json!({})),
                // Another driver's parameters are not ours to read, whatever they hold.
                config("FromClaim", "gpu.example.com", None, json!({"whatever": 1})),
            ],
        );
        let alloc = read(&c, UID, DRIVER, &pools()).unwrap();
        assert_eq!(alloc.config("fpga/big").function.as_deref(), Some("nlb3"));
        assert_eq!(alloc.config("fpga").function.as_deref(), Some("nlb3"));
        assert_eq!(alloc.config("gpu").function.as_deref(), Some("default-fn"));
        assert_eq!(
            alloc.config("other").function.as_deref(),
            Some("default-fn")
        );
        // `fpga` does not cover `fpgax`.
        assert_eq!(
            alloc.config("fpgax").function.as_deref(),
            Some("default-fn")
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_in_our_parameters_are_errors() {
        let with = |params| {
            read(
                &claim(
                    vec![result("a", DRIVER, "node-a/demo", "demo-0")],
                    vec![config("FromClaim", DRIVER, None, params)],
                ),
                UID,
                DRIVER,
                &pools(),
            )
        };
        let err = with(json!({"function": "x", "funtcion": "y"})).unwrap_err();
        assert!(matches!(&err, ClaimError::UnknownKey { key, .. } if key == "\"funtcion\""));
        assert!(err.to_string().contains("\"funtcion\""), "{err}");
        let err = with(json!({"function": 3})).unwrap_err();
        assert!(matches!(&err, ClaimError::BadFunction { value, .. } if value == "3"));
        assert!(matches!(
            with(json!({"function": "a/b"})).unwrap_err(),
            ClaimError::BadFunction { .. }
        ));
        assert!(matches!(
            with(json!(["function"])).unwrap_err(),
            ClaimError::NotAnObject { .. }
        ));
        assert_eq!(
            with(json!({"function": "nlb0"})).unwrap().config("a"),
            ClaimConfig {
                function: Some("nlb0".into())
            }
        );
    }

    /// A claim whose every value a namespace user sets carries C0 and C1 controls, a bidi
    /// override and an escape sequence.
    fn hostile_claim(params: serde_json::Value) -> ResourceClaim {
        let mut c = claim(
            vec![result(
                "r\u{202e}q",
                DRIVER,
                "node-b/\u{9b}31m",
                "dev\u{1b}[2J\u{85}",
            )],
            vec![config("FromClaim", DRIVER, None, params)],
        );
        c.metadata.name = Some("evil\u{202e}gpj.exe".into());
        c
    }

    /// The allocated devices of `claim`, which [`claim`] made.
    fn devices(claim: &mut ResourceClaim) -> &mut DeviceAllocationResult {
        claim
            .status
            .as_mut()
            .and_then(|s| s.allocation.as_mut())
            .and_then(|a| a.devices.as_mut())
            .expect("an allocated claim")
    }

    #[test]
    fn claim_values_reach_messages_escaped_byte_for_byte() {
        let err = read(&hostile_claim(json!({})), UID, DRIVER, &pools()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "claim ns/evil\\u{202e}gpj.exe: device dev\\u{1b}[2J\\u{85} of request r\\u{202e}q is \
             in pool node-b/\\u{9b}31m, which is not one of this node's pools (node-a/demo, \
             node-a/kvm): the claim was allocated for another node"
        );
        let mut ours = hostile_claim(json!({"\u{202e}fn\u{9b}\n": "x"}));
        devices(&mut ours).results = Some(vec![result("r", DRIVER, "node-a/demo", "demo-0")]);
        let err = read(&ours, UID, DRIVER, &pools()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "claim ns/evil\\u{202e}gpj.exe: unknown key \"\\u{202e}fn\\u{9b}\\n\" in the opaque \
             parameters for driver devinject.io: the only key is \"function\""
        );
        let config = &mut devices(&mut ours).config.as_mut().unwrap()[0];
        config.opaque.as_mut().unwrap().parameters =
            RawExtension(json!({"function": "nlb\u{202e}3\u{1b}]0;\u{7}\"\\"}));
        let err = read(&ours, UID, DRIVER, &pools()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "claim ns/evil\\u{202e}gpj.exe: \"function\" in the opaque parameters for driver \
             devinject.io is \"nlb\\u{202e}3\\u{1b}]0;\\u{7}\\\"\\\\\": give a string of 1-128 \
             letters, digits, '.', '_' or '-' naming one of the profile's prepare functions"
        );
        // Not a string: its JSON, escaped the same way; a long one cut with its length.
        let config = &mut devices(&mut ours).config.as_mut().unwrap()[0];
        config.opaque.as_mut().unwrap().parameters =
            RawExtension(json!({"function": ["\u{85}".repeat(100)]}));
        let err = read(&ours, UID, DRIVER, &pools()).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "is [\\\"{}... (204 bytes in all): give",
                "\\u{85}".repeat(20)
            )),
            "{err}"
        );
        for forbidden in ['\u{1b}', '\u{85}', '\u{9b}', '\u{202e}', '\n'] {
            assert!(!err.contains(forbidden), "{err:?}");
        }
    }

    #[test]
    fn another_uid_with_controls_is_named_escaped() {
        let c = claim(vec![result("a", DRIVER, "node-a/demo", "demo-0")], vec![]);
        let err = read(&c, "u\u{202e}\u{85}", DRIVER, &pools()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "claim ns/gpu-claim: the kubelet asked for uid u\\u{{202e}}\\u{{85}} but the API \
                 server has uid {UID}: the claim was deleted and re-created; the kubelet will \
                 retry with the new one"
            )
        );
    }
}
