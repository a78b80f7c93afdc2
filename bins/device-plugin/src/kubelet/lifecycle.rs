//! One resource's life with the kubelet: serve, register, and start over when the kubelet loses
//! track of us.
//!
//! Each *incarnation* binds a fresh socket (`devinject-<profile>-<unix ms>.sock`), serves the
//! `DevicePlugin` service on it, then registers. It ends when
//! - `kubelet.sock` is created again (the kubelet restarted and forgot every plugin),
//! - our socket file is removed (the kubelet does that on start; so may an operator),
//! - the `ListAndWatch` stream is dropped (the kubelet then marks the devices unhealthy and never
//!   dials back: kubernetes#125501), or
//! - the gRPC server stops (a dead server must not look registered).
//!
//! The old incarnation is torn down (streams ended, server drained, socket removed) before the
//! next one registers, so the kubelet never sees the old stream end after the new registration
//! (the race of kubernetes#121994). Everything is driven by inotify events and gRPC results; the
//! only timers are back-offs after a failed `Register` while `kubelet.sock` exists, and after
//! incarnations that ended within a second of starting.
//!
//! On shutdown the device list is withdrawn: the stream sends an empty list and ends, the server
//! drains, and the socket is removed.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use devinject_kubelet::serve::{self, ServedSocket, SocketError};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tracing::{debug, info, warn};

use crate::advertisement::Advertisement;
use crate::api::v1beta1::device_plugin_server::DevicePluginServer;
use crate::api::KUBELET_SOCKET;
use crate::kubelet::registration;
use crate::kubelet::socket;
use crate::kubelet::watch::DirEvent;
use crate::metrics::PluginMetrics;
use crate::resource::ResourceConfig;
use crate::service::DevicePluginService;

/// Logged each time a resource has registered with the kubelet.
pub const REGISTERED: &str = "registered with the kubelet";

/// How long open calls may take to finish when an incarnation stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// First and last delay between `Register` attempts while `kubelet.sock` exists.
const REGISTER_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(5));
/// An incarnation shorter than this counts as a quick restart and delays the next one.
const QUICK_RESTART: Duration = Duration::from_secs(1);
/// First and last delay after a quick restart.
const RESTART_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Why a resource stopped being served.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// Our socket could not be created.
    #[error("resource {resource}: {source}")]
    Socket {
        /// The extended resource.
        resource: String,
        /// The socket error, naming the path.
        source: SocketError,
    },
    /// The directory watch is gone, so kubelet restarts would go unnoticed.
    #[error("resource {resource}: the device-plugins directory watch stopped")]
    WatchClosed {
        /// The extended resource.
        resource: String,
    },
}

/// Why an incarnation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The daemon is stopping.
    Shutdown,
    /// Start a new incarnation.
    Restart(Restart),
}

/// Why a new incarnation starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restart {
    ServerStopped,
    SocketRemoved,
    StreamLost,
    KubeletRestarted,
}

impl Restart {
    /// What the log says.
    fn text(self) -> &'static str {
        match self {
            Self::ServerStopped => "gRPC server stopped",
            Self::SocketRemoved => "socket removed",
            Self::StreamLost => "ListAndWatch stream lost",
            Self::KubeletRestarted => "kubelet restarted",
        }
    }

    /// The `reason` label of `devinject_device_plugin_reregistrations_total`.
    fn label(self) -> &'static str {
        match self {
            Self::ServerStopped => "server_stopped",
            Self::SocketRemoved => "socket_removed",
            Self::StreamLost => "stream_lost",
            Self::KubeletRestarted => "kubelet_restarted",
        }
    }
}

/// Serves and registers one resource until shutdown.
pub struct Lifecycle {
    resource: Arc<ResourceConfig>,
    kubelet_dir: PathBuf,
    devices: Arc<watch::Sender<Arc<Advertisement>>>,
    events: broadcast::Receiver<DirEvent>,
    shutdown: CancellationToken,
    metrics: PluginMetrics,
}

impl Lifecycle {
    /// A lifecycle for `resource`, whose devices are published on `devices`, registering with
    /// the kubelet in `kubelet_dir`, told about that directory by `events`, stopping when
    /// `shutdown` is cancelled, counting into `metrics`.
    pub fn new(
        resource: Arc<ResourceConfig>,
        kubelet_dir: PathBuf,
        devices: Arc<watch::Sender<Arc<Advertisement>>>,
        events: broadcast::Receiver<DirEvent>,
        shutdown: CancellationToken,
        metrics: PluginMetrics,
    ) -> Self {
        Self {
            resource,
            kubelet_dir,
            devices,
            events,
            shutdown,
            metrics,
        }
    }

