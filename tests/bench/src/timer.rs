//! Timing a devinject binary by itself, where it really runs.
//!
//! For the hook's own figures the createRuntime hook entry points at `devinject-bench time`,
//! which spawns the real hook with the same stdin (runc's OCI state) and the same empty
//! environment, waits for it, and appends one record: wall time from spawn to exit (fork, exec,
//! dynamic loading and everything the hook does, including its own children), and from
//! `getrusage(RUSAGE_CHILDREN)` the CPU time (user + system) of the hook and everything it waited
//! for, such as ldconfig, and the largest peak RSS among them. On a busy machine wall time also
//! counts waiting for a CPU; CPU time does not. The shim is timed the same way in front of `/bin/true`. The wrapper's own
//! start-up is outside the figure, and these runs are not used for the end-to-end columns.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::stats::children_usage;

/// One timed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Spawn to exit.
    pub wall: Duration,
    /// User + system CPU time of the process and its waited-for children.
    pub cpu: Duration,
    /// Peak RSS in KiB.
    pub max_rss_kib: u64,
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
}

impl Record {
    fn line(&self) -> String {
        format!(
            "{} {} {} {}\n",
            self.wall.as_nanos(),
            self.max_rss_kib,
            self.code,
            self.cpu.as_nanos()
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let mut it = line.split_whitespace();
        let wall = Duration::from_nanos(it.next()?.parse().ok()?);
        let max_rss_kib = it.next()?.parse().ok()?;
        let code = it.next()?.parse().ok()?;
        let cpu = Duration::from_nanos(it.next()?.parse().ok()?);
        Some(Self {
            wall,
            cpu,
            max_rss_kib,
            code,
        })
    }
}

/// Runs `command` (a program and its arguments), appends its record to `record`, and returns
/// its exit code for the wrapper to exit with.
pub fn time_command(record: &Path, command: &[OsString]) -> Result<i32> {
    let Some((program, args)) = command.split_first() else {
        bail!("time needs the command after --");
    };
    let start = Instant::now();
    let status = Command::new(program)
        .args(args)
        .status()
        .with_context(|| format!("run {}", program.to_string_lossy()))?;
    let wall = start.elapsed();
    let (cpu, max_rss_kib) = children_usage()?;
    let rec = Record {
        wall,
        cpu,
        max_rss_kib,
        code: status.code().unwrap_or(-1),
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(record)
        .with_context(|| format!("open {}", record.display()))?;
    f.write_all(rec.line().as_bytes())?;
    Ok(rec.code)
}

/// Reads the records appended to `record`.
pub fn read_records(record: &Path) -> Result<Vec<Record>> {
    let text = match std::fs::read_to_string(record) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("read {}", record.display())),
    };
    text.lines()
        .map(|l| Record::parse(l).with_context(|| format!("bad timing record {l:?}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_real_child_is_timed() {
        let t = tempfile::tempdir().unwrap();
        let rec = t.path().join("t.rec");
        let code = time_command(&rec, &["/bin/sh".into(), "-c".into(), "exit 3".into()]).unwrap();
        assert_eq!(code, 3);
        time_command(&rec, &["/bin/true".into()]).unwrap();
        let got = read_records(&rec).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].code, got[1].code), (3, 0));
        assert!(got[0].wall > Duration::ZERO && got[0].max_rss_kib > 0);
        assert!(read_records(&t.path().join("none")).unwrap().is_empty());
    }
}
