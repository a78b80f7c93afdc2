//! The engine-independent half of configure and unconfigure: read what is there, compare it
//! with the engine's files, record the prior state, write atomically (or only diff, for a dry run).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tracing::{debug, info};

use crate::engines::{self, Candidate, EngineEditor};
use crate::error::{Result, RuntimeConfigError};
use crate::host_writer::HostWriter;
use crate::load;
use crate::lock::DirLock;
use crate::report::{Action, Activation, ChangeReport, FileChange};
use crate::request::{ConfigureRequest, Engine, HostPaths, Mode, UnconfigureRequest};
use crate::state::{self, FileRecord, Ownership, Prior, State};
use devinject_hostfs::diff;
use devinject_hostfs::host_dir::{self, Entry, Name};

/// One file operation: bring `path` from `current` to `target`.
struct Step {
    /// The host path the engine names, as reported and recorded.
    path: PathBuf,
    /// The host path read and written: `path` itself for our own files, the file behind its
    /// links for the engine's own configuration ([`file_at`]).
    at: PathBuf,
    current: Option<String>,
    target: Option<String>,
    /// Mode to give the file; `None` keeps the current one.
    mode: Option<u32>,
}

impl Step {
    fn change(&self) -> Option<FileChange> {
        if self.current == self.target {
            return None;
        }
        let action = match (&self.current, &self.target) {
            (None, _) => Action::Create,
            (_, None) => Action::Remove,
            _ => Action::Modify,
        };
        let path = self.path.display().to_string();
        Some(FileChange {
            path: self.path.clone(),
            action,
            diff: diff::unified(&path, self.current.as_deref(), self.target.as_deref()),
        })
    }
}

fn validate(req: &ConfigureRequest) -> Result<()> {
    let mode = req.mode();
    if req.engine == Engine::Docker && mode == Mode::Hook {
        return Err(RuntimeConfigError::InvalidRequest(
            "docker has no hook configuration (no hooks.d); use --mode shim".to_string(),
        ));
    }
    if mode == Mode::Hook
        && req.set_as_default
        && matches!(req.engine, Engine::Crio | Engine::Podman)
    {
        return Err(RuntimeConfigError::InvalidRequest(format!(
            "--set-as-default needs --mode shim for {}: hooks.d hooks run for every runtime, \
             there is no devinject runtime to make the default",
            req.engine
        )));
    }
    let name_ok = !req.runtime_name.is_empty()
        && req
            .runtime_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok {
        return Err(RuntimeConfigError::InvalidRequest(format!(
            "runtime name {:?} must be non-empty and use only letters, digits, '-', '_' and '.'",
            req.runtime_name
        )));
    }
    for (what, p) in [("shim", &req.shim_path), ("hook", &req.hook_path)] {
        if !p.is_absolute() {
            return Err(RuntimeConfigError::InvalidRequest(format!(
                "the {what} path {} must be absolute: the engine runs it from its own working directory",
                p.display()
            )));
        }
    }
    Ok(())
}

/// Where the file the engine names `host` is read and written, and whose name that is: our own
/// names are never followed; the engine's own configuration file may be linked into place by the
/// administrator, and is edited where the link leads, inside the root.
fn file_at(paths: &HostPaths, host: &Path, kind: Ownership) -> (PathBuf, Name) {
    match kind {
        Ownership::Owned => (host.to_path_buf(), Name::Ours),
        Ownership::Edited => (paths.behind_links(host), Name::Theirs),
    }
}

/// The content of the file at `at` (see [`file_at`]).
fn read_at(paths: &HostPaths, at: &Path, whose: Name) -> Result<Option<String>> {
    paths.read(at, whose)
}

fn mode_of(paths: &HostPaths, at: &Path) -> Result<Option<u32>> {
    match host_dir::entry(&paths.root, at)? {
        Entry::File(st) => Ok(Some(st.st_mode & 0o7777)),
        _ => Ok(None),
    }
}

/// One engine's editor and its state file, locked for one configure or unconfigure.
struct Session {
    editor: Box<dyn EngineEditor>,
    /// The state file (host path).
    state_host: PathBuf,
    /// What the last configure recorded.
    old: Option<State>,
    /// Held until the session ends.
    _lock: DirLock,
}

impl Session {
    /// Locks `engine`'s state file on the host at `paths` and reads it.
    fn open(engine: Engine, paths: &HostPaths) -> Result<Self> {
        let editor = engines::editor(engine, paths);
        let state_host = state::state_path(editor.config());
        let state_access = paths.access(&state_host);
        let lock = DirLock::acquire(&state_access)?;
        let old = State::load(&paths.root, &state_host, engine)?;
        Ok(Session {
            editor,
            state_host,
            old,
            _lock: lock,
        })
    }
}

