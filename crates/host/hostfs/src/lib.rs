//! Host files opened by name without trusting the name. Every program that runs as root opens a
//! file someone else may control through [`path_fd`]; the tools that write on the host
//! (`devinject-ctl`, the installer, the DRA driver) do it through a root prefix with the rest.
//!
//! The parts:
//! - [`path_fd`] and [`file_kind`]: the one way a name someone else may control is opened, and
//!   the words every refusal uses for what it found.
//! - [`host_root`]: where a host path is below the root prefix, the host's own links followed
//!   inside it.
//! - [`host_dir`]: every host file read, replaced or removed goes through a directory fd
//!   opened inside the root prefix; nothing at our own file names is followed or opened before
//!   its type is known (docs/security.md).
//! - [`atomic_write`]: the same replacement at a path as this process names it.
//! - [`change`] and [`diff`]: what a write changed, as a report entry and a unified diff.
#![warn(missing_docs)]

pub mod atomic_write;
pub mod change;
pub mod diff;
pub mod error;
pub mod file_kind;
pub mod host_dir;
pub mod host_root;
pub mod path_fd;

pub use error::{HostFsError, Result};
