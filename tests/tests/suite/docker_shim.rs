//! `docker run --runtime=devinject` with a real, private docker engine (see
//! `devinject_tests::docker`): the runtime shim `devinject-runtime` writes the granted devices into
//! the container's spec, so the container sees them and nothing else; a request that cannot be
//! granted fails `docker run` with our message; a container that asks for nothing starts exactly
//! as with plain runc; and the grant, held in the spec, survives `docker update` / `runc update`
//! on a running container.
//!
//! The same updates are run with the hook-only path (`devinject-hook` added as a `createRuntime`
//! hook by a wrapper runtime, the way legacy runtime wrappers do it, and with plain runc). On
//! this host (cgroup v1, cgroupfs driver) the hook's grant survives them too; the comment on
//! `hook_only_grant_survives_updates_on_cgroup_v1_cgroupfs` gives the measurement, the reason, and
//! the setups where it does not.

use std::path::Path;
use std::process::Output;

use devinject_tests::bins::bin;
use devinject_tests::docker::{
    hook_only_runtime, runc_path, shim_runtime, Engine, HOOK_ONLY, IMAGE, SHIM,
};
use devinject_tests::probe::{probe_args, Report};
use devinject_tests::runc::{container_id, describe, Bundle};
use devinject_tests::sim::{
    self, assert_demo_granted_0_1, demo_host, demo_probe_args, SimHost, ACCELS, CTL,
};
use devinject_tests::skip::{require, require_binary, require_root};
use serde_json::Value;

fn ready() -> bool {
    require_root()
        && require_binary("containerd")
        && require_binary("containerd-shim-runc-v2")
        && require_binary("dockerd")
        && require_binary("docker")
        && require_binary("runc")
        && require_binary("tar")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
}

/// A simulated demo host and an engine with the shim and the hook-only wrapper registered for
/// it, with the busybox image imported. Fields drop in order: the engine before the host's dir.
struct Rig {
    engine: Engine,
    host: SimHost,
    _tmp: tempfile::TempDir,
}

impl Rig {
    fn start() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let host = demo_host(&tmp.path().join("host"), &["demo"]).unwrap();
        let engine =
            Engine::start(&[shim_runtime(&host.config), hook_only_runtime(&host.config)]).unwrap();
        engine.import_busybox().unwrap();
        Self {
            engine,
            host,
            _tmp: tmp,
        }
    }

    /// `-v <host accel2>:/dev/demo/accel2`: present in the container, never granted.
    fn accel2_bind(&self) -> String {
        format!(
            "{}:/dev/demo/accel2",
            self.host.dev_root.join("demo/accel2").display()
        )
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn docker_run_demo_grants_exactly_the_requested_devices() {
    if !ready() {
        return;
    }
    let rig = Rig::start();
    let bind = rig.accel2_bind();
    let cmd = demo_probe_args();
    let mut args = vec![
        "run",
        "--rm",
        "--runtime=devinject",
        "-e",
        "DEMO_VISIBLE_DEVICES=0,1",
        "-v",
        &bind,
        IMAGE,
    ];
    args.extend(strs(&cmd));
    let out = rig.engine.docker(&args);
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&Report::parse(&stdout(&out)), &out);
}

#[test]
fn docker_run_real_kvm_opens() {
    if !ready() || !require(Path::new("/dev/kvm").exists(), "needs /dev/kvm") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = sim::real_host_config(tmp.path(), &["kvm", "fuse"]).unwrap();
    let engine = Engine::start(&[shim_runtime(&config)]).unwrap();
    engine.import_busybox().unwrap();
    let cmd = probe_args(&["/dev/kvm", "/dev/fuse"], &[]);
    let mut args = vec![
        "run",
        "--rm",
        "--runtime=devinject",
        "-e",
        "KVM_VISIBLE_DEVICES=all",
        IMAGE,
    ];
    args.extend(strs(&cmd));
    let out = engine.docker(&args);
    assert!(out.status.success(), "{}", describe(&out));
    Report::parse(&stdout(&out)).assert_kvm_only(&describe(&out));
}

/// A detached container (`sleep`) with the demo request, run by `runtime`.
fn run_detached_demo(rig: &Rig, runtime: &str) -> String {
    rig.engine
        .docker_ok(&[
            "run",
            "--detach",
            &format!("--runtime={runtime}"),
            "-e",
            "DEMO_VISIBLE_DEVICES=0,1",
            IMAGE,
            "sleep",
            "3600",
        ])
        .unwrap()
}

