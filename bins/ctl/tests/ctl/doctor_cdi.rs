//! `doctor` on CDI specs, against a simulated host (mknod'ed demo nodes, a gcc-built library)
//! and a private CDI directory: nothing said while CDI is not in use, a fresh spec is ok, a
//! spec made stale (a device removed, a node's mode changed, without regenerating) is reported
//! with its file, what differs and the fix, an error when the profile hands out CDI names, and a
//! spec no profile owns. Needs root (mknod) and gcc; skipped otherwise (fails under `CI=true`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use devinject_cdi::{self as cdi, CdiRequest};
use devinject_ctl::doctor::{self, DoctorRequest, Finding, Section, Severity};
use devinject_devices::HostRoots;
use devinject_tests::sim::{self, SimHost};
use devinject_tests::skip::{require_binary, require_root};

/// The hook path the specs are generated with: not the default, so doctor must read it back
/// from the specs to call them fresh.
const HOOK: &str = "/opt/devinject/bin/devinject-hook";

fn generate(host: &SimHost, cdi_dir: &Path) {
    generate_with(host, cdi_dir, CdiRequest::default());
}

/// [`generate`] with the options of `options` (`--cdi-version`, `--user-namespaces`).
fn generate_with(host: &SimHost, cdi_dir: &Path, options: CdiRequest) {
    cdi::generate(&CdiRequest {
        profiles_dir: host.profiles_dir.clone(),
        roots: HostRoots {
            dev_root: host.dev_root.clone(),
            sys_root: host.dir.join("sys"),
            proc_root: host.dir.join("proc"),
            driver_root: host.driver_root.clone(),
        },
        output_dir: cdi_dir.to_path_buf(),
        hook_path: PathBuf::from(HOOK),
        ..options
    })
    .expect("cdi generate");
}

fn cdi_findings(host: &SimHost, cdi_dir: &Path) -> Vec<Finding> {
    doctor::run(&DoctorRequest {
        host_config: Some(host.config.clone()),
        cdi_dirs: vec![cdi_dir.to_path_buf()],
        ..DoctorRequest::default()
    })
    .findings
    .into_iter()
    .filter(|f| f.section == Section::Cdi)
    .collect()
}

#[test]
fn doctor_reports_stale_cdi_specs() {
    if !(require_root() && require_binary("mknod") && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo"]).expect("simulated host");
    let cdi_dir = tmp.path().join("cdi");
    let spec = cdi_dir.join("devinject.io-demo.json");
    let shown = spec.display().to_string();

    // No spec and no profile handing out CDI names: CDI is not in use, nothing to say.
    assert_eq!(cdi_findings(&host, &cdi_dir), []);

    generate(&host, &cdi_dir);
    let fresh = cdi_findings(&host, &cdi_dir);
    assert_eq!(fresh.len(), 1, "{fresh:#?}");
    assert_eq!(fresh[0].severity, Severity::Ok);
    assert_eq!(
        fresh[0].message,
        format!("{shown} is up to date (4 device(s))")
    );

    // A device goes and nobody regenerates.
    std::fs::remove_file(host.dev_root.join("demo/accel2")).expect("rm accel2");
    let stale = cdi_findings(&host, &cdi_dir);
    assert_eq!(stale.len(), 1, "{stale:#?}");
    assert_eq!(stale[0].severity, Severity::Warning);
    assert_eq!(stale[0].subject, shown);
    assert_eq!(
        stale[0].message,
        format!("{shown} is stale: device(s) 2 gone")
    );
    let fix = stale[0].fix.as_deref().expect("a fix");
    assert!(fix.contains("devinject-ctl cdi generate"), "{fix}");
    assert!(fix.contains("--watch"), "{fix}");

    // The same through the CLI, with --cdi-dir.
    let out = Command::new(env!("CARGO_BIN_EXE_devinject-ctl"))
        .args(["doctor", "--config"])
        .arg(&host.config)
        .arg("--cdi-dir")
        .arg(&cdi_dir)
        .output()
        .expect("run devinject-ctl doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "CDI specs\n  WARN   {shown} is stale: device(s) 2 gone\n         fix: run `devinject-ctl cdi generate`"
        )),
        "{text}"
    );

    // Regenerated: fresh again.
    generate(&host, &cdi_dir);
    assert_eq!(cdi_findings(&host, &cdi_dir)[0].severity, Severity::Ok);

    // A node's mode changes: same devices, other content.
    let accel1 = host.dev_root.join("demo/accel1");
    std::fs::set_permissions(&accel1, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let changed = cdi_findings(&host, &cdi_dir);
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert!(
        changed[0]
            .message
            .starts_with(&format!("{shown} is stale: its content differs: ")),
        "{changed:#?}"
    );
    assert!(changed[0].message.contains("fileMode"), "{changed:#?}");

    // The profile hands out CDI names: a stale spec makes pods fail, an error.
    let profile = host.profiles_dir.join("demo.toml");
    let text = std::fs::read_to_string(&profile).expect("read profile");
    std::fs::write(
        &profile,
        text.replace(
            "[discovery]",
            "allocate_mode = \"cdi-annotations\"\n[discovery]",
        ),
    )
    .expect("edit profile");
    let error = cdi_findings(&host, &cdi_dir);
    assert_eq!(error.len(), 1, "{error:#?}");
    assert_eq!(error[0].severity, Severity::Error);

    // ... and a missing spec is an error too.
    std::fs::remove_file(&spec).expect("rm spec");
    let missing = cdi_findings(&host, &cdi_dir);
    assert_eq!(missing.len(), 1, "{missing:#?}");
    assert_eq!(missing[0].severity, Severity::Error);
    assert!(
        missing[0]
            .message
            .starts_with("no CDI spec for demo (3 device(s): 0, 1, 3) in "),
        "{missing:#?}"
    );

    // A spec of ours that no profile owns.
    generate(&host, &cdi_dir);
    std::fs::copy(&spec, cdi_dir.join("devinject.io-gone.json")).expect("copy spec");
    let orphan: Vec<Finding> = cdi_findings(&host, &cdi_dir)
        .into_iter()
        .filter(|f| f.severity != Severity::Ok)
        .collect();
    assert_eq!(orphan.len(), 1, "{orphan:#?}");
    assert_eq!(orphan[0].severity, Severity::Warning);
    assert!(
        orphan[0].message.contains("belongs to no profile"),
        "{orphan:#?}"
    );
}

