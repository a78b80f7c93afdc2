//! A blocking pod-resources client for short-lived processes: the hook and the runtime shim
//! call it in-process for every Kubernetes container that asks for devices.
//!
//! Each call is one gRPC unary call on a connection of its own ([`crate::grpc`]: no
//! async runtime, no thread, nothing left when it returns), all of a lookup under one
//! deadline. tonic did the same through a tokio runtime per call, at three times the CPU
//! (docs/benchmarks.md, section 6), which the policy's 1 ms budget cannot pay.
//!
//! The kubelet rate-limits this API (since Kubernetes 1.27, 100 calls/s with a burst of 10,
//! answered with `RESOURCE_EXHAUSTED`): many containers starting at once are retried with a short
//! backoff until the deadline.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::answer::Rpc;
pub use crate::grpc::Code;
use crate::grpc::{Call, CallError};
use prost::Message;

use crate::pod_resources::v1::{
    GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};

/// The largest answer accepted: a `List` on a big node is far below this.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// First wait after a rate-limited call; doubled each time, within the deadline.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// The gRPC method path of `rpc`.
pub(crate) fn method(rpc: Rpc) -> &'static str {
    match rpc {
        Rpc::Get => "/v1.PodResourcesLister/Get",
        Rpc::List => "/v1.PodResourcesLister/List",
    }
}

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
    /// The kubelet's answer broke the protocol, or was too large.
    #[error("the kubelet's pod-resources {rpc} on {path} gave no usable answer: {message}")]
    Answer {
        /// The socket.
        path: PathBuf,
        /// `Get` or `List`.
        rpc: Rpc,
        /// What was wrong with it.
        message: String,
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
        self.check_socket()?;
        let deadline = Instant::now() + self.timeout;
        let request = GetPodResourcesRequest {
            pod_name: name.to_owned(),
            pod_namespace: namespace.to_owned(),
        };
        match self.call::<GetPodResourcesResponse>(Rpc::Get, &request.encode_to_vec(), deadline) {
            Ok(response) => {
                if let Some(pod) = response.pod_resources {
                    if pod.name == name && pod.namespace == namespace {
                        return Ok(PodLookup {
                            entries: vec![pod],
                            answered_by: Rpc::Get,
                        });
                    }
                }
                tracing::debug!(%namespace, pod = %name, "Get had no matching pod; trying List");
            }
            // Unimplemented (kubelet < 1.27), Unknown "Get method disabled" (gate off) or
            // Unknown "not found": List is the authority in every case.
            Err(PodResourcesError::Rpc { code, message, .. }) => {
                tracing::debug!(%namespace, pod = %name, ?code, %message, "Get failed; trying List");
            }
            Err(other) => return Err(other),
        }
        let all = self.list_by(deadline)?;
        Ok(PodLookup {
            entries: all
                .into_iter()
                .filter(|p| p.name == name && p.namespace == namespace)
                .collect(),
            answered_by: Rpc::List,
        })
    }

    /// Every pod the kubelet reports (`List`).
    pub fn list(&self) -> Result<Vec<PodResources>, PodResourcesError> {
        self.check_socket()?;
        self.list_by(Instant::now() + self.timeout)
    }

    fn list_by(&self, deadline: Instant) -> Result<Vec<PodResources>, PodResourcesError> {
        let request = ListPodResourcesRequest {}.encode_to_vec();
        Ok(self
            .call::<ListPodResourcesResponse>(Rpc::List, &request, deadline)?
            .pod_resources)
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

    /// Calls `rpc` until it is answered other than `RESOURCE_EXHAUSTED`, waiting 10 ms, 20 ms,
    /// ... in between, all before `deadline`; decodes the answer.
    fn call<T: Message + Default>(
        &self,
        rpc: Rpc,
        request: &[u8],
        deadline: Instant,
    ) -> Result<T, PodResourcesError> {
        let call = Call {
            socket: &self.socket,
            method: method(rpc),
            request,
            deadline,
            max_answer: MAX_MESSAGE_BYTES,
        };
        let mut wait = FIRST_BACKOFF;
        loop {
            match crate::grpc::call(&call) {
                Ok(answer) => {
                    return T::decode(answer.as_slice()).map_err(|e| PodResourcesError::Answer {
                        path: self.socket.clone(),
                        rpc,
                        message: format!("undecodable {rpc} answer: {e}"),
                    })
                }
                Err(CallError::Status {
                    code: Code::ResourceExhausted,
                    ..
                }) if Instant::now() + wait < deadline => {
                    tracing::debug!(
                        wait_ms = wait.as_millis() as u64,
                        "pod-resources call rate-limited"
                    );
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_millis(200));
                }
                Err(e) => return Err(self.error(rpc, e)),
            }
        }
    }

    /// The error for `rpc`'s failure `e`.
    fn error(&self, rpc: Rpc, e: CallError) -> PodResourcesError {
        let path = self.socket.clone();
        match e {
            CallError::Connect { source } => PodResourcesError::Connect {
                path,
                message: source.to_string(),
            },
            CallError::Timeout => PodResourcesError::Timeout {
                path,
                timeout: self.timeout,
            },
            CallError::Status { code, message } => PodResourcesError::Rpc {
                path,
                rpc,
                code,
                message,
            },
            other @ (CallError::Io { .. }
            | CallError::Protocol { .. }
            | CallError::AnswerTooLarge { .. }
            | CallError::RequestTooLarge { .. }) => PodResourcesError::Answer {
                path,
                rpc,
                message: other.to_string(),
            },
        }
    }
}
