//! `tier_test` of scripts/lib/tiers.sh, the runner of each pass of tests/tiers.txt, run on a
//! tiers file of its own with a stand-in `cargo` that answers as `cargo test` does: each file
//! runs on its own, its binary filtered to its module; a run that runs no test fails, naming
//! the pass, the file and the filter, and the other runs of the pass still run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The stand-in, a shell function the scripts' `cargo` resolves to: each call is put on a line
/// of `calls`, then it answers as `cargo test` does for the filter it is given: one naming
/// `none_match` runs no test, `broken` one that fails, any other two that pass.
const CARGO: &str = r#"
cargo() {
  echo "$*" >>calls
  case " $* " in
    *none_match*)
      echo "running 0 tests"
      echo "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 5 filtered out; finished in 0.00s" ;;
    *broken*)
      echo "running 1 test"
      echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 4 filtered out; finished in 0.01s"
      return 101 ;;
    *)
      echo "running 2 tests"
      echo "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 3 filtered out; finished in 0.01s" ;;
  esac
}
"#;

/// A folder with `tests/tiers.txt` holding `tiers`.
fn workdir(tiers: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "devinject-tier-runner-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(dir.join("tests/tiers.txt"), tiers).unwrap();
    dir
}

/// `tier_test <pass>` in `dir` under `set -euo pipefail`, as the scripts run it, with its
/// output and the stand-in's calls.
fn tier_test(dir: &Path, pass: &str) -> (Output, String) {
    let tiers_sh = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib/tiers.sh");
    let script = format!("set -euo pipefail\n. \"$0\"\n{CARGO}\ntier_test \"$1\"\n");
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(&tiers_sh)
        .arg(pass)
        .current_dir(dir)
        .output()
        .expect("run bash");
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
    std::fs::remove_dir_all(dir).unwrap();
    (out, calls)
}

#[test]
fn a_filtered_pass_that_runs_tests_passes() {
    let (out, calls) = tier_test(
        &workdir("cluster/alpha crun=on_crio\ncluster/beta crun\nsuite/gamma suite\n"),
        "crun",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        calls,
        "test -p devinject-tests --no-fail-fast --test=cluster -- alpha::on_crio\n\
         test -p devinject-tests --no-fail-fast --test=cluster -- beta::\n"
    );
    // The run's output still goes by as it runs.
    assert!(String::from_utf8_lossy(&out.stdout).contains("test result: ok. 2 passed"));
}

#[test]
fn a_filtered_pass_that_runs_no_test_fails_naming_pass_file_and_filter() {
    let tiers = "cluster/alpha crun=none_match\ncluster/gamma crun=on_crio\ncluster/beta crun\n";
    let (out, calls) = tier_test(&workdir(tiers), "crun");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "tiers: the crun pass ran no test of tests/tests/cluster/alpha.rs: no test's name \
             begins with alpha::none_match (tests/tiers.txt marks it crun=none_match)"
        ),
        "{stderr}"
    );
    // The pass's other runs ran all the same.
    assert_eq!(calls.lines().count(), 3, "{calls}");
}

#[test]
fn a_failing_filtered_run_fails_the_pass_with_its_status() {
    let (out, calls) = tier_test(
        &workdir("cluster/alpha crun=broken\ncluster/beta crun\n"),
        "crun",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(101), "{stderr}");
    assert!(!stderr.contains("ran no test"), "{stderr}");
    assert_eq!(calls.lines().count(), 2, "{calls}");
}

#[test]
fn several_prefixes_of_one_file_are_one_run_with_a_filter_each() {
    let tiers = "runc/matrix suite,runc14=hook_on+shim_on\nrunc/other suite,runc14\n";
    let (out, calls) = tier_test(&workdir(tiers), "runc14");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        calls,
        "test -p devinject-tests --no-fail-fast --test=runc -- matrix::hook_on matrix::shim_on\n\
         test -p devinject-tests --no-fail-fast --test=runc -- other::\n"
    );
}

#[test]
fn a_whole_file_that_runs_no_test_fails_the_pass() {
    let (out, calls) = tier_test(
        &workdir("suite/none_match suite\nsuite/beta suite\n"),
        "suite",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "tiers: the suite pass ran no test of tests/tests/suite/none_match.rs: no test's \
             name begins with none_match::"
        ),
        "{stderr}"
    );
    assert_eq!(calls.lines().count(), 2, "{calls}");
}