/// Configures `req.engine`; see [`crate::configure`].
pub fn configure(req: &ConfigureRequest, files: &mut dyn HostWriter) -> Result<ChangeReport> {
    validate(req)?;
    let paths = &req.paths;
    let Session {
        editor,
        state_host,
        old,
        _lock,
    } = Session::open(req.engine, paths)?;
    let old_prior = old.as_ref().map(|s| s.prior.clone()).unwrap_or_default();

    // The content each edited file would have without devinject: the recorded original while the
    // file still holds what we wrote, otherwise its current content with our entries removed.
    let mut bases: BTreeMap<PathBuf, Option<String>> = BTreeMap::new();
    let mut notes = Vec::new();
    let wanted = {
        let mut base = |host: &Path| -> Result<Option<String>> {
            if let Some(b) = bases.get(host) {
                return Ok(b.clone());
            }
            let current = load::read_optional(&paths.access(host))?;
            let record = old.as_ref().and_then(|s| s.file(host));
            let b = match (record, current) {
                (Some(r), current) if r.written == current => r.original.clone(),
                (_, Some(text)) => {
                    Some(editor.revert_edited(host, &text, &req.runtime_name, &old_prior)?)
                }
                (_, None) => None,
            };
            bases.insert(host.to_path_buf(), b.clone());
            Ok(b)
        };
        editor.files(req, &mut base)?
    };
    notes.extend(wanted.notes.iter().cloned());

    let mut new_state = State::new(req.engine, req.mode(), &req.runtime_name);
    new_state.prior = wanted.prior.clone();
    new_state.created_dirs = old
        .as_ref()
        .map(|s| s.created_dirs.clone())
        .unwrap_or_default();
    let mut steps = Vec::new();
    for file in &wanted.files {
        let access = paths.access(&file.path);
        let (at, whose) = file_at(paths, &file.path, file.kind);
        let current = read_at(paths, &at, whose)?;
        let record = old.as_ref().and_then(|s| s.file(&file.path));
        let current_mode = mode_of(paths, &at)?;
        let base = bases
            .get(&file.path)
            .cloned()
            .unwrap_or_else(|| current.clone());
        let (original, original_mode) = match (record, file.kind) {
            // Still what we wrote: the recorded original stays the truth.
            (Some(r), _) if r.written == current => (r.original.clone(), r.original_mode),
            // Edited since: what it would be without us, which keeps the other edits.
            (Some(r), Ownership::Edited) => (base, r.original_mode.or(current_mode)),
            (Some(r), Ownership::Owned) => (r.original.clone(), r.original_mode),
            (None, Ownership::Edited) => (base, current_mode),
            (None, Ownership::Owned) => match &current {
                None => (None, None),
                Some(text) if file.marker.is_some_and(|m| text.contains(m)) => {
                    notes.push(format!(
                        "{} was left by an earlier devinject-ctl run without a record; it is replaced",
                        file.path.display()
                    ));
                    (None, None)
                }
                Some(text) if *text == file.content => (Some(text.clone()), current_mode),
                Some(_) => return Err(RuntimeConfigError::NotOurs { path: access }),
            },
        };
        if let (Some(r), Some(cur)) = (record, &current) {
            if r.written.as_deref() != Some(cur.as_str()) {
                notes.push(format!(
                    "{} was edited after devinject-ctl wrote it; devinject's entries were refreshed",
                    file.path.display()
                ));
            }
        }
        new_state.files.push(FileRecord {
            path: file.path.clone(),
            kind: file.kind,
            original,
            original_mode,
            written: Some(file.content.clone()),
        });
        steps.push(Step {
            path: file.path.clone(),
            at,
            current,
            target: Some(file.content.clone()),
            mode: None,
        });
    }
    // Files of an earlier configuration that this one does not need (e.g. the base spec after
    // switching containerd from hook to shim mode) go back to what they were.
    if let Some(old) = &old {
        for record in old.files.iter().rev() {
            if wanted.files.iter().any(|f| f.path == record.path) {
                continue;
            }
            let (at, whose) = file_at(paths, &record.path, record.kind);
            let current = read_at(paths, &at, whose)?;
            steps.push(Step {
                path: record.path.clone(),
                at,
                current,
                target: record.original.clone(),
                mode: record.original_mode,
            });
        }
    }

    let changes: Vec<FileChange> = steps.iter().filter_map(Step::change).collect();
    let activation = activation_for(editor.as_ref(), &changes);
    let mut report = ChangeReport {
        engine: req.engine,
        mode: Some(req.mode()),
        dry_run: req.dry_run,
        changes,
        activation,
        state_file: state_host.clone(),
        notes,
    };
    if req.dry_run {
        return Ok(report);
    }
    if !report.changed() {
        if old.as_ref() != Some(&new_state) {
            // Same files, but no (or an outdated) record: write the record only.
            save_state(files, &state_host, &mut new_state, &steps)?;
        }
        report.notes.push(format!(
            "{} is already configured; nothing changed",
            req.engine
        ));
        return Ok(report);
    }
    save_state(files, &state_host, &mut new_state, &steps)?;
    apply(files, &steps)?;
    info!(engine = %req.engine, mode = %req.mode(), files = report.changes.len(), "configured");
    Ok(report)
}

