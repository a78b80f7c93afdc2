//! podman with the hooks.d file `devinject-ctl runtime configure --runtime podman` writes: the
//! real `devinject-hook` runs at `createRuntime` for every container, and a container asking for
//! demo devices 0 and 1 (by env, or by the device plugin's annotation) sees exactly those, with
//! the un-granted `accel2` (bind-mounted in) denied by the cgroup and the demo library
//! read-only and in the linker cache; a container asking for nothing starts as usual.
//!
//! podman runs privately ([`devinject_tests::podman`]) with `runtime = "runc"` and
//! `default_ulimits = []`, which this machine needs (see that module and
//! docs/runtime-config.md). The hooks.d file is written below a temp root and podman is pointed
//! at that directory with `--hooks-dir`, as root podman reads `/etc/containers/oci/hooks.d` on a
//! host. Needs root, podman, conmon, runc, busybox, gcc and the built binaries; skipped
//! otherwise (fails under `CI=true`).

use devinject_tests::bins::bin;
use devinject_tests::cri::CgroupParent;
use devinject_tests::daemons::{run_ok, short_tempdir};
use devinject_tests::podman::{ready, Podman};
use devinject_tests::probe::Report;
use devinject_tests::sim::{assert_demo_granted_0_1_in, demo_host, demo_probe_args};

#[test]
fn podman_runs_the_hooksd_hook_devinject_ctl_writes() {
    if !ready() {
        return;
    }
    let tmp = short_tempdir("pod").expect("temp dir");
    let dir = tmp.path();
    let host = demo_host(&dir.join("sim"), &["demo"]).expect("simulated host");

    // The host's configuration, below a temp root (a host's root exists: devinject-ctl opens
    // it as the directory every host path is resolved in, and creates nothing above it).
    let root = dir.join("host");
    std::fs::create_dir_all(&root).expect("the temp root");
    let mut configure = std::process::Command::new(bin("devinject-ctl"));
    configure
        .args(["runtime", "configure", "--runtime", "podman", "--root"])
        .arg(&root)
        .arg("--hook-path")
        .arg(bin("devinject-hook"))
        .arg("--hook-config")
        .arg(&host.config);
    let out = run_ok(configure).expect("devinject-ctl runtime configure --runtime podman");
    assert!(
        out.contains("create /etc/containers/oci/hooks.d/devinject.json"),
        "{out}"
    );
    let hooks_dir = root.join("etc/containers/oci/hooks.d");

    let podman = Podman::new(&dir.join("podman"), &hooks_dir).expect("podman");
    let rootfs = dir.join("rootfs");
    podman.import_busybox(&rootfs).expect("import busybox");
    let name = dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let cgroups = CgroupParent::new(&name);
    let cgroup_parent = cgroups.path();

    for (by, flag, value) in [
        ("env", "--env", "DEMO_VISIBLE_DEVICES=0,1"),
        // podman 4.3 splits `--annotation` values on commas (a CSV string slice): quote it.
        (
            "annotation",
            "--annotation",
            "\"devinject.io/demo.devices=0,1\"",
        ),
    ] {
        let out = podman
            .run_demo_probe(&cgroup_parent, &host, &[flag, value])
            .expect("podman run");
        let ctx = format!(
            "request by {by}: {:?}\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{ctx}");
        assert_demo_granted_0_1_in(&Report::parse(&String::from_utf8_lossy(&out.stdout)), &ctx);
    }

    // Nothing asked: the hook returns at once and the container sees no demo node.
    let out = podman
        .run_in_image(&cgroup_parent, &[], &demo_probe_args())
        .expect("podman run");
    assert!(out.status.success(), "{out:?}");
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    for n in ["accel0", "accel1", "ctl"] {
        assert_eq!(
            report.node(&format!("/dev/demo/{n}")).kind,
            "missing",
            "{out:?}"
        );
    }
    drop(podman);
    drop(cgroups);
}
