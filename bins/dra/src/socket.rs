//! Serving gRPC on a Unix socket the kubelet dials, and dialling one the same way.
//!
//! [`serve`] prepares the path, binds it and runs a tonic server on it in a task; the returned
//! [`ServedSocket`] stops the server and removes the socket file when it is shut down or dropped.
//!
//! # Security
//!
//! The socket lives in a directory the kubelet shares with other plugins (`plugins/`,
//! `plugins_registry/`), and the driver runs as root: it is bound by
//! [`devinject_kubelet::socket::bind()`], the rule the device plugin binds under too (a leftover
//! socket replaced, anything else at the path refused and left alone, never followed). Its
//! connections are held to the bounds of [`devinject_kubelet::connections`], as the device
//! plugin's are: a cap on open connections, a deadline for the HTTP/2 preface, keepalive.
//!
//! # `:authority` rewriting
//!
//! The kubelet's plugin watcher (1.36 included) dials the registration socket with its path as
//! the HTTP/2 `:authority`, which the `h2` crate under tonic answers with
//! `RST_STREAM(PROTOCOL_ERROR)`: the kubelet then never registers the driver (seen on a real
//! 1.36 kubelet). Every connection therefore passes `devinject_kubelet::authority`'s rewriter, the one
//! the device plugin uses, which makes it `localhost`.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use devinject_kubelet::connections::{self, Connections};
pub use devinject_kubelet::socket::{BindError, DIR_MODE};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::service::Routes;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

/// Why a socket could not be served or dialled.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The socket could not be bound ([`devinject_kubelet::socket::bind()`]).
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The socket path could not be inspected once bound.
    #[error("cannot inspect socket path {path}: {source}")]
    Inspect {
        /// The socket path.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// The gRPC server on the socket failed.
    #[error("gRPC server on {path} failed: {source}")]
    Serve {
        /// The socket path.
        path: PathBuf,
        /// The transport error.
        source: tonic::transport::Error,
    },
    /// The server task panicked or was cancelled.
    #[error("gRPC server task on {path} ended abnormally: {source}")]
    Task {
        /// The socket path.
        path: PathBuf,
        /// The task's failure.
        source: tokio::task::JoinError,
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

/// A `Result` with a [`SocketError`].
pub type Result<T, E = SocketError> = std::result::Result<T, E>;

/// A gRPC server running on a Unix socket. Dropping it stops accepting connections and removes
/// the socket file at once; [`ServedSocket::shutdown`] also waits for the open calls to finish.
///
/// Calls still open when the handle is dropped are cut: their connections are closed by the
/// `:authority` rewriter that holds them, so a client gets an error rather than waiting on a
/// call nobody will answer.
#[derive(Debug)]
pub struct ServedSocket {
    path: PathBuf,
    /// Device and inode of the socket we bound: only that file is removed, never a socket a
    /// later server bound at the same path.
    identity: (u64, u64),
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<()>>>,
    /// The server's open connections: all closed when it gives up on its open calls (dropped),
    /// which cuts every client connection the `:authority` rewriter still holds.
    connections: Connections,
}

/// Serves `routes` on a Unix socket at `path`. A stale socket at `path` is replaced; the parent
/// directory is created (mode [`DIR_MODE`]) when missing. Must be called within a tokio
/// runtime, which runs the server task.
pub async fn serve(path: &Path, routes: Routes) -> Result<ServedSocket> {
    let listener = devinject_kubelet::socket::bind(path)?;
    let identity = std::fs::symlink_metadata(path)
        .map(|meta| (meta.dev(), meta.ino()))
        .map_err(|source| SocketError::Inspect {
            path: path.to_owned(),
            source,
        })?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task_path = path.to_owned();
    // The kubelet's plugin watcher (grpc-go) sends the socket path as `:authority`, which the
    // HTTP/2 server under tonic refuses: every connection passes the rewriter that makes it
    // `localhost`, within the bounds every kubelet-facing server holds its connections to, as
    // the device plugin's does.
    let limits = connections::Limits::default();
    let router = connections::server(&limits).add_routes(routes);
    let (incoming, connections) = connections::incoming(listener, limits);
    let task = tokio::spawn(async move {
        // A dropped sender stops the server as a sent signal does.
        let signal = async {
            let _ = stopped.await;
        };
        router
            .serve_with_incoming_shutdown(incoming, signal)
            .await
            .map_err(|source| SocketError::Serve {
                path: task_path,
                source,
            })
    });
    info!(socket = %path.display(), "serving");
    Ok(ServedSocket {
        path: path.to_owned(),
        identity,
        stop: Some(stop),
        task: Some(task),
        connections,
    })
}

impl ServedSocket {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits until the server stops by itself, which it only does on failure: a supervisor
    /// selects on this (it is cancel safe) to notice a dead server. `Ok` once it has already
    /// been waited for.
    pub async fn stopped(&mut self) -> Result<()> {
        match self.task.as_mut() {
            Some(task) => {
                let outcome = task.await;
                self.task = None;
                self.outcome(outcome)
            }
            None => Ok(()),
        }
    }

    /// Stops accepting connections, waits for open calls to finish and removes the socket file.
    /// The wait is unbounded: bound it with `tokio::time::timeout`, whose expiry drops the handle
    /// as [`Drop`] does (the socket file is removed, the open calls are left to finish).
    pub async fn shutdown(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            // The server may already have stopped by itself; the task tells how.
            let _ = stop.send(());
        }
        // The task stays in `self` while it drains, so a dropped shutdown aborts it.
        self.stopped().await
        // Dropping `self` removes the socket file.
    }

    fn outcome(&self, joined: Result<Result<()>, tokio::task::JoinError>) -> Result<()> {
        joined.map_err(|source| SocketError::Task {
            path: self.path.clone(),
            source,
        })?
    }

    /// Removes the socket file if it is still the one we bound.
    fn remove_file(&self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta)
                if meta.file_type().is_socket() && (meta.dev(), meta.ino()) == self.identity =>
            {
                match std::fs::remove_file(&self.path) {
                    Ok(()) => debug!(socket = %self.path.display(), "socket removed"),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(error) => {
                        warn!(socket = %self.path.display(), %error, "cannot remove socket")
                    }
                }
            }
            Ok(_) => debug!(socket = %self.path.display(), "socket replaced by another, kept"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(error) => warn!(socket = %self.path.display(), %error, "cannot inspect socket"),
        }
    }
}

