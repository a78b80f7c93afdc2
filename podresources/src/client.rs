//! A blocking pod-resources client for short-lived processes (the `devinject-podresources`
//! helper that the hook and the runtime shim execute).
//!
//! Each call builds a tokio current-thread runtime (no worker threads; the Unix socket
//! connector never touches the blocking pool), runs the whole exchange on it under one
//! deadline, and drops it before returning: when [`PodResourcesClient::pod`] returns, the
//! process has exactly the threads it had before, so a caller that forks afterwards may.
//!
//! The kubelet rate-limits this API (since Kubernetes 1.27, 100 calls/s with a burst of 10,
//! answered with `RESOURCE_EXHAUSTED`): many containers starting at once are retried with a short
//! backoff until the deadline.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use devinject_podresources_protocol::Rpc;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Code;
use tower::service_fn;

use crate::v1::pod_resources_lister_client::PodResourcesListerClient;
use crate::v1::{GetPodResourcesRequest, ListPodResourcesRequest, PodResources};

/// The largest answer accepted: a `List` on a big node is far below this.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// First wait after a rate-limited call; doubled each time, within the deadline.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// Why the kubelet could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// No socket at the configured path.
    #[error("the kubelet's pod-resources socket {path} does not exist: is the kubelet running on this node with its root directory where `pod_resources_socket` in the devinject config says?")]
    SocketMissing {
        /// The configured socket.
        path: PathBuf,
    },
    /// Something other than a socket is at the path.
    #[error("{path} is not a socket: set `pod_resources_socket` in the devinject config to the kubelet's pod-resources socket")]
    NotASocket {
        /// The configured socket.
        path: PathBuf,
    },
    /// The path could not be examined.
    #[error("cannot stat the kubelet's pod-resources socket {path}: {source}")]
    Stat {
        /// The configured socket.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// Connecting failed (the kubelet is not listening, or refused us).
    #[error("cannot connect to the kubelet's pod-resources socket {path}: {message}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The transport error and its causes.
        message: String,
    },
    /// The kubelet answered with an error.
    #[error("the kubelet's pod-resources {rpc} on {path} failed: {code:?}: {message}")]
    Rpc {
        /// The socket.
        path: PathBuf,
        /// `Get` or `List`.
        rpc: Rpc,
        /// The gRPC status code.
        code: Code,
        /// The kubelet's message.
        message: String,
    },
    /// No answer in time.
    #[error("the kubelet's pod-resources API on {path} did not answer within {} ms", timeout.as_millis())]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// The deadline.
        timeout: Duration,
    },
    /// The I/O runtime could not be started.
    #[error("cannot start the I/O runtime for the pod-resources call: {source}")]
    Runtime {
        /// The system error.
        source: io::Error,
    },
}

/// What the kubelet said about one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodLookup {
    /// Every entry with the pod's name and namespace: none when the kubelet does not know the
    /// pod, more than one only while a pod of the same name is being replaced.
    pub entries: Vec<PodResources>,
    /// Which RPC answered.
    pub answered_by: Rpc,
}

/// A client for one kubelet socket.
#[derive(Debug, Clone)]
pub struct PodResourcesClient {
    socket: PathBuf,
    timeout: Duration,
}

impl PodResourcesClient {
    /// A client for the socket at `socket`; every call finishes within `timeout`.
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Self {
        Self {
            socket: socket.into(),
            timeout,
        }
    }

    /// The socket this client dials.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The kubelet's resources for pod `namespace/name`: `Get`, and `List` filtered by name and
    /// namespace when `Get` is not available (before Kubernetes 1.34 it is off by default) or
    /// does not know the pod.
    pub fn pod(&self, namespace: &str, name: &str) -> Result<PodLookup, PodResourcesError> {
        self.block_on(self.lookup(namespace, name))
    }

    /// Every pod the kubelet reports (`List`).
    pub fn list(&self) -> Result<Vec<PodResources>, PodResourcesError> {
        self.block_on(async {
            let mut client = self.connect().await?;
            self.list_all(&mut client).await
        })
    }

