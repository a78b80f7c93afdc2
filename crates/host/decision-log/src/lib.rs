//! The node's decision log: every container start that `devinject-hook`, the runtime shim
//! `devinject-runtime` or the NRI plugin `devinject-nri` refused, one JSON line each, in
//! `<decision_log_dir>/decisions.log` (the host config's key, `/run/devinject` by default).
//!
//! - [`record`] (or [`record_or_warn`], on a start path) appends a [`Decision`] (the engine path, the container, the profiles it asked
//!   for, the [`Reason`], the first line of the message the user saw, and the [`Pod`] where the
//!   runtime named one): one bounded line in
//!   one `write`, the log rotated to `decisions.log.1` past [`MAX_LOG_BYTES`];
//! - [`Follower`] returns what was appended since it last looked, across rotations: the device
//!   plugin counts refusals by reason with it, and turns those of a pod into Events on it;
//! - [`Watcher`] follows the log on a thread of its own, woken by inotify, and hands each
//!   batch to a [`Sink`]: the long-running components act on refusals as they are written;
//! - [`last`] returns the last decisions, for `devinject-ctl doctor`.
//!
//! # Why a file
//!
//! The hook and the shim are short-lived processes started by the runtime for each container;
//! they cannot keep a counter. An append-only file on the node's tmpfs costs one `write` on the
//! refusal path (never on a successful start), needs no daemon to be up, survives the plugin's
//! restarts and is gone at reboot. What the user saw is the exit code and message; the log is
//! for the operator ([`Reason`] is the exit code's word) and never changes either: a failure to
//! record is the caller's to log and ignore.
//!
//! # Security
//!
//! The directory and the files are reached through descriptors and never followed; only
//! regular files with one link are written or read, and every line and read is bounded
//! ([`dir`] says how).
#![warn(missing_docs)]

mod append;
mod decision;
pub mod dir;
mod error;
mod follower;
mod pod;
mod reason;
mod tail;
mod utc;
pub mod watcher;

pub use append::{record, record_or_warn, MAX_LOG_BYTES};
pub use decision::{
    Decision, EnginePath, MAX_CONTAINER_BYTES, MAX_LINE_BYTES, MAX_MESSAGE_BYTES, MAX_PROFILES,
    MAX_PROFILE_BYTES,
};
pub use dir::{LOG_NAME, ROTATED_NAME};
pub use error::{DecisionLogError, Result};
pub use follower::Follower;
pub use pod::{Pod, MAX_NAMESPACE_BYTES, MAX_POD_NAME_BYTES, MAX_UID_BYTES};
pub use reason::Reason;
pub use tail::{last, MAX_READ_BYTES};
pub use utc::rfc3339;
pub use watcher::{Sink, Watcher};

/// The log's directory unless the host config says otherwise (the host configuration owns the
/// default).
pub const DEFAULT_DIR: &str = devinject_hostconfig::DEFAULT_DECISION_LOG_DIR;

#[cfg(test)]
mod tests;
