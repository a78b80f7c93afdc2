//! The install: four kinds of steps, each journaled, each leaving a consistent host.
//!
//! 1. `payload`: the hook, the shim, the pod-resources helper they execute, and devinject-ctl
//!    into `<prefix>/bin`;
//! 2. `profiles`: the device profiles into `<config dir>/profiles`;
//! 3. `host-config`: `<config dir>/config.toml` (with the Kubernetes policy by default);
//! 4. `runtime-<engine>` for each engine: the k3s/RKE2 template, the engine's configuration
//!    through the runtime-config library, then a restart or reload if (and only if) the
//!    configuration changed.
//!
//! The order makes every prefix of the steps a working host: the engine is pointed at the shim
//! only once the shim, its profiles and its configuration are in place. Everything is checked
//! before the first step (profiles parse, the hook accepts the host config, the engine is
//! found), so most mistakes change nothing at all.

use std::path::{Path, PathBuf};

use devinject_devices::ProfileSet;
use devinject_runtime_config::{configure, ConfigureRequest, HostPaths};

use crate::activate::{activate, HostControl, Outcome};
use crate::detect::{self, Target};
use crate::error::{InstallError, Result};
use crate::files::{self, Put};
use crate::host_config;
use crate::journal::{Journal, Tx};
use crate::k3s;
use crate::options::{InstallOptions, RestartMode};
use crate::record::{EngineRecord, FileRole, Record, RecordStore};
use crate::report::{Failure, Report};
use crate::steps::{self, StepCtx};

/// The binaries copied to `<prefix>/bin`. `devinject-podresources` is the helper the hook and
/// the shim execute to ask the kubelet what a pod was granted; they look for it next to
/// themselves, and the host config names it too.
pub const BINARIES: [&str; 4] = [
    "devinject-hook",
    "devinject-podresources",
    "devinject-runtime",
    "devinject-ctl",
];

/// Installs devinject on the host described by `opts`. `ctl` restarts engines.
pub fn install(
    opts: &InstallOptions,
    ctl: &mut dyn HostControl,
) -> std::result::Result<Report, Box<Failure>> {
    let layout = &opts.layout;
    let mut report = Report {
        dry_run: opts.dry_run,
        ..Report::default()
    };
    let journal = Journal::new(&layout.host, &layout.state_dir());
    let store = RecordStore::new(&layout.host, &layout.state_dir());

    // Everything that can be checked without changing the host.
    let plan = match prepare(opts) {
        Ok(p) => p,
        Err(e) => return Err(steps::early(&report, e)),
    };

    let mut pre_created = Vec::new();
    let _lock = if opts.dry_run {
        if let Ok(Some(step)) = journal.pending() {
            report.steps.push(crate::report::StepReport {
                step: "recover".into(),
                notes: vec![format!("an interrupted step {step} would be undone first")],
                ..Default::default()
            });
        }
        None
    } else {
        let (lock, created) = steps::lock(layout).map_err(|e| steps::early(&report, e))?;
        pre_created = created;
        match journal.recover() {
            Ok(Some(rec)) => {
                let notes = steps::reactivate(ctl, layout, &rec.activate, opts.restart);
                for n in notes {
                    tracing::warn!(note = %n, "after undoing an interrupted step");
                }
                report.recovered = Some(rec);
            }
            Ok(None) => {}
            Err(e) => return Err(steps::early(&report, e)),
        }
        Some(lock)
    };
    let mut record = match store.load() {
        Ok(r) => r.unwrap_or_default(),
        Err(e) => return Err(steps::early(&report, e)),
    };
    if !pre_created.is_empty() {
        // Remember at once that the prefix and state directory are ours, so that an uninstall
        // after a kill in the first step still removes them.
        record.add_dirs(pre_created);
        if let Err(e) = store.save_now(&record) {
            return Err(steps::early(&report, e));
        }
    }

    let fault = opts.fault.as_ref();
    let run = |report: &mut Report,
               ctl: &mut dyn HostControl,
               name: &str,
               body: &mut dyn FnMut(StepCtx<'_, '_>) -> Result<()>| {
        steps::run(
            &journal,
            fault,
            opts.dry_run,
            layout,
            opts.restart,
            ctl,
            report,
            name,
            body,
        )
    };

    // 1. Binaries.
    run(&mut report, ctl, "payload", &mut |mut cx| {
        let bin = layout.bin_dir();
        for (name, bytes) in &plan.binaries {
            let host = bin.join(name);
            let put = files::put(
                cx.tx.as_deref_mut(),
                &layout.host,
                &store,
                &mut record,
                &host,
                bytes,
                0o755,
                FileRole::Binary,
            )?;
            note_put(&mut cx, put, &host, opts.dry_run);
        }
        drop_stale(
            &mut cx,
            &layout.host,
            &store,
            &mut record,
            FileRole::Binary,
            |p| plan.binaries.iter().any(|(n, _)| p == bin.join(n)),
        )?;
        save_record(cx.tx, &store, &mut record)
    })?;

    // 2. Profiles.
    run(&mut report, ctl, "profiles", &mut |mut cx| {
        let dir = layout.profiles_dir();
        for (name, bytes) in &plan.profiles {
            let host = dir.join(name);
            let put = files::put(
                cx.tx.as_deref_mut(),
                &layout.host,
                &store,
                &mut record,
                &host,
                bytes,
                0o644,
                FileRole::Profile,
            )?;
            note_put(&mut cx, put, &host, opts.dry_run);
        }
        drop_stale(
            &mut cx,
            &layout.host,
            &store,
            &mut record,
            FileRole::Profile,
            |p| plan.profiles.iter().any(|(n, _)| p == dir.join(n)),
        )?;
        if cx.tx.is_some() {
            // What the hook will load: ours plus anything an administrator put there.
            ProfileSet::load_dir(&layout.access(&dir))?;
        }
        save_record(cx.tx, &store, &mut record)
    })?;

    // 3. The hook's host configuration.
    run(&mut report, ctl, "host-config", &mut |mut cx| {
        let host = layout.host_config();
        let put = files::put(
            cx.tx.as_deref_mut(),
            &layout.host,
            &store,
            &mut record,
            &host,
            plan.host_config.as_bytes(),
            0o644,
            FileRole::HostConfig,
        )?;
        note_put(&mut cx, put, &host, opts.dry_run);
        if let crate::options::Policy::Kubernetes {
            pod_resources_socket,
        } = &opts.host_config.policy
        {
            if !layout.host.resolve(pod_resources_socket).exists() {
                cx.report.notes.push(format!(
                    "the kubelet's pod-resources socket {} is not there: the kubernetes policy \
                     honours no device request until it is (is /var/lib/kubelet/pod-resources \
                     mounted at {}?)",
                    pod_resources_socket.display(),
                    layout
                        .host
                        .access(Path::new("/var/lib/kubelet/pod-resources"))
                        .display()
                ));
            }
        }
        save_record(cx.tx, &store, &mut record)
    })?;

    // 4. Each engine.
    for (target, why) in &plan.targets {
        let name = format!("runtime-{}", target.engine);
        run(&mut report, ctl, &name, &mut |mut cx| {
            cx.report
                .notes
                .push(format!("{}: {why}", target.describe()));
            configure_engine(opts, target, &store, &mut record, &mut cx)
        })?;
    }
    Ok(report)
}

