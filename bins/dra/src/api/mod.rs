//! The kubelet's plugin registration and DRA node service APIs, generated at build time from
//! our own .proto files (`README.md` in this folder names the upstream version they match).
//!
//! - [`pluginregistration`]: the plugin watcher's `Registration` service, served by
//!   [`crate::registration`] on the socket in the kubelet's `plugins_registry/`.
//! - [`v1`] and [`v1beta1`]: the `DRAPlugin` node service, both served by one implementation in
//!   [`crate::node_service`] on the driver's own socket.
//! - [`health_v1`] and [`health_v1alpha1`]: the resource-health stream, both served by
//!   [`crate::health`] there too.

/// `Registration` messages, client and server (`pluginregistration.Registration`).
#[allow(missing_docs, clippy::doc_markdown, clippy::large_enum_variant)]
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}

/// The DRA node service, Kubernetes 1.34 and later (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`).
#[allow(missing_docs, clippy::doc_markdown, clippy::large_enum_variant)]
pub mod v1 {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// The DRA node service of Kubernetes 1.32 and 1.33
/// (`k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`).
#[allow(missing_docs, clippy::doc_markdown, clippy::large_enum_variant)]
pub mod v1beta1 {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
}

/// The resource-health stream of Kubernetes 1.37 (`v1.DRAResourceHealth`), served by
/// [`crate::health`] on the driver's own socket beside the node service.
#[allow(missing_docs, clippy::doc_markdown, clippy::large_enum_variant)]
pub mod health_v1 {
    tonic::include_proto!("v1");
}

/// The resource-health stream before 1.37 (`v1alpha1.DRAResourceHealth`): [`health_v1`]'s
/// messages under their first name, which kubelets speak until 1.40.
#[allow(missing_docs, clippy::doc_markdown, clippy::large_enum_variant)]
pub mod health_v1alpha1 {
    tonic::include_proto!("v1alpha1");
}

/// `PluginInfo.type` of a DRA driver: the kubelet hands the registration to its DRA manager.
pub const PLUGIN_TYPE: &str = "DRAPlugin";

/// The advertised name of the [`v1`] node service.
pub const V1: &str = "v1.DRAPlugin";

/// The advertised name of the [`v1beta1`] node service.
pub const V1BETA1: &str = "v1beta1.DRAPlugin";

/// The advertised name of the [`health_v1`] resource-health stream.
pub const HEALTH_V1: &str = "v1.DRAResourceHealth";

/// The advertised name of the [`health_v1alpha1`] resource-health stream.
pub const HEALTH_V1ALPHA1: &str = "v1alpha1.DRAResourceHealth";

/// `PluginInfo.supported_versions`: the node services newest first (the kubelet uses the first
/// one it knows), then the health streams, newest first. A 1.37 kubelet opens the health stream
/// only when the registration names it, and takes the first of `v1.DRAResourceHealth` and
/// `v1alpha1.` it finds in its own order, v1 first (v1alpha1 until 1.40); a 1.34-1.36 kubelet
/// opens `v1alpha1` unasked and skips names it does not know.
pub const SUPPORTED_VERSIONS: [&str; 4] = [V1, V1BETA1, HEALTH_V1, HEALTH_V1ALPHA1];

#[cfg(test)]
mod tests {
    //! Pins the field numbers and types of the published contract with hand-computed wire bytes
    //! (tag = field number << 3 | wire type; 0 = varint, 2 = length-delimited; a map entry is a
    //! message with the key as field 1 and the value as field 2), so a slip in the .proto cannot
    //! go unnoticed just because both ends of our tests share it.

    use std::collections::BTreeMap;

    use prost::Message;
    use tonic::server::NamedService;

    use super::*;

    #[test]
    fn v1_prepare_response_with_one_claim_and_one_device() {
        let device = v1::Device {
            request_names: vec!["r".into()],
            pool_name: "p".into(),
            device_name: "d".into(),
            cdi_device_ids: vec!["c".into()],
            share_id: Some("s".into()),
        };
        let response = v1::NodePrepareResourcesResponse {
            claims: BTreeMap::from([(
                "u".into(),
                v1::NodePrepareResourceResponse {
                    devices: vec![device],
                    error: String::new(),
                },
            )]),
        };
        let expected = [
            0x0a, 22, // claims = 1: one map entry of 22 bytes
            0x0a, 1, b'u', // entry key = 1: the claim uid
            0x12, 17, // entry value = 2: NodePrepareResourceResponse
            0x0a, 15, // devices = 1
            0x0a, 1, b'r', // request_names = 1
            0x12, 1, b'p', // pool_name = 2
            0x1a, 1, b'd', // device_name = 3
            0x22, 1, b'c', // cdi_device_ids = 4
            0x2a, 1, b's', // share_id = 5
        ];
        assert_eq!(response.encode_to_vec(), expected);
    }

    #[test]
    fn v1_errors_are_field_2_when_preparing_and_field_1_when_unpreparing() {
        let prepared = v1::NodePrepareResourceResponse {
            devices: Vec::new(),
            error: "e".into(),
        };
        assert_eq!(prepared.encode_to_vec(), [0x12, 1, b'e']);
        let unprepared = v1::NodeUnprepareResourcesResponse {
            claims: BTreeMap::from([(
                "u".into(),
                v1::NodeUnprepareResourceResponse { error: "e".into() },
            )]),
        };
        assert_eq!(
            unprepared.encode_to_vec(),
            [0x0a, 8, 0x0a, 1, b'u', 0x12, 3, 0x0a, 1, b'e']
        );
    }

