//! The uninstall: undo the engines' configuration exactly, then remove what was installed,
//! except what containers still running through the shim need.
//!
//! Steps, each journaled like the install's:
//! 1. `unconfigure-<engine>` for each engine in the install record: the runtime-config library
//!    restores every file it changed byte for byte (including an earlier default runtime), the
//!    k3s/RKE2 template goes, and the engine is restarted or reloaded if anything changed. From
//!    then on no new container uses devinject.
//! 2. `host-files`: the profiles and the host config go (an administrator's file that was there
//!    before the install comes back).
//! 3. `payload`: the binaries go.
//! 4. The install record, the state directory and the directories the install created go,
//!    when nothing is left.
//!
//! What stays: a container started through the shim before step 1 keeps running, and its engine
//! calls `devinject-runtime` again to stop and delete it (containerd's runc shim reads the
//! binary from the container's `options.json`, CRI-O's conmon was given it). So while such
//! containers exist (see [`crate::in_use`]), `<prefix>/bin/devinject-runtime`, the hook next to
//! it and `<config dir>/config.toml` (which the shim reads on every call, e.g. for the path of
//! runc) are left in place, listed in the report and in the install record; running
//! `--uninstall` again once those containers are gone removes them. Nothing else is needed by
//! running containers: profiles are read only on create.
//!
//! Without an install record (it was lost, or devinject was set up by hand), uninstall
//! unconfigures the engines it detects (the library recognises its own entries), and removes
//! the host config, the k3s/RKE2 template and the binaries only where they carry devinject's
//! marker or names; profiles are left, since nothing says which ones were installed.

use std::path::{Path, PathBuf};

use devinject_engine_config::{HostPaths, UnconfigureRequest};

use crate::activate::HostControl;
use crate::detect::{self, Target};
use crate::engine_step;
use crate::error::{InstallError, Result};
use crate::files;
use crate::host_config;
use crate::in_use::{self, User};
use crate::install::BINARIES;
use crate::k3s;
use crate::options::UninstallOptions;
use crate::record::{FileRole, InstalledFile, Record, RecordStore};
use crate::report::{Failure, Report};
use crate::steps::{self, Runner, StepCtx};

/// Uninstalls devinject from the host described by `opts`. `ctl` restarts engines.
pub fn uninstall(
    opts: &UninstallOptions,
    ctl: &mut dyn HostControl,
) -> std::result::Result<Report, Box<Failure>> {
    let layout = &opts.layout;
    let mut report = Report {
        dry_run: opts.dry_run,
        ..Report::default()
    };
    let store = RecordStore::new(&layout.host, &layout.state_dir());
    let runner = Runner::new(layout, opts.fault.as_ref(), opts.dry_run, opts.restart);
    let state_exists = layout.access(&layout.state_dir()).exists();
    let _lock = if state_exists && !opts.dry_run {
        let (lock, _) = runner.lock_and_recover(ctl, &mut report)?;
        Some(lock)
    } else {
        None
    };
    let loaded = store.load().map_err(|e| steps::early(&report, e))?;
    let had_record = loaded.is_some();
    let mut record = loaded.unwrap_or_default();
    let targets: Vec<(Target, String)> = if had_record {
        record
            .engines
            .iter()
            .map(|e| (e.target.clone(), e.runtime_name.clone()))
            .collect()
    } else {
        match detect::targets(layout, &opts.engines) {
            Ok(list) => list
                .into_iter()
                .map(|(t, _)| (t, opts.runtime_name.clone()))
                .collect(),
            Err(InstallError::Detect(why)) => {
                tracing::info!(reason = %why, "no engine to unconfigure");
                Vec::new()
            }
            Err(e) => return Err(steps::early(&report, e)),
        }
    };

    // 1. Engines.
    for (target, runtime_name) in &targets {
        let name = format!("unconfigure-{}", target.engine);
        runner.run(&mut report, ctl, &name, |mut cx| {
            unconfigure_engine(
                opts,
                target,
                runtime_name,
                &store,
                &mut record,
                had_record,
                &mut cx,
            )
        })?;
    }

    // Who still needs the shim.
    let users = in_use::users(layout, &layout.shim_path());
    let keep_for_running: Vec<PathBuf> = if users.is_empty() {
        Vec::new()
    } else {
        vec![layout.shim_path(), layout.hook_path(), layout.host_config()]
    };
    let why_kept = || {
        let shown: Vec<String> = users.iter().take(5).map(User::to_string).collect();
        format!(
            "{} container(s) still run through the shim ({}{}); run --uninstall again once they are gone",
            users.len(),
            shown.join(", "),
            if users.len() > 5 { ", ..." } else { "" }
        )
    };

    // 2. Profiles and host config.
    runner.run(&mut report, ctl, "host-files", |mut cx| {
        if had_record {
            take_role(&mut cx, layout, &store, &mut record, FileRole::Profile, &[])?;
            take_role(
                &mut cx,
                layout,
                &store,
                &mut record,
                FileRole::HostConfig,
                &keep_for_running,
            )?;
            return save_record(cx, &store, &mut record);
        }
        let config = layout.host_config();
        // Through the directory's fd: a FIFO or device node at the host config's name is
        // refused, naming it, not opened.
        let ours = layout
            .host
            .read(&config)?
            .is_some_and(|(t, _)| t.starts_with(host_config::MARKER.as_bytes()));
        if ours && !keep_for_running.contains(&config) {
            remove_unrecorded(&mut cx, &config)?;
        }
        if layout.access(&layout.profiles_dir()).exists() {
            cx.report.notes.push(format!(
                "no install record: the profiles in {} are left, since nothing says which were installed",
                layout.profiles_dir().display()
            ));
        }
        Ok(())
    })?;

    // 3. Binaries.
    runner.run(&mut report, ctl, "payload", |mut cx| {
        if had_record {
            take_role(
                &mut cx,
                layout,
                &store,
                &mut record,
                FileRole::Binary,
                &keep_for_running,
            )?;
            return save_record(cx, &store, &mut record);
        }
        for name in BINARIES {
            let path = layout.bin_dir().join(name);
            if layout.access(&path).exists() && !keep_for_running.contains(&path) {
                remove_unrecorded(&mut cx, &path)?;
            }
        }
        Ok(())
    })?;

    // 4. What the DRA driver kept under the kubelet's plugins directory.
    let mut dra_kept = None;
    runner.run(&mut report, ctl, "dra-driver", |mut cx| {
        dra_kept = dra_driver(&mut cx, layout, &opts.dra_plugin_dir)?;
        Ok(())
    })?;
    report.left.extend(dra_kept);

    // What stays, and why.
    let kept: Vec<PathBuf> = if had_record {
        record.files.iter().map(|f| f.path.clone()).collect()
    } else {
        keep_for_running
            .iter()
            .filter(|p| layout.access(p).exists())
            .cloned()
            .collect()
    };
    for p in kept {
        report.left.push((p, why_kept()));
    }

    // 5. The record and the directories, when nothing is left (else only empty directories).
    if !opts.dry_run {
        finish(opts, &store, &record, had_record).map_err(|e| {
            Box::new(Failure {
                report: report.clone(),
                step: "finish".into(),
                error: e,
                undone: Ok(Vec::new()),
                notes: vec!["everything else was removed; run --uninstall again".into()],
            })
        })?;
    }
    Ok(report)
}

