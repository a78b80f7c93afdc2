//! The running driver: the DRA node service (with the resource-health stream beside it) and the
//! registration service on their sockets, the
//! ResourceSlice publisher, and shutdown on SIGTERM/SIGINT. If any part stops by itself the
//! driver stops with an error, so it never looks registered while a part of it is dead (the
//! DaemonSet restarts it).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use devinject_devices::{HealthSchedule, HostRoots, Inventory, ProfileSet};
use devinject_discovery::{discover, refresh_health, watch_paths};
use devinject_kubelet::serve::{ServedSocket, SocketError};
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tracing::{debug, info, warn};

use crate::binding::PrepareFailures;
use crate::device_watch::DeviceWatch;
use crate::health::{Discovered, HealthConfig, HealthService};
use crate::metrics::DraMetrics;
use crate::naming;
use crate::node_service::NodeService;
use crate::plugin_holds::PluginHolds;
use crate::prepared::Claims;
use crate::registration::RegistrationService;
use crate::slices::{
    pci_locations, resource_slices, same_content, slice_name, ApiFields, DeviceState,
};
use crate::watch_log::WatchLog;

/// What the driver logs each time it applies a ResourceSlice: tests look for it.
pub const PUBLISHED: &str = "published the ResourceSlice";

/// The field manager of the driver's server-side applies.
const FIELD_MANAGER: &str = "devinject-dra";

/// What to serve and where.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The DRA driver name.
    pub driver: String,
    /// This node's name.
    pub node: String,
    /// The profiles whose devices are published.
    pub profiles: ProfileSet,
    /// Where device nodes and sysfs are.
    pub roots: HostRoots,
    /// The DRA service socket (`<plugins dir>/<driver>/dra.sock`).
    pub socket: PathBuf,
    /// The kubelet's plugin registry directory.
    pub registration_dir: PathBuf,
    /// Where the driver counts devices, slices and registrations (registered for `/metrics`
    /// by the binary).
    pub metrics: DraMetrics,
    /// The devices whose prepare step failed before binding a short while ago
    /// ([`crate::binding`]), tainted in the slices while they are listed.
    pub prepare_failed: watch::Receiver<PrepareFailures>,
    /// The devices running containers hold through the device plugin
    /// ([`crate::plugin_holds`]), tainted in the slices while they are held.
    pub plugin_holds: watch::Receiver<PluginHolds>,
}

