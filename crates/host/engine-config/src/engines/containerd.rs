//! containerd: a drop-in `<config dir>/conf.d/99-devinject.toml`, listed in the main file's
//! `imports`, that adds a `devinject` runtime to the CRI plugin.
//!
//! Versions: config `version = 2` (containerd 1.6/1.7, CRI plugin
//! `plugins."io.containerd.grpc.v1.cri"`) and `version = 3` (containerd 2.x,
//! `plugins."io.containerd.cri.v1.runtime"`). A file without `version` is the deprecated version
//! 1 format and is refused with instructions; an empty or missing file is treated as version 2,
//! which every containerd since 1.5 reads.
//!
//! Merging: containerd 1.x applies an imported file's plugin section by *replacing* the whole
//! section of that plugin (containerd#5837; 2.0 merges key by key since containerd#9982). A
//! version 2 drop-in that only named our runtime would therefore wipe `sandbox_image`, the CNI
//! settings and the runc runtime. So a version 2 drop-in carries a copy of the CRI section as
//! containerd sees it (main file plus its other imports, in containerd's order), with our
//! runtime added; a version 3 drop-in carries only our keys.
//!
//! The runtime entry copies the entry of the default runtime (or `runc`) when that is an
//! `io.containerd.runc.v2` runtime — so `SystemdCgroup`, `Root`, `base_runtime_spec` and the
//! rest stay as they are — and then sets:
//! - `runtime_type = "io.containerd.runc.v2"`;
//! - `container_annotations` plus `devinject.io/*`, so the device plugin's annotations reach the
//!   spec (containerd drops annotations not listed there);
//! - shim mode: `options.BinaryName` = the shim, which edits the spec and then runs runc;
//! - hook mode: `base_runtime_spec` = a spec file holding our `createRuntime` hook. It is made
//!   from the runtime's own base spec, or else from `ctr oci spec` (containerd's built-in
//!   default, the same `oci.GenerateSpec` the CRI plugin uses when no base spec is set; the CRI
//!   plugin rewrites `cgroupsPath` per container), so nothing but the hook changes.
//!
//! `--set-as-default` sets `default_runtime_name` in the drop-in; removing the drop-in brings the
//! old default back. containerd has no configuration reload: it must be restarted (running
//! containers keep running under their shims).

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value as Json};
use toml_edit::{value, DocumentMut, Item, Table};

use crate::engines::detection::{self, CgroupDriver, Integration};
use crate::engines::{
    docker::render_json, dropin_header, hooksd, BaseReader, Candidate, EngineEditor, EngineFile,
    EngineFiles, MARKER,
};
use crate::error::{Result, RuntimeConfigError};
use crate::load;
use crate::report::Activation;
use crate::request::{
    ConfigureRequest, Engine, HostPaths, Mode, UnconfigureRequest, ANNOTATION_PATTERN,
};
use crate::state::{Ownership, Prior};
use crate::toml_tree;

/// File name of our drop-in, in `conf.d` next to the main file.
pub const DROPIN: &str = "99-devinject.toml";
/// File name of the hook-mode base spec, next to the main file.
pub const BASE_SPEC: &str = "devinject-base-spec.json";
/// The runc shim v2 runtime type.
pub const RUNC_V2: &str = "io.containerd.runc.v2";

/// The config format versions devinject-ctl edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// containerd 1.6/1.7.
    V2,
    /// containerd 2.x.
    V3,
}

impl Version {
    /// The `version` value.
    pub fn number(self) -> i64 {
        match self {
            Version::V2 => 2,
            Version::V3 => 3,
        }
    }

    /// The plugin holding `containerd.runtimes`.
    pub fn runtime_plugin(self) -> &'static str {
        match self {
            Version::V2 => "io.containerd.grpc.v1.cri",
            Version::V3 => "io.containerd.cri.v1.runtime",
        }
    }
}

/// The containerd editor.
pub struct Containerd {
    paths: HostPaths,
    config: PathBuf,
    access: PathBuf,
    dropin: PathBuf,
    spec: PathBuf,
}

impl Containerd {
    /// For the host at `paths`.
    pub fn new(paths: &HostPaths) -> Self {
        let config = paths.config_for(Engine::Containerd);
        let dir = config
            .parent()
            .unwrap_or_else(|| Path::new("/"))
            .to_path_buf();
        Containerd {
            paths: paths.clone(),
            access: paths.access(&config),
            dropin: dir.join("conf.d").join(DROPIN),
            spec: dir.join(BASE_SPEC),
            config,
        }
    }

