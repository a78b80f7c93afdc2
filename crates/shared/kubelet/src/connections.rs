//! The bounds of every connection a kubelet-facing gRPC server serves (the device plugin's socket,
//! the DRA driver's service and registration sockets). The servers run as root, so no client of
//! the socket may hold their descriptors, tasks or memory; [`Limits`] has the numbers and
//! docs/security.md the row:
//! - at most [`Limits::connections`] connections are open at once. The kubelet holds one or two
//!   long-lived connections, each sending the HTTP/2 client preface as soon as it connects. One
//!   more connection beyond the cap closes the oldest that has not sent its preface, so clients
//!   that connect and stay silent never lock the kubelet out, however many they open; when every
//!   open connection has sent it, the new one is refused (closed at once, logged at most once per
//!   [`REFUSAL_LOG_INTERVAL`]): a prefaced connection may be the kubelet's, idle between calls.
//!   What a client has sent by its accept is read at once, so a preface waiting in the socket
//!   counts as sent even before the connection's relay first runs;
//! - the preface must come within [`Limits::preface`] of the accept, else the connection is
//!   closed;
//! - the server pings a connection that has been idle for [`Limits::keepalive_interval`] and
//!   closes it when the ping is not acknowledged within [`Limits::keepalive_timeout`]
//!   ([`server`] sets both on tonic), so a peer that hung holds no place under the cap for long.
//!
//! A server therefore holds at most [`Limits::connections`] descriptors for its clients, each
//! with one relay task and its pipe to tonic ([`PIPE_BYTES`] at most each way). Every accepted
//! connection goes through [`incoming`], which puts it behind the `:authority` rewriter
//! ([`crate::authority`]) as well.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};

use crate::authority::{relay, Proxied, PREFACE};

/// How often a refused connection is logged at most.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// The bytes the pipe between a connection's relay and tonic buffers in each direction.
pub const PIPE_BYTES: usize = 64 << 10;

/// How many connections a server holds and how long they may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; one more closes the oldest without a preface, else is refused.
    pub connections: usize,
    /// From the accept to the client's HTTP/2 preface.
    pub preface: Duration,
    /// Idle time after which the server pings a connection.
    pub keepalive_interval: Duration,
    /// How long the acknowledgement of a ping may take before the connection is closed.
    pub keepalive_timeout: Duration,
}

impl Default for Limits {
    /// 16 connections (the kubelet needs one or two), 2 s for the preface (a gRPC client sends
    /// it with its connect), a ping after 60 s idle and 20 s for its acknowledgement (gRPC's own
    /// default keepalive timeout).
    fn default() -> Self {
        Limits {
            connections: 16,
            preface: Duration::from_secs(2),
            keepalive_interval: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
        }
    }
}

/// A tonic server builder that pings idle connections as `limits` says; add the services and
/// serve [`incoming`] with it.
pub fn server(limits: &Limits) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
}

/// The connections accepted on `listener` within `limits`, each behind the `:authority`
/// rewriter, for tonic's `serve_with_incoming*`; and the handle that closes them. Must be called
/// within a tokio runtime, which runs one relay task per connection.
pub fn incoming(
    listener: UnixListener,
    limits: Limits,
) -> (
    impl Stream<Item = io::Result<Proxied>> + Send + 'static,
    Connections,
) {
    let connections = Connections {
        shared: Arc::new(Shared {
            limits: Limits {
                connections: limits.connections.max(1),
                ..limits
            },
            state: Mutex::default(),
        }),
    };
    let admit = connections.clone();
    let stream = UnixListenerStream::new(listener).filter_map(move |accepted| match accepted {
        Ok(client) => admit.admit(client).map(Ok),
        // tonic logs it and accepts the next.
        Err(e) => Some(Err(e)),
    });
    (stream, connections)
}

