//! The kubelet's side of the device plugin protocol, enough to drive a plugin through
//! registration, `ListAndWatch`, `Allocate`, `GetPreferredAllocation` and kubelet restarts.
//!
//! Like the kubelet, `Register` checks the version and resource name, then synchronously dials
//! the plugin's socket, calls `GetDevicePluginOptions` and opens one `ListAndWatch` stream
//! before it answers. Each accepted registration is handed to the test as a [`Registration`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use devinject_device_plugin::api::v1beta1::device_plugin_client::DevicePluginClient;
use devinject_device_plugin::api::v1beta1::registration_server::{
    Registration as RegistrationApi, RegistrationServer,
};
use devinject_device_plugin::api::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, DevicePluginOptions, Empty, ListAndWatchResponse,
    RegisterRequest,
};
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Request, Response, Status, Streaming};
use tower::service_fn;

use super::host::sockets;
use super::within;

/// One plugin registration, with the connection the kubelet keeps to it.
pub struct Registration {
    /// What the plugin sent.
    pub request: RegisterRequest,
    /// What `GetDevicePluginOptions` answered.
    pub options: DevicePluginOptions,
    /// A client on the plugin's socket.
    pub client: DevicePluginClient<Channel>,
    /// The `ListAndWatch` stream.
    pub stream: Streaming<ListAndWatchResponse>,
    /// When the registration arrived.
    pub at: Instant,
}

/// `(id, health, NUMA nodes)` of each device in a `ListAndWatch` message.
pub type DeviceList = Vec<(String, String, Vec<i64>)>;

/// A `ListAndWatch` message as a plain list.
pub fn device_list(response: &ListAndWatchResponse) -> DeviceList {
    response
        .devices
        .iter()
        .map(|d| {
            (
                d.id.clone(),
                d.health.clone(),
                d.topology
                    .as_ref()
                    .map(|t| t.nodes.iter().map(|n| n.id).collect())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// `(id, health)` pairs of a device list.
pub fn health(list: &DeviceList) -> Vec<(&str, &str)> {
    list.iter()
        .map(|(id, health, _)| (id.as_str(), health.as_str()))
        .collect()
}

impl Registration {
    /// The next `ListAndWatch` message; `None` when the stream ended cleanly.
    pub async fn next_list(&mut self, limit: Duration) -> Option<DeviceList> {
        within(limit, "a ListAndWatch message", self.stream.message())
            .await
            .unwrap_or_else(|status| panic!("ListAndWatch failed: {status}"))
            .map(|r| device_list(&r))
    }

    /// Reads messages until one satisfies `done`, which it returns.
    pub async fn wait_list(
        &mut self,
        limit: Duration,
        what: &str,
        done: impl Fn(&DeviceList) -> bool,
    ) -> DeviceList {
        within(limit, what, async {
            loop {
                match self.stream.message().await {
                    Ok(Some(r)) => {
                        let list = device_list(&r);
                        if done(&list) {
                            return list;
                        }
                    }
                    Ok(None) => panic!("ListAndWatch ended while waiting for {what}"),
                    Err(status) => panic!("ListAndWatch failed while waiting for {what}: {status}"),
                }
            }
        })
        .await
    }
}

struct KubeletService {
    dir: PathBuf,
    registrations: mpsc::UnboundedSender<Registration>,
}

#[tonic::async_trait]
impl RegistrationApi for KubeletService {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let request = request.into_inner();
        if request.version != "v1beta1" {
            return Err(Status::invalid_argument(format!(
                "unsupported version {:?}",
                request.version
            )));
        }
        if !request.resource_name.contains('/')
            || request.resource_name.starts_with("kubernetes.io/")
        {
            return Err(Status::invalid_argument(format!(
                "invalid extended resource name {:?}",
                request.resource_name
            )));
        }
        let channel = connect(&self.dir.join(&request.endpoint))
            .await
            .map_err(|e| Status::unavailable(format!("dial {}: {e}", request.endpoint)))?;
        let mut client = DevicePluginClient::new(channel);
        let options = client
            .get_device_plugin_options(Empty {})
            .await?
            .into_inner();
        let stream = client.list_and_watch(Empty {}).await?.into_inner();
        let registration = Registration {
            request,
            options,
            client,
            stream,
            at: Instant::now(),
        };
        // A test that stopped listening does not care.
        let _ = self.registrations.send(registration);
        Ok(Response::new(Empty {}))
    }
}

/// Dials a Unix socket as a gRPC channel (the URI is a placeholder; the kubelet uses
/// `localhost` as authority too).
pub async fn connect(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_owned();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}

/// A running test kubelet.
pub struct FakeKubelet {
    dir: PathBuf,
    sender: mpsc::UnboundedSender<Registration>,
    registrations: mpsc::UnboundedReceiver<Registration>,
    server: Option<JoinHandle<()>>,
}

impl FakeKubelet {
    /// Serves `Registration` on `<dir>/kubelet.sock`.
    pub fn start(dir: &Path) -> Self {
        let (sender, registrations) = mpsc::unbounded_channel();
        let mut kubelet = Self {
            dir: dir.to_owned(),
            sender,
            registrations,
            server: None,
        };
        kubelet.serve();
        kubelet
    }

    fn serve(&mut self) {
        let socket = self.dir.join("kubelet.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)
            .unwrap_or_else(|e| panic!("bind {}: {e}", socket.display()));
        let service = KubeletService {
            dir: self.dir.clone(),
            registrations: self.sender.clone(),
        };
        self.server = Some(tokio::spawn(async move {
            let _ = Server::builder()
                .add_service(RegistrationServer::new(service))
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await;
        }));
    }

    /// The next registration, within `limit`.
    pub async fn next_registration(&mut self, limit: Duration) -> Registration {
        within(limit, "a plugin registration", self.registrations.recv())
            .await
            .expect("registration channel closed")
    }

    /// The next registration whose endpoint is not `old`, skipping others.
    pub async fn next_registration_not_on(&mut self, old: &str, limit: Duration) -> Registration {
        within(limit, "a registration on a new socket", async {
            loop {
                let r = self
                    .registrations
                    .recv()
                    .await
                    .expect("registration channel closed");
                if r.request.endpoint != old {
                    return r;
                }
            }
        })
        .await
    }

    /// Registrations already received and not yet taken.
    pub fn pending(&mut self) -> Vec<Registration> {
        let mut out = Vec::new();
        while let Ok(r) = self.registrations.try_recv() {
            out.push(r);
        }
        out
    }

    /// Stops serving, as a dying kubelet does (`kubelet.sock` stays until the next start).
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }

    /// A kubelet restart: stop, delete every socket in the directory (the kubelet's start-up
    /// does that, plugin sockets included), then serve a new `kubelet.sock`.
    pub fn restart(&mut self) {
        self.stop();
        for name in sockets(&self.dir) {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        self.serve();
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An `Allocate` request for one container asking for `ids`.
pub fn allocate_request(ids: &[&str]) -> AllocateRequest {
    AllocateRequest {
        container_requests: vec![ContainerAllocateRequest {
            devices_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        }],
    }
}

/// Helper for tests: a map from string pairs.
pub fn string_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