    fn unsupported(
        &self,
        path: &Path,
        line: Option<usize>,
        problem: String,
        fix: &str,
    ) -> RuntimeConfigError {
        RuntimeConfigError::Unsupported {
            path: path.to_path_buf(),
            line,
            problem,
            fix: fix.to_string(),
        }
    }

    /// The config version of the main file.
    fn version(&self, text: &str, doc: &DocumentMut) -> Result<Version> {
        match doc.get("version") {
            None if doc.as_table().is_empty() => Ok(Version::V2),
            None => Err(self.unsupported(
                &self.access,
                None,
                "there is no `version` key, so containerd reads this as the deprecated version 1 format".to_string(),
                "migrate it first: on containerd 2.x run `containerd config migrate`; on 1.x add \
                 `version = 2` and rename [plugins.cri] to [plugins.\"io.containerd.grpc.v1.cri\"] \
                 (and other short plugin names to their full ids)",
            )),
            Some(item) => match item.as_integer() {
                Some(2) => Ok(Version::V2),
                Some(3) => Ok(Version::V3),
                _ => Err(self.unsupported(
                    &self.access,
                    load::toml_line(text, &["version"]),
                    format!("config version {} is not supported", item.to_string().trim()),
                    "devinject-ctl edits version 2 (containerd 1.6/1.7) and version 3 (containerd 2.x) files",
                )),
            },
        }
    }

    /// The files named by `imports` of `doc` (from host file `file`), as containerd resolves
    /// them: relative to the file's directory, wildcards expanded in name order.
    fn imports_of(&self, file: &Path, text: &str, doc: &DocumentMut) -> Result<Vec<PathBuf>> {
        let Some(item) = doc.get("imports") else {
            return Ok(Vec::new());
        };
        let access = self.paths.access(file);
        let list = toml_tree::string_array(item).ok_or_else(|| {
            self.unsupported(
                &access,
                load::toml_line(text, &["imports"]),
                "`imports` is not an array of strings".to_string(),
                "write it as imports = [\"/etc/containerd/conf.d/*.toml\"]",
            )
        })?;
        let dir = file.parent().unwrap_or_else(|| Path::new("/"));
        let mut out = Vec::new();
        for entry in list {
            let path = dir.join(&entry);
            if !entry.contains(['*', '?', '[']) {
                out.push(path);
                continue;
            }
            let (Some(parent), Some(pattern)) = (path.parent(), path.file_name()) else {
                continue;
            };
            if parent.to_string_lossy().contains(['*', '?', '[']) {
                return Err(self.unsupported(
                    &access,
                    load::toml_line(text, &["imports"]),
                    format!("the imports pattern {entry:?} has wildcards in a directory name"),
                    "devinject-ctl only resolves wildcards in the file name; list the directories",
                ));
            }
            let matcher = globset::Glob::new(&pattern.to_string_lossy())
                .map_err(|e| {
                    self.unsupported(
                        &access,
                        load::toml_line(text, &["imports"]),
                        format!("the imports pattern {entry:?} is invalid: {e}"),
                        "fix the pattern",
                    )
                })?
                .compile_matcher();
            let mut names = Vec::new();
            // The drop-in counts as matched even before it exists: once written, the pattern
            // imports it, and an explicit entry would import it twice.
            if self.dropin.parent() == Some(parent)
                && self
                    .dropin
                    .file_name()
                    .is_some_and(|n| matcher.is_match(Path::new(n)))
            {
                names.push(self.dropin.clone());
            }
            let parent_access = self.paths.access(parent);
            let entries: Vec<_> = match std::fs::read_dir(&parent_access) {
                Ok(e) => e.collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(RuntimeConfigError::io("list", parent_access, e)),
            };
            for e in entries {
                let e = e.map_err(|err| RuntimeConfigError::io("list", &parent_access, err))?;
                let name = e.file_name();
                if matcher.is_match(Path::new(&name)) {
                    names.push(parent.join(name));
                }
            }
            names.sort();
            names.dedup();
            out.extend(names);
        }
        Ok(out)
    }

