//! Following the log from a thread of its own, woken by inotify: what a long-running component
//! (the device plugin, the DRA driver) uses to act on each refusal as it is written (count it,
//! post it as an Event on its pod), never on a timer of its own and never on a caller's thread.
//!
//! The thread reads what was appended ([`Follower`], across rotations), hands it to a [`Sink`],
//! then waits for an event in the log's directory or for the [`Watcher`] to be dropped, with no
//! timeout: the writers are processes of this host, whose writes fsnotify reports on every
//! filesystem, and a queue overflow is an event too. Only while the directory does not exist
//! (nothing refused yet: the DaemonSet creates it) or cannot be watched does it look again
//! every [`RETRY`]. Each wake reads at most [`MAX_POLLS`] times the follower's bounded read;
//! the rest comes at the next. A log rotated twice between two looks loses its older entries
//! to the sink (the log holds thousands of lines).

use std::io::{PipeReader, PipeWriter};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::decision::Decision;
use crate::follower::Follower;

/// How often the directory is looked for while it is missing or cannot be watched.
pub const RETRY: Duration = Duration::from_secs(5);
/// The most follower reads per wake.
pub const MAX_POLLS: usize = 16;

/// What the thread hands what it reads to.
pub trait Sink: Send + 'static {
    /// Called at the start of every look, before any [`Sink::read`] of it.
    fn looked(&mut self) {}
    /// The decisions appended since the last read, in order; never empty.
    fn read(&mut self, decisions: Vec<Decision>);
}

/// The thread following a log; dropping it ends the thread.
#[derive(Debug)]
pub struct Watcher {
    /// Closed on drop, which wakes the thread to end.
    _stop: PipeWriter,
}

impl Watcher {
    /// Follows the log in `dir` from its end now (decisions recorded before are not read),
    /// handing what is appended to `sink`.
    pub fn spawn(dir: &Path, sink: impl Sink) -> std::io::Result<Watcher> {
        let (stop_reader, stop) = std::io::pipe()?;
        // Starts at the log's end now, before this returns.
        let follower = Follower::new(dir);
        let dir = dir.to_owned();
        std::thread::Builder::new()
            .name("decision-log".into())
            .spawn(move || run(&dir, follower, sink, &stop_reader))?;
        Ok(Watcher { _stop: stop })
    }
}

/// Reads what was appended, then waits for an event in the directory or for `stop` to be
/// closed (and, while the directory is not watched, for [`RETRY`] to pass), and again.
fn run(dir: &Path, mut follower: Follower, mut sink: impl Sink, stop: &PipeReader) {
    let mut watch = Watch::new(dir);
    loop {
        catch_up(dir, &mut follower, &mut sink);
        let timeout = if watch.watching() {
            PollTimeout::NONE
        } else {
            PollTimeout::try_from(RETRY).unwrap_or(PollTimeout::MAX)
        };
        let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
        if let Some(inotify) = &watch.inotify {
            fds.push(PollFd::new(inotify.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(error) => {
                tracing::warn!(%error, "waiting for the decision log: looking again later");
                std::thread::sleep(RETRY);
            }
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        if ready(&fds[0]) {
            return;
        }
        let events = fds.get(1).is_some_and(ready);
        drop(fds);
        if events {
            watch.drain();
        }
        watch.ensure(dir);
    }
}

/// Hands `sink` what was appended to the log since the last look, [`MAX_POLLS`] reads at most.
fn catch_up(dir: &Path, follower: &mut Follower, sink: &mut impl Sink) {
    sink.looked();
    for _ in 0..MAX_POLLS {
        let decisions = match follower.poll() {
            Ok(decisions) => decisions,
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "reading the decision log");
                return;
            }
        };
        if decisions.is_empty() {
            return;
        }
        sink.read(decisions);
    }
}

/// inotify on the log's directory, when it exists and can be watched.
struct Watch {
    inotify: Option<Inotify>,
    wd: Option<WatchDescriptor>,
    buffer: Vec<u8>,
}

impl Watch {
    fn new(dir: &Path) -> Self {
        let inotify = Inotify::init()
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot watch the decision log: reading it every few seconds");
            })
            .ok();
        let mut watch = Watch {
            inotify,
            wd: None,
            buffer: vec![0; 4096],
        };
        watch.ensure(dir);
        watch
    }

    /// Whether the directory is watched, so that an event wakes the thread.
    fn watching(&self) -> bool {
        self.wd.is_some()
    }

    /// Watches `dir` when it is not watched yet: the log's writes, its rotations, and the
    /// directory itself going away. Not followed when it is a link.
    fn ensure(&mut self, dir: &Path) {
        let (Some(inotify), None) = (&self.inotify, &self.wd) else {
            return;
        };
        let mask = WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::CREATE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::DELETE
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR
            | WatchMask::DONT_FOLLOW;
        // Missing until the first refusal on the node: looked for again every RETRY.
        self.wd = inotify.watches().add(dir, mask).ok();
    }

    /// Reads every queued event; forgets the watch when the directory went away or moved, so
    /// that the next [`Watch::ensure`] watches whatever holds its name then.
    fn drain(&mut self) {
        let Some(inotify) = &mut self.inotify else {
            return;
        };
        loop {
            let events = match inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // WouldBlock: all read. Another error: the next wake reads again.
                Err(_) => return,
            };
            for event in events {
                if event
                    .mask
                    .intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF)
                {
                    if let Some(wd) = self.wd.take() {
                        // Already gone with the directory; nothing else to undo.
                        let _ = inotify.watches().remove(wd);
                    }
                }
            }
        }
    }
}
