//! The one error type of the library.
//!
//! Every variant names the file and the operation, so that the first line a user sees says what
//! failed and what to do. A host configuration file that cannot be parsed or has an unexpected
//! shape is never written: the messages say so.

use std::path::PathBuf;

use devinject_hostfs::HostFsError;

/// Errors from configuring or unconfiguring a container engine.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeConfigError {
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

    /// A host configuration file is not valid TOML or JSON.
    #[error(
        "{}:{line}:{column}: {message}; fix the syntax there and run again (the file was not changed)",
        path.display()
    )]
    Syntax {
        /// The broken file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the parser said.
        message: String,
    },

    /// A host configuration file parses but has a shape devinject-ctl cannot edit safely.
    #[error("{}{}: {problem}; {fix} (the file was not changed)", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending key, when known.
        line: Option<usize>,
        /// What is wrong with it.
        problem: String,
        /// What the user should do.
        fix: String,
    },

    /// A file devinject-ctl would create already exists and was not written by it.
    #[error(
        "{} exists and was not written by devinject-ctl; move it away (or remove it) and run again",
        path.display()
    )]
    NotOurs {
        /// The file.
        path: PathBuf,
    },

    /// Reading, replacing or removing a host file failed, or what is at its name is not a
    /// regular file devinject may use, or is too large or not text.
    #[error(transparent)]
    HostFs(#[from] HostFsError),

    /// The request cannot be carried out for this engine.
    #[error("{0}")]
    InvalidRequest(String),

    /// Our own state file is unreadable.
    #[error(
        "state file {} is damaged: {message}; restore the engine's configuration by hand and remove it",
        path.display()
    )]
    State {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// A helper command (e.g. `ctr oci spec`) could not be run or failed.
    #[error("`{command}` failed: {message}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and stderr, or why it could not start.
        message: String,
    },

    /// The caller's [`crate::host_writer::HostWriter`] refused or failed a change (the
    /// installer's journal could not save what the path held); its own error, kept whole so the
    /// caller can take it back.
    #[error(transparent)]
    Files(Box<dyn std::error::Error + Send + Sync>),

    /// Telling a daemon to reload its configuration failed.
    #[error("cannot reload {daemon} (pid file {}): {message}", pidfile.display())]
    Reload {
        /// The daemon, e.g. "dockerd".
        daemon: &'static str,
        /// The pid file that was read.
        pidfile: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = RuntimeConfigError> = std::result::Result<T, E>;

impl RuntimeConfigError {
    /// Builds an [`RuntimeConfigError::Io`] error.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RuntimeConfigError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether the error is about the content of a host file (as opposed to the system, the
    /// request or a helper). The CLI maps this to its own exit code.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            RuntimeConfigError::Syntax { .. }
                | RuntimeConfigError::Unsupported { .. }
                | RuntimeConfigError::NotOurs { .. }
                | RuntimeConfigError::State { .. }
        ) || match self {
            RuntimeConfigError::HostFs(e) => e.is_bad_input(),
            _ => false,
        }
    }
}
