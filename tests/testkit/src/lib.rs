//! The one skip rule of devinject's tests, shared by every crate's tests.
//!
//! A test that cannot run here (no root, no runc, no `/dev/kvm`) calls [`require`] with the
//! reason. Under CI ([`in_ci`]: `CI=true` or `CI=1`) that is a failure: a missing prerequisite can
//! never look like a pass there. Elsewhere the test returns early, and the skip is put on the
//! record twice, because the test harness hides the output of passing tests:
//! - a `SKIPPED <test>: <reason>` line on the process's stderr, written past the harness's
//!   capture;
//! - a line appended to the file named by `DEVINJECT_SKIP_LOG` (scripts/test.sh sets it and prints
//!   the list, with its count, after the run).
//!
//! [`processes`] lists the host's processes by their command line, for tests that check that
//! nothing is left running.
//!
//! [`nodes`] makes device nodes for a simulated `/dev`.
//!
//! [`sockets`] counts the TCP and Unix connections a server in this process holds, for tests
//! that check its descriptors stay within its cap.
//!
//! [`docs`] reads the tables the docs keep of what the code defines (exit codes), for the tests
//! that hold them in step; [`doc_names`] checks that every path and Rust path the docs name
//! names something.
//!
//! Its own tests also hold `tier_test` of scripts/lib/tiers.sh, the runner of each pass of
//! tests/tiers.txt, to failing a filtered pass that runs no test, and `background_wait` of
//! scripts/lib/background.sh to a job's status after its pid is another process's.
//!
//! This crate has no dependencies, so that the lowest crates (devices, cgroup) can use it as a
//! dev-dependency without a cycle.
#![warn(missing_docs)]

#[cfg(test)]
mod background_jobs;
pub mod doc_names;
pub mod docs;
pub mod nodes;
pub mod processes;
pub mod sockets;
#[cfg(test)]
mod tier_runner;

use std::io::Write;
use std::path::Path;

/// The variable naming the file skips are appended to.
pub const SKIP_LOG: &str = "DEVINJECT_SKIP_LOG";

/// True under CI, where nothing may skip: `CI` is `true` or `1` (the values CI systems set).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Returns true when the test can run. Otherwise puts the skip on the record and returns false,
/// or panics under CI.
pub fn require(ok: bool, reason: &str) -> bool {
    if ok {
        return true;
    }
    assert!(!in_ci(), "prerequisite missing under CI: {reason}");
    record(reason);
    false
}

/// The test needs root.
pub fn require_root() -> bool {
    require(is_root(), "needs root (mknod, mounts, runc)")
}

/// The test needs an executable: an absolute path, or a name on PATH.
pub fn require_binary(path: &str) -> bool {
    require(
        Path::new(path).exists() || which(path).is_some(),
        &format!("needs {path} (apt-get install it, or run scripts/test.sh)"),
    )
}

/// The test needs a file or device node on the host.
pub fn require_path(path: &str, why: &str) -> bool {
    require(Path::new(path).exists(), &format!("needs {path}: {why}"))
}

/// Finds `name` on PATH.
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// True when the effective user is root.
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// The running test's name: libtest names each test's thread after it.
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("(unnamed test)")
        .to_owned()
}

fn record(reason: &str) {
    let line = format!("SKIPPED {}: {reason}\n", test_name());
    // Straight to the process's stderr: `eprintln!` is captured and dropped for passing tests.
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os(SKIP_LOG) {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            let _ = writeln!(
                std::io::stderr(),
                "cannot record the skip in {}: {e}",
                Path::new(&log).display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for the whole env-dependent behaviour: tests run in threads of one process,
    /// and the environment is the process's.
    #[test]
    fn skips_are_recorded_and_refused_under_ci() {
        let dir = std::env::temp_dir().join(format!("testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        let ci = std::env::var_os("CI");
        std::env::set_var(SKIP_LOG, &log);
        std::env::remove_var("CI");
        assert!(require(true, "never recorded"));
        assert!(!require(false, "needs a unicorn"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text,
            "SKIPPED tests::skips_are_recorded_and_refused_under_ci: needs a unicorn\n"
        );
        for v in ["true", "1"] {
            std::env::set_var("CI", v);
            let refused = std::panic::catch_unwind(|| require(false, "needs a unicorn"));
            assert!(refused.is_err(), "CI={v} must not skip");
        }
        std::env::set_var("CI", "false");
        assert!(!in_ci());
        match ci {
            Some(v) => std::env::set_var("CI", v),
            None => std::env::remove_var("CI"),
        }
        std::env::remove_var(SKIP_LOG);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
