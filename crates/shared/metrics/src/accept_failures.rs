//! Failed `accept`s of the servers the components run (the metrics endpoint, the webhook):
//! paced and logged at a bounded rate, so that a process out of descriptors neither spins a
//! core nor floods its log.

use std::time::{Duration, Instant};

/// How often failed `accept`s are logged at most.
pub const ACCEPT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Paces and logs failed `accept`s: a pause doubling from `pause_min` to `pause_max` while they
/// fail in a row, one log line per [`ACCEPT_LOG_INTERVAL`] with how many were not logged in
/// between.
#[derive(Debug)]
pub struct AcceptFailures {
    what: &'static str,
    pause_min: Duration,
    pause_max: Duration,
    pause: Option<Duration>,
    logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptFailures {
    /// The failures of a server that logs them as `what`, pausing from `pause_min` to
    /// `pause_max` (the same for a fixed pause).
    pub fn new(what: &'static str, pause_min: Duration, pause_max: Duration) -> Self {
        AcceptFailures {
            what,
            pause_min,
            pause_max,
            pause: None,
            logged: None,
            unlogged: 0,
        }
    }

    /// Notes a failure at `now`, logs it when it is time, and says how long to pause.
    pub fn failed(&mut self, error: &std::io::Error, now: Instant) -> Duration {
        let pause = self
            .pause
            .map_or(self.pause_min, |p| (p * 2).min(self.pause_max));
        self.pause = Some(pause);
        if self
            .logged
            .is_some_and(|at| now.duration_since(at) < ACCEPT_LOG_INTERVAL)
        {
            self.unlogged += 1;
        } else {
            tracing::warn!(%error, also_failed = self.unlogged, "{}", self.what);
            self.logged = Some(now);
            self.unlogged = 0;
        }
        pause
    }

    /// Notes an accept that worked: the next failure pauses the least again.
    pub fn succeeded(&mut self) {
        self.pause = None;
    }

    /// When the last line was logged.
    pub fn last_logged(&self) -> Option<Instant> {
        self.logged
    }

    /// Failures not logged since the last line.
    pub fn unlogged(&self) -> u64 {
        self.unlogged
    }
}
