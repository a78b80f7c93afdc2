//! The kubelet device plugin API (v1beta1), generated at build time from our own .proto.
//!
//! See `README.md` in this folder for the upstream version the file matches.

/// Messages, the `Registration` client/server and the `DevicePlugin` client/server.
#[allow(missing_docs, clippy::doc_markdown, clippy::large_enum_variant)]
pub mod v1beta1 {
    tonic::include_proto!("v1beta1");
}

/// The only API version the kubelet accepts.
pub const VERSION: &str = "v1beta1";

/// `Device.health` for a usable device.
pub const HEALTHY: &str = "Healthy";

/// `Device.health` for a device the kubelet must not hand out.
pub const UNHEALTHY: &str = "Unhealthy";

/// The kubelet's registration socket, relative to the device-plugins directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";

#[cfg(test)]
mod tests {
    //! Pins the field numbers and types of the published contract with hand-computed wire bytes
    //! (tag = field number << 3 | wire type; 0 = varint, 2 = length-delimited), so a slip in the
    //! .proto cannot go unnoticed just because both ends of our tests share it.

    use std::collections::BTreeMap;

    use prost::Message;

    use super::v1beta1::*;

    #[test]
    fn register_request() {
        let request = RegisterRequest {
            version: "v".into(),
            endpoint: "e".into(),
            resource_name: "r".into(),
            options: Some(DevicePluginOptions {
                pre_start_required: true,
                get_preferred_allocation_available: true,
            }),
        };
        let expected = [
            0x0a, 1, b'v', 0x12, 1, b'e', 0x1a, 1, b'r', 0x22, 4, 0x08, 1, 0x10, 1,
        ];
        assert_eq!(request.encode_to_vec(), expected);
    }

    #[test]
    fn list_and_watch_response() {
        let response = ListAndWatchResponse {
            devices: vec![Device {
                id: "0".into(),
                health: "H".into(),
                topology: Some(TopologyInfo {
                    nodes: vec![NumaNode { id: 1 }],
                }),
            }],
        };
        let expected = [
            0x0a, 12, 0x0a, 1, b'0', 0x12, 1, b'H', 0x1a, 4, 0x0a, 2, 0x08, 1,
        ];
        assert_eq!(response.encode_to_vec(), expected);
    }

    #[test]
    fn preferred_allocation() {
        let request = PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: vec!["a".into()],
                must_include_device_i_ds: vec!["m".into()],
                allocation_size: 2,
            }],
        };
        let expected = [0x0a, 8, 0x0a, 1, b'a', 0x12, 1, b'm', 0x18, 2];
        assert_eq!(request.encode_to_vec(), expected);
        let response = PreferredAllocationResponse {
            container_responses: vec![ContainerPreferredAllocationResponse {
                device_i_ds: vec!["a".into()],
            }],
        };
        assert_eq!(response.encode_to_vec(), [0x0a, 3, 0x0a, 1, b'a']);
    }

    #[test]
    fn allocate() {
        let request = AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["a".into()],
            }],
        };
        assert_eq!(request.encode_to_vec(), [0x0a, 3, 0x0a, 1, b'a']);
        let response = ContainerAllocateResponse {
            envs: BTreeMap::from([("k".into(), "v".into())]),
            mounts: vec![Mount {
                container_path: "c".into(),
                host_path: "h".into(),
                read_only: true,
            }],
            devices: vec![DeviceSpec {
                container_path: "c".into(),
                host_path: "h".into(),
                permissions: "r".into(),
            }],
            annotations: BTreeMap::from([("a".into(), "b".into())]),
            cdi_devices: vec![CdiDevice { name: "n".into() }],
        };
        let expected = [
            0x0a, 6, 0x0a, 1, b'k', 0x12, 1, b'v', // envs = 1, map entry key 1 / value 2
            0x12, 8, 0x0a, 1, b'c', 0x12, 1, b'h', 0x18, 1, // mounts = 2
            0x1a, 9, 0x0a, 1, b'c', 0x12, 1, b'h', 0x1a, 1, b'r', // devices = 3
            0x22, 6, 0x0a, 1, b'a', 0x12, 1, b'b', // annotations = 4
            0x2a, 3, 0x0a, 1, b'n', // cdi_devices = 5
        ];
        assert_eq!(response.encode_to_vec(), expected);
        let outer = AllocateResponse {
            container_responses: vec![ContainerAllocateResponse::default()],
        };
        assert_eq!(outer.encode_to_vec(), [0x0a, 0]);
    }

    #[test]
    fn pre_start() {
        let request = PreStartContainerRequest {
            devices_ids: vec!["a".into()],
        };
        assert_eq!(request.encode_to_vec(), [0x0a, 1, b'a']);
    }

    #[test]
    fn grpc_paths_use_the_v1beta1_package() {
        use super::v1beta1::device_plugin_server::DevicePluginServer;
        use super::v1beta1::registration_server::RegistrationServer;
        use tonic::server::NamedService;
        assert_eq!(
            <RegistrationServer<()> as NamedService>::NAME,
            "v1beta1.Registration"
        );
        assert_eq!(
            <DevicePluginServer<()> as NamedService>::NAME,
            "v1beta1.DevicePlugin"
        );
    }
}
