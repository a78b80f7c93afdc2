//! docker: `runtimes.<name>` in `/etc/docker/daemon.json`, optionally `default-runtime`.
//!
//! ```json
//! {
//!     "runtimes": {
//!         "devinject": { "path": "/usr/local/bin/devinject-runtime" }
//!     },
//!     "default-runtime": "devinject"
//! }
//! ```
//!
//! daemon.json is edited as a `serde_json::Value` with key order preserved; it is re-indented
//! with the indentation it already used. dockerd re-reads `runtimes` and `default-runtime` on
//! SIGHUP. There is no hook mode: dockerd has no hooks.d.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::engines::detection::{self, CgroupDriver, Integration};
use crate::engines::{BaseReader, Candidate, EngineEditor, EngineFile, EngineFiles};
use crate::error::{Result, RuntimeConfigError};
use crate::load;
use crate::report::Activation;
use crate::request::{ConfigureRequest, Engine, HostPaths, UnconfigureRequest};
use crate::state::{Ownership, Prior};

/// The docker editor.
pub struct Docker {
    config: PathBuf,
    access: PathBuf,
}

impl Docker {
    /// For the host at `paths`.
    pub fn new(paths: &HostPaths) -> Self {
        let config = paths.config_for(Engine::Docker);
        let access = paths.access(&config);
        Docker { config, access }
    }
}

fn unsupported(
    path: &Path,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> RuntimeConfigError {
    RuntimeConfigError::Unsupported {
        path: path.to_path_buf(),
        line: None,
        problem: problem.into(),
        fix: fix.into(),
    }
}

fn top_object<'a>(path: &Path, doc: &'a mut Value) -> Result<&'a mut Map<String, Value>> {
    doc.as_object_mut().ok_or_else(|| {
        unsupported(
            path,
            "the top level is not a JSON object",
            "make it { ... }",
        )
    })
}

/// Renders `doc` indented like `like` (the text it was parsed from), ending with a newline
/// when `like` did (or when there was no text).
pub fn render_json(doc: &Value, like: Option<&str>) -> String {
    let indent = like
        .and_then(detect_indent)
        .unwrap_or_else(|| "    ".to_string());
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    serde::Serialize::serialize(doc, &mut ser).expect("serialising a JSON value cannot fail");
    let mut s = String::from_utf8(out).expect("serde_json writes UTF-8");
    if like.is_none_or(|t| t.ends_with('\n') || t.trim().is_empty()) {
        s.push('\n');
    }
    s
}

/// The indentation of the first indented line of a JSON text.
fn detect_indent(text: &str) -> Option<String> {
    text.lines().skip(1).find_map(|line| {
        let ws: String = line
            .chars()
            .take_while(|c| *c == ' ' || *c == '\t')
            .collect();
        (!ws.is_empty() && ws.len() < line.len()).then_some(ws)
    })
}

impl EngineEditor for Docker {
    fn config(&self) -> &Path {
        &self.config
    }

