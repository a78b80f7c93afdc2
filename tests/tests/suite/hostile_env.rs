//! Environment isolation: nothing the hook or the shim runs inherits the container's
//! environment (the CVE-2025-23266 "NVIDIAScape" class: a hook that inherited the image's
//! `LD_PRELOAD` loaded the image's library as root on the host).
//!
//! The test image's `process.env` sets `LD_PRELOAD` and `LD_AUDIT` to a library of the image that
//! leaves a marker wherever it is loaded (the host's temp dir when reachable, else the root it
//! runs in), `LD_LIBRARY_PATH` to an image directory holding that library as `libgcc_s.so.1`
//! (which the hook and the shim load), and `PATH` with image directories first, where an
//! `ldconfig` leaves a marker; the image's own `/sbin/ldconfig` leaves one too (both stay quiet
//! for `-p`: the probe in the container lists the cache with it). Every program the image holds is static (busybox) or a script, so
//! any marker means a leak. A control shows the detector works: a createContainer hook without
//! an explicit `env`, which runc runs with the container's env, is caught at once.

use std::path::{Path, PathBuf};

use devinject_tests::bins::bin;
use devinject_tests::cprog::{ldconfig_recorder, markers_in, preload_marker, RECORD};
use devinject_tests::probe::Report;
use devinject_tests::runc::{container_id, describe, runc_path, shim_command, Bundle};
use devinject_tests::sim::{demo_host, demo_probe_args, set_config, SimHost, LIB, SONAME};
use devinject_tests::skip::{require, require_binary, require_runc_demo};
use serde_json::json;

fn ready() -> bool {
    require_runc_demo()
        && require_binary("/bin/true")
        && require(
            Path::new("/usr/include/stdio.h").exists(),
            "needs libc6-dev (headers and the static libc for the C helpers)",
        )
}

struct Rig {
    _t: tempfile::TempDir,
    host: SimHost,
    /// Host directory the markers of processes on the host land in.
    markers: PathBuf,
    bundle: Bundle,
}

fn script_marker(markers: &Path, what: &str) -> String {
    format!(
        "{{ echo \"$0 $*\" >> {m}/devinject-marker-{what}; }} 2>/dev/null || echo \"$0 $*\" >> /devinject-marker-{what}\n",
        m = markers.display()
    )
}

/// A demo host and the hostile image asking for devices 0 and 1.
fn rig() -> Rig {
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let markers = t.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    let args = demo_probe_args();
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    let rootfs = b.rootfs();
    let lib = rootfs.join("preload/marker.so");
    preload_marker(&lib, &markers).unwrap();
    std::fs::copy(&lib, rootfs.join("preload/libgcc_s.so.1")).unwrap();
    std::fs::create_dir_all(rootfs.join("evil-bin")).unwrap();
    let exec = |p: &Path, text: String| {
        std::fs::write(p, text).unwrap();
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    // The container's own probe runs `ldconfig -p` through its PATH: that is its business.
    for name in ["ldconfig", "sh", "true"] {
        exec(
            &rootfs.join("evil-bin").join(name),
            format!(
                "#!/bin/busybox sh\ncase \"$1\" in -p) exec /sbin/ldconfig.real \"$@\";; esac\n{}exit 1\n",
                script_marker(&markers, &format!("path-{name}"))
            ),
        );
    }
    std::fs::rename(
        rootfs.join("sbin/ldconfig"),
        rootfs.join("sbin/ldconfig.real"),
    )
    .unwrap();
    exec(
        &rootfs.join("sbin/ldconfig"),
        format!(
            "#!/bin/busybox sh\ncase \"$1\" in -p) exec /sbin/ldconfig.real \"$@\";; esac\n{}exec /sbin/ldconfig.real \"$@\"\n",
            script_marker(&markers, "image-ldconfig")
        ),
    );
    let host_lib = lib.display().to_string();
    let host_dir = rootfs.join("preload").display().to_string();
    let host_bin = rootfs.join("evil-bin").display().to_string();
    b.spec["process"]["env"] = json!([
        format!("LD_PRELOAD={host_lib}:/preload/marker.so"),
        format!("LD_AUDIT={host_lib}:/preload/marker.so"),
        format!("LD_LIBRARY_PATH={host_dir}:/preload"),
        format!("PATH={host_bin}:/evil-bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        "DEMO_VISIBLE_DEVICES=0,1",
    ]);
    Rig {
        _t: t,
        host,
        markers,
        bundle: b,
    }
}

/// Every marker left anywhere: the host marker dir and the rootfs's `/`.
fn markers(rig: &Rig) -> Vec<String> {
    let mut m = markers_in(&rig.markers);
    m.extend(markers_in(&rig.bundle.rootfs()));
    m
}

/// The container started, got both devices and the library with a fresh cache, and no marker
/// was left.
fn assert_clean(rig: &Rig, out: &std::process::Output, ctx: &str) {
    let full = format!("{ctx}: {}", describe(out));
    assert!(out.status.success(), "{full}");
    let left = markers(rig);
    assert!(
        left.is_empty(),
        "{ctx}: the container's env reached a helper:\n  {}\n{full}",
        left.join("\n  ")
    );
    let r = Report::parse(&String::from_utf8_lossy(&out.stdout));
    for n in ["/dev/demo/accel0", "/dev/demo/accel1"] {
        assert_eq!(r.node(n).open, "ok", "{n}: {full}");
    }
    assert!(r.lib(LIB).present, "{full}");
    assert!(
        r.lib(SONAME).in_ldcache,
        "the linker cache lists the library: {full}"
    );
}

fn hook_entry(config: &Path, env: Option<Vec<String>>) -> serde_json::Value {
    let mut e = json!({
        "path": bin("devinject-hook"),
        "args": ["devinject-hook", "--config", config],
        "timeout": 30,
    });
    if let Some(env) = env {
        e["env"] = json!(env);
    }
    e
}

/// The hook at createRuntime and at prestart, with an explicit empty env and with none at all
/// (runc then passes its own env, never the container's).
#[test]
fn hook_helpers_never_see_the_image_env() {
    if !ready() {
        return;
    }
    for (stage, env) in [
        ("createRuntime", Some(Vec::new())),
        ("createRuntime", None),
        ("prestart", None),
    ] {
        let ctx = format!("{stage} with env {env:?}");
        let mut rig = rig();
        let entry = hook_entry(&rig.host.config, env);
        rig.bundle.push_hook(stage, entry);
        let out = rig.bundle.run(&container_id("env")).unwrap();
        assert_clean(&rig, &out, &ctx);
    }
}

/// The shim and its finish hook; the finish hook's entry has `"env": []`.
#[test]
fn shim_helpers_never_see_the_image_env() {
    if !ready() {
        return;
    }
    let rig = rig();
    let cmd = shim_command(&rig.host.config, &runc_path());
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = rig.bundle.run_with(&refs, &container_id("env")).unwrap();
    assert_clean(&rig, &out, "shim");
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rig.bundle.dir.join("config.json")).unwrap())
            .unwrap();
    let hooks = spec["hooks"]["createRuntime"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["env"], json!([]), "{hooks:?}");
    assert_eq!(hooks[0]["path"], json!(bin("devinject-hook")), "{hooks:?}");
}

