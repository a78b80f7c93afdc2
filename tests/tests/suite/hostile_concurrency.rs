//! Concurrency: 50 containers started at once with the real runc, each asking for a different
//! subset of 8 simulated accelerators (real device numbers, char and block, that open without
//! capabilities and are not in runc's default allow list): through the hook on this host's
//! cgroup v1, through the hook on cgroup v2 (where it replaces each container's eBPF device
//! program that runc attached), and through the shim.
//!
//! Every container must see exactly its grant: its own nodes with the right type and numbers,
//! opening, and, for all 8 host nodes bind-mounted into every container, the cgroup allowing
//! exactly the granted numbers. Nothing may be shared or left behind: each linker cache valid,
//! no temp files in bundles or rootfs, no runc state or device cgroup left, the simulated host
//! and the host paths an escape would write unchanged.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, Mutex};

use devinject_tests::bins::bin;
use devinject_tests::canary::{HostGuard, HOST_PATHS_AT_RISK};
use devinject_tests::probe::{probe_args, Report};
use devinject_tests::runc::{cgroup_v2, container_id, describe, runc_path, shim_command, Bundle};
use devinject_tests::sim::{big_demo_host, DeviceNumbers, CTL, LIB, SONAME};
use devinject_tests::skip::{require_binary, require_runc_demo};

const CONTAINERS: usize = 50;
const DEVICES: usize = 8;

fn ready() -> bool {
    require_runc_demo() && require_binary("setpriv")
}

/// The batch tests start 50 containers each; one batch at a time is plenty for a small machine.
static ONE_BATCH: Mutex<()> = Mutex::new(());

/// Container `i`'s device indices: 50 distinct non-empty subsets of 0..8 (37 is coprime with
/// 255, so `i * 37 mod 255` never repeats).
fn subset(i: usize) -> Vec<usize> {
    let mask = (i * 37) % 255 + 1;
    (0..DEVICES).filter(|k| mask & (1 << k) != 0).collect()
}

fn probe_paths() -> (Vec<String>, Vec<String>) {
    let mut nodes: Vec<String> = (0..DEVICES)
        .flat_map(|k| [format!("/dev/demo/accel{k}"), format!("/dev/sim/accel{k}")])
        .collect();
    nodes.push(format!("/dev/demo/{}", CTL.0));
    (nodes, vec![LIB.to_owned(), SONAME.to_owned()])
}

/// Which applier, on which cgroup version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Hook,
    HookCgroupV2,
    Shim,
}

struct Run {
    id: String,
    grant: Vec<usize>,
    bundle: Bundle,
    out: std::process::Output,
}

