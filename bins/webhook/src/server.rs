//! The HTTPS server the API server calls: `POST /mutate` with an AdmissionReview, and
//! `GET /healthz` for the kubelet's probes. TLS 1.2 and 1.3 through rustls (ring provider); one
//! task per connection on a current-thread runtime.
//!
//! # Bounds
//! Any pod that reaches the Service can connect, and the API server admits pods unmutated when
//! a review is not answered within its `timeoutSeconds` (5 in our manifest), so no client may
//! hold the server, its descriptors or its memory ([`Limits`] has the numbers; docs/security.md
//! has the row):
//! - the TLS handshake must end within [`Limits::handshake`] of the accept;
//! - a request head must come within [`Limits::head`] of the server starting to read it, which
//!   also closes a kept-alive connection idle for that long; its body within [`Limits::body`]
//!   of its head (else 408);
//! - at most [`Limits::connections`] connections are open; one accepted over the cap closes the
//!   oldest, so idle or slow clients never keep the API server's new connection waiting (a
//!   review is answered within milliseconds of its body, so only a client opening connections
//!   faster than that could close it, while refusing the newest would let the same clients,
//!   opening again as they are closed, refuse every review);
//! - request bodies are held against one budget for all connections, [`Limits::body_budget`]:
//!   a body that would take it past is answered 503 and its connection closed, so memory for
//!   bodies is bounded in total, not per request only. Besides, each connection holds at most
//!   its TLS buffers and hyper's read buffer ([`MAX_BUF`]);
//! - a failed `accept` (out of descriptors) closes the oldest connection when descriptors ran
//!   out, pauses (doubling from [`ACCEPT_PAUSE_MIN`] to [`ACCEPT_PAUSE_MAX`]) and is logged once
//!   per [`ACCEPT_LOG_INTERVAL`](devinject_metrics::accept_failures::ACCEPT_LOG_INTERVAL) with the count of those not logged.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;

use devinject_metrics::accept_failures::AcceptFailures;

use crate::metrics::{Outcome, WebhookMetrics};
use crate::mutate::Table;
use crate::review::{review, MAX_REVIEW_BYTES};

/// The path the webhook configuration names.
pub const MUTATE_PATH: &str = "/mutate";
/// hyper's read buffer per connection at most (the request head must fit).
pub const MAX_BUF: usize = 64 * 1024;
/// The first pause after a failed `accept`.
pub const ACCEPT_PAUSE_MIN: Duration = Duration::from_millis(50);
/// The longest pause after failed `accept`s in a row.
pub const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);
/// `accept`'s errors for descriptors run out, in the process (`EMFILE`) or the system
/// (`ENFILE`): Linux's numbers.
const OUT_OF_DESCRIPTORS: [i32; 2] = [24, 23];

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The certificate or key is not usable.
    #[error("the serving certificate or key is not usable: {0}: give a PEM certificate chain and its PEM private key (devinject-webhook certs writes both)")]
    Tls(String),
}

/// How long a client may take and how much it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From the accept to the TLS handshake done.
    pub handshake: Duration,
    /// For a request head, from the server starting to read it (so also the idle time of a
    /// kept-alive connection).
    pub head: Duration,
    /// For a request body, from its head.
    pub body: Duration,
    /// Connections open at once; one more closes the oldest.
    pub connections: usize,
    /// Bytes of request bodies held at once, over all connections.
    pub body_budget: usize,
}

impl Default for Limits {
    /// 5 s for the handshake, 10 s for a head and for a body, 32 connections, 16 MiB of
    /// bodies: with [`MAX_BUF`] and TLS buffers (some 100 KiB a connection) and one review's
    /// parse at a time, within the manifest's 64 MiB.
    fn default() -> Self {
        Limits {
            handshake: Duration::from_secs(5),
            head: Duration::from_secs(10),
            body: Duration::from_secs(10),
            connections: 32,
            body_budget: 16 << 20,
        }
    }
}

/// What the server holds now: open connections and request body bytes.
#[derive(Debug, Default)]
pub struct Load {
    connections: AtomicUsize,
    body_bytes: AtomicUsize,
    peak_body_bytes: AtomicUsize,
    closed_oldest: AtomicU64,
}

impl Load {
    /// Connections open.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Request body bytes held.
    pub fn body_bytes(&self) -> usize {
        self.body_bytes.load(Ordering::Relaxed)
    }

    /// The most request body bytes held at once so far.
    pub fn peak_body_bytes(&self) -> usize {
        self.peak_body_bytes.load(Ordering::Relaxed)
    }

    /// Connections closed to make room for newer ones (or for a descriptor).
    pub fn closed_oldest(&self) -> u64 {
        self.closed_oldest.load(Ordering::Relaxed)
    }

