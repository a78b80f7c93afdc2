//! Behaviour beyond the golden round trips: broken input, foreign files, edits made after
//! configure, switching modes, lost state, and requests that cannot be carried out.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::support::tree::{assert_same, snapshot};
use devinject_engine_config::{
    configure, unconfigure, ConfigureRequest, Engine, HostPaths, Mode, RuntimeConfigError,
    UnconfigureRequest,
};

fn req(engine: Engine, root: &Path) -> ConfigureRequest {
    let mut r = ConfigureRequest::new(engine);
    r.paths = HostPaths::under_root(root);
    r.ctr_path = PathBuf::from("/nonexistent/ctr");
    r
}

fn unreq(engine: Engine, root: &Path) -> UnconfigureRequest {
    let mut r = UnconfigureRequest::new(engine);
    r.paths = HostPaths::under_root(root);
    r
}

fn write(root: &Path, rel: &str, text: &str) -> PathBuf {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(&p, text).expect("write");
    p
}

fn read(root: &Path, rel: &str) -> String {
    fs::read_to_string(root.join(rel)).expect("read")
}

const DAEMON_JSON: &str = "{\n  \"runtimes\": {\n    \"nvidia\": {\n      \"path\": \"nvidia-container-runtime\"\n    }\n  },\n  \"default-runtime\": \"nvidia\"\n}\n";

#[test]
fn broken_containerd_toml_names_file_and_line_and_is_left_untouched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let text = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"\n  sandbox_image = \"x\"\n";
    write(tmp.path(), "etc/containerd/config.toml", text);
    let before = snapshot(tmp.path(), &|_| false);
    let err = configure(&req(Engine::Containerd, tmp.path())).expect_err("broken");
    let msg = err.to_string();
    assert!(
        matches!(err, RuntimeConfigError::Syntax { line: 3, .. }),
        "{msg}"
    );
    assert!(msg.contains("etc/containerd/config.toml:3:"), "{msg}");
    assert!(msg.contains("the file was not changed"), "{msg}");
    assert!(err.is_bad_input());
    assert_same(&snapshot(tmp.path(), &|_| false), &before, "broken toml");
}

#[test]
fn broken_daemon_json_names_file_and_line_and_is_left_untouched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "etc/docker/daemon.json",
        "{\n  \"debug\": true,\n  \"log-level\": \"info\",\n}\n",
    );
    let before = snapshot(tmp.path(), &|_| false);
    let err = configure(&req(Engine::Docker, tmp.path())).expect_err("broken");
    let msg = err.to_string();
    assert!(msg.contains("etc/docker/daemon.json:4:1:"), "{msg}");
    assert_same(&snapshot(tmp.path(), &|_| false), &before, "broken json");
}

#[test]
fn daemon_json_that_is_not_an_object_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "etc/docker/daemon.json",
        "{\"runtimes\": [\"nvidia\"]}\n",
    );
    let err = configure(&req(Engine::Docker, tmp.path())).expect_err("runtimes is a list");
    assert!(
        err.to_string().contains("`runtimes` is not an object"),
        "{err}"
    );
}

#[test]
fn containerd_version_1_is_refused_with_migration_hint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "etc/containerd/config.toml",
        "[plugins.cri]\n  sandbox_image = \"x\"\n",
    );
    let err = configure(&req(Engine::Containerd, tmp.path())).expect_err("v1");
    let msg = err.to_string();
    assert!(msg.contains("version 1"), "{msg}");
    assert!(msg.contains("containerd config migrate"), "{msg}");
    let err = {
        write(tmp.path(), "etc/containerd/config.toml", "version = 4\n");
        configure(&req(Engine::Containerd, tmp.path())).expect_err("v4")
    };
    assert!(
        err.to_string()
            .contains("config.toml:1: config version 4 is not supported"),
        "{err}"
    );
}

#[test]
fn containerd_missing_import_is_an_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "etc/containerd/config.toml",
        "version = 2\nimports = [\"/etc/containerd/gone.toml\"]\n",
    );
    let err = configure(&req(Engine::Containerd, tmp.path())).expect_err("missing import");
    assert!(
        err.to_string()
            .contains("imports /etc/containerd/gone.toml which does not exist"),
        "{err}"
    );
}

