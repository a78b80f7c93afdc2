//! `devinject-nri`: the NRI plugin daemon. Connects to containerd's NRI socket, registers, and
//! serves until containerd goes away; then connects again when the socket answers, so a
//! containerd restart or upgrade needs nothing from anyone.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use devinject_hook::config::HostConfig;
use devinject_nri::plugin::Plugin;
use devinject_nri::session::{serve, End, Registration};

/// devinject as an NRI plugin.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// containerd's NRI socket.
    #[arg(long, value_name = "PATH", default_value = "/var/run/nri/nri.sock")]
    socket: PathBuf,
    /// The host configuration (profiles, policy, pod-resources helper), as for the hook.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The plugin's name.
    #[arg(long, default_value = "devinject")]
    name: String,
    /// The plugin's index: two digits, its place among NRI plugins.
    #[arg(long, default_value = "10", value_parser = index)]
    index: String,
    /// Exit when containerd closes the connection, instead of connecting again.
    #[arg(long)]
    once: bool,
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
    let config = HostConfig::load(args.config.as_deref()).context("load the host configuration")?;
    let plugin = Plugin::new(config, args.config.clone());
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
