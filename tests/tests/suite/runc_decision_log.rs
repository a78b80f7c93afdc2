//! The node's decision log with the real runc: a start the hook or the shim refuses lands in
//! the log with its engine path, reason, container and profiles; the user sees the same exit
//! code and message whether the log works, is turned off or is unwritable; and
//! `devinject-ctl doctor` lists the refusal.

use std::path::{Path, PathBuf};
use std::process::Output;

use devinject_decision_log::{last, Decision, EnginePath, Reason};
use devinject_tests::bins::bin;
use devinject_tests::runc::{container_id, describe, Bundle, Via};
use devinject_tests::sim::{demo_host, demo_probe_args, SimHost};
use devinject_tests::skip::require_runc_demo;

/// A container asking for `request` started through `via` on a demo host whose config adds
/// `extra`; returns its id and what runc printed.
fn start(dir: &Path, host: &SimHost, via: Via, request: &str, extra: &str) -> (String, Output) {
    host.write_config(extra).unwrap();
    let mut b = Bundle::new(dir, &demo_probe_args()).unwrap();
    b.env(&format!("DEMO_VISIBLE_DEVICES={request}"));
    let id = container_id("decision");
    let out = b.run_via(via, &host.config, &id).unwrap();
    (id, out)
}

fn path_of(via: Via) -> EnginePath {
    match via {
        Via::Hook => EnginePath::Hook,
        Via::Shim => EnginePath::Shim,
    }
}

/// The exit status the hook or the shim gave, as runc reports it (the hook) or as the
/// process's own (the shim).
fn status(via: Via, out: &Output) -> String {
    match via {
        Via::Hook => {
            let err = String::from_utf8_lossy(&out.stderr);
            let at = err.find("exit status").unwrap_or(0);
            err[at..].chars().take(14).collect()
        }
        Via::Shim => format!("{:?}", out.status.code()),
    }
}

/// The refusal's line the user saw: from `devinject: ` to the end of that line, unescaped as
/// runc's error quotes it.
fn user_message(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).replace("\\\"", "\"");
    let at = err.find("devinject: ").expect("our message") + "devinject: ".len();
    err[at..].lines().next().unwrap_or("").to_owned()
}

fn refusals_reach_the_log_and_doctor(via: Via) {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let log = t.path().join("decisions");
    let with_log = format!("decision_log_dir = {:?}\n", log);

    // An unknown device: the request's reason.
    let (id, out) = start(&t.path().join("b1"), &host, via, "0,9", &with_log);
    assert!(!out.status.success(), "{}", describe(&out));
    let seen = user_message(&out);
    assert!(seen.contains("unknown device \"9\""), "{}", describe(&out));
    let decisions = last(&log, 10).unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    let d: &Decision = &decisions[0];
    assert_eq!(
        (
            d.path,
            d.reason,
            d.container.as_str(),
            d.profiles.as_slice()
        ),
        (
            path_of(via),
            Reason::Request,
            id.as_str(),
            &["demo".to_string()][..]
        ),
        "{d:?}"
    );
    assert!(
        seen.starts_with(&d.message) || d.message.starts_with(&seen),
        "{d:?}\n{seen}"
    );

    // A container the policy refuses: the policy's reason, newest last.
    let refuse = format!("{with_log}policy = \"kubernetes\"\nnon_kubernetes = \"refuse\"\n");
    let (policy_id, out) = start(&t.path().join("b2"), &host, via, "0", &refuse);
    assert!(!out.status.success(), "{}", describe(&out));
    let decisions = last(&log, 10).unwrap();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    let d = &decisions[1];
    assert_eq!(
        (d.reason, d.container.as_str()),
        (Reason::Policy, policy_id.as_str())
    );
    assert!(d.message.contains("not a Kubernetes container"), "{d:?}");

    // A start that succeeds is not a decision to log.
    let (_, out) = start(&t.path().join("b3"), &host, via, "0,1", &with_log);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(last(&log, 10).unwrap().len(), 2);

    // doctor lists both, oldest first, in its own section.
    let doctor = std::process::Command::new(bin("devinject-ctl"))
        .args(["doctor", "--refusals", "5", "--config"])
        .arg(&host.config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    let section = text
        .split("recent refusals\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no refusals section:\n{text}"));
    let first = format!("{} request {id} [demo]: ", path_of(via));
    let second = format!("{} policy {policy_id}", path_of(via));
    let (a, b) = (section.find(&first), section.find(&second));
    assert!(a.is_some() && b.is_some() && a < b, "{text}");
    assert!(section.contains("unknown device"), "{text}");
}

#[test]
fn hook_refusals_reach_the_decision_log_and_doctor() {
    refusals_reach_the_log_and_doctor(Via::Hook);
}

#[test]
fn shim_refusals_reach_the_decision_log_and_doctor() {
    refusals_reach_the_log_and_doctor(Via::Shim);
}

/// The log turned off, or something planted at its name that must not be opened (a FIFO, a
/// link to a host file): the start is refused exactly as with a working log, at once, and
/// nothing is written through the planted object.
fn the_log_never_changes_what_the_user_sees(via: Via) {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let working = t.path().join("working");
    let (_, reference) = start(
        &t.path().join("ref"),
        &host,
        via,
        "9",
        &format!("decision_log_dir = {working:?}\n"),
    );
    assert!(!reference.status.success(), "{}", describe(&reference));
    assert_eq!(last(&working, 10).unwrap().len(), 1);

    let fifo_dir = t.path().join("fifo");
    std::fs::create_dir(&fifo_dir).unwrap();
    nix::unistd::mkfifo(
        &fifo_dir.join("decisions.log"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let host_file = t.path().join("host-file");
    std::fs::write(&host_file, "host\n").unwrap();
    let link_dir = t.path().join("link");
    std::fs::create_dir(&link_dir).unwrap();
    std::os::unix::fs::symlink(&host_file, link_dir.join("decisions.log")).unwrap();
    let cases: [(&str, PathBuf); 3] = [
        ("off", PathBuf::new()),
        ("fifo", fifo_dir),
        ("link", link_dir),
    ];
    for (name, dir) in cases {
        let started = std::time::Instant::now();
        let (_, out) = start(
            &t.path().join(name),
            &host,
            via,
            "9",
            &format!("decision_log_dir = {dir:?}\n"),
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{name}"
        );
        assert_eq!(
            status(via, &out),
            status(via, &reference),
            "{name}: {}",
            describe(&out)
        );
        assert_eq!(user_message(&out), user_message(&reference), "{name}");
    }
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "host\n");
}

#[test]
fn hook_refuses_the_same_whatever_the_log() {
    the_log_never_changes_what_the_user_sees(Via::Hook);
}

#[test]
fn shim_refuses_the_same_whatever_the_log() {
    the_log_never_changes_what_the_user_sees(Via::Shim);
}
