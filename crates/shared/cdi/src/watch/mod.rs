//! `devinject-ctl cdi generate --watch`: keeps the CDI specs in step with the host.
//!
//! One round: watch everything whose change can change a spec (`targets`: the profiles, the
//! device directories, the sysfs attributes discovery reads, the driver files the specs mount),
//! then [`crate::generate()`]. In that order, so a change made before the watches were in place is
//! seen by the generation, and one made after raises an event. Then wait in poll(2) on the
//! inotify descriptor and the caller's stop descriptor (the binary's signalfd for SIGTERM and
//! SIGINT), without a timeout while nothing is pending: an idle watcher uses no CPU.
//!
//! The first event that matters starts a debounce: the next round runs once events have paused
//! for [`WatchOptions::debounce`] (a driver loading creates many nodes at once), and at the
//! latest 5 debounce periods after the first event, so a change lands well within a second even
//! while events keep coming.
//!
//! [`crate::generate()`] writes each spec to a temporary file and renames it over the old one, so an
//! engine never reads a half-written spec, and it writes nothing when anything fails. So on an
//! error (a broken profile, a failed discovery) the previous specs stay, the error is logged with
//! the file and the fix, and the next change tries again. An I/O error, which no watched change
//! may cure (a full disk, a read-only `/etc/cdi`), is also retried every 10 s.

mod targets;

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use tracing::{debug, error, info, warn};

use crate::error::{CdiError, Result};
use crate::generate::{self as cdi, CdiReport};
use crate::request::CdiRequest;
use targets::{Interest, Targets};

/// The default pause that ends a burst of changes.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);
/// A burst that does not pause is cut after this many debounce periods.
const MAX_BURST: u32 = 5;
/// When an I/O error is retried without a change.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How often the watches are set up again when a path vanished while being watched.
const SETUP_TRIES: usize = 3;

/// How to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOptions {
    /// How long events must pause before the specs are refreshed.
    pub debounce: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: DEFAULT_DEBOUNCE,
        }
    }
}

/// Generates the specs for `req`, then refreshes them on every change until `stop` becomes
/// readable (or its writer closes it).
///
/// `on_change` gets the first report and then every report that changed a file. Returns `Ok`
/// when stopped; errors only when inotify or poll(2) fail. A failed generation is logged and
/// waited out (see the module documentation).
pub fn watch(
    req: &CdiRequest,
    opts: &WatchOptions,
    stop: BorrowedFd<'_>,
    on_change: &mut dyn FnMut(&CdiReport),
) -> Result<()> {
    let mut watcher = Watcher::new()?;
    let mut first = true;
    loop {
        watcher.update(req);
        let retry = match cdi::generate(req) {
            Ok(report) => {
                for c in &report.changes {
                    info!(file = %c.path.display(), action = %c.action, "CDI spec refreshed");
                }
                if first || !report.changes.is_empty() {
                    on_change(&report);
                }
                None
            }
            Err(e) => {
                let io = e.is_io();
                let fix = if e.is_bad_input() {
                    "fix the file named here; the specs are refreshed as soon as it changes"
                } else if io {
                    "retrying in 10 s and on the next change"
                } else {
                    "retrying on the next change"
                };
                error!(
                    error = %chain(&e),
                    "CDI specs not refreshed, the previous specs stay: {fix}"
                );
                io.then(|| Instant::now() + RETRY_AFTER)
            }
        };
        first = false;
        if watcher.wait(stop, opts.debounce, retry)? == Wake::Stop {
            info!("stop requested; the CDI specs stay as they are");
            return Ok(());
        }
    }
}

/// An error with its causes, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Why [`Watcher::wait`] returned.
#[derive(Debug, PartialEq, Eq)]
enum Wake {
    /// Something that matters changed (or an error is to be retried).
    Change,
    /// The stop descriptor became readable.
    Stop,
}

/// The inotify instance and what each of its watches is interested in.
struct Watcher {
    inotify: Inotify,
    targets: Targets,
    interests: HashMap<WatchDescriptor, Interest>,
    /// A watched file or directory was removed or moved: its watch is gone or watches another
    /// path now, so the next update sets the watches up again even if the paths are the same
    /// (`/dev/dri` removed and created again).
    lost: bool,
    buffer: Vec<u8>,
}

impl Watcher {
    fn new() -> Result<Self> {
        let inotify = Inotify::init().map_err(|source| CdiError::Watch {
            op: "set up inotify",
            source,
        })?;
        Ok(Watcher {
            inotify,
            targets: Targets::new(),
            interests: HashMap::new(),
            lost: false,
            buffer: vec![0; 64 * 1024],
        })
    }

