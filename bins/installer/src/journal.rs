//! The step journal: every change to the host is undoable until its step commits, also across
//! a kill.
//!
//! Before a step touches a host file, the file's current state (its bytes and mode, a symlink's
//! target, or that it did not exist) is saved under `<state dir>/journal/` and listed in
//! `<state dir>/journal.json`; both are synced before the change is made. Directories the step
//! creates are listed too. When the step ends:
//! - it commits: the journal is deleted;
//! - it fails: [`Tx::rollback`] puts every saved file back (atomically, in reverse order) and
//!   removes the directories it created when they are empty again; the host is as it was
//!   before the step;
//! - the process is killed: the journal stays, and the next run starts with
//!   [`Journal::recover`], which does the same rollback before doing anything else.
//!
//! A step that restarts a daemon after changing its configuration records that in the journal
//! ([`Tx::activate_on_undo`]), so that undoing the step also tells the daemon, and it does not
//! keep running with a configuration that is no longer on disk.
//!
//! Every file the journal reads, replaces or removes (the paths a step changes, its backups,
//! `journal.json` itself) is reached through its directory's fd ([`HostRoot::read`] and its
//! siblings): at each such name only a regular file with one link, or nothing, is accepted; a
//! link, FIFO, device node or hard link there is refused, naming it, before the step writes
//! anything.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use devinject_engine_config::host_writer::HostWriter;
use devinject_engine_config::{Result as LibResult, RuntimeConfigError};
use devinject_hostfs::host_dir::Entry as HostEntry;
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::detect::Target;
use crate::error::{InstallError, Result};
use crate::fault::Fault;
use crate::host::HostRoot;

/// Version of the journal format.
const FORMAT: u32 = 1;

/// What a path was before the step changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
enum Before {
    /// It did not exist.
    Absent,
    /// A regular file, saved as `journal/<backup>`.
    File {
        /// File name of the saved copy.
        backup: String,
        /// Permission bits.
        mode: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
    },
    /// A symlink (written by earlier versions only: a link at a path a step changes is now
    /// refused, never replaced).
    Symlink { target: PathBuf },
    /// An empty directory (the step removed it).
    Directory {
        /// Permission bits.
        mode: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
    },
}

/// One saved path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// Host path.
    path: PathBuf,
    /// Its state before the step.
    before: Before,
}

/// The journal file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JournalFile {
    format: u32,
    /// The step being carried out.
    step: String,
    /// Saved paths, in the order they were saved.
    entries: Vec<Entry>,
    /// Directories the step created (host paths, outermost first).
    created_dirs: Vec<PathBuf>,
    /// Engines to restart or reload after undoing the step.
    activate_on_undo: Vec<Target>,
}

/// What [`Journal::recover`] undid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The step that was interrupted.
    pub step: String,
    /// The paths put back (host paths).
    pub restored: Vec<PathBuf>,
    /// Engines whose configuration went back and that must be told.
    pub activate: Vec<Target>,
}

/// The journal of one host's installer state directory.
#[derive(Debug, Clone)]
pub struct Journal {
    host: HostRoot,
    /// `<state dir>` as a host path.
    state_dir: PathBuf,
}

impl Journal {
    /// The journal kept in `state_dir` (a host path) of `host`.
    pub fn new(host: &HostRoot, state_dir: &Path) -> Self {
        Journal {
            host: host.clone(),
            state_dir: state_dir.to_path_buf(),
        }
    }

    /// The journal file's host path.
    fn host_file(&self) -> PathBuf {
        self.state_dir.join("journal.json")
    }

    /// The journal file as this process names it (for messages).
    fn file(&self) -> PathBuf {
        self.host.access(&self.host_file())
    }

    /// The backups' directory (host path).
    fn backups(&self) -> PathBuf {
        self.state_dir.join("journal")
    }

    fn load(&self) -> Result<Option<JournalFile>> {
        let path = self.file();
        let Some((bytes, _)) = self.host.read(&self.host_file())? else {
            return Ok(None);
        };
        let damaged = |message: String| InstallError::State {
            path: path.clone(),
            message,
        };
        let j: JournalFile = serde_json::from_slice(&bytes).map_err(|e| damaged(e.to_string()))?;
        if j.format != FORMAT {
            return Err(damaged(format!("format {} is not {FORMAT}", j.format)));
        }
        Ok(Some(j))
    }

