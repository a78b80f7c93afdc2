//! The runtime shim in front of the real runc: devices written into config.json, a container
//! asking for nothing left untouched, bad requests refused before runc runs.

use std::path::Path;

use devinject_tests::probe::Report;
use devinject_tests::runc::{
    container_id, describe, runc_path, shim_command, walkable_tempdir, Bundle,
};
use devinject_tests::sim::{assert_demo_granted_0_1, demo_host, demo_probe_args, SimHost};
use devinject_tests::skip::require_runc_demo;

fn bundle(dir: &Path, host: &SimHost, request: Option<&str>) -> Bundle {
    let args = demo_probe_args();
    let mut b = Bundle::new(&dir.join("bundle"), &args).unwrap();
    if let Some(r) = request {
        b.env(&format!("DEMO_VISIBLE_DEVICES={r}"));
    }
    b.bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    b
}

fn shim_cmd(host: &SimHost, runc: &str) -> Vec<String> {
    shim_command(&host.config, runc)
}

#[test]
fn shim_writes_devices_into_the_spec() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0,1"));
    let cmd = shim_cmd(&host, &runc_path());
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("shim")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
    // The devices live in the spec, where the runtime re-applies them itself.
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.dir.join("config.json")).unwrap()).unwrap();
    let devs = spec["linux"]["devices"].as_array().unwrap();
    assert!(devs
        .iter()
        .any(|d| d["path"] == "/dev/demo/accel0" && d["major"] == 10 && d["minor"] == 237));
    assert!(
        !devs.iter().any(|d| d["path"] == "/dev/demo/accel2"),
        "accel2 must never be granted"
    );
    let rules = spec["linux"]["resources"]["devices"].as_array().unwrap();
    assert!(rules
        .iter()
        .any(|r| r["allow"] == true && r["major"] == 10 && r["minor"] == 234));
}

#[test]
fn nothing_asked_leaves_the_bundle_untouched() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, None);
    b.write().unwrap();
    let before = std::fs::read(b.dir.join("config.json")).unwrap();
    let cmd = shim_cmd(&host, &runc_path());
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("noop")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        std::fs::read(b.dir.join("config.json")).unwrap(),
        before,
        "config.json changed"
    );
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(report.node("/dev/demo/accel0").kind, "missing");
    assert_eq!(report.node("/dev/demo/accel2").open, "EPERM");
}

#[test]
fn bad_request_fails_before_runc_and_reaches_the_runtime_log() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0,x;y"));
    b.write().unwrap();
    let before = std::fs::read(b.dir.join("config.json")).unwrap();
    let log = t.path().join("log.json");
    let mut cmd = shim_cmd(&host, &runc_path());
    cmd.extend([
        "--log".into(),
        log.to_string_lossy().into_owned(),
        "--log-format".into(),
        "json".into(),
    ]);
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("bad")).unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "request error exit code: {}",
        describe(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("x;y") && err.contains("DEMO_VISIBLE_DEVICES"),
        "{err}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    let line: serde_json::Value = serde_json::from_str(logged.lines().last().unwrap()).unwrap();
    assert_eq!(line["level"], "error");
    assert!(line["msg"].as_str().unwrap().contains("x;y"), "{logged}");
    assert_eq!(
        std::fs::read(b.dir.join("config.json")).unwrap(),
        before,
        "nothing written on failure"
    );
}

#[test]
fn missing_runtime_is_a_clear_error() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0"));
    let cmd = shim_cmd(&host, "/nonexistent/runc");
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("nort")).unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/runc"),
        "{}",
        describe(&out)
    );
}

/// Regression: in a user namespace runc binds a `linux.devices` node from the host path equal to
/// its container path, so nodes from a dev root other than /dev failed the start. Such nodes are
/// now bind mounts in the spec; the finish hook mounts the files into the mount namespace the
/// user namespace owns.
#[test]
fn user_namespace_nodes_were_bound_from_the_container_path() {
    if !require_runc_demo() {
        return;
    }
    let t = walkable_tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let mut b = bundle(t.path(), &host, Some("0,1"));
    b.user_namespace(100_000, 65_536);
    let cmd = shim_cmd(&host, &runc_path());
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("userns")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
}