    /// Watches what [`targets::targets`] names now, when that changed.
    fn update(&mut self, req: &CdiRequest) {
        for _ in 0..SETUP_TRIES {
            let wanted = targets::targets(req);
            if wanted == self.targets && !self.lost {
                return;
            }
            self.lost = false;
            // Dropping every watch and adding the new set may lose an event in between; the
            // generation that follows every update sees the host as it is then.
            let mut watches = self.inotify.watches();
            for (wd, _) in self.interests.drain() {
                let _ = watches.remove(wd);
            }
            let mut vanished = false;
            for (path, target) in &wanted {
                // MASK_ADD: two paths may be one inode (a link); each keeps its events.
                match watches.add(path, target.mask | WatchMask::MASK_ADD) {
                    Ok(wd) => self
                        .interests
                        .entry(wd)
                        .or_default()
                        .merge(target.interest.clone()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        debug!(path = %path.display(), "vanished before it was watched");
                        vanished = true;
                    }
                    Err(e) => warn!(
                        path = %path.display(),
                        error = %e,
                        "cannot watch it: changes there do not refresh the CDI specs \
                         (raise fs.inotify.max_user_watches if the limit is reached)"
                    ),
                }
            }
            info!(paths = wanted.len(), "watching for changes");
            self.targets = wanted;
            if !vanished {
                return;
            }
        }
    }

    /// Waits for a change that matters and the end of its burst, for `retry`, or for `stop`.
    fn wait(
        &mut self,
        stop: BorrowedFd<'_>,
        debounce: Duration,
        retry: Option<Instant>,
    ) -> Result<Wake> {
        // (first event, end of the pause after the latest one)
        let mut burst: Option<(Instant, Instant)> = None;
        loop {
            let deadline = match burst {
                Some((first, quiet)) => Some(quiet.min(first + debounce * MAX_BURST)),
                None => retry,
            };
            let now = Instant::now();
            let timeout = match deadline {
                Some(d) if d <= now => return Ok(Wake::Change),
                Some(d) => PollTimeout::try_from(d - now).unwrap_or(PollTimeout::MAX),
                None => PollTimeout::NONE,
            };
            let (events, stopped) = {
                let mut fds = [
                    PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
                    PollFd::new(stop, PollFlags::POLLIN),
                ];
                match poll(&mut fds, timeout) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => {
                        return Err(CdiError::Watch {
                            op: "wait for events",
                            source: e.into(),
                        })
                    }
                }
                let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
                (ready(&fds[0]), ready(&fds[1]))
            };
            if stopped {
                return Ok(Wake::Stop);
            }
            if events && self.read_events()? {
                let now = Instant::now();
                let first = burst.map_or(now, |(first, _)| first);
                burst = Some((first, now + debounce));
            }
        }
    }

    /// Reads every queued event; true when one of them matters.
    fn read_events(&mut self) -> Result<bool> {
        let mut matters = false;
        loop {
            let events = match self.inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(matters),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(CdiError::Watch {
                        op: "read inotify events",
                        source,
                    })
                }
            };
            for event in events {
                // An overflow lost events: refresh. An event of a watch dropped in `update` (its
                // IN_IGNORED) has no interest left and does not count.
                let known = self.interests.contains_key(&event.wd);
                if known
                    && event.name.is_none()
                    && event.mask.intersects(
                        EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED,
                    )
                {
                    self.lost = true;
                }
                let relevant = event.mask.contains(EventMask::Q_OVERFLOW)
                    || self
                        .interests
                        .get(&event.wd)
                        .is_some_and(|i| i.matches(event.name));
                debug!(name = ?event.name, mask = ?event.mask, relevant, "inotify event");
                matters |= relevant;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn stops_when_the_stop_descriptor_closes_and_reports_the_first_round() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let profiles = tmp.path().join("profiles");
        std::fs::create_dir(&profiles).expect("mkdir");
        let req = CdiRequest {
            root: PathBuf::from("/"),
            profiles_dir: profiles,
            output_dir: tmp.path().join("cdi"),
            ..CdiRequest::default()
        };
        let (reader, writer) = std::io::pipe().expect("pipe");
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut reports = 0;
            let result = watch(&req, &WatchOptions::default(), reader.as_fd(), &mut |_| {
                reports += 1;
                let _ = tx.send(());
            });
            (result.map_err(|e| e.to_string()), reports)
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the first round is reported");
        drop(writer);
        let (result, reports) = thread.join().expect("watch thread");
        assert_eq!(result, Ok(()));
        assert_eq!(reports, 1, "nothing changed after the first round");
    }
}
