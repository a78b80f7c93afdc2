//! `servers-bench`: the Prometheus endpoint (`devinject_metrics`) and the admission webhook's
//! HTTPS server (`devinject_webhook::server`) under well-behaved clients: scrapes or reviews per
//! second and the latency of each, p50 and p99 (docs/benchmarks.md, section 19).
//!
//! Both servers are the real ones, started in-process as the components start them: the
//! endpoint by `devinject_metrics::serve` on `127.0.0.1`, with a device plugin's registry of
//! `--resources` resources (every family of the plugin, filled); the webhook by
//! `server::serve` on its own current-thread runtime and thread, as the binary runs it, over
//! TLS with a certificate of `certs::generate`, with a table holding an FPGA function's friendly
//! name. The clients behave: a scraper connects, sends its `GET` at once and reads the answer to
//! its end; a review is sent whole and its answer read. The webhook is timed twice: a TLS
//! connection per review (handshake included, no session resumption) and kept-alive
//! connections (as the API server's connection pool uses them).
//!
//! Each configuration runs on two instances of the same server, A and A', alternating in
//! rounds (A first in odd rounds, A' first in even ones): the A/A pair shows what noise alone
//! moves. Loopback only, a fixed count per run, every request within [`IO`]. A benchmark, not a
//! test: it prints figures and fails only when it cannot measure (exit 1).
//!
//! Then the endpoint beside idle connections (docs/benchmarks.md, section 22): one scraper
//! while `--idle` connections that send nothing are open, held by a thread that opens each one
//! again as soon as the endpoint closes it, as a client bent on holding the endpoint would;
//! p50, p99 and the slowest scrape, and how many idle connections the endpoint closed a second.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use devinject_bench::interval::{ratio_of_medians, RESAMPLES};
use devinject_bench::stats::{short, Samples};
use devinject_device_plugin::advertisement::{Advertisement, ScannedDevice};
use devinject_device_plugin::metrics::PluginMetrics;
use devinject_devices::{Profile, ProfileSet};
use devinject_metrics::prometheus_client::registry::Registry;
use devinject_webhook::certs;
use devinject_webhook::metrics::WebhookMetrics;
use devinject_webhook::mutate::Table;
use devinject_webhook::server;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

