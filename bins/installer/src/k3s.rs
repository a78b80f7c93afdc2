//! k3s and RKE2: keeping containerd's import of devinject's drop-in across restarts.
//!
//! k3s and RKE2 write their containerd `config.toml` from a Go template at every start, so an
//! `imports` line that devinject-ctl adds to it is gone after the next restart. Since September
//! 2023 (k3s v1.24.17+k3s1, v1.25.13, v1.26.8, v1.27.5, v1.28.1 and later; RKE2 alike) a
//! `config.toml.tmpl` next to it (`config-v3.toml.tmpl` for containerd 2's version 3 config) may
//! extend k3s's own template, called `base`. The installer writes one that is the base plus an
//! `imports` of the `conf.d/*.toml` drop-ins, where devinject-ctl keeps devinject's runtime:
//!
//! ```text
//! {{- /* Managed by devinject-installer ... */ -}}
//! imports = ["/var/lib/rancher/k3s/agent/etc/containerd/conf.d/*.toml"]
//! {{ template "base" . }}
//! ```
//!
//! `imports` comes first because a TOML key after a table header belongs to that table. A
//! wildcard rather than the drop-in's own name, because devinject-ctl leaves a wildcard that
//! already covers its drop-in alone; so once k3s has regenerated `config.toml`, a re-install
//! finds nothing to change and does not restart k3s again.
//!
//! A template that is not ours is left alone: when it already imports the drop-in directory it
//! is used as it is, otherwise the install stops and says which line to add.

use std::path::{Path, PathBuf};

use crate::detect::{Flavour, Target};
use crate::error::{InstallError, Result};
use crate::host::HostRoot;

/// Marks a template as ours.
pub const MARKER: &str = "Managed by devinject-installer";

/// The template the flavour reads (host path), or `None` for engines that are not k3s/RKE2.
/// `config_text` is the current generated config: a `version = 3` there means containerd 2.
pub fn template_path(target: &Target, config_text: Option<&str>) -> Option<PathBuf> {
    if !matches!(target.flavour, Flavour::K3s | Flavour::Rke2) {
        return None;
    }
    let dir = target.config.parent()?;
    let v3 = config_text
        .and_then(|t| t.parse::<toml_edit::DocumentMut>().ok())
        .and_then(|d| d.get("version").and_then(|v| v.as_integer()))
        == Some(3);
    Some(dir.join(if v3 {
        "config-v3.toml.tmpl"
    } else {
        "config.toml.tmpl"
    }))
}

/// The drop-in directory pattern the template imports.
pub fn imports_pattern(target: &Target) -> String {
    let dir = target
        .config
        .parent()
        .unwrap_or_else(|| Path::new("/"))
        .join("conf.d");
    format!("{}/*.toml", dir.display())
}

/// Our template for `target`.
pub fn render(target: &Target) -> String {
    let program = match target.flavour {
        Flavour::Rke2 => "RKE2",
        _ => "k3s",
    };
    format!(
        "{{{{- /* {MARKER}. {program} writes config.toml from this template at every\n   \
         start: its own template (\"base\") plus an import of the drop-ins in conf.d, where\n   \
         devinject-ctl keeps the devinject runtime. `devinject-installer --uninstall` removes\n   \
         this file. */ -}}}}\n\
         imports = [\"{}\"]\n\
         {{{{ template \"base\" . }}}}\n",
        imports_pattern(target)
    )
}

/// What the template slot holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    /// No template.
    Absent,
    /// Our template, with this text.
    Ours(String),
    /// Someone else's template that already imports the drop-in directory: used as it is.
    TheirsImporting,
}

/// Looks at the template slot `path` (host path).
pub fn inspect(host: &HostRoot, target: &Target, path: &Path) -> Result<Existing> {
    let access = host.access(path);
    let text = match std::fs::read_to_string(&access) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(e) => return Err(InstallError::io("read", access, e)),
    };
    if text.contains(MARKER) {
        return Ok(Existing::Ours(text));
    }
    let dir = imports_pattern(target);
    let dir = dir.trim_end_matches("/*.toml");
    if text.contains(dir) {
        return Ok(Existing::TheirsImporting);
    }
    Err(InstallError::Template {
        path: path.to_path_buf(),
        problem: "this containerd template is not devinject's and does not import \
                  devinject's drop-in directory"
            .to_string(),
        fix: format!(
            "add the line imports = [\"{}\"] at its top (before any [table]) and run again",
            imports_pattern(target)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use devinject_engine_config::Engine;

    fn k3s() -> Target {
        Target::new(Engine::Containerd, Flavour::K3s, None)
    }

    #[test]
    fn template_name_follows_the_config_version() {
        let t = k3s();
        assert_eq!(
            template_path(&t, Some("version = 2\n")),
            Some(PathBuf::from(
                "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl"
            ))
        );
        assert_eq!(
            template_path(&t, Some("version = 3\n")),
            Some(PathBuf::from(
                "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl"
            ))
        );
        let plain = Target::new(Engine::Containerd, Flavour::Plain, None);
        assert_eq!(template_path(&plain, Some("version = 2\n")), None);
    }

    #[test]
    fn rendered_template_imports_first_then_base() {
        let text = render(&k3s());
        let imports = text.find("imports = [").expect("imports");
        let base = text.find("{{ template \"base\" . }}").expect("base");
        assert!(imports < base, "{text}");
        assert!(
            text.starts_with("{{- /* Managed by devinject-installer"),
            "{text}"
        );
        assert!(text.contains("*/ -}}\n"), "{text}");
        assert!(
            text.contains("/var/lib/rancher/k3s/agent/etc/containerd/conf.d/*.toml"),
            "{text}"
        );
    }

    #[test]
    fn foreign_templates_are_used_or_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = HostRoot::new(dir.path());
        let t = k3s();
        let path = template_path(&t, None).expect("path");
        assert_eq!(
            inspect(&host, &t, &path).expect("inspect"),
            Existing::Absent
        );
        let access = host.access(&path);
        std::fs::create_dir_all(access.parent().expect("parent")).expect("mkdir");
        std::fs::write(&access, "{{ template \"base\" . }}\n[plugins.x]\n").expect("write");
        let err = inspect(&host, &t, &path).expect_err("refused");
        assert!(err.to_string().contains("imports = ["), "{err}");
        std::fs::write(
            &access,
            "imports = [\"/var/lib/rancher/k3s/agent/etc/containerd/conf.d/99-devinject.toml\"]\n{{ template \"base\" . }}\n",
        )
        .expect("write");
        assert_eq!(
            inspect(&host, &t, &path).expect("inspect"),
            Existing::TheirsImporting
        );
        std::fs::write(&access, render(&t)).expect("write");
        assert!(matches!(
            inspect(&host, &t, &path).expect("inspect"),
            Existing::Ours(_)
        ));
    }
}