    fn files(&self, req: &ConfigureRequest, base: &mut BaseReader<'_>) -> Result<EngineFiles> {
        let text = base(&self.config)?;
        let mut doc = load::parse_json(&self.access, text.as_deref().unwrap_or(""))?;
        let before = doc.clone();
        let obj = top_object(&self.access, &mut doc)?;
        let mut prior = Prior::default();
        if !obj.contains_key("runtimes") {
            prior.created_runtimes_key = true;
        }
        let runtimes = obj
            .entry("runtimes")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or_else(|| {
                unsupported(
                    &self.access,
                    "`runtimes` is not an object",
                    "make it { \"name\": {\"path\": ...} }",
                )
            })?;
        let mut entry = Map::new();
        entry.insert(
            "path".to_string(),
            Value::String(req.shim_path.display().to_string()),
        );
        runtimes.insert(req.runtime_name.clone(), Value::Object(entry));
        if req.set_as_default {
            prior.replaced_default = true;
            prior.default_runtime = match obj.get("default-runtime") {
                None => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    return Err(unsupported(
                        &self.access,
                        "`default-runtime` is not a string",
                        "make it a runtime name such as \"runc\"",
                    ))
                }
            };
            obj.insert(
                "default-runtime".to_string(),
                Value::String(req.runtime_name.clone()),
            );
        }
        let content = match &text {
            Some(t) if doc == before => t.clone(),
            _ => render_json(&doc, text.as_deref()),
        };
        Ok(EngineFiles {
            files: vec![EngineFile {
                path: self.config.clone(),
                kind: Ownership::Edited,
                content,
                marker: None,
            }],
            prior,
            notes: Vec::new(),
        })
    }

    fn revert_edited(
        &self,
        _path: &Path,
        text: &str,
        runtime_name: &str,
        prior: &Prior,
    ) -> Result<String> {
        let mut doc = load::parse_json(&self.access, text)?;
        let before = doc.clone();
        let obj = top_object(&self.access, &mut doc)?;
        if let Some(Value::Object(runtimes)) = obj.get_mut("runtimes") {
            runtimes.shift_remove(runtime_name);
            if runtimes.is_empty() && prior.created_runtimes_key {
                obj.shift_remove("runtimes");
            }
        }
        if obj.get("default-runtime").and_then(Value::as_str) == Some(runtime_name) {
            match &prior.default_runtime {
                Some(d) => {
                    obj.insert("default-runtime".to_string(), Value::String(d.clone()));
                }
                None => {
                    obj.shift_remove("default-runtime");
                }
            }
        }
        Ok(if doc == before {
            text.to_string()
        } else {
            render_json(&doc, Some(text))
        })
    }

    fn candidates(&self, _req: &UnconfigureRequest) -> Vec<Candidate> {
        vec![Candidate::Edited {
            path: self.config.clone(),
        }]
    }

    fn activation(&self, _changed: &[&Path]) -> Activation {
        Activation::Reload { service: "docker" }
    }

    fn cgroup_driver(&self) -> Result<Option<CgroupDriver>> {
        let Some(text) = load::read_optional(&self.access)? else {
            return Ok(None);
        };
        let doc = load::parse_json(&self.access, &text)?;
        Ok(doc
            .get("exec-opts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(|o| o.strip_prefix("native.cgroupdriver="))
            .filter_map(CgroupDriver::parse)
            .next_back())
    }

    fn detect(&self) -> Result<Vec<Integration>> {
        let Some(text) = load::read_optional(&self.access)? else {
            return Ok(Vec::new());
        };
        let doc = load::parse_json(&self.access, &text)?;
        let default = doc
            .get("default-runtime")
            .and_then(Value::as_str)
            .unwrap_or("runc");
        let Some(runtimes) = doc.get("runtimes").and_then(Value::as_object) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (name, entry) in runtimes {
            let Some(path) = entry.get("path").and_then(Value::as_str) else {
                continue;
            };
            if !detection::is_devinject_binary(path) {
                continue;
            }
            let args: Vec<String> = entry
                .get("runtimeArgs")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            out.push(Integration {
                mode: crate::request::Mode::Shim,
                name: name.clone(),
                file: self.config.clone(),
                binary: PathBuf::from(path),
                config: detection::config_arg(&args),
                default: name == default,
                problems: Vec::new(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_two_space_and_tab_indent() {
        assert_eq!(detect_indent("{\n  \"a\": 1\n}\n").as_deref(), Some("  "));
        assert_eq!(detect_indent("{\n\t\"a\": 1\n}").as_deref(), Some("\t"));
        assert_eq!(detect_indent("{}"), None);
    }

    #[test]
    fn render_keeps_order_indent_and_missing_newline() {
        let text = "{\n  \"b\": 1,\n  \"a\": 2\n}";
        let v = load::parse_json(Path::new("/x"), text).expect("json");
        assert_eq!(render_json(&v, Some(text)), text);
    }
}
