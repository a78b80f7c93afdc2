//! The layout CRI-O and podman share: the engine's TOML configuration, its `<config>.d` drop-in
//! directory holding our `99-devinject.conf`, and our hooks.d file (see [`super::hooksd`]).
//!
//! Both engines apply the main file and then every `*.conf` drop-in in name order, later keys
//! overriding earlier ones, so our drop-in carries only our keys and its removal restores what
//! the other files say. Neither engine's own files are ever edited.
//!
//! In hook mode the drop-in sets `hooks_dir` only when the effective list (the last file that
//! sets it, else the engine's built-in default) lacks our directory; a drop-in replaces the whole
//! list, so it repeats the others.
//!
//! Read back for `doctor` the same way: every file in order, the last value of a key winning,
//! runtime entries adding to one map.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml_edit::{value, DocumentMut, Item, Table};

use crate::engines::detection::{self, CgroupDriver, Integration};
use crate::engines::{dropin_header, hooksd, Candidate, EngineFile, EngineFiles, MARKER};
use crate::error::Result;
use crate::request::{ConfigureRequest, Engine, HostPaths, Mode, UnconfigureRequest};
use crate::state::{Ownership, Prior};
use crate::toml_tree;

/// File name of our drop-in.
pub const DROPIN: &str = "99-devinject.conf";

/// What tells a drop-in engine apart.
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct DropinSpec {
    pub engine: Engine,
    /// A vendor file the engine reads before its main configuration (host path), when any.
    pub vendor_config: Option<&'static str>,
    /// The table holding the runtime settings and `hooks_dir` (`crio.runtime`, `engine`).
    pub section: &'static [&'static str],
    /// The hooks directories the engine reads when no file sets `hooks_dir`.
    pub default_hooks_dirs: &'static [&'static str],
    /// The drop-in header's line on when the engine applies it.
    pub applied: &'static str,
    /// The key in `section` naming the default runtime.
    pub default_key: &'static str,
    /// The binaries an entry of `section.runtimes` may run, in the order the engine tries them;
    /// `None` when the entry is not a runtime entry.
    pub entry_binaries: fn(&Item) -> Option<Vec<String>>,
}

/// The files of one drop-in engine on one host.
pub struct DropinEngine {
    /// What tells the engine apart.
    pub spec: &'static DropinSpec,
    /// The host.
    pub paths: HostPaths,
    /// The engine's main configuration file (host path).
    pub config: PathBuf,
    /// `<config>.d` (host path).
    pub dropin_dir: PathBuf,
    /// Our drop-in (host path).
    pub dropin: PathBuf,
    /// Our hooks.d file (host path).
    pub hook_file: PathBuf,
}

impl DropinEngine {
    /// For the host at `paths`; drop-ins live in `<config>.d`.
    pub fn new(spec: &'static DropinSpec, paths: &HostPaths) -> Self {
        let config = paths.config_for(spec.engine);
        let mut dir = config.clone().into_os_string();
        dir.push(".d");
        let dropin_dir = PathBuf::from(dir);
        DropinEngine {
            spec,
            paths: paths.clone(),
            dropin: dropin_dir.join(DROPIN),
            dropin_dir,
            config,
            hook_file: paths.hooks_dir().join(hooksd::HOOK_FILE),
        }
    }

    /// Every file the engine reads (host paths), in the order it applies them.
    pub fn files_read(&self) -> Result<Vec<PathBuf>> {
        self.files_except(Path::new(""))
    }

    /// The files the engine reads, in order, without `skip`.
    fn files_except(&self, skip: &Path) -> Result<Vec<PathBuf>> {
        let mut files: Vec<PathBuf> = self
            .spec
            .vendor_config
            .map(PathBuf::from)
            .into_iter()
            .collect();
        files.push(self.config.clone());
        files.extend(hooksd::dropins(&self.paths, &self.dropin_dir, skip)?);
        Ok(files)
    }

    /// The hooks directories the engine reads when no file sets `hooks_dir`.
    pub fn default_hooks_dirs(&self) -> Vec<String> {
        self.spec
            .default_hooks_dirs
            .iter()
            .map(|d| d.to_string())
            .collect()
    }

    /// The `hooks_dir` our drop-in must set: `None` when the other files already make the engine
    /// read our directory.
    fn hooks_dir_needed(&self) -> Result<Option<Vec<String>>> {
        let sources = self.files_except(&self.dropin)?;
        let mut keys = self.spec.section.to_vec();
        keys.push("hooks_dir");
        let mut dirs = hooksd::last_string_array(&self.paths, &sources, &keys)?
            .unwrap_or_else(|| self.default_hooks_dirs());
        let ours = self.paths.hooks_dir().display().to_string();
        if dirs.contains(&ours) {
            return Ok(None);
        }
        dirs.push(ours);
        Ok(Some(dirs))
    }

