//! The install: four kinds of steps, each journaled, each leaving a consistent host.
//!
//! 1. `payload`: the hook, the shim, devinject-ctl and the pod-resources tool (a grant checked
//!    by hand; the hook and the shim ask the kubelet in-process)
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

use devinject_discovery::profile_dir;
use devinject_engine_config::{ConfigureRequest, HostPaths};

use crate::activate::HostControl;
use crate::detect::{self, Target};
use crate::engine_step;
use crate::error::{InstallError, Result};
use crate::files::{self, Put};
use crate::host_config;
use crate::journal::Tx;
use crate::k3s;
use crate::options::InstallOptions;
use crate::record::{EngineRecord, FileRole, Record, RecordStore};
use crate::report::{Failure, Report};
use crate::steps::{self, Runner, StepCtx};

/// The binaries copied to `<prefix>/bin`. `devinject-podresources` asks the kubelet what a
/// container was granted, as the request policy does, for checking that by hand
/// (docs/policy.md).
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
    let store = RecordStore::new(&layout.host, &layout.state_dir());
    let runner = Runner::new(layout, opts.fault.as_ref(), opts.dry_run, opts.restart);

    // Everything that can be checked without changing the host.
    let to_install = match preflight(opts) {
        Ok(p) => p,
        Err(e) => return Err(steps::early(&report, e)),
    };

    let mut pre_created = Vec::new();
    let _lock = if opts.dry_run {
        if let Ok(Some(step)) = runner.journal.pending() {
            report.steps.push(crate::report::StepReport {
                step: "recover".into(),
                notes: vec![format!("an interrupted step {step} would be undone first")],
                ..Default::default()
            });
        }
        None
    } else {
        let (lock, created) = runner.lock_and_recover(ctl, &mut report)?;
        pre_created = created;
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

    // 1. Binaries.
    runner.run(&mut report, ctl, "payload", |mut cx| {
        put_set(&mut cx, opts, &store, &mut record, &to_install.binaries)?;
        save_record(cx.tx, &store, &mut record)
    })?;

    // 2. Profiles.
    runner.run(&mut report, ctl, "profiles", |mut cx| {
        put_set(&mut cx, opts, &store, &mut record, &to_install.profiles)?;
        if cx.tx.is_some() {
            // What the hook will load: ours plus anything an administrator put there.
            profile_dir::load(&layout.access(&to_install.profiles.dir))?;
        }
        save_record(cx.tx, &store, &mut record)
    })?;

    // 3. The hook's host configuration.
    runner.run(&mut report, ctl, "host-config", |mut cx| {
        let host = layout.host_config();
        let put = files::put(
            cx.tx.as_deref_mut(),
            &layout.host,
            &store,
            &mut record,
            &host,
            to_install.host_config.as_bytes(),
            0o644,
            FileRole::HostConfig,
        )?;
        note_put(&mut cx, put, &host, opts.dry_run);
        if let crate::options::Policy::Kubernetes {
            pod_resources_socket,
        } = &opts.host_config.policy
        {
            if !layout.host.access(pod_resources_socket).exists() {
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
    for (target, why) in &to_install.targets {
        let name = format!("runtime-{}", target.engine);
        runner.run(&mut report, ctl, &name, |mut cx| {
            cx.report
                .notes
                .push(format!("{}: {why}", target.describe()));
            configure_engine(opts, target, &store, &mut record, &mut cx)
        })?;
    }
    Ok(report)
}

/// What [`preflight`] checked and read: what will be installed.
struct ToInstall {
    /// The binaries, for `<prefix>/bin`.
    binaries: FileSet,
    /// The profiles, for the profiles directory.
    profiles: FileSet,
    host_config: String,
    targets: Vec<(Target, String)>,
}

/// Checks the request and reads what will be installed.
fn preflight(opts: &InstallOptions) -> Result<ToInstall> {
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
    let set = profile_dir::load(&src)?;
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
    Ok(ToInstall {
        binaries: FileSet {
            dir: layout.bin_dir(),
            files: binaries,
            mode: 0o755,
            role: FileRole::Binary,
        },
        profiles: FileSet {
            dir: layout.profiles_dir(),
            files: profiles,
            mode: 0o644,
            role: FileRole::Profile,
        },
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

/// Files installed into one directory, all with one mode and role.
struct FileSet {
    /// The directory (host path).
    dir: PathBuf,
    /// Name and content of each file.
    files: Vec<(String, Vec<u8>)>,
    /// Their mode.
    mode: u32,
    /// What they are in the record.
    role: FileRole,
}

/// Puts every file of `set`, then removes the files of its role from an earlier install that
/// this one no longer ships.
fn put_set(
    cx: &mut StepCtx<'_, '_>,
    opts: &InstallOptions,
    store: &RecordStore,
    record: &mut Record,
    set: &FileSet,
) -> Result<()> {
    let host = &opts.layout.host;
    let paths: Vec<PathBuf> = set.files.iter().map(|(n, _)| set.dir.join(n)).collect();
    for (path, (_, bytes)) in paths.iter().zip(&set.files) {
        let put = files::put(
            cx.tx.as_deref_mut(),
            host,
            store,
            record,
            path,
            bytes,
            set.mode,
            set.role,
        )?;
        note_put(cx, put, path, opts.dry_run);
    }
    let stale: Vec<_> = record
        .files
        .iter()
        .filter(|f| f.role == set.role && !paths.contains(&f.path))
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

    engine_step::apply(cx, layout, target, opts.restart, &req, |tx| {
        let entry = EngineRecord {
            target: target.clone(),
            runtime_name: opts.runtime_name.clone(),
        };
        record.engines.retain(|e| e.target != entry.target);
        record.engines.push(entry);
        save_record(Some(tx), store, record)
    })
}
