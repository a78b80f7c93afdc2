//! Host files through a root prefix, for the tools that write on the host as root
//! (`devinject-ctl`, the installer, the DRA driver).
//!
//! The parts:
//! - [`host_root`]: where a host path is below the root prefix, the host's own links followed
//!   inside it.
//! - [`host_dir`]: every host file read, replaced or removed goes through a directory fd
//!   opened inside the root prefix; nothing at our own file names is followed or opened before
//!   its type is known (docs/security.md).
//! - [`atomic_write`]: the same replacement at a path as this process names it.
//! - [`change`] and [`diff`]: what a write changed, as a report entry and a unified diff.
//! - [`root_args`]: the `--dev-root`, `--sys-root`, `--proc-root` and `--driver-root` flags,
//!   one definition every binary flattens into its command line.
#![warn(missing_docs)]

pub mod atomic_write;
pub mod change;
pub mod diff;
pub mod error;
pub mod host_dir;
pub mod host_root;
pub mod root_args;

pub use error::{HostFsError, Result};