    /// Takes `n` more bytes for `held` when the budget has them.
    fn take(&self, held: &mut Held<'_>, n: usize, budget: usize) -> bool {
        let taken = self
            .body_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                now.checked_add(n).filter(|&after| after <= budget)
            });
        match taken {
            Ok(before) => {
                self.peak_body_bytes
                    .fetch_max(before + n, Ordering::Relaxed);
                held.bytes += n;
                true
            }
            Err(_) => false,
        }
    }
}

/// Body bytes one request holds; given back to the budget when dropped.
struct Held<'a> {
    load: &'a Load,
    bytes: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.load
            .body_bytes
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The rustls configuration serving `cert_pem` (a chain) with `key_pem`.
pub fn tls_config(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    let tls = |e: &dyn std::fmt::Display| ServerError::Tls(e.to_string());
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls(&e))?;
    if certs.is_empty() {
        return Err(ServerError::Tls("no certificate in the PEM file".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| tls(&e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls(&e))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| tls(&e))?;
    Ok(Arc::new(config))
}

/// Serves connections from `listener` within the default [`Limits`] until the task is
/// dropped, counting reviews into `metrics`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    table: Arc<Table>,
    metrics: WebhookMetrics,
) {
    serve_with(
        listener,
        tls,
        table,
        metrics,
        Limits::default(),
        Arc::new(Load::default()),
    )
    .await;
}

/// Serves connections from `listener` within `limits` until the task is dropped, counting
/// reviews into `metrics` and what is held into `load`.
pub async fn serve_with(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    table: Arc<Table>,
    metrics: WebhookMetrics,
    limits: Limits,
    load: Arc<Load>,
) {
    let limits = Limits {
        connections: limits.connections.max(1),
        ..limits
    };
    let shared = Arc::new(Shared {
        acceptor: TlsAcceptor::from(tls),
        table,
        metrics,
        limits,
        load,
        open: Mutex::default(),
    });
    let mut failures = AcceptFailures::new(
        "accepting a connection failed: pausing",
        ACCEPT_PAUSE_MIN,
        ACCEPT_PAUSE_MAX,
    );
    let mut next_id = 0u64;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => {
                failures.succeeded();
                accepted
            }
            Err(error) => {
                if error
                    .raw_os_error()
                    .is_some_and(|e| OUT_OF_DESCRIPTORS.contains(&e))
                {
                    // Gives a descriptor back for the connections waiting in the backlog.
                    shared.close_oldest();
                }
                let pause = failures.failed(&error, Instant::now());
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        while shared.lock().len() >= limits.connections {
            shared.close_oldest();
        }
        next_id += 1;
        let id = next_id;
        let (close, closed) = oneshot::channel();
        {
            let mut open = shared.lock();
            open.push_back((id, close));
            shared.load.connections.store(open.len(), Ordering::Relaxed);
        }
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let _open = Open {
                shared: &shared,
                id,
            };
            tokio::select! {
                // The sender dropped: closed to make room.
                _ = closed => tracing::debug!(%peer, "connection closed to make room"),
                () = connection(&shared, tcp, peer) => {}
            }
        });
    }
}

/// What every connection's task shares.
struct Shared {
    acceptor: TlsAcceptor,
    table: Arc<Table>,
    metrics: WebhookMetrics,
    limits: Limits,
    load: Arc<Load>,
    /// The open connections, oldest first; dropping one's sender closes it.
    open: Mutex<VecDeque<(u64, oneshot::Sender<()>)>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, VecDeque<(u64, oneshot::Sender<()>)>> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn close_oldest(&self) {
        let mut open = self.lock();
        if open.pop_front().is_some() {
            self.load.closed_oldest.fetch_add(1, Ordering::Relaxed);
        }
        self.load.connections.store(open.len(), Ordering::Relaxed);
    }
}

/// Takes a connection out of [`Shared::open`] when its task ends, however it ends.
struct Open<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        let mut open = self.shared.lock();
        open.retain(|(id, _)| *id != self.id);
        self.shared
            .load
            .connections
            .store(open.len(), Ordering::Relaxed);
    }
}

/// One connection: the handshake within its deadline, then HTTP/1.1 with the head deadline.
async fn connection(shared: &Arc<Shared>, tcp: TcpStream, peer: std::net::SocketAddr) {
    let stream =
        match tokio::time::timeout(shared.limits.handshake, shared.acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(%peer, "TLS handshake failed: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake not done within its deadline");
                return;
            }
        };
    let service = {
        let shared = Arc::clone(shared);
        hyper::service::service_fn(move |req| handle(Arc::clone(&shared), req))
    };
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.head)
        .max_buf_size(MAX_BUF)
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%peer, "connection ended: {e}");
    }
}

