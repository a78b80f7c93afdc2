//! `GET /metrics` over plain HTTP/1.x, served by a thread of its own.
//!
//! # Why one thread and `poll(2)`, not an HTTP library
//! The NRI plugin, one of the four components, has no async runtime and must not grow one
//! (its requests are each served on a thread within containerd's budget), and the endpoint
//! has one path, no body to read and few clients (Prometheus, every 15 to 60 s, a pair of
//! them at most, and a person with `curl`). One thread serves all four components, the tokio
//! ones included, without touching their runtimes: a scrape never competes with a kubelet call
//! for a runtime's thread. It waits in `poll(2)` on the listener and on every open connection,
//! all of them non-blocking, so no connection, however idle or slow, keeps it from accepting
//! and answering the next one (a thread per connection would let as many idle clients as
//! there are threads hold them all, and the next scrape wait in the kernel's backlog). Its
//! cost is one thread idle in `poll` between scrapes and the encoding of the registry per
//! scrape.
//!
//! # Bounds
//! Anything that reaches the pod's IP can connect, so no client may hold the endpoint:
//! - every connection is **accepted as it comes**, never left in the kernel's backlog behind
//!   others, and read at once: a scraper sends its request head with its connection, so it
//!   is most often answered on its accept;
//! - at most [`Limits::connections`] (64) are open; one more that is not answered on its
//!   accept **closes the oldest connection that has not sent its whole request head**, or,
//!   when every one has, the oldest being answered (a reader slower than any scraper). The
//!   newest is kept, not refused: refusing it would let a few idle connections, opened again
//!   as they are closed, refuse every scrape. So however many connect, the endpoint holds the
//!   listener's descriptor and the cap's (and for a moment the one it accepts), and a scrape
//!   is closed unanswered only when, before its head comes, the cap is full of connections
//!   newer than it or being answered;
//! - a connection's request head must be whole within [`Limits::head`] (2 s) of its accept
//!   and its answer written within [`Limits::deadline`] (5 s) of it: a client that sends its
//!   head a byte at a time or never reads its answer is closed then, however it paces its
//!   bytes;
//! - a request head of at most [`MAX_HEAD`] bytes (then 431): an open connection holds its
//!   head read so far or its answer, never both.
//!
//! Every answer closes its connection. Only `GET` and `HEAD` of [`PATH`] answer 200; another
//! path is 404, another method 405, a head that is not HTTP 400. A collector in the registry
//! must not block on I/O: the answer is encoded on the endpoint's thread, between two turns of
//! its loop (the device plugin's decision-log counts are kept up to date by a thread of their
//! own). docs/security.md has the row for this endpoint, docs/benchmarks.md (section 22) the
//! latency of a scrape beside idle connections.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use crate::accept_failures::AcceptFailures;
use crate::address::MetricsAddress;

/// The one path served.
pub const PATH: &str = "/metrics";
/// The content type of the OpenMetrics text format that `prometheus-client` writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The longest request head read.
pub const MAX_HEAD: usize = 8 * 1024;
/// The pause after a failed `accept` (out of descriptors, say), so that the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Bytes read from a connection at a time: a scraper's whole head.
const READ_CHUNK: usize = 4096;

/// How long a connection may live and how many are open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From a connection's accept to its request head read whole. A scraper sends its head
    /// with its connection: this is for a lost segment sent again, not for a slow client.
    pub head: Duration,
    /// From a connection's accept to its answer written (the head read included).
    pub deadline: Duration,
    /// Connections open at once; one more closes the oldest still without its head.
    pub connections: usize,
}

impl Default for Limits {
    /// 2 s for the head, 5 s in all, 64 connections: a descriptor each, within the 1024 a
    /// container's soft limit may be, and at most a head or an answer each in memory.
    fn default() -> Self {
        Limits {
            head: Duration::from_secs(2),
            deadline: Duration::from_secs(5),
            connections: 64,
        }
    }
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The address could not be bound.
    #[error(
        "cannot serve metrics on {address}: {source}: choose another --metrics-address, or `off`"
    )]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// The system error.
        source: std::io::Error,
    },
    /// The serving thread could not be started.
    #[error("cannot start the metrics thread: {0}")]
    Thread(std::io::Error),
}

/// A running endpoint. Its thread serves until the process exits.
#[derive(Debug)]
pub struct Endpoint {
    address: SocketAddr,
}

