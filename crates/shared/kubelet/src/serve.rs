//! Serving gRPC on a Unix socket the kubelet dials, and dialling one the same way: what the
//! device plugin and the DRA driver both run their servers with.
//!
//! [`serve`] binds the path by the one rule ([`crate::socket::bind()`]: a socket left by an
//! earlier run replaced, anything else at the path refused and left alone, never followed) and
//! runs a tonic server on it in a task. Every connection is held to the bounds of
//! [`crate::connections`] (a cap, a deadline for the HTTP/2 preface, keepalive) and passes the
//! `:authority` rewriter of [`crate::authority`]: the kubelet's plugin watcher and kubelets
//! before 1.26 name the socket path there, which the HTTP/2 server under tonic refuses.
//!
//! The returned [`ServedSocket`] stops the server and removes the socket file when it is shut
//! down or dropped, but only the file it bound (same device and inode): a server that is replaced
//! at the same path, and stopped after its successor started, leaves the successor's socket.
//! [`connect`] dials a socket as today's kubelet does.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::service::Routes;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

use crate::connections::{self, Connections};
use crate::socket::BindError;

/// Why a socket could not be served or dialled.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The socket could not be bound ([`crate::socket::bind()`]).
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The socket path could not be inspected once bound.
    #[error("cannot inspect socket path {path}: {source}")]
    Inspect {
        /// The socket path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
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
    /// later server bound at the same path. `None` when the file was removed before it could be
    /// looked at (the kubelet empties the device-plugins directory when it starts): then there
    /// is nothing of ours to remove.
    identity: Option<crate::socket::Identity>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<()>>>,
    /// The server's open connections: all closed when it gives up on its open calls (dropped),
    /// which cuts every client connection the `:authority` rewriter still holds.
    connections: Connections,
}

/// Serves `routes` on a Unix socket at `path`, bound by [`crate::socket::bind()`]: a stale
/// socket at `path` is replaced, anything else refused; the parent directory is created (mode
/// [`crate::socket::DIR_MODE`]) when missing. Must be called within a tokio runtime, which runs
/// the server task.
pub async fn serve(path: &Path, routes: Routes) -> Result<ServedSocket> {
    let listener = crate::socket::bind(path)?;
    let identity = match std::fs::symlink_metadata(path) {
        Ok(meta) => Some((meta.dev(), meta.ino())),
        // Removed by someone else since the bind. The server still runs: its owner learns of
        // the removal as it would later (the device plugin watches its directory).
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            debug!(socket = %path.display(), "socket removed as soon as it was bound");
            None
        }
        Err(source) => {
            return Err(SocketError::Inspect {
                path: path.to_owned(),
                source,
            })
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task_path = path.to_owned();
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
    /// as [`Drop`] does (the socket file is removed, the open calls are cut).
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
        let Some(identity) = self.identity else {
            return;
        };
        match crate::socket::remove_if_same(&self.path, identity) {
            Ok(true) => debug!(socket = %self.path.display(), "socket removed"),
            Ok(false) => {
                debug!(socket = %self.path.display(), "socket gone or replaced by another, kept")
            }
            Err(error) => warn!(%error, "socket not removed"),
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

/// A gRPC channel over the Unix socket at `path`, as the kubelet dials a plugin: connected once
/// (no reconnects: a lost connection is for the caller to handle), with `localhost` as the
/// authority.
pub async fn connect(path: &Path) -> Result<Channel> {
    crate::authority::connect(path)
        .await
        .map_err(|source| SocketError::Connect {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileTypeExt;

    use std::convert::Infallible;
    use std::future::Future;
    use std::os::unix::fs::PermissionsExt;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use tokio::sync::Notify;
    use tonic::server::NamedService;
    use tonic::{Response, Status};
    use tonic_prost::ProstCodec;

    use super::*;
    use crate::socket::DIR_MODE;

    /// A gRPC service with one unary call answering its name, enough to see which server
    /// answers; a `stuck` one never answers and says when it was called.
    #[derive(Clone)]
    struct Named {
        name: &'static str,
        stuck: Option<Arc<Notify>>,
    }

    /// The call's path; the message, both ways, is a protobuf string.
    const NAME_PATH: &str = "/devinject.test.Named/Name";

    type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

    impl NamedService for Named {
        const NAME: &'static str = "devinject.test.Named";
    }

    impl tonic::server::UnaryService<String> for Named {
        type Response = String;
        type Future = Boxed<std::result::Result<Response<String>, Status>>;

        fn call(&mut self, _: tonic::Request<String>) -> Self::Future {
            let named = self.clone();
            Box::pin(async move {
                if let Some(called) = named.stuck {
                    called.notify_one();
                    std::future::pending::<()>().await;
                }
                Ok(Response::new(named.name.to_owned()))
            })
        }
    }

    impl tower::Service<http::Request<tonic::body::Body>> for Named {
        type Response = http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = Boxed<std::result::Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::result::Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
            let named = self.clone();
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::<String, String>::default());
                Ok(grpc.unary(named, request).await)
            })
        }
    }

    fn routes(name: &'static str) -> Routes {
        Routes::new(Named { name, stuck: None })
    }

    /// Asks the server on `channel` its name.
    async fn ask(channel: Channel) -> std::result::Result<String, Status> {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let answer = grpc
            .unary(
                tonic::Request::new(String::new()),
                http::uri::PathAndQuery::from_static(NAME_PATH),
                ProstCodec::<String, String>::default(),
            )
            .await?;
        Ok(answer.into_inner())
    }

    async fn name_at(path: &Path) -> String {
        ask(connect(path).await.unwrap()).await.unwrap()
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
        // A socket nobody serves, as a killed server leaves it.
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
            .expect("the call answered within a second beside 100 idle connections");
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

    #[tokio::test]
    async fn a_shutdown_cut_short_removes_the_socket_and_cuts_the_open_calls() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("dra.sock");
        let called = Arc::new(Notify::new());
        let stuck = Named {
            name: "stuck",
            stuck: Some(Arc::clone(&called)),
        };
        let served = serve(&path, Routes::new(stuck)).await.unwrap();
        let channel = connect(&path).await.unwrap();
        let call = tokio::spawn(ask(channel));
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
