//! `devinject-webhook`: the mutating admission webhook for friendly device names
//! (docs/prepare.md).
//!
//! `serve` answers the API server over HTTPS; `certs` writes a private CA and a serving
//! certificate for the self-signed bootstrap. Exit codes: 0 done, 1 failure at run time, 2 bad
//! arguments, 3 a configuration mistake (profiles, certificate).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use devinject_discovery::profile_dir;
use devinject_metrics::address::port;
use devinject_metrics::prometheus_client::registry::Registry;
use devinject_metrics::{register_build_info, MetricsAddress};
use devinject_webhook::certs;
use devinject_webhook::metrics::WebhookMetrics;
use devinject_webhook::mutate::Table;
use devinject_webhook::server;
use tracing_subscriber::EnvFilter;

/// Mutating admission webhook: friendly device names to the served resource and a function.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve AdmissionReviews on POST /mutate (and GET /healthz).
    Serve {
        /// The directory of device profiles (*.toml).
        #[arg(long, default_value = devinject_devices::profile_set::DEFAULT_PROFILES_DIR)]
        profiles_dir: PathBuf,
        /// Where to listen.
        #[arg(long, default_value = "0.0.0.0:8443")]
        listen: SocketAddr,
        /// The serving certificate (PEM chain).
        #[arg(long, default_value = "/etc/devinject-webhook/tls.crt")]
        tls_cert: PathBuf,
        /// Its private key (PEM).
        #[arg(long, default_value = "/etc/devinject-webhook/tls.key")]
        tls_key: PathBuf,
        /// Where to serve Prometheus metrics (`GET /metrics`, plain HTTP): `off`, an IP address
        /// (port 9472), or an IP address and a port. Loopback unless given: the manifests pass
        /// the pod's IP.
        #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:9472",
            value_parser = |s: &str| MetricsAddress::parse(s, port::WEBHOOK))]
        metrics_address: MetricsAddress,
    },
    /// Write ca.crt, tls.crt and tls.key for the webhook's Service (self-signed bootstrap).
    Certs {
        /// The webhook's Service.
        #[arg(long, default_value = "devinject-webhook")]
        service: String,
        #[arg(long, default_value = "devinject-system")]
        namespace: String,
        /// Another DNS name or IP address for the certificate (repeatable).
        #[arg(long = "name", value_name = "NAME")]
        names: Vec<String>,
        /// The directory to write into.
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match run(args.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, err)) => {
            eprintln!("devinject-webhook: {err:#}");
            ExitCode::from(code)
        }
    }
}

fn run(command: Command) -> Result<(), (u8, anyhow::Error)> {
    let config = |e: anyhow::Error| (3, e);
    match command {
        Command::Certs {
            service,
            namespace,
            names,
            out,
        } => {
            let mut all = certs::service_names(&service, &namespace);
            all.extend(names);
            let bundle = certs::generate(&all).map_err(|e| config(e.into()))?;
            bundle.write(&out).map_err(|e| (1, e.into()))?;
            println!(
                "wrote {}/ca.crt, tls.crt and tls.key for {}",
                out.display(),
                all.join(", ")
            );
            Ok(())
        }
        Command::Serve {
            profiles_dir,
            listen,
            tls_cert,
            tls_key,
            metrics_address,
        } => {
            let profiles = profile_dir::load(&profiles_dir).map_err(|e| config(e.into()))?;
            let table = Table::new(&profiles);
            let read = |p: &PathBuf| {
                std::fs::read(p)
                    .map_err(|e| config(anyhow::anyhow!("cannot read {}: {e}", p.display())))
            };
            let tls = server::tls_config(&read(&tls_cert)?, &read(&tls_key)?)
                .map_err(|e| config(e.into()))?;
            let metrics = WebhookMetrics::default();
            let mut registry = Registry::default();
            register_build_info(&mut registry, "webhook", env!("CARGO_PKG_VERSION"));
            metrics.register(&mut registry);
            let _metrics = devinject_metrics::start(metrics_address, registry);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| (1, anyhow::anyhow!("cannot start the async runtime: {e}")))?;
            runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind(listen)
                    .await
                    .map_err(|e| (1, anyhow::anyhow!("cannot listen on {listen}: {e}")))?;
                tracing::info!(%listen, friendly_names = table.len(), "serving");
                tokio::select! {
                    () = server::serve(listener, tls, Arc::new(table), metrics) => Ok(()),
                    _ = tokio::signal::ctrl_c() => Ok(()),
                    () = terminated() => Ok(()),
                }
            })
        }
    }
}

/// Resolves on SIGTERM (the kubelet's stop).
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
