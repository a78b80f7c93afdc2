//! `Register` with the kubelet: announce one resource and the socket it is served on.
//!
//! The kubelet checks the version and resource name, then dials the plugin back and starts
//! `ListAndWatch` before it answers, so the plugin's socket must be served before this is called.

use std::path::{Path, PathBuf};
use std::time::Duration;

use devinject_kubelet::serve::{connect, SocketError};

use crate::api::v1beta1::registration_client::RegistrationClient;
use crate::api::v1beta1::RegisterRequest;
use crate::api::VERSION;
use crate::service;

/// How long the kubelet may take to answer `Register` (it dials back for up to 10 s itself).
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Why registration failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The kubelet socket could not be dialled.
    #[error("cannot register {resource}: {source}")]
    Connect {
        /// The extended resource.
        resource: String,
        /// The socket error, naming the path.
        source: SocketError,
    },
    /// The kubelet answered with an error.
    #[error("kubelet at {socket} refused to register {resource}: {message} ({code:?})")]
    Refused {
        /// The extended resource.
        resource: String,
        /// The kubelet socket.
        socket: PathBuf,
        /// The gRPC code.
        code: tonic::Code,
        /// The kubelet's message.
        message: String,
    },
    /// The kubelet did not answer in time.
    #[error("kubelet at {socket} did not answer Register for {resource} within {timeout:?}")]
    Timeout {
        /// The extended resource.
        resource: String,
        /// The kubelet socket.
        socket: PathBuf,
        /// The limit.
        timeout: Duration,
    },
}

/// Registers `resource_name`, served on `endpoint` (a file name in the kubelet's directory),
/// with the kubelet listening on `kubelet_socket`.
pub async fn register(
    kubelet_socket: &Path,
    endpoint: &str,
    resource_name: &str,
) -> Result<(), RegistrationError> {
    let channel = connect(kubelet_socket)
        .await
        .map_err(|source| RegistrationError::Connect {
            resource: resource_name.to_owned(),
            source,
        })?;
    let request = RegisterRequest {
        version: VERSION.to_owned(),
        endpoint: endpoint.to_owned(),
        resource_name: resource_name.to_owned(),
        options: Some(service::options()),
    };
    let mut client = RegistrationClient::new(channel);
    match tokio::time::timeout(REGISTER_TIMEOUT, client.register(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(RegistrationError::Refused {
            resource: resource_name.to_owned(),
            socket: kubelet_socket.to_owned(),
            code: status.code(),
            message: status.message().to_owned(),
        }),
        Err(_) => Err(RegistrationError::Timeout {
            resource: resource_name.to_owned(),
            socket: kubelet_socket.to_owned(),
            timeout: REGISTER_TIMEOUT,
        }),
    }
}