    /// Runs `work` on a fresh current-thread runtime under the deadline, then drops the runtime.
    fn block_on<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, PodResourcesError>>,
    ) -> Result<T, PodResourcesError> {
        self.check_socket()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|source| PodResourcesError::Runtime { source })?;
        let result = runtime.block_on(async { tokio::time::timeout(self.timeout, work).await });
        // Dropping the runtime cancels the connection task; nothing outlives the call.
        drop(runtime);
        result.unwrap_or_else(|_| {
            Err(PodResourcesError::Timeout {
                path: self.socket.clone(),
                timeout: self.timeout,
            })
        })
    }

    /// A missing socket is the common misconfiguration: say so before trying to connect.
    fn check_socket(&self) -> Result<(), PodResourcesError> {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::metadata(&self.socket) {
            Ok(m) if m.file_type().is_socket() => Ok(()),
            Ok(_) => Err(PodResourcesError::NotASocket {
                path: self.socket.clone(),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(PodResourcesError::SocketMissing {
                    path: self.socket.clone(),
                })
            }
            Err(source) => Err(PodResourcesError::Stat {
                path: self.socket.clone(),
                source,
            }),
        }
    }

    async fn connect(&self) -> Result<PodResourcesListerClient<Channel>, PodResourcesError> {
        let target = self.socket.clone();
        // The URI is required but unused: the connector decides where to go.
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(service_fn(move |_: Uri| {
                let target = target.clone();
                async move { Ok::<_, io::Error>(TokioIo::new(UnixStream::connect(target).await?)) }
            }))
            .await
            .map_err(|e| PodResourcesError::Connect {
                path: self.socket.clone(),
                message: chain(&e),
            })?;
        Ok(PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES))
    }

    async fn lookup(&self, namespace: &str, name: &str) -> Result<PodLookup, PodResourcesError> {
        let mut client = self.connect().await?;
        let request = GetPodResourcesRequest {
            pod_name: name.to_owned(),
            pod_namespace: namespace.to_owned(),
        };
        let got = retry_rate_limited(|| {
            let mut c = client.clone();
            let r = request.clone();
            async move { c.get(r).await }
        })
        .await;
        match got {
            Ok(response) => {
                if let Some(pod) = response.into_inner().pod_resources {
                    if pod.name == name && pod.namespace == namespace {
                        return Ok(PodLookup {
                            entries: vec![pod],
                            answered_by: Rpc::Get,
                        });
                    }
                }
                tracing::debug!(%namespace, pod = %name, "Get had no matching pod; trying List");
            }
            Err(status) => {
                // Unimplemented (kubelet < 1.27), Unknown "Get method disabled" (gate off) or
                // Unknown "not found": List is the authority in every case.
                tracing::debug!(%namespace, pod = %name, code = ?status.code(), message = status.message(), "Get failed; trying List");
            }
        }
        let all = self.list_all(&mut client).await?;
        Ok(PodLookup {
            entries: all
                .into_iter()
                .filter(|p| p.name == name && p.namespace == namespace)
                .collect(),
            answered_by: Rpc::List,
        })
    }

    async fn list_all(
        &self,
        client: &mut PodResourcesListerClient<Channel>,
    ) -> Result<Vec<PodResources>, PodResourcesError> {
        let listed = retry_rate_limited(|| {
            let mut c = client.clone();
            async move { c.list(ListPodResourcesRequest {}).await }
        })
        .await
        .map_err(|status| PodResourcesError::Rpc {
            path: self.socket.clone(),
            rpc: Rpc::List,
            code: status.code(),
            message: status.message().to_owned(),
        })?;
        Ok(listed.into_inner().pod_resources)
    }
}

/// Calls `call` again while the kubelet answers `RESOURCE_EXHAUSTED`, waiting 10 ms, 20 ms, ...
/// (the caller's deadline ends the loop).
async fn retry_rate_limited<T, F, Fut>(mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut wait = FIRST_BACKOFF;
    loop {
        match call().await {
            Err(status) if status.code() == Code::ResourceExhausted => {
                tracing::debug!(
                    wait_ms = wait.as_millis() as u64,
                    "pod-resources call rate-limited"
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// An error and its causes on one line.
fn chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