/// Benchmark: the metrics endpoint and the webhook under well-behaved clients.
///
/// Prints Markdown tables on stdout: per configuration and instance (A, A'), the requests
/// per second of each round (median [min–max]), p50 and p99 latency over all rounds, the
/// requests that failed, and A'/A; then the scrapes beside idle connections. Loopback only; a
/// few tens of seconds with the defaults.
#[derive(Parser, Debug)]
#[command(name = "servers-bench")]
struct Cli {
    /// Which servers to time.
    #[arg(long, value_enum, default_value_t = Only::Both)]
    only: Only,
    /// Concurrent clients of each configuration, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 8])]
    clients: Vec<usize>,
    /// Rounds; each runs every configuration once on A and once on A'.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Scrapes per run, shared among the clients.
    #[arg(long, default_value_t = 1000)]
    scrapes: usize,
    /// Reviews per run with a TLS connection per review, shared among the clients.
    #[arg(long, default_value_t = 300)]
    fresh_reviews: usize,
    /// Reviews per run on kept-alive connections (one per client), shared among the clients.
    #[arg(long, default_value_t = 2000)]
    kept_reviews: usize,
    /// Resources (profiles) the device plugin's registry has series for.
    #[arg(long, default_value_t = 10)]
    resources: usize,
    /// Idle connections kept open beside the scraper, one configuration each, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [0, 100, 1000])]
    idle: Vec<usize>,
    /// Scrapes per run beside idle connections, one after the other.
    #[arg(long, default_value_t = 500)]
    idle_scrapes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Only {
    Both,
    Metrics,
    Webhook,
    /// Only the scrapes beside idle connections.
    Idle,
}

/// Every connect, read and write, and every review, ends within this or fails.
const IO: Duration = Duration::from_secs(10);

/// What the scrapers send: a scrape as Prometheus 3 writes it.
const SCRAPE: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Prometheus/3.5.0\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.2,*/*;q=0.1\r\nAccept-Encoding: identity\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n";

/// One way of loading a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Scrape,
    FreshReview,
    KeptReview,
}

impl Load {
    fn server(self) -> &'static str {
        match self {
            Load::Scrape => "metrics endpoint",
            Load::FreshReview | Load::KeptReview => "webhook",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Load::Scrape => "scrape, a connection each",
            Load::FreshReview => "review, a TLS connection each",
            Load::KeptReview => "review, kept-alive connections",
        }
    }
}

/// One run: its wall time, the latency of each request that was answered, and how many were not.
#[derive(Debug, Default)]
struct Run {
    wall: Duration,
    latencies: Vec<Duration>,
    failed: usize,
}

/// What one instance did over the rounds of one configuration.
#[derive(Debug, Default)]
struct Figures {
    /// Wall time per answered request, one per round (its inverse is the rate).
    per_request: Samples,
    latencies: Samples,
    failed: usize,
    requests: usize,
}

impl Figures {
    fn add(&mut self, run: Run) {
        let answered = run.latencies.len();
        self.requests += answered + run.failed;
        self.failed += run.failed;
        if answered > 0 {
            self.per_request.push(run.wall / answered as u32);
        }
        for l in run.latencies {
            self.latencies.push(l);
        }
    }
}

/// The servers under test and what their clients send.
struct Servers {
    metrics: [SocketAddr; 2],
    webhook: [SocketAddr; 2],
    connector: TlsConnector,
    review: Arc<Vec<u8>>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match bench(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("servers-bench: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn bench(cli: &Cli) -> Result<()> {
    if cli.rounds == 0 || cli.clients.contains(&0) {
        bail!("--rounds and every --clients must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the clients' runtime")?;
    let servers = runtime.block_on(start_servers(cli))?;
    let mut loads = Vec::new();
    if matches!(cli.only, Only::Both | Only::Metrics) {
        loads.push((Load::Scrape, cli.scrapes));
    }
    if matches!(cli.only, Only::Both | Only::Webhook) {
        loads.push((Load::FreshReview, cli.fresh_reviews));
        loads.push((Load::KeptReview, cli.kept_reviews));
    }
    // One short run on each instance first: threads, buffers and caches as in steady state.
    for &(load, count) in &loads {
        for instance in 0..2 {
            let warm = runtime.block_on(run(&servers, load, instance, (count / 10).max(8), 2))?;
            if warm.failed > 0 {
                bail!(
                    "the {} failed {} of its warm-up requests ({})",
                    load.server(),
                    warm.failed,
                    load.what()
                );
            }
        }
    }
    let mut results = Vec::new();
    for &(load, count) in &loads {
        for &clients in &cli.clients {
            results.push((
                load,
                count,
                clients,
                [Figures::default(), Figures::default()],
            ));
        }
    }
    for round in 0..cli.rounds {
        for (load, count, clients, figures) in &mut results {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for instance in order {
                let r = runtime.block_on(run(&servers, *load, instance, *count, *clients))?;
                figures[instance].add(r);
            }
        }
    }
    if !loads.is_empty() {
        print_table(cli, &servers, &results);
    }
    if cli.only != Only::Webhook && !cli.idle.is_empty() {
        beside_idle(cli, &servers)?;
    }
    Ok(())
}

type Results = [(Load, usize, usize, [Figures; 2])];

/// The table of the well-behaved loads, and what their requests were.
fn print_table(cli: &Cli, servers: &Servers, results: &Results) {
    println!("| server | load | clients | requests per run | instance | per s, rounds: median [min–max] | p50 ms | p99 ms | failed | A'/A per s (95% interval) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (load, count, clients, figures) in results {
        for (instance, f) in figures.iter().enumerate() {
            let rate = |d: Duration| {
                if d.is_zero() {
                    "–".to_owned()
                } else {
                    format!("{:.0}", 1.0 / d.as_secs_f64())
                }
            };
            // A high rate is a short time per request: min and max swap.
            let rates = format!(
                "{} [{}–{}]",
                rate(f.per_request.median()),
                rate(f.per_request.max()),
                rate(f.per_request.min())
            );
            let ratio = if instance == 1 {
                let r = figures[0].per_request.ratio_to(&f.per_request);
                match ratio_of_medians(&figures[0].per_request, &f.per_request, RESAMPLES) {
                    Some((lo, hi)) => format!("{r:.3} ({lo:.3}–{hi:.3})"),
                    None => format!("{r:.3}"),
                }
            } else {
                String::new()
            };
            let ms = |d: Duration| short(d.as_secs_f64() * 1e3);
            println!(
                "| {} | {} | {clients} | {count} | {} | {rates} | {} | {} | {} of {} | {ratio} |",
                load.server(),
                load.what(),
                ["A", "A'"][instance],
                ms(f.latencies.quantile(0.5)),
                ms(f.latencies.quantile(0.99)),
                f.failed,
                f.requests,
            );
        }
    }
    println!();
    println!(
        "{} rounds; the registry's answer {} bytes ({} resources), the review {} bytes.",
        cli.rounds,
        registry_bytes(cli.resources),
        cli.resources,
        servers.review.len()
    );
}

/// One run of scrapes beside idle connections.
#[derive(Debug, Default)]
struct IdleRun {
    scrapes: Run,
    /// Idle connections the endpoint closed during the scrapes (each opened again at once).
    closed: u64,
}

/// What one instance did beside one count of idle connections, over the rounds.
#[derive(Debug, Default)]
struct IdleFigures {
    latencies: Samples,
    failed: usize,
    scrapes: usize,
    closed: u64,
    wall: Duration,
}

impl IdleFigures {
    fn add(&mut self, run: IdleRun) {
        self.scrapes += run.scrapes.latencies.len() + run.scrapes.failed;
        self.failed += run.scrapes.failed;
        self.closed += run.closed;
        self.wall += run.scrapes.wall;
        for l in run.scrapes.latencies {
            self.latencies.push(l);
        }
    }
}

/// The scrapes beside each count of `--idle` connections, on A and A' in turn, and their table.
fn beside_idle(cli: &Cli, servers: &Servers) -> Result<()> {
    let most = cli.idle.iter().copied().max().unwrap_or(0);
    // The idle connections' descriptors and the endpoints' (64 each), with room for the rest.
    descriptors_for(most + 2 * 64 + 256)?;
    let mut rows: Vec<(usize, [IdleFigures; 2])> = cli
        .idle
        .iter()
        .map(|&idle| (idle, Default::default()))
        .collect();
    for round in 0..cli.rounds {
        for (idle, figures) in &mut rows {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for instance in order {
                let run = idle_run(servers.metrics[instance], *idle, cli.idle_scrapes)?;
                figures[instance].add(run);
            }
        }
    }
    println!();
    println!("### 22. The metrics endpoint beside idle connections");
    println!();
    println!("| idle connections | instance | scrapes | p50 ms | p99 ms | slowest ms | failed | idle connections closed per s |");
    println!("|---|---|---|---|---|---|---|---|");
    for (idle, figures) in &rows {
        for (instance, f) in figures.iter().enumerate() {
            let ms = |d: Duration| short(d.as_secs_f64() * 1e3);
            let closed = if f.wall.is_zero() {
                "–".to_owned()
            } else {
                format!("{:.0}", f.closed as f64 / f.wall.as_secs_f64())
            };
            println!(
                "| {idle} | {} | {} | {} | {} | {} | {} of {} | {closed} |",
                ["A", "A'"][instance],
                f.scrapes,
                ms(f.latencies.quantile(0.5)),
                ms(f.latencies.quantile(0.99)),
                ms(f.latencies.max()),
                f.failed,
                f.scrapes,
            );
        }
    }
    println!();
    println!(
        "{} rounds; one scraper, {} scrapes per run, each on a new connection; the idle ones opened again as they are closed.",
        cli.rounds, cli.idle_scrapes
    );
    Ok(())
}

/// Raises this process's soft limit of descriptors to `needed` when it is lower, within the
/// hard limit.
fn descriptors_for(needed: usize) -> Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("reading RLIMIT_NOFILE")?;
    let needed = needed as u64;
    if soft >= needed {
        return Ok(());
    }
    if hard < needed {
        bail!("{needed} descriptors needed, the hard limit is {hard}: raise it (ulimit -Hn) or lower --idle");
    }
    setrlimit(Resource::RLIMIT_NOFILE, needed, hard).context("raising RLIMIT_NOFILE")
}

/// `scrapes` scrapes of `address`, one after the other, while `idle` connections that send
/// nothing are open to it.
fn idle_run(address: SocketAddr, idle: usize, scrapes: usize) -> Result<IdleRun> {
    if idle == 0 {
        let started = Instant::now();
        let mut run = scraper(address, scrapes);
        run.wall = started.elapsed();
        return Ok(IdleRun {
            scrapes: run,
            closed: 0,
        });
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (opened, all_open) = std::sync::mpsc::channel();
        let holder = scope.spawn(|| hold_idle(address, idle, &stop, opened));
        // The scrapes start once every idle connection is open; a holder that failed first
        // says why below.
        let ready = all_open.recv().is_ok();
        let scrapes = ready.then(|| {
            let started = Instant::now();
            let mut run = scraper(address, scrapes);
            run.wall = started.elapsed();
            run
        });
        stop.store(true, Ordering::Relaxed);
        let closed = holder
            .join()
            .map_err(|_| anyhow::anyhow!("the idle connections' thread panicked"))?
            .with_context(|| format!("holding {idle} idle connections"))?;
        let scrapes = scrapes.context("the idle connections never all opened")?;
        Ok(IdleRun { scrapes, closed })
    })
}

/// Holds `n` connections to `address` that send nothing, each opened again as soon as the
/// endpoint closes it, until `stop`; says on `opened` when all are first open. Returns how many
/// the endpoint closed after that.
fn hold_idle(
    address: SocketAddr,
    n: usize,
    stop: &AtomicBool,
    opened: std::sync::mpsc::Sender<()>,
) -> std::io::Result<u64> {
    let connect = || TcpStream::connect_timeout(&address, IO);
    let mut held = (0..n)
        .map(|_| connect())
        .collect::<std::io::Result<Vec<_>>>()?;
    let _ = opened.send(());
    let mut closed = 0u64;
    let mut ended = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        ended.clear();
        {
            let mut fds: Vec<PollFd<'_>> = held
                .iter()
                .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN))
                .collect();
            match poll(&mut fds, PollTimeout::from(50u16)) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(errno) => return Err(errno.into()),
            }
            // An idle connection turns readable only when the endpoint closes it.
            ended.extend(
                fds.iter()
                    .enumerate()
                    .filter(|(_, fd)| fd.any().unwrap_or(true))
                    .map(|(i, _)| i),
            );
        }
        for &i in &ended {
            held[i] = connect()?;
            closed += 1;
        }
    }
    Ok(closed)
}

/// Starts A and A' of both servers.
async fn start_servers(cli: &Cli) -> Result<Servers> {
    let mut metrics = Vec::new();
    for _ in 0..2 {
        let endpoint = devinject_metrics::serve(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            Arc::new(registry(cli.resources)),
        )
        .context("starting the metrics endpoint")?;
        metrics.push(endpoint.address());
    }
    let bundle = certs::generate(&["127.0.0.1".to_owned()]).context("generating certificates")?;
    let table = Arc::new(table()?);
    let mut webhook = Vec::new();
    for _ in 0..2 {
        webhook.push(start_webhook(&bundle, Arc::clone(&table))?);
    }
    let servers = Servers {
        metrics: [metrics[0], metrics[1]],
        webhook: [webhook[0], webhook[1]],
        connector: connector(&bundle.ca_cert)?,
        review: Arc::new(review_body()),
    };
    // The review is one the webhook mutates: its answer carries a patch.
    for address in servers.webhook {
        let request = [
            review_head(servers.review.len(), false).as_bytes(),
            &servers.review,
        ]
        .concat();
        let mut answer = Vec::new();
        let answered = tokio::time::timeout(
            IO,
            exchange(
                &mut None,
                address,
                &servers.connector,
                &request,
                &mut answer,
            ),
        )
        .await;
        if !matches!(answered, Ok(Ok(true))) || !contains(&answer, b"\"patchType\":\"JSONPatch\"") {
            bail!(
                "the webhook did not mutate the benchmark's review: {}",
                String::from_utf8_lossy(&answer)
            );
        }
    }
    Ok(servers)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The head of a review's `POST`, as the API server writes it; `kept` leaves the connection
/// open for the next.
fn review_head(length: usize, kept: bool) -> String {
    format!(
        "POST /mutate?timeout=5s HTTP/1.1\r\nHost: devinject-webhook.devinject.svc:443\r\nUser-Agent: kube-apiserver-admission\r\nContent-Type: application/json\r\nAccept: application/json, */*\r\nContent-Length: {length}\r\n{}\r\n",
        if kept { "" } else { "Connection: close\r\n" }
    )
}