    /// The spec's section of the drop-in `doc` (whose file is at `dropin_access`), created
    /// when missing.
    fn section<'d>(&self, doc: &'d mut DocumentMut, dropin_access: &Path) -> Result<&'d mut Table> {
        toml_tree::table_mut(doc.as_table_mut(), self.spec.section, dropin_access, "")
    }

    /// The files configure writes. In shim mode `shim` fills in the spec's section of the drop-in (its
    /// second argument is the drop-in's path, for errors); in hook mode they are the
    /// hooks.d file and, when needed, `hooks_dir`. The drop-in is written only when it has keys.
    pub fn files(
        &self,
        req: &ConfigureRequest,
        shim: impl FnOnce(&mut Table, &Path) -> Result<()>,
    ) -> Result<EngineFiles> {
        let mut doc = DocumentMut::new();
        let mut files = Vec::new();
        let dropin_access = self.paths.access(&self.dropin);
        match req.mode() {
            Mode::Shim => shim(self.section(&mut doc, &dropin_access)?, &dropin_access)?,
            Mode::Hook => {
                files.push(EngineFile {
                    path: self.hook_file.clone(),
                    kind: Ownership::Owned,
                    content: hooksd::hook_json(&hooksd::hook_command(
                        &req.hook_path,
                        req.hook_config.as_deref(),
                    )),
                    marker: None,
                });
                if let Some(dirs) = self.hooks_dir_needed()? {
                    let section = self.section(&mut doc, &dropin_access)?;
                    section.set_implicit(false);
                    section.insert("hooks_dir", value(toml_tree::array_of(&dirs)));
                }
            }
        }
        if !doc.as_table().is_empty() {
            let header = dropin_header(self.spec.engine, &[self.spec.applied]);
            files.push(EngineFile {
                path: self.dropin.clone(),
                kind: Ownership::Owned,
                content: format!("{header}\n{doc}"),
                marker: Some(MARKER),
            });
        }
        Ok(EngineFiles {
            files,
            prior: Prior::default(),
            notes: Vec::new(),
        })
    }

    /// The files to look at when no state file exists: our drop-in and our hooks.d file.
    pub fn candidates(&self, req: &UnconfigureRequest) -> Vec<Candidate> {
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

    /// The cgroup driver the last file that sets a valid `cgroup_manager` in the section selects;
    /// `None` when none does.
    pub fn cgroup_manager(&self) -> Result<Option<CgroupDriver>> {
        let mut keys = self.spec.section.to_vec();
        keys.push("cgroup_manager");
        let mut driver = None;
        for (_, doc) in detection::read_tomls(&self.paths, &self.files_read()?)? {
            if let Some(d) = toml_tree::get(doc.as_table(), &keys)
                .and_then(Item::as_str)
                .and_then(CgroupDriver::parse)
            {
                driver = Some(d);
            }
        }
        Ok(driver)
    }

    /// Where the engine's files, applied in order, run devinject's shim (a runtime entry) or
    /// hook (a hooks.d file in a directory the engine reads).
    pub fn detect(&self) -> Result<Vec<Integration>> {
        let mut default = None;
        let mut hooks_dirs = self.default_hooks_dirs();
        // Entries add to the map and later files override them.
        let mut runtimes: BTreeMap<String, (Vec<String>, PathBuf)> = BTreeMap::new();
        for (file, doc) in detection::read_tomls(&self.paths, &self.files_read()?)? {
            let section = toml_tree::get(doc.as_table(), self.spec.section);
            let section = section.and_then(Item::as_table_like);
            if let Some(d) = section
                .and_then(|s| s.get(self.spec.default_key))
                .and_then(Item::as_str)
            {
                default = Some(d.to_string());
            }
            if let Some(dirs) = section
                .and_then(|s| s.get("hooks_dir"))
                .and_then(toml_tree::string_array)
            {
                hooks_dirs = dirs;
            }
            let Some(entries) = section
                .and_then(|s| s.get("runtimes"))
                .and_then(Item::as_table_like)
            else {
                continue;
            };
            for (name, entry) in entries.iter() {
                if let Some(binaries) = (self.spec.entry_binaries)(entry) {
                    runtimes.insert(name.to_string(), (binaries, file.clone()));
                }
            }
        }
        let mut out = Vec::new();
        for (name, (binaries, file)) in runtimes {
            let Some(binary) = binaries.iter().find(|p| detection::is_devinject_binary(p)) else {
                continue;
            };
            out.push(Integration {
                mode: Mode::Shim,
                default: default.as_deref() == Some(name.as_str()),
                name,
                file,
                binary: PathBuf::from(binary),
                config: None,
                problems: Vec::new(),
            });
        }
        out.extend(detection::hooksd_integrations(&self.paths, &hooks_dirs)?);
        Ok(out)
    }
}
