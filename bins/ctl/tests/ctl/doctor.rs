//! `devinject-ctl doctor` on fake host roots (temp dirs passed as `--root`): a host with a
//! configured containerd, a broken profile, a shim that is not there, missing devices, a
//! systemd cgroup driver without systemd, the kubelet's sockets. Checks the findings and the
//! documented exit codes (0 healthy, 6 broken; `--strict` counts warnings). The case with
//! real (mknod'ed) devices and a gcc-built library needs root and is skipped otherwise.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use devinject_ctl::doctor::{self, DoctorRequest, Finding, Section, Severity};
use devinject_engine_config::{configure, ConfigureRequest, Engine, HostPaths, Mode};
use devinject_tests::sim;
use devinject_tests::skip::{require_binary, require_root};

const HYBRID: &str = "\
35 25 0:30 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
40 35 0:35 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices
";

/// A little-endian ELF64 header with no program interpreter: what a static ldconfig looks like
/// to doctor.
fn static_elf() -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2;
    b[5] = 1;
    b
}

fn write(root: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(&p, bytes).expect("write");
    p
}

fn executable(root: &Path, rel: &str, bytes: &[u8]) {
    let p = write(root, rel, bytes);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A host with runc, containerd (configured for devinject with the shim, which is installed),
/// a hybrid cgroup layout, a static ldconfig and the shipped kvm profile but no /dev/kvm.
fn configured_host(root: &Path) {
    write(root, "proc/1/mountinfo", HYBRID.as_bytes());
    executable(root, "usr/sbin/runc", b"#!/bin/sh\n");
    executable(root, "usr/bin/containerd", b"#!/bin/sh\n");
    executable(root, "usr/local/bin/devinject-runtime", b"#!/bin/sh\n");
    executable(root, "sbin/ldconfig", &static_elf());
    std::fs::create_dir_all(root.join("dev")).expect("mkdir dev");
    std::fs::create_dir_all(root.join("sys")).expect("mkdir sys");
    let profiles = root.join("etc/devinject/profiles");
    std::fs::create_dir_all(&profiles).expect("mkdir profiles");
    std::fs::copy(
        sim::shipped_profiles().join("kvm.toml"),
        profiles.join("kvm.toml"),
    )
    .expect("copy profile");
    write(
        root,
        "etc/containerd/config.toml",
        b"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n",
    );
    let mut req = ConfigureRequest::new(Engine::Containerd);
    req.mode = Some(Mode::Shim);
    req.paths = HostPaths::under_root(root);
    configure(&req).expect("configure containerd");
}

fn ctl_doctor(root: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_devinject-ctl"))
        .arg("doctor")
        .arg("--root")
        .arg(root)
        .args(extra)
        .output()
        .expect("run devinject-ctl doctor")
}

fn report(root: &Path) -> Vec<Finding> {
    doctor::run(&DoctorRequest {
        root: root.to_path_buf(),
        ..DoctorRequest::default()
    })
    .findings
}

fn find(findings: &[Finding], section: Section, severity: Severity) -> Vec<&Finding> {
    findings
        .iter()
        .filter(|f| f.section == section && f.severity == severity)
        .collect()
}

/// What doctor finds on the simulated host `host`, through its host config.
fn host_findings(host: &sim::SimHost) -> Vec<Finding> {
    doctor::run(&DoctorRequest {
        host_config: Some(host.config.clone()),
        ..DoctorRequest::default()
    })
    .findings
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn configured_containerd_host_passes_with_warnings_and_fails_strict() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    configured_host(root);

    let out = ctl_doctor(root, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ok     containerd (/usr/bin/containerd, cgroupfs cgroup driver): runtime \"devinject\" runs the shim /usr/local/bin/devinject-runtime, in /etc/containerd/conf.d/99-devinject.toml"),
        "{text}"
    );
    assert!(
        text.contains("devices controller (v1) at /sys/fs/cgroup/devices"),
        "{text}"
    );
    assert!(text.contains("WARN   kvm: no devices found"), "{text}");
    assert!(
        text.contains("ok     /sbin/ldconfig is statically linked"),
        "{text}"
    );
    assert!(text.contains("0 error(s), 1 warning(s)"), "{text}");

    let strict = ctl_doctor(root, &["--strict"]);
    assert_eq!(strict.status.code(), Some(6), "{}", show(&strict));

    let json = ctl_doctor(root, &["--json"]);
    assert_eq!(json.status.code(), Some(0), "{}", show(&json));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v["errors"], 0);
    assert_eq!(v["warnings"], 1);
    assert_eq!(v["broken"], false);
    let engines: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["section"] == "engines" && f["subject"] == "containerd")
        .collect();
    assert_eq!(engines.len(), 1, "{engines:?}");
    assert_eq!(engines[0]["severity"], "ok");
}

