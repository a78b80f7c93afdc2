//! `cdi generate`: a spec file per profile with devices written, our stale ones removed.

use std::path::PathBuf;

use devinject_devices::CDI_VENDOR;
use devinject_discovery::{discover, profile_dir, resolve_driver_files};
use devinject_hostfs::change::{Action, FileChange};
use devinject_hostfs::diff;
use devinject_hostfs::host_dir::{HostDir, Name};

use crate::build::build_spec;
use crate::error::{devices_error, CdiError, Result};
use crate::request::CdiRequest;
use crate::version::fit;

/// What happened to one profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileOutcome {
    /// The profile's name: its spec's class and file name.
    pub profile: String,
    /// Devices found.
    pub devices: usize,
    /// Their ids, in discovery order: the spec's device names besides `all`.
    pub device_ids: Vec<String>,
    /// The spec file (host path), when one is written.
    pub file: Option<PathBuf>,
    /// Its `cdiVersion`.
    pub cdi_version: Option<String>,
    /// Why the profile's devices are not exported although it has some.
    pub not_exported: Option<String>,
    /// What the spec leaves out for the engine's CDI version (`CdiRequest::newest_version`).
    pub left_out: Option<String>,
    /// Why the profile is withdrawn: its discovery or its driver files failed (a required node
    /// missing, an unreadable sysfs file). Its spec is removed like that of a profile without
    /// devices, and the other profiles' specs are written: one broken device kind never holds
    /// back another.
    pub withdrawn: Option<String>,
}

/// Why a profile with a prepare step gets no CDI spec.
pub const PREPARE_NOT_EXPORTED: &str = "the profile has a prepare step, which a CDI spec cannot \
    run (its devices would start unprepared): inject them through the runtime shim or NRI \
    (docs/prepare.md)";

/// The result of [`generate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiReport {
    /// One entry per profile.
    pub profiles: Vec<ProfileOutcome>,
    /// Files created, changed or removed (stale specs of profiles without devices).
    pub changes: Vec<FileChange>,
    /// Nothing was written.
    pub dry_run: bool,
}

/// The spec file name for a profile.
pub fn file_name(profile: &str) -> String {
    format!("{CDI_VENDOR}-{profile}.json")
}

/// Writes (or, for a dry run, diffs) a CDI spec per profile with devices, and removes our
/// specs of profiles without devices.
pub fn generate(req: &CdiRequest) -> Result<CdiReport> {
    let roots = req.access_roots();
    let profiles = profile_dir::load(&req.access(&req.profiles_dir)).map_err(devices_error)?;
    let mut report = CdiReport {
        profiles: Vec::new(),
        changes: Vec::new(),
        dry_run: req.dry_run,
    };
    let mut writes: Vec<(PathBuf, Option<String>)> = Vec::new();
    for profile in profiles.iter() {
        let name = profile.name.as_str().to_string();
        let found = discover(profile, &roots)
            .map_err(|e| e.to_string())
            .and_then(|inventory| {
                let exported = profile.prepare.is_none() && !inventory.devices.is_empty();
                let files = exported
                    .then(|| resolve_driver_files(profile, &roots))
                    .transpose()
                    .map_err(|e| e.to_string())?;
                Ok((inventory, files))
            });
        let (inventory, files, withdrawn) = match found {
            Ok((inventory, files)) => (inventory, files, None),
            Err(e) => {
                tracing::warn!(profile = %name, error = %e, "profile withdrawn: no spec");
                (Default::default(), None, Some(e))
            }
        };
        let not_exported = (profile.prepare.is_some() && !inventory.devices.is_empty())
            .then(|| PREPARE_NOT_EXPORTED.to_owned());
        // Driver files are resolved only for a profile whose devices are exported.
        let mut spec = match &files {
            Some(files) => build_spec(req, profile, &inventory, files)?,
            None => None,
        };
        let left_out = match (&mut spec, req.newest_version) {
            (Some(spec), Some(newest)) => fit(spec, newest).map_err(|why| CdiError::Devices {
                message: format!("profile {name}: {why} (--cdi-version)"),
            })?,
            _ => None,
        };
        let host_file = req.output_dir.join(file_name(&name));
        report.profiles.push(ProfileOutcome {
            profile: name,
            devices: inventory.devices.len(),
            device_ids: inventory
                .devices
                .iter()
                .map(|d| d.id.as_str().to_string())
                .collect(),
            file: spec.as_ref().map(|_| host_file.clone()),
            cdi_version: spec.as_ref().map(|s| s.cdi_version.clone()),
            not_exported,
            left_out,
            withdrawn,
        });
        let content = spec.map(|s| s.to_text());
        writes.push((host_file, content));
    }
    // Every spec name is looked at before anything is written, so a refusal leaves all specs as
    // they were. The names are ours: nothing at them is followed or opened before its type is
    // known, whatever the root.
    let mut dir = HostDir::open(&req.root, &req.output_dir)?;
    let mut steps = Vec::new();
    for (host_file, content) in writes {
        let name = std::ffi::OsString::from(host_file.file_name().unwrap_or_default());
        let current = match &dir {
            Some(d) => d.read(&name, Name::Ours)?,
            None => None,
        };
        if current == content {
            continue;
        }
        let action = match (&current, &content) {
            (None, _) => Action::Create,
            (_, None) => Action::Remove,
            _ => Action::Modify,
        };
        report.changes.push(FileChange {
            diff: diff::unified(
                &host_file.display().to_string(),
                current.as_deref(),
                content.as_deref(),
            ),
            path: host_file,
            action,
        });
        steps.push((name, content));
    }
    if req.dry_run {
        return Ok(report);
    }
    for (name, content) in steps {
        match content {
            Some(text) => {
                if dir.is_none() {
                    dir = Some(HostDir::create(&req.root, &req.output_dir)?.0);
                }
                if let Some(d) = &dir {
                    d.write(&name, text.as_bytes(), None)?;
                }
            }
            None => {
                if let Some(d) = &dir {
                    d.remove(&name)?;
                }
            }
        }
    }
    Ok(report)
}