impl Endpoint {
    /// The address bound (with the port chosen when port 0 was asked for).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

/// Binds `address` and serves `registry` there with the default [`Limits`].
pub fn serve(address: SocketAddr, registry: Arc<Registry>) -> Result<Endpoint, EndpointError> {
    serve_with(address, registry, Limits::default())
}

/// Binds `address` and serves `registry` there within `limits`, on a thread of its own.
pub fn serve_with(
    address: SocketAddr,
    registry: Arc<Registry>,
    limits: Limits,
) -> Result<Endpoint, EndpointError> {
    let bind = |source| EndpointError::Bind { address, source };
    let listener = TcpListener::bind(address).map_err(bind)?;
    let bound = listener.local_addr().map_err(bind)?;
    // Accepted until the backlog is empty, never waited on alone.
    listener.set_nonblocking(true).map_err(bind)?;
    let limits = Limits {
        connections: limits.connections.max(1),
        ..limits
    };
    let server = Server {
        listener,
        registry,
        limits,
        open: VecDeque::with_capacity(limits.connections),
        failures: AcceptFailures::new(
            "accepting a metrics connection",
            ACCEPT_BACKOFF,
            ACCEPT_BACKOFF,
        ),
        paused_until: None,
    };
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || server.run())
        .map_err(EndpointError::Thread)?;
    tracing::info!(address = %bound, path = PATH, "serving metrics");
    Ok(Endpoint { address: bound })
}

/// Starts the endpoint `address` asks for, serving `registry`; `None` when it is `off` or
/// cannot start.
///
/// A failure to start is logged at `error` and the component goes on: a taken port must not
/// cost a node its devices, and Prometheus shows the missing target (`up == 0`).
pub fn start(address: MetricsAddress, registry: Registry) -> Option<Endpoint> {
    let MetricsAddress::At(address) = address else {
        tracing::info!("metrics are off");
        return None;
    };
    serve(address, Arc::new(registry))
        .inspect_err(|error| tracing::error!(%error, "serving no metrics"))
        .ok()
}

/// The endpoint's thread: the listener, the open connections and what paces failed accepts.
struct Server {
    listener: TcpListener,
    registry: Arc<Registry>,
    limits: Limits,
    /// Oldest first.
    open: VecDeque<Connection>,
    failures: AcceptFailures,
    /// After a failed accept, the listener is left alone until then.
    paused_until: Option<Instant>,
}

impl Server {
    /// Serves until the process exits: each turn waits in `poll` for the listener or an open
    /// connection to be ready, or the next connection to pass its deadline; then closes the
    /// connections past theirs, lets each ready one read or write what it can, and accepts.
    fn run(mut self) {
        let mut ready = Vec::new();
        loop {
            let now = Instant::now();
            self.close_overdue(now);
            if self.paused_until.is_some_and(|until| now >= until) {
                self.paused_until = None;
            }
            ready.clear();
            {
                let listen = if self.paused_until.is_none() {
                    PollFlags::POLLIN
                } else {
                    PollFlags::empty()
                };
                let mut fds = Vec::with_capacity(self.open.len() + 1);
                fds.push(PollFd::new(self.listener.as_fd(), listen));
                fds.extend(
                    self.open
                        .iter()
                        .map(|c| PollFd::new(c.stream.as_fd(), c.interest())),
                );
                match poll(&mut fds, self.timeout(now)) {
                    Ok(_) => {}
                    Err(Errno::EINTR) => continue,
                    Err(errno) => {
                        // Only for a kernel out of memory: nothing to wait on, so a pause.
                        tracing::warn!(error = %errno, "waiting on the metrics connections");
                        std::thread::sleep(ACCEPT_BACKOFF);
                        continue;
                    }
                }
                // A flag the crate does not know of is still news: the connection's read or
                // write says what it is.
                ready.extend(fds.iter().map(|fd| fd.any().unwrap_or(true)));
            }
            // The open connections first: a head that came is answered before anything newer
            // can take its place.
            let registry = &*self.registry;
            let mut woken = ready[1..].iter();
            self.open
                .retain_mut(|c| !woken.next().copied().unwrap_or(false) || c.turn(registry));
            if ready[0] {
                self.accept_some();
            }
        }
    }

    /// Until the next connection is due, or the pause of the accepts ends; forever when
    /// neither (rounded up to the millisecond `poll` counts in, so that it never wakes early
    /// and spins).
    fn timeout(&self, now: Instant) -> PollTimeout {
        let due = self.open.iter().map(|c| c.due(&self.limits));
        let Some(next) = due.chain(self.paused_until).min() else {
            return PollTimeout::NONE;
        };
        let millis = next
            .saturating_duration_since(now)
            .as_micros()
            .div_ceil(1000);
        PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
    }

