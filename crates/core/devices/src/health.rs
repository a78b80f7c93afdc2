//! Device health read on a schedule: when, and which attribute.
//!
//! sysfs raises an inotify event on an attribute only when its driver calls `sysfs_notify`
//! (kernel docs, `Documentation/filesystems/sysfs.rst`, "poll"), and few drivers do for a
//! health or status attribute. So the long-running components (the device plugin, the DRA
//! driver) keep inotify for presence (the devinject-discovery crate's `watch`) and, besides,
//! read each found device's health attribute again every [`Profile::health_interval`]: one
//! read per device per interval, not a discovery (the devinject-discovery crate's
//! `refresh_health`). One [`HealthSchedule`] serves every profile of a component, so the
//! component has one timer however many profiles it serves.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::node_name::{substitute, trailing_number};
use crate::profile::Profile;
use crate::roots::HostRoots;

pub use crate::profile::DEFAULT_HEALTH_INTERVAL;

/// The health attribute of `device` under `roots`, as discovery reads it; `None` when the
/// profile names none.
pub fn health_attribute(profile: &Profile, roots: &HostRoots, device: &str) -> Option<PathBuf> {
    let template = profile.discovery.health_sysfs.as_deref()?;
    Some(roots.in_sys_root(&substitute(template, device, trailing_number(device))))
}

/// When each key (a profile, a resource) is due for its health reads. Every key's reads fall on
/// multiples of its interval from one common start, so keys with the same interval, or with
/// intervals that are multiples of one another, come due at the same instants: one wakeup
/// serves them all.
#[derive(Debug, Clone)]
pub struct HealthSchedule<K> {
    entries: Vec<Entry<K>>,
}

#[derive(Debug, Clone)]
struct Entry<K> {
    key: K,
    every: Duration,
    next: Instant,
}

impl<K: Clone> HealthSchedule<K> {
    /// A schedule from `start` for each `(key, interval)`; a zero interval is left out (nothing
    /// to read).
    pub fn new(start: Instant, keys: impl IntoIterator<Item = (K, Duration)>) -> Self {
        Self {
            entries: keys
                .into_iter()
                .filter(|(_, every)| !every.is_zero())
                .map(|(key, every)| Entry {
                    key,
                    every,
                    next: start + every,
                })
                .collect(),
        }
    }

    /// A schedule for the profiles of `profiles` that have a health attribute, keyed by
    /// `key(profile)`.
    pub fn for_profiles<'a>(
        start: Instant,
        profiles: impl IntoIterator<Item = &'a Profile>,
        key: impl Fn(&Profile) -> K,
    ) -> Self {
        Self::new(
            start,
            profiles
                .into_iter()
                .filter_map(|p| Some((key(p), p.health_interval()?))),
        )
    }

    /// True when no key has anything to read: the caller need not wait on it.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The next instant a key is due; `None` for an empty schedule.
    pub fn next_due(&self) -> Option<Instant> {
        self.entries.iter().map(|e| e.next).min()
    }

    /// The keys due at `now`, each moved on to its next multiple of its interval after `now`
    /// (a late wakeup skips the reads it missed rather than running them back to back).
    pub fn take_due(&mut self, now: Instant) -> Vec<K> {
        let mut due = Vec::new();
        for entry in &mut self.entries {
            if entry.next > now {
                continue;
            }
            let behind = now.duration_since(entry.next).as_nanos() / entry.every.as_nanos();
            let skip = u32::try_from(behind + 1).unwrap_or(u32::MAX);
            entry.next += entry.every.saturating_mul(skip);
            due.push(entry.key.clone());
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn keys_with_related_intervals_come_due_together() {
        let start = Instant::now();
        let mut s = HealthSchedule::new(start, [("a", ms(100)), ("b", ms(100)), ("c", ms(200))]);
        assert_eq!(s.next_due(), Some(start + ms(100)));
        assert!(s.take_due(start + ms(99)).is_empty());
        assert_eq!(s.take_due(start + ms(100)), ["a", "b"]);
        assert_eq!(s.next_due(), Some(start + ms(200)));
        assert_eq!(s.take_due(start + ms(200)), ["a", "b", "c"]);
        assert_eq!(s.next_due(), Some(start + ms(300)));
    }

    #[test]
    fn a_late_wakeup_reads_once_and_keeps_the_grid() {
        let start = Instant::now();
        let mut s = HealthSchedule::new(start, [("a", ms(100))]);
        assert_eq!(s.take_due(start + ms(350)), ["a"]);
        assert_eq!(s.next_due(), Some(start + ms(400)));
        assert!(s.take_due(start + ms(399)).is_empty());
    }

    #[test]
    fn nothing_to_read_is_an_empty_schedule() {
        let s = HealthSchedule::new(Instant::now(), [("a", Duration::ZERO)]);
        assert!(s.is_empty());
        assert_eq!(s.next_due(), None);
    }

    #[test]
    fn only_profiles_with_a_health_attribute_are_scheduled() {
        let profile = |extra: &str| {
            Profile::parse(
                &format!(
                    "name = \"p\"\nresource = \"x.io/p\"\n[discovery]\nnodes = [\"p*\"]\n{extra}"
                ),
                Path::new("p.toml"),
            )
            .unwrap()
        };
        let with = profile("health_sysfs = \"class/p/{name}/health\"\nhealth_interval_ms = 250\n");
        let default = profile("health_sysfs = \"class/p/{name}/health\"\n");
        let without = profile("");
        let start = Instant::now();
        let s = HealthSchedule::for_profiles(start, [&with, &default, &without], |p| {
            p.discovery.health_interval_ms
        });
        assert_eq!(s.next_due(), Some(start + ms(250)));
        assert_eq!(s.entries.len(), 2);
        assert_eq!(
            s.entries[1].next,
            start + DEFAULT_HEALTH_INTERVAL,
            "unset: the default"
        );
    }
}