    fn save(&self, j: &JournalFile) -> Result<()> {
        self.host.create_dir(&self.state_dir)?;
        let mut text = serde_json::to_string_pretty(j).map_err(|e| InstallError::State {
            path: self.file(),
            message: e.to_string(),
        })?;
        text.push('\n');
        self.host
            .write(&self.host_file(), text.as_bytes(), Some(0o600), None)
    }

    /// Whether an interrupted step left its journal.
    pub fn pending(&self) -> Result<Option<String>> {
        Ok(self.load()?.map(|j| j.step))
    }

    /// Undoes the step an earlier run left unfinished, if any.
    pub fn recover(&self) -> Result<Option<Recovery>> {
        let Some(j) = self.load()? else {
            return Ok(None);
        };
        warn!(step = %j.step, "an earlier run was interrupted; undoing its last step");
        let restored = self.undo(&j)?;
        Ok(Some(Recovery {
            step: j.step,
            restored,
            activate: j.activate_on_undo,
        }))
    }

    /// Starts a step. Fails when an earlier step's journal is still there (call
    /// [`Journal::recover`] first).
    pub fn begin<'a>(&'a self, step: &str, fault: Option<&'a Fault>) -> Result<Tx<'a>> {
        if let Some(old) = self.load()? {
            return Err(InstallError::State {
                path: self.file(),
                message: format!("step {} was not finished or undone", old.step),
            });
        }
        let tx = Tx {
            journal: self,
            file: JournalFile {
                format: FORMAT,
                step: step.to_string(),
                entries: Vec::new(),
                created_dirs: Vec::new(),
                activate_on_undo: Vec::new(),
            },
            changes: 0,
            fault,
            saved: false,
        };
        Fault::check(fault, step, 0)?;
        Ok(tx)
    }

    /// Puts back what `j` saved, removes what it created, then deletes the journal.
    fn undo(&self, j: &JournalFile) -> Result<Vec<PathBuf>> {
        let mut restored = Vec::new();
        for entry in j.entries.iter().rev() {
            let access = self.host.access(&entry.path);
            match &entry.before {
                Before::Absent => {
                    // Only a regular file is ours to remove; anything else is refused.
                    if self.host.remove(&entry.path)? {
                        restored.push(entry.path.clone());
                    }
                }
                Before::File {
                    backup,
                    mode,
                    uid,
                    gid,
                } => {
                    let saved = self.backups().join(backup);
                    let Some((bytes, _)) = self.host.read(&saved)? else {
                        return Err(InstallError::State {
                            path: self.host.access(&saved),
                            message: format!("the backup of {} is missing", entry.path.display()),
                        });
                    };
                    // What is there now is read through the same checks: a link or FIFO put
                    // there since is refused, not followed or replaced.
                    let unchanged = self.host.read(&entry.path)?.is_some_and(|(now, st)| {
                        now == bytes
                            && st.st_mode & 0o7777 == *mode
                            && (st.st_uid, st.st_gid) == (*uid, *gid)
                    });
                    if !unchanged {
                        // Given back to its owner, whoever owns the name now (the installer
                        // runs as root).
                        self.host
                            .write(&entry.path, &bytes, Some(*mode), Some((*uid, *gid)))?;
                        restored.push(entry.path.clone());
                    }
                }
                Before::Directory { mode, uid, gid } => {
                    if fs::symlink_metadata(&access).is_err() {
                        fs::create_dir(&access)
                            .map_err(|e| InstallError::io("restore directory", &access, e))?;
                        fs::set_permissions(&access, fs::Permissions::from_mode(*mode))
                            .map_err(|e| InstallError::io("set the mode of", &access, e))?;
                        std::os::unix::fs::lchown(&access, Some(*uid), Some(*gid))
                            .map_err(|e| InstallError::io("restore the owner of", &access, e))?;
                        restored.push(entry.path.clone());
                    }
                }
                Before::Symlink { target } => {
                    let same = fs::read_link(&access).is_ok_and(|t| &t == target);
                    if !same {
                        self.host.remove(&entry.path)?;
                        std::os::unix::fs::symlink(target, &access)
                            .map_err(|e| InstallError::io("restore symlink", &access, e))?;
                        restored.push(entry.path.clone());
                    }
                }
            }
        }
        for dir in j.created_dirs.iter().rev() {
            let access = self.host.access(dir);
            match fs::remove_dir(&access) {
                Ok(()) => debug!(dir = %dir.display(), "removed directory"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => warn!(dir = %dir.display(), error = %e, "directory left in place"),
            }
        }
        self.discard(j)?;
        if !restored.is_empty() {
            info!(step = %j.step, files = restored.len(), "undone");
        }
        Ok(restored)
    }

    /// Deletes the journal and its backups: the backups `j` names, the one a run killed in
    /// [`Tx::protect`] wrote before naming it, then the backup directory when nothing else is
    /// in it. Each through [`HostRoot::remove`]: only a regular file is removed.
    fn discard(&self, j: &JournalFile) -> Result<()> {
        for entry in &j.entries {
            if let Before::File { backup, .. } = &entry.before {
                self.host.remove(&self.backups().join(backup))?;
            }
        }
        let unnamed = self.backups().join(j.entries.len().to_string());
        self.host.remove(&unnamed)?;
        if let Some(state) = self.host.open_dir(&self.state_dir)? {
            let name = std::ffi::OsStr::new("journal");
            let gone = state
                .remove_empty_dir(name)
                .map_err(InstallError::HostFile)?;
            if !gone && !matches!(state.entry(name), Ok(HostEntry::Missing)) {
                let dir = self.host.access(&self.backups());
                warn!(dir = %dir.display(), "backup directory not empty; left in place");
            }
        }
        self.host.remove(&self.host_file())?;
        Ok(())
    }
}

/// One step in progress.
#[derive(Debug)]
pub struct Tx<'a> {
    journal: &'a Journal,
    file: JournalFile,
    changes: usize,
    fault: Option<&'a Fault>,
    /// Whether the journal file was written (a step that changed nothing leaves no journal).
    saved: bool,
}

