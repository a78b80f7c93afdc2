//! `GET /metrics` over plain HTTP/1.x, served by threads of its own.
//!
//! # Why threads and not an HTTP library
//! The NRI plugin, one of the four components, has no async runtime and must not grow one
//! (its requests are each served on a thread within containerd's budget), and the endpoint
//! has one path, no body to read and few clients (Prometheus, every 15 to 60 s, a pair of
//! them at most, and a person with `curl`). Blocking threads are all that takes, and one
//! implementation serves all four components, the tokio ones included, without touching their
//! runtimes: a scrape never competes with a kubelet call for a runtime's thread. Its cost is
//! one thread idle in `accept` between scrapes, one short-lived thread per connection, and the
//! encoding of the registry per scrape.
//!
//! # Bounds
//! Anything that reaches the pod's IP can connect, so no client may hold the endpoint:
//! - each connection has **one deadline**, [`Limits::deadline`] (5 s) from its accept, for
//!   reading the request head and writing the answer together: every read and write blocks at
//!   most until then, so a client that sends its head a byte at a time or never reads its
//!   answer is closed at the deadline, however it paces its bytes;
//! - at most [`Limits::connections`] (4) connections are served at once, by as many threads
//!   started with the endpoint; one accepted over the cap **closes the oldest connection that
//!   has sent no request head** for [`Limits::grace`] (1 s: `shutdown`, which wakes its thread
//!   at once), or else waits for one to end. So idle or slow clients keep a new scrape waiting
//!   a second at most, and scrapes arriving together never cut each other's answers (an answer
//!   being written is bounded by the deadline). The newest is kept, not refused: refusing it
//!   would let a few idle connections, opened again as they are closed, refuse every scrape;
//! - a request head of at most [`MAX_HEAD`] bytes (then 431).
//!
//! Every answer closes its connection. Only `GET` and `HEAD` of [`PATH`] answer 200; another
//! path is 404, another method 405, a head that is not HTTP 400. A collector in the registry
//! must not block on I/O: the answer is encoded on the connection's thread within its deadline
//! (the device plugin's decision-log counts are kept up to date by a thread of their own).
//! docs/security.md has the row for this endpoint.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// How long a connection may live and how many are served at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From a connection's accept to its answer written (the head read included).
    pub deadline: Duration,
    /// Connections served at once, each by one of as many threads.
    pub connections: usize,
    /// How long a connection may wait for its request head before a newer connection, finding
    /// every thread busy, may close it.
    pub grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(5),
            connections: 4,
            grace: Duration::from_secs(1),
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

/// A running endpoint. Its threads serve until the process exits.
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

/// Binds `address` and serves `registry` there within `limits`, on threads of its own.
pub fn serve_with(
    address: SocketAddr,
    registry: Arc<Registry>,
    limits: Limits,
) -> Result<Endpoint, EndpointError> {
    let listener =
        TcpListener::bind(address).map_err(|source| EndpointError::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| EndpointError::Bind { address, source })?;
    let limits = Limits {
        connections: limits.connections.max(1),
        ..limits
    };
    let live = Arc::new(Live::default());
    let (jobs, queue) = std::sync::mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    for _ in 0..limits.connections {
        let (live, queue, registry) =
            (Arc::clone(&live), Arc::clone(&queue), Arc::clone(&registry));
        std::thread::Builder::new()
            .name("metrics-conn".into())
            .spawn(move || work(&live, &queue, &registry))
            .map_err(EndpointError::Thread)?;
    }
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || accept_loop(&listener, &live, &jobs, limits))
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

/// The connections being served, oldest first, each with a handle to shut it down.
#[derive(Debug, Default)]
struct Live {
    slots: Mutex<VecDeque<Slot>>,
    /// Signalled when a connection's thread is done with it.
    ended: Condvar,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    stream: TcpStream,
    accepted: Instant,
    /// Its request head has come: it is being answered, which ends by the deadline.
    answering: bool,
    closed: bool,
}

/// One accepted connection, for a serving thread.
struct Job {
    id: u64,
    stream: TcpStream,
    peer: SocketAddr,
    deadline: Instant,
}

/// The longest pause of the accept loop between two looks at the connections it waits on.
const ROOM_POLL: Duration = Duration::from_millis(100);

