//! The kubelet's pod-resources API (v1), for checking what the kubelet granted a container: the
//! client the request policy of the hook, the runtime shim and the NRI plugin calls, and
//! `devinject-podresources`, the same call from a shell.
//!
//! - [`v1`]: the messages (and with feature `server` the `PodResourcesLister` server),
//!   generated at build time from our own `src/api/podresources_v1.proto` (see
//!   `src/api/README.md` for the upstream version it matches).
//! - [`client`]: a blocking client for short-lived processes: one pod by name and namespace
//!   through `Get`, falling back to `List`, under one deadline, each call a gRPC unary call of
//!   [`crate::grpc`] (no async runtime, no thread).
//! - [`answer`]: the client's result reduced to what the policy needs about one container, in
//!   the shape of [`crate::answer`]; `devinject-podresources` (bins/podresources) prints it.
//!
//! - `poll` (feature `poll`): `List` read on a schedule off the async thread, each failure
//!   logged once, for the device plugin and the DRA driver.
//!
//! - `testing` (feature `testing`): pods as the kubelet reports them, built from plain values
//!   for the tests of code that reads them.
//!
//! - `server` (feature `server`): the generated server, used by the test kubelet in `tests/`;
//!   nothing in devinject serves this API.

pub mod answer;
pub mod client;
#[cfg(feature = "poll")]
pub mod poll;
#[cfg(feature = "testing")]
pub mod testing;

pub use client::{PodLookup, PodResourcesClient, PodResourcesError, Rpc};

/// The messages, and with feature `server` the `PodResourcesLister` server.
#[allow(missing_docs, clippy::doc_markdown)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/v1.rs"));
}

#[cfg(test)]
mod tests {
    //! Pins the field numbers and types we rely on with hand-computed wire bytes (tag = field
    //! number << 3 | wire type; 0 = varint, 2 = length-delimited), so a slip in the .proto
    //! cannot hide behind a test server that shares it.

    use prost::Message;

    use super::v1::*;

    #[test]
    fn pod_resources_with_devices() {
        let pod = PodResources {
            name: "p".into(),
            namespace: "n".into(),
            containers: vec![ContainerResources {
                name: "c".into(),
                devices: vec![ContainerDevices {
                    resource_name: "r".into(),
                    device_ids: vec!["0".into(), "1".into()],
                    topology: Some(TopologyInfo {
                        nodes: vec![NumaNode { id: 1 }],
                    }),
                }],
                cpu_ids: vec![3],
                memory: vec![],
                dynamic_resources: vec![],
            }],
        };
        let expected = [
            0x0a, 1, b'p', // name = 1
            0x12, 1, b'n', // namespace = 2
            0x1a, 23, // containers = 3
            0x0a, 1, b'c', // ContainerResources.name = 1
            0x12, 15, // devices = 2
            0x0a, 1, b'r', // resource_name = 1
            0x12, 1, b'0', 0x12, 1, b'1', // device_ids = 2
            0x1a, 4, 0x0a, 2, 0x08, 1, // topology = 3 { nodes = 1 { ID = 1 } }
            0x1a, 1, 3, // cpu_ids = 3, packed
        ];
        assert_eq!(pod.encode_to_vec(), expected);
        let list = ListPodResourcesResponse {
            pod_resources: vec![PodResources::default()],
        };
        assert_eq!(list.encode_to_vec(), [0x0a, 0]);
    }

    #[test]
    fn get_request_and_response() {
        let request = GetPodResourcesRequest {
            pod_name: "p".into(),
            pod_namespace: "n".into(),
        };
        assert_eq!(request.encode_to_vec(), [0x0a, 1, b'p', 0x12, 1, b'n']);
        let response = GetPodResourcesResponse {
            pod_resources: Some(PodResources {
                name: "p".into(),
                ..Default::default()
            }),
        };
        assert_eq!(response.encode_to_vec(), [0x0a, 3, 0x0a, 1, b'p']);
    }

    #[test]
    fn memory_and_dynamic_resources() {
        let c = ContainerResources {
            memory: vec![ContainerMemory {
                memory_type: "m".into(),
                size: 2,
                topology: None,
            }],
            dynamic_resources: vec![DynamicResource {
                claim_name: "c".into(),
                claim_namespace: "n".into(),
                claim_resources: vec![ClaimResource {
                    cdi_devices: vec![CdiDevice { name: "d".into() }],
                    driver_name: "r".into(),
                    pool_name: "p".into(),
                    device_name: "v".into(),
                    share_id: Some("s".into()),
                }],
            }],
            ..Default::default()
        };
        let expected = [
            0x22, 5, 0x0a, 1, b'm', 0x10, 2, // memory = 4 { memory_type = 1, size = 2 }
            0x2a, 25, // dynamic_resources = 5
            0x12, 1, b'c', 0x1a, 1, b'n', // claim_name = 2, claim_namespace = 3
            0x22, 17, // claim_resources = 4
            0x0a, 3, 0x0a, 1, b'd', // cdi_devices = 1 { name = 1 }
            0x12, 1, b'r', 0x1a, 1, b'p', 0x22, 1, b'v', 0x2a, 1, b's', // 2, 3, 4, 5
        ];
        assert_eq!(c.encode_to_vec(), expected);
    }

    #[test]
    fn allocatable_resources() {
        let response = AllocatableResourcesResponse {
            devices: vec![ContainerDevices::default()],
            cpu_ids: vec![1],
            memory: vec![ContainerMemory::default()],
        };
        assert_eq!(response.encode_to_vec(), [0x0a, 0, 0x12, 1, 1, 0x1a, 0]);
    }

    /// The client's method paths are the generated server's (built with feature `server`,
    /// which the workspace's tests turn on).
    #[cfg(feature = "server")]
    #[test]
    fn grpc_paths_use_the_v1_package() {
        use super::v1::pod_resources_lister_server::PodResourcesListerServer;
        use crate::pod_resources::client::method;
        use crate::pod_resources::Rpc;
        use tonic::server::NamedService;
        let service = <PodResourcesListerServer<()> as NamedService>::NAME;
        assert_eq!(service, "v1.PodResourcesLister");
        assert_eq!(method(Rpc::Get), format!("/{service}/Get"));
        assert_eq!(method(Rpc::List), format!("/{service}/List"));
    }
}