#[test]
fn broken_profile_is_an_error_naming_file_and_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    configured_host(root);
    write(
        root,
        "etc/devinject/profiles/tpu.toml",
        b"name = \"tpu\"\nresource = \"example.com/tpu\"\n[discovery]\nnodez = [\"apex_*\"]\n",
    );
    let out = ctl_doctor(root, &[]);
    assert_eq!(out.status.code(), Some(6), "{}", show(&out));
    let findings = report(root);
    let errors = find(&findings, Section::Profiles, Severity::Error);
    assert_eq!(errors.len(), 1, "{findings:#?}");
    assert_eq!(errors[0].subject, "/etc/devinject/profiles/tpu.toml");
    assert!(errors[0].message.contains("nodez"), "{}", errors[0].message);
    assert!(
        errors[0]
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("fail every container")),
        "{:?}",
        errors[0].fix
    );
    // The valid profile is still checked.
    assert_eq!(find(&findings, Section::Profiles, Severity::Ok).len(), 1);
}

#[test]
fn missing_shim_and_missing_devices() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    configured_host(root);
    std::fs::remove_file(root.join("usr/local/bin/devinject-runtime")).expect("rm shim");
    std::fs::copy(
        sim::shipped_profiles().join("demo.toml"),
        root.join("etc/devinject/profiles/demo.toml"),
    )
    .expect("copy demo");
    let findings = report(root);
    let errors = find(&findings, Section::Engines, Severity::Error);
    assert_eq!(errors.len(), 1, "{findings:#?}");
    assert!(
        errors[0]
            .message
            .contains("/usr/local/bin/devinject-runtime is not an executable file"),
        "{}",
        errors[0].message
    );
    let missing = find(&findings, Section::Devices, Severity::Warning);
    let subjects: Vec<&str> = missing.iter().map(|f| f.subject.as_str()).collect();
    assert_eq!(subjects, ["demo", "kvm"], "{findings:#?}");
    // Without devices nothing needs ldconfig or libraries.
    assert!(findings.iter().all(|f| f.section != Section::Libraries));
    assert_eq!(ctl_doctor(root, &[]).status.code(), Some(6));
}

#[test]
fn nothing_configured_and_systemd_driver_without_systemd_are_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(root, "proc/1/mountinfo", HYBRID.as_bytes());
    executable(root, "usr/bin/containerd", b"#!/bin/sh\n");
    write(
        root,
        "etc/containerd/config.toml",
        b"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n    SystemdCgroup = true\n",
    );
    let findings = report(root);
    let errors: Vec<&str> = find(&findings, Section::Engines, Severity::Error)
        .iter()
        .map(|f| f.message.as_str())
        .collect();
    assert!(
        errors.iter().any(|m| m.contains("systemd cgroup driver")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|m| m.contains("no container engine is configured")),
        "{errors:?}"
    );
    assert!(
        find(&findings, Section::Runtimes, Severity::Error)
            .iter()
            .any(|f| f.message.contains("neither runc nor crun")),
        "{findings:#?}"
    );
    // With systemd as init the same driver is fine.
    std::fs::create_dir_all(root.join("run/systemd/system")).expect("mkdir");
    let findings = report(root);
    assert!(!find(&findings, Section::Engines, Severity::Error)
        .iter()
        .any(|f| f.message.contains("systemd cgroup driver")));
}