/// Why the driver stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A socket could not be served, or its server failed.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The registration service could not be made.
    #[error(transparent)]
    Registration(#[from] crate::registration::RegistrationError),
    /// The signal handlers could not be installed.
    #[error("cannot install the SIGTERM/SIGINT handlers: {0}")]
    Signals(std::io::Error),
    /// A slice could not be built from the profiles (a naming conflict, too many devices).
    #[error(transparent)]
    Slice(#[from] crate::slices::SliceError),
}

/// Serves until SIGTERM or SIGINT (then `Ok`), or until a part fails.
pub async fn serve<C: Claims>(
    config: ServeConfig,
    claims: Arc<C>,
    client: kube::Client,
) -> Result<(), ServeError> {
    let mut terminate = signal(SignalKind::terminate()).map_err(ServeError::Signals)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(ServeError::Signals)?;
    let service = NodeService::new(claims);
    // The publisher's discovery, shared with the health stream, which runs none of its own.
    let (discovered, watched) = watch::channel(Discovered::default());
    let health = HealthService::new(HealthConfig {
        node: config.node.clone(),
        profiles: config.profiles.clone(),
        discovered: watched,
    });
    let routes = service
        .routes()
        .add_service(health.clone().server())
        .add_service(health.server_v1alpha1());
    let mut dra = devinject_kubelet::serve::serve(&config.socket, routes).await?;
    let registration = RegistrationService::new(&config.driver, &config.socket)?
        .with_metrics(config.metrics.clone());
    let registrations = registration.subscribe_registrations();
    let reg_path = config
        .registration_dir
        .join(format!("{}-reg.sock", config.driver));
    let mut reg = devinject_kubelet::serve::serve(&reg_path, registration.into_routes()).await?;
    info!(
        driver = %config.driver,
        node = %config.node,
        socket = %config.socket.display(),
        registration = %reg_path.display(),
        "serving"
    );
    let outcome = tokio::select! {
        _ = terminate.recv() => Ok(()),
        _ = interrupt.recv() => Ok(()),
        r = dra.stopped() => r.map_err(ServeError::from),
        r = reg.stopped() => r.map_err(ServeError::from),
        r = publish(&config, client, discovered, registrations) => r,
    };
    stop(reg).await;
    stop(dra).await;
    outcome
}

async fn stop(socket: ServedSocket) {
    let path = socket.path().to_owned();
    if let Err(e) = socket.shutdown().await {
        warn!(socket = %path.display(), error = %e, "stopping a server");
    }
}

/// The least time between two publishing rounds that events of the API server (a deletion, a
/// change by another writer) or a registration start: a burst of events is one round.
const EVENT_ROUND_GAP: Duration = Duration::from_millis(100);

/// Publishes one ResourceSlice per profile and keeps it current against the API server (the
/// slices' reconciliation, docs/security.md): discovery runs again on each change of what it
/// reads ([`DeviceWatch`]), each device's health attribute is read again on one schedule for
/// every profile ([`HealthSchedule`], `discovery.health_interval_ms`), and a slice whose
/// devices changed is applied with the next pool generation; the driver's own slices
/// (field selector: this node and driver) are watched, and one deleted (a restarting kubelet
/// deletes its node's slices) or changed by another writer is applied again at once, as is
/// every slice when the kubelet registers the driver again. What discovery found goes to
/// `discovered` (a profile whose discovery fails keeps its last inventory there, as its slice
/// stays). Errors of the API server are logged and retried; only a slice that cannot be built
/// (a mistake in the profiles or too many devices) stops the driver.
async fn publish(
    config: &ServeConfig,
    client: kube::Client,
    discovered: watch::Sender<Discovered>,
    mut registrations: watch::Receiver<u64>,
) -> Result<(), ServeError> {
    let api: Api<ResourceSlice> = Api::all(client);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let selector = format!(
        "spec.nodeName={},spec.driver={}",
        config.node, config.driver
    );
    let mut events =
        std::pin::pin!(
            watcher(api.clone(), watcher::Config::default().fields(&selector)).default_backoff()
        );
    // What the API server holds of this node's and driver's slices, by slice name, once the
    // watch has listed them (`None` before, or while it fails: then the driver trusts what it
    // applied, as it did before it watched).
    let mut server: Option<BTreeMap<String, ResourceSlice>> = None;
    let mut relisted: BTreeMap<String, ResourceSlice> = BTreeMap::new();
    let mut watch_log = WatchLog::new(
        "this node's ResourceSlices",
        "a deleted slice is re-published only at the next registration meanwhile",
    );
    // What this driver applied: profile -> its pool's slices (the counters' first, if any).
    let mut published: BTreeMap<String, Vec<ResourceSlice>> = Default::default();
    // The last discovery error of each profile, logged when it first appears or changes, not at
    // every rescan (a node without a profile's driver fails the same way twice a second).
    let mut failing: BTreeMap<String, String> = Default::default();
    // The last inventory each profile's discovery found: what the slices and the health stream
    // are built from.
    let mut found: BTreeMap<String, devinject_devices::Inventory> = Default::default();
    // Where each profile's devices sit on the PCI bus, looked up with each discovery (sysfs
    // reads), not at every round, which of them failed a prepare before binding (each round,
    // from `prepare_failed`) and which containers hold through the device plugin (each round,
    // from `plugin_holds`).
    let mut states: BTreeMap<String, DeviceState> = Default::default();
    // The fields the slices carry: all until the API server is seen dropping one (its feature
    // gate off), then without it for the driver's life.
    let mut fields = ApiFields::ALL;
    let mut devices = DeviceWatch::new();
    let mut health =
        HealthSchedule::for_profiles(std::time::Instant::now(), config.profiles.iter(), |p| {
            p.name.to_string()
        });
    // The first round runs discovery at once; then each change of what it reads does.
    let mut first_round = true;
    let mut last_round = tokio::time::Instant::now();
    let mut registered_open = true;
    let mut events_open = true;
    let mut prepare_failed = config.prepare_failed.clone();
    let mut failures_open = true;
    let mut plugin_holds = config.plugin_holds.clone();
    let mut holds_open = true;
    loop {
        // Whether this round runs discovery (a device change) or only reconciles (an event of
        // the API server or the kubelet, or a health change read on schedule).
        let mut health_changed = false;
        let rescan = std::mem::take(&mut first_round)
            || tokio::select! {
                () = devices.changed() => true,
                due = health_due(&mut health) => {
                    if !read_health(config, &due, &mut found) {
                        continue;
                    }
                    health_changed = true;
                    false
                }
                changed = registrations.changed(), if registered_open => {
                    if changed.is_err() {
                        // The registration service is gone; the driver stops through its socket.
                        registered_open = false;
                        continue;
                    }
                    info!("the kubelet registered the driver: publishing every ResourceSlice again");
                    published.clear();
                    false
                }
                changed = prepare_failed.changed(), if failures_open => {
                    if changed.is_err() {
                        failures_open = false;
                        continue;
                    }
                    false
                }
                changed = plugin_holds.changed(), if holds_open => {
                    if changed.is_err() {
                        holds_open = false;
                        continue;
                    }
                    false
                }
                event = events.next(), if events_open => {
                    match event {
                        Some(step) => {
                            let Some(event) = watch_log.event(step) else {
                                continue;
                            };
                            if !record(&mut server, &mut relisted, event, config) {
                                continue;
                            }
                        }
                        None => {
                            events_open = false;
                            continue;
                        }
                    }
                    false
                }
            };
        if !rescan && !health_changed {
            // A burst of events is one round, at most one per EVENT_ROUND_GAP.
            tokio::time::sleep_until(last_round + EVENT_ROUND_GAP).await;
        }
        last_round = tokio::time::Instant::now();
        // Watch first, then discover: what changes after the watches are in place is an
        // event, what changed before is seen by this discovery. The health attributes of
        // devices found now are watched after it.
        let watched = |found: &BTreeMap<String, devinject_devices::Inventory>| {
            config
                .profiles
                .iter()
                .flat_map(|p| watch_paths(p, &config.roots, found.get(p.name.as_str())))
                .collect::<Vec<_>>()
        };
        if rescan {
            devices.watch(watched(&found));
        }
        let mut fresh = Vec::new();
        for profile in config.profiles.iter() {
            let name = profile.name.as_str();
            if !rescan {
                if found.contains_key(name) {
                    fresh.push(profile);
                }
                continue;
            }
            match discover(profile, &config.roots) {
                Ok(inventory) => {
                    if failing.remove(name).is_some() {
                        info!(profile = name, "discovery works again");
                    }
                    config.metrics.discovered(name, found.get(name), &inventory);
                    states.entry(name.to_owned()).or_default().locations =
                        pci_locations(&inventory, &config.roots);
                    found.insert(name.to_owned(), inventory);
                    fresh.push(profile);
                }
                Err(e) => {
                    let error = e.to_string();
                    if failing.get(name) != Some(&error) {
                        warn!(profile = name, error = %error, "discovery failed; the slice stays as it was until it works");
                        failing.insert(name.to_owned(), error);
                    }
                }
            }
        }
        if rescan {
            devices.watch(watched(&found));
        }
        if rescan || health_changed {
            discovered.send_if_modified(|known| {
                let changed = **known != found;
                if changed {
                    *known = Arc::new(found.clone());
                }
                changed
            });
        }
        for profile in fresh {
            let name = profile.name.as_str();
            let inventory = &found[name];
            let slice_name = slice_name(&config.node, name);
            let pool_name = naming::pool(&config.node, name);
            // The copy of slice `slice` to compare with: the API server's when the watch knows
            // it, else what this driver applied.
            let held = |slice: &str| match &server {
                Some(held) => held.get(slice),
                None => published.get(name).and_then(|mine| {
                    mine.iter()
                        .find(|s| s.metadata.name.as_deref() == Some(slice))
                }),
            };
            let mine = published.get(name).and_then(|mine| mine.last());
            let generation = match (held(&slice_name), mine) {
                (Some(c), Some(p)) => c.spec.pool.generation.max(p.spec.pool.generation),
                (Some(c), None) => c.spec.pool.generation,
                (None, Some(p)) => p.spec.pool.generation,
                (None, None) if server.is_some() => 0,
                (None, None) => current_generation(&api, &slice_name).await,
            };
            let state = states.entry(name.to_owned()).or_default();
            state.prepare_failed = prepare_failed
                .borrow_and_update()
                .get(name)
                .cloned()
                .unwrap_or_default();
            state.plugin_held = plugin_holds
                .borrow_and_update()
                .get(name)
                .cloned()
                .unwrap_or_default();
            let state = &*state;
            let slices = resource_slices(
                &config.driver,
                &config.node,
                profile,
                inventory,
                generation,
                fields,
                state,
            )?;
            let unchanged = published.contains_key(name)
                && stale(&server, &published, name, &pool_name, &slices).is_empty()
                && slices.iter().all(|new| {
                    held(new.metadata.name.as_deref().unwrap_or_default())
                        .is_some_and(|old| same_content(&old.spec, &new.spec))
                });
            if unchanged {
                continue;
            }
            let mut slices = with_generation(slices, generation + 1);
            let mut applied = apply_all(&api, &params, &slices).await;
            if let Ok(returned) = &applied {
                let off: Vec<_> = slices
                    .iter()
                    .zip(returned)
                    .flat_map(|(a, r)| fields.learn(&a.spec, &r.spec))
                    .collect();
                if !off.is_empty() {
                    info!(
                        profile = name,
                        slice = %slice_name,
                        gates = ?off,
                        "the API server drops fields of these features (gates off): without device taints unhealthy devices are left out of the slices; without consumable capacity devices are shared by the profiles' replicas; without partitionable devices only whole devices are published; without binding conditions prepare steps run when the kubelet prepares the claim"
                    );
                    slices = with_generation(
                        resource_slices(
                            &config.driver,
                            &config.node,
                            profile,
                            inventory,
                            generation + 1,
                            fields,
                            state,
                        )?,
                        generation + 2,
                    );
                    applied = apply_all(&api, &params, &slices).await;
                }
            }
            match applied {
                Ok(_) => {
                    for old in stale(&server, &published, name, &pool_name, &slices) {
                        remove_stale(&api, &old).await;
                    }
                    for slice in &slices {
                        config.metrics.slice_applied(true);
                        info!(
                            profile = name,
                            slice = slice.metadata.name.as_deref().unwrap_or_default(),
                            devices = slice.spec.devices.as_ref().map_or(0, Vec::len),
                            counter_sets = slice.spec.shared_counters.as_ref().map_or(0, Vec::len),
                            generation = slice.spec.pool.generation,
                            "{PUBLISHED}"
                        );
                    }
                    published.insert(name.to_owned(), slices);
                }
                Err(e) => {
                    config.metrics.slice_applied(false);
                    warn!(profile = name, slice = %slice_name, error = %e, "publishing the ResourceSlice failed; retrying")
                }
            }
        }
    }
}

/// The profiles whose health reads are due, when they are; never for an empty schedule.
async fn health_due(schedule: &mut HealthSchedule<String>) -> Vec<String> {
    let Some(next) = schedule.next_due() else {
        return std::future::pending().await;
    };
    tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
    schedule.take_due(std::time::Instant::now())
}

/// Reads each device's health attribute again for the `due` profiles' inventories in `found`
/// (no discovery: a device that came or went is the watch's to see); true when a device's
/// health changed.
fn read_health(
    config: &ServeConfig,
    due: &[String],
    found: &mut BTreeMap<String, Inventory>,
) -> bool {
    let mut changed = false;
    for name in due {
        let (Some(profile), Some(inventory)) = (config.profiles.get(name), found.get_mut(name))
        else {
            continue;
        };
        let before = inventory.clone();
        if !refresh_health(profile, &config.roots, inventory).is_empty() {
            config.metrics.discovered(name, Some(&before), inventory);
            changed = true;
        }
    }
    changed
}

/// `slices` (one pool's) as generation `generation`.
fn with_generation(mut slices: Vec<ResourceSlice>, generation: i64) -> Vec<ResourceSlice> {
    for slice in &mut slices {
        slice.spec.pool.generation = generation;
    }
    slices
}

/// Applies one pool's slices in order (the counters before the devices that consume them);
/// returns what the API server stored of each.
async fn apply_all(
    api: &Api<ResourceSlice>,
    params: &PatchParams,
    slices: &[ResourceSlice],
) -> Result<Vec<ResourceSlice>, kube::Error> {
    let mut returned = Vec::with_capacity(slices.len());
    for slice in slices {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        returned.push(api.patch(name, params, &Patch::Apply(slice)).await?);
    }
    Ok(returned)
}

/// The slices of pool `pool` (profile `profile`'s) that the API server holds, or, before the
/// watch has listed them, that this driver applied, and `slices` (the pool now) lacks: those of
/// an older generation when the pool shrank (fewer devices, or the counters dropped).
fn stale(
    server: &Option<BTreeMap<String, ResourceSlice>>,
    published: &BTreeMap<String, Vec<ResourceSlice>>,
    profile: &str,
    pool: &str,
    slices: &[ResourceSlice],
) -> Vec<String> {
    let held: Vec<&ResourceSlice> = match server {
        Some(held) => held.values().collect(),
        None => published.get(profile).into_iter().flatten().collect(),
    };
    held.into_iter()
        .filter(|s| s.spec.pool.name == pool)
        .filter_map(|s| s.metadata.name.clone())
        .filter(|name| {
            !slices
                .iter()
                .any(|s| s.metadata.name.as_ref() == Some(name))
        })
        .collect()
}

/// Deletes slice `name` of a pool that has it no more; one already gone is fine, and a failure
/// is logged (the slice is of an older generation, which the scheduler ignores).
async fn remove_stale(api: &Api<ResourceSlice>, name: &str) {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => info!(slice = %name, "removed a slice the pool no longer has"),
        Err(kube::Error::Api(e)) if e.is_not_found() => {}
        Err(e) => warn!(slice = %name, error = %e, "removing a slice the pool no longer has"),
    }
}

