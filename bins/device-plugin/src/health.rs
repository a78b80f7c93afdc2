//! Device health and hot-plug: presence from inotify, health also read on a schedule.
//!
//! The monitor watches the directories that hold a profile's device nodes (a node's removal or
//! re-creation is an event in its directory, which a watch on the node itself would miss; the
//! writes to the nodes in them are not watched) and the profile's sysfs health attributes
//! (sysfs raises a modify event when a driver calls `sysfs_notify`). Any event triggers a
//! rescan; the resulting [`Advertisement`] is published only if it differs, so `ListAndWatch`
//! sends exactly one message per real change. A path that does not exist yet is covered by a
//! watch on its nearest existing ancestor, so a directory created later (a driver loading, a
//! first device plugged in) is noticed too. Latency is that of one inotify event plus a rescan.
//!
//! Few drivers call `sysfs_notify` for a health attribute, so the attributes are also read on a
//! schedule ([`devinject_devices::health`]): one [`HealthTimer`] for the whole daemon tells each
//! monitor when its profile's `discovery.health_interval_ms` has passed, and the monitor reads
//! each device's attribute once (no rescan), between its rescans, never beside one.

use std::sync::Arc;
use std::time::Duration;

use devinject_devices::HealthSchedule;
use inotify::{Inotify, Watches};
use tokio::sync::{watch, Notify};
use tokio_stream::StreamExt;
use tracing::{debug, info, warn};

use crate::advertisement::{Advertisement, ScannedDevice};
use crate::metrics::PluginMetrics;
use crate::source::DeviceSource;

/// Why the health monitor stopped.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// inotify could not be set up or read.
    #[error("resource {resource}: cannot {op} inotify: {source}")]
    Inotify {
        /// The extended resource.
        resource: String,
        /// What was being done.
        op: &'static str,
        /// The system error.
        source: std::io::Error,
    },
    /// The event stream ended, which inotify never does on its own.
    #[error("resource {resource}: the inotify event stream ended")]
    StreamEnded {
        /// The extended resource.
        resource: String,
    },
}

/// Keeps one resource's [`Advertisement`] up to date.
pub struct HealthMonitor<S> {
    resource: String,
    source: S,
    published: Arc<watch::Sender<Arc<Advertisement>>>,
    metrics: PluginMetrics,
    /// Notified by the [`HealthTimer`] when the health reads are due.
    due: Arc<Notify>,
}

impl<S: DeviceSource> HealthMonitor<S> {
    /// A monitor that publishes `resource`'s devices, as found by `source`, on `published`.
    pub fn new(
        resource: String,
        source: S,
        published: Arc<watch::Sender<Arc<Advertisement>>>,
    ) -> Self {
        Self {
            resource,
            source,
            published,
            metrics: PluginMetrics::default(),
            due: Arc::default(),
        }
    }

    /// What the daemon's [`HealthTimer`] needs of this monitor: the resource, how often its
    /// health reads are due (`None`: it has no health attribute), and where to say so.
    pub fn schedule(&self) -> (String, Option<Duration>, Arc<Notify>) {
        (
            self.resource.clone(),
            self.source.health_interval(),
            Arc::clone(&self.due),
        )
    }