/// The DRA driver's checkpoint file and socket in its directory, and the directory of its
/// claims' device metadata files (`devinject_dra::device_metadata::HOST_DIR`), which holds
/// files only while claims are prepared.
const DRA_CHECKPOINT: &str = "checkpoint.json";
const DRA_SOCKET: &str = "dra.sock";
const DRA_METADATA: &str = "metadata";

/// Removes what `devinject-dra` keeps in `dir` (its directory under the kubelet's plugins
/// directory): the checkpoint, a socket a killed driver left, its empty metadata directory, then
/// the directory when nothing else is in it. Each through its directory's fd: a link, FIFO or device at the checkpoint's
/// name is refused, naming it, and never followed or opened. A checkpoint that still lists
/// prepared claims stays, with the directory: returned with why (their pods still run, and a
/// driver installed again needs it to unprepare them).
fn dra_driver(
    cx: &mut StepCtx<'_, '_>,
    layout: &crate::options::Layout,
    dir: &Path,
) -> Result<Option<(PathBuf, String)>> {
    let host = &layout.host;
    if host.open_dir(dir)?.is_none() {
        return Ok(None);
    }
    let checkpoint = dir.join(DRA_CHECKPOINT);
    if let Some((bytes, _)) = host.read(&checkpoint)? {
        match prepared_claims(&bytes) {
            Some(0) => remove_unrecorded(cx, &checkpoint)?,
            claims => {
                let why = match claims {
                    Some(n) => format!(
                        "the DRA driver's checkpoint lists {n} claim(s) still prepared on this node: \
                         delete the pods holding them while the driver runs, then run --uninstall again"
                    ),
                    None => "not a checkpoint of devinject-dra's (it is not the JSON it writes): \
                             look at it and remove it by hand"
                        .to_string(),
                };
                return Ok(Some((checkpoint, why)));
            }
        }
    }
    let socket = dir.join(DRA_SOCKET);
    if matches!(
        host.entry(&socket)?,
        devinject_hostfs::host_dir::Entry::Other(_)
    ) {
        let removed = match cx.tx {
            Some(_) => host.remove_socket(&socket)?,
            None => true,
        };
        if removed {
            let verb = if cx.tx.is_some() {
                "remove"
            } else {
                "would remove"
            };
            cx.report
                .changes
                .push(format!("{verb} {}", socket.display()));
        }
    }
    for d in [dir.join(DRA_METADATA), dir.to_owned()] {
        if let Some(tx) = cx.tx.as_deref_mut() {
            if tx.remove_empty_dir(&d)? {
                cx.report.changes.push(format!("remove {}", d.display()));
            }
        } else if host.open_dir(&d)?.is_some() {
            cx.report
                .changes
                .push(format!("would remove {} when empty", d.display()));
        }
    }
    Ok(None)
}

