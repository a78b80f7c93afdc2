//! `background` and `background_wait` of scripts/lib/background.sh, the background jobs of
//! scripts/test.sh: a job's status outlives bash forgetting it once its pid is given to another
//! child, which a long run that goes round `pid_max` does.

use std::path::PathBuf;
use std::process::Command;

/// Runs `script` after sourcing background.sh, in a pid namespace of its own (`unshare -p`),
/// where `/proc/sys/kernel/ns_last_pid` picks the pid the next child gets (proc(5)); its
/// stdout, or a panic with its stderr.
fn in_pid_namespace(script: &str) -> String {
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib/background.sh");
    let statuses = std::env::temp_dir().join(format!(
        "devinject-background-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&statuses);
    std::fs::create_dir_all(&statuses).unwrap();
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "bash", "-c"])
        .arg(format!("set -euo pipefail\n. \"$0\"\n{script}"))
        .arg(&lib)
        .env("BACKGROUND_STATUS", &statuses)
        .env_remove("BACKGROUND_COSTS")
        .output()
        .expect("run unshare");
    std::fs::remove_dir_all(&statuses).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A job that ended with `status`, then its pid given to a new child of the shell (a command
/// substitution, as scripts/test.sh runs many); prints the job's pid, the new child's, plain
/// `wait`'s answer, then `background_wait`'s.
fn after_pid_reuse(status: u8) -> String {
    in_pid_namespace(&format!(
        r#"background 0 /dev/null /dev/null sh -c 'exit {status}'
job=$!
until [ -e "$BACKGROUND_STATUS/$job" ]; do sleep 0.05; done
sleep 0.2
echo $((job - 1)) >/proc/sys/kernel/ns_last_pid
reused=$(sh -c 'echo $$')
plain=0; wait "$job" 2>/dev/null || plain=$?
kept=0; background_wait "$job" || kept=$?
echo "$job $reused $plain $kept""#
    ))
}

#[test]
fn a_jobs_status_survives_its_pid_given_to_another_child() {
    if !crate::require_root() {
        return;
    }
    let line = after_pid_reuse(3);
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 4, "{line}");
    // The premise: the pid was given again, and bash's own `wait` lost the job's status (it
    // says "not a child", or answers the new child's).
    assert_eq!(f[0], f[1], "the pid was not reused: {line}");
    assert_ne!(f[2], "3", "bash's wait still knew the job: {line}");
    assert_eq!(f[3], "3", "background_wait: {line}");
}

#[test]
fn a_running_job_is_waited_for_and_its_status_returned() {
    if !crate::require_root() {
        return;
    }
    let line = in_pid_namespace(
        r#"background 0 /dev/null /dev/null sh -c 'sleep 0.3; exit 5'
failed=0; background_wait $! || failed=$?
background 0 /dev/null /dev/null sh -c 'sleep 0.3'
passed=0; background_wait $! || passed=$?
echo "$failed $passed""#,
    );
    assert_eq!(line.trim(), "5 0");
}
