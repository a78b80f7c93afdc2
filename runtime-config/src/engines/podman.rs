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

use std::path::{Path, PathBuf};

use toml_edit::{value, DocumentMut};

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
}
