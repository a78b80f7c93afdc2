//! The daemon: every selected profile served as one resource, with supervision and shutdown.
//!
//! Per resource there are two tasks: the [`HealthMonitor`] (inotify → rescan → `watch` channel)
//! and the [`Lifecycle`] (socket, server, registration, re-registration). One [`DirWatcher`]
//! shares the device-plugins directory's events with every lifecycle, and one [`HealthTimer`]
//! tells every monitor when its health attributes are due to be read again. All tasks live in
//! `JoinSet`s: if any of them ends, the daemon withdraws every resource and exits with an error,
//! so the plugin never looks registered while a part of it is dead (the DaemonSet restarts it).
//! SIGTERM and SIGINT withdraw every resource (an empty `ListAndWatch` list), stop the servers and
//! remove the sockets.

use std::path::PathBuf;
use std::sync::Arc;

use devinject_devices::{HostRoots, ProfileError};
use devinject_discovery::{discover, profile_dir};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::advertisement::Advertisement;
use crate::claim_holds::{self, ClaimHoldsConfig};
use crate::health::{HealthError, HealthMonitor, HealthTimer};
use crate::kubelet::lifecycle::{Lifecycle, LifecycleError};
use crate::kubelet::watch::{DirWatcher, WatchError};
use crate::metrics::PluginMetrics;
use crate::resource::ResourceConfig;
use crate::source::ProfileSource;

/// Where things are and what to serve.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// The kubelet's device-plugins directory, holding `kubelet.sock` and our sockets.
    pub kubelet_dir: PathBuf,
    /// The directory of device profiles.
    pub profiles_dir: PathBuf,
    /// Where device nodes and sysfs are.
    pub roots: HostRoots,
    /// Profiles to serve; empty means every profile with devices on this host.
    pub profiles: Vec<String>,
    /// Where the daemon counts what it does (registered for `/metrics` by the binary).
    pub metrics: PluginMetrics,
    /// Where to learn which devices prepared DRA claims hold, so that no container gets one
    /// ([`crate::claim_holds`]); `None` without a node name.
    pub claim_holds: Option<ClaimHoldsConfig>,
}

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The profiles could not be loaded.
    #[error(transparent)]
    Profiles(#[from] ProfileError),
    /// `--profile` named a profile that does not exist.
    #[error("profile {name:?} is not in {dir}; available: {available}")]
    UnknownProfile {
        /// The requested name.
        name: String,
        /// The profiles directory.
        dir: PathBuf,
        /// The names that exist.
        available: String,
    },
    /// No profile has devices here and none was named.
    #[error(
        "no profile in {dir} finds devices under {dev_root}: name profiles with --profile to \
         serve them before their devices appear"
    )]
    NothingToServe {
        /// The profiles directory.
        dir: PathBuf,
        /// The dev root searched.
        dev_root: PathBuf,
    },
    /// The device-plugins directory could not be created.
    #[error("cannot create the device-plugins directory {dir}: {source}")]
    KubeletDir {
        /// The directory.
        dir: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// A signal handler could not be installed.
    #[error("cannot handle {signal}: {source}")]
    Signal {
        /// The signal's name.
        signal: &'static str,
        /// The system error.
        source: std::io::Error,
    },
    /// The directory watch failed.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// A health monitor failed.
    #[error(transparent)]
    Health(#[from] HealthError),
    /// A lifecycle failed.
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    /// A task ended although it runs until shutdown.
    #[error("{task} stopped unexpectedly")]
    TaskEnded {
        /// Which task.
        task: String,
    },
    #[error("{task} panicked")]
    TaskPanicked {
        /// Which task.
        task: String,
    },
}

impl DaemonError {
    /// True for mistakes in the configuration (profiles, flags) rather than failures at run time.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            Self::Profiles(_) | Self::UnknownProfile { .. } | Self::NothingToServe { .. }
        )
    }
}

