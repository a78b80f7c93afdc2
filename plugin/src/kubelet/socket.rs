//! Unix sockets in the device-plugins directory: ours to serve on, the kubelet's to dial.

use std::io;
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;
use tonic::transport::Channel;

/// Why a socket could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Binding our socket failed.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// Dialling a socket failed.
    #[error("cannot connect to {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The transport error.
        source: tonic::transport::Error,
    },
}

/// Listens on `path`, replacing a leftover file of the same name.
pub fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(SocketError::Bind {
                path: path.to_owned(),
                source,
            })
        }
    }
    UnixListener::bind(path).map_err(|source| SocketError::Bind {
        path: path.to_owned(),
        source,
    })
}

/// A gRPC channel over the Unix socket at `path`, connected once (no reconnects: a lost
/// connection means a restart the lifecycle handles).
pub async fn connect(path: &Path) -> Result<Channel, SocketError> {
    devinject_h2_authority::connect(path)
        .await
        .map_err(|source| SocketError::Connect {
            path: path.to_owned(),
            source,
        })
}

/// Removes our socket file; a file already gone is fine.
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
