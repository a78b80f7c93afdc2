//! A TLS client for the webhook's own server: the bootstrap's CA trusted, reviews written as
//! the API server writes them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// A client trusting `ca_pem`, for the server at `127.0.0.1`.
pub fn connector(ca_pem: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to `address`, handshake done.
pub async fn tls(connector: &TlsConnector, address: std::net::SocketAddr) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(address).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    connector.connect(name, tcp).await.unwrap()
}

/// An AdmissionReview of a pod that asks for no device: answered allowed, unchanged.
pub fn review_body() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "object": {"metadata": {}, "spec": {"containers": [{"name": "c"}]}},
        },
    }))
    .unwrap()
}

/// The head of a `POST /mutate` of `length` bytes.
pub fn review_head(length: usize) -> String {
    format!(
        "POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )
}

/// What the server wrote until it closed, for `within` at most (an end without TLS's
/// close_notify counts as the end).
pub async fn read_answer<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> String {
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(within, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// One review on a new connection: the answer and how long it took.
pub async fn review(connector: &TlsConnector, address: std::net::SocketAddr) -> (String, Duration) {
    let started = Instant::now();
    let mut stream = tls(connector, address).await;
    let body = review_body();
    stream
        .write_all(review_head(body.len()).as_bytes())
        .await
        .unwrap();
    stream.write_all(&body).await.unwrap();
    let answer = read_answer(&mut stream, Duration::from_secs(5)).await;
    (answer, started.elapsed())
}