#[test]
fn containerd_import_that_replaces_the_cri_section_is_mirrored() {
    // containerd 1.x: an imported file's CRI section replaces the main file's (containerd#5837);
    // the drop-in must reproduce what containerd really runs with, not the main file alone.
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "etc/containerd/config.toml",
        "version = 2\nimports = [\"extra.toml\"]\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"main\"\n",
    );
    write(
        tmp.path(),
        "etc/containerd/extra.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"imported\"\n",
    );
    configure(&req(Engine::Containerd, tmp.path())).expect("configure");
    let dropin = read(tmp.path(), "etc/containerd/conf.d/99-devinject.toml");
    assert!(dropin.contains("sandbox_image = \"imported\""), "{dropin}");
    assert!(!dropin.contains("\"main\""), "{dropin}");
}

#[test]
fn foreign_dropin_is_not_overwritten() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "etc/crio/crio.conf.d/99-devinject.conf",
        "[crio.runtime]\nlog_level = \"debug\"\n",
    );
    let before = snapshot(tmp.path(), &|_| false);
    let err = configure(&req(Engine::Crio, tmp.path())).expect_err("foreign");
    assert!(matches!(err, RuntimeConfigError::NotOurs { .. }), "{err}");
    assert!(
        err.to_string().contains("was not written by devinject-ctl"),
        "{err}"
    );
    assert_same(
        &snapshot(tmp.path(), &|_| false),
        &before,
        "foreign drop-in",
    );
}

#[test]
fn docker_edit_after_configure_keeps_the_edit_and_restores_the_old_default() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(tmp.path(), "etc/docker/daemon.json", DAEMON_JSON);
    let mut r = req(Engine::Docker, tmp.path());
    r.set_as_default = true;
    configure(&r).expect("configure");
    // Someone adds a setting by hand afterwards.
    let edited =
        read(tmp.path(), "etc/docker/daemon.json").replacen('{', "{\n  \"debug\": true,", 1);
    write(tmp.path(), "etc/docker/daemon.json", &edited);
    let report = unconfigure(&unreq(Engine::Docker, tmp.path())).expect("unconfigure");
    assert!(
        report.notes.iter().any(|n| n.contains("edited after")),
        "{:?}",
        report.notes
    );
    let v: serde_json::Value =
        serde_json::from_str(&read(tmp.path(), "etc/docker/daemon.json")).expect("json");
    assert_eq!(v["debug"], true);
    assert_eq!(v["default-runtime"], "nvidia");
    assert!(v["runtimes"].get("devinject").is_none(), "{v}");
    assert!(v["runtimes"].get("nvidia").is_some(), "{v}");
}

#[test]
fn docker_default_can_be_dropped_by_configuring_again_without_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(tmp.path(), "etc/docker/daemon.json", DAEMON_JSON);
    let mut r = req(Engine::Docker, tmp.path());
    r.set_as_default = true;
    configure(&r).expect("configure as default");
    r.set_as_default = false;
    let report = configure(&r).expect("configure without default");
    assert!(report.changed());
    let v: serde_json::Value =
        serde_json::from_str(&read(tmp.path(), "etc/docker/daemon.json")).expect("json");
    assert_eq!(v["default-runtime"], "nvidia");
    assert_eq!(
        v["runtimes"]["devinject"]["path"],
        "/usr/local/bin/devinject-runtime"
    );
    unconfigure(&unreq(Engine::Docker, tmp.path())).expect("unconfigure");
    assert_eq!(read(tmp.path(), "etc/docker/daemon.json"), DAEMON_JSON);
}

#[test]
fn containerd_switching_modes_and_back_restores_the_original() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let original = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  base_runtime_spec = \"/etc/containerd/base.json\"\n";
    write(tmp.path(), "etc/containerd/config.toml", original);
    write(
        tmp.path(),
        "etc/containerd/base.json",
        "{\"ociVersion\": \"1.0.2\", \"process\": {\"cwd\": \"/\"}}\n",
    );
    let before = snapshot(tmp.path(), &|_| false);
    let mut r = req(Engine::Containerd, tmp.path());
    configure(&r).expect("shim");
    r.mode = Some(Mode::Hook);
    let hook = configure(&r).expect("hook");
    assert!(hook.changed());
    // Hook mode starts from the runc entry's own base spec, adding only the hook.
    let spec: serde_json::Value =
        serde_json::from_str(&read(tmp.path(), "etc/containerd/devinject-base-spec.json"))
            .expect("spec");
    assert_eq!(spec["process"]["cwd"], "/");
    assert_eq!(
        spec["hooks"]["createRuntime"][0]["path"],
        "/usr/local/bin/devinject-hook"
    );
    let dropin = read(tmp.path(), "etc/containerd/conf.d/99-devinject.toml");
    assert!(
        dropin.contains("base_runtime_spec = \"/etc/containerd/devinject-base-spec.json\""),
        "{dropin}"
    );
    r.mode = Some(Mode::Shim);
    configure(&r).expect("shim again");
    assert!(!tmp
        .path()
        .join("etc/containerd/devinject-base-spec.json")
        .exists());
    unconfigure(&unreq(Engine::Containerd, tmp.path())).expect("unconfigure");
    assert_same(
        &snapshot(tmp.path(), &|_| false),
        &before,
        "after switching modes",
    );
}

