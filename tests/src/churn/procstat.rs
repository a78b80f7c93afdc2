//! What a long-running component holds, read from `/proc/<pid>`: resident memory, open file
//! descriptors and threads, and the bound the run holds the last reading to.

use std::path::Path;

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// `VmRSS` in KiB.
    pub rss_kib: u64,
    /// Entries of `/proc/<pid>/fd`.
    pub fds: usize,
    pub threads: u64,
}

impl std::fmt::Display for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rss {} KiB, {} fds, {} threads",
            self.rss_kib, self.fds, self.threads
        )
    }
}

/// Reads process `pid` under the proc root `proc` (`/proc`); `None` when it is gone.
pub fn sample_in(proc: &Path, pid: u32) -> Option<Sample> {
    let dir = proc.join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let fds = std::fs::read_dir(dir.join("fd")).ok()?.count();
    Some(Sample {
        rss_kib: field("VmRSS:")?,
        fds,
        threads: field("Threads:")?,
    })
}

/// Reads process `pid` of this machine.
pub fn sample(pid: u32) -> Option<Sample> {
    sample_in(Path::new("/proc"), pid)
}

/// Slack over the first reading that the last may use: warm-up allocations, a connection or
/// two open at the moment of reading, a worker thread being retired.
const RSS_SLACK_KIB: u64 = 16 * 1024;
const FD_SLACK: usize = 16;
const THREAD_SLACK: u64 = 8;

/// Why `last` is not bounded by `first`, if it is not: RSS at most twice the first plus 16 MiB,
/// fds at most 16 more, threads at most 8 more. Growth past that over a run of a fixed workload
/// is a leak, not warm-up.
pub fn unbounded(first: &Sample, last: &Sample) -> Option<String> {
    let mut why = Vec::new();
    if last.rss_kib > first.rss_kib * 2 + RSS_SLACK_KIB {
        why.push(format!("rss {} -> {} KiB", first.rss_kib, last.rss_kib));
    }
    if last.fds > first.fds + FD_SLACK {
        why.push(format!("fds {} -> {}", first.fds, last.fds));
    }
    if last.threads > first.threads + THREAD_SLACK {
        why.push(format!("threads {} -> {}", first.threads, last.threads));
    }
    (!why.is_empty()).then(|| why.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_can_be_read() {
        let s = sample(std::process::id()).expect("our own /proc entry");
        assert!(s.rss_kib > 0 && s.fds > 0 && s.threads >= 1, "{s}");
    }

    #[test]
    fn growth_past_the_slack_is_unbounded_and_warm_up_is_not() {
        let first = Sample {
            rss_kib: 8_000,
            fds: 10,
            threads: 5,
        };
        let warm = Sample {
            rss_kib: 20_000,
            fds: 14,
            threads: 7,
        };
        assert_eq!(unbounded(&first, &warm), None);
        let leaking = Sample {
            rss_kib: 40_000,
            fds: 60,
            threads: 30,
        };
        let why = unbounded(&first, &leaking).expect("unbounded");
        assert!(
            why.contains("rss") && why.contains("fds") && why.contains("threads"),
            "{why}"
        );
    }
}
