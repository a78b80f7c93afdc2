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

/// A `runtime configure` that must fail with a documented exit code.
struct Failure {
    /// Names the case in failure messages.
    name: &'static str,
    /// Files written below the root first: path relative to it, content.
    files: &'static [(&'static str, &'static str)],
    /// The `--runtime`.
    runtime: &'static str,
    /// The other arguments; `--root <root>` follows them.
    args: &'static [&'static str],
    /// The exit code.
    code: i32,
    /// What stderr must say.
    says: &'static [&'static str],
}

#[test]
fn failures_exit_with_their_documented_codes() {
    let cases = [
        Failure {
            name: "a broken file exits 3 naming the file and line",
            files: &[("etc/containerd/config.toml", "version = 2\nimports = [\n")],
            runtime: "containerd",
            args: &[],
            code: 3,
            says: &["etc/containerd/config.toml:", "the file was not changed"],
        },
        Failure {
            name: "docker in hook mode is impossible",
            files: &[],
            runtime: "docker",
            args: &["--mode", "hook"],
            code: 2,
            says: &["docker has no hook configuration"],
        },
        Failure {
            name: "CRI-O cannot be reloaded",
            files: &[],
            runtime: "crio",
            args: &["--reload"],
            code: 2,
            says: &[],
        },
        Failure {
            name: "an unknown runtime",
            files: &[],
            runtime: "nerdctl",
            args: &[],
            code: 2,
            says: &[],
        },
        Failure {
            name: "reload with a bad pidfile exits 5",
            files: &[],
            runtime: "docker",
            args: &["--reload", "--docker-pidfile", "/run/none.pid"],
            code: 5,
            says: &["cannot reload dockerd"],
        },
    ];
    for case in cases {
        let name = case.name;
        let tmp = tempfile::tempdir().expect("tempdir");
        for (path, content) in case.files {
            let file = tmp.path().join(path);
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(&file, content).expect("write");
        }
        let root = root_arg(tmp.path());
        let mut args = vec!["runtime", "configure", "--runtime", case.runtime];
        args.extend(case.args);
        args.extend(["--root", &root]);
        let out = ctl(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(case.code), "{name}: {err}");
        if case.code != 2 {
            // Our own errors, not the argument parser's.
            assert!(err.starts_with("devinject-ctl: "), "{name}: {err}");
        }
        for needle in case.says {
            assert!(err.contains(needle), "{name}: {needle:?} in {err}");
        }
    }
}

/// A link at one of `cdi generate`'s spec names is what is at a host path, not a system
/// failure: exit 3 naming the path, the link left as it was.
#[test]
fn cdi_generate_with_a_link_at_a_spec_name_exits_3() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let profiles = tmp.path().join("etc/devinject/profiles");
    std::fs::create_dir_all(&profiles).expect("mkdir");
    std::fs::write(
        profiles.join("kvm.toml"),
        "name = \"kvm\"\nresource = \"devinject.io/kvm\"\n[discovery]\nnodes = [\"kvm\"]\n",
    )
    .expect("write");
    let specs = tmp.path().join("etc/cdi");
    std::fs::create_dir_all(&specs).expect("mkdir");
    let link = specs.join("devinject.io-kvm.json");
    std::os::unix::fs::symlink("/etc/hostname", &link).expect("symlink");
    let out = ctl(&["cdi", "generate", "--root", &root]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("devinject.io-kvm.json is a symbolic link"),
        "{err}"
    );
    assert!(std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()));
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
    std::fs::write(
        tmp.path().join("base.json"),
        "{\"ociVersion\": \"1.0.2\"}\n",
    )
    .expect("base spec");
    // The runtime and its extra arguments, the file holding the hook, where its args are.
    let cases: [(&str, &[&str], &str, &str); 2] = [
        (
            "podman",
            &[],
            "etc/containers/oci/hooks.d/devinject.json",
            "/hook/args",
        ),
        (
            "containerd",
            &["--mode", "hook", "--base-spec", "/base.json"],
            "etc/containerd/devinject-base-spec.json",
            "/hooks/createRuntime/0/args",
        ),
    ];
    for (runtime, extra, file, args_at) in cases {
        let mut args = vec![
            "runtime",
            "configure",
            "--runtime",
            runtime,
            "--root",
            &root,
        ];
        args.extend(extra);
        args.extend(["--hook-config", "/srv/devinject/config.toml"]);
        let out = ctl(&args);
        assert_eq!(out.status.code(), Some(0), "{runtime}: {}", stderr(&out));
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join(file)).expect(file))
                .expect("json");
        assert_eq!(
            written.pointer(args_at),
            Some(&serde_json::json!([
                "devinject-hook",
                "--config",
                "/srv/devinject/config.toml"
            ])),
            "{runtime}: {file}"
        );
    }
}

/// A relative `--config` is written absolute in the hooks.d file: CRI-O and podman run the hook in
/// the bundle directory, where a relative path names another file.
#[test]
fn a_relative_hook_config_is_written_absolute_in_the_hooksd_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root_arg(tmp.path());
    let out = Command::new(env!("CARGO_BIN_EXE_devinject-ctl"))
        .args([
            "runtime",
            "configure",
            "--runtime",
            "podman",
            "--root",
            &root,
        ])
        .args(["--hook-config", "conf/devinject.toml"])
        .current_dir(tmp.path())
        .output()
        .expect("run devinject-ctl");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let file = tmp.path().join("etc/containers/oci/hooks.d/devinject.json");
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("hooks.d file")).expect("json");
    assert_eq!(
        written["hook"]["args"],
        serde_json::json!([
            "devinject-hook",
            "--config",
            tmp.path().join("conf/devinject.toml").display().to_string()
        ])
    );
}
