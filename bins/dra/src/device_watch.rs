//! When the publisher runs discovery again: on an inotify event in what a profile's discovery
//! reads ([`devinject_discovery::watch_paths`]: the entries of the directories of its nodes, not
//! the writes to the nodes in them; its devices' sysfs health attributes), never on a timer. A
//! burst of events (a driver loading, many nodes made at once) is one rescan. Where inotify
//! cannot be set up or read, the publisher falls back to rescanning every [`FALLBACK_RESCAN`],
//! and says so. Health attributes whose driver raises no event are read on the publisher's
//! health schedule instead ([`devinject_devices::health`]), which runs no discovery.

use std::time::Duration;

use devinject_discovery::watch::WatchPath;

use inotify::{EventStream, Inotify, Watches};
use tokio_stream::StreamExt;
use tracing::{debug, warn};

/// How often discovery runs where inotify is unavailable.
pub const FALLBACK_RESCAN: Duration = Duration::from_millis(500);

/// The inotify watches over every profile's discovery inputs, or the fallback timer.
pub enum DeviceWatch {
    /// Events from the kernel.
    Events {
        /// Where new watches are added.
        watches: Watches,
        /// The events (boxed: the stream holds its 4 KiB buffer).
        stream: Box<EventStream<[u8; 4096]>>,
    },
    /// A rescan every [`FALLBACK_RESCAN`].
    Timer(tokio::time::Interval),
}

impl Default for DeviceWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl DeviceWatch {
    /// Sets up inotify; the fallback timer where that fails. Must be called within a tokio
    /// runtime.
    pub fn new() -> Self {
        let made = Inotify::init().and_then(|inotify| {
            let watches = inotify.watches();
            Ok((watches, Box::new(inotify.into_event_stream([0u8; 4096])?)))
        });
        match made {
            Ok((watches, stream)) => Self::Events { watches, stream },
            Err(e) => {
                warn!(error = %e, "cannot set up inotify: discovery runs every {} ms instead", FALLBACK_RESCAN.as_millis());
                Self::timer()
            }
        }
    }

    fn timer() -> Self {
        let mut timer = tokio::time::interval(FALLBACK_RESCAN);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self::Timer(timer)
    }

    /// Watches `paths` (each, or its nearest existing ancestor: a directory made later shows as
    /// an event there); a path already watched is watched once. A watch that cannot be added is
    /// logged.
    pub fn watch(&mut self, paths: impl IntoIterator<Item = WatchPath>) {
        let Self::Events { watches, .. } = self else {
            return;
        };
        for path in paths {
            let Some((target, mask)) = path.target() else {
                continue;
            };
            if let Err(error) = watches.add(&target, mask) {
                warn!(path = %target.display(), %error, "cannot watch for device changes");
            }
        }
    }

    /// Waits until discovery may find something new: the next event and those already queued
    /// behind it, or the fallback timer's next tick.
    pub async fn changed(&mut self) {
        let failed = match self {
            Self::Timer(timer) => {
                timer.tick().await;
                return;
            }
            Self::Events { stream, .. } => match stream.next().await {
                Some(Ok(event)) => {
                    debug!(name = ?event.name, mask = ?event.mask, "device watch event");
                    for _ in 0..devinject_discovery::watch::MAX_COALESCED {
                        // A zero timeout polls once and never waits.
                        match tokio::time::timeout(Duration::ZERO, stream.next()).await {
                            Ok(Some(Ok(_))) => {}
                            Ok(Some(Err(e))) => {
                                warn!(error = %e, "reading inotify events failed");
                                break;
                            }
                            Ok(None) | Err(_) => break,
                        }
                    }
                    None
                }
                Some(Err(e)) => Some(e.to_string()),
                None => Some("the event stream ended".to_owned()),
            },
        };
        if let Some(error) = failed {
            warn!(%error, "watching for device changes failed: discovery runs every {} ms from now on", FALLBACK_RESCAN.as_millis());
            *self = Self::timer();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use devinject_discovery::watch::Watched;
    use std::path::Path;

    fn entries(dir: &Path) -> [WatchPath; 1] {
        [WatchPath {
            path: dir.to_owned(),
            what: Watched::Entries,
        }]
    }

    #[tokio::test]
    async fn a_node_made_in_a_directory_made_later_wakes_it_and_nothing_else_does() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("late/demo");
        let mut watch = DeviceWatch::new();
        assert!(matches!(watch, DeviceWatch::Events { .. }));
        watch.watch(entries(&dir));
        // Nothing changes: no wakeup.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), watch.changed())
                .await
                .is_err(),
            "woke with nothing changed"
        );
        std::fs::create_dir_all(&dir).unwrap();
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("the directory's making is an event");
        watch.watch(entries(&dir));
        // A burst is one wakeup.
        for n in 0..20 {
            std::fs::write(dir.join(format!("accel{n}")), "").unwrap();
        }
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("the burst");
        std::fs::remove_file(dir.join("accel3")).unwrap();
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("a removal");
        // Writes to a node in the directory (as every `2>/dev/null` writes to `/dev/null`)
        // are no change of what is there: no wakeup.
        let null = dir.join("null");
        nix::sys::stat::mknod(
            &null,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("a node made");
        for _ in 0..20 {
            std::fs::write(&null, "discarded").unwrap();
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(300), watch.changed())
                .await
                .is_err(),
            "woke on writes to a node"
        );
    }
}
