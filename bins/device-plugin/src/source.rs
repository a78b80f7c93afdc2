//! Where a resource's devices come from: a small trait so the health monitor can be driven by a
//! profile on a real host ([`ProfileSource`]), or by a fake in tests.

use std::sync::Mutex;
use std::time::Duration;

use devinject_devices::{HostRoots, Inventory, Profile};
use devinject_discovery::watch::WatchPath;
use devinject_discovery::{discover, refresh_health, watch_paths, DiscoveryError};

use crate::advertisement::ScannedDevice;

/// A kind of device on this host.
pub trait DeviceSource: Send + 'static {
    /// Why a scan failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The devices present now, with their health.
    fn scan(&self) -> Result<Vec<ScannedDevice>, Self::Error>;

    /// Files and directories whose changes may change [`Self::scan`]'s answer: the directories
    /// holding device nodes and any health attributes. They may not exist yet.
    fn watch_paths(&self) -> Vec<WatchPath>;

    /// How often [`Self::refresh_health`] is due; `None` when there is no health to read.
    fn health_interval(&self) -> Option<Duration>;

    /// The devices of the last scan with their health read again (one read per device, no
    /// discovery), when any health changed since; `None` otherwise.
    fn refresh_health(&self) -> Option<Vec<ScannedDevice>>;
}

/// A profile's devices under a set of host roots, found by `devinject_discovery::discover`.
pub struct ProfileSource {
    profile: Profile,
    roots: HostRoots,
    /// What the last scan found: its devices' health attributes are watched.
    found: Mutex<Option<Inventory>>,
}

impl ProfileSource {
    /// A source for `profile` under `roots`.
    pub fn new(profile: Profile, roots: HostRoots) -> Self {
        Self {
            profile,
            roots,
            found: Mutex::new(None),
        }
    }

    /// The profile whose devices this source finds.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }
}

impl DeviceSource for ProfileSource {
    type Error = DiscoveryError;

    fn scan(&self) -> Result<Vec<ScannedDevice>, DiscoveryError> {
        let inventory = match discover(&self.profile, &self.roots) {
            Ok(inventory) => inventory,
            // A required control or per-device node is gone: no container of this kind could
            // start (the hook fails the same discovery), so every device is unhealthy until it
            // is back. Other errors may be transient and keep the last list.
            Err(err @ DiscoveryError::Missing { .. }) => {
                tracing::warn!(profile = %self.profile.name, error = %err, "devices unusable");
                // Nothing to read the health of until discovery finds the devices usable.
                *self.found.lock().unwrap_or_else(|e| e.into_inner()) = None;
                return Ok(Vec::new());
            }
            Err(err) => return Err(err),
        };
        let scanned = scanned(&inventory);
        *self.found.lock().unwrap_or_else(|e| e.into_inner()) = Some(inventory);
        Ok(scanned)
    }

    fn watch_paths(&self) -> Vec<WatchPath> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        watch_paths(&self.profile, &self.roots, found.as_ref())
    }

    fn health_interval(&self) -> Option<Duration> {
        self.profile.health_interval()
    }

    fn refresh_health(&self) -> Option<Vec<ScannedDevice>> {
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        let inventory = found.as_mut()?;
        if refresh_health(&self.profile, &self.roots, inventory).is_empty() {
            return None;
        }
        Some(scanned(inventory))
    }
}

/// What the advertisement takes of `inventory`.
fn scanned(inventory: &Inventory) -> Vec<ScannedDevice> {
    inventory
        .devices
        .iter()
        .map(|d| ScannedDevice {
            id: d.id.to_string(),
            numa_node: d.numa_node,
            healthy: d.healthy,
        })
        .collect()
}
