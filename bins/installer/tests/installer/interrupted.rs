//! The installer binary killed (SIGABRT at an injected point, as a kill would stop it) at every
//! point of every step: the host it leaves holds only whole files, the next install finishes the
//! job with the same result as an uninterrupted one, and an uninstall after the kill gives back
//! the original host byte for byte.

use crate::support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::support::{assert_same, FakeHost, Snapshot};

const BIN: &str = env!("CARGO_BIN_EXE_devinject-installer");

fn installer(h: &FakeHost, extra: &[&str], fault: Option<&str>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("--host-root")
        .arg(&h.root)
        .arg("--proc-root")
        .arg(h.dir.path().join("proc"))
        .args(["--restart-mode", "none", "--policy", "hook-default"])
        .arg("--payload")
        .arg(&h.payload)
        .args(extra)
        .env("DEVINJECT_LOG", "warn");
    match fault {
        Some(f) => cmd.env("DEVINJECT_INSTALLER_FAULT", f),
        None => cmd.env_remove("DEVINJECT_INSTALLER_FAULT"),
    };
    cmd.output().expect("run devinject-installer")
}

fn show(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every engine file parses and no temporary file is left: what a reader of the host sees
/// after a kill is either the old or the new version of each file.
fn assert_whole_files(snap: &Snapshot, what: &str) {
    for (path, node) in snap {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        assert!(
            !name.contains(".devinject-tmp-"),
            "{what}: temporary file left: {}",
            path.display()
        );
        if let support::Node::File { bytes, .. } = node {
            let text = String::from_utf8_lossy(bytes);
            if name.ends_with(".toml") || name.ends_with(".conf") {
                assert!(
                    text.parse::<toml_edit::DocumentMut>().is_ok(),
                    "{what}: {} is not valid TOML:\n{text}",
                    path.display()
                );
            }
            if name.ends_with(".json") {
                assert!(
                    serde_json::from_slice::<serde_json::Value>(bytes).is_ok(),
                    "{what}: {} is not valid JSON",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn a_kill_at_any_point_is_recovered_by_the_next_run() {
    for (golden, runtime_step) in [
        ("containerd-1.7-nvidia-default", "runtime-containerd"),
        ("docker-nvidia-default", "runtime-docker"),
    ] {
        // The reference: an uninterrupted install.
        let clean = FakeHost::new(Some(golden));
        let before = clean.snapshot();
        let out = installer(&clean, &[], None);
        assert!(out.status.success(), "{}", show(&out));
        let installed = clean.snapshot();

        for step in ["payload", "profiles", "host-config", runtime_step] {
            let mut n = 0;
            loop {
                let point = format!("{step}:{n}:abort");
                let h = FakeHost::new(Some(golden));
                let out = installer(&h, &[], Some(&point));
                if out.status.success() {
                    // Past the last point of the step.
                    assert!(n > 1, "{golden}: step {step} has no change point");
                    break;
                }
                assert_eq!(
                    out.status.signal(),
                    Some(libc_sigabrt()),
                    "{point}: {}",
                    show(&out)
                );
                let killed = h.snapshot();
                assert_whole_files(&killed, &point);
                if n > 0 {
                    assert!(
                        h.path("/opt/devinject/.installer/journal.json").exists(),
                        "{point}: the journal must survive the kill"
                    );
                }

                // The next install recovers and finishes.
                let out = installer(&h, &[], None);
                assert!(out.status.success(), "{point}: {}", show(&out));
                if n > 0 {
                    let text = String::from_utf8_lossy(&out.stdout);
                    assert!(text.contains("recovered:"), "{point}: {text}");
                }
                assert_same(&h.snapshot(), &installed, &format!("{point} then install"));

                // An uninstall right after the same kill gives back the original host.
                let h = FakeHost::new(Some(golden));
                let _ = installer(&h, &[], Some(&point));
                let out = installer(&h, &["--uninstall"], None);
                assert!(out.status.success(), "{point}: {}", show(&out));
                assert_same(&h.snapshot(), &before, &format!("{point} then uninstall"));
                n += 1;
            }
        }
    }
}

#[test]
fn an_uninstall_killed_at_any_point_is_finished_by_the_next_one() {
    let golden = "containerd-2.x-v3-default";
    let fresh = FakeHost::new(Some(golden));
    let before = fresh.snapshot();
    for step in ["unconfigure-containerd", "host-files", "payload"] {
        let mut n = 0;
        loop {
            let h = FakeHost::new(Some(golden));
            let out = installer(&h, &[], None);
            assert!(out.status.success(), "{}", show(&out));
            let point = format!("{step}:{n}:abort");
            let out = installer(&h, &["--uninstall"], Some(&point));
            if out.status.success() {
                assert!(n > 1, "step {step} has no change point");
                break;
            }
            assert_eq!(out.status.signal(), Some(libc_sigabrt()), "{}", show(&out));
            assert_whole_files(&h.snapshot(), &point);
            let out = installer(&h, &["--uninstall"], None);
            assert!(out.status.success(), "{point}: {}", show(&out));
            assert_same(&h.snapshot(), &before, &format!("uninstall after {point}"));
            n += 1;
        }
    }
}

#[test]
fn exit_codes_and_messages_say_what_failed_and_what_was_undone() {
    // A broken engine file: nothing is changed by the failing step, exit 3.
    let h = FakeHost::new(None);
    h.write("/etc/containerd/config.toml", "version = 2\n[plugins\n");
    let out = installer(&h, &[], None);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("step runtime-containerd failed"), "{err}");
    assert!(err.contains("config.toml:2"), "{err}");
    assert!(
        err.contains("done before it (and kept): payload, profiles, host-config"),
        "{err}"
    );

    // An injected failure: rolled back, exit 1, and the message lists what was put back.
    let h = FakeHost::new(Some("docker-nvidia-default"));
    let out = installer(&h, &[], Some("profiles:3"));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("it was undone"), "{err}");
    assert!(err.contains("/etc/devinject/profiles/"), "{err}");

    // No engine anywhere: exit 3 with what was looked for.
    let h = FakeHost::new(None);
    let out = installer(&h, &[], None);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no container engine found"));

    // Usage errors: exit 2.
    let out = installer(&h, &["--runtime", "auto,docker"], None);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));

    // The probe without a plugin: exit 6.
    let out = Command::new(BIN)
        .args(["probe", "--kubelet-dir"])
        .arg(h.dir.path())
        .output()
        .expect("probe");
    assert_eq!(out.status.code(), Some(6), "{}", show(&out));
}

#[test]
fn a_dry_run_of_the_binary_prints_the_engine_diff() {
    let h = FakeHost::new(Some("containerd-1.6-default-shim"));
    let before = h.snapshot();
    let out = installer(&h, &["--dry-run"], None);
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("would create /etc/containerd/conf.d/99-devinject.toml"),
        "{text}"
    );
    assert!(
        text.contains("| +BinaryName = \"/opt/devinject/bin/devinject-runtime\""),
        "{text}"
    );
    assert!(text.contains("dry run: nothing was written"), "{text}");
    assert_same(&h.snapshot(), &before, "dry run");
    assert!(!Path::new(&h.path("/opt/devinject")).exists());
}

fn libc_sigabrt() -> i32 {
    nix::sys::signal::Signal::SIGABRT as i32
}
