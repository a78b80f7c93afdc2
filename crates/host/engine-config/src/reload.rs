//! Telling a running daemon to re-read its configuration.

use std::path::Path;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{Result, RuntimeConfigError};

/// Default pid file of dockerd.
pub const DOCKERD_PIDFILE: &str = "/var/run/docker.pid";

/// Sends SIGHUP to the dockerd whose pid is in `pidfile` (an access path); dockerd then re-reads
/// daemon.json, including `runtimes` and `default-runtime`.
pub fn reload_dockerd(pidfile: &Path) -> Result<()> {
    let fail = |message: String| RuntimeConfigError::Reload {
        daemon: "dockerd",
        pidfile: pidfile.to_path_buf(),
        message,
    };
    let text =
        std::fs::read_to_string(pidfile).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let pid: i32 = text
        .trim()
        .parse()
        .map_err(|_| fail(format!("it holds {:?}, not a pid", text.trim())))?;
    if pid <= 1 {
        return Err(fail(format!("it holds pid {pid}")));
    }
    kill(Pid::from_raw(pid), Signal::SIGHUP).map_err(|e| fail(format!("kill -HUP {pid}: {e}")))?;
    tracing::info!(pid, "sent SIGHUP to dockerd");
    Ok(())
}