impl Tx<'_> {
    /// The step's name.
    pub fn step(&self) -> &str {
        &self.file.step
    }

    /// How many changes the step made so far.
    pub fn changes(&self) -> usize {
        self.changes
    }

    fn persist(&mut self) -> Result<()> {
        self.journal.save(&self.file)?;
        self.saved = true;
        Ok(())
    }

    /// Saves the current state of `host` (a host path) so the step can undo changes to it.
    /// Saving a path twice keeps the first state.
    pub fn protect(&mut self, host: &Path) -> Result<()> {
        if self.file.entries.iter().any(|e| e.path == host) {
            return Ok(());
        }
        // Read through the directory's fd: a link, FIFO, device node or hard link at the name
        // is refused here, before the step changes anything.
        let before = match self.journal.host.read(host)? {
            None => Before::Absent,
            Some((bytes, st)) => {
                let backup = format!("{}", self.file.entries.len());
                let dir = self.journal.backups();
                self.journal.host.create_dir(&dir)?;
                self.journal
                    .host
                    .write(&dir.join(&backup), &bytes, Some(0o600), None)?;
                Before::File {
                    backup,
                    mode: st.st_mode & 0o7777,
                    uid: st.st_uid,
                    gid: st.st_gid,
                }
            }
        };
        self.file.entries.push(Entry {
            path: host.to_path_buf(),
            before,
        });
        self.persist()
    }

    /// Creates the directory `host` and its missing parents (mode 0755), remembering them so
    /// that undoing the step removes them. Returns the directories created (host paths,
    /// outermost first).
    pub fn ensure_dir(&mut self, host: &Path) -> Result<Vec<PathBuf>> {
        let mut missing = Vec::new();
        let mut cur = Some(host);
        while let Some(d) = cur {
            if d.as_os_str().is_empty() || self.journal.host.access(d).exists() {
                break;
            }
            missing.push(d.to_path_buf());
            cur = d.parent();
        }
        missing.reverse();
        if missing.is_empty() {
            return Ok(missing);
        }
        // Journal first, so that a kill between mkdir and the journal cannot leak them.
        self.file.created_dirs.extend(missing.iter().cloned());
        self.persist()?;
        for d in &missing {
            let access = self.journal.host.access(d);
            // The journal's own directory may have just been made by `persist`.
            match fs::create_dir(&access) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && access.is_dir() => {}
                Err(e) => return Err(InstallError::io("create directory", &access, e)),
            }
            fs::set_permissions(&access, fs::Permissions::from_mode(0o755))
                .map_err(|e| InstallError::io("set the mode of", &access, e))?;
        }
        Ok(missing)
    }

    /// Removes the directory `host` when it is empty, saving its mode and owner first so that
    /// undoing the step makes it again. A missing or non-empty directory is left as it is.
    pub fn remove_empty_dir(&mut self, host: &Path) -> Result<bool> {
        let access = self.journal.host.access(host);
        let meta = match fs::symlink_metadata(&access) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(InstallError::io("stat", access, e)),
            Ok(m) => m,
        };
        let empty = meta.is_dir()
            && fs::read_dir(&access)
                .map_err(|e| InstallError::io("read directory", &access, e))?
                .next()
                .is_none();
        if !empty {
            return Ok(false);
        }
        if !self.file.entries.iter().any(|e| e.path == host) {
            self.file.entries.push(Entry {
                path: host.to_path_buf(),
                before: Before::Directory {
                    mode: meta.mode() & 0o7777,
                    uid: meta.uid(),
                    gid: meta.gid(),
                },
            });
            self.persist()?;
        }
        match fs::remove_dir(&access) {
            Ok(()) => {}
            // Filled or removed by someone else since the check: not ours to remove.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::DirectoryNotEmpty
                ) =>
            {
                return Ok(false)
            }
            Err(e) => return Err(InstallError::io("remove directory", &access, e)),
        }
        debug!(dir = %host.display(), "removed directory");
        self.changed()?;
        Ok(true)
    }

    /// The directories this step created so far (host paths, outermost first).
    pub fn created_dirs(&self) -> &[PathBuf] {
        &self.file.created_dirs
    }

    /// Writes `bytes` to `host` atomically with `mode`, saving what was there first.
    pub fn write(&mut self, host: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        self.put(host, bytes, Some(mode))
    }

    /// [`Tx::write`]; a `mode` of `None` keeps the file's current mode (or the default for a new
    /// one), as [`atomic_write::write_atomic`] does.
    fn put(&mut self, host: &Path, bytes: &[u8], mode: Option<u32>) -> Result<()> {
        if let Some(parent) = host.parent() {
            self.ensure_dir(parent)?;
        }
        self.protect(host)?;
        self.journal.host.write(host, bytes, mode, None)?;
        debug!(path = %host.display(), "wrote");
        self.changed()
    }

    /// Removes `host`, saving it first. Missing files are fine.
    pub fn remove(&mut self, host: &Path) -> Result<()> {
        if matches!(self.journal.host.entry(host)?, HostEntry::Missing) {
            return Ok(());
        }
        self.protect(host)?;
        self.journal.host.remove(host)?;
        debug!(path = %host.display(), "removed");
        self.changed()
    }

    /// Counts a change made by the step (and triggers a fault injected after it).
    pub fn changed(&mut self) -> Result<()> {
        self.changes += 1;
        Fault::check(self.fault, &self.file.step, self.changes)
    }

    /// Undoing this step must also restart or reload `target` (its configuration was
    /// activated).
    pub fn activate_on_undo(&mut self, target: &Target) -> Result<()> {
        if !self.file.activate_on_undo.contains(target) {
            self.file.activate_on_undo.push(target.clone());
            self.persist()?;
        }
        Ok(())
    }

    /// Ends the step: its changes stay.
    pub fn commit(self) -> Result<()> {
        if self.saved {
            self.journal.discard(&self.file)?;
        }
        Ok(())
    }

    /// Undoes the step. Returns the paths put back and the engines to tell.
    pub fn rollback(self) -> Result<(Vec<PathBuf>, Vec<Target>)> {
        if !self.saved {
            return Ok((Vec::new(), Vec::new()));
        }
        let restored = self.journal.undo(&self.file)?;
        Ok((restored, self.file.activate_on_undo))
    }
}

