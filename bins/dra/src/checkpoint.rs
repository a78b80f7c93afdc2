//! The claims this plugin prepared, kept in a JSON file so that a restarted plugin answers a
//! repeated prepare as the first one did and unprepares what an earlier run wrote.
//!
//! The kubelet retries `NodePrepareResources` and `NodeUnprepareResources` until they succeed,
//! possibly after the plugin restarted, and then names the claim only; the checkpoint says which
//! CDI spec files and devices belong to it. Its path is a parameter (e.g.
//! `/var/lib/kubelet/plugins/devinject.io/checkpoint.json`).
//!
//! # Integrity
//! No checksum: the file is only ever replaced whole (temporary file in the same directory,
//! fsync, rename, fsync of the directory, through the runtime-config crate's
//! [`devinject_hostfs::atomic_write`]), so a crash leaves the old or the
//! new file, never half of one; what remains to catch is a file edited or damaged by something
//! else, and strict parsing does that: a `version` field checked first
//! ([`CHECKPOINT_VERSION`]), unknown fields refused, and every entry checked (its key is its
//! claim's UID, spec files are plain file names, since unprepare removes them). A file that
//! fails is [`CheckpointError::Corrupt`] and the plugin does not start: guessing would leave a
//! claim's spec behind or remove one still in use.
//!
//! # Bounds
//! A file over [`MAX_CHECKPOINT_BYTES`] is refused unread; a link, FIFO, device node or hard
//! link at the path is refused unopened.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use devinject_hostfs::atomic_write;
use devinject_hostfs::host_dir::{self, HostDir, Name};
use devinject_hostfs::HostFsError;
use serde::{Deserialize, Serialize};
use tracing::{debug, info};

use crate::naming;
use crate::prepared::{ClaimRef, PreparedDevice};

/// The format this code reads and writes.
pub const CHECKPOINT_VERSION: u32 = 1;
/// The largest checkpoint read (thousands of claims take far less).
pub const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;
/// The checkpoint's mode: it names claims of every namespace.
pub const CHECKPOINT_FILE_MODE: u32 = 0o600;

/// Why the checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum CheckpointError {
    /// The file is not a checkpoint this plugin can trust.
    #[error("checkpoint {} is damaged ({problem}): the plugin cannot tell which claims it prepared; check that the CDI spec directory (/var/run/cdi by default) holds no k8s.<driver>-*.json spec of a claim whose pod still runs (remove those that do not), then remove the checkpoint and restart the plugin", path.display())]
    Corrupt {
        /// The checkpoint.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A format this plugin does not know.
    #[error("checkpoint {} has version {found}, this plugin reads version {supported}: run the plugin version that wrote it, or unprepare its claims (delete their pods) and remove the checkpoint", path.display())]
    UnknownVersion {
        /// The checkpoint.
        path: PathBuf,
        /// The version in the file.
        found: u64,
        /// [`CHECKPOINT_VERSION`].
        supported: u32,
    },
    /// A file too large to be a checkpoint.
    #[error("checkpoint {} is {size} bytes, more than the {max} the plugin reads: it is not a checkpoint the plugin wrote; move it away after checking the CDI spec directory (/var/run/cdi by default)", path.display())]
    TooLarge {
        /// The checkpoint.
        path: PathBuf,
        size: u64,
        /// [`MAX_CHECKPOINT_BYTES`].
        max: u64,
    },
    /// Reading or writing failed.
    #[error("checkpoint {}: {source}", path.display())]
    Files {
        /// The checkpoint.
        path: PathBuf,
        /// What failed, naming the path and operation.
        source: Box<HostFsError>,
    },
    /// The checkpoint could not be rendered as JSON.
    #[error("checkpoint {}: cannot render the checkpoint as JSON: {message}", path.display())]
    Render {
        /// The checkpoint.
        path: PathBuf,
        /// What the serialiser said.
        message: String,
    },
    /// An entry that does not belong under its key.
    #[error("checkpoint entry {uid}: {problem}")]
    Entry {
        /// The key given.
        uid: String,
        /// What is wrong.
        problem: String,
    },
}

/// A `Result` with a [`CheckpointError`].
pub type Result<T> = std::result::Result<T, CheckpointError>;