/// The device plugin's registry on a node with `resources` resources of 8 devices each, every
/// family with series (the build info, devices by health, allocations, refusals by reason, the
/// allocation latency histogram, registrations, re-registrations, health changes).
fn registry(resources: usize) -> Registry {
    let mut registry = Registry::default();
    devinject_metrics::register_build_info(
        &mut registry,
        "device-plugin",
        env!("CARGO_PKG_VERSION"),
    );
    let metrics = PluginMetrics::default();
    metrics.register(&mut registry);
    for r in 0..resources {
        let resource = format!("devinject.io/profile-{r}");
        let scan: Vec<ScannedDevice> = (0..8)
            .map(|d| ScannedDevice {
                id: format!("dev-{r}-{d}"),
                numa_node: Some(d / 4),
                healthy: d != 7,
            })
            .collect();
        metrics.advertised(&resource, &Advertisement::new(1).with_scan(&scan));
        metrics.allocated(&resource, 3);
        metrics.refused(&resource, "unhealthy");
        metrics.refused(&resource, "unknown-device");
        for us in [80, 300, 1200, 5000] {
            metrics.allocate_took(&resource, Duration::from_micros(us));
        }
        metrics.registered(&resource);
        metrics.reregistering(&resource, "socket-removed");
        metrics.health_changed(&resource, true, false);
        metrics.health_changed(&resource, false, true);
    }
    registry
}