/// The connections one server holds open.
#[derive(Debug, Clone)]
pub struct Connections {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    limits: Limits,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Open connections, oldest first; dropping one's sender closes it.
    open: VecDeque<Open>,
    next_id: u64,
    /// When a refusal was last logged, and how many were not logged since.
    refusal_logged: Option<Instant>,
    refusals_unlogged: u64,
}

#[derive(Debug)]
struct Open {
    id: u64,
    prefaced: bool,
    /// Never sent on: dropping it closes the connection.
    _close: oneshot::Sender<()>,
}

impl Connections {
    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Closes every open connection, whatever the server still does with it: a server that
    /// gives up on its open calls (a shutdown cut short) must not leave its clients waiting on a
    /// connection only the relay still holds. Connections accepted later are served.
    pub fn close_all(&self) {
        self.lock().open.clear();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes `client` in under the cap (or refuses it, `None`) and starts its relay.
    fn admit(&self, client: tokio::net::UnixStream) -> Option<Proxied> {
        let preface_by = Instant::now() + self.shared.limits.preface;
        let (client, head) = match sent_by_accept(client) {
            Ok(sent) => sent,
            Err(error) => {
                tracing::debug!(%error, "closing a gRPC connection: reading it failed");
                return None;
            }
        };
        let (close, closed) = oneshot::channel();
        let id = {
            let mut state = self.lock();
            if state.open.len() >= self.shared.limits.connections {
                match state.open.iter().position(|open| !open.prefaced) {
                    Some(oldest) => {
                        state.open.remove(oldest);
                        tracing::debug!(
                            "closing the oldest gRPC connection without a preface to make room"
                        );
                    }
                    None => {
                        state.refused(self.shared.limits.connections, Instant::now());
                        return None;
                    }
                }
            }
            state.next_id += 1;
            let id = state.next_id;
            state.open.push_back(Open {
                id,
                prefaced: head == PREFACE,
                _close: close,
            });
            id
        };
        let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
        let connections = self.clone();
        tokio::spawn(async move {
            let _open = Opened {
                connections: &connections,
                id,
            };
            let prefaced = || {
                if let Some(open) = connections.lock().open.iter_mut().find(|o| o.id == id) {
                    open.prefaced = true;
                }
            };
            tokio::select! {
                // The sender dropped: closed to make room, or all closed.
                _ = closed => {}
                () = relay(client, &head, theirs, preface_by, prefaced) => {}
            }
        });
        Some(Proxied(ours))
    }
}

/// What `client` has sent of its preface by its accept, read without waiting. A server accepts
/// the connections waiting in its backlog one after another before any relay runs (the daemons'
/// runtimes have one thread), so under a flood the kubelet's connection, whose preface comes
/// with its connect, would be the oldest without one and closed for room before its relay
/// read it.
fn sent_by_accept(client: tokio::net::UnixStream) -> io::Result<(tokio::net::UnixStream, Vec<u8>)> {
    // Out of the reactor: a read of a socket just registered waits for its first readiness.
    let mut client = client.into_std()?;
    let mut head = vec![0u8; PREFACE.len()];
    let mut read = 0;
    while read < head.len() {
        match io::Read::read(&mut client, &mut head[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    head.truncate(read);
    Ok((tokio::net::UnixStream::from_std(client)?, head))
}

impl State {
    fn refused(&mut self, cap: usize, now: Instant) {
        if self
            .refusal_logged
            .is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_INTERVAL)
        {
            self.refusals_unlogged += 1;
            return;
        }
        tracing::warn!(
            cap,
            also_refused = self.refusals_unlogged,
            "refusing a gRPC connection: as many as the cap are open, each past its preface"
        );
        self.refusal_logged = Some(now);
        self.refusals_unlogged = 0;
    }
}

/// Takes a connection out of the open ones when its task ends, however it ends.
struct Opened<'a> {
    connections: &'a Connections,
    id: u64,
}

impl Drop for Opened<'_> {
    fn drop(&mut self) {
        let id = self.id;
        self.connections.lock().open.retain(|open| open.id != id);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;
    use tokio::sync::mpsc;

    use super::*;

    /// An empty SETTINGS frame: what a client sends after its preface.
    const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
    /// Far beyond anything these tests wait for, so that they end by themselves.
    const GENEROUS: Duration = Duration::from_secs(10);

    /// Serves `limits` on a socket at `path`: what tonic would serve comes out of the channel.
    fn served(path: &Path, limits: Limits) -> (mpsc::UnboundedReceiver<Proxied>, Connections) {
        let (incoming, connections) = incoming(UnixListener::bind(path).unwrap(), limits);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut incoming = std::pin::pin!(incoming);
            while let Some(conn) = incoming.next().await {
                let _ = tx.send(conn.unwrap());
            }
        });
        (rx, connections)
    }

