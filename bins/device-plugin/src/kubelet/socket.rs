//! Unix sockets in the device-plugins directory: ours to serve on, the kubelet's to dial.

use std::io;
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;
use tonic::transport::Channel;

/// Why a socket could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Binding our socket failed ([`devinject_kubelet::socket::bind()`]).
    #[error(transparent)]
    Bind(#[from] devinject_kubelet::socket::BindError),
    /// Dialling a socket failed.
    #[error("cannot connect to {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The transport error.
        source: tonic::transport::Error,
    },
}

/// Listens on `path` under the rule every kubelet-facing server binds by: a socket left there
/// is replaced, anything else refused and left ([`devinject_kubelet::socket::bind()`]).
pub fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    Ok(devinject_kubelet::socket::bind(path)?)
}

/// A gRPC channel over the Unix socket at `path`, connected once (no reconnects: a lost
/// connection means a restart the lifecycle handles).
pub async fn connect(path: &Path) -> Result<Channel, SocketError> {
    devinject_kubelet::authority::connect(path)
        .await
        .map_err(|source| SocketError::Connect {
            path: path.to_owned(),
            source,
        })
}

/// Removes the sockets of `profile`'s earlier processes from the device-plugins directory `dir`:
/// a plugin killed (SIGKILL, OOM) cannot remove its own, and each one stays beside the kubelet's
/// until the kubelet restarts. Only sockets named as ours (`devinject-<profile>-<stamp>.sock`)
/// that refuse a connection (no process listens on them) are removed; a live one, another
/// profile's or anything that is not a socket is left. Returns how many were removed.
pub async fn remove_stale(dir: &Path, profile: &str) -> usize {
    use std::os::unix::fs::FileTypeExt;

    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let prefix = format!("devinject-{profile}-");
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(stamp) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".sock"))
        else {
            continue;
        };
        if stamp.is_empty() || !stamp.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // Not followed: a link by that name is not ours to judge.
        let is_socket = entry.file_type().is_ok_and(|t| t.is_socket());
        if !is_socket {
            continue;
        }
        let path = entry.path();
        let dial = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            tokio::net::UnixStream::connect(&path),
        )
        .await;
        if let Ok(Err(e)) = dial {
            if e.kind() == io::ErrorKind::ConnectionRefused && remove(&path).is_ok() {
                tracing::info!(socket = %path.display(), "removed the socket of an earlier plugin process");
                removed += 1;
            }
        }
    }
    removed
}

/// Removes our socket file; a file already gone is fine.
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_our_profiles_sockets_nobody_listens_on_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n);
        // A killed process's socket: bound, never unlinked, nobody listening.
        drop(std::os::unix::net::UnixListener::bind(path("devinject-demo-1.sock")).unwrap());
        let _live = std::os::unix::net::UnixListener::bind(path("devinject-demo-2.sock")).unwrap();
        drop(std::os::unix::net::UnixListener::bind(path("devinject-kvm-3.sock")).unwrap());
        drop(std::os::unix::net::UnixListener::bind(path("kubelet.sock")).unwrap());
        std::fs::write(path("devinject-demo-4.sock"), "").unwrap();
        assert_eq!(remove_stale(dir.path(), "demo").await, 1);
        for (name, there) in [
            ("devinject-demo-1.sock", false),
            ("devinject-demo-2.sock", true),
            ("devinject-kvm-3.sock", true),
            ("kubelet.sock", true),
            ("devinject-demo-4.sock", true),
        ] {
            assert_eq!(path(name).exists(), there, "{name}");
        }
    }
}
