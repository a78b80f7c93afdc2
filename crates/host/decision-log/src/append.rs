//! Appending a decision, and rotating the log when it is full.
//!
//! One `write(2)` of one whole line on an `O_APPEND` descriptor: the kernel places it at the end
//! and writes it whole (a regular file's writes hold its inode lock), so hooks of concurrent
//! starts never interleave their lines. A log that would pass [`MAX_LOG_BYTES`] is renamed to
//! `decisions.log.1` (replacing the one before) by whichever writer takes the directory's lock
//! first, without waiting: a writer that finds it taken appends to the file it has open, which
//! the rotation then carries away. The two files together stay near twice [`MAX_LOG_BYTES`].

use std::io::Write;
use std::path::Path;

use nix::sys::stat::FileStat;

use crate::decision::Decision;
use crate::dir::{size, Access, Identity, LogDir, LOG_NAME};
use crate::error::{DecisionLogError, Result};

/// The size past which the log is rotated.
pub const MAX_LOG_BYTES: u64 = 1 << 20;

/// Appends `decision` as one line to `<dir>/decisions.log`, making `dir` (mode 0700) when it is
/// missing, and rotating the log when it is full.
///
/// Never waits on another writer. A caller on a container's start path logs an error and goes
/// on: the log must not change what the start does.
pub fn record(dir: &Path, decision: &Decision) -> Result<()> {
    let line = decision.to_line();
    let Some(dir) = LogDir::open(dir, true)? else {
        return Ok(());
    };
    let (mut file, st) = open_log(&dir)?;
    if size(&st) + line.len() as u64 > MAX_LOG_BYTES {
        if let Some(fresh) = rotate(&dir, &st)? {
            file = fresh;
        }
    }
    let path = dir.file_path(LOG_NAME);
    match file.write(&line) {
        Ok(n) if n == line.len() => Ok(()),
        Ok(_) => Err(DecisionLogError::Io {
            op: "append to",
            path,
            source: std::io::ErrorKind::WriteZero.into(),
        }),
        Err(source) => Err(DecisionLogError::Io {
            op: "append to",
            path,
            source,
        }),
    }
}

/// Records `decision` in `dir` when there is one (the host config's `decision_log_dir` may turn
/// the log off), for a daemon on a container's start path (the NRI plugin): a failure to record
/// is logged at `warn` in the daemon's own log and otherwise ignored, so the start's outcome and
/// message stay what they were. (The hook and the shim log it at `debug`: their stderr is the
/// user's message.)
pub fn record_or_warn(dir: Option<&Path>, decision: &Decision) {
    let Some(dir) = dir else {
        return;
    };
    if let Err(e) = record(dir, decision) {
        tracing::warn!(
            container = %decision.container,
            reason = %decision.reason,
            "the refusal is not in the decision log: {e}"
        );
    }
}

/// How often a log that other writers' rotations unlinked between our open and our check is
/// opened again.
const OPEN_TRIES: usize = 4;

fn open_log(dir: &LogDir) -> Result<(std::fs::File, FileStat)> {
    let mut tries = 0;
    loop {
        // Two rotations between our open and our `fstat` (the log renamed to `.1`, then that
        // replaced) leave us a file with no link at all: the name holds a fresh log by then.
        match dir.open_file(LOG_NAME, Access::Append) {
            Err(DecisionLogError::HardLinked { links: 0, .. }) if tries + 1 < OPEN_TRIES => {
                tries += 1;
            }
            opened => {
                return opened?.ok_or_else(|| DecisionLogError::Io {
                    op: "open",
                    path: dir.file_path(LOG_NAME),
                    source: std::io::ErrorKind::NotFound.into(),
                })
            }
        }
    }
}

/// Rotates the full log `full` when this writer gets the lock, and returns the new log;
/// `None` when another writer holds the lock (it is rotating).
fn rotate(dir: &LogDir, full: &FileStat) -> Result<Option<std::fs::File>> {
    let Some(_lock) = dir.try_lock() else {
        return Ok(None);
    };
    // Another writer may have rotated it between our open and our lock: then the name holds
    // a fresh log already.
    let still = dir
        .stat(LOG_NAME)?
        .is_some_and(|now| Identity::of(&now) == Identity::of(full));
    if still {
        dir.rotate()?;
    }
    Ok(Some(open_log(dir)?.0))
}
