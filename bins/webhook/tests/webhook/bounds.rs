//! The server's bounds, over real TLS against the real server function: clients that never
//! handshake, floods of idle connections, bodies held one byte short. docs/security.md, the
//! webhook's row.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use devinject_devices::ProfileSet;
use devinject_testkit::sockets::held_on_port;
use devinject_webhook::certs;
use devinject_webhook::metrics::WebhookMetrics;
use devinject_webhook::mutate::Table;
use devinject_webhook::review::MAX_REVIEW_BYTES;
use devinject_webhook::server::{serve_with, tls_config, Limits, Load};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

/// Far beyond what the awaited step takes, and short of the deadlines the tests do not probe.
const READY: Duration = Duration::from_secs(10);

struct Server {
    address: std::net::SocketAddr,
    load: Arc<Load>,
    client: TlsConnector,
}

async fn start(limits: Limits) -> Server {
    let bundle = certs::generate(&["127.0.0.1".to_owned()]).unwrap();
    let tls = tls_config(bundle.cert.as_bytes(), bundle.key.as_bytes()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let load = Arc::new(Load::default());
    tokio::spawn(serve_with(
        listener,
        tls,
        Arc::new(Table::new(&ProfileSet::default())),
        WebhookMetrics::default(),
        limits,
        Arc::clone(&load),
    ));
    Server {
        address,
        load,
        client: common::connector(&bundle.ca_cert),
    }
}

/// Waits until `ready` holds, for [`READY`] at most; true when it does.
async fn until(ready: impl Fn() -> bool) -> bool {
    let give_up = Instant::now() + READY;
    while !ready() {
        if Instant::now() > give_up {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Limits whose deadlines the test does not reach.
fn patient() -> Limits {
    Limits {
        handshake: Duration::from_secs(60),
        head: Duration::from_secs(60),
        body: Duration::from_secs(60),
        ..Limits::default()
    }
}

fn assert_allowed(answer: &str, took: Duration) {
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
    assert!(answer.contains("\"allowed\":true"), "{answer:?}");
    // The API server's timeoutSeconds in our manifest is 5.
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
}

#[tokio::test]
async fn a_client_that_never_handshakes_is_closed_at_the_handshake_deadline() {
    let handshake = Duration::from_millis(500);
    let server = start(Limits {
        handshake,
        ..patient()
    })
    .await;
    let started = Instant::now();
    let mut tcp = TcpStream::connect(server.address).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(READY, tcp.read(&mut byte)).await;
    let took = started.elapsed();
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "still open after {took:?}"
    );
    assert!(took >= handshake, "closed after {took:?}");
    assert!(until(|| server.load.connections() == 0).await);
}

#[tokio::test]
async fn idle_connections_over_the_cap_leave_a_review_answered() {
    let cap = 8;
    let server = start(Limits {
        connections: cap,
        ..patient()
    })
    .await;
    // Three times the cap that never handshake, and some that did and then send nothing.
    let mut idle = Vec::new();
    for _ in 0..3 * cap {
        idle.push(TcpStream::connect(server.address).await.unwrap());
    }
    let mut quiet = Vec::new();
    for _ in 0..cap / 2 {
        quiet.push(common::tls(&server.client, server.address).await);
    }
    let flood = idle.len() + quiet.len();
    assert!(
        until(|| server.load.closed_oldest() == (flood - cap) as u64).await,
        "{} closed of {flood}, {} open",
        server.load.closed_oldest(),
        server.load.connections()
    );
    assert_eq!(server.load.connections(), cap);
    let (answer, took) = common::review(&server.client, server.address).await;
    assert_allowed(&answer, took);
    assert!(server.load.connections() <= cap);
}

#[tokio::test]
async fn a_review_behind_idle_connections_is_answered_within_a_second() {
    // The default cap; deadlines the test does not reach, so that only the cap lets the idle
    // connections go.
    let server = start(patient()).await;
    let (cap, port) = (patient().connections, server.address.port());
    let mut idle = Vec::new();
    // 100, then the cap and 50 more on top, all still open on this side.
    for n in [100, cap + 50] {
        for _ in 0..n {
            idle.push(TcpStream::connect(server.address).await.unwrap());
        }
        let review = common::review(&server.client, server.address);
        let Ok((answer, took)) = tokio::time::timeout(READY, review).await else {
            panic!(
                "beside {} idle connections, no answer in {READY:?}",
                idle.len()
            );
        };
        assert!(
            answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.contains("\"allowed\":true"),
            "beside {} idle connections: {answer:?}",
            idle.len()
        );
        // The API server gives up after the manifest's timeoutSeconds (5); the promise is 1 s.
        assert!(
            took < Duration::from_secs(1),
            "beside {} idle connections, answered after {took:?}",
            idle.len()
        );
        let held = held_on_port(port);
        assert!(
            held <= cap,
            "{held} descriptors held for {} idle connections, the cap is {cap}",
            idle.len()
        );
    }
}

#[tokio::test]
async fn bodies_held_one_byte_short_stay_within_the_budget() {
    let budget = 1 << 20;
    let server = start(Limits {
        body_budget: budget,
        ..patient()
    })
    .await;
    // Each says a whole review is coming and sends 400 KiB of it: two fit the budget.
    let part = vec![b' '; 400 << 10];
    let mut holders = Vec::new();
    for i in 1..=4usize {
        let mut stream = common::tls(&server.client, server.address).await;
        stream
            .write_all(common::review_head(MAX_REVIEW_BYTES).as_bytes())
            .await
            .unwrap();
        // The server closes the one over the budget, maybe before it has read it all.
        let _ = stream.write_all(&part).await;
        if i <= 2 {
            assert!(
                until(|| server.load.body_bytes() == i * part.len()).await,
                "{} held",
                server.load.body_bytes()
            );
            holders.push(stream);
        } else {
            let answer = common::read_answer(&mut stream, READY).await;
            assert!(
                answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
                "{answer:?}"
            );
        }
    }
    assert!(
        server.load.peak_body_bytes() <= budget,
        "{} held at once",
        server.load.peak_body_bytes()
    );
    assert_eq!(server.load.body_bytes(), 2 * part.len());
    // A review still fits what is left.
    let (answer, took) = common::review(&server.client, server.address).await;
    assert_allowed(&answer, took);
    // Given back when the holders go.
    drop(holders);
    assert!(until(|| server.load.body_bytes() == 0).await);
}

#[tokio::test]
async fn a_body_past_its_deadline_is_answered_408_and_its_bytes_given_back() {
    let server = start(Limits {
        body: Duration::from_millis(500),
        ..patient()
    })
    .await;
    let mut stream = common::tls(&server.client, server.address).await;
    stream
        .write_all(common::review_head(1000).as_bytes())
        .await
        .unwrap();
    stream.write_all(&[b' '; 999]).await.unwrap();
    let answer = common::read_answer(&mut stream, READY).await;
    assert!(
        answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{answer:?}"
    );
    assert!(until(|| server.load.body_bytes() == 0).await);
}

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_is_closed_at_the_head_deadline() {
    let head = Duration::from_millis(500);
    let server = start(Limits { head, ..patient() }).await;
    let stream = common::tls(&server.client, server.address).await;
    let (mut reader, mut writer) = tokio::io::split(stream);
    let started = Instant::now();
    let slow = tokio::spawn(async move {
        for &byte in b"POST /mutate HTTP/1.1\r\nX-Slow: ".iter().cycle() {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let answer = common::read_answer(&mut reader, READY).await;
    let took = started.elapsed();
    slow.abort();
    assert!(
        took >= head && took < READY,
        "closed after {took:?}: {answer:?}"
    );
}
