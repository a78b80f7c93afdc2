//! Idle connections never hold a scrape: the real endpoint on loopback, flooded with connections
//! that send nothing, answers a scrape within a second and holds no more descriptors than its
//! cap. docs/security.md, the metrics endpoint's row; the figures are in docs/benchmarks.md.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use devinject_metrics::prometheus_client::metrics::counter::Counter;
use devinject_metrics::prometheus_client::registry::Registry;
use devinject_metrics::{serve, Endpoint};
use devinject_testkit::sockets::held_on_port;

/// What a scrape may take whatever is open beside it. The behaviour itself is a deadline:
/// Prometheus gives up on a scrape after its `scrape_timeout` (10 s by default), and the endpoint
/// promises a tenth of that.
const SCRAPE_WITHIN: Duration = Duration::from_secs(1);

/// Far beyond what a connect to loopback takes, so that the test ends by itself.
const CONNECT: Duration = Duration::from_secs(10);

fn endpoint() -> Endpoint {
    let mut registry = Registry::default();
    let counter = Counter::<u64>::default();
    counter.inc_by(7);
    registry.register("devinject_test_things", "Things", counter);
    serve((Ipv4Addr::LOCALHOST, 0).into(), Arc::new(registry)).unwrap()
}

/// `n` connections to `address` that send nothing.
fn idle(address: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| TcpStream::connect_timeout(&address, CONNECT).unwrap())
        .collect()
}

/// A scrape as Prometheus sends it, given [`SCRAPE_WITHIN`] to end: the answer so far and how
/// long it took.
fn scrape(address: SocketAddr) -> (String, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&address, CONNECT).unwrap();
    stream.set_read_timeout(Some(SCRAPE_WITHIN)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

fn assert_answered(answer: &str, took: Duration, beside: usize) {
    assert!(
        answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("# EOF\n"),
        "beside {beside} idle connections, after {took:?}: {answer:?}"
    );
    assert!(
        answer.contains("\ndevinject_test_things_total 7\n"),
        "{answer:?}"
    );
    assert!(
        took < SCRAPE_WITHIN,
        "beside {beside} idle connections, answered after {took:?}"
    );
}

#[test]
fn a_scrape_behind_idle_connections_is_answered_within_a_second() {
    let endpoint = endpoint();
    let cap = devinject_metrics::Limits::default().connections;
    let mut held = Vec::new();
    // 100, then the cap and 50 more on top: all still open on this side.
    for n in [100, cap + 50] {
        held.extend(idle(endpoint.address(), n));
        let (answer, took) = scrape(endpoint.address());
        assert_answered(&answer, took, held.len());
    }
}

#[test]
fn idle_connections_hold_no_more_descriptors_than_the_cap() {
    let endpoint = endpoint();
    let port = endpoint.address().port();
    let cap = devinject_metrics::Limits::default().connections;
    assert_eq!(held_on_port(port), 0);
    let flood = idle(endpoint.address(), 4 * cap);
    // Accepted in the order they came: once the scrape behind them is answered, the endpoint
    // has taken every one of them in.
    let (answer, took) = scrape(endpoint.address());
    assert_answered(&answer, took, flood.len());
    let held = held_on_port(port);
    assert!(
        held <= cap,
        "{held} descriptors held for {} idle connections, the cap is {cap}",
        flood.len()
    );
    drop(flood);
}