/// What [`prepare`] checked and read.
struct Plan {
    binaries: Vec<(String, Vec<u8>)>,
    profiles: Vec<(String, Vec<u8>)>,
    host_config: String,
    targets: Vec<(Target, String)>,
}

/// Checks the request and reads what will be installed.
fn prepare(opts: &InstallOptions) -> Result<Plan> {
    let layout = &opts.layout;
    for (what, p) in [
        ("--prefix", &layout.prefix),
        ("--config-dir", &layout.config_dir),
    ] {
        if !p.is_absolute() {
            return Err(InstallError::InvalidRequest(format!(
                "{what} {} must be an absolute host path",
                p.display()
            )));
        }
    }
    let mut binaries = Vec::new();
    for name in BINARIES {
        let src = opts.payload.join("bin").join(name);
        let bytes = std::fs::read(&src).map_err(|e| InstallError::io("read", &src, e))?;
        binaries.push((name.to_string(), bytes));
    }
    let src = opts
        .profiles
        .clone()
        .unwrap_or_else(|| opts.payload.join("profiles"));
    // Strict parse of every profile (file, line and key in the error) before anything changes.
    let set = ProfileSet::load_dir(&src)?;
    if set.is_empty() {
        return Err(InstallError::InvalidRequest(format!(
            "no profiles (*.toml) in {}",
            src.display()
        )));
    }
    let mut profiles = Vec::new();
    let entries = std::fs::read_dir(&src).map_err(|e| InstallError::io("list", &src, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| InstallError::io("list", &src, e))?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "toml") {
            let bytes = std::fs::read(&path).map_err(|e| InstallError::io("read", &path, e))?;
            profiles.push((entry.file_name().to_string_lossy().into_owned(), bytes));
        }
    }
    profiles.sort();
    let targets = detect::targets(layout, &opts.engines)?;
    let only: Vec<Target> = targets.iter().map(|(t, _)| t.clone()).collect();
    let host_config = host_config::render(&opts.host_config, layout, &only);
    host_config::validate(&host_config)?;
    Ok(Plan {
        binaries,
        profiles,
        host_config,
        targets,
    })
}

