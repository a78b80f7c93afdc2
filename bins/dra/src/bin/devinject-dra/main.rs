//! `devinject-dra`: devinject's DRA driver, a kubelet plugin for Dynamic Resource Allocation
//! driven by devinject's profiles (docs/dra.md).
//!
//! `devinject-dra [OPTIONS]` serves: it registers with the kubelet through its plugin registry,
//! publishes this node's devices as ResourceSlices and prepares the claims the kubelet hands it.
//! `devinject-dra device-classes` prints the DeviceClasses of the profiles, to apply once per
//! cluster (the manifests ship them).
//!
//! Exit codes: 0 after SIGTERM/SIGINT, 1 on a failure at run time, 2 on bad arguments, 3 on a
//! configuration mistake (invalid profile, no node name, no API server credentials).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use devinject_apiserver::pod_events;
use devinject_apiserver::ApiConfig;
use devinject_discovery::profile_dir;
use devinject_discovery::root_args::{DeviceRootArgs, DriverRootArg};
use devinject_dra::claim_spec::SpecContext;
use devinject_dra::driver::{Driver, DriverConfig};
use devinject_dra::metrics::DraMetrics;
use devinject_dra::naming::DEFAULT_DRIVER;
use devinject_dra::serve::{serve, ServeConfig};
use devinject_dra::slices::device_classes_manifest;
use devinject_metrics::address::port;
use devinject_metrics::prometheus_client::registry::Registry;
use devinject_metrics::{register_build_info, MetricsAddress};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the DeviceClass of every profile (YAML documents for `kubectl apply -f -`).
    DeviceClasses {
        /// The directory of device profiles (*.toml).
        #[arg(long, default_value = devinject_devices::profile_set::DEFAULT_PROFILES_DIR)]
        profiles_dir: PathBuf,
        /// The DRA driver name.
        #[arg(long, default_value = DEFAULT_DRIVER)]
        driver: String,
        /// Leave out `extendedResourceName`: pods asking for the profiles' resources in their
        /// limits are then served by the device plugin only.
        #[arg(long)]
        no_extended_resources: bool,
    },
}

/// Serve devinject's profiles to the kubelet as a DRA driver.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// This node's name as its kubelet registered it (the downward API's `spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// A kubeconfig for the API server; default: the pod's service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The DRA driver name the ResourceSlices and DeviceClasses use.
    #[arg(long, default_value = DEFAULT_DRIVER)]
    driver: String,
    /// The directory of device profiles (*.toml).
    #[arg(long, default_value = devinject_devices::profile_set::DEFAULT_PROFILES_DIR)]
    profiles_dir: PathBuf,
    #[command(flatten)]
    roots: DeviceRootArgs,
    #[command(flatten)]
    driver_root: DriverRootArg,
    /// The CDI spec directory the container runtime reads.
    #[arg(long, default_value = "/var/run/cdi")]
    cdi_dir: PathBuf,
    /// `devinject-hook` as the runtime runs it, for the claim specs' finish hook.
    #[arg(long, default_value = "/opt/devinject/bin/devinject-hook")]
    hook_path: PathBuf,
    /// `--config` for the finish hook.
    #[arg(long)]
    hook_config: Option<PathBuf>,
    /// The kubelet's plugins directory: the driver's socket and checkpoint go below
    /// `<dir>/<driver>/`.
    #[arg(long, default_value = "/var/lib/kubelet/plugins")]
    plugins_dir: PathBuf,
    /// The kubelet's plugin registry, where it looks for registration sockets.
    #[arg(long, default_value = "/var/lib/kubelet/plugins_registry")]
    registry_dir: PathBuf,
    /// Where the host's `/` is mounted (the DaemonSet pod's hostPath): the driver chroots there
    /// once it has its API server credentials, so that every other path above, every path it
    /// writes into a CDI spec and every prepare step it runs is the host's.
    #[arg(long, value_name = "DIR")]
    host_root: Option<PathBuf>,
    /// Where to serve Prometheus metrics (`GET /metrics`): `off`, an IP address (port 9473), or
    /// an IP address and a port. Loopback unless given: the manifests pass the pod's IP.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:9473",
        value_parser = |s: &str| MetricsAddress::parse(s, port::DRA))]
    metrics_address: MetricsAddress,
    /// Post each refusal of the node's decision log that names its pod as an Event on that pod
    /// (`kubectl describe pod`), rate-limited: for nodes where no device plugin does. Needs
    /// `create` on `events.k8s.io` `events` (the manifests' ClusterRole `devinject-events`).
    #[arg(long)]
    pod_events: bool,
    /// The kubelet's pod-resources socket, a host path: the driver reads which devices running
    /// containers hold through devinject's device plugin there, and neither publishes nor
    /// prepares those until they are let go (docs/dra.md, "From the device plugin to DRA").
    #[arg(long, value_name = "PATH", default_value = devinject_hostconfig::DEFAULT_POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
    /// The node's decision log directory (the host config's `decision_log_dir`), a host path.
    #[arg(long, value_name = "DIR", default_value = devinject_decision_log::DEFAULT_DIR)]
    decision_log_dir: PathBuf,
}

/// The Events' reporting controller.
const REPORTING_CONTROLLER: &str = "devinject.io/dra";

