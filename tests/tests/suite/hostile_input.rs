//! Malformed input: the hook binary fed states and bundles directly on stdin, and the shim given
//! broken bundles (a hook that runc kills on its timeout: `hostile_orphans.rs`).
//!
//! Each must fail with a first stderr line saying what is wrong, the documented exit code
//! (`crates/core/exit/src/lib.rs`, docs/hook.md), and nothing touched: the bundle (its `config.json` and
//! rootfs) is fingerprinted before and compared after, and the shim never hands over to runc.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use devinject_tests::bins::bin;
use devinject_tests::canary::HostGuard;
use devinject_tests::runc::{container_id, describe, runc_path, shim_command, Bundle};
use devinject_tests::sim::{demo_host, set_config, SimHost};
use devinject_tests::skip::require_runc_demo;
use serde_json::json;

/// The documented exit codes these tests expect.
const INPUT: i32 = 4;
const REQUEST: i32 = 5;

struct Rig {
    _t: tempfile::TempDir,
    host: SimHost,
    bundle: Bundle,
}

/// A demo host logging at the default level (so our error is the first line) and a valid bundle
/// asking for device 0 (written, not run).
fn rig() -> Rig {
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    set_config(&host.config, "log_level", "\"warn\"").unwrap();
    let mut bundle = Bundle::new(&t.path().join("bundle"), &["/bin/true"]).unwrap();
    bundle.env("DEMO_VISIBLE_DEVICES=0");
    bundle.write().unwrap();
    Rig {
        _t: t,
        host,
        bundle,
    }
}

/// A well-formed state for `bundle` at the createRuntime stage (pid: this test process, which
/// the hook must never get as far as touching).
fn state(bundle: &Path) -> serde_json::Value {
    json!({
        "ociVersion": "1.0.2-dev",
        "id": "malformed",
        "status": "creating",
        "pid": std::process::id(),
        "bundle": bundle,
    })
}

/// Runs the hook with `stdin`; the write may be cut short when the hook stops reading.
fn hook(config: &Path, stdin: &[u8]) -> Output {
    let mut child = Command::new(bin("devinject-hook"))
        .arg("--config")
        .arg(config)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// Asserts a clean refusal: exit `code`, first stderr line ours and containing `text`.
fn refused(out: &Output, code: i32, text: &str, ctx: &str) {
    let full = format!("{ctx}: {}", describe(out));
    assert_eq!(out.status.code(), Some(code), "{full}");
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("devinject: ") && first.contains(text),
        "first line {first:?} must say {text:?}: {full}"
    );
}

/// Runs `attempt` with the bundle fingerprinted just before: it must be refused (see
/// [`refused`]) and leave the bundle as it was.
fn refused_untouched(
    r: &Rig,
    name: &str,
    code: i32,
    text: &str,
    attempt: impl FnOnce() -> Output,
) -> Output {
    let g = HostGuard::new(vec![r.bundle.dir.clone()]);
    let out = attempt();
    refused(&out, code, text, name);
    g.assert_unchanged(name);
    out
}

/// Runs the hook on the rig's bundle with a well-formed state.
fn hook_on_bundle(r: &Rig) -> Output {
    let stdin = serde_json::to_vec(&state(&r.bundle.dir)).unwrap();
    hook(&r.host.config, &stdin)
}

/// Puts `bytes` in the bundle's `config.json`, or removes it for `None`.
fn put_config_json(r: &Rig, bytes: Option<&[u8]>) {
    let path = r.bundle.dir.join("config.json");
    match bytes {
        Some(b) => std::fs::write(&path, b).unwrap(),
        None => std::fs::remove_file(&path).unwrap(),
    }
}

/// `good` (a `config.json`) with `edit` applied.
fn edited(good: &[u8], edit: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(good).unwrap();
    edit(&mut v);
    serde_json::to_vec(&v).unwrap()
}

/// `good` followed by 16 MiB of spaces: past the hook's and the shim's limit.
fn oversize(good: &[u8]) -> Vec<u8> {
    let mut out = good.to_vec();
    out.extend(std::iter::repeat_n(b' ', 16 << 20));
    out
}

#[test]
fn hook_refuses_malformed_states() {
    if !require_runc_demo() {
        return;
    }
    let r = rig();
    let good = serde_json::to_vec(&state(&r.bundle.dir)).unwrap();
    let mut oversize = vec![b' '; (1 << 20) + 1];
    oversize.extend_from_slice(&good);
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut s = state(&r.bundle.dir);
        f(&mut s);
        serde_json::to_vec(&s).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "OCI state on stdin is not valid"),
        (
            "truncated",
            good[..good.len() / 2].to_vec(),
            "OCI state on stdin is not valid",
        ),
        (
            "garbage",
            b"\x00\xff\xfe{{{not json\x07".to_vec(),
            "OCI state on stdin is not valid",
        ),
        ("oversize", oversize, "larger than 1048576 bytes"),
        (
            "a JSON array",
            b"[1,2,3]".to_vec(),
            "OCI state on stdin is not valid",
        ),
        (
            "unknown ociVersion",
            with(&|s| s["ociVersion"] = json!("2.0.0")),
            "ociVersion \"2.0.0\" is not supported",
        ),
        (
            "no bundle",
            with(&|s| {
                s.as_object_mut().unwrap().remove("bundle");
            }),
            "missing field `bundle`",
        ),
        (
            "relative bundle",
            with(&|s| s["bundle"] = json!("bundle")),
            "is not an absolute path",
        ),
        (
            "pid of the wrong type",
            with(&|s| s["pid"] = json!("1")),
            "OCI state on stdin is not valid",
        ),
        (
            "wrong stage",
            with(&|s| s["status"] = json!("running")),
            "configure devinject-hook as a prestart or createRuntime hook",
        ),
    ];
    for (name, stdin, text) in cases {
        refused_untouched(&r, name, INPUT, text, || hook(&r.host.config, &stdin));
    }
}

