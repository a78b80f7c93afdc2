//! The hook's and shim's host configuration, `<config dir>/config.toml`
//! (format: `crates/core/hostconfig/src/lib.rs`, docs/hook.md).
//!
//! The installer owns this file: it writes it whole on every install (so a re-install with the
//! same settings changes nothing), and `--uninstall` puts back whatever was there before. The
//! text is checked with the hook's own strict parser before it is written, so a setting the
//! hook in this image does not know fails the install instead of every container start.

use std::path::Path;

use toml_edit::{value, DocumentMut};

use crate::detect::Target;
use crate::error::{InstallError, Result};
use crate::options::{HostConfigSettings, Layout, Policy};

/// First line of the file; marks it as ours.
pub const MARKER: &str = "# Managed by devinject-installer.";

/// The file's text for these settings. `targets` are the engines being configured: when one
/// ships its own runc (k3s, RKE2) and no runtime was given, the shim is pointed at it, provided
/// it exists on the host.
pub fn render(settings: &HostConfigSettings, layout: &Layout, targets: &[Target]) -> String {
    let mut doc = DocumentMut::new();
    let path = |p: &Path| value(p.display().to_string());
    doc.insert("profiles_dir", path(&layout.profiles_dir()));
    doc.insert("dev_root", path(&settings.dev_root));
    doc.insert("sys_root", path(&settings.sys_root));
    doc.insert("driver_root", path(&settings.driver_root));
    if let Some(l) = &settings.ldconfig {
        doc.insert("ldconfig", path(l));
    }
    doc.insert("log_level", value(settings.log_level.as_str()));
    doc.insert("hook", path(&layout.hook_path()));
    let bundled = targets
        .iter()
        .filter_map(Target::bundled_runc)
        .map(Path::new)
        .find(|p| layout.host.access(p).exists());
    if let Some(r) = settings.oci_runtime.as_deref().or(bundled) {
        doc.insert("runtime", path(r));
    }
    match &settings.policy {
        Policy::Kubernetes {
            pod_resources_socket,
        } => {
            doc.insert("policy", value("kubernetes"));
            doc.insert("pod_resources_socket", path(pod_resources_socket));
        }
        Policy::Env => {
            doc.insert("policy", value("env"));
        }
        Policy::HookDefault => {}
    }
    format!(
        "{MARKER} `devinject-installer` rewrites this file on every install and\n\
         # `devinject-installer --uninstall` puts back what was here before. Keys: docs/hook.md.\n\
         {doc}"
    )
}

/// Checks `text` with the parser the hook reads it with (`devinject-hostconfig`).
pub fn validate(text: &str) -> Result<()> {
    toml::from_str::<devinject_hostconfig::HostConfig>(text)
        .map(|_| ())
        .map_err(|e| InstallError::HostConfigRejected {
            message: e.to_string().trim_end().replace('\n', " | "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use devinject_engine_config::Engine;
    use std::path::PathBuf;

    #[test]
    fn renders_paths_policy_and_the_bundled_runc() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        let k3s = Target::new(Engine::Containerd, crate::detect::Flavour::K3s, None);
        // Not on the host: not written.
        let text = render(
            &HostConfigSettings::default(),
            &layout,
            std::slice::from_ref(&k3s),
        );
        assert!(text.starts_with(MARKER), "{text}");
        assert!(
            text.contains("profiles_dir = \"/etc/devinject/profiles\""),
            "{text}"
        );
        assert!(
            text.contains("hook = \"/opt/devinject/bin/devinject-hook\""),
            "{text}"
        );
        assert!(!text.contains("pod_resources_helper"), "{text}");
        assert!(text.contains("policy = \"kubernetes\""), "{text}");
        assert!(
            text.contains("pod_resources_socket = \"/var/lib/kubelet/pod-resources/kubelet.sock\""),
            "{text}"
        );
        assert!(!text.contains("runtime ="), "{text}");
        let runc = dir.path().join("var/lib/rancher/k3s/data/current/bin/runc");
        std::fs::create_dir_all(runc.parent().expect("parent")).expect("mkdir");
        std::fs::write(&runc, "").expect("write");
        let text = render(&HostConfigSettings::default(), &layout, &[k3s]);
        assert!(
            text.contains("runtime = \"/var/lib/rancher/k3s/data/current/bin/runc\""),
            "{text}"
        );
        // An explicit runtime wins; the hook-default policy writes no policy key.
        let settings = HostConfigSettings {
            oci_runtime: Some(PathBuf::from("/usr/bin/crun")),
            policy: Policy::HookDefault,
            ..HostConfigSettings::default()
        };
        let text = render(&settings, &layout, &[]);
        assert!(text.contains("runtime = \"/usr/bin/crun\""), "{text}");
        assert!(!text.contains("policy"), "{text}");
        let env = HostConfigSettings {
            policy: Policy::Env,
            ..HostConfigSettings::default()
        };
        let text = render(&env, &layout, &[]);
        assert!(text.contains("policy = \"env\""), "{text}");
        assert!(!text.contains("pod_resources_socket"), "{text}");
    }

    #[test]
    fn the_hook_accepts_what_is_rendered_without_a_policy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = HostConfigSettings {
            policy: Policy::HookDefault,
            ldconfig: Some(PathBuf::from("/sbin/ldconfig.real")),
            ..HostConfigSettings::default()
        };
        let text = render(&settings, &Layout::new(dir.path()), &[]);
        validate(&text).expect("the hook's parser accepts it");
        let err = validate("nonsense_key = 1\n").expect_err("unknown key");
        assert!(err.to_string().contains("nonsense_key"), "{err}");
    }
}