fn main() -> ExitCode {
    let args = Args::parse();
    devinject_apiserver::install_tls_provider();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match args.command {
        Some(Command::DeviceClasses {
            profiles_dir,
            driver,
            no_extended_resources,
        }) => print_device_classes(&profiles_dir, &driver, no_extended_resources),
        None => run(args.serve),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinject-dra: {e:#}");
            ExitCode::from(if e.is::<ConfigurationError>() { 3 } else { 1 })
        }
    }
}

/// A mistake in what the driver was given, as opposed to a failure at run time (exit code 3).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ConfigurationError(String);

fn print_device_classes(
    profiles_dir: &std::path::Path,
    driver: &str,
    no_extended_resources: bool,
) -> Result<()> {
    let profiles =
        profile_dir::load(profiles_dir).map_err(|e| ConfigurationError(e.to_string()))?;
    print!(
        "{}",
        device_classes_manifest(driver, &profiles, !no_extended_resources)
    );
    Ok(())
}

fn run(args: ServeArgs) -> Result<()> {
    let node = args
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ConfigurationError(
            "no node name: pass --node-name or set NODE_NAME (the downward API's spec.nodeName)"
                .into(),
        )
        })?;
    let driver_dir = args.plugins_dir.join(&args.driver);
    let metrics = DraMetrics::default();
    let mut registry = Registry::default();
    register_build_info(&mut registry, "dra", env!("CARGO_PKG_VERSION"));
    metrics.register(&mut registry);
    let _metrics = devinject_metrics::start(args.metrics_address, registry);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async move {
        let api = ApiConfig::load(args.kubeconfig.as_deref(), args.host_root.is_some())
            .await
            .map_err(|e| ConfigurationError(e.to_string()))?;
        // Made before the chroot: it reads the CA bundle by its path in the pod.
        let client = kube::Client::try_from(api.config).context("make the API server client")?;
        if let Some(root) = &args.host_root {
            nix::unistd::chroot(root)
                .with_context(|| format!("chroot into the host root {}", root.display()))?;
            std::env::set_current_dir("/").context("chdir to / in the host root")?;
        }
        // The token's directory stays open for the client's life (devinject_apiserver::config).
        let _token_dir = api.token_dir;
        // Every path from here on is the host's.
        let _followed = if args.pod_events {
            let (queue, posting) = pod_events::queue();
            let watcher = devinject_decision_log::Watcher::spawn(&args.decision_log_dir, queue)
                .context("follow the decision log for --pod-events")?;
            let reporter = pod_events::Reporter {
                controller: REPORTING_CONTROLLER,
                instance: node.clone(),
            };
            tokio::spawn(pod_events::post(client.clone(), reporter, posting));
            Some(watcher)
        } else {
            None
        };
        let profiles =
            profile_dir::load(&args.profiles_dir).map_err(|e| ConfigurationError(e.to_string()))?;
        let config = DriverConfig {
            node: node.clone(),
            profiles: profiles.clone(),
            roots: args.roots.with_driver_root(&args.driver_root),
            spec: SpecContext {
                driver: args.driver.clone(),
                root: PathBuf::from("/"),
                cdi_dir: args.cdi_dir,
                hook_path: args.hook_path,
                hook_config: args.hook_config,
                lib_dir: devinject_devices::ContainerLayout::default().lib_dir,
            },
            checkpoint: driver_dir.join("checkpoint.json"),
            metadata_dir: driver_dir.join(devinject_dra::device_metadata::HOST_DIR),
        };
        let roots = config.roots.clone();
        // What the device plugin gave running containers, read from the kubelet (docs/dra.md).
        let (holds, plugin_holds) = tokio::sync::watch::channel(Default::default());
        let (first_call, holds_read) = tokio::sync::oneshot::channel();
        tokio::spawn(devinject_dra::plugin_holds::poll(
            args.pod_resources_socket,
            profiles.clone(),
            holds,
            first_call,
        ));
        // The administrators' DeviceTaintRules, honoured at prepare (docs/dra.md, "Taints").
        let (rules, taint_rules) = tokio::sync::watch::channel(Default::default());
        tokio::spawn(devinject_dra::taint_rules::watch(
            client.clone(),
            args.driver.clone(),
            rules,
        ));
        let driver = std::sync::Arc::new(
            Driver::new(config, client.clone())?
                .with_metrics(metrics.clone())
                .with_plugin_holds(plugin_holds.clone())
                .with_taint_rules(taint_rules),
        );
        // Puts back the specs of this boot's claims that go missing (docs/dra.md).
        tokio::spawn(std::sync::Arc::clone(&driver).keep_specs());
        // Prepares before binding, where a profile asks for it (docs/prepare.md).
        let (failures, prepare_failed) = tokio::sync::watch::channel(Default::default());
        if profiles
            .iter()
            .any(|p| p.prepare.as_ref().is_some_and(|p| p.before_binding))
        {
            tokio::spawn(devinject_dra::binding::run(
                std::sync::Arc::clone(&driver),
                client.clone(),
                args.driver.clone(),
                failures,
            ));
        }
        // Nothing is published before the kubelet's grants are read once (or the read failed):
        // a device a running pod got from the device plugin is never offered.
        let _ = holds_read.await;
        serve(
            ServeConfig {
                driver: args.driver,
                node,
                profiles,
                roots,
                socket: driver_dir.join("dra.sock"),
                registration_dir: args.registry_dir,
                metrics,
                prepare_failed,
                plugin_holds,
            },
            driver,
            client,
        )
        .await
        .context("devinject-dra stopped")
    })
}