    /// Runs incarnations until shutdown (`Ok`) or an error that a new incarnation cannot fix.
    pub async fn run(mut self) -> Result<(), LifecycleError> {
        socket::remove_stale(&self.kubelet_dir, self.resource.profile.as_str()).await;
        let mut last_stamp = 0;
        let mut quick_restarts = 0u32;
        loop {
            // Whatever happened before this incarnation is covered by its fresh registration.
            while let Ok(event) = self.events.try_recv() {
                debug!(resource = %self.resource.resource_name, ?event, "event before incarnation");
            }
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            last_stamp = now.max(last_stamp + 1);
            let started = Instant::now();
            let mut incarnation =
                Incarnation::start(&self, &self.resource.socket_name(last_stamp)).await?;
            let outcome = self.drive(&mut incarnation).await;
            match outcome {
                Ok(Outcome::Shutdown) => {
                    self.devices
                        .send_modify(|current| *current = Arc::new(current.closed()));
                    incarnation.stop(true).await;
                    info!(resource = %self.resource.resource_name, "withdrawn and stopped");
                    return Ok(());
                }
                Ok(Outcome::Restart(reason)) => {
                    info!(resource = %self.resource.resource_name, reason = reason.text(), "registering again");
                    self.metrics
                        .reregistering(&self.resource.resource_name, reason.label());
                    incarnation.stop(false).await;
                }
                Err(err) => {
                    incarnation.stop(false).await;
                    return Err(err);
                }
            }
            if started.elapsed() < QUICK_RESTART {
                quick_restarts += 1;
                let delay = backoff(RESTART_BACKOFF, quick_restarts - 1);
                debug!(resource = %self.resource.resource_name, ?delay, "quick restart, waiting");
                tokio::select! {
                    () = self.shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(delay) => {}
                }
            } else {
                quick_restarts = 0;
            }
        }
    }

    /// Registers, then waits for the reason to start over.
    async fn drive(&mut self, inc: &mut Incarnation) -> Result<Outcome, LifecycleError> {
        let kubelet_socket = self.kubelet_dir.join(KUBELET_SOCKET);
        let mut attempt = 0;
        loop {
            while inc.stream_dropped.try_recv().is_ok() {}
            let register =
                registration::register(&kubelet_socket, &inc.name, &self.resource.resource_name);
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return Ok(Outcome::Shutdown),
                _ = inc.server.stopped() => return Ok(Outcome::Restart(Restart::ServerStopped)),
                result = register => match result {
                    Ok(()) => break,
                    // The kubelet answered and said no: a real problem, say so every time.
                    Err(err @ registration::RegistrationError::Refused { .. }) => {
                        warn!(resource = %self.resource.resource_name, error = %err, "registration refused");
                    }
                    Err(err) if attempt == 0 => {
                        info!(resource = %self.resource.resource_name, error = %err, "kubelet not ready");
                    }
                    Err(err) => {
                        debug!(resource = %self.resource.resource_name, error = %err, "register failed");
                    }
                },
            }
            // Retry when kubelet.sock appears; while it exists but refuses, also after a delay.
            let delay = kubelet_socket
                .exists()
                .then(|| backoff(REGISTER_BACKOFF, attempt));
            attempt += 1;
            let retry_timer = tokio::time::sleep(delay.unwrap_or(Duration::MAX));
            tokio::pin!(retry_timer);
            loop {
                tokio::select! {
                    biased;
                    () = self.shutdown.cancelled() => return Ok(Outcome::Shutdown),
                    _ = inc.server.stopped() => return Ok(Outcome::Restart(Restart::ServerStopped)),
                    event = self.events.recv() => match self.classify(event, inc)? {
                        Some(Happened::KubeletSocketCreated | Happened::Unknown) => break,
                        Some(Happened::OwnSocketRemoved) => return Ok(Outcome::Restart(Restart::SocketRemoved)),
                        None => {}
                    },
                    () = &mut retry_timer, if delay.is_some() => break,
                }
            }
        }
        let registered_kubelet = identity(&kubelet_socket);
        self.metrics.registered(&self.resource.resource_name);
        info!(resource = %self.resource.resource_name, endpoint = %inc.name, "{REGISTERED}");
        loop {
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return Ok(Outcome::Shutdown),
                _ = inc.server.stopped() => return Ok(Outcome::Restart(Restart::ServerStopped)),
                Some(()) = inc.stream_dropped.recv() => {
                    return Ok(Outcome::Restart(Restart::StreamLost));
                }
                event = self.events.recv() => {
                    let socket_gone = || !inc.server.path().exists();
                    let kubelet_new = || identity(&kubelet_socket) != registered_kubelet;
                    let reason = match self.classify(event, inc)? {
                        Some(Happened::OwnSocketRemoved) => Some(Restart::SocketRemoved),
                        // A stale event: the socket we registered with is still there.
                        Some(Happened::KubeletSocketCreated) => kubelet_new().then_some(Restart::KubeletRestarted),
                        Some(Happened::Unknown) if socket_gone() => Some(Restart::SocketRemoved),
                        Some(Happened::Unknown) => kubelet_new().then_some(Restart::KubeletRestarted),
                        None => None,
                    };
                    if let Some(reason) = reason {
                        return Ok(Outcome::Restart(reason));
                    }
                }
            }
        }
    }

    /// What a directory event means for this incarnation; `None` when nothing.
    fn classify(
        &self,
        event: Result<DirEvent, RecvError>,
        inc: &Incarnation,
    ) -> Result<Option<Happened>, LifecycleError> {
        Ok(match event {
            Ok(DirEvent::Created(name)) if name == OsStr::new(KUBELET_SOCKET) => {
                Some(Happened::KubeletSocketCreated)
            }
            Ok(DirEvent::Removed(name)) if name == OsStr::new(&inc.name) => {
                Some(Happened::OwnSocketRemoved)
            }
            Ok(DirEvent::Overflow) | Err(RecvError::Lagged(_)) => Some(Happened::Unknown),
            Ok(_) => None,
            Err(RecvError::Closed) => {
                return Err(LifecycleError::WatchClosed {
                    resource: self.resource.resource_name.clone(),
                })
            }
        })
    }
}