/// How many claims the DRA driver's checkpoint `bytes` lists as prepared; `None` when it is not
/// such a checkpoint (`{"version": N, "claims": {...}}`).
fn prepared_claims(bytes: &[u8]) -> Option<usize> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    v.get("version")?.as_u64()?;
    Some(v.get("claims")?.as_object()?.len())
}

/// Removes a file devinject put there without a record of it.
fn remove_unrecorded(cx: &mut StepCtx<'_, '_>, path: &Path) -> Result<()> {
    let verb = if cx.tx.is_some() {
        "remove"
    } else {
        "would remove"
    };
    if let Some(tx) = cx.tx.as_deref_mut() {
        tx.remove(path)?;
    }
    cx.report.changes.push(format!("{verb} {}", path.display()));
    Ok(())
}

/// Takes every recorded file of `role` off the host, except those in `keep`.
fn take_role(
    cx: &mut StepCtx<'_, '_>,
    layout: &crate::options::Layout,
    store: &RecordStore,
    record: &mut Record,
    role: FileRole,
    keep: &[PathBuf],
) -> Result<()> {
    let files: Vec<InstalledFile> = record
        .files
        .iter()
        .filter(|f| f.role == role && !keep.contains(&f.path))
        .cloned()
        .collect();
    for f in files {
        let dry = cx.tx.is_none();
        if let Some(line) = files::take(cx.tx.as_deref_mut(), &layout.host, store, record, &f)? {
            cx.report
                .changes
                .push(if dry { format!("would {line}") } else { line });
        }
    }
    Ok(())
}

fn save_record(cx: StepCtx<'_, '_>, store: &RecordStore, record: &mut Record) -> Result<()> {
    match cx.tx {
        Some(tx) => store.save(tx, record),
        None => Ok(()),
    }
}

/// The runtime step of uninstall for one engine.
fn unconfigure_engine(
    opts: &UninstallOptions,
    target: &Target,
    runtime_name: &str,
    store: &RecordStore,
    record: &mut Record,
    had_record: bool,
    cx: &mut StepCtx<'_, '_>,
) -> Result<()> {
    let layout = &opts.layout;
    let engine = target.engine;
    let mut req = UnconfigureRequest::new(engine);
    req.paths = HostPaths {
        root: layout.host.root().to_path_buf(),
        config: Some(target.config.clone()),
        hooks_dir: None,
    };
    req.runtime_name = runtime_name.to_string();
    req.hook_path = layout.hook_path();
    let dry = cx.tx.is_none();

    // The k3s/RKE2 template.
    let dir = target.config.parent().map(Path::to_path_buf);
    let templates: Vec<InstalledFile> = record
        .files
        .iter()
        .filter(|f| f.role == FileRole::Template && f.path.parent() == dir.as_deref())
        .cloned()
        .collect();
    for f in &templates {
        if let Some(line) = files::take(cx.tx.as_deref_mut(), &layout.host, store, record, f)? {
            cx.report
                .changes
                .push(if dry { format!("would {line}") } else { line });
        }
    }
    if !had_record {
        for text in [None, Some("version = 3")] {
            let Some(tpl) = k3s::template_path(target, text) else {
                continue;
            };
            if let Ok(k3s::Existing::Ours(_)) = k3s::inspect(&layout.host, target, &tpl) {
                remove_unrecorded(cx, &tpl)?;
            }
        }
    }

    engine_step::apply(cx, layout, target, opts.restart, &req, |tx| {
        if had_record {
            record.engines.retain(|e| &e.target != target);
            store.save(tx, record)?;
        }
        Ok(())
    })
}

/// Removes the install record and the state directory when no installed file is left, and the
/// directories the install created when they are empty.
fn finish(
    opts: &UninstallOptions,
    store: &RecordStore,
    record: &Record,
    had_record: bool,
) -> Result<()> {
    let layout = &opts.layout;
    let host = &layout.host;
    // Only a regular file with one link is removed.
    let remove_file = |host_path: &Path| -> Result<()> { host.remove(host_path).map(|_| ()) };
    let remove_dir = |host_path: &Path| {
        let access = host.access(host_path);
        match std::fs::remove_dir(&access) {
            Ok(()) => tracing::debug!(dir = %host_path.display(), "removed directory"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::info!(dir = %host_path.display(), error = %e, "directory left in place")
            }
        }
    };
    if record.files.is_empty() {
        remove_file(&store.path())?;
        let state = layout.state_dir();
        remove_dir(&state.join("originals"));
        remove_dir(&state.join("journal"));
        remove_dir(&state);
    }
    if had_record {
        for d in record.created_dirs.iter().rev() {
            remove_dir(d);
        }
    } else {
        // No record of what was created: only devinject's own directories, when empty.
        remove_dir(&layout.bin_dir());
        remove_dir(&layout.prefix);
    }
    Ok(())
}
