//! What an engine's configuration, as the engine itself would read it, says about devinject:
//! which runtime entries run the shim and which hooks run the hook. `devinject-ctl doctor` uses
//! this to tell a user whether each installed engine is wired up, and whether what it points at
//! exists.
//!
//! Our binaries are recognised by file name (`devinject-runtime`, `devinject-hook`, or anything
//! else starting with `devinject-`, such as a wrapper), not by install path, so an engine
//! configured by hand or by another tool with another prefix is found too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Result, RuntimeConfigError};
use crate::load;
use crate::request::{HostPaths, Mode};

/// One place where an engine's configuration plugs devinject in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Integration {
    /// Shim (a runtime entry) or hook (an OCI hook).
    pub mode: Mode,
    /// The runtime entry's name (shim mode, or the containerd runtime whose base spec holds the
    /// hook) or the hooks.d file's name.
    pub name: String,
    /// The file that says so (host path).
    pub file: PathBuf,
    /// The devinject binary it runs (host path).
    pub binary: PathBuf,
    /// The `--config` the binary is run with, when any (hook arguments, docker's
    /// `runtimeArgs`).
    pub config: Option<PathBuf>,
    /// The entry is the engine's default runtime.
    pub default: bool,
    /// What is wrong with the entry, in words for the user (empty when nothing is).
    pub problems: Vec<String>,
}

/// The cgroup driver an engine is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// systemd creates the containers' cgroups (as transient scopes) and owns their settings.
    Systemd,
    /// The runtime writes the cgroup files itself.
    Cgroupfs,
}

impl std::fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CgroupDriver::Systemd => "systemd",
            CgroupDriver::Cgroupfs => "cgroupfs",
        })
    }
}

impl CgroupDriver {
    /// Parses `systemd` / `cgroupfs`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "systemd" => Some(CgroupDriver::Systemd),
            "cgroupfs" => Some(CgroupDriver::Cgroupfs),
            _ => None,
        }
    }
}

/// Whether `path` names one of devinject's binaries (or a wrapper around one).
pub fn is_devinject_binary(path: &str) -> bool {
    Path::new(path)
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("devinject-"))
}

/// The TOML files among `files` (host paths) that exist, parsed, in order.
pub fn read_tomls(
    paths: &HostPaths,
    files: &[PathBuf],
) -> Result<Vec<(PathBuf, toml_edit::DocumentMut)>> {
    let mut out = Vec::new();
    for file in files {
        let access = paths.access(file);
        if let Some(text) = load::read_optional(&access)? {
            out.push((file.clone(), load::parse_toml(&access, &text)?));
        }
    }
    Ok(out)
}

/// The value after `--config` in a hook's argv.
pub fn config_arg(args: &[String]) -> Option<PathBuf> {
    args.windows(2)
        .find(|w| w[0] == "--config")
        .map(|w| PathBuf::from(&w[1]))
}

/// The OCI hook stages at which `devinject-hook` can inject: both run in the runtime's
/// namespaces with the container's pid, after the cgroup is set up.
pub const INJECTING_STAGES: [&str; 2] = ["createRuntime", "prestart"];

/// The hooks running devinject in the OCI spec `spec` (a containerd base spec), as
/// `(stage, path, args)`.
pub fn spec_hooks(spec: &serde_json::Value) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    let Some(hooks) = spec.get("hooks").and_then(serde_json::Value::as_object) else {
        return out;
    };
    for (stage, list) in hooks {
        for h in list.as_array().into_iter().flatten() {
            let Some(path) = h.get("path").and_then(serde_json::Value::as_str) else {
                continue;
            };
            if is_devinject_binary(path) {
                out.push((stage.clone(), path.to_string(), string_list(h.get("args"))));
            }
        }
    }
    out
}

fn string_list(v: Option<&serde_json::Value>) -> Vec<String> {
    v.and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The hooks.d files running devinject in `dirs` (host paths, in the engine's order: a file in
/// a later directory masks one with the same name in an earlier one, as oci-hooks(5) says).
pub fn hooksd_integrations(paths: &HostPaths, dirs: &[String]) -> Result<Vec<Integration>> {
    let mut by_name: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in dirs {
        let host_dir = PathBuf::from(dir);
        let access = paths.access(&host_dir);
        let entries = match std::fs::read_dir(&access) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(RuntimeConfigError::io("list", access, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| RuntimeConfigError::io("list", &access, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") {
                by_name.insert(name.clone(), host_dir.join(&name));
            }
        }
    }
    let mut out = Vec::new();
    for (name, file) in by_name {
        let access = paths.access(&file);
        let Some(text) = load::read_optional(&access)? else {
            continue;
        };
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let Some(path) = doc
            .pointer("/hook/path")
            .and_then(serde_json::Value::as_str)
        else {
            continue;
        };
        if !is_devinject_binary(path) {
            continue;
        }
        let args = string_list(doc.pointer("/hook/args"));
        let stages = string_list(doc.get("stages"));
        let mut problems = Vec::new();
        if !stages
            .iter()
            .any(|s| INJECTING_STAGES.contains(&s.as_str()))
        {
            problems.push(format!(
                "its stages {stages:?} include neither createRuntime nor prestart, so the hook never injects"
            ));
        }
        if doc.get("version").and_then(serde_json::Value::as_str) != Some("1.0.0") {
            problems.push("it is not an oci-hooks 1.0.0 file".to_string());
        }
        out.push(Integration {
            mode: Mode::Hook,
            name,
            file,
            binary: PathBuf::from(path),
            config: config_arg(&args),
            default: false,
            problems,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_our_binaries_by_name() {
        assert!(is_devinject_binary("/usr/local/bin/devinject-runtime"));
        assert!(is_devinject_binary("/opt/x/devinject-hook"));
        assert!(!is_devinject_binary("/usr/bin/runc"));
        assert!(!is_devinject_binary("/usr/bin/nvidia-devinject"));
    }

    #[test]
    fn finds_the_config_argument() {
        let args = ["devinject-hook", "--config", "/a.toml"].map(String::from);
        assert_eq!(config_arg(&args), Some(PathBuf::from("/a.toml")));
        assert_eq!(config_arg(&["devinject-hook".to_string()]), None);
    }

    #[test]
    fn later_hooks_dirs_mask_earlier_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = HostPaths::under_root(dir.path());
        let usr = dir.path().join("usr/hooks.d");
        let etc = dir.path().join("etc/hooks.d");
        std::fs::create_dir_all(&usr).expect("mkdir");
        std::fs::create_dir_all(&etc).expect("mkdir");
        let ours = crate::engines::hooksd::hook_json(&crate::engines::hooksd::hook_command(
            Path::new("/bin/devinject-hook"),
            None,
        ));
        std::fs::write(usr.join("devinject.json"), &ours).expect("write");
        std::fs::write(usr.join("broken.json"), "{").expect("write");
        std::fs::write(
            etc.join("devinject.json"),
            "{\"version\":\"1.0.0\",\"hook\":{\"path\":\"/bin/other\"},\"when\":{\"always\":true},\"stages\":[\"prestart\"]}",
        )
        .expect("write");
        let dirs = ["/usr/hooks.d".to_string(), "/etc/hooks.d".to_string()];
        assert!(hooksd_integrations(&paths, &dirs).expect("scan").is_empty());
        let found = hooksd_integrations(&paths, &dirs[..1]).expect("scan");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].binary, PathBuf::from("/bin/devinject-hook"));
        assert!(found[0].problems.is_empty(), "{:?}", found[0].problems);
    }
}