/// What the directory told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Happened {
    KubeletSocketCreated,
    OwnSocketRemoved,
    /// Events were lost: look at the files themselves.
    Unknown,
}

/// One socket, one server, one registration.
struct Incarnation {
    name: String,
    /// The server on our socket: stopping or dropping it removes the socket, if it is still ours.
    server: ServedSocket,
    stop_streams: CancellationToken,
    stream_dropped: mpsc::UnboundedReceiver<()>,
}

impl Incarnation {
    async fn start(lifecycle: &Lifecycle, name: &str) -> Result<Self, LifecycleError> {
        let path = lifecycle.kubelet_dir.join(name);
        let (dropped_tx, stream_dropped) = mpsc::unbounded_channel();
        let stop_streams = CancellationToken::new();
        let service = DevicePluginService::new(
            lifecycle.resource.clone(),
            lifecycle.devices.subscribe(),
            stop_streams.clone(),
            dropped_tx,
        )
        .with_metrics(lifecycle.metrics.clone());
        let routes = Routes::new(DevicePluginServer::new(service));
        let server =
            serve::serve(&path, routes)
                .await
                .map_err(|source| LifecycleError::Socket {
                    resource: lifecycle.resource.resource_name.clone(),
                    source,
                })?;
        Ok(Self {
            name: name.to_owned(),
            server,
            stop_streams,
            stream_dropped,
        })
    }

    /// Stops serving and removes the socket. With `withdraw`, open streams first send the
    /// (already published) empty list and end by themselves; otherwise they end at once.
    async fn stop(self, withdraw: bool) {
        if !withdraw {
            self.stop_streams.cancel();
        }
        let path = self.server.path().to_owned();
        let shutdown = self.server.shutdown();
        tokio::pin!(shutdown);
        tokio::select! {
            outcome = &mut shutdown => {
                if let Err(error) = outcome {
                    warn!(socket = %path.display(), %error, "gRPC server failed");
                }
            }
            () = tokio::time::sleep(DRAIN_TIMEOUT) => {
                warn!(socket = %path.display(), "open calls did not finish in time");
                // Streams end before the server is dropped, which cuts the open calls and
                // removes the socket.
                self.stop_streams.cancel();
            }
        }
    }
}

/// The file's identity, to tell a re-created `kubelet.sock` from the one we registered with.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// `first * 2^n`, at most `last`.
fn backoff((first, last): (Duration, Duration), n: u32) -> Duration {
    first.saturating_mul(1u32 << n.min(16)).min(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let b = (Duration::from_millis(50), Duration::from_secs(5));
        assert_eq!(backoff(b, 0), Duration::from_millis(50));
        assert_eq!(backoff(b, 3), Duration::from_millis(400));
        assert_eq!(backoff(b, 40), Duration::from_secs(5));
    }
}