#[test]
fn hook_refuses_missing_and_malformed_bundles() {
    if !require_runc_demo() {
        return;
    }
    let r = rig();
    let good = std::fs::read(r.bundle.dir.join("config.json")).unwrap();
    let spec = |f: &dyn Fn(&mut serde_json::Value)| edited(&good, f);
    let cases: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        ("missing config.json", None, "cannot read"),
        ("empty config.json", Some(Vec::new()), "is not valid"),
        (
            "truncated config.json",
            Some(good[..good.len() / 3].to_vec()),
            "is not valid",
        ),
        (
            "garbage config.json",
            Some(b"DEMO_VISIBLE_DEVICES=0 \xff\xfe".to_vec()),
            "is not valid",
        ),
        (
            "oversize config.json",
            Some(oversize(&good)),
            "is larger than 16777216 bytes",
        ),
        (
            "unknown ociVersion",
            Some(spec(&|v| v["ociVersion"] = json!("0.9.0"))),
            "ociVersion \"0.9.0\" is not supported",
        ),
        (
            "env of the wrong type",
            Some(spec(&|v| {
                v["process"]["env"] = json!("DEMO_VISIBLE_DEVICES=0")
            })),
            "is not valid",
        ),
        (
            "no root",
            Some(spec(&|v| {
                v.as_object_mut().unwrap().remove("root");
            })),
            "has no root.path",
        ),
    ];
    for (name, bytes, text) in cases {
        put_config_json(&r, bytes.as_deref());
        refused_untouched(&r, name, INPUT, text, || hook_on_bundle(&r));
    }
    // A bundle directory that does not exist at all.
    let stdin = serde_json::to_vec(&state(Path::new("/nonexistent/devinject-bundle"))).unwrap();
    let out = hook(&r.host.config, &stdin);
    refused(
        &out,
        INPUT,
        "cannot read /nonexistent/devinject-bundle/config.json",
        "missing bundle",
    );
}

#[test]
fn hook_refuses_oversize_and_malformed_requests() {
    if !require_runc_demo() {
        return;
    }
    let r = rig();
    let good = std::fs::read(r.bundle.dir.join("config.json")).unwrap();
    for (name, value, text) in [
        ("oversize", "0,".repeat(3000), "over the limit"),
        (
            "control characters",
            "0\n1".to_owned(),
            "DEMO_VISIBLE_DEVICES",
        ),
        ("duplicate ids", "0,0".to_owned(), "DEMO_VISIBLE_DEVICES"),
    ] {
        let bytes = edited(&good, |v| {
            v["process"]["env"] = json!([format!("DEMO_VISIBLE_DEVICES={value}")])
        });
        put_config_json(&r, Some(&bytes));
        refused_untouched(&r, name, REQUEST, text, || hook_on_bundle(&r));
    }
}

/// The shim refuses broken bundles before runc runs: no container state appears.
#[test]
fn shim_refuses_missing_and_malformed_bundles() {
    if !require_runc_demo() {
        return;
    }
    let r = rig();
    let good = std::fs::read(r.bundle.dir.join("config.json")).unwrap();
    let spec = |f: &dyn Fn(&mut serde_json::Value)| edited(&good, f);
    let cases: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        ("missing config.json", None, "cannot read"),
        (
            "truncated config.json",
            Some(good[..good.len() / 2].to_vec()),
            "is not valid",
        ),
        (
            "garbage config.json naming the request variable",
            Some(b"DEMO_VISIBLE_DEVICES=0 \xff\xfe".to_vec()),
            "is not valid",
        ),
        (
            "oversize config.json",
            Some(oversize(&good)),
            "is larger than 16777216 bytes",
        ),
        (
            "unknown ociVersion",
            Some(spec(&|v| v["ociVersion"] = json!("2.0.0"))),
            "ociVersion \"2.0.0\" is not supported",
        ),
        (
            "devices of the wrong type",
            Some(spec(&|v| v["linux"]["devices"] = json!({"a": 1}))),
            "linux.devices is not an array",
        ),
    ];
    let state_root = r.bundle.dir.join("runc-state");
    let shim = shim_command(&r.host.config, &runc_path());
    for (name, bytes, text) in cases {
        put_config_json(&r, bytes.as_deref());
        let out = refused_untouched(&r, name, INPUT, text, || {
            Command::new(&shim[0])
                .args(&shim[1..])
                .arg("--root")
                .arg(&state_root)
                .args(["create", "--bundle"])
                .arg(&r.bundle.dir)
                .arg(container_id("malformed"))
                .output()
                .unwrap()
        });
        assert!(!state_root.exists(), "{name}: runc ran: {}", describe(&out));
    }
    let out = Command::new(&shim[0])
        .args(&shim[1..])
        .arg("--root")
        .arg(&state_root)
        .args(["create", "--bundle", "/nonexistent/devinject-bundle", "x"])
        .output()
        .unwrap();
    refused(
        &out,
        INPUT,
        "cannot read /nonexistent/devinject-bundle/config.json",
        "missing bundle",
    );
    assert!(!state_root.exists(), "runc ran: {}", describe(&out));
}