/// What was prepared for one claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimEntry {
    /// The claim, as the kubelet named it.
    pub claim: ClaimRef,
    /// The profiles its devices belong to.
    pub profiles: Vec<String>,
    /// The CDI spec files written for it: file names in the CDI directory, one per profile.
    pub spec_files: Vec<String>,
    /// The devices prepared, as the kubelet was told.
    pub devices: Vec<PreparedDevice>,
    /// The node's boot id when the claim was prepared: a spec lost in the same boot is put
    /// back as it was, while after a reboot the kubelet's prepare runs the prepare steps again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The device metadata files its specs mount (one per request), so that a spec put back
    /// mounts them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<MetadataMount>,
}

/// Where a claim's spec mounts one of its device metadata files
/// ([`crate::device_metadata`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataMount {
    /// The DRA device whose CDI device carries the mount (the request's first).
    pub device: String,
    /// The file's name in the driver's metadata directory.
    pub file: String,
    /// Where it appears in the container.
    pub container_path: String,
}

/// The file's layout.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckpointFile {
    version: u32,
    claims: BTreeMap<String, ClaimEntry>,
}

/// Only the version, read before the rest so that a newer format is named as such.
#[derive(Deserialize)]
struct Versioned {
    version: u64,
}

/// The prepared claims, by claim UID, and the file they are kept in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    path: PathBuf,
    claims: BTreeMap<String, ClaimEntry>,
}

impl Checkpoint {
    /// Reads the checkpoint at `path` (relative paths from the working directory); a missing
    /// file (or directory) is an empty checkpoint.
    pub fn load(path: &Path) -> Result<Self> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let files = |source: HostFsError| CheckpointError::Files {
            path: path.clone(),
            source: Box::new(source),
        };
        let (dir, name) = host_dir::split(&path).map_err(files)?;
        let bytes = match HostDir::open(Path::new("/"), &dir).map_err(files)? {
            None => None,
            Some(d) => match d.read_bytes(name, Name::Ours, MAX_CHECKPOINT_BYTES) {
                Ok(read) => read.map(|(bytes, _)| bytes),
                Err(HostFsError::TooLarge { size, max, .. }) => {
                    return Err(CheckpointError::TooLarge {
                        path: path.clone(),
                        size,
                        max,
                    })
                }
                Err(e) => return Err(files(e)),
            },
        };
        let Some(bytes) = bytes else {
            debug!(path = %path.display(), "no checkpoint: no claims prepared");
            return Ok(Checkpoint {
                path,
                claims: BTreeMap::new(),
            });
        };
        let claims = parse(&path, &bytes)?;
        info!(path = %path.display(), claims = claims.len(), "loaded checkpoint");
        Ok(Checkpoint { path, claims })
    }

    /// The file the checkpoint is kept in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What was prepared for the claim `uid`.
    pub fn get(&self, uid: &str) -> Option<&ClaimEntry> {
        self.claims.get(uid)
    }

    /// Every prepared claim, by UID: what a restarted plugin checks against the CDI directory.
    pub fn claims(&self) -> impl Iterator<Item = (&str, &ClaimEntry)> {
        self.claims.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Records `entry` for the claim `uid` (replacing an earlier one) and saves. `uid` must be
    /// the entry's claim UID. When saving fails the checkpoint is left as it was, in memory and
    /// on disk.
    pub fn insert(&mut self, uid: &str, entry: ClaimEntry) -> Result<()> {
        if let Err(problem) = check_entry(uid, &entry) {
            return Err(CheckpointError::Entry {
                uid: uid.chars().take(80).collect(),
                problem,
            });
        }
        let old = self.claims.insert(uid.to_owned(), entry);
        if let Err(e) = self.save() {
            match old {
                Some(old) => self.claims.insert(uid.to_owned(), old),
                None => self.claims.remove(uid),
            };
            return Err(e);
        }
        Ok(())
    }

    /// Forgets the claim `uid` and saves; returns its entry (`None`, and nothing written, when
    /// it was not there). When saving fails the entry stays, in memory and on disk.
    pub fn remove(&mut self, uid: &str) -> Result<Option<ClaimEntry>> {
        let Some(old) = self.claims.remove(uid) else {
            return Ok(None);
        };
        if let Err(e) = self.save() {
            self.claims.insert(uid.to_owned(), old);
            return Err(e);
        }
        Ok(Some(old))
    }

    /// Writes the checkpoint atomically (mode 0600), creating its directory when missing.
    pub fn save(&self) -> Result<()> {
        let files = |source: HostFsError| CheckpointError::Files {
            path: self.path.clone(),
            source: Box::new(source),
        };
        let file = CheckpointFile {
            version: CHECKPOINT_VERSION,
            claims: self.claims.clone(),
        };
        let mut bytes = serde_json::to_vec_pretty(&file).map_err(|e| CheckpointError::Render {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        bytes.push(b'\n');
        if let Some(dir) = self.path.parent() {
            atomic_write::create_dirs(dir).map_err(files)?;
        }
        atomic_write::write_atomic(&self.path, &bytes, Some(CHECKPOINT_FILE_MODE))
            .map_err(files)?;
        debug!(path = %self.path.display(), claims = self.claims.len(), "saved checkpoint");
        Ok(())
    }
}

/// Parses and checks the file's content.
fn parse(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, ClaimEntry>> {
    let corrupt = |problem: String| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        problem,
    };
    let versioned: Versioned =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("no version: {e}")))?;
    if versioned.version != u64::from(CHECKPOINT_VERSION) {
        return Err(CheckpointError::UnknownVersion {
            path: path.to_path_buf(),
            found: versioned.version,
            supported: CHECKPOINT_VERSION,
        });
    }
    let file: CheckpointFile = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    for (uid, entry) in &file.claims {
        check_entry(uid, entry).map_err(|problem| {
            corrupt(format!(
                "entry {}: {problem}",
                uid.chars().take(80).collect::<String>()
            ))
        })?;
    }
    Ok(file.claims)
}

