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

use std::path::Path;

use toml_edit::value;

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
/// The vendor containers.conf, read before the one in /etc.
pub const VENDOR_CONFIG: &str = "/usr/share/containers/containers.conf";

/// podman's drop-in layout. Root podman with no `hooks_dir` reads both directories.
static SPEC: DropinSpec = DropinSpec {
    engine: Engine::Podman,
    vendor_config: Some(VENDOR_CONFIG),
    section: &["engine"],
    default_hooks_dirs: &[hooksd::USR_HOOKS_DIR, hooksd::ETC_HOOKS_DIR],
    applied: "podman applies it after containers.conf and the other drop-ins (name order).",
    default_key: "runtime",
    // podman runs the first path of the list that exists.
    entry_binaries: toml_tree::string_array,
};

/// The podman editor.
pub struct Podman {
    dropin: DropinEngine,
}

impl Podman {
    /// For the host at `paths`; drop-ins live in `<config>.d`.
    pub fn new(paths: &HostPaths) -> Self {
        Podman {
            dropin: DropinEngine::new(&SPEC, paths),
        }
    }
}

impl EngineEditor for Podman {
    fn config(&self) -> &Path {
        &self.dropin.config
    }

    fn files(&self, req: &ConfigureRequest, _base: &mut BaseReader<'_>) -> Result<EngineFiles> {
        self.dropin.files(req, |engine, dropin_access| {
            if req.set_as_default {
                engine.set_implicit(false);
                engine.insert("runtime", value(req.runtime_name.as_str()));
            }
            let runtimes = toml_tree::table_mut(engine, &["runtimes"], dropin_access, "")?;
            runtimes.set_implicit(false);
            runtimes.insert(
                &req.runtime_name,
                value(toml_tree::array_of(&[req.shim_path.display().to_string()])),
            );
            Ok(())
        })
    }

    fn revert_edited(&self, _: &Path, text: &str, _: &str, _: &Prior) -> Result<String> {
        // podman's own files are never edited.
        Ok(text.to_string())
    }

    fn candidates(&self, req: &UnconfigureRequest) -> Vec<Candidate> {
        self.dropin.candidates(req)
    }

    fn activation(&self, _changed: &[&Path]) -> Activation {
        Activation::NextContainer
    }

    fn cgroup_driver(&self) -> Result<Option<CgroupDriver>> {
        self.dropin.cgroup_manager()
    }

    fn detect(&self) -> Result<Vec<Integration>> {
        self.dropin.detect()
    }
}