impl Live {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes room for one more connection while `limits.connections` are served: shuts down the
    /// oldest one still without its request head after `limits.grace` (an idle or slow client:
    /// its thread ends at once, its reads failing), or else waits for one to end. A connection
    /// being answered is never cut: its answer is written by its deadline at the latest, and a
    /// scraper's within a millisecond, while a client that sent nothing for the grace period
    /// is not a scraper.
    fn make_room(&self, limits: &Limits) {
        let mut slots = self.lock();
        // A connection shut down no longer counts: its thread is done with it at once.
        while slots.iter().filter(|s| !s.closed).count() >= limits.connections {
            let now = Instant::now();
            let waiting = |s: &&mut Slot| !s.closed && !s.answering;
            if let Some(oldest) = slots
                .iter_mut()
                .filter(waiting)
                .find(|s| now.duration_since(s.accepted) >= limits.grace)
            {
                oldest.closed = true;
                let peer = oldest.stream.peer_addr().ok();
                // Already gone when the client closed it first: nothing to shut down.
                let _ = oldest.stream.shutdown(Shutdown::Both);
                tracing::debug!(
                    ?peer,
                    "metrics connections at their cap: closed the oldest without a request"
                );
                continue;
            }
            // Until a connection ends, or the next one without its head passes its grace.
            let pause = slots
                .iter()
                .filter(|s| !s.closed && !s.answering)
                .map(|s| (s.accepted + limits.grace).saturating_duration_since(now))
                .min()
                .unwrap_or(ROOM_POLL)
                .clamp(Duration::from_millis(1), ROOM_POLL);
            slots = self
                .ended
                .wait_timeout(slots, pause)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    fn answering(&self, id: u64) {
        if let Some(slot) = self.lock().iter_mut().find(|s| s.id == id) {
            slot.answering = true;
        }
    }

    fn remove(&self, id: u64) {
        self.lock().retain(|s| s.id != id);
        self.ended.notify_all();
    }
}

/// Takes a connection's slot out of [`Live`] when its thread is done, however it ends.
struct Served<'a> {
    live: &'a Live,
    id: u64,
}

impl Drop for Served<'_> {
    fn drop(&mut self) {
        self.live.remove(self.id);
    }
}

/// A serving thread: answers the connections the accept loop hands over, one at a time, until
/// the loop is gone. The threads live as long as the endpoint, so a connection costs no
/// thread start.
fn work(live: &Live, queue: &Mutex<std::sync::mpsc::Receiver<Job>>, registry: &Registry) {
    loop {
        let job = {
            let queue = queue
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            queue.recv()
        };
        let Ok(job) = job else { return };
        let _served = Served { live, id: job.id };
        if let Err(error) = answer(&job.stream, registry, job.deadline, || {
            live.answering(job.id)
        }) {
            tracing::debug!(peer = %job.peer, %error, "metrics request");
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    live: &Live,
    jobs: &std::sync::mpsc::Sender<Job>,
    limits: Limits,
) {
    let mut next_id = 0u64;
    let mut failures = AcceptFailures::new(
        "accepting a metrics connection",
        ACCEPT_BACKOFF,
        ACCEPT_BACKOFF,
    );
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(error) => {
                std::thread::sleep(failures.failed(&error, Instant::now()));
                continue;
            }
        };
        let accepted = Instant::now();
        live.make_room(&limits);
        let Ok(handle) = stream.try_clone() else {
            tracing::debug!(%peer, "metrics connection: cannot hold a handle to it");
            continue;
        };
        next_id += 1;
        let id = next_id;
        live.lock().push_back(Slot {
            id,
            stream: handle,
            accepted,
            answering: false,
            closed: false,
        });
        let job = Job {
            id,
            stream,
            peer,
            deadline: accepted + limits.deadline,
        };
        if jobs.send(job).is_err() {
            // Every serving thread is gone (none can end but by a panic): nothing serves.
            live.remove(id);
            tracing::error!("the metrics threads are gone: serving no more metrics");
            return;
        }
    }
}

/// A connection whose every read and write blocks until its deadline at most.
struct Deadlined<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Deadlined<'_> {
    /// What is left until the deadline; an error once it has passed.
    fn left(&self) -> std::io::Result<Duration> {
        self.deadline
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the connection's deadline passed",
                )
            })
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        let mut stream = self.stream;
        stream.read(buf)
    }
}

