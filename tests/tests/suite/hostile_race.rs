//! A check-then-use race (the CVE-2024-0132 class): while containers asking for the demo device
//! start in a loop, a thread keeps exchanging the rootfs's library directory with a link to a host
//! canary directory (`renameat2(RENAME_EXCHANGE)`, atomic, as a container sharing a volume could).
//!
//! Every start must either succeed or fail cleanly (our documented exit code with our message),
//! and the canary must be byte-identical after every iteration: no file of ours, no empty
//! placeholder, no linker cache ever lands on the host. Both appliers are raced: the hook, and
//! the shim with its finish hook.
//!
//! The shim once wrote the libraries as spec mounts, and runc 1.1.5 (before 1.1.14,
//! CVE-2024-45310) then created the empty mount target on the host through the swapped link
//! within a few iterations; runc mounts none of our files any more, so any failure must be ours.
//!
//! `DEVINJECT_RACE_ITERATIONS` sets the number of starts per applier (default 200).

use std::path::Path;

use devinject_tests::bins::bin;
use devinject_tests::canary::Canary;
use devinject_tests::hostile::{link, Swapper};
use devinject_tests::probe::{probe_args, Report};
use devinject_tests::runc::{
    container_id, describe, hook_failure, runc_path, shim_command, Bundle,
};
use devinject_tests::sim::{demo_host, set_config, LIB};
use devinject_tests::skip::require_runc_demo;

fn iterations() -> usize {
    std::env::var("DEVINJECT_RACE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// How the starts ended.
#[derive(Debug, Default)]
struct Tally {
    started: usize,
    /// Starts where the container saw the library (its lib dir was not swapped out just then).
    saw_library: usize,
    refused: usize,
}

fn race(shim: bool, extra_config: Option<(&str, &str)>) {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    if let Some((key, value)) = extra_config {
        set_config(&host.config, key, value).unwrap();
    }
    let canary = Canary::new(&t.path().join("canary")).unwrap();
    // The container looks at the library: wherever it sees it, it must be read-only.
    let args = probe_args(&[], &[LIB]);
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0");
    let runtime: Vec<String> = if shim {
        shim_command(&host.config, &runc_path())
    } else {
        b.hook("createRuntime", &bin("devinject-hook"), &host.config);
        vec![runc_path()]
    };
    let runtime: Vec<&str> = runtime.iter().map(String::as_str).collect();
    let rootfs = b.rootfs();
    let swap = rootfs.join("usr/lib.swap");
    link(&rootfs, "/usr/lib.swap", canary.path("usr/lib")).unwrap();

    let guard = canary.guard();
    let swapper = Swapper::start(rootfs.join("usr/lib"), swap);
    let mut tally = Tally::default();
    for i in 0..iterations() {
        let out = b.run_with(&runtime, &container_id("race")).unwrap();
        let changes = guard.changes();
        assert!(
            changes.is_empty(),
            "iteration {i}: the host canary changed:\n  {}\n{}",
            changes.join("\n  "),
            describe(&out)
        );
        if out.status.success() {
            let lib = Report::parse(&String::from_utf8_lossy(&out.stdout))
                .lib(LIB)
                .clone();
            assert!(
                !lib.present || lib.read_only,
                "iteration {i}: the library is writable: {}",
                describe(&out)
            );
            tally.started += 1;
            tally.saw_library += usize::from(lib.present);
        } else {
            let f = hook_failure(&out)
                .unwrap_or_else(|| panic!("iteration {i}: not our failure: {}", describe(&out)));
            let line = f.line("devinject: ").unwrap_or_default();
            assert!(
                f.code == 7 && line.contains("in the container"),
                "iteration {i}: an unclean hook failure: {}",
                describe(&out)
            );
            tally.refused += 1;
        }
    }
    let swaps = swapper.stop().unwrap();
    eprintln!("{} swaps, {tally:?}", swaps);
    // The race must have happened, or this test proved nothing: starts met both layouts.
    let met_swapped = tally.refused + (tally.started - tally.saw_library);
    assert!(
        swaps > 0 && met_swapped > 0 && tally.saw_library > 0,
        "the race did not happen ({swaps} swaps, {tally:?}): raise DEVINJECT_RACE_ITERATIONS"
    );
    guard.assert_unchanged("after the race");
    assert!(
        Path::new(&rootfs.join("usr/lib")).is_dir(),
        "the swapper restored the layout"
    );
}

#[test]
fn hook_races_a_libdir_swapped_for_a_host_link() {
    race(false, None);
}

/// The classic mount path (kernels without the new mount API): bind through `/proc/self/fd`,
/// then a remount that re-resolves the path.
#[test]
fn hook_with_classic_mounts_races_a_libdir_swapped_for_a_host_link() {
    race(false, Some(("mount_api", "\"classic\"")));
}

/// Regression: the shim's spec mounts let runc create empty files on the host under this race.
#[test]
fn shim_spec_mounts_let_runc_create_host_files_in_a_libdir_race() {
    race(true, None);
}