/// Creates the missing directories for the state file and the files to write, records them, and
/// writes the state file.
fn save_state(
    files: &mut dyn HostWriter,
    state_host: &Path,
    state: &mut State,
    steps: &[Step],
) -> Result<()> {
    let mut dirs: Vec<PathBuf> = std::iter::once(state_host)
        .chain(
            steps
                .iter()
                .filter(|s| s.target.is_some())
                .map(|s| s.at.as_path()),
        )
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .collect();
    dirs.dedup();
    for dir in dirs {
        for created in files.create_dirs(&dir)? {
            debug!(dir = %created.display(), "created directory");
            if !state.created_dirs.contains(&created) {
                state.created_dirs.push(created);
            }
        }
    }
    state.save(files, state_host)
}

fn apply(files: &mut dyn HostWriter, steps: &[Step]) -> Result<()> {
    for step in steps {
        if step.current == step.target {
            continue;
        }
        match &step.target {
            Some(text) => {
                files.write(&step.at, text.as_bytes(), step.mode)?;
                info!(path = %step.path.display(), "wrote");
            }
            None => {
                files.remove(&step.at)?;
                info!(path = %step.path.display(), "removed");
            }
        }
    }
    Ok(())
}

fn activation_for(editor: &dyn EngineEditor, changes: &[FileChange]) -> Activation {
    if changes.is_empty() {
        return Activation::None;
    }
    let changed: Vec<&Path> = changes.iter().map(|c| c.path.as_path()).collect();
    editor.activation(&changed)
}

/// Unconfigures `req.engine`; see [`crate::unconfigure`].
pub fn unconfigure(req: &UnconfigureRequest, files: &mut dyn HostWriter) -> Result<ChangeReport> {
    let paths = &req.paths;
    let Session {
        editor,
        state_host,
        old,
        _lock,
    } = Session::open(req.engine, paths)?;
    let mut notes = Vec::new();
    let mut steps = Vec::new();

    match &old {
        Some(state) => {
            for record in state.files.iter().rev() {
                let (at, whose) = file_at(paths, &record.path, record.kind);
                let current = read_at(paths, &at, whose)?;
                let (target, mode) = if current == record.written {
                    (record.original.clone(), record.original_mode)
                } else {
                    match (record.kind, &current) {
                        (Ownership::Edited, Some(text)) => {
                            notes.push(format!(
                                "{} was edited after devinject-ctl wrote it; only devinject's entries were removed",
                                record.path.display()
                            ));
                            let reverted = editor.revert_edited(
                                &record.path,
                                text,
                                &state.runtime_name,
                                &state.prior,
                            )?;
                            (Some(reverted), None)
                        }
                        (Ownership::Edited, None) => (None, None),
                        (Ownership::Owned, _) => {
                            if current.is_some() {
                                notes.push(format!(
                                    "{} was edited after devinject-ctl wrote it; it is restored anyway",
                                    record.path.display()
                                ));
                            }
                            (record.original.clone(), record.original_mode)
                        }
                    }
                };
                steps.push(Step {
                    path: record.path.clone(),
                    at,
                    current,
                    target,
                    mode,
                });
            }
        }
        None => {
            for candidate in editor.candidates(req) {
                match candidate {
                    Candidate::Owned { path, ours } => {
                        let (at, whose) = file_at(paths, &path, Ownership::Owned);
                        let current = read_at(paths, &at, whose)?;
                        if let Some(text) = &current {
                            if ours(text) {
                                steps.push(Step {
                                    path,
                                    at,
                                    current,
                                    target: None,
                                    mode: None,
                                });
                            }
                        }
                    }
                    Candidate::Edited { path } => {
                        let (at, whose) = file_at(paths, &path, Ownership::Edited);
                        let current = read_at(paths, &at, whose)?;
                        if let Some(text) = &current {
                            let reverted = editor.revert_edited(
                                &path,
                                text,
                                &req.runtime_name,
                                &Prior::default(),
                            )?;
                            steps.push(Step {
                                path,
                                at,
                                current,
                                target: Some(reverted),
                                mode: None,
                            });
                        }
                    }
                }
            }
            if steps.iter().any(|s| s.current != s.target) {
                notes.push(format!(
                    "no record of an earlier configure at {}; removed the devinject entries found",
                    state_host.display()
                ));
            }
        }
    }

    let changes: Vec<FileChange> = steps.iter().filter_map(Step::change).collect();
    let mut report = ChangeReport {
        engine: req.engine,
        mode: old.as_ref().map(|s| s.mode),
        dry_run: req.dry_run,
        activation: activation_for(editor.as_ref(), &changes),
        changes,
        state_file: state_host.clone(),
        notes,
    };
    if !report.changed() && old.is_none() {
        report.notes.push(format!(
            "{} is not configured for devinject; nothing changed",
            req.engine
        ));
    }
    if req.dry_run {
        return Ok(report);
    }
    apply(files, &steps)?;
    if let Some(state) = &old {
        files.remove(&state_host)?;
        for dir in state.created_dirs.iter().rev() {
            // Only empty directories go; anything else put there since is not ours to remove.
            if files.remove_empty_dir(dir)? {
                debug!(dir = %dir.display(), "removed directory");
            }
        }
    }
    if report.changed() {
        info!(engine = %req.engine, files = report.changes.len(), "unconfigured");
    }
    Ok(report)
}
