//! The configuration devinject-ctl writes, loaded by a real containerd (1.6 here): the drop-in
//! plus `imports` must give the CRI plugin a `devinject` runtime with the shim as `BinaryName`
//! and runc's options copied, without losing the main file's CRI settings (containerd#5837);
//! hook mode's base spec must load. A private containerd ([`devinject_tests::daemons`]) runs in a
//! temp dir; the system daemon is never touched. Needs root, `containerd` and `ctr`; skipped
//! otherwise (fails under `CI=true`). Containers started through this configuration over the CRI
//! API are in `containerd_cri.rs`.

use std::path::{Path, PathBuf};

use devinject_engine_config::{
    configure, unconfigure, ConfigureRequest, Engine, HostPaths, Mode, UnconfigureRequest,
};
use devinject_tests::daemons::{self, containerd_config_dump, short_tempdir, Containerd};
use devinject_tests::skip::{require_binary, require_root, which};
use toml_edit::Item;

const CRI: &str = "io.containerd.grpc.v1.cri";

fn main_config(dir: &Path) -> String {
    format!(
        "# node config with comments\nversion = 2\n{}\n\
         [plugins.\"{CRI}\"]\n  sandbox_image = \"example.org/pause:3.9\"\n  \
         [plugins.\"{CRI}\".containerd]\n    default_runtime_name = \"runc\"\n    \
         [plugins.\"{CRI}\".containerd.runtimes.runc]\n      runtime_type = \"io.containerd.runc.v2\"\n      \
         [plugins.\"{CRI}\".containerd.runtimes.runc.options]\n        SystemdCgroup = true\n        \
         Root = \"{d}/runc-root\"\n",
        Containerd::private_settings(dir),
        d = dir.display()
    )
}

fn get<'a>(doc: &'a toml_edit::DocumentMut, keys: &[&str]) -> Option<&'a Item> {
    devinject_engine_config::toml_tree::get(doc.as_table(), keys)
}

fn runtime<'a>(doc: &'a toml_edit::DocumentMut, name: &str, key: &[&str]) -> Option<&'a Item> {
    let mut keys = vec!["plugins", CRI, "containerd", "runtimes", name];
    keys.extend_from_slice(key);
    get(doc, &keys)
}

fn request(dir: &Path, mode: Mode) -> ConfigureRequest {
    let mut req = ConfigureRequest::new(Engine::Containerd);
    req.mode = Some(mode);
    req.set_as_default = true;
    req.paths = HostPaths {
        config: Some(dir.join("config.toml")),
        ..HostPaths::default()
    };
    // The real shim is built elsewhere; runc takes its place, as the shim ends by running it.
    req.shim_path = PathBuf::from("/usr/sbin/runc");
    req
}

fn ready() -> bool {
    require_root() && require_binary("containerd") && require_binary("ctr")
}

fn start(dir: &Path) -> Containerd {
    Containerd::start(dir, &dir.join("config.toml")).expect("start containerd")
}

fn effective_config(ctd: &Containerd) -> toml_edit::DocumentMut {
    containerd_config_dump(ctd.config()).expect("containerd config dump")
}

fn assert_cri_ok(ctd: &Containerd) {
    let plugins = ctd.plugins().expect("ctr plugins ls");
    let line = plugins
        .lines()
        .find(|l| l.starts_with("io.containerd.grpc.v1") && l.contains(" cri "))
        .unwrap_or_else(|| panic!("no cri plugin in:\n{plugins}"));
    assert!(
        line.trim_end().ends_with("ok"),
        "CRI plugin did not load: {line}\n{}",
        ctd.log_tail()
    );
}