    /// The runtime plugin's section as containerd builds it from the main file and its imports
    /// (our drop-in only when `with_ours`), and whether the imports include our drop-in.
    fn effective_plugin(
        &self,
        doc: &DocumentMut,
        text: &str,
        version: Version,
        with_ours: bool,
    ) -> Result<(Option<Table>, bool)> {
        let plugin = version.runtime_plugin();
        let section = |d: &DocumentMut, path: &Path, t: &str| -> Result<Option<Table>> {
            match toml_tree::get(d.as_table(), &["plugins", plugin]) {
                None => Ok(None),
                Some(item) => item.clone().into_table().map(Some).map_err(|_| {
                    self.unsupported(
                        path,
                        load::toml_line(t, &["plugins", plugin]),
                        format!("`plugins.\"{plugin}\"` is not a table"),
                        "make it a table",
                    )
                }),
            }
        };
        let mut effective = section(doc, &self.access, text)?;
        let mut pending: VecDeque<PathBuf> = self.imports_of(&self.config, text, doc)?.into();
        let mut loaded = BTreeSet::from([self.config.clone()]);
        let mut has_dropin = false;
        while let Some(file) = pending.pop_front() {
            if file == self.dropin {
                has_dropin = true;
                if !with_ours {
                    continue;
                }
            }
            if !loaded.insert(file.clone()) {
                continue;
            }
            let access = self.paths.access(&file);
            let Some(t) = load::read_optional(&access)? else {
                return Err(self.unsupported(
                    &self.access,
                    None,
                    format!("it imports {} which does not exist", file.display()),
                    "containerd will not start like this: create the file or remove it from `imports`",
                ));
            };
            let d = load::parse_toml(&access, &t)?;
            if let Some(s) = section(&d, &access, &t)? {
                match (version, effective.as_mut()) {
                    (Version::V3, Some(e)) => toml_tree::deep_merge(e, &s),
                    _ => effective = Some(s),
                }
            }
            pending.extend(self.imports_of(&file, &t, &d)?);
        }
        Ok((effective, has_dropin))
    }

    /// The runtime entry to copy: the default runtime's, else runc's, if it is a runc v2 runtime.
    fn source_entry(effective: Option<&Table>, runtime_name: &str) -> (Option<String>, Table) {
        let containerd = effective
            .and_then(|t| t.get("containerd"))
            .and_then(Item::as_table_like);
        let default = containerd
            .and_then(|c| c.get("default_runtime_name"))
            .and_then(Item::as_str)
            .unwrap_or("runc");
        let runtimes = containerd
            .and_then(|c| c.get("runtimes"))
            .and_then(Item::as_table_like);
        for name in [default, "runc"] {
            if name == runtime_name {
                continue;
            }
            let Some(entry) = runtimes.and_then(|r| r.get(name)) else {
                continue;
            };
            let is_runc = entry
                .as_table_like()
                .and_then(|t| t.get("runtime_type"))
                .and_then(Item::as_str)
                == Some(RUNC_V2);
            if let (true, Ok(table)) = (is_runc, entry.clone().into_table()) {
                return (Some(name.to_string()), table);
            }
        }
        (None, Table::new())
    }