/// Probes every demo node from inside the running container `id` with `docker exec`.
fn probe_running(rig: &Rig, id: &str) -> Report {
    let cmd = demo_probe_args();
    let mut args = vec!["exec", id];
    args.extend(strs(&cmd));
    let out = rig.engine.docker(&args);
    assert!(out.status.success(), "{}", describe(&out));
    Report::parse(&stdout(&out))
}

/// The `open` results of accel0, accel1 and ctl, the granted nodes.
fn granted_opens(r: &Report) -> Vec<String> {
    [ACCELS[0].0, ACCELS[1].0, CTL.0]
        .iter()
        .map(|n| r.node(&format!("/dev/demo/{n}")).open.clone())
        .collect()
}

fn read_trimmed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// What the container's device cgroup and cpu.shares say, for assertion messages.
fn cgroup_state(rig: &Rig, id: &str) -> String {
    let devices = rig.engine.cgroup_dir(id, "devices").unwrap();
    format!(
        "devices.list of {id}:\n{}",
        std::fs::read_to_string(devices.join("devices.list")).unwrap_or_default()
    )
}

fn cpu_shares(rig: &Rig, id: &str) -> String {
    read_trimmed(&rig.engine.cgroup_dir(id, "cpu").unwrap().join("cpu.shares"))
}

/// The profile's env (`DEMO_DRIVER_VERSION=1.0`) is written into the spec's `process.env`, so the
/// container's init process has it. Measured: `docker exec` processes do not, because dockerd
/// builds an exec's env from its own record of the container (`Config.Env`, which the runtime
/// cannot change), not from the spec. Images that need the variable in exec'd processes must
/// set it themselves or read it from the init process.
#[test]
fn profile_env_reaches_the_init_process_but_not_docker_exec() {
    if !ready() {
        return;
    }
    let rig = Rig::start();
    let id = run_detached_demo(&rig, SHIM);
    let init_env = rig
        .engine
        .docker_ok(&["exec", &id, "sh", "-c", "tr '\\0' '\\n' < /proc/1/environ"])
        .unwrap();
    assert!(
        init_env.lines().any(|l| l == "DEMO_DRIVER_VERSION=1.0"),
        "{init_env}"
    );
    let exec_env = rig.engine.docker_ok(&["exec", &id, "env"]).unwrap();
    assert!(
        exec_env.lines().any(|l| l == "DEMO_VISIBLE_DEVICES=0,1"),
        "{exec_env}"
    );
    assert!(
        !exec_env.contains("DEMO_DRIVER_VERSION"),
        "measured: docker exec does not see the spec's env; if it does now, update this test: {exec_env}"
    );
}

/// The state of the demo grant through an update cycle of a running container.
struct UpdateCycle {
    before: Report,
    after_docker_update: Report,
    after_runc_update: Report,
    /// The `linux.resources.devices` rules of the spec runc was given.
    spec_rules: Vec<Value>,
    /// `devices.list` after both updates, for failure messages.
    cgroup_after: String,
}