/// Takes one watch event into `server` (`relisted` buffers a relist); returns whether it may
/// call for a round: a slice deleted, changed, or listed anew.
fn record(
    server: &mut Option<BTreeMap<String, ResourceSlice>>,
    relisted: &mut BTreeMap<String, ResourceSlice>,
    event: watcher::Event<ResourceSlice>,
    config: &ServeConfig,
) -> bool {
    let name = |s: &ResourceSlice| s.metadata.name.clone().unwrap_or_default();
    match event {
        watcher::Event::Init => {
            relisted.clear();
            false
        }
        watcher::Event::InitApply(slice) => {
            relisted.insert(name(&slice), slice);
            false
        }
        watcher::Event::InitDone => {
            *server = Some(std::mem::take(relisted));
            true
        }
        watcher::Event::Apply(slice) => {
            let Some(held) = server else {
                return false;
            };
            let key = name(&slice);
            let same = held
                .get(&key)
                .is_some_and(|old| same_content(&old.spec, &slice.spec));
            held.insert(key, slice);
            !same
        }
        watcher::Event::Delete(slice) => {
            let key = name(&slice);
            warn!(node = %config.node, slice = %key, "a ResourceSlice of this driver was deleted; publishing it again");
            if let Some(held) = server {
                held.remove(&key);
            }
            true
        }
    }
}

/// The pool generation of the slice `name` the API server holds (0 when none), so that a
/// restarted driver publishes a higher one.
async fn current_generation(api: &Api<ResourceSlice>, name: &str) -> i64 {
    match api.get_opt(name).await {
        Ok(Some(slice)) => slice.spec.pool.generation,
        Ok(None) => 0,
        Err(e) => {
            debug!(slice = %name, error = %e, "reading the current slice");
            0
        }
    }
}
