//! Our CDI specs are fresh: each is what `devinject-ctl cdi generate` would write now.
//!
//! For every CDI directory ([`DoctorRequest::cdi_dirs`]) holding one of our specs
//! (`devinject.io-<profile>.json`), a dry run of [`cdi::generate()`] into that directory, with the
//! host configuration's roots and profiles, yields what would change: a spec naming a device
//! that is gone or missing one that appeared, a spec whose content differs (a node's numbers or
//! mode, a library), a spec of a profile without devices. The hook path, its `--config` and the
//! library directory a spec was generated with are read back from the spec's own
//! `devinject-hook finish` entry, so a spec written with other options than the defaults is not
//! called stale for that.
//!
//! What is reported, least noisy first:
//! - no spec of ours anywhere and no profile whose device plugin hands out CDI names
//!   (`allocate_mode = "cdi-annotations"` or `"cdi-cri"`): CDI is not in use, nothing is said;
//! - a stale spec: a warning, or an error for a profile in a CDI `allocate_mode` (pods are given
//!   names the spec lacks, or that name nodes which are gone, and fail to start);
//! - a profile with devices and no spec: an error in a CDI `allocate_mode`, a warning when other
//!   profiles have specs (its devices appeared after the last `cdi generate`), else nothing;
//! - a spec of ours that no profile owns: a warning (`cdi generate` leaves it alone);
//! - a fresh spec: ok.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use devinject_devices::{AllocateMode, FinishInvocation, Profile, HOOK_ARGV0};
use devinject_hostconfig::HostConfig;

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};
use devinject_cdi::{self as cdi, CdiReport, CdiRequest, CdiVersion};
use devinject_devices::CDI_VENDOR;
use devinject_engine_config::report::{Action, FileChange};

/// The directories CDI reads specs from, as the engines default to them.
pub const DEFAULT_CDI_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

const FIX: &str = "run `devinject-ctl cdi generate` (or keep `devinject-ctl cdi generate --watch` \
                   running, which refreshes the specs on every change)";

/// The profile a spec file of ours belongs to, from its name.
fn spec_profile(file_name: &str) -> Option<&str> {
    file_name
        .strip_prefix(CDI_VENDOR)?
        .strip_prefix('-')?
        .strip_suffix(".json")
        .filter(|p| !p.is_empty())
}

/// Our specs in `dir` (host path): profile name -> file content (`None` when unreadable).
fn our_specs(req: &DoctorRequest, dir: &Path) -> BTreeMap<String, Option<String>> {
    let Ok(entries) = std::fs::read_dir(req.access(dir)) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let profile = spec_profile(&name)?.to_string();
            // Through the fd layer: a FIFO or device node at a spec name is never opened.
            let text = req
                .host_paths()
                .read(&dir.join(&name), devinject_hostfs::host_dir::Name::Ours)
                .ok()
                .flatten();
            Some((profile, text))
        })
        .collect()
}