#[test]
fn kubelet_sockets_and_cgroup_driver() {
    // Short: a unix socket path has at most 108 bytes.
    let tmp = devinject_tests::daemons::short_tempdir("doc").expect("tempdir");
    let root = tmp.path();
    configured_host(root);
    let kubelet = root.join("var/lib/kubelet");
    std::fs::create_dir_all(kubelet.join("device-plugins")).expect("mkdir");
    let _listener =
        UnixListener::bind(kubelet.join("device-plugins/kubelet.sock")).expect("bind socket");
    write(
        root,
        "var/lib/kubelet/config.yaml",
        b"kind: KubeletConfiguration\ncgroupDriver: systemd\n",
    );
    let findings = report(root);
    let kube: Vec<(Severity, &str)> = findings
        .iter()
        .filter(|f| f.section == Section::Kubelet)
        .map(|f| (f.severity, f.subject.as_str()))
        .collect();
    assert_eq!(
        kube,
        [
            (Severity::Ok, "device-plugins/kubelet.sock"),
            (Severity::Warning, "pod-resources/kubelet.sock"),
            (Severity::Error, "cgroupDriver"),
            (Severity::Warning, "cgroupDriver"),
        ],
        "{findings:#?}"
    );
}

#[test]
fn doctor_finds_the_simulated_devices_and_their_library() {
    if !(require_root() && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo"]).expect("simulated host");
    let config = host.config.to_str().expect("utf-8");
    let findings = host_findings(&host);
    let devices = find(&findings, Section::Devices, Severity::Ok);
    assert_eq!(devices.len(), 1, "{findings:#?}");
    assert_eq!(
        devices[0].message,
        "demo: 4 device(s): 0 (accel0), 1 (accel1), 2 (accel2), 3 (accel3); 1 control node(s)"
    );
    let libs = find(&findings, Section::Libraries, Severity::Ok);
    assert_eq!(
        libs[0].message,
        "demo: 1 library (libdemo.so.1.0.0), 1 binary, 0 other file(s)"
    );
    let host_config = find(&findings, Section::HostConfig, Severity::Ok);
    assert!(
        host_config[0].message.starts_with(config),
        "{host_config:?}"
    );
}

/// A config written for an earlier release, with `pod_resources_helper`, still loads; the
/// doctor warns that the key is ignored and says to remove it.
#[test]
fn an_obsolete_pod_resources_helper_key_is_a_warning() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    configured_host(root);
    let obsolete = |findings: &[Finding]| -> Vec<String> {
        findings
            .iter()
            .filter(|f| f.subject == "pod_resources_helper")
            .map(|f| format!("{:?}: {} / {:?}", f.severity, f.message, f.fix))
            .collect()
    };
    assert!(obsolete(&report(root)).is_empty());
    write(
        root,
        "etc/devinject/config.toml",
        b"pod_resources_helper = \"/opt/devinject/bin/devinject-podresources\"\n",
    );
    let found = obsolete(&report(root));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("Warning: pod_resources_helper is obsolete and ignored")
            && found[0].contains("remove pod_resources_helper from"),
        "{}",
        found[0]
    );
}