#[test]
fn containerd_hook_mode_runs_ctr_for_the_default_spec() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(tmp.path(), "etc/containerd/config.toml", "version = 2\n");
    let ctr = write(
        tmp.path(),
        "bin/ctr",
        "#!/bin/sh\n[ \"$*\" = \"--namespace k8s.io oci spec\" ] || exit 3\necho '{\"ociVersion\": \"1.0.2-dev\", \"root\": {\"path\": \"rootfs\"}}'\n",
    );
    fs::set_permissions(&ctr, fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut r = req(Engine::Containerd, tmp.path());
    r.mode = Some(Mode::Hook);
    r.ctr_path = ctr.clone();
    configure(&r).expect("hook mode");
    let spec: serde_json::Value =
        serde_json::from_str(&read(tmp.path(), "etc/containerd/devinject-base-spec.json"))
            .expect("spec");
    assert_eq!(spec["root"]["path"], "rootfs");
    assert_eq!(
        spec["hooks"]["createRuntime"][0]["args"],
        serde_json::json!(["devinject-hook"])
    );

    // A failing ctr is reported as such, and nothing is written.
    let tmp2 = tempfile::tempdir().expect("tempdir");
    write(tmp2.path(), "etc/containerd/config.toml", "version = 2\n");
    let before = snapshot(tmp2.path(), &|_| false);
    let mut r = req(Engine::Containerd, tmp2.path());
    r.mode = Some(Mode::Hook);
    let err = configure(&r).expect_err("no ctr");
    assert!(matches!(err, RuntimeConfigError::Command { .. }), "{err}");
    assert_same(&snapshot(tmp2.path(), &|_| false), &before, "ctr failed");
}

#[test]
fn unconfigure_without_state_removes_devinject_entries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let original = "version = 2\nimports = []\n";
    write(tmp.path(), "etc/containerd/config.toml", original);
    configure(&req(Engine::Containerd, tmp.path())).expect("configure");
    fs::remove_file(
        tmp.path()
            .join("etc/containerd/.config.toml.devinject-state"),
    )
    .expect("lose state");
    let report = unconfigure(&unreq(Engine::Containerd, tmp.path())).expect("unconfigure");
    assert!(
        report.notes.iter().any(|n| n.contains("no record")),
        "{:?}",
        report.notes
    );
    assert_eq!(read(tmp.path(), "etc/containerd/config.toml"), original);
    assert!(!tmp
        .path()
        .join("etc/containerd/conf.d/99-devinject.toml")
        .exists());
}

#[test]
fn configure_after_lost_state_adopts_our_dropin() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(tmp.path(), "etc/crio/crio.conf", "[crio.runtime]\n");
    configure(&req(Engine::Crio, tmp.path())).expect("configure");
    fs::remove_file(tmp.path().join("etc/crio/.crio.conf.devinject-state")).expect("lose state");
    let again = configure(&req(Engine::Crio, tmp.path())).expect("configure again");
    assert!(!again.changed());
    unconfigure(&unreq(Engine::Crio, tmp.path())).expect("unconfigure");
    // The drop-in goes; the directory created with it stays, since its record was lost.
    assert!(!tmp
        .path()
        .join("etc/crio/crio.conf.d/99-devinject.conf")
        .exists());
}

