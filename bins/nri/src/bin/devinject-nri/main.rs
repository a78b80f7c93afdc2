//! `devinject-nri`: the NRI plugin daemon. Connects to containerd's NRI socket, registers, and
//! serves until containerd goes away; then connects again when the socket answers, so a
//! containerd restart or upgrade needs nothing from anyone.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use devinject_hostconfig::HostConfig;
use devinject_metrics::address::port;
use devinject_metrics::prometheus_client::registry::Registry;
use devinject_metrics::{register_build_info, MetricsAddress};
use devinject_nri::plugin::Plugin;
use devinject_nri::session::{serve, End, Registration};

/// devinject as an NRI plugin.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// containerd's NRI socket.
    #[arg(long, value_name = "PATH", default_value = "/var/run/nri/nri.sock")]
    socket: PathBuf,
    /// The host configuration (profiles, policy, pod-resources socket), as for the hook.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The plugin's name.
    #[arg(long, default_value = "devinject")]
    name: String,
    /// The plugin's index: two digits, its place among NRI plugins.
    #[arg(long, default_value = "10", value_parser = index)]
    index: String,
    /// Where the host's `/` is mounted (a DaemonSet pod's hostPath): the plugin chroots there
    /// first, so every path it reads, and every path it hands containerd (the finish hook and
    /// the files it mounts), is the host's.
    #[arg(long, value_name = "DIR")]
    host_root: Option<PathBuf>,
    /// Exit when containerd closes the connection, instead of connecting again.
    #[arg(long)]
    once: bool,
    /// Where to serve Prometheus metrics (`GET /metrics`): `off`, an IP address (port 9471), or
    /// an IP address and a port. Loopback unless given: the manifests pass the pod's IP.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:9471",
        value_parser = |s: &str| MetricsAddress::parse(s, port::NRI))]
    metrics_address: MetricsAddress,
}

fn index(s: &str) -> Result<String, String> {
    if s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()) {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?} is not two digits (00 to 99)"))
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // A daemon: timestamps, and `info` unless DEVINJECT_LOG says otherwise.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DEVINJECT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(root) = &args.host_root {
        nix::unistd::chroot(root)
            .with_context(|| format!("chroot into the host root {}", root.display()))?;
        std::env::set_current_dir("/").context("chdir to / in the host root")?;
    }
    let config = HostConfig::load(args.config.as_deref()).context("load the host configuration")?;
    let plugin = Arc::new(Plugin::new(config, args.config.clone()));
    let mut registry = Registry::default();
    register_build_info(&mut registry, "nri", env!("CARGO_PKG_VERSION"));
    plugin.metrics().register(&mut registry);
    let _metrics = devinject_metrics::start(args.metrics_address, registry);
    let registration = Registration {
        name: args.name.clone(),
        index: args.index.clone(),
    };
    let mut waiting = false;
    loop {
        match serve(&args.socket, &registration, &plugin) {
            Ok(End::Shutdown) => {
                tracing::info!("the runtime asked the plugin to shut down");
                return Ok(());
            }
            Ok(End::Closed) => {
                tracing::info!("the runtime closed the connection");
                waiting = false;
            }
            Err(e) if !waiting => {
                tracing::warn!(
                    "{e}; connecting again when {} answers",
                    args.socket.display()
                );
                waiting = true;
            }
            Err(_) => {}
        }
        if args.once {
            anyhow::bail!("the NRI session with {} ended", args.socket.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
