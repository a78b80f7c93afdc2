//! The one error type of the host-file layer.
//!
//! Every variant names the path (as this process sees it, with the root prefix) and the
//! operation or what was found there, so the first line a user sees says what to fix.

use std::path::PathBuf;

/// Errors from reading, replacing or removing a host file through a directory fd.
#[derive(Debug, thiserror::Error)]
pub enum HostFsError {
    /// A filesystem operation failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done: "read", "write", "rename", ...
        op: &'static str,
        /// The path it was done to (as seen by this process, i.e. with the root prefix).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// Something other than a regular file (with one link, at our own names) is at a path
    /// devinject reads, replaces or removes: it is neither followed, opened, replaced nor removed.
    #[error(
        "{} is a {what}, not a regular file devinject can use; devinject neither follows, opens, \
         replaces nor removes it: remove it (or move it away) and run again",
        path.display()
    )]
    NotAFile {
        /// The path (as seen by this process).
        path: PathBuf,
        /// What is there: "symbolic link", "FIFO", "character device", ...
        what: &'static str,
    },

    /// A host file is larger than any file devinject reads.
    #[error(
        "{} is {size} bytes, more than the {max} devinject reads; it is not a file devinject wrote: move it away and run again",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// What `fstat` said of it.
        size: u64,
        /// The bound.
        max: u64,
    },

    /// A file read as text is not UTF-8.
    #[error(
        "{}: the file is not UTF-8 text; fix its encoding (the file was not changed)",
        path.display()
    )]
    NotText {
        /// The file.
        path: PathBuf,
    },
}

/// Result alias for this crate.
pub type Result<T, E = HostFsError> = std::result::Result<T, E>;

impl HostFsError {
    /// Builds an [`HostFsError::Io`] error.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HostFsError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether the error is about what is at a host path (a file to move away or fix), as
    /// opposed to the system.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, HostFsError::Io { .. })
    }
}
