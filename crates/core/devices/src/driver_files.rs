//! The driver files of a profile as found on the host: its libraries, binaries and other files,
//! each at its real path and with where it goes in the container. The devinject-discovery crate
//! resolves them under the driver root; the planner mounts them.

use std::path::PathBuf;

/// A library found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverLibrary {
    /// The real file (symlinks resolved).
    pub path: PathBuf,
    /// Its file name, used in the container's lib dir.
    pub file_name: String,
    /// Its `DT_SONAME`, when it has one that differs from the file name.
    pub soname: Option<String>,
    /// The part of the driver it belongs to, when the profile tags it.
    pub capability: Option<String>,
    /// Other names it answers to in the image's library directory (the profile's `links`).
    pub links: Vec<String>,
}

/// A binary or other file found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFile {
    /// The real file (symlinks resolved).
    pub path: PathBuf,
    /// Where it goes in the container.
    pub container_path: PathBuf,
    /// The part of the driver it belongs to, when the profile tags it.
    pub capability: Option<String>,
}

/// Everything the profile injects besides device nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverFiles {
    /// Libraries, in profile order.
    pub libraries: Vec<DriverLibrary>,
    /// Programs, mounted read-only and executable, in profile order.
    pub binaries: Vec<DriverFile>,
    /// Other files.
    pub files: Vec<DriverFile>,
}