/// The resources chosen from the profiles, with their device sources.
pub fn select(config: &DaemonConfig) -> Result<Vec<(ResourceConfig, ProfileSource)>, DaemonError> {
    let set = profile_dir::load(&config.profiles_dir)?;
    let mut chosen = Vec::new();
    if config.profiles.is_empty() {
        for profile in set.iter() {
            match discover(profile, &config.roots) {
                Ok(inventory) if !inventory.devices.is_empty() => chosen.push(profile.clone()),
                Ok(_) => info!(profile = %profile.name, "no devices, not serving"),
                Err(error) => {
                    warn!(profile = %profile.name, %error, "discovery failed, not serving")
                }
            }
        }
        if chosen.is_empty() {
            return Err(DaemonError::NothingToServe {
                dir: config.profiles_dir.clone(),
                dev_root: config.roots.dev_root.clone(),
            });
        }
    } else {
        for name in &config.profiles {
            let profile = set.get(name).ok_or_else(|| DaemonError::UnknownProfile {
                name: name.clone(),
                dir: config.profiles_dir.clone(),
                available: set
                    .iter()
                    .map(|p| p.name.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
            if !chosen
                .iter()
                .any(|p: &devinject_devices::Profile| p.name == profile.name)
            {
                chosen.push(profile.clone());
            }
        }
    }
    Ok(chosen
        .into_iter()
        .map(|p| {
            (
                ResourceConfig::from_profile(&p),
                ProfileSource::new(p, config.roots.clone()),
            )
        })
        .collect())
}

/// Runs the plugin until SIGTERM/SIGINT (`Ok`) or a failure.
pub async fn run(config: DaemonConfig) -> Result<(), DaemonError> {
    let resources = select(&config)?;
    std::fs::create_dir_all(&config.kubelet_dir).map_err(|source| DaemonError::KubeletDir {
        dir: config.kubelet_dir.clone(),
        source,
    })?;
    let signal_err = |signal| move |source| DaemonError::Signal { signal, source };
    let mut terminate = signal(SignalKind::terminate()).map_err(signal_err("SIGTERM"))?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(signal_err("SIGINT"))?;

    let watcher = DirWatcher::new(&config.kubelet_dir)?;
    let shutdown = CancellationToken::new();
    let mut background: JoinSet<(String, Result<(), DaemonError>)> = JoinSet::new();
    let mut lifecycles: JoinSet<(String, Result<(), DaemonError>)> = JoinSet::new();
    let mut schedules = Vec::new();
    let mut advertised = Vec::new();
    // Each resource's registration with the kubelet, started once its devices are known.
    let mut registering = Vec::new();
    for (resource, source) in resources {
        let name = resource.resource_name.clone();
        let (sender, _) = watch::channel(Arc::new(Advertisement::new(resource.replicas)));
        let sender = Arc::new(sender);
        advertised.push((source.profile().clone(), Arc::clone(&sender)));
        let monitor = HealthMonitor::new(name.clone(), source, sender.clone())
            .with_metrics(config.metrics.clone());
        monitor.rescan();
        info!(resource = %name, profile = %resource.profile, devices = sender.borrow().ids().len(),
            mode = ?resource.mode, "serving");
        schedules.push(monitor.schedule());
        background.spawn({
            let task = format!("health monitor of {name}");
            async move { (task, monitor.run().await.map_err(DaemonError::from)) }
        });
        let lifecycle = Lifecycle::new(
            Arc::new(resource),
            config.kubelet_dir.clone(),
            sender,
            watcher.subscribe(),
            shutdown.clone(),
            config.metrics.clone(),
        );
        registering.push((name, lifecycle));
    }
    match config.claim_holds.clone() {
        Some(holds) => {
            let (first_call, read) = tokio::sync::oneshot::channel();
            background.spawn(async move {
                claim_holds::poll(holds, advertised, first_call).await;
                ("DRA claims reader".to_owned(), Ok(()))
            });
            // No resource registers before the claims are read once (or the read failed): a
            // device a prepared claim holds is never offered to the kubelet.
            let _ = read.await;
        }
        None => {
            info!("no node name: devices DRA claims hold on this node are not kept from containers")
        }
    }
    for (name, lifecycle) in registering {
        lifecycles.spawn({
            let task = format!("lifecycle of {name}");
            async move { (task, lifecycle.run().await.map_err(DaemonError::from)) }
        });
    }
    let timer = HealthTimer::new(schedules);
    background.spawn(async move {
        timer.run().await;
        ("health timer".to_owned(), Ok(()))
    });
    background.spawn(async move {
        let task = "device-plugins directory watch".to_owned();
        (task, watcher.run().await.map_err(DaemonError::from))
    });

    let mut failure = None;
    tokio::select! {
        _ = terminate.recv() => info!("SIGTERM: withdrawing devices"),
        _ = interrupt.recv() => info!("SIGINT: withdrawing devices"),
        Some(ended) = background.join_next() => failure = Some(task_failure(ended)),
        Some(ended) = lifecycles.join_next() => failure = Some(task_failure(ended)),
    }
    if let Some(err) = &failure {
        error!(error = %err, "stopping");
    }
    shutdown.cancel();
    while let Some(ended) = lifecycles.join_next().await {
        match ended {
            Ok((_, Ok(()))) => {}
            other => {
                let err = task_failure(other);
                error!(error = %err, "while stopping");
                failure.get_or_insert(err);
            }
        }
    }
    background.abort_all();
    failure.map_or(Ok(()), Err)
}

/// The error for a task that ended before shutdown.
fn task_failure(
    ended: Result<(String, Result<(), DaemonError>), tokio::task::JoinError>,
) -> DaemonError {
    match ended {
        Ok((_, Err(err))) => err,
        Ok((task, Ok(()))) => DaemonError::TaskEnded { task },
        Err(join) => DaemonError::TaskPanicked {
            task: join.to_string(),
        },
    }
}
