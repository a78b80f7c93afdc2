//! The HTTPS server the API server calls: `POST /mutate` with an AdmissionReview, and
//! `GET /healthz` for the kubelet's probes. TLS 1.2 and 1.3 through rustls (ring provider); one
//! task per connection on a current-thread runtime.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::metrics::{Outcome, WebhookMetrics};
use crate::mutate::Table;
use crate::review::{review, MAX_REVIEW_BYTES};

/// The path the webhook configuration names.
pub const MUTATE_PATH: &str = "/mutate";

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The certificate or key is not usable.
    #[error("the serving certificate or key is not usable: {0}: give a PEM certificate chain and its PEM private key (devinject-webhook certs writes both)")]
    Tls(String),
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

/// Serves connections from `listener` until the task is dropped, counting reviews into
/// `metrics`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    table: Arc<Table>,
    metrics: WebhookMetrics,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let table = table.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, "TLS handshake failed: {e}");
                    return;
                }
            };
            let service =
                hyper::service::service_fn(move |req| handle(table.clone(), metrics.clone(), req));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, "connection ended: {e}");
            }
        });
    }
}

async fn handle(
    table: Arc<Table>,
    metrics: WebhookMetrics,
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
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, b"ok".to_vec()),
        (&Method::POST, MUTATE_PATH) => {
            let body = match Limited::new(req.into_body(), MAX_REVIEW_BYTES)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    metrics.reviewed(Outcome::Malformed, Duration::ZERO);
                    return Ok(reply(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("cannot read the body: {e}").into_bytes(),
                    ));
                }
            };
            let started = Instant::now();
            let (answered, outcome) = match review(&table, &body) {
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
            metrics.reviewed(outcome, started.elapsed());
            answered
        }
        _ => reply(StatusCode::NOT_FOUND, b"not found".to_vec()),
    })
}