#[test]
fn crio_and_podman_share_the_hooks_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "etc/crio/crio.conf",
        "[crio.runtime]\nhooks_dir = [\"/etc/containers/oci/hooks.d\"]\n",
    );
    let mut c = req(Engine::Crio, tmp.path());
    c.mode = Some(Mode::Hook);
    configure(&c).expect("crio hook");
    configure(&req(Engine::Podman, tmp.path())).expect("podman hook");
    let hook = tmp.path().join("etc/containers/oci/hooks.d/devinject.json");
    unconfigure(&unreq(Engine::Podman, tmp.path())).expect("podman off");
    assert!(hook.exists(), "CRI-O still needs the hook file");
    unconfigure(&unreq(Engine::Crio, tmp.path())).expect("crio off");
    assert!(!hook.exists());
}

#[test]
fn podman_with_custom_hooks_dir_gets_a_dropin() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "etc/containers/containers.conf",
        "[engine]\nhooks_dir = [\"/opt/hooks\"]\n",
    );
    configure(&req(Engine::Podman, tmp.path())).expect("podman hook");
    let dropin = read(
        tmp.path(),
        "etc/containers/containers.conf.d/99-devinject.conf",
    );
    assert!(
        dropin.contains("hooks_dir = [\"/opt/hooks\", \"/etc/containers/oci/hooks.d\"]"),
        "{dropin}"
    );
}

#[test]
fn requests_that_cannot_be_carried_out_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut r = req(Engine::Docker, tmp.path());
    r.mode = Some(Mode::Hook);
    let err = configure(&r).expect_err("docker hook");
    assert!(
        err.to_string().contains("docker has no hook configuration"),
        "{err}"
    );
    let mut r = req(Engine::Crio, tmp.path());
    r.mode = Some(Mode::Hook);
    r.set_as_default = true;
    assert!(matches!(
        configure(&r),
        Err(RuntimeConfigError::InvalidRequest(_))
    ));
    let mut r = req(Engine::Crio, tmp.path());
    r.runtime_name = "bad name".to_string();
    assert!(matches!(
        configure(&r),
        Err(RuntimeConfigError::InvalidRequest(_))
    ));
    let mut r = req(Engine::Crio, tmp.path());
    r.shim_path = PathBuf::from("devinject-runtime");
    assert!(matches!(
        configure(&r),
        Err(RuntimeConfigError::InvalidRequest(_))
    ));
    assert!(
        fs::read_dir(tmp.path()).expect("readdir").next().is_none(),
        "nothing written"
    );
}

#[test]
fn state_file_is_private_and_next_to_the_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(tmp.path(), "etc/docker/daemon.json", "{}\n");
    let report = configure(&req(Engine::Docker, tmp.path())).expect("configure");
    assert_eq!(
        report.state_file,
        PathBuf::from("/etc/docker/.daemon.json.devinject-state")
    );
    let state = tmp.path().join("etc/docker/.daemon.json.devinject-state");
    assert_eq!(
        fs::metadata(&state).expect("stat").permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn not_configured_unconfigure_is_a_no_op() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(tmp.path(), "etc/docker/daemon.json", DAEMON_JSON);
    let report = unconfigure(&unreq(Engine::Docker, tmp.path())).expect("unconfigure");
    assert!(!report.changed());
    assert!(
        report.notes.iter().any(|n| n.contains("not configured")),
        "{:?}",
        report.notes
    );
    assert_eq!(read(tmp.path(), "etc/docker/daemon.json"), DAEMON_JSON);
}

#[test]
fn a_symlinked_config_file_stays_a_symlink() {
    // e.g. daemon.json kept with other node configuration and linked into /etc/docker.
    let tmp = tempfile::tempdir().expect("tempdir");
    write(tmp.path(), "srv/node/daemon.json", DAEMON_JSON);
    fs::create_dir_all(tmp.path().join("etc/docker")).expect("mkdir");
    std::os::unix::fs::symlink(
        "/srv/node/daemon.json",
        tmp.path().join("etc/docker/daemon.json"),
    )
    .expect("symlink");
    configure(&req(Engine::Docker, tmp.path())).expect("configure");
    let link = tmp.path().join("etc/docker/daemon.json");
    assert!(fs::symlink_metadata(&link)
        .expect("lstat")
        .file_type()
        .is_symlink());
    assert!(read(tmp.path(), "srv/node/daemon.json").contains("devinject"));
    unconfigure(&unreq(Engine::Docker, tmp.path())).expect("unconfigure");
    assert!(fs::symlink_metadata(&link)
        .expect("lstat")
        .file_type()
        .is_symlink());
    assert_eq!(read(tmp.path(), "srv/node/daemon.json"), DAEMON_JSON);
}
