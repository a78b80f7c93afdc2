//! The rules CDI's parser enforces, checked before a spec is written.

use crate::spec::CdiSpec;
use crate::version::{min_version, CdiVersion};

/// Checks the rules CDI's parser enforces on what we write: a `cdiVersion` that holds what the
/// spec uses, the kind, device names, absolute paths, known hook stages, at least one device.
pub fn validate(spec: &CdiSpec) -> std::result::Result<(), String> {
    let (vendor, class) = spec
        .kind
        .split_once('/')
        .ok_or_else(|| format!("kind {:?} is not vendor/class", spec.kind))?;
    let label = |s: &str, extra: &[char]| {
        !s.is_empty()
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    };
    if !label(vendor, &['-', '.']) || !vendor.contains('.') {
        return Err(format!("vendor {vendor:?} is not a domain name"));
    }
    if !label(class, &['-', '_', '.']) {
        return Err(format!("class {class:?} is invalid"));
    }
    if spec.devices.is_empty() {
        return Err("a spec needs at least one device".to_string());
    }
    // CDI refuses a spec whose fields are newer than its `cdiVersion` says ("the spec version
    // must be at least"): the engine would then resolve none of its devices.
    let declared: CdiVersion = spec.cdi_version.parse().map_err(|e| format!("{e}"))?;
    let needed = min_version(spec);
    if declared < needed {
        return Err(format!(
            "it declares cdiVersion {declared} but uses what CDI {needed} brings: declare at \
             least {needed}"
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    for d in &spec.devices {
        if !label(&d.name, &['-', '_', '.', ':']) {
            return Err(format!("device name {:?} is invalid", d.name));
        }
        if !names.insert(&d.name) {
            return Err(format!("device name {:?} is used twice", d.name));
        }
    }
    for e in spec.edits() {
        for n in &e.device_nodes {
            if !n.path.starts_with('/') || n.host_path.as_ref().is_some_and(|h| !h.starts_with('/'))
            {
                return Err(format!("device node {:?} has a relative path", n.path));
            }
            if !matches!(n.kind.as_str(), "c" | "b") {
                return Err(format!("device node {:?} has type {:?}", n.path, n.kind));
            }
        }
        for m in &e.mounts {
            if !m.host_path.starts_with('/') || !m.container_path.starts_with('/') {
                return Err(format!("mount {:?} has a relative path", m.container_path));
            }
        }
        for h in &e.hooks {
            let stages = [
                "prestart",
                "createRuntime",
                "createContainer",
                "startContainer",
                "poststart",
                "poststop",
            ];
            if !stages.contains(&h.hook_name.as_str()) || !h.path.starts_with('/') {
                return Err(format!("hook {:?} at {:?} is invalid", h.path, h.hook_name));
            }
        }
        for v in &e.env {
            if !v.contains('=') {
                return Err(format!("env entry {v:?} has no '='"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::sample::{mounted, spec};

    #[test]
    fn validation_rejects_what_cdi_rejects() {
        assert!(validate(&spec("devinject.io/kvm", &["kvm"], None)).is_ok());
        assert!(validate(&spec("devinject.io/gpu", &["0000:01:00.0"], None)).is_ok());
        assert!(validate(&spec("devinject/kvm", &["kvm"], None)).is_err());
        assert!(validate(&spec("devinject.io/kvm", &["-x"], None)).is_err());
        assert!(validate(&spec("devinject.io/kvm", &["a", "a"], None)).is_err());
        assert!(validate(&spec("devinject.io/kvm", &[], None)).is_err());
        assert!(validate(&spec("devinject.io/kvm", &["k"], Some("rel"))).is_err());
    }

    #[test]
    fn a_version_lower_than_the_spec_needs_is_refused_naming_both() {
        let mut mounted = mounted();
        let err = validate(&mounted).expect_err("declared 0.3.0, uses a mount's type");
        assert!(err.contains("0.3.0") && err.contains("0.4.0"), "{err}");
        mounted.cdi_version = "0.4.0".into();
        assert_eq!(validate(&mounted), Ok(()));
        mounted.cdi_version = "latest".into();
        assert!(validate(&mounted)
            .expect_err("no version")
            .contains("latest"));
    }
}
