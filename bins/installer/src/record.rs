//! The install record, `<prefix>/.installer/record.json`: what the installer put on the host,
//! so that `--uninstall` removes exactly that and puts back what it replaced.
//!
//! Files that existed before the installer first replaced them (an administrator's
//! `/etc/devinject/config.toml`, say) are kept under `<prefix>/.installer/originals/` and named
//! in the record; uninstall puts them back byte for byte. The record has no timestamps, so an
//! install that changes nothing leaves it byte-identical.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::detect::Target;
use crate::error::{InstallError, Result};
use crate::host::HostRoot;
use crate::journal::Tx;

/// Version of the record format.
const FORMAT: u32 = 1;

/// What an installed file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileRole {
    /// A binary under `<prefix>/bin`.
    Binary,
    /// A device profile.
    Profile,
    /// The hook's host configuration.
    HostConfig,
    /// A k3s/RKE2 containerd template.
    Template,
}

/// One file the installer put on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstalledFile {
    /// Host path.
    pub path: PathBuf,
    /// What it is.
    pub role: FileRole,
    /// The file that was there before, saved under `originals/` (its name there); `None`: there
    /// was none.
    pub original: Option<String>,
    /// The original's mode.
    pub original_mode: Option<u32>,
}

/// One configured engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineRecord {
    /// The engine and its paths.
    pub target: Target,
    /// The runtime entry's name.
    pub runtime_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The format version of the record (currently 1).
    pub format: u32,
    /// Files installed, in the order they were first installed.
    pub files: Vec<InstalledFile>,
    /// Engines configured.
    pub engines: Vec<EngineRecord>,
    /// Directories the installer created (host paths, outermost first), removed when empty.
    pub created_dirs: Vec<PathBuf>,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            format: FORMAT,
            files: Vec::new(),
            engines: Vec::new(),
            created_dirs: Vec::new(),
        }
    }
}

/// Where the record and the originals live.
#[derive(Debug, Clone)]
pub struct RecordStore {
    host: HostRoot,
    state_dir: PathBuf,
}

impl RecordStore {
    /// The store in `state_dir` (a host path).
    pub fn new(host: &HostRoot, state_dir: &Path) -> Self {
        RecordStore {
            host: host.clone(),
            state_dir: state_dir.to_path_buf(),
        }
    }

    /// The record's host path.
    pub fn path(&self) -> PathBuf {
        self.state_dir.join("record.json")
    }

    /// The host path of a saved original.
    pub fn original_path(&self, name: &str) -> PathBuf {
        self.state_dir.join("originals").join(name)
    }

    /// Reads the record; `None` when there is none.
    pub fn load(&self) -> Result<Option<Record>> {
        let access = self.host.access(&self.path());
        // Through the directory's fd: a link, FIFO or device node at the record's name is
        // refused, naming it.
        let Some((text, _)) = self.host.read(&self.path())? else {
            return Ok(None);
        };
        let damaged = |message: String| InstallError::State {
            path: access.clone(),
            message,
        };
        let r: Record = serde_json::from_slice(&text).map_err(|e| damaged(e.to_string()))?;
        if r.format != FORMAT {
            return Err(damaged(format!(
                "format {} is not {FORMAT}; it was written by another installer version",
                r.format
            )));
        }
        Ok(Some(r))
    }

    /// The record's bytes.
    pub fn render(record: &Record) -> Vec<u8> {
        let mut text =
            serde_json::to_string_pretty(record).expect("serialising the record cannot fail");
        text.push('\n');
        text.into_bytes()
    }

    /// Writes `record` within the step `tx`, when it differs from what is on disk.
    pub fn save(&self, tx: &mut Tx<'_>, record: &Record) -> Result<()> {
        let bytes = Self::render(record);
        if self
            .host
            .read(&self.path())?
            .is_some_and(|(b, _)| b == bytes)
        {
            return Ok(());
        }
        tx.write(&self.path(), &bytes, 0o600)
    }

    /// Writes `record` outside any step (atomically). Used once, to remember the directories
    /// the installer created for its own state before the first step.
    pub fn save_now(&self, record: &Record) -> Result<()> {
        self.host
            .write(&self.path(), &Self::render(record), Some(0o600), None)
    }

    /// Removes the record within the step `tx`.
    pub fn remove(&self, tx: &mut Tx<'_>) -> Result<()> {
        tx.remove(&self.path())
    }
}

impl Record {
    /// The entry for host path `path`.
    pub fn file(&self, path: &Path) -> Option<&InstalledFile> {
        self.files.iter().find(|f| f.path == path)
    }

    /// Remembers created directories (outermost first, no duplicates).
    pub fn add_dirs(&mut self, dirs: Vec<PathBuf>) {
        for d in dirs {
            if !self.created_dirs.contains(&d) {
                self.created_dirs.push(d);
            }
        }
    }

    /// The record for `target`, if configured.
    pub fn engine(&self, target: &Target) -> Option<&EngineRecord> {
        self.engines.iter().find(|e| &e.target == target)
    }
}

/// A file name for the original of host path `path` under `originals/`: the path with `/`
/// spelled `%2F` (and `%` as `%25`), so distinct paths never share a name.
pub fn original_name(path: &Path) -> String {
    path.to_string_lossy()
        .trim_start_matches('/')
        .replace('%', "%25")
        .replace('/', "%2F")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn original_names_are_flat_and_distinct() {
        assert_eq!(
            original_name(Path::new("/etc/devinject/config.toml")),
            "etc%2Fdevinject%2Fconfig.toml"
        );
        assert_ne!(
            original_name(Path::new("/a%2Fb")),
            original_name(Path::new("/a/b"))
        );
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = HostRoot::new(dir.path());
        let store = RecordStore::new(&host, Path::new("/opt/devinject/.installer"));
        assert!(store.load().expect("load").is_none());
        let journal = crate::journal::Journal::new(&host, Path::new("/opt/devinject/.installer"));
        let mut tx = journal.begin("record", None).expect("begin");
        let mut r = Record::default();
        r.files.push(InstalledFile {
            path: PathBuf::from("/opt/devinject/bin/devinject-hook"),
            role: FileRole::Binary,
            original: None,
            original_mode: None,
        });
        store.save(&mut tx, &r).expect("save");
        let changes = tx.changes();
        store.save(&mut tx, &r).expect("save again");
        assert_eq!(
            tx.changes(),
            changes,
            "an unchanged record is not rewritten"
        );
        tx.commit().expect("commit");
        assert_eq!(store.load().expect("load"), Some(r));
    }
}
