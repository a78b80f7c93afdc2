//! podman (root): a hooks.d file (hook mode, the default) or a containers.conf drop-in naming
//! the shim as an OCI runtime (shim mode).
//!
//! Hook mode: `/etc/containers/oci/hooks.d/devinject.json` (see [`super::hooksd`]). Root podman
//! with no `hooks_dir` in containers.conf reads both `/usr/share/containers/oci/hooks.d` and
//! `/etc/containers/oci/hooks.d`; when `hooks_dir` is set without our directory (or our
//! directory is neither default), a drop-in `/etc/containers/containers.conf.d/99-devinject.conf`
//! sets `[engine] hooks_dir` to the effective list plus ours.
//!
//! Shim mode, in the same drop-in:
//!
//! ```toml
//! [engine]
//! runtime = "devinject"          # only with --set-as-default
//!
//! [engine.runtimes]
//! devinject = ["/usr/local/bin/devinject-runtime"]
//! ```
//!
//! podman reads its configuration on every command: nothing to restart (except a running
//! `podman system service`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml_edit::{value, DocumentMut, Item};

use crate::engines::detection::{self, CgroupDriver, Integration};
use crate::engines::{
    dropin_header, hooksd, BaseReader, Candidate, EngineEditor, Plan, PlannedFile, MARKER,
};
use crate::error::Result;
use crate::report::Activation;
use crate::request::{ConfigureRequest, Engine, HostPaths, Mode, UnconfigureRequest};
use crate::state::{FileKind, Prior};
use crate::toml_tree;

/// File name of our drop-in.
pub const DROPIN: &str = "99-devinject.conf";
/// The vendor containers.conf, read before the one in /etc.
pub const VENDOR_CONFIG: &str = "/usr/share/containers/containers.conf";

/// The podman editor.
pub struct Podman {
    paths: HostPaths,
    config: PathBuf,
    dropin_dir: PathBuf,
    dropin: PathBuf,
    hook_file: PathBuf,
}

impl Podman {
    /// For the host at `paths`; drop-ins live in `<config>.d`.
    pub fn new(paths: &HostPaths) -> Self {
        let config = paths.config_for(Engine::Podman);
        let mut dir = config.clone().into_os_string();
        dir.push(".d");
        let dropin_dir = PathBuf::from(dir);
        Podman {
            paths: paths.clone(),
            dropin: dropin_dir.join(DROPIN),
            dropin_dir,
            config,
            hook_file: paths.hooks_dir().join(hooksd::HOOK_FILE),
        }
    }
}

impl EngineEditor for Podman {
    fn config(&self) -> &Path {
        &self.config
    }

    fn plan(&self, req: &ConfigureRequest, _base: &mut BaseReader<'_>) -> Result<Plan> {
        let mut doc = DocumentMut::new();
        let mut files = Vec::new();
        let dropin_access = self.paths.access(&self.dropin);
        match req.mode() {
            Mode::Shim => {
                let engine =
                    toml_tree::table_mut(doc.as_table_mut(), &["engine"], &dropin_access, "")?;
                if req.set_as_default {
                    engine.set_implicit(false);
                    engine.insert("runtime", value(req.runtime_name.as_str()));
                }
                let runtimes = toml_tree::table_mut(engine, &["runtimes"], &dropin_access, "")?;
                runtimes.set_implicit(false);
                runtimes.insert(
                    &req.runtime_name,
                    value(toml_tree::array_of(&[req.shim_path.display().to_string()])),
                );
            }
            Mode::Hook => {
                files.push(PlannedFile {
                    path: self.hook_file.clone(),
                    kind: FileKind::Owned,
                    content: hooksd::hook_json(&req.hook_path, req.hook_config.as_deref()),
                    marker: None,
                });
                let mut sources = vec![PathBuf::from(VENDOR_CONFIG), self.config.clone()];
                sources.extend(hooksd::dropins(
                    &self.paths,
                    &self.dropin_dir,
                    &self.dropin,
                )?);
                let ours = self.paths.hooks_dir().display().to_string();
                let set =
                    hooksd::last_string_array(&self.paths, &sources, &["engine", "hooks_dir"])?;
                let needed = match set {
                    Some(dirs) if dirs.contains(&ours) => None,
                    Some(mut dirs) => {
                        dirs.push(ours);
                        Some(dirs)
                    }
                    None if ours == hooksd::USR_HOOKS_DIR || ours == hooksd::ETC_HOOKS_DIR => None,
                    None => Some(vec![
                        hooksd::USR_HOOKS_DIR.to_string(),
                        hooksd::ETC_HOOKS_DIR.to_string(),
                        ours,
                    ]),
                };
                if let Some(dirs) = needed {
                    let engine =
                        toml_tree::table_mut(doc.as_table_mut(), &["engine"], &dropin_access, "")?;
                    engine.set_implicit(false);
                    engine.insert("hooks_dir", value(toml_tree::array_of(&dirs)));
                }
            }
        }
        if !doc.as_table().is_empty() {
            let header = dropin_header(
                Engine::Podman,
                &["podman applies it after containers.conf and the other drop-ins (name order)."],
            );
            files.push(PlannedFile {
                path: self.dropin.clone(),
                kind: FileKind::Owned,
                content: format!("{header}\n{doc}"),
                marker: Some(MARKER),
            });
        }
        Ok(Plan {
            files,
            prior: Prior::default(),
            notes: Vec::new(),
        })
    }