/// Our `devinject-hook finish` entries of a spec: the spec's own first, then its devices'.
fn our_hooks(spec: &serde_json::Value) -> impl Iterator<Item = &serde_json::Value> {
    let spec_level = spec["containerEdits"]["hooks"].as_array().into_iter();
    let device_level = spec["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["containerEdits"]["hooks"].as_array());
    spec_level
        .chain(device_level)
        .flatten()
        .filter(|h| h["args"][0] == HOOK_ARGV0)
}

/// The options the specs in a directory were generated with, read back from them; the
/// defaults where no spec says:
/// - the hook and its configuration from our first finish entry, and the library directory
///   from the first that names one (`--ldcache-dir`);
/// - `--cdi-version`: their newest `cdiVersion`, when it predates `additionalGids` (specs fitted
///   to no version that needed none read the same);
/// - `--user-namespaces`: a finish entry of theirs names nodes (`--node`), which only that
///   option writes into a spec.
fn generated_with(specs: &BTreeMap<String, Option<String>>) -> CdiRequest {
    let parsed: Vec<serde_json::Value> = specs
        .values()
        .flatten()
        .filter_map(|text| serde_json::from_str(text).ok())
        .collect();
    let newest = parsed
        .iter()
        .filter_map(|spec| spec["cdiVersion"].as_str()?.parse::<CdiVersion>().ok())
        .max();
    let hooks = || parsed.iter().flat_map(our_hooks);
    let argv = |hook: &serde_json::Value| -> Vec<String> {
        hook["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .map(str::to_owned)
            .collect()
    };
    let mut req = CdiRequest {
        newest_version: newest.filter(|v| *v < CdiVersion::ADDITIONAL_GIDS),
        user_namespaces: hooks().any(|h| argv(h).iter().any(|a| a == "--node")),
        ..CdiRequest::default()
    };
    if let Some(hook) = hooks().next() {
        if let Some(path) = hook["path"].as_str() {
            req.hook_path = PathBuf::from(path);
        }
        if let Ok((config, _)) = FinishInvocation::parse_argv(&argv(hook)) {
            req.hook_config = config;
        }
    }
    if let Some(dir) = hooks().find_map(|h| {
        let (_, finish) = FinishInvocation::parse_argv(&argv(h)).ok()?;
        finish.ldcache_dirs.into_iter().next()
    }) {
        req.lib_dir = dir;
    }
    req
}

/// The device names (besides `all`) of a spec's text.
fn spec_devices(text: &str) -> Option<BTreeSet<String>> {
    let spec: serde_json::Value = serde_json::from_str(text).ok()?;
    Some(
        spec["devices"]
            .as_array()?
            .iter()
            .filter_map(|d| d["name"].as_str())
            .filter(|n| *n != "all")
            .map(str::to_string)
            .collect(),
    )
}

/// The first removed and added lines of a unified diff.
fn first_change(diff: &str) -> String {
    let line = |sign: char, header: &str| {
        diff.lines()
            .find(|l| l.starts_with(sign) && !l.starts_with(header))
            .map(|l| l[1..].trim().to_string())
    };
    match (line('-', "---"), line('+', "+++")) {
        (Some(old), Some(new)) => format!("{old} is now {new}"),
        (Some(old), None) => format!("{old} is gone"),
        (None, Some(new)) => format!("{new} is new"),
        (None, None) => "the text differs".to_string(),
    }
}

/// What differs between the spec on disk and what generate would write.
fn describe(current: Option<&str>, change: &FileChange, device_ids: &[String]) -> String {
    let expected: BTreeSet<String> = device_ids.iter().cloned().collect();
    let list = |s: BTreeSet<&String>| {
        s.into_iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match current.and_then(spec_devices) {
        Some(found) if found != expected => {
            let mut parts = Vec::new();
            let added: BTreeSet<&String> = expected.difference(&found).collect();
            let removed: BTreeSet<&String> = found.difference(&expected).collect();
            if !added.is_empty() {
                parts.push(format!("device(s) {} added since", list(added)));
            }
            if !removed.is_empty() {
                parts.push(format!("device(s) {} gone", list(removed)));
            }
            parts.join("; ")
        }
        Some(_) => format!("its content differs: {}", first_change(&change.diff)),
        None => "it does not parse as a CDI spec".to_string(),
    }
}

fn severity(profile: Option<&Profile>) -> Severity {
    match profile.map(|p| p.allocate_mode) {
        Some(AllocateMode::CdiAnnotations | AllocateMode::CdiCri) => Severity::Error,
        _ => Severity::Warning,
    }
}

/// Compares our specs with what `cdi generate` would write now.
pub fn check(
    req: &DoctorRequest,
    host: &HostConfig,
    profiles: &[Profile],
    report: &mut DoctorReport,
) {
    let by_name: BTreeMap<&str, &Profile> = profiles.iter().map(|p| (p.name.as_str(), p)).collect();
    let cdi_mode = |p: &Profile| p.allocate_mode != AllocateMode::Envvar;
    let present: Vec<(PathBuf, BTreeMap<String, Option<String>>)> = req
        .cdi_dirs
        .iter()
        .map(|d| (d.clone(), our_specs(req, d)))
        .collect();
    let any_spec = present.iter().any(|(_, s)| !s.is_empty());
    if !any_spec && !profiles.iter().any(cdi_mode) {
        return;
    }
    let dirs_shown = req
        .cdi_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let dry_run = |dir: &Path, specs: &BTreeMap<String, Option<String>>| {
        cdi::generate(&CdiRequest {
            root: req.root.clone(),
            profiles_dir: host.profiles_dir.clone(),
            roots: devinject_devices::HostRoots {
                dev_root: host.dev_root.clone(),
                sys_root: host.sys_root.clone(),
                proc_root: host.proc_root.clone(),
                driver_root: host.driver_root.clone(),
            },
            output_dir: dir.to_path_buf(),
            dry_run: true,
            ..generated_with(specs)
        })
    };
    // Profiles with devices, from the first dry run that worked.
    let mut outcomes: Option<CdiReport> = None;
    for (dir, specs) in present.iter().filter(|(_, s)| !s.is_empty()) {
        let run = match dry_run(dir, specs) {
            Ok(run) => run,
            Err(e) => {
                report.add(
                    Section::Cdi,
                    dir.display().to_string(),
                    Severity::Info,
                    format!(
                        "cannot tell whether the CDI specs in {} are fresh: {e}",
                        dir.display()
                    ),
                    None,
                );
                continue;
            }
        };
        for (name, text) in specs {
            let file = dir.join(cdi::file_name(name));
            let shown = file.display().to_string();
            let Some(outcome) = run.profiles.iter().find(|o| &o.profile == name) else {
                report.add(
                    Section::Cdi,
                    &shown,
                    Severity::Warning,
                    format!(
                        "{shown} belongs to no profile in {}: engines still offer its devices",
                        host.profiles_dir.display()
                    ),
                    Some(
                        "remove it (`cdi generate` only manages the specs of existing profiles)"
                            .to_string(),
                    ),
                );
                continue;
            };
            let profile = by_name.get(name.as_str()).copied();
            match run.changes.iter().find(|c| c.path == file) {
                None => report.add(
                    Section::Cdi,
                    &shown,
                    Severity::Ok,
                    format!(
                        "{shown} is up to date ({} device(s))",
                        outcome.device_ids.len()
                    ),
                    None,
                ),
                Some(change) => {
                    let what = if change.action == Action::Remove {
                        let ids = text.as_deref().and_then(spec_devices).unwrap_or_default();
                        format!(
                            "no devices are found any more, and it still names device(s) {}",
                            ids.into_iter().collect::<Vec<_>>().join(", ")
                        )
                    } else {
                        describe(text.as_deref(), change, &outcome.device_ids)
                    };
                    report.add(
                        Section::Cdi,
                        &shown,
                        severity(profile),
                        format!("{shown} is stale: {what}"),
                        Some(FIX.to_string()),
                    );
                }
            }
        }
        outcomes.get_or_insert(run);
    }
    if outcomes.is_none() {
        // No spec anywhere, but a profile hands out CDI names: see what it would have.
        let first = req
            .cdi_dirs
            .first()
            .map_or_else(|| PathBuf::from(cdi::DEFAULT_OUTPUT_DIR), PathBuf::clone);
        match dry_run(&first, &BTreeMap::new()) {
            Ok(run) => outcomes = Some(run),
            Err(e) => report.add(
                Section::Cdi,
                &dirs_shown,
                Severity::Info,
                format!("cannot tell which CDI specs this host needs: {e}"),
                None,
            ),
        }
    }
    let Some(run) = outcomes else {
        return;
    };
    // A profile left out on purpose (a prepare step) is not missing its spec.
    for outcome in run
        .profiles
        .iter()
        .filter(|o| o.devices > 0 && o.not_exported.is_none())
    {
        let name = outcome.profile.as_str();
        if present.iter().any(|(_, s)| s.contains_key(name)) {
            continue;
        }
        let profile = by_name.get(name).copied();
        let (severity, effect) = if profile.is_some_and(cdi_mode) {
            (
                Severity::Error,
                format!(
                    "the device plugin hands out CDI names ({CDI_VENDOR}/{name}=<id>) that no engine \
                     can resolve, so pods asking for them fail to start"
                ),
            )
        } else if any_spec {
            (
                Severity::Warning,
                "while other profiles have one: its devices appeared after the specs were last \
                 generated"
                    .to_string(),
            )
        } else {
            continue;
        };
        report.add(
            Section::Cdi,
            name,
            severity,
            format!(
                "no CDI spec for {name} ({} device(s): {}) in {dirs_shown}: {effect}",
                outcome.devices,
                outcome.device_ids.join(", ")
            ),
            Some(FIX.to_string()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_file_names() {
        assert_eq!(spec_profile("devinject.io-demo.json"), Some("demo"));
        assert_eq!(
            spec_profile("devinject.io-intel-gpu.json"),
            Some("intel-gpu")
        );
        assert_eq!(
            spec_profile(".devinject.io-demo.json.devinject-tmp-1"),
            None
        );
        assert_eq!(spec_profile("nvidia.com-gpu.json"), None);
        assert_eq!(spec_profile("devinject.io-.json"), None);
    }

    /// `req` names the hook, its configuration and the library directory the test specs name.
    fn assert_the_hook_of_x(req: &CdiRequest) {
        assert_eq!(
            req.hook_path,
            Path::new("/opt/devinject/bin/devinject-hook")
        );
        assert_eq!(req.hook_config.as_deref(), Some(Path::new("/etc/x.toml")));
        assert_eq!(req.lib_dir, Path::new("/usr/lib64"));
    }

    #[test]
    fn options_are_read_back_from_the_finish_hook() {
        let spec = r#"{"containerEdits": {"hooks": [{"hookName": "createRuntime",
            "path": "/opt/devinject/bin/devinject-hook",
            "args": ["devinject-hook", "--config", "/etc/x.toml", "finish",
                     "--link", "/usr/lib64/libx.so.1=libx.so.1.0", "--ldcache-dir", "/usr/lib64"]}]}}"#;
        let specs = BTreeMap::from([("x".to_string(), Some(spec.to_string()))]);
        let req = generated_with(&specs);
        assert_the_hook_of_x(&req);
        assert_eq!(generated_with(&BTreeMap::new()), CdiRequest::default());
    }

    /// A spec with no finish entry of its own (no library, no control node) still names the
    /// hook in its devices' entries when written with `--user-namespaces`; the library
    /// directory comes from whichever spec names one.
    #[test]
    fn options_are_read_back_from_device_entries_too() {
        let kvm = r#"{"cdiVersion": "0.5.0", "devices": [{"name": "0", "containerEdits": {"hooks": [
            {"hookName": "createRuntime", "path": "/opt/devinject/bin/devinject-hook",
             "args": ["devinject-hook", "--config", "/etc/x.toml", "finish", "--node", "/dev/kvm", "c 10:232"]}]}}]}"#;
        let demo = r#"{"cdiVersion": "0.5.0", "containerEdits": {"hooks": [{"hookName": "createRuntime",
            "path": "/opt/devinject/bin/devinject-hook",
            "args": ["devinject-hook", "--config", "/etc/x.toml", "finish", "--ldcache-dir", "/usr/lib64"]}]}}"#;
        let specs = BTreeMap::from([
            ("a-kvm".to_string(), Some(kvm.to_string())),
            ("b-demo".to_string(), Some(demo.to_string())),
        ]);
        let req = generated_with(&specs);
        assert_the_hook_of_x(&req);
        assert!(req.user_namespaces);
        assert_eq!(req.newest_version, Some("0.5.0".parse().unwrap()));
        let kvm_alone = BTreeMap::from([("a-kvm".to_string(), Some(kvm.to_string()))]);
        assert_eq!(
            generated_with(&kvm_alone).hook_path,
            Path::new("/opt/devinject/bin/devinject-hook")
        );
    }

    #[test]
    fn differences_are_named() {
        let spec = r#"{"devices": [{"name": "0"}, {"name": "1"}, {"name": "all"}]}"#;
        let change = FileChange {
            path: PathBuf::from("/etc/cdi/devinject.io-demo.json"),
            action: Action::Modify,
            diff: "--- a\n+++ b\n@@\n-  \"major\": 10,\n+  \"major\": 11,\n".to_string(),
        };
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            describe(Some(spec), &change, &ids(&["1", "2"])),
            "device(s) 2 added since; device(s) 0 gone"
        );
        assert_eq!(
            describe(Some(spec), &change, &ids(&["0", "1"])),
            "its content differs: \"major\": 10, is now \"major\": 11,"
        );
        assert_eq!(
            describe(Some("{"), &change, &ids(&["0"])),
            "it does not parse as a CDI spec"
        );
    }
}