/// Checks that `entry` belongs under `uid` and names only plain spec file names.
fn check_entry(uid: &str, entry: &ClaimEntry) -> std::result::Result<(), String> {
    naming::claim_uid(uid).map_err(|e| e.to_string())?;
    if entry.claim.uid != uid {
        return Err(format!(
            "it records claim uid {:?}",
            entry.claim.uid.chars().take(80).collect::<String>()
        ));
    }
    for file in &entry.spec_files {
        let plain = !file.is_empty()
            && file.len() <= 255
            && !file.contains('/')
            && !file.contains('\0')
            && Path::new(file).file_name() == Some(OsStr::new(file));
        if !plain {
            return Err(format!(
                "spec file {:?} is not a file name",
                file.chars().take(80).collect::<String>()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    const UID: &str = "0b5e6f4c-2a7d-4f1e-9c3b-1d2e3f4a5b6c";

    fn entry(uid: &str) -> ClaimEntry {
        ClaimEntry {
            claim: ClaimRef {
                namespace: "ns".into(),
                name: "gpu".into(),
                uid: uid.into(),
            },
            profiles: vec!["demo".into()],
            spec_files: vec![naming::claim_spec_file("devinject.io", "demo", uid)],
            devices: vec![PreparedDevice {
                request_names: vec!["req".into()],
                pool_name: "node-a/demo".into(),
                device_name: "demo-0".into(),
                cdi_device_ids: vec![naming::cdi_device_id("devinject.io", "demo", uid, "demo-0")],
                share_id: None,
            }],
            boot_id: None,
            metadata: Vec::new(),
        }
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_missing_file_or_directory_is_an_empty_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::load(&dir.path().join("no/such/dir/checkpoint.json")).unwrap();
        assert_eq!(cp.claims().count(), 0);
        assert!(cp.get(UID).is_none());
    }

    #[test]
    fn inserted_entries_survive_a_restart_and_removed_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugins/devinject.io/checkpoint.json");
        let mut cp = Checkpoint::load(&path).unwrap();
        cp.insert(UID, entry(UID)).unwrap();
        cp.insert("u2", entry("u2")).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        let again = Checkpoint::load(&path).unwrap();
        assert_eq!(again.get(UID), Some(&entry(UID)));
        assert_eq!(
            again.claims().map(|(k, _)| k).collect::<Vec<_>>(),
            [UID, "u2"]
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["claims"][UID]["devices"][0]["device_name"], "demo-0");

        assert_eq!(cp.remove(UID).unwrap(), Some(entry(UID)));
        assert_eq!(cp.remove(UID).unwrap(), None);
        let again = Checkpoint::load(&path).unwrap();
        assert!(again.get(UID).is_none());
        assert!(again.get("u2").is_some());
        // Only the checkpoint is in its directory: no temporary file is left.
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }

    #[test]
    fn an_entry_under_another_uid_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut cp = Checkpoint::load(&dir.path().join("c.json")).unwrap();
        let err = cp.insert("other", entry(UID)).unwrap_err();
        assert!(matches!(err, CheckpointError::Entry { .. }), "{err}");
        assert!(cp.get("other").is_none());
        assert!(!dir.path().join("c.json").exists());
    }

    #[test]
    fn a_failed_save_leaves_memory_as_the_disk_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let mut cp = Checkpoint::load(&path).unwrap();
        cp.insert(UID, entry(UID)).unwrap();
        // Something in the way of the temporary file makes every save fail.
        let tmp = dir
            .path()
            .join(format!(".c.json.devinject-tmp-{}", std::process::id()));
        std::fs::create_dir(&tmp).unwrap();
        assert!(cp.insert("u2", entry("u2")).is_err());
        assert!(cp.get("u2").is_none());
        assert!(cp.remove(UID).is_err());
        assert_eq!(cp.get(UID), Some(&entry(UID)));
        std::fs::remove_dir(&tmp).unwrap();
        assert_eq!(Checkpoint::load(&path).unwrap(), cp);
    }

    #[test]
    fn a_damaged_file_is_corrupt_naming_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let good = serde_json::to_string(&CheckpointFile {
            version: 1,
            claims: [(UID.to_owned(), entry(UID))].into(),
        })
        .unwrap();
        let cut = &good[..good.len() / 2];
        let unknown = good.replacen("\"profiles\"", "\"extra\":1,\"profiles\"", 1);
        let moved = good.replacen(&format!("\"{UID}\":"), "\"u9\":", 1);
        let escaping = good.replacen(
            &format!("\"k8s.devinject.io-demo_{UID}.json\""),
            "\"../../etc/passwd\"",
            1,
        );
        for (text, why) in [
            (cut, "EOF"),
            (unknown.as_str(), "unknown field `extra`"),
            (moved.as_str(), "records claim uid"),
            (escaping.as_str(), "is not a file name"),
            ("{\"claims\":{}}", "no version"),
        ] {
            write(&path, text);
            let err = Checkpoint::load(&path).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, CheckpointError::Corrupt { .. }), "{msg}");
            assert!(msg.contains(why), "{why}: {msg}");
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(
                msg.contains("/var/run/cdi") && msg.contains("remove the checkpoint"),
                "{msg}"
            );
        }
        write(&path, &good);
        assert_eq!(Checkpoint::load(&path).unwrap().get(UID), Some(&entry(UID)));
    }

    #[test]
    fn a_newer_version_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        write(&path, "{\"version\": 2, \"claims\": {}, \"new\": true}");
        let err = Checkpoint::load(&path).unwrap_err();
        assert!(
            matches!(
                err,
                CheckpointError::UnknownVersion {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_file_over_16_mib_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_CHECKPOINT_BYTES + 1).unwrap();
        let err = Checkpoint::load(&path).unwrap_err();
        assert!(
            matches!(err, CheckpointError::TooLarge { size, max, .. }
                if size == MAX_CHECKPOINT_BYTES + 1 && max == MAX_CHECKPOINT_BYTES),
            "{err}"
        );
    }

    #[test]
    fn a_symlink_at_the_checkpoint_is_neither_read_nor_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.json");
        write(&target, "{\"version\": 1, \"claims\": {}}");
        let path = dir.path().join("c.json");
        symlink(&target, &path).unwrap();
        let err = Checkpoint::load(&path).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let cp = Checkpoint {
            path: path.clone(),
            claims: BTreeMap::new(),
        };
        assert!(cp.save().is_err());
        assert!(path.is_symlink());
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "{\"version\": 1, \"claims\": {}}"
        );
    }
}