/// The runtime configuration library changes the host through the step: every file it writes
/// or removes, and every directory it makes or removes, is saved in the journal first.
impl HostWriter for Tx<'_> {
    fn write(&mut self, host: &Path, bytes: &[u8], mode: Option<u32>) -> LibResult<()> {
        self.put(host, bytes, mode).map_err(to_library)
    }

    fn remove(&mut self, host: &Path) -> LibResult<()> {
        Tx::remove(self, host).map_err(to_library)
    }

    fn create_dirs(&mut self, host: &Path) -> LibResult<Vec<PathBuf>> {
        self.ensure_dir(host).map_err(to_library)
    }

    fn remove_empty_dir(&mut self, host: &Path) -> LibResult<bool> {
        Tx::remove_empty_dir(self, host).map_err(to_library)
    }
}

/// Carries the journal's error through the library, whole ([`InstallError::runtime`] takes it
/// back out).
fn to_library(e: InstallError) -> RuntimeConfigError {
    RuntimeConfigError::Files(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, HostRoot, Journal) {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = HostRoot::new(dir.path());
        let j = Journal::new(&host, Path::new("/opt/devinject/.installer"));
        (dir, host, j)
    }

    #[test]
    fn rollback_restores_files_modes_and_removes_created_ones() {
        let (dir, host, j) = setup();
        let etc = dir.path().join("etc");
        fs::create_dir_all(&etc).expect("mkdir");
        fs::write(etc.join("a"), "old").expect("write");
        fs::set_permissions(etc.join("a"), fs::Permissions::from_mode(0o640)).expect("chmod");
        let mut tx = j.begin("step", None).expect("begin");
        tx.write(Path::new("/etc/a"), b"new", 0o644).expect("write");
        tx.write(Path::new("/etc/new/dir/b"), b"b", 0o644)
            .expect("write");
        tx.remove(Path::new("/etc/a")).expect("remove again");
        assert!(j.pending().expect("pending").is_some());
        let (restored, _) = tx.rollback().expect("rollback");
        assert_eq!(restored.len(), 2);
        assert_eq!(fs::read_to_string(etc.join("a")).expect("read"), "old");
        assert_eq!(
            fs::metadata(etc.join("a")).expect("stat").mode() & 0o7777,
            0o640
        );
        assert!(!etc.join("new").exists(), "created dirs are removed");
        assert!(j.pending().expect("pending").is_none());
        assert!(!host
            .access(Path::new("/opt/devinject/.installer/journal"))
            .exists());
    }

    /// A file owned by someone else (a config owned by a service user) gets its owner back,
    /// whoever owns it by the time of the rollback.
    #[test]
    fn rollback_restores_the_owner() {
        if !devinject_testkit::require(
            nix::unistd::geteuid().is_root(),
            "needs root to own files as another user",
        ) {
            return;
        }
        let (dir, _host, j) = setup();
        let etc = dir.path().join("etc");
        fs::create_dir_all(&etc).expect("mkdir");
        fs::write(etc.join("owned"), "old").expect("write");
        std::os::unix::fs::chown(etc.join("owned"), Some(1234), Some(5678)).expect("chown");
        let mut tx = j.begin("step", None).expect("begin");
        tx.write(Path::new("/etc/owned"), b"new", 0o644)
            .expect("write");
        // Owned by root since (a later step, an administrator's edit).
        std::os::unix::fs::chown(etc.join("owned"), Some(0), Some(0)).expect("chown");
        tx.rollback().expect("rollback");
        let m = fs::metadata(etc.join("owned")).expect("stat");
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
        assert_eq!(fs::read_to_string(etc.join("owned")).expect("read"), "old");
    }

    /// The runtime configuration library removes the directories it made on unconfigure; a
    /// rollback makes them again (with their mode), before putting the files back into them.
    #[test]
    fn a_removed_directory_comes_back_on_rollback() {
        let (dir, _host, j) = setup();
        let conf = dir.path().join("etc/containerd/conf.d");
        fs::create_dir_all(&conf).expect("mkdir");
        fs::set_permissions(&conf, fs::Permissions::from_mode(0o750)).expect("chmod");
        fs::write(conf.join("99-devinject.toml"), "x").expect("write");
        let mut tx = j.begin("unconfigure", None).expect("begin");
        let dropin = Path::new("/etc/containerd/conf.d/99-devinject.toml");
        let conf_host = Path::new("/etc/containerd/conf.d");
        assert!(!tx.remove_empty_dir(conf_host).expect("not empty yet"));
        HostWriter::remove(&mut tx, dropin).expect("remove");
        assert!(HostWriter::remove_empty_dir(&mut tx, conf_host).expect("empty now"));
        assert!(!conf.exists());
        let (restored, _) = tx.rollback().expect("rollback");
        assert_eq!(
            restored,
            vec![conf_host.to_path_buf(), dropin.to_path_buf()]
        );
        assert_eq!(fs::metadata(&conf).expect("stat").mode() & 0o7777, 0o750);
        assert_eq!(
            fs::read(conf.join("99-devinject.toml")).expect("read"),
            b"x"
        );
    }

    /// A failure inside the library's change (here a fault at its first write) comes back to
    /// the installer as the journal's own error, so the step is rolled back like any other.
    #[test]
    fn the_journals_error_comes_back_whole_through_the_library() {
        let (_dir, _host, j) = setup();
        let f = Fault::parse("s:1").expect("fault");
        let mut tx = j.begin("s", Some(&f)).expect("begin");
        let err = HostWriter::write(&mut tx, Path::new("/a"), b"a", None).expect_err("fault");
        let back = InstallError::runtime(devinject_engine_config::Engine::Docker)(err);
        assert!(matches!(back, InstallError::Injected(_)), "{back}");
        tx.rollback().expect("rollback");
    }

    #[test]
    fn commit_keeps_changes_and_drops_the_journal() {
        let (dir, _host, j) = setup();
        let mut tx = j.begin("step", None).expect("begin");
        tx.write(Path::new("/x/y"), b"y", 0o600).expect("write");
        tx.commit().expect("commit");
        assert_eq!(fs::read(dir.path().join("x/y")).expect("read"), b"y");
        assert!(j.pending().expect("pending").is_none());
    }

    #[test]
    fn recover_undoes_a_step_left_by_a_killed_run() {
        let (dir, _host, j) = setup();
        fs::write(dir.path().join("f"), "orig").expect("write");
        let mut tx = j.begin("payload", None).expect("begin");
        tx.write(Path::new("/f"), b"changed", 0o644).expect("write");
        // Simulate a kill: the transaction is never finished.
        std::mem::forget(tx);
        assert_eq!(j.pending().expect("pending").as_deref(), Some("payload"));
        assert!(
            j.begin("other", None).is_err(),
            "a pending journal blocks new steps"
        );
        // A backup named by no entry yet, as a kill inside `protect` leaves it.
        fs::write(
            dir.path().join("opt/devinject/.installer/journal/1"),
            "unnamed",
        )
        .expect("write");
        let rec = j.recover().expect("recover").expect("something to recover");
        assert_eq!(rec.step, "payload");
        assert_eq!(
            fs::read_to_string(dir.path().join("f")).expect("read"),
            "orig"
        );
        assert!(j.recover().expect("again").is_none());
        assert!(
            !dir.path().join("opt/devinject/.installer/journal").exists(),
            "the backups go, the unnamed one too"
        );
    }

    #[test]
    fn a_step_without_changes_leaves_no_journal() {
        let (_dir, _host, j) = setup();
        let tx = j.begin("noop", None).expect("begin");
        assert!(j.pending().expect("pending").is_none());
        tx.commit().expect("commit");
    }

    #[test]
    fn injected_faults_fire_at_their_change_count() {
        let (dir, _host, j) = setup();
        let f = Fault::parse("s:2").expect("fault");
        let mut tx = j.begin("s", Some(&f)).expect("begin");
        tx.write(Path::new("/a"), b"a", 0o644).expect("first");
        let err = tx
            .write(Path::new("/b"), b"b", 0o644)
            .expect_err("second fails");
        assert!(matches!(err, InstallError::Injected(_)), "{err}");
        tx.rollback().expect("rollback");
        assert!(!dir.path().join("a").exists() && !dir.path().join("b").exists());
    }
}
