//! The one error type of CDI export.

use devinject_hostfs::HostFsError;

/// Errors from building, writing or watching CDI specs.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// A device profile could not be loaded, or its devices or files could not be found, or
    /// its spec would be invalid (the message names the profile and the file).
    #[error("{message}")]
    Devices {
        /// The devices crate's message.
        message: String,
    },

    /// Watching the host for changes (`cdi generate --watch`) failed: inotify or poll(2).
    #[error("cannot {op} for the CDI watch")]
    Watch {
        /// What was being done: "set up inotify", "wait for events", ...
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// Reading, replacing or removing a spec file failed, or something not ours is at its
    /// name.
    #[error(transparent)]
    HostFs(#[from] HostFsError),
}

/// A devices-crate error (a profile, discovery, driver files) as [`CdiError::Devices`].
pub(crate) fn devices_error(e: impl std::fmt::Display) -> CdiError {
    CdiError::Devices {
        message: e.to_string(),
    }
}

/// Result alias for this crate.
pub type Result<T, E = CdiError> = std::result::Result<T, E>;

impl CdiError {
    /// Whether the error is about the content of a file (a profile, what is at a spec's name),
    /// as opposed to the system.
    pub fn is_bad_input(&self) -> bool {
        match self {
            CdiError::Devices { .. } => true,
            CdiError::Watch { .. } => false,
            CdiError::HostFs(e) => e.is_bad_input(),
        }
    }

    /// Whether a filesystem operation failed (a full disk, a read-only directory), which no
    /// change to a watched file may cure.
    pub fn is_io(&self) -> bool {
        matches!(self, CdiError::HostFs(HostFsError::Io { .. }))
    }
}