    fn close_overdue(&mut self, now: Instant) {
        let limits = self.limits;
        self.open.retain(|c| {
            let open = now < c.due(&limits);
            if !open {
                tracing::debug!(
                    peer = %c.peer,
                    head = c.waiting_for_head(),
                    "metrics connection past its deadline: closed"
                );
            }
            open
        });
    }

    /// Accepts what the backlog holds, half the cap at most, so that a flood of connections
    /// cannot starve the open ones of their turn.
    fn accept_some(&mut self) {
        for _ in 0..(self.limits.connections / 2).max(1) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    self.failures.succeeded();
                    self.admit(stream, peer);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // The client gave up while it waited in the backlog: the next one.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                    ) => {}
                Err(error) => {
                    let now = Instant::now();
                    self.paused_until = Some(now + self.failures.failed(&error, now));
                    return;
                }
            }
        }
    }

    /// Gives a new connection its first turn, and keeps it, within the cap, when that did not
    /// end it.
    fn admit(&mut self, stream: TcpStream, peer: SocketAddr) {
        if let Err(error) = stream.set_nonblocking(true) {
            tracing::debug!(%peer, %error, "metrics connection: cannot make it non-blocking");
            return;
        }
        let mut connection = Connection {
            stream,
            peer,
            accepted: Instant::now(),
            state: State::Head(Vec::new()),
        };
        // A scraper sent its head with its connection, and one that waited in the backlog sent
        // it long ago: most are answered here and never count against the cap.
        if !connection.turn(&self.registry) {
            return;
        }
        while self.open.len() >= self.limits.connections {
            self.close_for_room();
        }
        self.open.push_back(connection);
    }

    /// Closes the oldest connection still waiting for its head, or else the oldest being
    /// answered: one that sent its head and has not read its answer is slower than a scraper.
    fn close_for_room(&mut self) {
        let oldest = self
            .open
            .iter()
            .position(Connection::waiting_for_head)
            .unwrap_or(0);
        if let Some(closed) = self.open.remove(oldest) {
            tracing::debug!(
                peer = %closed.peer,
                head = closed.waiting_for_head(),
                "metrics connections at their cap: closed the oldest"
            );
        }
    }
}

/// An open connection, non-blocking.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    state: State,
}

enum State {
    /// Reading the request head: what came of it so far.
    Head(Vec<u8>),
    /// Writing the answer: all of it, and how much is written.
    Answer { bytes: Vec<u8>, written: usize },
}

/// Where a connection's turn left it.
enum Turn {
    /// It can go no further until its socket is ready again.
    Waiting,
    /// Its answer is written whole.
    Done,
}

impl Connection {
    fn waiting_for_head(&self) -> bool {
        matches!(self.state, State::Head(_))
    }

    /// When it is closed unless answered by then.
    fn due(&self, limits: &Limits) -> Instant {
        let answer = self.accepted + limits.deadline;
        match self.state {
            State::Head(_) => answer.min(self.accepted + limits.head),
            State::Answer { .. } => answer,
        }
    }

    /// What it waits on.
    fn interest(&self) -> PollFlags {
        match self.state {
            State::Head(_) => PollFlags::POLLIN,
            State::Answer { .. } => PollFlags::POLLOUT,
        }
    }

    /// Reads and writes what the socket takes without blocking; false when the connection is
    /// done with (answered whole, closed by the client, or failed).
    fn turn(&mut self, registry: &Registry) -> bool {
        match self.advance(registry) {
            Ok(Turn::Waiting) => true,
            Ok(Turn::Done) => false,
            Err(error) => {
                tracing::debug!(peer = %self.peer, %error, "metrics request");
                false
            }
        }
    }