    #[test]
    fn v1_claim_is_namespace_uid_name() {
        let claim = v1::Claim {
            namespace: "n".into(),
            uid: "u".into(),
            name: "m".into(),
        };
        let claim_bytes = [0x0a, 1, b'n', 0x12, 1, b'u', 0x1a, 1, b'm'];
        assert_eq!(claim.encode_to_vec(), claim_bytes);
        let prepare = v1::NodePrepareResourcesRequest {
            claims: vec![claim.clone()],
        };
        let mut request_bytes = vec![0x0a, 9];
        request_bytes.extend_from_slice(&claim_bytes);
        assert_eq!(prepare.encode_to_vec(), request_bytes);
        let unprepare = v1::NodeUnprepareResourcesRequest {
            claims: vec![claim],
        };
        assert_eq!(unprepare.encode_to_vec(), request_bytes);
    }

    #[test]
    fn v1beta1_claim_and_device_match_v1_without_share_id() {
        let claim = v1beta1::Claim {
            namespace: "n".into(),
            uid: "u".into(),
            name: "m".into(),
        };
        assert_eq!(
            claim.encode_to_vec(),
            [0x0a, 1, b'n', 0x12, 1, b'u', 0x1a, 1, b'm']
        );
        let response = v1beta1::NodePrepareResourcesResponse {
            claims: BTreeMap::from([(
                "u".into(),
                v1beta1::NodePrepareResourceResponse {
                    devices: vec![v1beta1::Device {
                        request_names: vec!["r".into()],
                        pool_name: "p".into(),
                        device_name: "d".into(),
                        cdi_device_ids: vec!["c".into()],
                    }],
                    error: "x".into(),
                },
            )]),
        };
        let expected = [
            0x0a, 22, // claims = 1
            0x0a, 1, b'u', // key
            0x12, 17, // value
            0x0a, 12, // devices = 1
            0x0a, 1, b'r', 0x12, 1, b'p', 0x1a, 1, b'd', 0x22, 1, b'c', // the device
            0x12, 1, b'x', // error = 2
        ];
        assert_eq!(response.encode_to_vec(), expected);
    }

    #[test]
    fn registration_messages() {
        let info = pluginregistration::PluginInfo {
            r#type: "t".into(),
            name: "n".into(),
            endpoint: "e".into(),
            supported_versions: vec!["a".into(), "b".into()],
        };
        let expected = [
            0x0a, 1, b't', 0x12, 1, b'n', 0x1a, 1, b'e', 0x22, 1, b'a', 0x22, 1, b'b',
        ];
        assert_eq!(info.encode_to_vec(), expected);
        let status = pluginregistration::RegistrationStatus {
            plugin_registered: true,
            error: "x".into(),
        };
        assert_eq!(status.encode_to_vec(), [0x08, 1, 0x12, 1, b'x']);
    }

    #[test]
    fn grpc_paths_carry_the_upstream_packages() {
        use pluginregistration::registration_server::RegistrationServer;
        assert_eq!(
            <RegistrationServer<()> as NamedService>::NAME,
            "pluginregistration.Registration"
        );
        assert_eq!(
            <v1::dra_plugin_server::DraPluginServer<()> as NamedService>::NAME,
            "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
        );
        assert_eq!(
            <v1beta1::dra_plugin_server::DraPluginServer<()> as NamedService>::NAME,
            "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
        );
    }

    #[test]
    fn health_stream_message_and_path() {
        use health_v1alpha1::*;
        let response = NodeWatchResourcesResponse {
            devices: vec![DeviceHealth {
                device: Some(DeviceIdentifier {
                    pool_name: "p".into(),
                    device_name: "d".into(),
                }),
                health: HealthStatus::Unhealthy as i32,
                last_updated_time: 5,
                health_check_timeout_seconds: 6,
                message: "m".into(),
            }],
        };
        let expected = [
            0x0a, 17, // devices = 1: one DeviceHealth of 17 bytes
            0x0a, 6, // device = 1
            0x0a, 1, b'p', // pool_name = 1
            0x12, 1, b'd', // device_name = 2
            0x10, 2, // health = 2: UNHEALTHY
            0x18, 5, // last_updated_time = 3
            0x20, 6, // health_check_timeout_seconds = 4
            0x2a, 1, b'm', // message = 5
        ];
        assert_eq!(response.encode_to_vec(), expected);
        assert_eq!(
            <dra_resource_health_server::DraResourceHealthServer<
                crate::health::HealthServiceV1Alpha1,
            > as NamedService>::NAME,
            "v1alpha1.DRAResourceHealth"
        );
        // v1 is the same contract under another name: the same bytes.
        let v1 = health_v1::NodeWatchResourcesResponse::decode(expected.as_slice()).unwrap();
        assert_eq!(v1.encode_to_vec(), expected);
        assert_eq!(v1.devices[0].message, "m");
        assert_eq!(v1.devices[0].health_check_timeout_seconds, 6);
        assert_eq!(
            <health_v1::dra_resource_health_server::DraResourceHealthServer<
                crate::health::HealthService,
            > as NamedService>::NAME,
            "v1.DRAResourceHealth"
        );
    }

    #[test]
    fn v1_is_advertised_before_v1beta1() {
        assert_eq!(
            SUPPORTED_VERSIONS,
            [
                "v1.DRAPlugin",
                "v1beta1.DRAPlugin",
                "v1.DRAResourceHealth",
                "v1alpha1.DRAResourceHealth"
            ]
        );
        assert_eq!(PLUGIN_TYPE, "DRAPlugin");
    }
}