impl Write for Deadlined<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        let mut stream = self.stream;
        stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let mut stream = self.stream;
        stream.flush()
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

/// Reads the request head and writes the answer, both by `deadline`; `on_head` is called once
/// the head has come.
fn answer(
    stream: &TcpStream,
    registry: &Registry,
    deadline: Instant,
    on_head: impl FnOnce(),
) -> std::io::Result<()> {
    let mut stream = Deadlined { stream, deadline };
    let asked = read_head(&mut stream)?;
    on_head();
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
    stream.write_all(&out)?;
    stream.flush()
}

/// Reads the request head (up to the blank line, at most [`MAX_HEAD`] bytes) and says what it
/// asks for. A client that closes early gets nothing.
fn read_head(stream: &mut impl Read) -> std::io::Result<Asked> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find(&head, b"\r\n\r\n").or_else(|| find(&head, b"\n\n")) {
            head.truncate(end);
            return Ok(classify(&head));
        }
        if head.len() > MAX_HEAD {
            return Ok(Asked::TooLarge);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..n]);
    }
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

    use prometheus_client::metrics::counter::Counter;

    use super::*;
    use crate::accept_failures::ACCEPT_LOG_INTERVAL;

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

    /// Whether the endpoint closed `stream` within `within`: a read gives its end (or a
    /// reset) rather than timing out.
    fn closed_within(stream: &TcpStream, within: Duration) -> bool {
        stream.set_read_timeout(Some(within)).unwrap();
        let mut byte = [0u8; 1];
        match (&*stream).read(&mut byte) {
            Ok(0) => true,
            Ok(_) => panic!("the endpoint answered a head it never got"),
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
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
        // Well within the 5 s deadline the others could hold a one-at-a-time endpoint.
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        writer.join().unwrap();
    }

    #[test]
    fn a_connection_past_its_deadline_is_closed_however_it_paces_its_head() {
        let deadline = Duration::from_millis(500);
        let endpoint = endpoint_with(Limits {
            deadline,
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
            took >= deadline && took < Duration::from_secs(3),
            "closed after {took:?}"
        );
    }

    #[test]
    fn over_the_cap_the_oldest_connection_is_closed() {
        let endpoint = endpoint_with(Limits {
            deadline: Duration::from_secs(60),
            connections: 2,
            grace: Duration::from_millis(100),
        });
        // Accepted in the order they connected: the third closes the first.
        let idle: Vec<_> = (0..3)
            .map(|_| TcpStream::connect(endpoint.address()).unwrap())
            .collect();
        assert!(
            closed_within(&idle[0], Duration::from_secs(2)),
            "the oldest is still open"
        );
        assert!(
            !closed_within(&idle[1], Duration::from_millis(200)),
            "the second was closed"
        );
        // A scrape is the newest: answered at once, and the second goes.
        let (answer, took) = timed_scrape(endpoint.address());
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        assert!(
            closed_within(&idle[1], Duration::from_secs(2)),
            "the second is still open"
        );
        assert!(
            !closed_within(&idle[2], Duration::from_millis(200)),
            "the third was closed"
        );
    }

    #[test]
    fn scrapes_over_the_cap_at_once_are_all_answered() {
        // Eight scrapers on two threads: a connection being answered is never the one closed
        // to make room, so none of them loses its answer. The grace is long, so that a scraper
        // descheduled between its connect and its head on a loaded machine is not taken for an
        // idle client.
        let endpoint = endpoint_with(Limits {
            connections: 2,
            grace: Duration::from_secs(5),
            ..Limits::default()
        });
        let address = endpoint.address();
        let scrapers: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(move || {
                    (0..50)
                        .filter(|_| {
                            let (answer, _) = timed_scrape(address);
                            !answer.starts_with("HTTP/1.1 200 OK\r\n")
                                || !answer.ends_with("# EOF\n")
                        })
                        .count()
                })
            })
            .collect();
        let lost: usize = scrapers.into_iter().map(|s| s.join().unwrap()).sum();
        assert_eq!(lost, 0, "{lost} of 400 scrapes lost their answer");
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