/// `--user`: which devices one host user can open with no devinject step at start, from the
/// nodes' owner, group and mode. A node open to all is usable; a group-only node is not for a
/// user outside the group (the finding names the node, its owner, group and mode and the fix),
/// and is through a supplementary group only with the engine keeping that group; a name
/// `/etc/passwd` lacks is an error.
#[test]
fn doctor_tells_which_devices_one_user_can_open_and_why() {
    if !(require_root() && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo"]).expect("simulated host");
    let run = |user: &str| {
        doctor::run(&DoctorRequest {
            host_config: Some(host.config.clone()),
            user: Some(user.to_owned()),
            ..DoctorRequest::default()
        })
        .findings
    };
    // A uid /etc/passwd has no line for: a user namespace's root, as userns-remap maps it.
    let open = run("4242");
    let ok = find(&open, Section::Access, Severity::Ok);
    assert_eq!(ok.len(), 1, "{open:#?}");
    assert!(
        ok[0]
            .message
            .starts_with("demo: user 4242 (uid 4242) can read and write ")
            && ok[0].message.ends_with("(as any user may)"),
        "{ok:#?}"
    );

    let screen = Command::new(env!("CARGO_BIN_EXE_devinject-ctl"))
        .args(["doctor", "--refusals", "0", "--user", "4242", "--config"])
        .arg(&host.config)
        .output()
        .expect("run devinject-ctl doctor");
    let text = String::from_utf8_lossy(&screen.stdout);
    assert!(
        text.contains("access for one user\n  ok     demo: user 4242 (uid 4242) can read"),
        "{}",
        show(&screen)
    );

    let ctl = host.dev_root.join("demo/ctl");
    nix::unistd::chown(&ctl, Some(0.into()), Some(4243.into())).expect("chown ctl");
    std::fs::set_permissions(&ctl, std::fs::Permissions::from_mode(0o660)).expect("chmod ctl");
    let closed = run("4242");
    let warned = find(&closed, Section::Access, Severity::Warning);
    assert_eq!(warned.len(), 1, "{closed:#?}");
    assert_eq!(
        warned[0].message,
        format!(
            "demo: user 4242 (uid 4242) cannot read and write {} (0:4243 0660) without \
             devinject's hook or shim",
            ctl.display()
        )
    );
    assert!(
        warned[0]
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("udev rule")),
        "{warned:#?}"
    );

    let found = doctor::devices::check(
        &DoctorRequest::default(),
        &devinject_hostconfig::HostConfig::load(Some(&host.config)).expect("host config"),
        &[
            devinject_discovery::profile_file::load(&host.profiles_dir.join("demo.toml"))
                .expect("demo profile"),
        ],
        &mut doctor::DoctorReport::default(),
    );
    let member = doctor::access::HostUser {
        shown: "4242".into(),
        uid: 4242,
        gid: Some(4242),
        groups: vec![4243],
    };
    let mut report = doctor::DoctorReport::default();
    let accounts = doctor::access::Accounts::read(&DoctorRequest::default()).expect("accounts");
    doctor::access::check(&accounts, &member, &found, &mut report);
    let info = find(&report.findings, Section::Access, Severity::Info);
    assert_eq!(info.len(), 1, "{report:#?}");
    assert!(
        info[0]
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("--group-add keep-groups")),
        "{info:#?}"
    );

    let unknown = run("no-such-user-here");
    let errors = find(&unknown, Section::Access, Severity::Error);
    assert_eq!(errors.len(), 1, "{unknown:#?}");
    assert!(errors[0]
        .message
        .starts_with("no user no-such-user-here in /etc/passwd"));
}

/// Devices discovery withdraws (here two whose ids collide) are named by doctor with their
/// problem, and the profile's other devices are still listed.
#[test]
fn doctor_names_a_withdrawn_device_and_lists_the_others() {
    if !(require_root() && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo"]).expect("simulated host");
    // accel2's id is its node's number; a second node ending in the same number collides with
    // it: both are withdrawn, the other three served.
    let text = std::fs::read_to_string(host.profiles_dir.join("demo.toml")).expect("profile");
    std::fs::write(
        host.profiles_dir.join("demo.toml"),
        text.replace(
            "nodes = [\"demo/accel[0-9]*\"]",
            "nodes = [\"demo/accel[0-9]*\", \"demo/spare*\"]",
        ),
    )
    .expect("write profile");
    sim::mknod(&host.dev_root.join("demo/spare2"), 10, 200, "0666").expect("mknod");
    let findings = host_findings(&host);
    let devices = find(&findings, Section::Devices, Severity::Ok);
    assert_eq!(devices.len(), 1, "{findings:#?}");
    assert!(
        devices[0]
            .message
            .starts_with("demo: 3 device(s): 0 (accel0), 1 (accel1), 3 (accel3);"),
        "{}",
        devices[0].message
    );
    let withdrawn: Vec<&str> = find(&findings, Section::Devices, Severity::Warning)
        .iter()
        .map(|f| f.message.as_str())
        .filter(|m| m.contains("withdrawn"))
        .collect();
    assert_eq!(withdrawn.len(), 2, "{findings:#?}");
    assert!(
        withdrawn.iter().all(|m| m.contains("both have id \"2\"")),
        "{withdrawn:?}"
    );
}
