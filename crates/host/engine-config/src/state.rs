//! Where the prior state is remembered, so that unconfigure restores exactly what was there.
//!
//! One JSON file per engine configuration, next to the engine's main configuration file and
//! hidden: `<dir>/.<config file name>.devinject-state` (e.g.
//! `/etc/containerd/.config.toml.devinject-state`, `/etc/docker/.daemon.json.devinject-state`).
//! Keeping it next to the file it describes means a `--config` elsewhere (a second containerd, a
//! test) gets its own record, and the record lives and is backed up with `/etc`. Its name matches
//! none of the engines' include patterns (`*.toml`, `*.conf`, `*.json`).
//!
//! For every file devinject-ctl wrote it records the exact original bytes (or that the file did
//! not exist) and the exact bytes written. Unconfigure puts the original back when the file still
//! holds what was written, which makes the round trip byte-identical; when someone edited the
//! file in between, it removes only devinject's entries (using [`Prior`]) and says so.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, RuntimeConfigError};
use crate::host_writer::HostWriter;
use crate::request::{Engine, Mode};
use devinject_hostfs::host_dir::{self, Name};

/// Version of the state file format.
const FORMAT: u32 = 1;

/// The state file's host path for an engine whose main configuration file is `config`.
pub fn state_path(config: &Path) -> PathBuf {
    let name = config
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".to_string());
    config
        .parent()
        .unwrap_or_else(|| Path::new("/"))
        .join(format!(".{name}.devinject-state"))
}

/// How a file relates to devinject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ownership {
    /// Wholly written by devinject-ctl (a drop-in, a hooks.d file, a base spec).
    Owned,
    /// The engine's own file, edited in place (containerd's `config.toml`, `daemon.json`).
    Edited,
}

/// One file devinject-ctl touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRecord {
    /// Host path.
    pub path: PathBuf,
    /// Owned or edited.
    pub kind: Ownership,
    /// Content before devinject-ctl first wrote it; `None`: the file did not exist.
    pub original: Option<String>,
    /// Mode bits of the original file.
    pub original_mode: Option<u32>,
    /// Content devinject-ctl last wrote; `None`: it removed the file.
    pub written: Option<String>,
}

/// Values an edit replaced, for undoing it when the file changed after configure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Prior {
    /// docker: the `default-runtime` before devinject became the default (`None`: unset).
    pub default_runtime: Option<String>,
    /// docker: devinject became the default runtime.
    pub replaced_default: bool,
    /// docker: the `runtimes` object was created for devinject.
    pub created_runtimes_key: bool,
    /// containerd: the entry added to `imports`.
    pub added_import: Option<String>,
    /// containerd: the `imports` key was created for devinject.
    pub created_imports_key: bool,
}

/// The record of one engine's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct State {
    /// Version of the state file format (currently 1).
    pub format: u32,
    pub engine: Engine,
    /// The mode configured.
    pub mode: Mode,
    /// The runtime entry's name.
    pub runtime_name: String,
    /// The files touched, in the order they were written.
    pub files: Vec<FileRecord>,
    /// Directories created (host paths, outermost first), removed again when empty.
    pub created_dirs: Vec<PathBuf>,
    /// Replaced values.
    pub prior: Prior,
}

impl State {
    /// An empty record.
    pub fn new(engine: Engine, mode: Mode, runtime_name: &str) -> Self {
        State {
            format: FORMAT,
            engine,
            mode,
            runtime_name: runtime_name.to_string(),
            files: Vec::new(),
            created_dirs: Vec::new(),
            prior: Prior::default(),
        }
    }

    /// The record for host path `path`.
    pub fn file(&self, path: &Path) -> Option<&FileRecord> {
        self.files.iter().find(|f| f.path == path)
    }

    /// Reads the state file at host path `host` below `root`; `None` when there is none. Its
    /// name is ours: anything but a regular file with one link there is refused unopened
    /// ([`devinject_hostfs::host_dir`]).
    pub fn load(root: &Path, host: &Path, engine: Engine) -> Result<Option<State>> {
        let Some(text) = host_dir::read(root, host, Name::Ours)? else {
            return Ok(None);
        };
        let access = devinject_hostfs::host_root::resolve_in_root(root, host);
        let damaged = |message: String| RuntimeConfigError::State {
            path: access.clone(),
            message,
        };
        let state: State = serde_json::from_str(&text).map_err(|e| damaged(e.to_string()))?;
        if state.format != FORMAT {
            return Err(damaged(format!(
                "format {} is not {FORMAT}; it was written by another devinject-ctl version",
                state.format
            )));
        }
        if state.engine != engine {
            return Err(damaged(format!(
                "it records {} but {engine} was asked for",
                state.engine
            )));
        }
        Ok(Some(state))
    }

    /// Writes the state file at host path `host` through `files`, atomically (mode 0600: it
    /// holds copies of configuration files).
    pub fn save(&self, files: &mut dyn HostWriter, host: &Path) -> Result<()> {
        let mut text =
            serde_json::to_string_pretty(self).map_err(|e| RuntimeConfigError::State {
                path: host.to_path_buf(),
                message: e.to_string(),
            })?;
        text.push('\n');
        files.write(host, text.as_bytes(), Some(0o600))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_path_is_hidden_next_to_config() {
        assert_eq!(
            state_path(Path::new("/etc/containerd/config.toml")),
            PathBuf::from("/etc/containerd/.config.toml.devinject-state")
        );
    }

    #[test]
    fn round_trip_and_engine_check() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = crate::HostPaths::under_root(dir.path());
        let mut s = State::new(Engine::Docker, Mode::Shim, "devinject");
        s.files.push(FileRecord {
            path: PathBuf::from("/etc/docker/daemon.json"),
            kind: Ownership::Edited,
            original: Some("{}\n".into()),
            original_mode: Some(0o644),
            written: Some("{\"a\":1}\n".into()),
        });
        s.save(
            &mut crate::host_writer::Direct::new(&paths),
            Path::new("/s"),
        )
        .expect("save");
        assert_eq!(
            State::load(dir.path(), Path::new("/s"), Engine::Docker).expect("load"),
            Some(s)
        );
        let err = State::load(dir.path(), Path::new("/s"), Engine::Crio).expect_err("wrong engine");
        assert!(err.to_string().contains("records docker"), "{err}");
    }

    #[test]
    fn damaged_state_is_reported_with_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("s");
        std::fs::write(&p, "{").expect("write");
        let err = State::load(dir.path(), Path::new("/s"), Engine::Docker).expect_err("damaged");
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");
    }
}
