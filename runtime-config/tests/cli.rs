//! The devinject-ctl binary: output, dry run and documented exit codes.

use std::path::Path;
use std::process::{Command, Output};

fn ctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_devinject-ctl"))
        .args(args)
        .output()
        .expect("run devinject-ctl")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn root_arg(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn dry_run_prints_a_diff_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let out = ctl(&[
        "runtime",
        "configure",
        "--runtime",
        "docker",
        "--root",
        &root,
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("--- /dev/null\n+++ b/etc/docker/daemon.json\n"),
        "{text}"
    );
    assert!(
        text.contains("+            \"path\": \"/usr/local/bin/devinject-runtime\""),
        "{text}"
    );
    assert!(text.contains("nothing was written"), "{text}");
    assert!(std::fs::read_dir(tmp.path())
        .expect("readdir")
        .next()
        .is_none());
}

#[test]
fn configure_twice_says_nothing_changed_then_unconfigure_restores() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let conf = tmp.path().join("etc/crio/crio.conf");
    std::fs::create_dir_all(conf.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &conf,
        "# crio\n[crio.runtime]\ndefault_runtime = \"crun\"\n",
    )
    .expect("write");
    let args = [
        "runtime",
        "configure",
        "--runtime",
        "crio",
        "--root",
        &root,
        "--set-as-default",
    ];
    let first = ctl(&args);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(
        stdout(&first).contains("create /etc/crio/crio.conf.d/99-devinject.conf"),
        "{}",
        stdout(&first)
    );
    assert!(
        stdout(&first).contains("systemctl restart crio"),
        "{}",
        stdout(&first)
    );
    let second = ctl(&args);
    assert_eq!(second.status.code(), Some(0));
    assert!(
        stdout(&second).contains("already configured; nothing changed"),
        "{}",
        stdout(&second)
    );
    assert!(!stdout(&second).contains("restart"), "{}", stdout(&second));
    let off = ctl(&[
        "runtime",
        "unconfigure",
        "--runtime",
        "crio",
        "--root",
        &root,
    ]);
    assert_eq!(off.status.code(), Some(0), "{}", stderr(&off));
    assert!(
        stdout(&off).contains("remove /etc/crio/crio.conf.d/99-devinject.conf"),
        "{}",
        stdout(&off)
    );
}

#[test]
fn broken_file_exits_3_naming_file_and_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let conf = tmp.path().join("etc/containerd/config.toml");
    std::fs::create_dir_all(conf.parent().expect("parent")).expect("mkdir");
    std::fs::write(&conf, "version = 2\nimports = [\n").expect("write");
    let out = ctl(&[
        "runtime",
        "configure",
        "--runtime",
        "containerd",
        "--root",
        &root,
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.starts_with("devinject-ctl: "), "{err}");
    assert!(err.contains("etc/containerd/config.toml:"), "{err}");
    assert!(err.contains("the file was not changed"), "{err}");
}

#[test]
fn impossible_requests_exit_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let out = ctl(&[
        "runtime",
        "configure",
        "--runtime",
        "docker",
        "--root",
        &root,
        "--mode",
        "hook",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("docker has no hook configuration"),
        "{}",
        stderr(&out)
    );
    let out = ctl(&[
        "runtime",
        "configure",
        "--runtime",
        "crio",
        "--root",
        &root,
        "--reload",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = ctl(&["runtime", "configure", "--runtime", "nerdctl"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn reload_with_a_bad_pidfile_exits_5() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let out = ctl(&[
        "runtime",
        "configure",
        "--runtime",
        "docker",
        "--root",
        &root,
        "--reload",
        "--docker-pidfile",
        "/run/none.pid",
    ]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot reload dockerd"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn cdi_generate_with_a_broken_profile_exits_3() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let profiles = tmp.path().join("etc/devinject/profiles");
    std::fs::create_dir_all(&profiles).expect("mkdir");
    let out = ctl(&["cdi", "generate", "--root", &root]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("up to date"), "{}", stdout(&out));
    std::fs::write(
        profiles.join("bad.toml"),
        "name = \"bad\"\nresourse = \"x\"\n",
    )
    .expect("write");
    let out = ctl(&["cdi", "generate", "--root", &root]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("bad.toml"), "{}", stderr(&out));
}

#[test]
fn hook_config_is_passed_to_the_hook_in_hooksd_and_the_containerd_base_spec() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let out = ctl(&[
        "runtime",
        "configure",
        "--runtime",
        "podman",
        "--root",
        &root,
        "--hook-config",
        "/srv/devinject/config.toml",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let hook: serde_json::Value = serde_json::from_slice(
        &std::fs::read(tmp.path().join("etc/containers/oci/hooks.d/devinject.json"))
            .expect("hook file"),
    )
    .expect("json");
    assert_eq!(
        hook["hook"]["args"],
        serde_json::json!(["devinject-hook", "--config", "/srv/devinject/config.toml"])
    );

    let base = tmp.path().join("base.json");
    std::fs::write(&base, "{\"ociVersion\": \"1.0.2\"}\n").expect("base spec");
    let out = ctl(&[
        "runtime",
        "configure",
        "--runtime",
        "containerd",
        "--mode",
        "hook",
        "--root",
        &root,
        "--base-spec",
        "/base.json",
        "--hook-config",
        "/srv/devinject/config.toml",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(tmp.path().join("etc/containerd/devinject-base-spec.json"))
            .expect("base spec"),
    )
    .expect("json");
    assert_eq!(
        spec["hooks"]["createRuntime"][0]["args"],
        serde_json::json!(["devinject-hook", "--config", "/srv/devinject/config.toml"])
    );
}