fn registry_bytes(resources: usize) -> usize {
    let mut text = String::new();
    devinject_metrics::prometheus_client::encoding::text::encode(&mut text, &registry(resources))
        .map_or(0, |()| text.len())
}

/// A table with the shipped FPGA profile's shape and one accelerator function that has a
/// friendly name, which the review asks for.
fn table() -> Result<Table> {
    let profile = Profile::parse(
        "name = \"intel-fpga\"\nresource = \"fpga.intel.com/port\"\n[discovery]\nnodes = [\"dfl-port.[0-9]*\", \"intel-fpga-port.[0-9]*\"]\nid = \"name\"\n[prepare]\ncommand = [\"/usr/local/sbin/fpga-load-function\"]\ntimeout_ms = 120000\nfunctions = [{ id = \"d8424dc4a4a3c413f89e433683f9040b\", resource = \"fpga.intel.com/arria10-nlb0\" }]\n",
        Path::new("intel-fpga.toml"),
    )
    .context("parsing the benchmark's profile")?;
    let profiles = ProfileSet::from_profiles(vec![profile], Path::new("/etc/devinject/profiles"))
        .context("the benchmark's profile set")?;
    Ok(Table::new(&profiles))
}

/// Serves `table` on a listener of its own, on a thread and current-thread runtime of its own,
/// as `devinject-webhook serve` does; the listener is bound before this returns, so connections
/// wait in its backlog until the server accepts them.
fn start_webhook(bundle: &certs::Bundle, table: Arc<Table>) -> Result<SocketAddr> {
    let tls = server::tls_config(bundle.cert.as_bytes(), bundle.key.as_bytes())
        .context("the webhook's TLS configuration")?;
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("binding the webhook's listener")?;
    listener
        .set_nonblocking(true)
        .context("a non-blocking listener")?;
    let address = listener.local_addr()?;
    std::thread::Builder::new()
        .name("webhook".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => return eprintln!("servers-bench: the webhook's runtime: {e}"),
            };
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => {
                        server::serve(listener, tls, table, WebhookMetrics::default()).await;
                    }
                    Err(e) => eprintln!("servers-bench: the webhook's listener: {e}"),
                }
            });
        })
        .context("starting the webhook's thread")?;
    Ok(address)
}

