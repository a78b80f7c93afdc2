//! CRI-O: a drop-in `/etc/crio/crio.conf.d/99-devinject.conf`, and in hook mode a hooks.d file.
//!
//! Shim mode:
//!
//! ```toml
//! [crio.runtime]
//! default_runtime = "devinject"        # only with --set-as-default
//!
//! [crio.runtime.runtimes.devinject]
//! runtime_path = "/usr/local/bin/devinject-runtime"
//! runtime_type = "oci"
//! ```
//!
//! CRI-O applies `crio.conf` and then every drop-in in name order, later keys overriding earlier
//! ones and runtime handlers adding to the map, so the drop-in carries only our keys and its
//! removal restores the earlier `default_runtime`. CRI-O passes all pod annotations into the
//! spec, so nothing like containerd's `container_annotations` is needed.
//!
//! Hook mode: `/etc/containers/oci/hooks.d/devinject.json` (see [`super::hooksd`]). CRI-O reads
//! only `/usr/share/containers/oci/hooks.d` unless `hooks_dir` says otherwise; when the
//! effective `hooks_dir` lacks our directory the drop-in sets it to the effective list plus ours
//! (a drop-in replaces the whole list, so it must repeat the others).

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

/// The CRI-O editor.
pub struct Crio {
    paths: HostPaths,
    config: PathBuf,
    dropin_dir: PathBuf,
    dropin: PathBuf,
    hook_file: PathBuf,
}

impl Crio {
    /// For the host at `paths`; drop-ins live in `<config>.d`.
    pub fn new(paths: &HostPaths) -> Self {
        let config = paths.config_for(Engine::Crio);
        let mut dir = config.clone().into_os_string();
        dir.push(".d");
        let dropin_dir = PathBuf::from(dir);
        Crio {
            paths: paths.clone(),
            dropin: dropin_dir.join(DROPIN),
            dropin_dir,
            config,
            hook_file: paths.hooks_dir().join(hooksd::HOOK_FILE),
        }
    }

    /// The `hooks_dir` CRI-O uses, from crio.conf and the other drop-ins.
    fn effective_hooks_dirs(&self) -> Result<Vec<String>> {
        let mut files = vec![self.config.clone()];
        files.extend(hooksd::dropins(
            &self.paths,
            &self.dropin_dir,
            &self.dropin,
        )?);
        Ok(
            hooksd::last_string_array(&self.paths, &files, &["crio", "runtime", "hooks_dir"])?
                .unwrap_or_else(|| vec![hooksd::USR_HOOKS_DIR.to_string()]),
        )
    }
}

impl EngineEditor for Crio {
    fn config(&self) -> &Path {
        &self.config
    }

    fn plan(&self, req: &ConfigureRequest, _base: &mut BaseReader<'_>) -> Result<Plan> {
        let mut doc = DocumentMut::new();
        let mut files = Vec::new();
        let dropin_access = self.paths.access(&self.dropin);
        match req.mode() {
            Mode::Shim => {
                let runtime = toml_tree::table_mut(
                    doc.as_table_mut(),
                    &["crio", "runtime"],
                    &dropin_access,
                    "",
                )?;
                if req.set_as_default {
                    runtime.set_implicit(false);
                    runtime.insert("default_runtime", value(req.runtime_name.as_str()));
                }
                let entry = toml_tree::table_mut(
                    runtime,
                    &["runtimes", &req.runtime_name],
                    &dropin_access,
                    "",
                )?;
                entry.set_implicit(false);
                entry.insert("runtime_path", value(req.shim_path.display().to_string()));
                entry.insert("runtime_type", value("oci"));
            }
            Mode::Hook => {
                files.push(PlannedFile {
                    path: self.hook_file.clone(),
                    kind: FileKind::Owned,
                    content: hooksd::hook_json(&req.hook_path, req.hook_config.as_deref()),
                    marker: None,
                });
                let mut dirs = self.effective_hooks_dirs()?;
                let ours = self.paths.hooks_dir().display().to_string();
                if !dirs.contains(&ours) {
                    dirs.push(ours);
                    let runtime = toml_tree::table_mut(
                        doc.as_table_mut(),
                        &["crio", "runtime"],
                        &dropin_access,
                        "",
                    )?;
                    runtime.set_implicit(false);
                    runtime.insert("hooks_dir", value(toml_tree::array_of(&dirs)));
                }
            }
        }
        if !doc.as_table().is_empty() {
            let header = dropin_header(
                Engine::Crio,
                &["CRI-O applies it after crio.conf and the other drop-ins (name order)."],
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
        // CRI-O's own files are never edited.
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

    fn activation(&self, changed: &[&Path]) -> Activation {
        if changed.iter().any(|p| p.starts_with(&self.dropin_dir)) {
            Activation::Restart { service: "crio" }
        } else {
            Activation::NextContainer
        }
    }

    fn cgroup_driver(&self) -> Result<Option<CgroupDriver>> {
        let mut files = vec![self.config.clone()];
        files.extend(hooksd::dropins(
            &self.paths,
            &self.dropin_dir,
            Path::new(""),
        )?);
        // CRI-O's default is systemd.
        let mut driver = CgroupDriver::Systemd;
        for (_, doc) in detection::read_tomls(&self.paths, &files)? {
            if let Some(d) = toml_tree::get(doc.as_table(), &["crio", "runtime", "cgroup_manager"])
                .and_then(Item::as_str)
                .and_then(CgroupDriver::parse)
            {
                driver = d;
            }
        }
        Ok(Some(driver))
    }

    fn detect(&self) -> Result<Vec<Integration>> {
        let mut files = vec![self.config.clone()];
        files.extend(hooksd::dropins(
            &self.paths,
            &self.dropin_dir,
            Path::new(""),
        )?);
        let mut default = None;
        let mut hooks_dirs = vec![hooksd::USR_HOOKS_DIR.to_string()];
        // Handlers add to the map and later files override their keys.
        let mut runtimes: BTreeMap<String, (String, PathBuf)> = BTreeMap::new();
        for (file, doc) in detection::read_tomls(&self.paths, &files)? {
            let runtime = toml_tree::get(doc.as_table(), &["crio", "runtime"]);
            let runtime = runtime.and_then(Item::as_table_like);
            if let Some(d) = runtime
                .and_then(|r| r.get("default_runtime"))
                .and_then(Item::as_str)
            {
                default = Some(d.to_string());
            }
            if let Some(dirs) = runtime
                .and_then(|r| r.get("hooks_dir"))
                .and_then(toml_tree::string_array)
            {
                hooks_dirs = dirs;
            }
            let Some(handlers) = runtime
                .and_then(|r| r.get("runtimes"))
                .and_then(Item::as_table_like)
            else {
                continue;
            };
            for (name, entry) in handlers.iter() {
                if let Some(path) = entry
                    .as_table_like()
                    .and_then(|t| t.get("runtime_path"))
                    .and_then(Item::as_str)
                {
                    runtimes.insert(name.to_string(), (path.to_string(), file.clone()));
                }
            }
        }
        let mut out: Vec<Integration> = runtimes
            .into_iter()
            .filter(|(_, (path, _))| detection::is_devinject_binary(path))
            .map(|(name, (path, file))| Integration {
                mode: Mode::Shim,
                default: default.as_deref() == Some(name.as_str()),
                name,
                file,
                binary: PathBuf::from(path),
                config: None,
                problems: Vec::new(),
            })
            .collect();
        out.extend(detection::hooksd_integrations(&self.paths, &hooks_dirs)?);
        Ok(out)
    }
}