    fn advance(&mut self, registry: &Registry) -> std::io::Result<Turn> {
        if let State::Head(head) = &mut self.state {
            let mut chunk = [0u8; READ_CHUNK];
            let asked = loop {
                let scanned = head.len();
                match (&self.stream).read(&mut chunk) {
                    // A client that closes early gets nothing.
                    Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Turn::Waiting),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
                if let Some(end) = head_end(head, scanned) {
                    break classify(&head[..end]);
                }
                if head.len() > MAX_HEAD {
                    break Asked::TooLarge;
                }
            };
            self.state = State::Answer {
                bytes: answer(asked, registry),
                written: 0,
            };
        }
        let State::Answer { bytes, written } = &mut self.state else {
            unreachable!("a head read whole became an answer above");
        };
        while *written < bytes.len() {
            match (&self.stream).write(&bytes[*written..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => *written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Turn::Waiting),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Turn::Done)
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Metrics { head_only: bool },
    NotFound,
    WrongMethod,
    Malformed,
    TooLarge,
}

/// The whole answer to `asked`, its status line to its body.
fn answer(asked: Asked, registry: &Registry) -> Vec<u8> {
    let (status, content_type, body, head_only) = match asked {
        Asked::Metrics { head_only } => {
            let mut text = String::new();
            match encode(&mut text, registry) {
                Ok(()) => ("200 OK", CONTENT_TYPE, text, head_only),
                Err(_) => (
                    "500 Internal Server Error",
                    "text/plain",
                    "cannot encode the metrics\n".to_owned(),
                    false,
                ),
            }
        }
        Asked::NotFound => (
            "404 Not Found",
            "text/plain",
            format!("only {PATH} is served\n"),
            false,
        ),
        Asked::WrongMethod => (
            "405 Method Not Allowed",
            "text/plain",
            "GET or HEAD\n".to_owned(),
            false,
        ),
        Asked::Malformed => (
            "400 Bad Request",
            "text/plain",
            "not an HTTP request\n".to_owned(),
            false,
        ),
        Asked::TooLarge => (
            "431 Request Header Fields Too Large",
            "text/plain",
            "request head too large\n".to_owned(),
            false,
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// Where the head ends (at its blank line), looked for only in what came after the first
/// `scanned` bytes and the three before them: a head read a byte at a time costs no more than
/// one read at once.
fn head_end(head: &[u8], scanned: usize) -> Option<usize> {
    let from = scanned.saturating_sub(3);
    let fresh = &head[from..];
    find(fresh, b"\r\n\r\n")
        .or_else(|| find(fresh, b"\n\n"))
        .map(|at| from + at)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The request line's method and path.
fn classify(head: &[u8]) -> Asked {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return Asked::Malformed;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Asked::Malformed;
    };
    if !version.starts_with("HTTP/1.") {
        return Asked::Malformed;
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != PATH {
        return Asked::NotFound;
    }
    match method {
        "GET" => Asked::Metrics { head_only: false },
        "HEAD" => Asked::Metrics { head_only: true },
        _ => Asked::WrongMethod,
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Shutdown};

    use devinject_testkit::sockets::held_on_port;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::info::Info;

    use super::*;
    use crate::accept_failures::ACCEPT_LOG_INTERVAL;

    /// Far beyond what a step the tests wait on takes, so that each ends by itself.
    const READY: Duration = Duration::from_secs(10);

    fn endpoint() -> (Endpoint, Counter) {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("devinject_test_things", "Things", counter.clone());
        let endpoint = serve((Ipv4Addr::LOCALHOST, 0).into(), Arc::new(registry)).unwrap();
        (endpoint, counter)
    }

    fn endpoint_with(limits: Limits) -> Endpoint {
        serve_with(
            (Ipv4Addr::LOCALHOST, 0).into(),
            Arc::new(Registry::default()),
            limits,
        )
        .unwrap()
    }

    /// The size of [`blob_endpoint`]'s one label value: far more than loopback's socket
    /// buffers hold for a client that does not read (net.ipv4.tcp_wmem and tcp_rmem).
    const BLOB: usize = 16 << 20;

    /// An endpoint whose answer is too large to be written before its client reads it.
    fn blob_endpoint(limits: Limits) -> Endpoint {
        let mut registry = Registry::default();
        let blob = Info::new(vec![("blob".to_owned(), "x".repeat(BLOB))]);
        registry.register("devinject_test_blob", "A large answer", blob);
        serve_with((Ipv4Addr::LOCALHOST, 0).into(), Arc::new(registry), limits).unwrap()
    }

    /// A connection that sends its head and reads the first byte of its answer, then nothing.
    fn reads_no_further(address: SocketAddr) -> TcpStream {
        let mut stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(READY)).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).unwrap();
        stream
    }

    /// Whether the endpoint closed `stream` within `within`: a read gives its end (or a
    /// reset) rather than timing out.
    fn closed_within(stream: &TcpStream, within: Duration) -> bool {
        stream.set_read_timeout(Some(within)).unwrap();
        let mut byte = [0u8; 1];
        match (&*stream).read(&mut byte) {
            Ok(0) => true,
            Ok(_) => panic!("the endpoint answered a head it never got"),
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }

    /// Waits until the endpoint on `port` holds `n` connections, for [`READY`] at most.
    fn until_held(port: u16, n: usize) -> bool {
        let give_up = Instant::now() + READY;
        while held_on_port(port) != n {
            if Instant::now() > give_up {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// A scrape, with how long it took; the client gives up after 4 s.
    fn timed_scrape(address: SocketAddr) -> (String, Duration) {
        let started = Instant::now();
        let mut stream = TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(4)))
            .unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        (answer, started.elapsed())
    }

    /// Sends `GET /metrics HTTP/1.1\r\n` and then header bytes, one each `pace`, never the
    /// blank line, until the endpoint closes the connection or `stop` is set.
    fn slow_head(
        address: SocketAddr,
        pace: Duration,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> (TcpStream, std::thread::JoinHandle<()>) {
        let stream = TcpStream::connect(address).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let handle = std::thread::spawn(move || {
            let bytes = b"GET /metrics HTTP/1.1\r\n"
                .iter()
                .chain(b"X-Slow: ".iter());
            for &byte in bytes.chain(std::iter::repeat(&b'a')) {
                if stop.load(std::sync::atomic::Ordering::Relaxed)
                    || writer.write_all(&[byte]).is_err()
                {
                    return;
                }
                std::thread::sleep(pace);
            }
        });
        (stream, handle)
    }

    #[test]
    fn a_slow_head_and_idle_connections_leave_a_scrape_answered() {
        let endpoint = endpoint_with(Limits::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A head a byte a second, then two connections that send nothing.
        let (_slow, writer) = slow_head(endpoint.address(), Duration::from_secs(1), stop.clone());
        let _idle: Vec<_> = (0..2)
            .map(|_| TcpStream::connect(endpoint.address()).unwrap())
            .collect();
        let (answer, took) = timed_scrape(endpoint.address());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
        // Well within the deadlines the others could hold an endpoint serving one at a time.
        assert!(took < Duration::from_secs(1), "answered after {took:?}");
        writer.join().unwrap();
    }

    #[test]
    fn a_head_past_its_deadline_is_closed_however_it_is_paced() {
        let head = Duration::from_millis(500);
        let endpoint = endpoint_with(Limits {
            head,
            ..Limits::default()
        });
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A byte every 50 ms: no single read waits long, the whole head never comes.
        let started = Instant::now();
        let (slow, writer) = slow_head(endpoint.address(), Duration::from_millis(50), stop.clone());
        let closed = closed_within(&slow, Duration::from_secs(5));
        let took = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        assert!(closed, "still open after {took:?}");
        assert!(
            took >= head && took < Duration::from_secs(3),
            "closed after {took:?}"
        );
    }

    #[test]
    fn a_head_that_comes_a_byte_at_a_time_is_answered() {
        let (endpoint, _) = endpoint();
        let mut stream = TcpStream::connect(endpoint.address()).unwrap();
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(READY)).unwrap();
        // Each byte a segment of its own: the blank line is split across reads.
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" {
            stream.write_all(&[*byte]).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
    }

    #[test]
    fn over_the_cap_the_oldest_without_a_head_is_closed_first() {
        let endpoint = blob_endpoint(Limits {
            head: Duration::from_secs(60),
            deadline: Duration::from_secs(60),
            connections: 2,
        });
        let (address, port) = (endpoint.address(), endpoint.address().port());
        // Being answered, older than both idle connections after it: the first idle one goes.
        let mut reader = reads_no_further(address);
        let idle: Vec<_> = (0..2)
            .map(|_| TcpStream::connect(address).unwrap())
            .collect();
        assert!(
            closed_within(&idle[0], READY),
            "the oldest idle one is open"
        );
        assert!(
            !closed_within(&idle[1], Duration::from_millis(200)),
            "the newest was closed"
        );
        assert!(until_held(port, 2), "{} held", held_on_port(port));
        // A second connection being answered takes the other idle one's place.
        let _second = reads_no_further(address);
        assert!(closed_within(&idle[1], READY), "the idle one is open");
        // With none left waiting for a head, the oldest being answered goes.
        let _third = TcpStream::connect(address).unwrap();
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert!(got.len() < BLOB, "answered whole: {} bytes", got.len());
        assert!(until_held(port, 2), "{} held", held_on_port(port));
    }

    #[test]
    fn an_answer_never_read_is_closed_at_the_deadline() {
        let deadline = Duration::from_millis(500);
        let endpoint = blob_endpoint(Limits {
            deadline,
            ..Limits::default()
        });
        let started = Instant::now();
        let mut reader = reads_no_further(endpoint.address());
        assert!(until_held(endpoint.address().port(), 0), "still held");
        let took = started.elapsed();
        assert!(took >= deadline, "closed after {took:?}");
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert!(got.len() < BLOB, "answered whole: {} bytes", got.len());
    }

    #[test]
    fn an_answer_larger_than_the_socket_takes_is_written_whole_as_it_is_read() {
        let endpoint = blob_endpoint(Limits::default());
        let mut stream = TcpStream::connect(endpoint.address()).unwrap();
        stream.set_read_timeout(Some(READY)).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        let body = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|end| end + 4)
            .unwrap();
        let head = String::from_utf8_lossy(&answer[..body]);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", answer.len() - body)),
            "{head} and {} bytes",
            answer.len() - body
        );
        assert!(answer.len() > BLOB && answer.ends_with(b"# EOF\n"));
    }

    #[test]
    fn failed_accepts_are_logged_once_per_interval() {
        let mut failures = AcceptFailures::new(
            "accepting a metrics connection",
            ACCEPT_BACKOFF,
            ACCEPT_BACKOFF,
        );
        let error = std::io::Error::from_raw_os_error(24);
        let start = Instant::now();
        assert_eq!(failures.failed(&error, start), ACCEPT_BACKOFF);
        assert_eq!(failures.last_logged(), Some(start));
        for ms in 1..1000 {
            failures.failed(&error, start + Duration::from_millis(ms));
        }
        assert_eq!(
            (failures.last_logged(), failures.unlogged()),
            (Some(start), 999)
        );
        let later = start + ACCEPT_LOG_INTERVAL;
        assert_eq!(failures.failed(&error, later), ACCEPT_BACKOFF);
        assert_eq!(
            (failures.last_logged(), failures.unlogged()),
            (Some(later), 0)
        );
    }

    fn exchange(address: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(address).unwrap();
        stream.write_all(request).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn get_metrics_answers_the_registry_as_openmetrics_text() {
        let (endpoint, counter) = endpoint();
        counter.inc_by(3);
        let answer = exchange(
            endpoint.address(),
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")),
            "{answer}"
        );
        assert!(
            answer.contains("\r\n\r\n# HELP devinject_test_things Things.\n"),
            "{answer}"
        );
        assert!(
            answer.contains("\ndevinject_test_things_total 3\n"),
            "{answer}"
        );
        assert!(answer.ends_with("# EOF\n"), "{answer}");
        // Served again: each connection is closed after its answer.
        counter.inc();
        let answer = exchange(endpoint.address(), b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(
            answer.contains("\ndevinject_test_things_total 4\n"),
            "{answer}"
        );
    }

    #[test]
    fn head_answers_without_a_body() {
        let (endpoint, _) = endpoint();
        let answer = exchange(endpoint.address(), b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n"), "{answer}");
    }

    #[test]
    fn other_paths_methods_and_junk_are_refused() {
        let (endpoint, _) = endpoint();
        let status = |request: &[u8]| {
            let answer = exchange(endpoint.address(), request);
            answer.lines().next().unwrap_or_default().to_owned()
        };
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
        assert_eq!(
            status(b"GET /metricsx HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status(b"POST /metrics HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 405 Method Not Allowed"
        );
        assert_eq!(
            status(b"\x16\x03\x01\x00\xa5\r\n\r\n"),
            "HTTP/1.1 400 Bad Request"
        );
        assert_eq!(
            status(b"GET /metrics SPDY/3\r\n\r\n"),
            "HTTP/1.1 400 Bad Request"
        );
    }

    #[test]
    fn an_oversized_head_is_refused_and_the_endpoint_goes_on() {
        let (endpoint, _) = endpoint();
        let mut stream = TcpStream::connect(endpoint.address()).unwrap();
        let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
        request.extend(std::iter::repeat_n(b'a', 2 * MAX_HEAD));
        // The endpoint may close before it has read all of it.
        let _ = stream.write_all(&request);
        let _ = stream.shutdown(Shutdown::Write);
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large"),
            "{answer}"
        );
        let answer = exchange(endpoint.address(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    }

    #[test]
    fn a_taken_address_is_an_error_naming_it() {
        let (endpoint, _) = endpoint();
        let err = serve(endpoint.address(), Arc::new(Registry::default())).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("cannot serve metrics on {}", endpoint.address())),
            "{err}"
        );
    }
}