/// Runs a detached demo container with `runtime`, probes it, runs `docker update --cpu-shares
/// 512`, probes again, runs `runc --root <docker's runc root for runtime> update --cpu-share 256`
/// (checking both reached the cgroup), and probes a third time.
fn update_cycle(rig: &Rig, runtime: &str) -> UpdateCycle {
    let id = run_detached_demo(rig, runtime);
    let before = probe_running(rig, &id);
    rig.engine
        .docker_ok(&["update", "--cpu-shares", "512", &id])
        .unwrap();
    assert_eq!(
        cpu_shares(rig, &id),
        "512",
        "docker update must have reached the cgroup"
    );
    let after_docker_update = probe_running(rig, &id);
    let runc_root = rig.engine.runc_root(&id).unwrap();
    let out = std::process::Command::new(runc_path())
        .arg("--root")
        .arg(&runc_root)
        .args(["update", "--cpu-share", "256", &id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "runc --root {} update: {}",
        runc_root.display(),
        describe(&out)
    );
    assert_eq!(
        cpu_shares(rig, &id),
        "256",
        "runc update must have reached the cgroup"
    );
    let after_runc_update = probe_running(rig, &id);
    let spec: Value =
        serde_json::from_slice(&std::fs::read(rig.engine.bundle_config(&id)).unwrap()).unwrap();
    let spec_rules = spec["linux"]["resources"]["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    UpdateCycle {
        before,
        after_docker_update,
        after_runc_update,
        spec_rules,
        cgroup_after: cgroup_state(rig, &id),
    }
}

/// Whether the spec allows char device `major:minor`.
fn spec_allows(rules: &[Value], (_, major, minor): (&str, u32, u32)) -> bool {
    rules.iter().any(|r| {
        r["allow"] == true
            && r["type"] == "c"
            && r["major"] == major
            && r["minor"] == minor
            && r["access"]
                .as_str()
                .is_some_and(|a| a.contains('r') && a.contains('w'))
    })
}

fn needs_cpu_v1() -> bool {
    require(
        Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists(),
        "needs the cgroup v1 cpu controller (cpu.shares) to check that updates reach the cgroup",
    )
}

/// The shim puts the grant in the spec (`linux.resources.devices`), the list that every manager
/// re-applies (runc at create; systemd's DeviceAllow= on `daemon-reload` with the systemd
/// driver), so re-application cannot take the devices away. Here: the rules are in the spec and
/// the devices still open after `docker update` and `runc update` on the running container.
#[test]
fn shim_grant_survives_docker_update_and_runc_update() {
    if !ready() || !needs_cpu_v1() {
        return;
    }
    let rig = Rig::start();
    let c = update_cycle(&rig, SHIM);
    let ok = vec!["ok".to_owned(); 3];
    let ctx = &c.cgroup_after;
    assert_eq!(
        granted_opens(&c.before),
        ok,
        "before: {:#?}\n{ctx}",
        c.before
    );
    assert_eq!(c.before.node("/dev/demo/accel3").kind, "missing");
    assert_eq!(
        granted_opens(&c.after_docker_update),
        ok,
        "after docker update: {:#?}\n{ctx}",
        c.after_docker_update
    );
    assert_eq!(
        granted_opens(&c.after_runc_update),
        ok,
        "after runc update: {:#?}\n{ctx}",
        c.after_runc_update
    );
    for node in [ACCELS[0], ACCELS[1], CTL] {
        assert!(
            spec_allows(&c.spec_rules, node),
            "{node:?} not allowed in the spec: {:#?}",
            c.spec_rules
        );
    }
    assert!(
        !spec_allows(&c.spec_rules, ACCELS[2]),
        "accel2 was not asked for"
    );
}

/// Whether the private dockerd uses cgroup v1 with the cgroupfs driver (no systemd here).
fn v1_cgroupfs(engine: &Engine) -> bool {
    let info = engine
        .docker_ok(&["info", "--format", "{{.CgroupVersion}} {{.CgroupDriver}}"])
        .unwrap();
    info == "1 cgroupfs"
}

/// The hook-only path through docker: `devinject-hook` added as a `createRuntime` hook by a
/// wrapper runtime. The grant lives only in the cgroup (the spec does not hold it).
///
/// Measured here (cgroup v1, cgroupfs driver; runc 1.1.5, containerd 1.6.20, dockerd 20.10.24):
/// the grant SURVIVES both `docker update --cpu-shares` and `runc update --cpu-share`, and the
/// container's devices.list still holds the hook's `c 10:237 rwm` and `c 10:234 rwm`. Why:
/// `docker update` reaches `runc update`, and since runc 1.0 `runc update` sets `SkipDevices`
/// and leaves the device cgroup alone, precisely so that grants made outside the spec survive
/// (opencontainers/runc#2994, `update.go`). What does wipe a hook-only grant is a re-application
/// from the spec by another manager: with the systemd cgroup driver, `systemctl daemon-reload`
/// makes systemd rewrite the device cgroup (v1 rules, or its own v2 program) from the unit's
/// DeviceAllow= list, which only holds the spec's devices; that is NVIDIA's "Failed to
/// initialize NVML: Unknown Error". This host has no systemd, so that case cannot run here; the
/// shim test above shows why the shim is immune to it (the rules are in the spec). This test
/// pins the v1 / cgroupfs measurement and refuses to guess elsewhere (skipped locally, a failure
/// under CI, so a new setup gets measured and recorded here).
#[test]
fn hook_only_grant_survives_updates_on_cgroup_v1_cgroupfs() {
    if !ready() || !needs_cpu_v1() {
        return;
    }
    let rig = Rig::start();
    if !require(
        v1_cgroupfs(&rig.engine),
        "the hook-only update behaviour is measured for cgroup v1 with the cgroupfs driver only",
    ) {
        return;
    }
    let c = update_cycle(&rig, HOOK_ONLY);
    let ok = vec!["ok".to_owned(); 3];
    let ctx = &c.cgroup_after;
    assert_eq!(
        granted_opens(&c.before),
        ok,
        "the hook grants at start: {:#?}\n{ctx}",
        c.before
    );
    assert_eq!(
        granted_opens(&c.after_docker_update),
        ok,
        "measured: still granted after docker update: {:#?}\n{ctx}",
        c.after_docker_update
    );
    assert_eq!(
        granted_opens(&c.after_runc_update),
        ok,
        "measured: still granted after runc update: {:#?}\n{ctx}",
        c.after_runc_update
    );
    for node in [ACCELS[0], ACCELS[1]] {
        assert!(
            !spec_allows(&c.spec_rules, node),
            "the hook-only grant is not in the spec: {:#?}",
            c.spec_rules
        );
        let rule = format!("c {}:{} rwm", node.1, node.2);
        assert!(
            ctx.lines().any(|l| l == rule),
            "{rule} must still be in the cgroup: {ctx}"
        );
    }
}

/// The hook-only path with plain runc (no docker), the way `runc` invoked directly uses it: the
/// same measurement as `hook_only_grant_survives_updates_on_cgroup_v1_cgroupfs`, by `runc
/// update` alone (runc's own cgroupfs driver).
#[test]
fn hook_only_grant_survives_runc_update_on_cgroup_v1() {
    if !ready() || !needs_cpu_v1() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let mut b = Bundle::new(&t.path().join("bundle"), &["sleep", "3600"]).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0,1")
        .hook("createRuntime", &bin("devinject-hook"), &host.config);
    let c = b.start_detached(&container_id("upd")).unwrap();
    let probe_cmd = demo_probe_args();
    let probe = || {
        let out = c.exec(&strs(&probe_cmd)).unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        Report::parse(&stdout(&out))
    };
    let ok = vec!["ok".to_owned(); 3];
    let before = probe();
    assert_eq!(granted_opens(&before), ok, "{before:#?}");
    let out = c.update(&["--cpu-share", "512"]).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let after = probe();
    assert_eq!(
        granted_opens(&after),
        ok,
        "measured: still granted after runc update: {after:#?}"
    );
}

/// Replaces what legitimately differs between two containers (ids, hostnames, layer ids) with
/// fixed words, in any text.
fn normalize(text: &str, words: &[(&str, &str)]) -> String {
    let mut t = text.to_owned();
    for (from, to) in words {
        if !from.is_empty() {
            t = t.replace(from, to);
        }
    }
    t
}

/// The paths (`.linux.resources.devices[3]`) where `a` and `b` differ, with both values.
fn json_diff(a: &Value, b: &Value) -> Vec<String> {
    fn walk(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    let (va, vb) = (
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    );
                    walk(va, vb, format!("{path}.{k}"), out);
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                    walk(va, vb, format!("{path}[{i}]"), out);
                }
            }
            _ if a != b => out.push(format!("{path}: {a} != {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(a, b, String::new(), &mut out);
    out
}

/// mountinfo without what differs per container and per boot: mount ids, device numbers and
/// sources; keeps the mount point, its options, the fs type and the super options (with the
/// overlay's layer paths dropped).
fn mount_view(mountinfo: &str) -> Vec<String> {
    let list = |options: &[std::ffi::OsString]| {
        options
            .iter()
            .map(|o| o.to_string_lossy())
            .collect::<Vec<_>>()
            .join(",")
    };
    devinject_mountinfo::parse(mountinfo.as_bytes())
        .map(|mount| {
            let m = match mount {
                Ok(m) => m,
                Err(e) => return e.to_string(),
            };
            let mut super_options = m.super_options.clone();
            if m.fs_type == "overlay" {
                super_options.retain(|o| !o.to_string_lossy().contains('='));
            }
            format!(
                "{} {} {} {}",
                m.mount_point.display(),
                list(&m.mount_options),
                m.fs_type.to_string_lossy(),
                list(&super_options)
            )
        })
        .collect()
}

/// What a container looks like from the inside: its mounts and every node under /dev.
fn inside_view(engine: &Engine, id: &str) -> (Vec<String>, String) {
    let mounts = engine
        .docker_ok(&["exec", id, "cat", "/proc/self/mountinfo"])
        .unwrap();
    let dev = engine
        .docker_ok(&[
            "exec",
            id,
            "sh",
            "-c",
            "find /dev -xdev | sort | xargs stat -c '%n %F %t:%T %a %u:%g'",
        ])
        .unwrap();
    (mount_view(&mounts), dev)
}

/// The parts of `docker inspect` that the runtime could be suspected of changing, with the
/// fields that differ between any two containers removed.
fn inspect_view(engine: &Engine, id: &str) -> Value {
    let text = engine.docker_ok(&["inspect", id]).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let c = &mut v[0];
    let obj = c.as_object_mut().unwrap();
    for k in [
        "Id",
        "Created",
        "Name",
        "State",
        "ResolvConfPath",
        "HostnamePath",
        "HostsPath",
        "LogPath",
        "GraphDriver",
        "NetworkSettings",
    ] {
        obj.remove(k);
    }
    c["HostConfig"].as_object_mut().unwrap().remove("Runtime");
    c["Config"].as_object_mut().unwrap().remove("Hostname");
    c.clone()
}

/// A container that asks for nothing is passed through untouched: the spec runc receives is the
/// one docker wrote, and the container sees the same mounts, /dev and device cgroup as with
/// `--runtime=runc`.
#[test]
fn no_request_starts_exactly_as_with_runc() {
    if !ready() {
        return;
    }
    let rig = Rig::start();
    let engine = &rig.engine;
    let start = |runtime: &str| {
        engine
            .docker_ok(&[
                "run",
                "--detach",
                &format!("--runtime={runtime}"),
                IMAGE,
                "sleep",
                "3600",
            ])
            .unwrap()
    };
    let ours = start(SHIM);
    let plain = start("runc");
    let words = |id: &str| -> Vec<(String, String)> {
        let layer = engine
            .docker_ok(&["inspect", "--format", "{{.GraphDriver.Data.MergedDir}}", id])
            .unwrap();
        let layer = Path::new(&layer)
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        vec![
            (id.to_owned(), "<id>".to_owned()),
            (id[..12].to_owned(), "<short-id>".to_owned()),
            (layer, "<layer>".to_owned()),
        ]
    };
    let spec = |id: &str| {
        let text = std::fs::read_to_string(engine.bundle_config(id)).unwrap();
        let w = words(id);
        let w: Vec<(&str, &str)> = w.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        normalize(&text, &w)
    };
    let (ours_spec, plain_spec) = (spec(&ours), spec(&plain));
    let parse = |t: &str| -> Value { serde_json::from_str(t).unwrap() };
    let diff = json_diff(&parse(&ours_spec), &parse(&plain_spec));
    assert!(
        diff.is_empty(),
        "the shim changed the spec of a container that asked for nothing: {diff:#?}"
    );
    assert!(
        ours_spec == plain_spec,
        "the shim rewrote config.json (same content, other bytes)"
    );
    let diff = json_diff(&inspect_view(engine, &ours), &inspect_view(engine, &plain));
    assert!(diff.is_empty(), "docker inspect differs: {diff:#?}");
    let (ours_mounts, ours_dev) = inside_view(engine, &ours);
    let (plain_mounts, plain_dev) = inside_view(engine, &plain);
    assert_eq!(ours_mounts, plain_mounts, "mounts differ");
    assert_eq!(ours_dev, plain_dev, "/dev differs");
    let list = |id: &str| {
        read_trimmed(
            &engine
                .cgroup_dir(id, "devices")
                .unwrap()
                .join("devices.list"),
        )
    };
    if Path::new("/sys/fs/cgroup/devices").exists() {
        assert_eq!(list(&ours), list(&plain), "device cgroups differ");
    }
    assert!(!ours_dev.contains("/dev/demo"), "{ours_dev}");
}

/// An unknown id and a malformed request fail `docker run`, and docker shows our message.
#[test]
fn bad_requests_fail_docker_run_with_our_message() {
    if !ready() {
        return;
    }
    let rig = Rig::start();
    for (request, expect) in [("9", "unknown device"), ("garbage;x", "is malformed")] {
        let env = format!("DEMO_VISIBLE_DEVICES={request}");
        let out = rig.engine.docker(&[
            "run",
            "--rm",
            "--runtime=devinject",
            "-e",
            &env,
            IMAGE,
            "true",
        ]);
        assert!(!out.status.success(), "{request}: {}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(expect),
            "{request}: want {expect:?} in docker's error: {err}"
        );
        assert!(err.contains("DEMO_VISIBLE_DEVICES"), "{request}: {err}");
        assert!(err.contains(request), "{request}: {err}");
    }
    let left = rig.engine.docker_ok(&["ps", "--all", "--quiet"]).unwrap();
    assert_eq!(left, "", "no container may be left behind");
}
