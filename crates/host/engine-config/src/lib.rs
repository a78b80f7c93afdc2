//! A container engine's configuration for devinject: containerd, CRI-O, docker and podman set up
//! to run containers through devinject, and that undone exactly. `devinject-ctl runtime
//! configure` and the installer both call it; it reads and writes host files only through
//! `devinject-hostfs`.
//!
//! The parts:
//! - [`request`]: what to configure ([`ConfigureRequest`], [`UnconfigureRequest`]) and where
//!   the host's files are ([`HostPaths`]: a root prefix plus host paths).
//! - [`engines`]: one module per engine turning a request into the exact content of
//!   each file it owns (drop-ins, hooks.d files, a base spec) or edits in place (containerd's
//!   `config.toml` `imports`, docker's `daemon.json`). Engine files are edited as documents
//!   (`toml_edit`, `serde_json::Value` with key order kept), never through our own structs, so
//!   comments, order and unknown keys survive.
//! - `transaction`: the engine-independent half: compare with what is on disk, diff
//!   (`devinject_hostfs::diff`), record the prior state ([`state`]), and make the changes through a
//!   [`host_writer::HostWriter`]: atomically on the host for `devinject-ctl`
//!   ([`host_writer::Direct`], through `devinject-hostfs`, where every host file read, replaced
//!   or removed goes through a directory fd opened inside the root prefix), through its step
//!   journal for the installer.
//! - [`report`]: what changed and whether the engine must be restarted or reloaded.
//! - [`reload`]: SIGHUP for dockerd.
//!
//! Guarantees: a second configure with the same request changes nothing and says so;
//! unconfigure restores every file byte for byte (including an earlier default runtime) when
//! nobody edited it in between, and otherwise removes only devinject's entries; a file that does
//! not parse is reported with its line and never written; `dry_run` writes nothing and returns
//! the diffs. See `docs/runtime-config.md` for the resulting configuration of each engine.
#![warn(missing_docs)]

pub mod engines;
pub mod error;
pub mod host_writer;
pub mod load;
pub mod lock;
pub mod reload;
pub mod report;
pub mod request;
pub mod state;
pub mod toml_tree;
mod transaction;

pub use error::{Result, RuntimeConfigError};
pub use report::{
    Action, Activation, ChangeReport, ConfigureReport, FileChange, UnconfigureReport,
};
pub use request::{ConfigureRequest, Engine, HostPaths, Mode, UnconfigureRequest};

/// Configures `req.engine` for devinject.
///
/// Reads the engine's configuration, computes the files devinject needs, records the prior
/// state next to the engine's main configuration file (see [`state`]) and writes the files
/// atomically. With `req.dry_run` nothing is written and the report carries the diffs.
pub fn configure(req: &ConfigureRequest) -> Result<ConfigureReport> {
    configure_through(req, &mut host_writer::Direct::new(&req.paths))
}

/// [`configure`], making every change through `files` (the installer's step journal).
pub fn configure_through(
    req: &ConfigureRequest,
    files: &mut dyn host_writer::HostWriter,
) -> Result<ConfigureReport> {
    transaction::configure(req, files)
}

/// Undoes [`configure`] for `req.engine`, restoring what was there before.
pub fn unconfigure(req: &UnconfigureRequest) -> Result<UnconfigureReport> {
    unconfigure_through(req, &mut host_writer::Direct::new(&req.paths))
}

/// [`unconfigure`], making every change through `files` (the installer's step journal).
pub fn unconfigure_through(
    req: &UnconfigureRequest,
    files: &mut dyn host_writer::HostWriter,
) -> Result<UnconfigureReport> {
    transaction::unconfigure(req, files)
}
