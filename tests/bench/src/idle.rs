//! What a daemon costs while it waits: its CPU time and the context switches of its threads
//! (its wakeups), read from `/proc`, over a window. Sections 6c of docs/benchmarks.md, on a real
//! cluster (`devinject-cluster-bench --idle`) and on a simulated node (`idle-bench`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The user and system CPU time process `pid` has used (`/proc/<pid>/stat`), in clock ticks
/// (10 ms on the machines measured).
pub fn process_cpu(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').context("/proc/<pid>/stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = fields
        .get(11..13)
        .context("/proc/<pid>/stat is short")?
        .iter()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&hz| hz > 0)
        .unwrap_or(100) as u64;
    Ok(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

/// The context switches of every thread of process `pid`, voluntary and not.
pub fn context_switches(pid: u32) -> Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let status = std::fs::read_to_string(task?.path().join("status")).unwrap_or_default();
        total += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum::<u64>();
    }
    Ok(total)
}

/// One daemon's cost over a window.
#[derive(Debug, Clone, Copy)]
pub struct IdleCost {
    /// CPU seconds per hour.
    pub cpu_per_hour: f64,
    /// Context switches per second.
    pub wakeups_per_second: f64,
}

/// Where `pids` stand now, to subtract from a later [`Mark::cost`].
pub struct Mark {
    at: Instant,
    samples: Vec<(Duration, u64)>,
}

impl Mark {
    /// Reads each of `pids`.
    pub fn now(pids: &[u32]) -> Result<Self> {
        Ok(Self {
            at: Instant::now(),
            samples: pids
                .iter()
                .map(|&pid| Ok((process_cpu(pid)?, context_switches(pid)?)))
                .collect::<Result<_>>()?,
        })
    }

    /// Each of `pids`' cost since this mark (the same pids, in the same order).
    pub fn cost(&self, pids: &[u32]) -> Result<Vec<IdleCost>> {
        let now = Self::now(pids)?;
        let secs = now.at.duration_since(self.at).as_secs_f64();
        Ok(self
            .samples
            .iter()
            .zip(&now.samples)
            .map(|((cpu0, switches0), (cpu1, switches1))| IdleCost {
                cpu_per_hour: cpu1.saturating_sub(*cpu0).as_secs_f64() / secs * 3600.0,
                wakeups_per_second: switches1.saturating_sub(*switches0) as f64 / secs,
            })
            .collect())
    }
}
