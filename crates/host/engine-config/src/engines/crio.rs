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

use std::path::Path;

use toml_edit::{value, Item};

use crate::engines::detection::{CgroupDriver, Integration};
use crate::engines::dropin::{DropinEngine, DropinSpec};
use crate::engines::{hooksd, BaseReader, Candidate, EngineEditor, EngineFiles};
use crate::error::Result;
use crate::report::Activation;
use crate::request::{ConfigureRequest, Engine, HostPaths, UnconfigureRequest};
use crate::state::Prior;
use crate::toml_tree;

/// File name of our drop-in.
pub use crate::engines::dropin::DROPIN;

/// CRI-O's drop-in layout.
static SPEC: DropinSpec = DropinSpec {
    engine: Engine::Crio,
    vendor_config: None,
    section: &["crio", "runtime"],
    default_hooks_dirs: &[hooksd::USR_HOOKS_DIR],
    applied: "CRI-O applies it after crio.conf and the other drop-ins (name order).",
    default_key: "default_runtime",
    entry_binaries: runtime_path,
};

/// A runtime handler's `runtime_path`.
fn runtime_path(entry: &Item) -> Option<Vec<String>> {
    let path = entry.as_table_like()?.get("runtime_path")?.as_str()?;
    Some(vec![path.to_string()])
}

/// The CRI-O editor.
pub struct Crio {
    dropin: DropinEngine,
}

impl Crio {
    /// For the host at `paths`; drop-ins live in `<config>.d`.
    pub fn new(paths: &HostPaths) -> Self {
        Crio {
            dropin: DropinEngine::new(&SPEC, paths),
        }
    }
}

impl EngineEditor for Crio {
    fn config(&self) -> &Path {
        &self.dropin.config
    }

    fn files(&self, req: &ConfigureRequest, _base: &mut BaseReader<'_>) -> Result<EngineFiles> {
        self.dropin.files(req, |runtime, dropin_access| {
            if req.set_as_default {
                runtime.set_implicit(false);
                runtime.insert("default_runtime", value(req.runtime_name.as_str()));
            }
            let entry =
                toml_tree::table_mut(runtime, &["runtimes", &req.runtime_name], dropin_access, "")?;
            entry.set_implicit(false);
            entry.insert("runtime_path", value(req.shim_path.display().to_string()));
            entry.insert("runtime_type", value("oci"));
            Ok(())
        })
    }

    fn revert_edited(&self, _: &Path, text: &str, _: &str, _: &Prior) -> Result<String> {
        // CRI-O's own files are never edited.
        Ok(text.to_string())
    }

    fn candidates(&self, req: &UnconfigureRequest) -> Vec<Candidate> {
        self.dropin.candidates(req)
    }

    fn activation(&self, changed: &[&Path]) -> Activation {
        if changed
            .iter()
            .any(|p| p.starts_with(&self.dropin.dropin_dir))
        {
            Activation::Restart { service: "crio" }
        } else {
            Activation::NextContainer
        }
    }

    fn cgroup_driver(&self) -> Result<Option<CgroupDriver>> {
        // CRI-O's default is systemd.
        Ok(Some(
            self.dropin
                .cgroup_manager()?
                .unwrap_or(CgroupDriver::Systemd),
        ))
    }

    fn detect(&self) -> Result<Vec<Integration>> {
        self.dropin.detect()
    }
}