/// Why a body was not read.
enum BodyError {
    TooLarge,
    OverBudget,
    Read(hyper::Error),
}

/// Reads a body of at most [`MAX_REVIEW_BYTES`], taking each chunk from the shared budget as it
/// comes; what it holds goes back to the budget when the returned [`Held`] is dropped.
async fn read_body<'a>(
    mut body: Incoming,
    load: &'a Load,
    budget: usize,
) -> Result<(Vec<u8>, Held<'a>), BodyError> {
    let mut held = Held { load, bytes: 0 };
    let mut chunks: Vec<Bytes> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else {
            continue;
        };
        if held.bytes + data.len() > MAX_REVIEW_BYTES {
            return Err(BodyError::TooLarge);
        }
        if !load.take(&mut held, data.len(), budget) {
            return Err(BodyError::OverBudget);
        }
        chunks.push(data);
    }
    Ok((chunks.concat(), held))
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r
    };
    let json = |mut r: Response<Full<Bytes>>| {
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    };
    let close = |mut r: Response<Full<Bytes>>| {
        r.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        r
    };
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, b"ok".to_vec()),
        (&Method::POST, MUTATE_PATH) => {
            let (limits, load) = (shared.limits, &*shared.load);
            let read = read_body(req.into_body(), load, limits.body_budget);
            // The body unread stays on the connection: every refusal closes it.
            let (body, _held) = match tokio::time::timeout(limits.body, read).await {
                Ok(Ok(read)) => read,
                Ok(Err(BodyError::TooLarge)) => {
                    shared.metrics.reviewed(Outcome::Malformed, Duration::ZERO);
                    return Ok(close(reply(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("the body is over {MAX_REVIEW_BYTES} bytes").into_bytes(),
                    )));
                }
                Ok(Err(BodyError::OverBudget)) => {
                    tracing::debug!(
                        budget = limits.body_budget,
                        "request bodies at their budget: refused one"
                    );
                    return Ok(close(reply(
                        StatusCode::SERVICE_UNAVAILABLE,
                        b"the webhook holds as many request bodies as it may: try again".to_vec(),
                    )));
                }
                Ok(Err(BodyError::Read(e))) => {
                    shared.metrics.reviewed(Outcome::Malformed, Duration::ZERO);
                    return Ok(close(reply(
                        StatusCode::BAD_REQUEST,
                        format!("cannot read the body: {e}").into_bytes(),
                    )));
                }
                Err(_) => {
                    return Ok(close(reply(
                        StatusCode::REQUEST_TIMEOUT,
                        format!("the body did not come within {:?}", limits.body).into_bytes(),
                    )));
                }
            };
            let started = Instant::now();
            let (answered, outcome) = match review(&shared.table, &body) {
                Ok((v, outcome)) => (
                    json(reply(
                        StatusCode::OK,
                        serde_json::to_vec(&v).unwrap_or_default(),
                    )),
                    outcome,
                ),
                Err(e) => (
                    reply(StatusCode::BAD_REQUEST, e.to_string().into_bytes()),
                    Outcome::Malformed,
                ),
            };
            shared.metrics.reviewed(outcome, started.elapsed());
            answered
        }
        _ => reply(StatusCode::NOT_FOUND, b"not found".to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use devinject_metrics::accept_failures::ACCEPT_LOG_INTERVAL;

    #[test]
    fn failed_accepts_pause_longer_in_a_row_and_are_logged_once_per_interval() {
        let mut failures = AcceptFailures::new(
            "accepting a connection failed: pausing",
            ACCEPT_PAUSE_MIN,
            ACCEPT_PAUSE_MAX,
        );
        let error = std::io::Error::from_raw_os_error(24);
        let start = Instant::now();
        let pauses: Vec<_> = (0..8)
            .map(|i| failures.failed(&error, start + Duration::from_millis(i)))
            .collect();
        assert_eq!(pauses[0], ACCEPT_PAUSE_MIN);
        assert_eq!(pauses[1], ACCEPT_PAUSE_MIN * 2);
        assert_eq!(pauses[7], ACCEPT_PAUSE_MAX);
        // The first was logged, the seven after it within the interval were not.
        assert_eq!(failures.unlogged(), 7);
        failures.failed(&error, start + ACCEPT_LOG_INTERVAL);
        assert_eq!(failures.unlogged(), 0);
        failures.succeeded();
        assert_eq!(
            failures.failed(&error, start + ACCEPT_LOG_INTERVAL),
            ACCEPT_PAUSE_MIN
        );
    }
}