    fn revert_edited(&self, _: &Path, text: &str, _: &str, _: &Prior) -> Result<String> {
        // podman's own files are never edited.
        Ok(text.to_string())
    }

    fn candidates(&self, req: &UnconfigureRequest) -> Vec<Candidate> {
        let hook = req.hook_path.clone();
        vec![
            Candidate::Owned {
                path: self.dropin.clone(),
                ours: Box::new(|t| t.starts_with(MARKER)),
            },
            Candidate::Owned {
                path: self.hook_file.clone(),
                ours: Box::new(move |t| hooksd::is_our_hook(t, &hook)),
            },
        ]
    }

    fn activation(&self, _changed: &[&Path]) -> Activation {
        Activation::NextContainer
    }

    fn cgroup_driver(&self) -> Result<Option<CgroupDriver>> {
        let mut files = vec![PathBuf::from(VENDOR_CONFIG), self.config.clone()];
        files.extend(hooksd::dropins(
            &self.paths,
            &self.dropin_dir,
            Path::new(""),
        )?);
        let mut driver = None;
        for (_, doc) in detection::read_tomls(&self.paths, &files)? {
            if let Some(d) = toml_tree::get(doc.as_table(), &["engine", "cgroup_manager"])
                .and_then(Item::as_str)
                .and_then(CgroupDriver::parse)
            {
                driver = Some(d);
            }
        }
        Ok(driver)
    }

    fn detect(&self) -> Result<Vec<Integration>> {
        let mut files = vec![PathBuf::from(VENDOR_CONFIG), self.config.clone()];
        files.extend(hooksd::dropins(
            &self.paths,
            &self.dropin_dir,
            Path::new(""),
        )?);
        let mut default = None;
        // Root podman without `hooks_dir` reads both directories.
        let mut hooks_dirs = vec![
            hooksd::USR_HOOKS_DIR.to_string(),
            hooksd::ETC_HOOKS_DIR.to_string(),
        ];
        let mut runtimes: BTreeMap<String, (Vec<String>, PathBuf)> = BTreeMap::new();
        for (file, doc) in detection::read_tomls(&self.paths, &files)? {
            let engine = doc.get("engine").and_then(Item::as_table_like);
            if let Some(d) = engine.and_then(|e| e.get("runtime")).and_then(Item::as_str) {
                default = Some(d.to_string());
            }
            if let Some(dirs) = engine
                .and_then(|e| e.get("hooks_dir"))
                .and_then(toml_tree::string_array)
            {
                hooks_dirs = dirs;
            }
            let Some(table) = engine
                .and_then(|e| e.get("runtimes"))
                .and_then(Item::as_table_like)
            else {
                continue;
            };
            for (name, paths) in table.iter() {
                if let Some(list) = toml_tree::string_array(paths) {
                    runtimes.insert(name.to_string(), (list, file.clone()));
                }
            }
        }
        let mut out = Vec::new();
        for (name, (list, file)) in runtimes {
            // podman runs the first path of the list that exists.
            let Some(path) = list.iter().find(|p| detection::is_devinject_binary(p)) else {
                continue;
            };
            out.push(Integration {
                mode: Mode::Shim,
                default: default.as_deref() == Some(name.as_str()),
                name,
                file,
                binary: PathBuf::from(path),
                config: None,
                problems: Vec::new(),
            });
        }
        out.extend(detection::hooksd_integrations(&self.paths, &hooks_dirs)?);
        Ok(out)
    }
}
