//! Where a resource's devices come from: a small trait so the health monitor can be driven by a
//! profile on a real host ([`ProfileSource`]), or by a fake in tests.

use std::sync::Mutex;

use devinject_devices::watch::WatchPath;
use devinject_devices::{discover, watch_paths, DiscoveryError, HostRoots, Inventory, Profile};

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
}

/// A profile's devices under a set of host roots, found by `devinject_devices::discover`.
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
                return Ok(Vec::new());
            }
            Err(err) => return Err(err),
        };
        let scanned = inventory
            .devices
            .iter()
            .map(|d| ScannedDevice {
                id: d.id.to_string(),
                numa_node: d.numa_node,
                healthy: d.healthy,
            })
            .collect();
        *self.found.lock().unwrap_or_else(|e| e.into_inner()) = Some(inventory);
        Ok(scanned)
    }

    fn watch_paths(&self) -> Vec<WatchPath> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        watch_paths(&self.profile, &self.roots, found.as_ref())
    }
}
