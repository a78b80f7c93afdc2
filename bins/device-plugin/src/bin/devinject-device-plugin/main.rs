//! `devinject-device-plugin`: the kubelet device plugin for devinject profiles.
//!
//! Exit codes: 0 after SIGTERM/SIGINT, 1 on a failure at run time, 2 on bad arguments, 3 on a
//! configuration mistake (invalid profile, unknown `--profile`, nothing to serve).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use devinject_apiserver::pod_events;
use devinject_device_plugin::claim_holds::ClaimHoldsConfig;
use devinject_device_plugin::metrics::PluginMetrics;
use devinject_device_plugin::node_refusals::NodeRefusals;
use devinject_device_plugin::DaemonConfig;
use devinject_discovery::root_args::DeviceRootArgs;
use devinject_metrics::address::port;
use devinject_metrics::prometheus_client::registry::Registry;
use devinject_metrics::{register_build_info, MetricsAddress};
use tracing_subscriber::EnvFilter;

/// The documented exit codes.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
enum Exit {
    Success = 0,
    Failure = 1,
    Configuration = 3,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Serve devinject device profiles to the kubelet as extended resources.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The kubelet's device-plugins directory (holds kubelet.sock).
    #[arg(long, default_value = "/var/lib/kubelet/device-plugins")]
    kubelet_dir: PathBuf,
    /// The directory of device profiles (*.toml).
    #[arg(long, default_value = devinject_devices::profile_set::DEFAULT_PROFILES_DIR)]
    profiles_dir: PathBuf,
    #[command(flatten)]
    roots: DeviceRootArgs,
    /// A profile to serve, even before its devices appear (repeatable). Default: every profile
    /// that finds devices at start.
    #[arg(long = "profile", value_name = "NAME")]
    profiles: Vec<String>,
    /// Log format on stderr. The level comes from RUST_LOG (default: info).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Where to serve Prometheus metrics (`GET /metrics`): `off`, an IP address (port 9470), or
    /// an IP address and a port. Loopback unless given: the manifests pass the pod's IP.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:9470",
        value_parser = |s: &str| MetricsAddress::parse(s, port::DEVICE_PLUGIN))]
    metrics_address: MetricsAddress,
    /// The node's decision log directory (the host config's `decision_log_dir`): the refusals
    /// the hook, the shim and the NRI plugin wrote there are counted in
    /// `devinject_node_refusals_total` as they are written.
    #[arg(long, value_name = "DIR", default_value = devinject_decision_log::DEFAULT_DIR)]
    decision_log_dir: PathBuf,
    /// Post each refusal of the decision log that names its pod as an Event on that pod
    /// (`kubectl describe pod`), rate-limited. Needs `create` on `events.k8s.io` `events` (the
    /// manifests' ClusterRole `devinject-events`) and `--node-name`.
    #[arg(long, requires = "node_name")]
    pod_events: bool,
    /// The node this runs on, the Events' reporting instance (the manifests pass the pod's
    /// `spec.nodeName`).
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    node_name: Option<String>,
    /// The kubelet's pod-resources socket: the plugin reads there which devices prepared DRA
    /// claims of `--dra-driver` hold on this node (with `--node-name`), and gives none of them
    /// to a container (docs/dra.md, "From the device plugin to DRA").
    #[arg(long, value_name = "PATH", default_value = devinject_hostconfig::DEFAULT_POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
    /// The name devinject's DRA driver publishes under, for `--pod-resources-socket`.
    #[arg(long, value_name = "NAME", default_value = devinject_devices::dra_names::DEFAULT_DRA_DRIVER)]
    dra_driver: String,
    /// The API server's kubeconfig for `--pod-events`. Default: the pod's service account.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
}

/// The Events' reporting controller.
const REPORTING_CONTROLLER: &str = "devinject.io/device-plugin";

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => subscriber.init(),
        LogFormat::Json => subscriber.json().init(),
    }
    let config = DaemonConfig {
        kubelet_dir: args.kubelet_dir,
        profiles_dir: args.profiles_dir,
        roots: args.roots.host_roots(),
        profiles: args.profiles,
        metrics: PluginMetrics::default(),
        claim_holds: args.node_name.clone().map(|node| ClaimHoldsConfig {
            socket: args.pod_resources_socket.clone(),
            driver: args.dra_driver.clone(),
            node,
        }),
    };
    let mut registry = Registry::default();
    register_build_info(&mut registry, "device-plugin", env!("CARGO_PKG_VERSION"));
    config.metrics.register(&mut registry);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("devinject-device-plugin: cannot start the async runtime: {err}");
            return code(Exit::Failure);
        }
    };
    let (events, posting) = match &args.node_name {
        Some(node) if args.pod_events => {
            let client = match runtime.block_on(api_client(args.kubeconfig.as_deref())) {
                Ok(client) => client,
                Err(err) => {
                    eprintln!("devinject-device-plugin: --pod-events: {err}");
                    return code(Exit::Configuration);
                }
            };
            let (queue, posting) = pod_events::queue();
            let reporter = pod_events::Reporter {
                controller: REPORTING_CONTROLLER,
                instance: node.clone(),
            };
            (
                Some(queue),
                Some(pod_events::post(client, reporter, posting)),
            )
        }
        _ => (None, None),
    };
    // Followed on a thread of its own, when metrics are served or refusals become Events.
    let serve_metrics = matches!(args.metrics_address, MetricsAddress::At(_));
    let mut _followed = None;
    if serve_metrics || events.is_some() {
        match NodeRefusals::new(&args.decision_log_dir, events) {
            Ok(refusals) if serve_metrics => {
                registry.register_collector(Box::new(refusals));
            }
            Ok(refusals) => _followed = Some(refusals),
            Err(error) => tracing::warn!(
                %error,
                "cannot start following the decision log: devinject_node_refusals_total is not served and no refusal becomes an Event"
            ),
        }
    }
    let _metrics = devinject_metrics::start(args.metrics_address, registry);
    let served = async {
        if let Some(posting) = posting {
            tokio::spawn(posting);
        }
        devinject_device_plugin::run(config).await
    };
    match runtime.block_on(served) {
        Ok(()) => code(Exit::Success),
        Err(err) => {
            // Every message already carries its causes (path, resource, system error), so the
            // top-level message is the whole chain.
            eprintln!("devinject-device-plugin: {err}");
            code(if err.is_configuration() {
                Exit::Configuration
            } else {
                Exit::Failure
            })
        }
    }
}

/// The API server's client, from `kubeconfig` or the pod's service account.
async fn api_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    devinject_apiserver::install_tls_provider();
    let api = devinject_apiserver::ApiConfig::load(kubeconfig, false).await?;
    Ok(kube::Client::try_from(api.config)?)
}

fn code(exit: Exit) -> ExitCode {
    ExitCode::from(exit as u8)
}