    /// Connects and sends the preface, which the server side then reads.
    async fn prefaced(
        path: &Path,
        served: &mut mpsc::UnboundedReceiver<Proxied>,
    ) -> (UnixStream, Proxied) {
        let mut client = UnixStream::connect(path).await.unwrap();
        client.write_all(PREFACE).await.unwrap();
        let mut server = served.recv().await.unwrap();
        let mut got = [0u8; 24];
        server.0.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, PREFACE);
        (client, server)
    }

    /// Asserts that the server closes `client` (within [`GENEROUS`]).
    async fn assert_closed(client: &mut UnixStream, what: &str) {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(GENEROUS, client.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{what}: {read:?}");
    }

    /// Asserts that `client`'s frames still reach `server`.
    async fn assert_open(client: &mut UnixStream, server: &mut Proxied, what: &str) {
        let wrote = client.write_all(&SETTINGS).await;
        assert!(wrote.is_ok(), "{what}: {wrote:?}");
        let mut got = [0u8; 9];
        let read = tokio::time::timeout(GENEROUS, server.0.read_exact(&mut got)).await;
        assert!(matches!(read, Ok(Ok(9))), "{what}: {read:?}");
        assert_eq!(got, SETTINGS, "{what}");
    }

    #[tokio::test]
    async fn over_the_cap_the_oldest_without_a_preface_is_closed_else_the_new_one_refused() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("s.sock");
        let limits = Limits {
            connections: 2,
            preface: GENEROUS * 6,
            ..Limits::default()
        };
        let (mut served, connections) = served(&path, limits);
        let (mut a, mut a_server) = prefaced(&path, &mut served).await;
        let mut b = UnixStream::connect(&path).await.unwrap();
        let _b_server = served.recv().await.unwrap();
        // One over the cap: b, the only one without a preface, goes; a, older, stays.
        let mut c = UnixStream::connect(&path).await.unwrap();
        let mut c_server = served.recv().await.unwrap();
        assert_closed(&mut b, "the oldest connection without a preface").await;
        assert_open(
            &mut a,
            &mut a_server,
            "an older connection past its preface",
        )
        .await;
        // Every open connection past its preface: the new one is refused.
        c.write_all(PREFACE).await.unwrap();
        let mut got = [0u8; 24];
        c_server.0.read_exact(&mut got).await.unwrap();
        let mut d = UnixStream::connect(&path).await.unwrap();
        assert_closed(&mut d, "a connection over a cap of prefaced ones").await;
        assert_open(&mut a, &mut a_server, "a, after the refusal").await;
        assert_open(&mut c, &mut c_server, "c, after the refusal").await;
        assert_eq!(connections.open(), 2);
        connections.close_all();
        assert_closed(&mut a, "a, all closed").await;
        assert_closed(&mut c, "c, all closed").await;
    }

    /// The kubelet's connection in the backlog behind and before a flood of silent ones: the
    /// server accepts them all in one go (a current-thread runtime, as the daemons run, gets to
    /// no relay in between), and the one that had sent its preface is not closed for room.
    #[tokio::test]
    async fn a_connection_that_sent_its_preface_before_its_accept_keeps_its_place_in_a_flood() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("s.sock");
        let limits = Limits {
            connections: 4,
            ..Limits::default()
        };
        let (incoming, connections) = incoming(UnixListener::bind(&path).unwrap(), limits);
        let mut incoming = std::pin::pin!(incoming);
        let silent_before: Vec<_> = (0..2)
            .map(|_| std::os::unix::net::UnixStream::connect(&path).unwrap())
            .collect();
        let mut kubelet = std::os::unix::net::UnixStream::connect(&path).unwrap();
        std::io::Write::write_all(&mut kubelet, PREFACE).unwrap();
        let silent_after: Vec<_> = (0..3 * limits.connections)
            .map(|_| std::os::unix::net::UnixStream::connect(&path).unwrap())
            .collect();
        let mut served = Vec::new();
        for _ in 0..silent_before.len() + 1 + silent_after.len() {
            served.push(incoming.next().await.unwrap().unwrap());
        }
        let mut kubelet_server = served.remove(silent_before.len());
        kubelet.set_nonblocking(true).unwrap();
        let mut kubelet = UnixStream::from_std(kubelet).unwrap();
        let mut got = [0u8; 24];
        let read = tokio::time::timeout(GENEROUS, kubelet_server.0.read_exact(&mut got)).await;
        assert!(
            matches!(read, Ok(Ok(24))),
            "the kubelet's preface: {read:?}"
        );
        assert_open(
            &mut kubelet,
            &mut kubelet_server,
            "the kubelet's connection",
        )
        .await;
        assert_eq!(connections.open(), limits.connections);
        drop((silent_before, silent_after));
    }

    #[tokio::test]
    async fn a_connection_without_its_preface_by_the_deadline_is_closed_one_with_it_kept() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("s.sock");
        let limits = Limits {
            preface: Duration::from_millis(300),
            ..Limits::default()
        };
        let (mut served, connections) = served(&path, limits);
        let (mut a, mut a_server) = prefaced(&path, &mut served).await;
        let mut silent = UnixStream::connect(&path).await.unwrap();
        let connected = Instant::now();
        let _silent_server = served.recv().await.unwrap();
        assert_closed(&mut silent, "a connection that sent nothing").await;
        assert!(
            connected.elapsed() >= limits.preface,
            "closed {:?} after its connect, before the deadline",
            connected.elapsed()
        );
        assert_open(
            &mut a,
            &mut a_server,
            "a connection past its preface, past the deadline",
        )
        .await;
        assert_eq!(connections.open(), 1);
    }

    #[tokio::test]
    async fn a_peer_that_never_acknowledges_a_ping_is_closed() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("s.sock");
        let limits = Limits {
            keepalive_interval: Duration::from_millis(200),
            keepalive_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let (incoming, _connections) = incoming(UnixListener::bind(&path).unwrap(), limits);
        let router = server(&limits).add_routes(tonic::service::Routes::default());
        tokio::spawn(router.serve_with_incoming(incoming));
        // A client that speaks HTTP/2 and then hangs: it reads, and acknowledges nothing.
        let mut client = UnixStream::connect(&path).await.unwrap();
        client.write_all(PREFACE).await.unwrap();
        client.write_all(&SETTINGS).await.unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(GENEROUS, client.read_to_end(&mut got)).await;
        assert!(
            read.is_ok(),
            "a peer that acknowledged no ping still open after {GENEROUS:?}"
        );
        // The frames the server sent: a PING (type 6) among them.
        let mut kinds = Vec::new();
        let mut rest = &got[..];
        while rest.len() >= 9 {
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            kinds.push(rest[3]);
            rest = rest.get(9 + len..).unwrap_or_default();
        }
        assert!(kinds.contains(&6), "no PING among the frames {kinds:?}");
    }
}