/// A TLS client trusting `ca_pem`, without session resumption: every new connection does a
/// full handshake, as the API server's webhook client does.
fn connector(ca_pem: &str) -> Result<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.context("the CA certificate")?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// An AdmissionReview of a pod's creation as the API server sends it: a Deployment's pod with
/// an application container asking for the FPGA function by its friendly name and a sidecar
/// asking for nothing (answered allowed, with a patch).
fn review_body() -> Vec<u8> {
    let pod = json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "inference-7d9f8b6c5d-",
            "namespace": "ml-serving",
            "uid": "0b3f5c2e-8a61-4f7e-9d2c-5e1a7b3c9d40",
            "creationTimestamp": null,
            "labels": {
                "app.kubernetes.io/name": "inference",
                "app.kubernetes.io/component": "server",
                "app.kubernetes.io/part-of": "ml-platform",
                "pod-template-hash": "7d9f8b6c5d"
            },
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "inference-7d9f8b6c5d",
                "uid": "5a1c9e3b-2d7f-4b8a-a6e0-3f9c1d2b7e54",
                "controller": true,
                "blockOwnerDeletion": true
            }],
            "managedFields": [{
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2025-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app.kubernetes.io/name": {}}, "f:ownerReferences": {".": {}}}, "f:spec": {"f:containers": {}}}
            }]
        },
        "spec": {
            "volumes": [
                {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                {"name": "config", "configMap": {"name": "inference-config", "defaultMode": 420}},
                {"name": "kube-api-access-x2x7q", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ], "defaultMode": 420}}
            ],
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example.com/ml/inference:2.14.1",
                    "args": ["--model-dir=/models", "--port=8080", "--metrics-port=9090"],
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}, {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                    "resources": {
                        "limits": {"cpu": "4", "memory": "8Gi", "fpga.intel.com/arria10-nlb0": "1"},
                        "requests": {"cpu": "2", "memory": "8Gi", "fpga.intel.com/arria10-nlb0": "1"}
                    },
                    "volumeMounts": [
                        {"name": "models", "readOnly": true, "mountPath": "/models"},
                        {"name": "config", "mountPath": "/etc/inference"},
                        {"name": "kube-api-access-x2x7q", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
                    ],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true}
                },
                {
                    "name": "log-shipper",
                    "image": "registry.example.com/infra/log-shipper:1.8.0",
                    "resources": {"limits": {"cpu": "200m", "memory": "128Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}},
                    "volumeMounts": [{"name": "kube-api-access-x2x7q", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent"
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "inference",
            "serviceAccount": "inference",
            "securityContext": {"fsGroup": 2000},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {}
    });
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml-serving",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "c0a7e4d2-1b3f-4e5a-9c8d-7f6e5d4c3b2a",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
            },
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    }))
    .unwrap_or_default()
}

