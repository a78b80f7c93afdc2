//! What the driver says about one of its watches of the API server: a failure once until it
//! changes (kube's watcher retries with a backoff, and a server that is down would otherwise
//! fill the log with one line per retry), and that it works again once it does.

use std::fmt::Display;

use tracing::{info, warn};

/// The log of one watch: its object (`the ResourceClaims`) and what holds while it fails.
#[derive(Debug)]
pub struct WatchLog {
    what: &'static str,
    meanwhile: &'static str,
    failing: Option<String>,
}

impl WatchLog {
    /// A watch of `what`, which says `meanwhile` while it fails.
    pub fn new(what: &'static str, meanwhile: &'static str) -> Self {
        Self {
            what,
            meanwhile,
            failing: None,
        }
    }

    /// The event of a watch step, or `None` for a failure, logged when it is new.
    pub fn event<T, E: Display>(&mut self, step: Result<T, E>) -> Option<T> {
        match step {
            Ok(event) => {
                if self.failing.take().is_some() {
                    info!("watching {} works again", self.what);
                }
                Some(event)
            }
            Err(e) => {
                let error = e.to_string();
                if self.failing.as_ref() != Some(&error) {
                    warn!(error = %error, "watching {} failed; retrying ({})", self.what, self.meanwhile);
                    self.failing = Some(error);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_kept_until_it_changes_and_a_success_clears_it() {
        let mut log = WatchLog::new("the things", "nothing changes");
        assert_eq!(log.event::<_, String>(Ok(1)), Some(1));
        assert_eq!(log.failing, None);
        assert_eq!(log.event::<i32, _>(Err("refused")), None);
        assert_eq!(log.failing.as_deref(), Some("refused"));
        assert_eq!(log.event::<i32, _>(Err("refused")), None);
        assert_eq!(log.event::<i32, _>(Err("timed out")), None);
        assert_eq!(log.failing.as_deref(), Some("timed out"));
        assert_eq!(log.event::<_, String>(Ok(2)), Some(2));
        assert_eq!(log.failing, None);
    }
}
