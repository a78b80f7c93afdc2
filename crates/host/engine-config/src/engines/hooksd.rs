//! oci-hooks(5) files for CRI-O and podman (containers/common `pkg/hooks`), and working out
//! which hooks directories an engine reads.
//!
//! The hook file (version 1.0.0):
//!
//! ```json
//! {
//!     "version": "1.0.0",
//!     "hook": { "path": "/usr/local/bin/devinject-hook", "args": ["devinject-hook"] },
//!     "when": { "always": true },
//!     "stages": ["createRuntime"]
//! }
//! ```
//!
//! **Stage.** `createRuntime`, not `prestart`: both run at the same point in runc (after the
//! cgroup is set up, before `pivot_root`, in the runtime namespace with the container's host
//! pid), but `prestart` is deprecated in the runtime spec and containers/common >= 0.58 rewrites
//! `prestart` hooks to `createRuntime` anyway, so `createRuntime` is what runs everywhere.
//!
//! **When.** `always`: requests arrive as an environment variable (`<NAME>_VISIBLE_DEVICES`,
//! from `podman run -e` or the device plugin's Allocate response) as well as annotations, and
//! `when` can only match annotations, commands and bind mounts. Matching on annotations would
//! silently ignore env requests, so the hook sees every container and returns at once (after
//! reading `config.json`) when it finds no request.

use std::path::{Path, PathBuf};

use devinject_devices::HookCommand;
use serde_json::json;

use crate::error::{Result, RuntimeConfigError};
use crate::load;
use crate::request::HostPaths;
use crate::toml_tree;

/// The OCI stage the hook runs at.
pub const HOOK_STAGE: &str = "createRuntime";
/// File name of our hook in a hooks.d directory.
pub const HOOK_FILE: &str = "devinject.json";
/// CRI-O's and podman's package-owned hooks directory.
pub const USR_HOOKS_DIR: &str = "/usr/share/containers/oci/hooks.d";
/// The administrator's hooks directory.
pub const ETC_HOOKS_DIR: &str = "/etc/containers/oci/hooks.d";

/// The hook at `hook_path`, with `--config FILE` when the host configuration is not at its
/// default path. A relative `config` is taken in this process's working directory, where the
/// command line named it: the runtime runs the hook in a directory of its own (runc: the
/// bundle), where the same relative path names another file.
pub fn hook_command(hook_path: &Path, config: Option<&Path>) -> HookCommand {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    HookCommand::new(hook_path, config, &cwd)
}

/// The hooks.d JSON document running `hook`: `devinject-hook [--config FILE]` with no
/// subcommand is the namespace applier (docs/hook.md); it reads the OCI state on stdin and its
/// configuration from `--config` or `/etc/devinject/config.toml`, and works at `prestart` and
/// `createRuntime` alike. No `timeout`: the applier runs the profiles' prepare steps, each under
/// its own `timeout_ms`.
pub fn hook_json(hook: &HookCommand) -> String {
    let doc = json!({
        "version": "1.0.0",
        "hook": {
            "path": hook.path(),
            "args": hook.argv(),
        },
        "when": { "always": true },
        "stages": [HOOK_STAGE],
    });
    crate::engines::docker::render_json(&doc, None)
}

/// Whether `text` is a hooks.d file running `hook_path` (recognises ours without a state file).
pub fn is_our_hook(text: &str, hook_path: &Path) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| {
        v.pointer("/hook/path").and_then(|p| p.as_str()) == Some(&hook_path.display().to_string())
    })
}

/// The `*.conf` drop-ins of `dir` (host path), sorted by name as CRI-O and containers/common
/// apply them, without `skip`.
pub fn dropins(paths: &HostPaths, dir: &Path, skip: &Path) -> Result<Vec<PathBuf>> {
    let access = paths.access(dir);
    let entries = match std::fs::read_dir(&access) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RuntimeConfigError::io("list", access, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| RuntimeConfigError::io("list", &access, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let host = dir.join(&name);
        if name.ends_with(".conf") && host != skip {
            out.push(host);
        }
    }
    out.sort();
    Ok(out)
}

/// The value of the string-array key `keys` after applying `files` (host paths) in order, each
/// overriding the previous: how CRI-O and containers.conf drop-ins combine. `None` when no file
/// sets it. Missing files are skipped; broken ones are errors (the engine would fail on them
/// too).
pub fn last_string_array(
    paths: &HostPaths,
    files: &[PathBuf],
    keys: &[&str],
) -> Result<Option<Vec<String>>> {
    let mut value = None;
    for file in files {
        let access = paths.access(file);
        let Some(text) = load::read_optional(&access)? else {
            continue;
        };
        let doc = load::parse_toml(&access, &text)?;
        if let Some(item) = toml_tree::get(doc.as_table(), keys) {
            let list =
                toml_tree::string_array(item).ok_or_else(|| RuntimeConfigError::Unsupported {
                    path: access.clone(),
                    line: load::toml_line(&text, keys),
                    problem: format!("`{}` is not an array of strings", keys.join(".")),
                    fix: "write it as [\"/dir\", ...]".to_string(),
                })?;
            value = Some(list);
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_file_is_oci_hooks_1_0_0() {
        let text = hook_json(&hook_command(Path::new("/opt/bin/devinject-hook"), None));
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["version"], "1.0.0");
        assert_eq!(v["hook"]["args"], json!(["devinject-hook"]));
        assert_eq!(v["when"]["always"], true);
        assert_eq!(v["stages"], json!(["createRuntime"]));
        assert!(is_our_hook(&text, Path::new("/opt/bin/devinject-hook")));
        assert!(!is_our_hook(&text, Path::new("/usr/bin/other")));
        assert!(text.ends_with("}\n"));
        let with_config = hook_json(&hook_command(
            Path::new("/opt/bin/devinject-hook"),
            Some(Path::new("/srv/devinject.toml")),
        ));
        let v: serde_json::Value = serde_json::from_str(&with_config).expect("json");
        assert_eq!(
            v["hook"]["args"],
            json!(["devinject-hook", "--config", "/srv/devinject.toml"])
        );
    }

    #[test]
    fn later_files_override_hooks_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = HostPaths::under_root(dir.path());
        std::fs::create_dir_all(dir.path().join("etc/crio/crio.conf.d")).expect("mkdir");
        std::fs::write(
            dir.path().join("etc/crio/crio.conf"),
            "[crio.runtime]\nhooks_dir = [\"/a\"]\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("etc/crio/crio.conf.d/10-x.conf"),
            "[crio.runtime]\nhooks_dir = [\"/b\"]\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("etc/crio/crio.conf.d/README"), "not toml").expect("write");
        let mut files = vec![PathBuf::from("/etc/crio/crio.conf")];
        files.extend(
            dropins(
                &paths,
                Path::new("/etc/crio/crio.conf.d"),
                Path::new("/none"),
            )
            .expect("list"),
        );
        let v = last_string_array(&paths, &files, &["crio", "runtime", "hooks_dir"]).expect("read");
        assert_eq!(v, Some(vec!["/b".to_string()]));
    }
}