/// Specs written with `cdi generate --cdi-version 0.5.0` (no `additionalGids`, for an engine
/// that reads no newer CDI) are up to date as they are: doctor regenerates them fitted to the
/// version they were written for, not to the newest.
#[test]
fn doctor_reads_specs_fitted_to_an_older_cdi_as_fresh() {
    if !(require_root() && require_binary("mknod") && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo"]).expect("simulated host");
    // A node only its group may use: the unfitted spec carries the group (CDI 0.7.0).
    let accel1 = host.dev_root.join("demo/accel1");
    std::os::unix::fs::chown(&accel1, Some(0), Some(44)).expect("chgrp");
    std::fs::set_permissions(&accel1, std::fs::Permissions::from_mode(0o660)).expect("chmod");
    let cdi_dir = tmp.path().join("cdi");
    let spec = cdi_dir.join("devinject.io-demo.json");
    generate_with(
        &host,
        &cdi_dir,
        CdiRequest {
            newest_version: Some("0.5.0".parse().expect("version")),
            ..CdiRequest::default()
        },
    );
    let text = std::fs::read_to_string(&spec).expect("spec");
    assert!(text.contains("\"cdiVersion\": \"0.5.0\""), "{text}");
    assert!(!text.contains("additionalGids"), "{text}");
    let fitted = cdi_findings(&host, &cdi_dir);
    assert_eq!(fitted.len(), 1, "{fitted:#?}");
    assert_eq!(fitted[0].severity, Severity::Ok, "{fitted:#?}");

    // Unfitted, the group is in the spec, and that spec is fresh too.
    generate(&host, &cdi_dir);
    let text = std::fs::read_to_string(&spec).expect("spec");
    assert!(text.contains("\"cdiVersion\": \"0.7.0\""), "{text}");
    assert_eq!(cdi_findings(&host, &cdi_dir)[0].severity, Severity::Ok);
}

/// Specs written with `cdi generate --user-namespaces` (a finish hook naming each device's nodes)
/// are up to date as they are.
#[test]
fn doctor_reads_specs_for_user_namespaces_as_fresh() {
    if !(require_root() && require_binary("mknod") && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo"]).expect("simulated host");
    let cdi_dir = tmp.path().join("cdi");
    generate_with(
        &host,
        &cdi_dir,
        CdiRequest {
            user_namespaces: true,
            ..CdiRequest::default()
        },
    );
    let text = std::fs::read_to_string(cdi_dir.join("devinject.io-demo.json")).expect("spec");
    assert!(text.contains("--node"), "{text}");
    let fresh = cdi_findings(&host, &cdi_dir);
    assert_eq!(fresh.len(), 1, "{fresh:#?}");
    assert_eq!(fresh[0].severity, Severity::Ok, "{fresh:#?}");
}