impl Drop for ServedSocket {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            // Nobody waits for the drain any more.
            task.abort();
        }
        self.connections.close_all();
        self.remove_file();
    }
}

/// A gRPC channel over the Unix socket at `path`, as the kubelet dials a plugin: connected once,
/// with `localhost` as the authority.
pub async fn connect(path: &Path) -> Result<Channel> {
    devinject_kubelet::authority::connect(path)
        .await
        .map_err(|source| SocketError::Connect {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;
    use crate::api::pluginregistration::registration_client::RegistrationClient;
    use crate::api::pluginregistration::registration_server::{Registration, RegistrationServer};
    use crate::api::pluginregistration::{
        InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    };
    use tonic::{Request, Response, Status};

    /// A `Registration` service answering a fixed name: enough to see which server answers.
    struct Named(&'static str);

    #[tonic::async_trait]
    impl Registration for Named {
        async fn get_info(
            &self,
            _: Request<InfoRequest>,
        ) -> std::result::Result<Response<PluginInfo>, Status> {
            Ok(Response::new(PluginInfo {
                name: self.0.into(),
                ..PluginInfo::default()
            }))
        }

        async fn notify_registration_status(
            &self,
            _: Request<RegistrationStatus>,
        ) -> std::result::Result<Response<RegistrationStatusResponse>, Status> {
            Ok(Response::new(RegistrationStatusResponse {}))
        }
    }

    fn routes(name: &'static str) -> Routes {
        Routes::new(RegistrationServer::new(Named(name)))
    }

    async fn name_at(path: &Path) -> String {
        let channel = connect(path).await.unwrap();
        RegistrationClient::new(channel)
            .get_info(InfoRequest {})
            .await
            .unwrap()
            .into_inner()
            .name
    }

    #[tokio::test]
    async fn serves_in_a_new_directory_and_removes_the_socket_on_shutdown() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("plugins").join("devinject.io");
        let path = dir.join("dra.sock");
        let served = serve(&path, routes("first")).await.unwrap();
        assert_eq!(served.path(), path);
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !DIR_MODE, 0, "mode {mode:o} grants more than 0750");
        assert_eq!(name_at(&path).await, "first");
        served.shutdown().await.unwrap();
        assert!(
            std::fs::symlink_metadata(&path).is_err(),
            "socket left behind"
        );
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("dra.sock");
        // A socket nobody serves, as a killed driver leaves it.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_socket());
        let served = serve(&path, routes("fresh")).await.unwrap();
        assert_eq!(name_at(&path).await, "fresh");
        drop(served);
        assert!(
            std::fs::symlink_metadata(&path).is_err(),
            "drop kept the socket"
        );
    }

    #[tokio::test]
    async fn a_symlink_at_the_socket_path_is_refused_and_left_in_place_by_the_one_rule() {
        let temp = tempfile::tempdir().unwrap();
        let target = temp.path().join("precious");
        std::fs::write(&target, "keep me").unwrap();
        let path = temp.path().join("dra.sock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = serve(&path, routes("x")).await.unwrap_err();
        assert!(
            matches!(
                err,
                SocketError::Bind(BindError::NotASocket {
                    kind: "symbolic link",
                    ..
                })
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("remove it yourself"), "{text}");
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    }

    #[tokio::test]
    async fn dropping_an_old_server_keeps_the_socket_of_its_successor() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("dra.sock");
        let old = serve(&path, routes("old")).await.unwrap();
        let new = serve(&path, routes("new")).await.unwrap();
        drop(old);
        assert_eq!(name_at(&path).await, "new");
        new.shutdown().await.unwrap();
        assert!(std::fs::symlink_metadata(&path).is_err());
    }

    /// What the kubelet's call may take whatever else is open on the socket. The behaviour is
    /// itself a deadline: the kubelet gives up on a plugin call after its own timeout.
    const ANSWER_WITHIN: Duration = Duration::from_secs(1);

    /// `n` connections to `path` that send nothing.
    async fn idle(path: &Path, n: usize) -> Vec<tokio::net::UnixStream> {
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(tokio::net::UnixStream::connect(path).await.unwrap());
        }
        held
    }

    #[tokio::test]
    async fn a_call_behind_idle_connections_is_answered_and_the_server_holds_the_cap() {
        let cap = connections::Limits::default().connections;
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("dra.sock");
        let served = serve(&path, routes("answered")).await.unwrap();
        let flood = idle(&path, 100).await;
        let started = std::time::Instant::now();
        let name = tokio::time::timeout(ANSWER_WITHIN, name_at(&path))
            .await
            .expect("GetInfo answered within a second beside 100 idle connections");
        let took = started.elapsed();
        assert_eq!(name, "answered");
        let held = devinject_testkit::sockets::held_at_path(&path);
        assert!(
            held <= cap,
            "{held} connections held for {} idle ones and a call, the cap is {cap} (answered in {took:?})",
            flood.len()
        );
        drop(flood);
        served.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_after_the_preface_deadline() {
        use tokio::io::AsyncReadExt;
        let deadline = connections::Limits::default().preface;
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("dra.sock");
        let served = serve(&path, routes("x")).await.unwrap();
        let mut silent = tokio::net::UnixStream::connect(&path).await.unwrap();
        let started = std::time::Instant::now();
        // What the server sends first (its SETTINGS) is read and dropped; the end is the close.
        let mut sink = Vec::new();
        let closed = tokio::time::timeout(deadline * 5, silent.read_to_end(&mut sink)).await;
        assert!(
            closed.is_ok(),
            "a connection that sent nothing still open {:?} after the accept",
            started.elapsed()
        );
        assert!(
            started.elapsed() >= deadline,
            "closed after {:?}, before the deadline",
            started.elapsed()
        );
        served.shutdown().await.unwrap();
    }

    /// A `Registration` service whose `GetInfo` never answers, and says when it was called.
    struct Stuck(Arc<Notify>);

    #[tonic::async_trait]
    impl Registration for Stuck {
        async fn get_info(
            &self,
            _: Request<InfoRequest>,
        ) -> std::result::Result<Response<PluginInfo>, Status> {
            self.0.notify_one();
            std::future::pending().await
        }

        async fn notify_registration_status(
            &self,
            _: Request<RegistrationStatus>,
        ) -> std::result::Result<Response<RegistrationStatusResponse>, Status> {
            Ok(Response::new(RegistrationStatusResponse {}))
        }
    }

    #[tokio::test]
    async fn a_shutdown_cut_short_removes_the_socket_and_cuts_the_open_calls() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("dra.sock");
        let called = Arc::new(Notify::new());
        let routes = Routes::new(RegistrationServer::new(Stuck(Arc::clone(&called))));
        let served = serve(&path, routes).await.unwrap();
        let mut client = RegistrationClient::new(connect(&path).await.unwrap());
        let call = tokio::spawn(async move { client.get_info(InfoRequest {}).await });
        called.notified().await;
        // The call never ends, so the drain cannot finish: only the timeout ends the wait.
        let cut = tokio::time::timeout(Duration::from_millis(50), served.shutdown()).await;
        assert!(cut.is_err(), "shutdown finished although a call was open");
        assert!(
            std::fs::symlink_metadata(&path).is_err(),
            "socket left behind"
        );
        // Abandoned, the call's connection is cut: the client gets an error, not a hang.
        let answer = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the abandoned call ends")
            .unwrap();
        assert!(answer.is_err(), "the stuck call got an answer: {answer:?}");
    }
}