fn batch(mode: Mode) {
    if !ready() {
        return;
    }
    let _one = ONE_BATCH.lock().unwrap_or_else(|e| e.into_inner());
    let t = tempfile::tempdir().unwrap();
    let (host, numbers) = big_demo_host(&t.path().join("host"), DEVICES).unwrap();
    eprintln!("accelerators borrow {numbers:?}");
    let mut roots = vec![host.dir.clone()];
    roots.extend(HOST_PATHS_AT_RISK.iter().map(PathBuf::from));
    let guard = HostGuard::new(roots);
    let runtime: Vec<String> = match mode {
        Mode::Shim => shim_command(&host.config, &runc_path()),
        Mode::Hook => vec![runc_path()],
        Mode::HookCgroupV2 => cgroup_v2(&[&runc_path()]),
    };
    let (nodes, libs) = probe_paths();
    let args = probe_args(
        &nodes.iter().map(String::as_str).collect::<Vec<_>>(),
        &libs.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    // Bundles are made in parallel too; then every container starts at the same moment.
    let start = Arc::new(Barrier::new(CONTAINERS));
    let handles: Vec<_> = (0..CONTAINERS)
        .map(|i| {
            let (start, host, runtime, args) =
                (start.clone(), host.clone(), runtime.clone(), args.clone());
            let dir = t.path().join(format!("c{i}"));
            std::thread::spawn(move || {
                let grant = subset(i);
                let mut b = Bundle::new(&dir, &args).unwrap();
                let ids: Vec<String> = grant.iter().map(usize::to_string).collect();
                b.env(&format!("DEMO_VISIBLE_DEVICES={}", ids.join(",")));
                for k in 0..DEVICES {
                    let node = host.dev_root.join(format!("demo/accel{k}"));
                    b.bind_node(&node, &format!("/dev/sim/accel{k}"));
                }
                if mode != Mode::Shim {
                    b.hook("createRuntime", &bin("devinject-hook"), &host.config);
                }
                let id = container_id("conc");
                let rt: Vec<&str> = runtime.iter().map(String::as_str).collect();
                start.wait();
                let out = b.run_with(&rt, &id).unwrap();
                Run {
                    id,
                    grant,
                    bundle: b,
                    out,
                }
            })
        })
        .collect();
    let runs: Vec<Run> = handles.into_iter().map(|h| h.join().unwrap()).collect();

    for r in &runs {
        check(r, &numbers, mode == Mode::Shim);
    }
    let ids: BTreeSet<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    let left = cgroups_named(Path::new("/sys/fs/cgroup"), &ids, 4);
    assert!(left.is_empty(), "device cgroups left behind: {left:?}");
    guard.assert_unchanged("after 50 parallel starts");
}

fn check(r: &Run, numbers: &[DeviceNumbers], shim: bool) {
    let ctx = format!("{} with {:?}: {}", r.id, r.grant, describe(&r.out));
    assert!(r.out.status.success(), "{ctx}");
    let report = Report::parse(&String::from_utf8_lossy(&r.out.stdout));
    for (k, &(kind, major, minor)) in numbers.iter().enumerate() {
        let ours = report.node(&format!("/dev/demo/accel{k}"));
        let bound = report.node(&format!("/dev/sim/accel{k}"));
        if r.grant.contains(&k) {
            assert_eq!(
                (
                    ours.kind.as_str(),
                    ours.major,
                    ours.minor,
                    ours.open.as_str()
                ),
                (kind.to_string().as_str(), major, minor, "ok"),
                "accel{k} granted: {ctx}"
            );
            assert_eq!(bound.open, "ok", "accel{k} granted, host node: {ctx}");
        } else {
            assert_eq!(ours.kind, "missing", "accel{k} not granted: {ctx}");
            assert_eq!(bound.open, "EPERM", "accel{k} not granted, cgroup: {ctx}");
        }
    }
    assert_eq!(
        report.node(&format!("/dev/demo/{}", CTL.0)).open,
        "ok",
        "{ctx}"
    );
    let lib = report.lib(LIB);
    assert!(lib.present && lib.read_only, "{ctx}");
    assert!(report.lib(SONAME).in_ldcache, "{ctx}");

    // Nothing left behind in the bundle, its runc state or its rootfs.
    let names = |d: &Path| -> BTreeSet<String> {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let expected: BTreeSet<String> = ["config.json", "rootfs", "runc-state"]
        .map(String::from)
        .into();
    assert_eq!(names(&r.bundle.dir), expected, "bundle: {ctx}");
    assert!(names(&r.bundle.dir.join("runc-state")).is_empty(), "{ctx}");
    let rootfs = r.bundle.rootfs();
    let cache = std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap();
    assert!(
        cache.starts_with(b"glibc-ld.so.cache"),
        "a valid cache: {ctx}"
    );
    for temp in [
        "etc/ld.so.cache~",
        "etc/ld.so.cache~devinject",
        "var/cache/ldconfig/aux-cache~",
    ] {
        assert!(!rootfs.join(temp).exists(), "{temp} left: {ctx}");
    }
    if shim {
        // The spec holds exactly this container's devices.
        let spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(r.bundle.dir.join("config.json")).unwrap())
                .unwrap();
        let paths: BTreeSet<String> = spec["linux"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["path"].as_str().map(String::from))
            .filter(|p| p.starts_with("/dev/demo/accel"))
            .collect();
        let want: BTreeSet<String> = r
            .grant
            .iter()
            .map(|k| format!("/dev/demo/accel{k}"))
            .collect();
        assert_eq!(paths, want, "{ctx}");
    }
}

/// Directories under `root` (to `depth`) whose name contains one of `ids`.
fn cgroups_named(root: &Path, ids: &BTreeSet<&str>, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(root) else {
        return out;
    };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        if ids.iter().any(|id| name.contains(id)) {
            out.push(e.path());
        } else if depth > 0 {
            out.extend(cgroups_named(&e.path(), ids, depth - 1));
        }
    }
    out
}

#[test]
fn fifty_parallel_starts_through_the_hook() {
    batch(Mode::Hook);
}

#[test]
fn fifty_parallel_starts_through_the_hook_on_cgroup_v2() {
    if !require_binary("unshare") {
        return;
    }
    batch(Mode::HookCgroupV2);
}

#[test]
fn fifty_parallel_starts_through_the_shim() {
    batch(Mode::Shim);
}

#[test]
fn subsets_are_distinct_and_non_empty() {
    let all: BTreeSet<Vec<usize>> = (0..CONTAINERS).map(subset).collect();
    assert_eq!(all.len(), CONTAINERS);
    assert!(all.iter().all(|s| !s.is_empty()));
}
