//! A hook that runc kills on its timeout must take its children with it.
//!
//! Its own test binary: the test makes the process a child subreaper and waits for every child
//! reparented to it, which would reap the processes of tests running beside it in one binary.

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

use devinject_tests::bins::bin;
use devinject_tests::canary::{HostGuard, HOST_PATHS_AT_RISK};
use devinject_tests::hostile::fifo;
use devinject_tests::runc::{container_id, describe, Bundle};
use devinject_tests::sim::{demo_host, set_config};
use devinject_tests::skip::require_runc_demo;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use serde_json::json;

/// Releases whatever still waits on the FIFO at the end of the test, pass or fail: opening it
/// for writing lets a blocked reader's open return, and closing it gives that reader EOF.
struct FifoRelease(PathBuf);

impl Drop for FifoRelease {
    fn drop(&mut self) {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&self.0);
    }
}

/// Children of this process: with it a child subreaper, a hook's orphaned children are
/// reparented here when runc kills the hook.
fn children() -> Vec<Pid> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            list.split_whitespace()
                .map(|p| Pid::from_raw(p.parse().unwrap())),
        );
    }
    out
}

/// Regression: an image whose `ld.so.conf` is a FIFO kept ldconfig waiting forever; runc killed
/// the hook on its timeout but not the hook's ldconfig child, which stayed behind on the host
/// holding the container's mount namespace.
///
/// Here the hook's timeout in the spec is shorter than the hook's own ldconfig limit, so runc
/// kills the hook: the start fails with runc's timeout message, and every child of the hook must
/// be gone with it (this test process is made a child subreaper so the orphans come to it).
#[test]
fn hook_killed_on_runc_timeout_left_ldconfig_blocked_on_a_fifo() {
    if !require_runc_demo() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    set_config(&host.config, "log_level", "\"warn\"").unwrap();
    // The FIFO traps ldconfig; the hook's own cache writer never reads ld.so.conf.
    set_config(&host.config, "ldcache", "\"ldconfig\"").unwrap();
    let mut b = Bundle::new(&t.path().join("timeout"), &["/bin/true"]).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0");
    b.push_hook(
        "createRuntime",
        json!({
            "path": bin("devinject-hook"),
            "args": ["devinject-hook", "--config", host.config],
            "env": [],
            "timeout": 1,
        }),
    );
    fifo(&b.rootfs(), "/etc/ld.so.conf").unwrap();
    let _release = FifoRelease(b.rootfs().join("etc/ld.so.conf"));
    let host_paths = HostGuard::new(HOST_PATHS_AT_RISK.iter().map(PathBuf::from).collect());
    let out = b.run(&container_id("timeout")).unwrap();
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("hook ran past specified timeout of 1.0s"),
        "{}",
        describe(&out)
    );
    // The hook got as far as ldconfig: the soname link, made just before, is in the rootfs.
    assert!(
        b.rootfs().join("usr/lib/libdemo.so.1").is_symlink(),
        "the hook was killed before it started ldconfig: {}",
        describe(&out)
    );
    let orphans = children();
    assert!(!orphans.is_empty(), "ldconfig was not reparented here");
    for pid in orphans {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(waitpid(pid, None)));
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(status) => assert!(
                matches!(status, Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _))),
                "orphan {pid} ended with {status:?}"
            ),
            Err(_) => panic!(
                "orphan {pid} (ldconfig) still waits on the image's FIFO after runc killed the hook"
            ),
        }
    }
    host_paths.assert_unchanged("a hook killed on runc's timeout");
}
