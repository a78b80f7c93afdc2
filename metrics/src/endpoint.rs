//! `GET /metrics` over plain HTTP/1.x, served by one thread of its own.
//!
//! # Why a thread and not an HTTP library
//! The NRI plugin, one of the four components, has no async runtime and must not grow one
//! (its requests are each served on a thread within containerd's budget), and the endpoint
//! has one path, no body to read and one client (Prometheus, every 15 to 60 s). A blocking
//! loop on one thread is all that takes, and one implementation serves all four components,
//! the tokio ones included, without touching their runtimes: a scrape never competes with a
//! kubelet call for a runtime's thread. Its cost is one thread, idle in `accept` between
//! scrapes, and the encoding of the registry per scrape.
//!
//! # Bounds
//! One connection at a time; a request head of at most [`MAX_HEAD`] bytes (then 431); reads
//! and writes time out after [`IO_TIMEOUT`], so a client that stalls holds the endpoint for at
//! most that long and never holds the component's own work at all. Every answer closes its
//! connection. Only `GET` and `HEAD` of [`PATH`] answer 200; another path is 404, another
//! method 405, a head that is not HTTP 400.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use crate::address::MetricsAddress;

/// The one path served.
pub const PATH: &str = "/metrics";
/// The content type of the OpenMetrics text format that `prometheus-client` writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The longest request head read.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long one read or one write may block.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause after a failed `accept` (out of descriptors, say), so that the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

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

/// Binds `address` and serves `registry` there on a thread of its own.
pub fn serve(address: SocketAddr, registry: Arc<Registry>) -> Result<Endpoint, EndpointError> {
    let listener =
        TcpListener::bind(address).map_err(|source| EndpointError::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| EndpointError::Bind { address, source })?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || accept_loop(&listener, &registry))
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

fn accept_loop(listener: &TcpListener, registry: &Registry) {
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Err(error) = answer(stream, registry) {
                    tracing::debug!(%peer, %error, "metrics request");
                }
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a metrics connection");
                std::thread::sleep(ACCEPT_BACKOFF);
            }
        }
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

fn answer(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let asked = read_head(&mut stream)?;
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

    fn endpoint() -> (Endpoint, Counter) {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("devinject_test_things", "Things", counter.clone());
        let endpoint = serve((Ipv4Addr::LOCALHOST, 0).into(), Arc::new(registry)).unwrap();
        (endpoint, counter)
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
        // Served again: one connection at a time, each closed after its answer.
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