    /// The same monitor, counting devices and health changes into `metrics`.
    pub fn with_metrics(mut self, metrics: PluginMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Rescans once and publishes the result if it changed; true if it did.
    pub fn rescan(&self) -> bool {
        self.metrics.rescanned(&self.resource);
        let scan = match self.source.scan() {
            Ok(scan) => scan,
            Err(err) => {
                // Keep the last list: a transient sysfs read error must not flap every device.
                warn!(resource = %self.resource, error = %err, "device scan failed");
                return false;
            }
        };
        self.publish(&scan)
    }

    /// Reads the health of the devices of the last scan again and publishes it if it changed;
    /// true if it did.
    pub fn refresh_health(&self) -> bool {
        match self.source.refresh_health() {
            Some(scan) => self.publish(&scan),
            None => false,
        }
    }

    /// Publishes the advertisement after `scan` if it differs; true if it did.
    fn publish(&self, scan: &[ScannedDevice]) -> bool {
        let (resource, metrics) = (&self.resource, &self.metrics);
        self.published.send_if_modified(|current| {
            let next = current.with_scan(scan);
            if next == **current {
                return false;
            }
            for device in next.physical() {
                match current.physical().iter().find(|old| old.id == device.id) {
                    None => info!(resource = %resource, device = %device.id, healthy = device.healthy, "device appeared"),
                    Some(old) if old.healthy != device.healthy => {
                        info!(resource = %resource, device = %device.id, healthy = device.healthy, "device health changed");
                        metrics.health_changed(resource, old.healthy, device.healthy);
                    }
                    Some(_) => {}
                }
            }
            metrics.advertised(resource, &next);
            *current = Arc::new(next);
            true
        })
    }

    /// Watches and rescans until an error; never returns `Ok`.
    pub async fn run(self) -> Result<(), HealthError> {
        let err = |op| {
            let resource = self.resource.clone();
            move |source| HealthError::Inotify {
                resource,
                op,
                source,
            }
        };
        let inotify = Inotify::init().map_err(err("initialise"))?;
        let mut watches = inotify.watches();
        self.add_watches(&mut watches);
        // Changes between the caller's first scan and the watches being in place.
        self.rescan();
        let mut events = inotify
            .into_event_stream([0u8; 4096])
            .map_err(err("stream"))?;
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = self.due.notified() => {
                    self.refresh_health();
                    continue;
                }
            };
            let Some(event) = event else { break };
            let event = event.map_err(err("read"))?;
            debug!(resource = %self.resource, name = ?event.name, mask = ?event.mask, "inotify event");
            // One rescan for a burst: take the events that are already queued (a zero timeout
            // polls once and never waits), e.g. the many creations of a driver loading.
            for _ in 0..devinject_discovery::watch::MAX_COALESCED {
                match tokio::time::timeout(Duration::ZERO, events.next()).await {
                    Ok(Some(event)) => {
                        event.map_err(err("read"))?;
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            // Watch first, then scan: whatever appears after the new watches raises an event,
            // whatever appeared before is seen by the scan.
            self.add_watches(&mut watches);
            self.rescan();
        }
        Err(HealthError::StreamEnded {
            resource: self.resource,
        })
    }

    fn add_watches(&self, watches: &mut Watches) {
        for path in self.source.watch_paths() {
            let Some((target, mask)) = path.target() else {
                continue;
            };
            if let Err(error) = watches.add(&target, mask) {
                warn!(resource = %self.resource, path = %target.display(), %error, "cannot watch");
            }
        }
    }
}

/// The daemon's one timer for the health reads of every monitor ([`HealthMonitor::schedule`]):
/// monitors whose intervals agree are told at the same wakeup
/// ([`devinject_devices::HealthSchedule`]).
pub struct HealthTimer {
    schedule: HealthSchedule<usize>,
    monitors: Vec<(String, Arc<Notify>)>,
}

impl HealthTimer {
    /// A timer for `monitors` (each [`HealthMonitor::schedule`]); those without a health
    /// interval are left out.
    pub fn new(
        monitors: impl IntoIterator<Item = (String, Option<Duration>, Arc<Notify>)>,
    ) -> Self {
        let mut scheduled = Vec::new();
        let mut told = Vec::new();
        for (resource, interval, due) in monitors {
            if let Some(interval) = interval {
                info!(resource = %resource, interval_ms = interval.as_millis(), "health attributes read on schedule");
                scheduled.push((told.len(), interval));
                told.push((resource, due));
            }
        }
        Self {
            schedule: HealthSchedule::new(std::time::Instant::now(), scheduled),
            monitors: told,
        }
    }

    /// Tells each monitor when its reads are due, for ever; with none to tell, waits for ever
    /// without waking.
    pub async fn run(mut self) {
        loop {
            let Some(next) = self.schedule.next_due() else {
                return std::future::pending().await;
            };
            tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
            for index in self.schedule.take_due(std::time::Instant::now()) {
                let (resource, due) = &self.monitors[index];
                debug!(resource = %resource, "health reads due");
                // A permit waits for a monitor busy with a rescan; two due reads fold into one.
                due.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::path::PathBuf;
    use std::sync::Mutex;

    use super::*;
    use devinject_discovery::watch::{WatchPath, Watched};

    /// A source that lists the files in one directory as healthy devices.
    struct DirSource {
        dir: PathBuf,
        broken: Arc<Mutex<Vec<String>>>,
    }

    impl DeviceSource for DirSource {
        type Error = Infallible;

        fn scan(&self) -> Result<Vec<ScannedDevice>, Infallible> {
            let broken = self.broken.lock().unwrap_or_else(|e| e.into_inner());
            let mut out = Vec::new();
            if let Ok(entries) = std::fs::read_dir(&self.dir) {
                for entry in entries.flatten() {
                    let id = entry.file_name().to_string_lossy().into_owned();
                    out.push(ScannedDevice {
                        healthy: !broken.contains(&id),
                        id,
                        numa_node: None,
                    });
                }
            }
            Ok(out)
        }

        fn watch_paths(&self) -> Vec<WatchPath> {
            vec![WatchPath {
                path: self.dir.clone(),
                what: Watched::Entries,
            }]
        }

        fn health_interval(&self) -> Option<Duration> {
            Some(Duration::from_millis(20))
        }

        /// What a scan finds, with the health `broken` says now: a change made there raises
        /// no inotify event, as a sysfs attribute whose driver does not notify.
        fn refresh_health(&self) -> Option<Vec<ScannedDevice>> {
            self.scan().ok()
        }
    }

    async fn next_health(rx: &mut watch::Receiver<Arc<Advertisement>>) -> Vec<(String, bool)> {
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .expect("no change within 5 s")
            .expect("sender dropped");
        rx.borrow_and_update()
            .physical()
            .iter()
            .map(|p| (p.id.clone(), p.healthy))
            .collect()
    }

    #[tokio::test]
    async fn removal_recreation_and_hotplug_from_a_directory_created_late() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("late/accel");
        let (tx, mut rx) = watch::channel(Arc::new(Advertisement::new(1)));
        let monitor = HealthMonitor::new(
            "devinject.io/demo".into(),
            DirSource {
                dir: dir.clone(),
                broken: Arc::default(),
            },
            Arc::new(tx),
        );
        monitor.rescan();
        assert!(rx.borrow_and_update().physical().is_empty());
        let task = tokio::spawn(monitor.run());
        // Wait until the watches exist: the first rescan inside `run` publishes nothing, so
        // create a marker and wait for it to show up.
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("0"), "").expect("create 0");
        let mut seen = next_health(&mut rx).await;
        while seen != [("0".to_owned(), true)] {
            seen = next_health(&mut rx).await;
        }
        std::fs::remove_file(dir.join("0")).expect("rm 0");
        assert_eq!(next_health(&mut rx).await, [("0".to_owned(), false)]);
        std::fs::write(dir.join("0"), "").expect("create 0");
        assert_eq!(next_health(&mut rx).await, [("0".to_owned(), true)]);
        std::fs::write(dir.join("1"), "").expect("create 1");
        assert_eq!(
            next_health(&mut rx).await,
            [("0".to_owned(), true), ("1".to_owned(), true)]
        );
        task.abort();
    }

    #[tokio::test]
    async fn health_that_raises_no_event_is_read_on_the_timer() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(tmp.path().join("0"), "").expect("create 0");
        let broken: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, mut rx) = watch::channel(Arc::new(Advertisement::new(1)));
        let monitor = HealthMonitor::new(
            "devinject.io/demo".into(),
            DirSource {
                dir: tmp.path().to_owned(),
                broken: Arc::clone(&broken),
            },
            Arc::new(tx),
        );
        monitor.rescan();
        assert!(rx.borrow_and_update().physical()[0].healthy);
        let timer = HealthTimer::new([monitor.schedule()]);
        let tasks = [
            tokio::spawn(monitor.run()),
            tokio::spawn(async move {
                timer.run().await;
                Ok(())
            }),
        ];
        broken.lock().unwrap().push("0".into());
        assert_eq!(next_health(&mut rx).await, [("0".to_owned(), false)]);
        broken.lock().unwrap().clear();
        assert_eq!(next_health(&mut rx).await, [("0".to_owned(), true)]);
        for task in tasks {
            task.abort();
        }
    }
}