/// One run of `count` requests of `load` on instance `instance`, by `clients` clients at once.
async fn run(
    servers: &Servers,
    load: Load,
    instance: usize,
    count: usize,
    clients: usize,
) -> Result<Run> {
    let share = |c: usize| count / clients + usize::from(c < count % clients);
    let started = Instant::now();
    let mut run = Run::default();
    match load {
        Load::Scrape => {
            let address = servers.metrics[instance];
            // Blocking clients on threads of their own; nothing else runs on this runtime.
            let parts = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..clients)
                    .map(|c| scope.spawn(move || scraper(address, share(c))))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_default())
                    .collect::<Vec<Run>>()
            });
            for part in parts {
                run.latencies.extend(part.latencies);
                run.failed += part.failed;
            }
        }
        Load::FreshReview | Load::KeptReview => {
            let mut tasks = tokio::task::JoinSet::new();
            for c in 0..clients {
                let address = servers.webhook[instance];
                let connector = servers.connector.clone();
                let review = Arc::clone(&servers.review);
                let n = share(c);
                let kept = load == Load::KeptReview;
                tasks.spawn(async move { reviewer(address, connector, review, n, kept).await });
            }
            while let Some(part) = tasks.join_next().await {
                let part = part.context("a reviewer")?;
                run.latencies.extend(part.latencies);
                run.failed += part.failed;
            }
        }
    }
    run.wall = started.elapsed();
    if run.latencies.is_empty() && count > 0 {
        bail!(
            "the {} answered none of {count} requests ({})",
            load.server(),
            load.what()
        );
    }
    Ok(run)
}

