//! One module per engine. Each turns a request into its [`EngineFiles`]: the exact content every file it
//! owns or edits must have. Reading the current files, diffing, recording the prior state and
//! writing happen once, in the crate's `transaction` module, for all engines.

pub mod containerd;
pub mod crio;
pub mod detection;
pub mod docker;
pub mod dropin;
pub mod hooksd;
pub mod podman;

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::report::Activation;
use crate::request::{ConfigureRequest, Engine, HostPaths, UnconfigureRequest};
use crate::state::{Ownership, Prior};

/// First line of every TOML file devinject-ctl owns; recognises our files when no state file is
/// left.
pub const MARKER: &str = "# Managed by devinject-ctl.";

/// The opening comment of an owned TOML drop-in.
pub fn dropin_header(engine: Engine, extra: &[&str]) -> String {
    let mut s = format!(
        "{MARKER} `devinject-ctl runtime configure --runtime {engine}` rewrites this file\n\
         # and `devinject-ctl runtime unconfigure --runtime {engine}` removes it.\n"
    );
    for line in extra {
        s.push_str("# ");
        s.push_str(line);
        s.push('\n');
    }
    s
}

/// One file an engine wants on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineFile {
    /// Host path.
    pub path: PathBuf,
    /// Owned by us, or the engine's own file edited in place.
    pub kind: Ownership,
    /// The content it must have.
    pub content: String,
    /// For owned files: a substring that marks an existing file as ours.
    pub marker: Option<&'static str>,
}

/// What an engine wants on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineFiles {
    /// Files in write order: a file comes before any file that refers to it.
    pub files: Vec<EngineFile>,
    /// Values replaced in edited files.
    pub prior: Prior,
    /// Remarks for the user.
    pub notes: Vec<String>,
}

/// A file to look at when unconfiguring without a state file.
pub enum Candidate {
    /// A file we may have created: removed when `ours` says it is ours.
    Owned {
        /// Host path.
        path: PathBuf,
        /// Recognises our content.
        ours: Box<dyn Fn(&str) -> bool>,
    },
    /// The engine's own file: our entries are removed from it.
    Edited {
        /// Host path.
        path: PathBuf,
    },
}

/// Reads the devinject-free content of an edited file (see `transaction`).
pub type BaseReader<'a> = dyn FnMut(&Path) -> Result<Option<String>> + 'a;

/// The per-engine part of configure and unconfigure.
pub trait EngineEditor {
    /// The engine's main configuration file (host path); the state file lives next to it.
    fn config(&self) -> &Path;

    /// The files configure writes. `base` returns the content an edited file would have without devinject.
    fn files(&self, req: &ConfigureRequest, base: &mut BaseReader<'_>) -> Result<EngineFiles>;

    /// Removes devinject's entries from the edited file `path` (whose content is `text`),
    /// returning `text` unchanged when there are none.
    fn revert_edited(
        &self,
        path: &Path,
        text: &str,
        runtime_name: &str,
        prior: &Prior,
    ) -> Result<String>;

    /// The files to look at when no state file exists.
    fn candidates(&self, req: &UnconfigureRequest) -> Vec<Candidate>;

    /// What the engine needs after the files `changed` (host paths) changed.
    fn activation(&self, changed: &[&Path]) -> Activation;

    /// Where the engine's configuration, read the way the engine reads it (imports, drop-ins,
    /// hooks directories), runs devinject's shim or hook; whoever wrote it.
    fn detect(&self) -> Result<Vec<detection::Integration>>;

    /// The cgroup driver the engine's configuration selects; `None` when the engine decides at
    /// run time (docker, podman without a setting).
    fn cgroup_driver(&self) -> Result<Option<detection::CgroupDriver>>;
}

/// The editor for `engine` with the host's paths.
pub fn editor(engine: Engine, paths: &HostPaths) -> Box<dyn EngineEditor> {
    match engine {
        Engine::Containerd => Box::new(containerd::Containerd::new(paths)),
        Engine::Crio => Box::new(crio::Crio::new(paths)),
        Engine::Docker => Box::new(docker::Docker::new(paths)),
        Engine::Podman => Box::new(podman::Podman::new(paths)),
    }
}
