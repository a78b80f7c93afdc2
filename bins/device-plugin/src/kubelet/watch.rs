//! inotify on the device-plugins directory, shared by every resource.
//!
//! A kubelet restart shows as `kubelet.sock` being created again (the kubelet first deletes
//! every socket in the directory, ours included); an operator or a second plugin instance may
//! also remove our socket. Both are events in the directory, broadcast to every lifecycle.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use inotify::{EventMask, EventStream, Inotify, WatchMask};
use tokio::sync::broadcast;
use tokio_stream::StreamExt;
use tracing::debug;

/// Something that happened in the device-plugins directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirEvent {
    /// A file was created or moved in.
    Created(OsString),
    /// A file was deleted or moved out.
    Removed(OsString),
    /// Events were lost (inotify queue overflow): state must be re-checked.
    Overflow,
}

/// Why the directory watch failed.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// inotify failed.
    #[error("cannot {op} inotify watch on {dir}: {source}")]
    Inotify {
        /// The device-plugins directory.
        dir: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The system error.
        source: std::io::Error,
    },
    /// The directory itself was removed or moved away.
    #[error("the device-plugins directory {dir} was removed or moved")]
    DirGone {
        /// The device-plugins directory.
        dir: PathBuf,
    },
}

/// How many events a slow lifecycle may fall behind before it sees `Lagged`.
const CAPACITY: usize = 256;

/// Watches one directory and broadcasts its events.
pub struct DirWatcher {
    dir: PathBuf,
    events: EventStream<[u8; 4096]>,
    sender: broadcast::Sender<DirEvent>,
}

impl DirWatcher {
    /// Starts watching `dir`; events from now on reach every [`Self::subscribe`]r.
    pub fn new(dir: &Path) -> Result<Self, WatchError> {
        let err = |op| {
            move |source| WatchError::Inotify {
                dir: dir.to_owned(),
                op,
                source,
            }
        };
        let inotify = Inotify::init().map_err(err("initialise"))?;
        inotify
            .watches()
            .add(
                dir,
                WatchMask::CREATE
                    | WatchMask::DELETE
                    | WatchMask::MOVED_FROM
                    | WatchMask::MOVED_TO
                    | WatchMask::DELETE_SELF
                    | WatchMask::MOVE_SELF
                    | WatchMask::ONLYDIR,
            )
            .map_err(err("add"))?;
        let events = inotify
            .into_event_stream([0u8; 4096])
            .map_err(err("stream"))?;
        let (sender, _) = broadcast::channel(CAPACITY);
        Ok(Self {
            dir: dir.to_owned(),
            events,
            sender,
        })
    }

    /// A receiver of every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<DirEvent> {
        self.sender.subscribe()
    }

    /// Forwards events until the directory goes away or inotify fails.
    pub async fn run(mut self) -> Result<(), WatchError> {
        while let Some(event) = self.events.next().await {
            let event = event.map_err(|source| WatchError::Inotify {
                dir: self.dir.clone(),
                op: "read",
                source,
            })?;
            debug!(dir = %self.dir.display(), name = ?event.name, mask = ?event.mask, "kubelet dir event");
            let mask = event.mask;
            let forwarded = if mask.contains(EventMask::Q_OVERFLOW) {
                DirEvent::Overflow
            } else if mask
                .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED)
            {
                return Err(WatchError::DirGone {
                    dir: self.dir.clone(),
                });
            } else if let Some(name) = event.name {
                if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                    DirEvent::Created(name)
                } else {
                    DirEvent::Removed(name)
                }
            } else {
                continue;
            };
            // No subscriber is fine: nobody needs to react.
            let _ = self.sender.send(forwarded);
        }
        Err(WatchError::DirGone {
            dir: self.dir.clone(),
        })
    }
}