/// `count` scrapes of `address`, one after the other, each on a new connection.
fn scraper(address: SocketAddr, count: usize) -> Run {
    let mut run = Run::default();
    let mut answer = Vec::with_capacity(64 * 1024);
    for _ in 0..count {
        let started = Instant::now();
        answer.clear();
        match scrape(address, &mut answer) {
            Ok(true) => run.latencies.push(started.elapsed()),
            Ok(false) | Err(_) => run.failed += 1,
        }
    }
    run
}

/// One scrape; true when the answer is a 200 with all the body its length says.
fn scrape(address: SocketAddr, answer: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect_timeout(&address, IO)?;
    stream.set_read_timeout(Some(IO))?;
    stream.set_write_timeout(Some(IO))?;
    stream.write_all(SCRAPE)?;
    stream.read_to_end(answer)?;
    Ok(answer.starts_with(b"HTTP/1.1 200 ") && complete(answer) == Some(answer.len()))
}

/// The length of the answer that `head`'s Content-Length makes, once its head is complete.
fn complete(answer: &[u8]) -> Option<usize> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    })?;
    Some(end + length)
}

/// `count` reviews of `address`, one after the other: each on a new TLS connection, or all on
/// one kept-alive connection (a new one only when the server closed it, counted as a failure).
async fn reviewer(
    address: SocketAddr,
    connector: TlsConnector,
    review: Arc<Vec<u8>>,
    count: usize,
    kept: bool,
) -> Run {
    let mut request = review_head(review.len(), kept).into_bytes();
    request.extend_from_slice(&review);
    let mut run = Run::default();
    let mut answer = Vec::with_capacity(16 * 1024);
    let mut connection = None;
    for _ in 0..count {
        let started = Instant::now();
        let answered = tokio::time::timeout(
            IO,
            exchange(&mut connection, address, &connector, &request, &mut answer),
        )
        .await;
        match answered {
            Ok(Ok(true)) => run.latencies.push(started.elapsed()),
            _ => {
                run.failed += 1;
                connection = None;
            }
        }
        if !kept {
            connection = None;
        }
    }
    run
}

type Connection = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// One review on `connection` (opened first when there is none); true when answered 200 with
/// the review allowed.
async fn exchange(
    connection: &mut Option<Connection>,
    address: SocketAddr,
    connector: &TlsConnector,
    request: &[u8],
    answer: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let stream = match connection {
        Some(stream) => stream,
        None => {
            let tcp = tokio::net::TcpStream::connect(address).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::from(std::net::IpAddr::from([127, 0, 0, 1]));
            connection.insert(connector.connect(name, tcp).await?)
        }
    };
    stream.write_all(request).await?;
    stream.flush().await?;
    read_answer(stream, answer).await?;
    let allowed = contains(answer, b"\"allowed\":true");
    Ok(answer.starts_with(b"HTTP/1.1 200 ") && allowed)
}

/// Reads one answer (its head and the body its Content-Length says) into `answer`.
async fn read_answer(
    stream: &mut (impl AsyncRead + Unpin),
    answer: &mut Vec<u8>,
) -> std::io::Result<()> {
    answer.clear();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(length) = complete(answer) {
            if answer.len() >= length {
                return Ok(());
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        answer.extend_from_slice(&chunk[..n]);
    }
}