/// The ldconfig the hook runs is the one the host config names, run chrooted in the rootfs
/// with an empty environment and `/` as its working directory: a static recorder stands in for
/// it and writes what it saw into the rootfs.
#[test]
fn ldconfig_is_the_hosts_run_chrooted_with_an_empty_env() {
    if !ready() {
        return;
    }
    for shim in [false, true] {
        let mut rig = rig();
        let recorder = rig.markers.with_file_name("ldconfig-recorder");
        ldconfig_recorder(&recorder).unwrap();
        set_config(&rig.host.config, "ldconfig", &format!("{:?}", recorder)).unwrap();
        // Always ldconfig: the hook's own cache writer would not run it for this plain image.
        set_config(&rig.host.config, "ldcache", "\"ldconfig\"").unwrap();
        let out = if shim {
            let cmd = shim_command(&rig.host.config, &runc_path());
            let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
            rig.bundle.run_with(&refs, &container_id("env")).unwrap()
        } else {
            let entry = hook_entry(&rig.host.config, None);
            rig.bundle.push_hook("createRuntime", entry);
            rig.bundle.run(&container_id("env")).unwrap()
        };
        let ctx = format!("shim {shim}: {}", describe(&out));
        assert!(out.status.success(), "{ctx}");
        let record = std::fs::read_to_string(hostile_path(&rig.bundle.rootfs(), RECORD))
            .unwrap_or_else(|e| panic!("no record in the rootfs ({e}): {ctx}"));
        let lines: Vec<&str> = record.lines().collect();
        assert_eq!(
            lines,
            [
                "arg ldconfig",
                "arg -X",
                "arg -C",
                // Written on a private tmpfs, then installed as /etc/ld.so.cache by the hook.
                "arg /dev/ld.so.cache",
                "arg -f",
                "arg /etc/ld.so.conf",
                "arg /usr/lib",
                "cwd /",
                "rootfs yes",
                "end",
            ],
            "no env line may appear: {ctx}"
        );
        assert!(markers(&rig).is_empty(), "{:?}: {ctx}", markers(&rig));
    }
}

fn hostile_path(rootfs: &Path, at: &str) -> PathBuf {
    devinject_tests::hostile::host(rootfs, at)
}

/// The control: a createContainer hook without an explicit `env` runs with the container's env
/// (runc 1.1 sets it in its init before running those hooks). A dynamic host binary there loads
/// the image's `LD_PRELOAD`, and the marker proves this test's detector sees such a leak.
#[test]
fn control_a_create_container_hook_without_env_loads_the_image_preload() {
    if !ready() {
        return;
    }
    let mut rig = rig();
    rig.bundle.push_hook(
        "createContainer",
        json!({ "path": "/bin/true", "args": ["true"], "timeout": 30 }),
    );
    let out = rig.bundle.run(&container_id("env")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let left = markers(&rig);
    assert!(
        left.iter()
            .any(|m| m.contains("/bin/true") || m.contains("coreutils")),
        "the control must leave a marker: {left:?}\n{}",
        describe(&out)
    );
}