    /// The hook-mode base spec: `source` (an OCI spec in JSON) plus our createRuntime hook.
    fn spec_with_hook(
        &self,
        source: &str,
        source_path: &str,
        hook_path: &Path,
        hook_config: Option<&Path>,
    ) -> Result<String> {
        let mut spec: Json =
            serde_json::from_str(source).map_err(|e| RuntimeConfigError::Syntax {
                path: PathBuf::from(source_path),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })?;
        let not_object = |what: &str| {
            self.unsupported(
                Path::new(source_path),
                None,
                format!("{what} of the base spec is not a JSON object"),
                "give a valid OCI runtime spec",
            )
        };
        let obj = spec
            .as_object_mut()
            .ok_or_else(|| not_object("the top level"))?;
        let hooks = obj
            .entry("hooks")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| not_object("`hooks`"))?;
        let stage = hooks
            .entry(hooksd::HOOK_STAGE)
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .ok_or_else(|| not_object("`hooks.createRuntime`"))?;
        let ours = hook_path.display().to_string();
        stage.retain(|h| h.get("path").and_then(Json::as_str) != Some(ours.as_str()));
        let hook = hooksd::hook_command(hook_path, hook_config);
        stage.push(json!({ "path": ours, "args": hook.argv() }));
        Ok(render_json(&spec, Some(source)))
    }

    /// The text of the spec to start the hook-mode base spec from, and where it came from.
    fn source_spec(&self, req: &ConfigureRequest, entry: &Table) -> Result<(String, String)> {
        let from_file = |host: &Path| -> Result<(String, String)> {
            let access = self.paths.access(host);
            let text = load::read_optional(&access)?.ok_or_else(|| {
                RuntimeConfigError::io(
                    "read base spec",
                    &access,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                )
            })?;
            Ok((text, access.display().to_string()))
        };
        if let Some(p) = &req.base_spec {
            return from_file(p);
        }
        if let Some(p) = entry
            .get("base_runtime_spec")
            .and_then(Item::as_str)
            .filter(|p| !p.is_empty())
        {
            return from_file(Path::new(p));
        }
        // The CRI plugin's namespace, so the output is what CRI itself would start from.
        let args = ["--namespace", "k8s.io", "oci", "spec"];
        let shown = format!("{} {}", req.ctr_path.display(), args.join(" "));
        let out = Command::new(&req.ctr_path)
            .args(args)
            .output()
            .map_err(|e| RuntimeConfigError::Command {
                command: shown.clone(),
                message: format!("{e}; install ctr or pass a base spec"),
            })?;
        if !out.status.success() {
            return Err(RuntimeConfigError::Command {
                command: shown,
                message: format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        let text = String::from_utf8(out.stdout).map_err(|_| RuntimeConfigError::Command {
            command: shown.clone(),
            message: "output is not UTF-8".to_string(),
        })?;
        Ok((text, format!("output of `{shown}`")))
    }
}

impl EngineEditor for Containerd {
    fn config(&self) -> &Path {
        &self.config
    }

    fn files(&self, req: &ConfigureRequest, base: &mut BaseReader<'_>) -> Result<EngineFiles> {
        let main_text = base(&self.config)?.unwrap_or_default();
        let mut main = load::parse_toml(&self.access, &main_text)?;
        let version = self.version(&main_text, &main)?;
        let (effective, imported) = self.effective_plugin(&main, &main_text, version, false)?;
        let (source_name, source) = Self::source_entry(effective.as_ref(), &req.runtime_name);
        let mut notes = Vec::new();
        match &source_name {
            Some(n) => notes.push(format!(
                "the {} runtime copies the settings of runtime {n:?}",
                req.runtime_name
            )),
            None => notes.push(format!(
                "no runc runtime entry found; the {} runtime uses containerd's runc defaults",
                req.runtime_name
            )),
        }

        // Our runtime entry.
        let dropin_access = self.paths.access(&self.dropin);
        let mut entry_item = Item::Table(source.clone());
        toml_tree::normalize(&mut entry_item);
        let mut entry = entry_item.into_table().unwrap_or_default();
        entry.set_implicit(false);
        entry.insert("runtime_type", value(RUNC_V2));
        let mut annotations = entry
            .get("container_annotations")
            .and_then(toml_tree::string_array)
            .unwrap_or_default();
        if !annotations.iter().any(|a| a == ANNOTATION_PATTERN) {
            annotations.push(ANNOTATION_PATTERN.to_string());
        }
        entry.insert(
            "container_annotations",
            value(toml_tree::array_of(&annotations)),
        );
        let mut files = Vec::new();
        match req.mode() {
            Mode::Shim => {
                let options = toml_tree::table_mut(&mut entry, &["options"], &dropin_access, "")?;
                options.set_implicit(false);
                options.insert("BinaryName", value(req.shim_path.display().to_string()));
            }
            Mode::Hook => {
                let (text, from) = self.source_spec(req, &source)?;
                files.push(EngineFile {
                    path: self.spec.clone(),
                    kind: Ownership::Owned,
                    content: self.spec_with_hook(
                        &text,
                        &from,
                        &req.hook_path,
                        req.hook_config.as_deref(),
                    )?,
                    marker: None,
                });
                entry.insert("base_runtime_spec", value(self.spec.display().to_string()));
            }
        }

        // The drop-in.
        let mut plugin = match version {
            Version::V2 => {
                let mut item = Item::Table(effective.clone().unwrap_or_default());
                toml_tree::normalize(&mut item);
                item.into_table().unwrap_or_default()
            }
            Version::V3 => Table::new(),
        };
        plugin.set_implicit(true);
        let ctd = toml_tree::table_mut(&mut plugin, &["containerd"], &dropin_access, "")?;
        if req.set_as_default {
            ctd.set_implicit(false);
            ctd.insert("default_runtime_name", value(req.runtime_name.as_str()));
        }
        let had_runtimes = effective
            .as_ref()
            .and_then(|e| toml_tree::get(e, &["containerd", "runtimes"]))
            .is_some();
        let runtimes = toml_tree::table_mut(ctd, &["runtimes"], &dropin_access, "")?;
        if !had_runtimes {
            // containerd's built-in runtimes map holds runc; a runtimes table in a file replaces
            // that map, so say runc explicitly or it disappears.
            let mut runc = Table::new();
            runc.insert("runtime_type", value(RUNC_V2));
            runtimes.insert("runc", Item::Table(runc));
        }
        runtimes.insert(&req.runtime_name, Item::Table(entry));
        let mut dropin = DocumentMut::new();
        dropin.insert("version", value(version.number()));
        let plugins =
            toml_tree::table_mut(dropin.as_table_mut(), &["plugins"], &dropin_access, "")?;
        plugins.insert(version.runtime_plugin(), Item::Table(plugin));
        let copy_note = format!(
            "so this file repeats the CRI plugin settings of {} and its",
            self.config.display()
        );
        let extra: Vec<&str> = match version {
            Version::V2 => vec![
                "containerd 1.x lets an imported file replace a whole plugin section (containerd#5837),",
                &copy_note,
                "imports: change them there, then run configure again to refresh this copy.",
            ],
            Version::V3 => vec![
                "containerd 2.x merges imported plugin sections key by key (containerd#9982),",
                "so this file holds only the devinject runtime.",
            ],
        };
        let header = dropin_header(Engine::Containerd, &extra);
        files.push(EngineFile {
            path: self.dropin.clone(),
            kind: Ownership::Owned,
            content: format!("{header}\n{dropin}"),
            marker: Some(MARKER),
        });

        // The main file: import the drop-in.
        let mut prior = Prior::default();
        let main_content = if imported {
            main_text
        } else {
            let ours = self.dropin.display().to_string();
            prior.added_import = Some(ours.clone());
            if main.as_table().is_empty() {
                main.insert("version", value(version.number()));
            }
            match main.get_mut("imports") {
                Some(item) => {
                    let array = item.as_array_mut().ok_or_else(|| {
                        self.unsupported(
                            &self.access,
                            None,
                            "`imports` is not an array".to_string(),
                            "write it as imports = [\"/path.toml\"]",
                        )
                    })?;
                    toml_tree::push_like_last(array, &ours);
                }
                None => {
                    prior.created_imports_key = true;
                    main.insert("imports", value(toml_tree::array_of(&[ours])));
                }
            }
            main.to_string()
        };
        files.push(EngineFile {
            path: self.config.clone(),
            kind: Ownership::Edited,
            content: main_content,
            marker: None,
        });
        Ok(EngineFiles {
            files,
            prior,
            notes,
        })
    }

    fn revert_edited(
        &self,
        path: &Path,
        text: &str,
        _runtime_name: &str,
        prior: &Prior,
    ) -> Result<String> {
        if path != self.config {
            return Ok(text.to_string());
        }
        let mut doc = load::parse_toml(&self.access, text)?;
        let ours = self.dropin.display().to_string();
        let Some(array) = doc.get_mut("imports").and_then(Item::as_array_mut) else {
            return Ok(text.to_string());
        };
        if !toml_tree::remove_keeping_comments(array, &ours) {
            return Ok(text.to_string());
        }
        if array.is_empty() && prior.created_imports_key {
            doc.remove("imports");
        }
        Ok(doc.to_string())
    }

    fn candidates(&self, _req: &UnconfigureRequest) -> Vec<Candidate> {
        let (paths, dropin) = (self.paths.clone(), self.dropin.clone());
        let spec = self.spec.display().to_string();
        vec![
            Candidate::Edited {
                path: self.config.clone(),
            },
            Candidate::Owned {
                path: self.dropin.clone(),
                ours: Box::new(|t| t.starts_with(MARKER)),
            },
            Candidate::Owned {
                path: self.spec.clone(),
                // The base spec is ours when our drop-in (still there, or just read) names it.
                ours: Box::new(move |_| {
                    paths
                        .read(&dropin, devinject_hostfs::host_dir::Name::Ours)
                        .is_ok_and(|d| d.is_some_and(|d| d.contains(&spec)))
                }),
            },
        ]
    }

    fn activation(&self, _changed: &[&Path]) -> Activation {
        Activation::Restart {
            service: "containerd",
        }
    }

    fn cgroup_driver(&self) -> Result<Option<CgroupDriver>> {
        let text = load::read_optional(&self.access)?.unwrap_or_default();
        let doc = load::parse_toml(&self.access, &text)?;
        let version = self.version(&text, &doc)?;
        let (effective, _) = self.effective_plugin(&doc, &text, version, true)?;
        let (_, entry) = Self::source_entry(effective.as_ref(), "");
        let systemd = entry
            .get("options")
            .and_then(Item::as_table_like)
            .and_then(|o| o.get("SystemdCgroup"))
            .and_then(Item::as_bool)
            .unwrap_or(false);
        Ok(Some(if systemd {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }))
    }

    fn detect(&self) -> Result<Vec<Integration>> {
        let Some(text) = load::read_optional(&self.access)? else {
            return Ok(Vec::new());
        };
        let doc = load::parse_toml(&self.access, &text)?;
        let version = self.version(&text, &doc)?;
        let (Some(plugin), imported) = self.effective_plugin(&doc, &text, version, true)? else {
            return Ok(Vec::new());
        };
        let file = if imported {
            self.dropin.clone()
        } else {
            self.config.clone()
        };
        let ctd = plugin.get("containerd").and_then(Item::as_table_like);
        let default = ctd
            .and_then(|c| c.get("default_runtime_name"))
            .and_then(Item::as_str)
            .unwrap_or("runc");
        let Some(runtimes) = ctd
            .and_then(|c| c.get("runtimes"))
            .and_then(Item::as_table_like)
        else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (name, entry) in runtimes.iter() {
            let Some(entry) = entry.as_table_like() else {
                continue;
            };
            let mut problems = Vec::new();
            let annotations = entry
                .get("container_annotations")
                .and_then(toml_tree::string_array)
                .unwrap_or_default();
            if !annotations
                .iter()
                .any(|a| a == ANNOTATION_PATTERN || a == "*" || a == "devinject.io/*")
            {
                problems.push(format!(
                    "container_annotations lacks {ANNOTATION_PATTERN:?}, so containerd drops the \
                     device plugin's annotations before they reach devinject"
                ));
            }
            let runtime_type = entry
                .get("runtime_type")
                .and_then(Item::as_str)
                .unwrap_or_default();
            let binary = entry
                .get("options")
                .and_then(Item::as_table_like)
                .and_then(|o| o.get("BinaryName"))
                .and_then(Item::as_str)
                .filter(|b| detection::is_devinject_binary(b));
            if let Some(binary) = binary {
                let mut problems = problems.clone();
                if runtime_type != RUNC_V2 {
                    problems.push(format!(
                        "runtime_type is {runtime_type:?}; BinaryName only applies to {RUNC_V2:?}"
                    ));
                }
                out.push(Integration {
                    mode: Mode::Shim,
                    name: name.to_string(),
                    file: file.clone(),
                    binary: PathBuf::from(binary),
                    config: None,
                    default: name == default,
                    problems,
                });
            }
            let Some(spec_path) = entry
                .get("base_runtime_spec")
                .and_then(Item::as_str)
                .filter(|p| !p.is_empty())
            else {
                continue;
            };
            let spec_access = self.paths.access(Path::new(spec_path));
            let Some(spec_text) = load::read_optional(&spec_access)? else {
                continue;
            };
            let spec: Json =
                serde_json::from_str(&spec_text).map_err(|e| RuntimeConfigError::Syntax {
                    path: spec_access.clone(),
                    line: e.line(),
                    column: e.column(),
                    message: e.to_string(),
                })?;
            for (stage, path, args) in detection::spec_hooks(&spec) {
                let mut problems = problems.clone();
                if !detection::INJECTING_STAGES.contains(&stage.as_str()) {
                    problems.push(format!(
                        "the hook runs at {stage}, where it cannot inject; use createRuntime"
                    ));
                }
                out.push(Integration {
                    mode: Mode::Hook,
                    name: name.to_string(),
                    file: PathBuf::from(spec_path),
                    binary: PathBuf::from(path),
                    config: detection::config_arg(&args),
                    default: name == default,
                    problems,
                });
            }
        }
        Ok(out)
    }
}
