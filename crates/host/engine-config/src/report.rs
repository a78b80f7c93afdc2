//! What configure / unconfigure did, and what the engine needs for it to take effect.

use std::path::PathBuf;

pub use devinject_hostfs::change::{Action, FileChange};

use crate::request::{Engine, Mode};

/// What the engine needs before a change takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Nothing changed, or nothing is needed.
    None,
    /// The daemon must be restarted (containerd, CRI-O): it has no configuration reload for
    /// runtimes. Running containers survive (their shims / conmon keep running).
    Restart {
        /// The systemd unit, by its usual name.
        service: &'static str,
    },
    /// The daemon reloads its configuration on SIGHUP (dockerd).
    Reload {
        /// The systemd unit, by its usual name.
        service: &'static str,
    },
    /// Picked up by the next container start: hooks.d files are re-read by CRI-O (it watches the
    /// directory) and podman reads its configuration on every command.
    NextContainer,
}

impl Activation {
    /// A one-line instruction for the user, or `None` when nothing is needed.
    pub fn instruction(&self) -> Option<String> {
        match self {
            Activation::None => None,
            Activation::Restart { service } => Some(format!(
                "restart {service} for the change to take effect: systemctl restart {service}"
            )),
            Activation::Reload { service } => Some(format!(
                "reload {service} for the change to take effect: systemctl reload {service} \
                 (or send SIGHUP to dockerd)"
            )),
            Activation::NextContainer => {
                Some("takes effect for containers started from now on".to_string())
            }
        }
    }
}

/// The result of [`crate::configure`] or [`crate::unconfigure`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct ChangeReport {
    pub engine: Engine,
    /// The mode configured (configure), or the mode that was removed (unconfigure, when known).
    pub mode: Option<Mode>,
    /// Whether this was a dry run (nothing written).
    pub dry_run: bool,
    /// The files changed, in the order they were (or would be) written.
    pub changes: Vec<FileChange>,
    /// What the engine needs for the changes to take effect; [`Activation::None`] when nothing
    /// changed.
    pub activation: Activation,
    /// Where the prior state is remembered (host path).
    pub state_file: PathBuf,
    /// Remarks for the user (e.g. "file was edited since configure").
    pub notes: Vec<String>,
}

/// The result of [`crate::configure`].
pub type ConfigureReport = ChangeReport;
/// The result of [`crate::unconfigure`].
pub type UnconfigureReport = ChangeReport;

impl ChangeReport {
    /// Whether any host configuration file changed (or would change, for a dry run).
    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    /// All diffs, concatenated.
    pub fn diff(&self) -> String {
        self.changes.iter().map(|c| c.diff.as_str()).collect()
    }
}
