//! The installer's error type.
//!
//! Every variant names what it was working on (a path, an engine, a step), so the first line a
//! user sees in `kubectl logs` says what failed; the binary adds what was undone.

use std::path::PathBuf;

use devinject_engine_config::{Engine, RuntimeConfigError};
use devinject_hostfs::HostFsError;

/// Errors from installing or uninstalling devinject on a host.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A filesystem operation failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done: "read", "write", "rename", ...
        op: &'static str,
        /// The path, as this process sees it (with the host root prefix).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The runtime configuration library refused or failed.
    #[error("configuring {engine}: {source}")]
    RuntimeConfig {
        /// The engine being configured.
        engine: Engine,
        /// What the library said.
        #[source]
        source: RuntimeConfigError,
    },

    /// A host file at a name the installer reads, replaces or removes (the journal, its
    /// backups, the install record, an installed file) is not a regular file with one link, is
    /// too large, or could not be reached through its directory's fd.
    #[error(transparent)]
    HostFile(HostFsError),

    /// No container engine was found on the host, or the one asked for is not there.
    #[error("{0}")]
    Detect(String),

    /// A device profile to install is invalid.
    #[error("profile check failed: {0}")]
    Profiles(#[from] devinject_devices::ProfileError),

    /// The generated host configuration is not accepted by the hook built into this image.
    #[error(
        "the hook in this image rejects the host config it would get ({message}); \
         use an image whose hook supports these settings, or change --policy"
    )]
    HostConfigRejected {
        /// The parser's message.
        message: String,
    },

    /// A k3s/RKE2 containerd template is in the way.
    #[error("{}: {problem}; {fix} (nothing was changed)", path.display())]
    Template {
        /// The template file (host path).
        path: PathBuf,
        /// What is wrong.
        problem: String,
        /// What the user should do.
        fix: String,
    },

    /// Restarting or reloading the engine failed.
    #[error("cannot {action} {engine}: {message}")]
    Activate {
        engine: Engine,
        /// "restart" or "reload".
        action: &'static str,
        /// What went wrong.
        message: String,
    },

    /// The installer's journal or install record is unreadable.
    #[error("{} is damaged: {message}; remove it after checking the host by hand", path.display())]
    State {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// Another installer holds the lock.
    #[error("another devinject-installer is running on this host (lock {} is held)", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
    },

    /// The request does not make sense.
    #[error("{0}")]
    InvalidRequest(String),

    /// A fault injected for testing (see [`crate::fault`]).
    #[error("injected fault at {0}")]
    Injected(String),
}

/// Result alias for this crate.
pub type Result<T, E = InstallError> = std::result::Result<T, E>;

impl InstallError {
    /// Builds an [`InstallError::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        InstallError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Wraps a runtime-config error for `engine`.
    pub(crate) fn runtime(engine: Engine) -> impl FnOnce(RuntimeConfigError) -> Self {
        move |source| match source {
            // The journal's own error, passed through the library's change: it is ours.
            RuntimeConfigError::Files(inner) => match inner.downcast::<InstallError>() {
                Ok(ours) => *ours,
                Err(other) => InstallError::RuntimeConfig {
                    engine,
                    source: RuntimeConfigError::Files(other),
                },
            },
            source => InstallError::RuntimeConfig { engine, source },
        }
    }

    /// Whether the error is about the content of a host file or a profile (nothing was changed
    /// by the failing step, the user must fix a file), as opposed to the system.
    pub fn is_bad_input(&self) -> bool {
        match self {
            InstallError::RuntimeConfig { source, .. } => source.is_bad_input(),
            InstallError::HostFile(source) => source.is_bad_input(),
            InstallError::Profiles(_)
            | InstallError::HostConfigRejected { .. }
            | InstallError::Template { .. }
            | InstallError::State { .. } => true,
            _ => false,
        }
    }
}