/// Adds a line for a put to the step report.
fn note_put(cx: &mut StepCtx<'_, '_>, put: Put, host: &Path, dry_run: bool) {
    let verb = match (put, dry_run) {
        (Put::Unchanged, _) => return,
        (Put::Created, false) => "create",
        (Put::Replaced, false) => "replace",
        (Put::Created, true) => "would create",
        (Put::Replaced, true) => "would replace",
    };
    cx.report.changes.push(format!("{verb} {}", host.display()));
}

/// Removes files of `role` from an earlier install that this one no longer ships.
fn drop_stale(
    cx: &mut StepCtx<'_, '_>,
    host: &crate::host::HostRoot,
    store: &RecordStore,
    record: &mut Record,
    role: FileRole,
    keep: impl Fn(&Path) -> bool,
) -> Result<()> {
    let stale: Vec<_> = record
        .files
        .iter()
        .filter(|f| f.role == role && !keep(&f.path))
        .cloned()
        .collect();
    for f in stale {
        if let Some(line) = files::take(cx.tx.as_deref_mut(), host, store, record, &f)? {
            cx.report.changes.push(line);
        }
    }
    Ok(())
}

/// Saves the record (with the directories the step created) within the step.
fn save_record(tx: Option<&mut Tx<'_>>, store: &RecordStore, record: &mut Record) -> Result<()> {
    let Some(tx) = tx else {
        return Ok(());
    };
    record.add_dirs(tx.created_dirs().to_vec());
    store.save(tx, record)
}

/// The runtime step for one engine.
fn configure_engine(
    opts: &InstallOptions,
    target: &Target,
    store: &RecordStore,
    record: &mut Record,
    cx: &mut StepCtx<'_, '_>,
) -> Result<()> {
    let layout = &opts.layout;
    let engine = target.engine;
    let mut req = ConfigureRequest::new(engine);
    req.mode = opts.mode;
    req.set_as_default = opts.set_as_default;
    req.paths = HostPaths {
        root: layout.host.root().to_path_buf(),
        config: Some(target.config.clone()),
        hooks_dir: None,
    };
    req.shim_path = layout.shim_path();
    req.hook_path = layout.hook_path();
    req.runtime_name = opts.runtime_name.clone();

    // k3s/RKE2: the template that keeps the drop-in imported across restarts.
    let config_text = std::fs::read_to_string(layout.access(&target.config)).ok();
    if let Some(tpl) = k3s::template_path(target, config_text.as_deref()) {
        match k3s::inspect(&layout.host, target, &tpl)? {
            k3s::Existing::TheirsImporting => cx.report.notes.push(format!(
                "{} is not devinject's but imports its drop-ins; it is used as it is",
                tpl.display()
            )),
            _ => {
                let text = k3s::render(target);
                let put = files::put(
                    cx.tx.as_deref_mut(),
                    &layout.host,
                    store,
                    record,
                    &tpl,
                    text.as_bytes(),
                    0o644,
                    FileRole::Template,
                )?;
                note_put(cx, put, &tpl, opts.dry_run);
            }
        }
    }

    let mut preview_req = req.clone();
    preview_req.dry_run = true;
    let preview = configure(&preview_req).map_err(InstallError::runtime(engine))?;
    let Some(tx) = cx.tx.as_deref_mut() else {
        for c in &preview.changes {
            cx.report
                .changes
                .push(format!("would {} {}", c.action, c.path.display()));
        }
        cx.report.diff = preview.diff();
        cx.report.notes.extend(preview.notes.iter().cloned());
        if preview.changed() {
            if let Some(i) = preview.activation.instruction() {
                cx.report.activation = Some(Outcome::Needed(i));
            }
        }
        return Ok(());
    };

    // Save everything the library is about to touch, then let it work.
    let mut touched: Vec<PathBuf> = preview.changes.iter().map(|c| c.path.clone()).collect();
    touched.push(preview.state_file.clone());
    for path in &touched {
        steps::protect_engine_file(tx, layout, path)?;
    }
    let done = configure(&req).map_err(InstallError::runtime(engine))?;
    for c in &done.changes {
        cx.report
            .changes
            .push(format!("{} {}", c.action, c.path.display()));
    }
    cx.report.notes.extend(done.notes.iter().cloned());
    if done.changed() {
        tx.changed()?;
    }
    let entry = EngineRecord {
        target: target.clone(),
        runtime_name: opts.runtime_name.clone(),
    };
    record.engines.retain(|e| e.target != entry.target);
    record.engines.push(entry);
    record.add_dirs(tx.created_dirs().to_vec());
    store.save(tx, record)?;

    if done.changed() {
        if opts.restart != RestartMode::None {
            tx.activate_on_undo(target)?;
        }
        let outcome = activate(&mut *cx.ctl, layout, target, done.activation, opts.restart)?;
        if matches!(outcome, Outcome::Done(_)) {
            tx.changed()?;
        }
        cx.report.activation = Some(outcome);
    }
    Ok(())
}