#[test]
fn containerd_loads_the_shim_dropin_through_imports() {
    if !ready() {
        return;
    }
    let tmp = short_tempdir("ctdcfg").expect("tempdir");
    let dir = tmp.path();
    let original = main_config(dir);
    std::fs::write(dir.join("config.toml"), &original).expect("write config");

    let report = configure(&request(dir, Mode::Shim)).expect("configure");
    assert!(report.changed());

    let ctd = start(dir);
    assert_cri_ok(&ctd);
    let dump = effective_config(&ctd);
    let s = |i: Option<&Item>| i.and_then(Item::as_str).map(str::to_string);
    assert_eq!(
        s(runtime(&dump, "devinject", &["options", "BinaryName"])).as_deref(),
        Some("/usr/sbin/runc")
    );
    assert_eq!(
        runtime(&dump, "devinject", &["options", "SystemdCgroup"]).and_then(Item::as_bool),
        Some(true),
        "runc's options must be copied"
    );
    let root = format!("{}/runc-root", dir.display());
    assert_eq!(
        s(runtime(&dump, "devinject", &["options", "Root"])),
        Some(root)
    );
    assert_eq!(
        s(runtime(&dump, "devinject", &["runtime_type"])).as_deref(),
        Some("io.containerd.runc.v2")
    );
    let annotations = runtime(&dump, "devinject", &["container_annotations"])
        .and_then(devinject_engine_config::toml_tree::string_array);
    assert_eq!(annotations, Some(vec!["devinject.io/*".to_string()]));
    // The main file's CRI settings survive the import (containerd#5837).
    assert_eq!(
        s(get(&dump, &["plugins", CRI, "sandbox_image"])).as_deref(),
        Some("example.org/pause:3.9")
    );
    assert_eq!(
        runtime(&dump, "runc", &["options", "SystemdCgroup"]).and_then(Item::as_bool),
        Some(true)
    );
    assert_eq!(
        s(get(
            &dump,
            &["plugins", CRI, "containerd", "default_runtime_name"]
        ))
        .as_deref(),
        Some("devinject")
    );
    drop(ctd);

    // Unconfigure: the main file is byte-identical and containerd is back to runc.
    let mut un = UnconfigureRequest::new(Engine::Containerd);
    un.paths = request(dir, Mode::Shim).paths;
    unconfigure(&un).expect("unconfigure");
    assert_eq!(
        std::fs::read_to_string(dir.join("config.toml")).expect("read"),
        original
    );
    let ctd = start(dir);
    assert_cri_ok(&ctd);
    let dump = effective_config(&ctd);
    assert!(runtime(&dump, "devinject", &[]).is_none());
    assert_eq!(
        s(get(
            &dump,
            &["plugins", CRI, "containerd", "default_runtime_name"]
        ))
        .as_deref(),
        Some("runc")
    );
}

#[test]
fn containerd_loads_the_hook_mode_base_spec() {
    if !ready() {
        return;
    }
    let tmp = short_tempdir("ctdcfg").expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("config.toml"), main_config(dir)).expect("write config");
    let mut req = request(dir, Mode::Hook);
    req.ctr_path = which("ctr").expect("ctr");
    configure(&req).expect("configure");

    // containerd reads every base_runtime_spec when the CRI plugin starts; a bad one fails it.
    let ctd = start(dir);
    assert_cri_ok(&ctd);
    let dump = effective_config(&ctd);
    let spec_path = dir.join("devinject-base-spec.json");
    assert_eq!(
        runtime(&dump, "devinject", &["base_runtime_spec"]).and_then(Item::as_str),
        Some(spec_path.to_str().expect("utf-8"))
    );
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&spec_path).expect("spec")).expect("json");
    assert_eq!(
        spec["hooks"]["createRuntime"][0]["path"],
        "/usr/local/bin/devinject-hook"
    );
    // The rest is containerd's own default spec.
    let default: serde_json::Value = serde_json::from_str(
        &daemons::run_ok({
            let mut cmd = std::process::Command::new("ctr");
            cmd.args(["--namespace", "k8s.io", "oci", "spec"]);
            cmd
        })
        .expect("ctr oci spec"),
    )
    .expect("json");
    let mut without_hooks = spec.clone();
    without_hooks
        .as_object_mut()
        .expect("object")
        .remove("hooks");
    assert_eq!(without_hooks, default);
}
