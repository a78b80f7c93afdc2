//! Hostile images against the real runc, through both appliers: the hook as a createRuntime hook,
//! and the shim (devices in the spec, then our finish hook for files, links and the linker
//! cache). Each image is the harness's busybox rootfs booby-trapped one way: the lib dir, a
//! /dev subdir, /etc or a soname link pointing at a host canary (absolute, climbing with `..`,
//! chained, dangling, through a procfs magic link), a FIFO or device where a file belongs, a
//! file or directory where the other belongs.
//!
//! Every case has a pinned outcome per applier: either the container starts and sees device 0 and
//! the demo library inside its own rootfs, or the start fails with our documented exit code and a
//! message naming the path (or runc refuses by its own checks). After every case the canary and
//! the host paths an escape would write are unchanged.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use devinject_tests::canary::{Canary, HostGuard, MARK};
use devinject_tests::hostile::{self, char_node, climb, dir, fifo, file, link, mirror};
use devinject_tests::probe::Report;
use devinject_tests::runc::{self, container_id, describe, hook_failure, Bundle};
use devinject_tests::sim::{demo_host, demo_probe_args, set_config, SimHost, LIB, SONAME};
use devinject_tests::skip::require_runc_demo;

/// Which applier runs the case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Hook,
    Shim,
    /// Plain runc, no devinject: the baseline for what runc itself does.
    Plain,
}

/// What a case must end in.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The container starts and sees device 0 and the library, read-only and cached.
    Inject,
    /// Our hook fails the start with this exit code and a message containing these texts.
    Fail(i32, &'static [&'static str]),
    /// runc refuses by its own checks, with a message containing this text in any case: an
    /// errno is worded as Go words it by runc up to 1.4 (`not a directory`) and as Rust does by
    /// runc 1.5, which resolves paths in the root through libpathrs (`Not a directory (os error
    /// 20)`).
    Runtime(&'static str),
    /// The container starts, but the image's own entry stays where device 0 belongs: runc keeps
    /// whatever exists at a `linux.devices` path. The image only harms itself.
    Kept,
}

/// A prepared host: the simulated demo devices, a canary, and a real library in the canary whose
/// soname carries [`MARK`], for the cases that try to read host directories.
struct Rig {
    _t: tempfile::TempDir,
    dir: std::path::PathBuf,
    host: SimHost,
    canary: Canary,
}

const CANARY_LIB: &str = "libdevinject-canary.so.1";
const LDCONFIG_TIMEOUT: u32 = 3;

fn rig() -> Rig {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().to_owned();
    let host = demo_host(&dir.join("host"), &["demo"]).unwrap();
    // Short, so the cases that make ldconfig wait on a FIFO end quickly.
    set_config(
        &host.config,
        "ldconfig_timeout",
        &LDCONFIG_TIMEOUT.to_string(),
    )
    .unwrap();
    let canary = Canary::new(&dir.join("canary")).unwrap();
    devinject_tests::cprog::shared_lib(&canary.path("usr/lib"), CANARY_LIB, CANARY_LIB).unwrap();
    Rig {
        _t: t,
        dir,
        host,
        canary,
    }
}

/// The hints our messages give for what in the image to fix.
const NOWHERE: &str = "leads nowhere inside the rootfs: fix the image";
const THROUGH_PROC: &str = "loops or leads through /proc: fix the image";
const FILE_FOR_DIR: &str = "a file where a directory belongs: fix the image";

type Trap = fn(&Path, &Canary);
type Check = fn(&Path, &Canary, &std::process::Output);

struct Case {
    dev_tmpfs: bool,
    /// runc itself writes through this trap (see `dev_link_to_host_under_the_runtime_tmpfs`):
    /// the host may change exactly as it does for the same image run by plain runc, no more.
    /// Plain runc must then have written something, else this is stale for the runc in use.
    runtime_writes: bool,
    /// Run with `ldcache = "ldconfig"`: the case is about what ldconfig reads and writes, which
    /// the hook's own cache writer never touches.
    ldconfig: bool,
    trap: Trap,
    hook: Expect,
    shim: Expect,
    check: Option<Check>,
}

fn run(name: &str, case: Case) {
    if !require_runc_demo() {
        return;
    }
    // What plain runc does to the host with this image, when it writes at all.
    let baseline = case.runtime_writes.then(|| {
        let rig = rig();
        let (b, guard) = prepare(&rig, &case, Via::Plain);
        let out = b.run(&container_id("plain")).unwrap();
        assert!(
            out.status.success(),
            "{name} with plain runc: {}",
            describe(&out)
        );
        let changed = guard.changed_paths(&rig.canary.dir);
        assert!(
            !changed.is_empty(),
            "{name}: plain runc {:?} wrote nothing to the host through this image: the case's \
             runtime_writes is stale for this runc",
            runc::runc_version()
        );
        changed
    });
    for via in [Via::Hook, Via::Shim] {
        let rig = rig();
        if case.ldconfig {
            set_config(&rig.host.config, "ldcache", "\"ldconfig\"").unwrap();
        }
        run_one(&rig, name, &case, via, baseline.as_ref());
    }
}

/// The bundle with the trap set, and a guard fingerprinted after the trap (which only touches the
/// rootfs) and before any runtime runs.
fn prepare(rig: &Rig, case: &Case, via: Via) -> (Bundle, HostGuard) {
    let args = demo_probe_args();
    let mut b = Bundle::new(&rig.dir.join(format!("bundle-{via:?}")), &args).unwrap();
    if via != Via::Plain {
        b.env("DEMO_VISIBLE_DEVICES=0");
    }
    if !case.dev_tmpfs {
        b.remove_mount("/dev");
    }
    (case.trap)(&b.rootfs(), &rig.canary);
    let guard = rig.canary.guard();
    (b, guard)
}

fn run_one(rig: &Rig, name: &str, case: &Case, via: Via, baseline: Option<&BTreeSet<PathBuf>>) {
    let ctx = format!("{name} via {via:?}");
    let (mut b, guard) = prepare(rig, case, via);
    let id = container_id("hostile");
    let applier = match via {
        Via::Plain => unreachable!("plain runs are baselines"),
        Via::Hook => runc::Via::Hook,
        Via::Shim => runc::Via::Shim,
    };
    let out = b.run_via(applier, &rig.host.config, &id).unwrap();
    let expect = match via {
        Via::Hook | Via::Plain => case.hook,
        Via::Shim => case.shim,
    };
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    let full = format!("{ctx}: {}", describe(&out));
    match expect {
        Expect::Inject => {
            assert!(out.status.success(), "must start: {full}");
            let n = report.node("/dev/demo/accel0");
            assert_eq!(
                (n.kind.as_str(), n.major, n.minor, n.open.as_str()),
                ("c", 10, 237, "ok"),
                "{full}"
            );
            let lib = report.lib(LIB);
            assert!(lib.present && lib.read_only, "library: {full}");
            assert!(report.lib(SONAME).in_ldcache, "soname cached: {full}");
        }
        Expect::Fail(code, texts) => {
            assert!(!out.status.success(), "must not start: {full}");
            let f = hook_failure(&out).unwrap_or_else(|| panic!("no hook failure: {full}"));
            assert_eq!(f.code, code, "exit code: {full}");
            let line = f
                .line("devinject: ")
                .unwrap_or_else(|| panic!("no message of ours: {full}"));
            for text in texts {
                assert!(line.contains(text), "want {text:?} in {line:?}: {full}");
            }
            assert!(report.nodes.is_empty(), "the container ran: {full}");
        }
        Expect::Kept => {
            assert!(out.status.success(), "must start: {full}");
            let n = report.node("/dev/demo/accel0");
            assert_eq!(
                (n.kind.as_str(), n.open.as_str()),
                ("other", "notdev"),
                "{full}"
            );
        }
        Expect::Runtime(text) => {
            assert!(!out.status.success(), "must not start: {full}");
            assert!(hook_failure(&out).is_none(), "not a hook failure: {full}");
            assert!(
                String::from_utf8_lossy(&out.stderr)
                    .to_lowercase()
                    .contains(&text.to_lowercase()),
                "want {text:?}: {full}"
            );
        }
    }
    if let Some(check) = case.check {
        check(&b.rootfs(), &rig.canary, &out);
    }
    match baseline {
        None => guard.assert_unchanged(&ctx),
        Some(base) => {
            let changed = guard.changed_paths(&rig.canary.dir);
            assert!(
                changed.is_subset(base),
                "{ctx}: the host changed beyond what plain runc changes: {changed:?} vs {base:?}"
            );
        }
    }
}

fn c(canary: &Canary, rel: &str) -> std::path::PathBuf {
    canary.path(rel)
}

/// A link through the container's procfs to the host path `p`: `/proc/1/root` is runc init's
/// root, the host's `/`, until `pivot_root`.
fn via_proc(p: &Path) -> String {
    format!("/proc/1/root{}", p.display())
}

// The lib dir.

#[test]
fn libdir_absolute_link_to_host() {
    run(
        "libdir_absolute_link_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/usr/lib", c(k, "usr/lib")).unwrap(),
            hook: Expect::Fail(7, &["/usr/lib in the container rootfs: ENOENT", NOWHERE]),
            shim: Expect::Fail(7, &["/usr/lib in the container rootfs: ENOENT", NOWHERE]),
            check: None,
        },
    );
}

#[test]
fn libdir_climbing_link_to_host() {
    run(
        "libdir_climbing_link_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/usr/lib", climb("/usr/lib", &c(k, "usr/lib"))).unwrap(),
            hook: Expect::Fail(7, &["/usr/lib in the container rootfs: ENOENT", NOWHERE]),
            shim: Expect::Fail(7, &["/usr/lib in the container rootfs: ENOENT", NOWHERE]),
            check: None,
        },
    );
}

#[test]
fn libdir_chain_of_links_to_host() {
    run(
        "libdir_chain_of_links_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| {
                link(r, "/usr/lib", "/hop1").unwrap();
                link(r, "/hop1", "usr/../hop2").unwrap();
                link(r, "/hop2", climb("/hop2", &c(k, "usr/lib"))).unwrap();
            },
            hook: Expect::Fail(7, &["/usr/lib in the container rootfs: ENOENT", NOWHERE]),
            shim: Expect::Fail(7, &["/usr/lib in the container rootfs: ENOENT", NOWHERE]),
            check: None,
        },
    );
}

#[test]
fn libdir_dangling_link() {
    run(
        "libdir_dangling_link",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| link(r, "/usr/lib", "/devinject-canary-dangling/lib").unwrap(),
            hook: Expect::Fail(7, &["/usr/lib in the container rootfs: ENOENT", NOWHERE]),
            shim: Expect::Fail(7, &["/usr/lib in the container rootfs: ENOENT", NOWHERE]),
            check: Some(|_, _, _| {
                assert!(!Path::new("/devinject-canary-dangling").exists());
            }),
        },
    );
}

#[test]
fn libdir_link_resolving_inside_the_rootfs() {
    run(
        "libdir_link_resolving_inside_the_rootfs",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| {
                link(r, "/usr/lib", c(k, "usr/lib")).unwrap();
                mirror(r, &c(k, "usr/lib")).unwrap();
            },
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: Some(|r, k, _| {
                // The library landed in the rootfs's copy of the canary path.
                let inside = hostile::host(r, &c(k, "usr/lib/libdemo.so.1.0.0").to_string_lossy());
                assert!(inside.exists(), "{}", inside.display());
            }),
        },
    );
}

#[test]
fn libdir_chain_resolving_inside_the_rootfs() {
    run(
        "libdir_chain_resolving_inside_the_rootfs",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| {
                link(r, "/usr/lib", "/hop1").unwrap();
                link(r, "/hop1", "../../../../hop2").unwrap();
                link(r, "/hop2", climb("/hop2", &c(k, "usr/lib"))).unwrap();
                mirror(r, &c(k, "usr/lib")).unwrap();
            },
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn libdir_through_proc_magic_link() {
    run(
        "libdir_through_proc_magic_link",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/usr/lib", via_proc(&c(k, "usr/lib"))).unwrap(),
            hook: Expect::Fail(
                7,
                &["/usr/lib in the container rootfs: ELOOP", THROUGH_PROC],
            ),
            shim: Expect::Fail(
                7,
                &["/usr/lib in the container rootfs: ELOOP", THROUGH_PROC],
            ),
            check: None,
        },
    );
}

#[test]
fn libdir_is_a_file() {
    run(
        "libdir_is_a_file",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| file(r, "/usr/lib", "not a directory").unwrap(),
            hook: Expect::Fail(7, &["Not a directory", FILE_FOR_DIR]),
            shim: Expect::Fail(7, &["Not a directory", FILE_FOR_DIR]),
            check: None,
        },
    );
}

#[test]
fn bindir_link_to_host() {
    run(
        "bindir_link_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/usr/bin", c(k, "usr/bin")).unwrap(),
            hook: Expect::Fail(7, &["/usr/bin in the container rootfs: ENOENT", NOWHERE]),
            shim: Expect::Fail(7, &["/usr/bin in the container rootfs: ENOENT", NOWHERE]),
            check: None,
        },
    );
}

// The files we put in place.

#[test]
fn library_is_a_link_to_a_host_file() {
    run(
        "library_is_a_link_to_a_host_file",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, LIB, c(k, "etc/passwd")).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn tool_is_a_climbing_link_to_a_host_file() {
    run(
        "tool_is_a_climbing_link_to_a_host_file",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| {
                let at = "/usr/bin/demo-smi";
                link(r, at, climb(at, &c(k, "usr/bin/tool"))).unwrap()
            },
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn soname_link_points_at_a_host_file() {
    run(
        "soname_link_points_at_a_host_file",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, SONAME, c(k, "usr/lib/libc.so.6")).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn soname_link_climbs_to_a_host_file() {
    run(
        "soname_link_climbs_to_a_host_file",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, SONAME, climb(SONAME, &c(k, "usr/lib/libc.so.6"))).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn library_is_a_fifo() {
    run(
        "library_is_a_fifo",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| fifo(r, LIB).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn library_is_a_device_node() {
    run(
        "library_is_a_device_node",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| char_node(r, LIB, 1, 3).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn library_is_a_directory() {
    run(
        "library_is_a_directory",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| dir(r, LIB).unwrap(),
            hook: Expect::Fail(7, &["directory"]),
            shim: Expect::Fail(7, &["directory"]),
            check: None,
        },
    );
}

#[test]
fn soname_is_a_directory() {
    run(
        "soname_is_a_directory",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| dir(r, SONAME).unwrap(),
            hook: Expect::Fail(7, &["directory"]),
            shim: Expect::Fail(7, &["directory"]),
            check: None,
        },
    );
}

// /etc and the linker cache.

#[test]
fn etc_absolute_link_to_host() {
    run(
        "etc_absolute_link_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/etc", c(k, "etc")).unwrap(),
            hook: Expect::Fail(7, &["/etc in the container rootfs: ENOENT", NOWHERE]),
            shim: Expect::Fail(7, &["/etc in the container rootfs: ENOENT", NOWHERE]),
            check: None,
        },
    );
}

#[test]
fn etc_link_resolving_inside_the_rootfs() {
    run(
        "etc_link_resolving_inside_the_rootfs",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| {
                link(r, "/etc", climb("/etc", &c(k, "etc"))).unwrap();
                mirror(r, &c(k, "etc")).unwrap();
            },
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn etc_through_proc_magic_link() {
    run(
        "etc_through_proc_magic_link",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/etc", via_proc(&c(k, "etc"))).unwrap(),
            hook: Expect::Fail(7, &["/etc in the container rootfs: ELOOP", THROUGH_PROC]),
            shim: Expect::Fail(7, &["/etc in the container rootfs: ELOOP", THROUGH_PROC]),
            check: None,
        },
    );
}

#[test]
fn ld_so_cache_is_a_link_to_host() {
    run(
        "ld_so_cache_is_a_link_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/etc/ld.so.cache", c(k, "etc/ld.so.cache")).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn ld_so_cache_temp_file_is_a_link_to_host() {
    run(
        "ld_so_cache_temp_file_is_a_link_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: true,
            // ldconfig writes its temp file on the hook's private tmpfs, and the hook installs the
            // cache through its own temp name: the image's link is never opened.
            trap: |r, k| link(r, "/etc/ld.so.cache~", via_proc(&c(k, "etc/ld.so.cache"))).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn ld_so_cache_install_temp_file_is_a_link_to_host() {
    run(
        "ld_so_cache_install_temp_file_is_a_link_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            // The hook's own temp name: removed (not followed) and created afresh.
            trap: |r, k| {
                link(
                    r,
                    "/etc/ld.so.cache~devinject",
                    via_proc(&c(k, "etc/ld.so.cache")),
                )
                .unwrap()
            },
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

/// The hook's own cache writer opens the image's cache without blocking and reads it only when it
/// is a regular file: a FIFO there is replaced, not waited on.
#[test]
fn ld_so_cache_is_a_fifo() {
    run(
        "ld_so_cache_is_a_fifo",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| fifo(r, "/etc/ld.so.cache").unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

/// A cache reached through the container's procfs is never read (in-root resolution refuses
/// magic links); the link itself is replaced by the new cache.
#[test]
fn ld_so_cache_through_proc_magic_link() {
    run(
        "ld_so_cache_through_proc_magic_link",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/etc/ld.so.cache", via_proc(&c(k, "etc/ld.so.cache"))).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: Some(|r, _, out| {
                let meta = std::fs::symlink_metadata(r.join("etc/ld.so.cache")).unwrap();
                assert!(meta.is_file(), "the link is still there: {}", describe(out));
            }),
        },
    );
}

/// A cache the hook cannot read faithfully (here: garbage) is left to ldconfig, which rebuilds
/// it from the image's library directories.
#[test]
fn ld_so_cache_is_garbage() {
    run(
        "ld_so_cache_is_garbage",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| {
                file(
                    r,
                    "/etc/ld.so.cache",
                    "glibc-ld.so.cache1.1 but nothing after",
                )
                .unwrap()
            },
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

/// A cache larger than any real one is not read into the hook's memory: ldconfig rebuilds it.
#[test]
fn ld_so_cache_is_huge() {
    run(
        "ld_so_cache_is_huge",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| {
                file(r, "/etc/ld.so.cache", "").unwrap();
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(r.join("etc/ld.so.cache"))
                    .unwrap();
                f.set_len(65 << 20).unwrap();
            },
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

/// A directory where the cache belongs cannot be replaced: the start fails naming the file.
#[test]
fn ld_so_cache_is_a_directory() {
    run(
        "ld_so_cache_is_a_directory",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| dir(r, "/etc/ld.so.cache").unwrap(),
            hook: Expect::Fail(7, &["/etc/ld.so.cache", "EISDIR"]),
            shim: Expect::Fail(7, &["/etc/ld.so.cache", "EISDIR"]),
            check: None,
        },
    );
}

#[test]
fn dev_is_a_link_to_etc() {
    run(
        "dev_is_a_link_to_etc",
        Case {
            dev_tmpfs: false,
            runtime_writes: false,
            ldconfig: true,
            // A tmpfs staged over /dev would hide /etc from ldconfig: the cache is written in
            // place instead.
            trap: |r, _| link(r, "/dev", "etc").unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn ld_so_conf_is_a_link_to_host() {
    run(
        "ld_so_conf_is_a_link_to_host",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: true,
            trap: |r, k| link(r, "/etc/ld.so.conf", via_proc(&c(k, "etc/ld.so.conf"))).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

/// Regression: ldconfig, chrooted into the rootfs, followed the container's `/proc/1/root` (runc
/// init's root, the host's `/`) to the directories `ld.so.conf` listed, and put host libraries
/// into the container's cache.
#[test]
fn ldconfig_chroot_escape_via_proc_reads_host_libraries() {
    run(
        "ldconfig_chroot_escape_via_proc_reads_host_libraries",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: true,
            trap: |r, k| {
                let conf = format!("{}\n", via_proc(&c(k, "usr/lib")));
                file(r, "/etc/ld.so.conf", &conf).unwrap();
            },
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: Some(|r, _, out| {
                let cache = std::fs::read(r.join("etc/ld.so.cache")).unwrap();
                let text = String::from_utf8_lossy(&cache);
                assert!(
                    !text.contains(MARK),
                    "the container's linker cache lists a host library: {}",
                    describe(out)
                );
            }),
        },
    );
}

/// Regression: ldconfig, chrooted into the rootfs, followed `/var/cache -> /proc/1/root/<dir>` out
/// of the chroot and created `<dir>/ldconfig/aux-cache` on the host.
#[test]
fn ldconfig_chroot_escape_via_proc_writes_host_aux_cache() {
    run(
        "ldconfig_chroot_escape_via_proc_writes_host_aux_cache",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: true,
            trap: |r, k| link(r, "/var/cache", via_proc(&c(k, "var/cache"))).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

/// Regression: ldconfig opened the image's FIFO `ld.so.conf` and waited forever, holding the
/// container start until the runtime's hook timeout (and then staying behind: see
/// `hostile_input`). It is now killed after `ldconfig_timeout` and the start fails with our
/// message.
#[test]
fn ldconfig_blocked_forever_on_a_fifo_ld_so_conf() {
    run(
        "ldconfig_blocked_forever_on_a_fifo_ld_so_conf",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: true,
            trap: |r, _| fifo(r, "/etc/ld.so.conf").unwrap(),
            hook: Expect::Fail(7, &["did not finish within 3 s"]),
            shim: Expect::Fail(7, &["did not finish within 3 s"]),
            check: None,
        },
    );
}

#[test]
fn ld_so_conf_includes_a_fifo() {
    run(
        "ld_so_conf_includes_a_fifo",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: true,
            trap: |r, _| {
                file(r, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n").unwrap();
                fifo(r, "/etc/ld.so.conf.d/trap.conf").unwrap();
            },
            hook: Expect::Fail(7, &["did not finish within 3 s"]),
            shim: Expect::Fail(7, &["did not finish within 3 s"]),
            check: None,
        },
    );
}

#[test]
fn ldconfig_aux_cache_is_a_fifo() {
    run(
        "ldconfig_aux_cache_is_a_fifo",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: true,
            trap: |r, _| fifo(r, "/var/cache/ldconfig/aux-cache").unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

// /dev: with runc's tmpfs the image's /dev is hidden; without it the image's /dev is live.

/// runc 1.1 mounts its /dev tmpfs where the image's `/dev` link resolves inside the rootfs, but
/// then creates `/dev/fd`, `/dev/stdin`, ... and `/dev/ptmx` by plain host path through the
/// image's link: into the host directory. The same happens without devinject; devinject adds
/// nothing to it. runc 1.4.3 makes them inside the rootfs (its CVE-2026-41579, "a malicious
/// image with a `/dev` symlink" writing to the host): from there on the host must stay
/// unchanged. Measured: 1.1.5 and 1.4.2 write to the host, 1.4.3 does not. The difference is
/// runc's own, so the expectation is per runc version.
#[test]
fn dev_link_to_host_under_the_runtime_tmpfs() {
    run(
        "dev_link_to_host_under_the_runtime_tmpfs",
        Case {
            dev_tmpfs: true,
            runtime_writes: runc::runc_version() < (1, 4, 3),
            ldconfig: false,
            trap: |r, k| link(r, "/dev", c(k, "dev")).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn dev_subdir_link_hidden_by_the_runtime_tmpfs() {
    run(
        "dev_subdir_link_hidden_by_the_runtime_tmpfs",
        Case {
            dev_tmpfs: true,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/dev/demo", c(k, "dev")).unwrap(),
            hook: Expect::Inject,
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn dev_subdir_absolute_link_to_host() {
    run(
        "dev_subdir_absolute_link_to_host",
        Case {
            dev_tmpfs: false,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/dev/demo", c(k, "dev")).unwrap(),
            hook: Expect::Fail(7, &["/dev/demo in the container rootfs: ENOENT", NOWHERE]),
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn dev_subdir_climbing_link_to_host() {
    run(
        "dev_subdir_climbing_link_to_host",
        Case {
            dev_tmpfs: false,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, k| link(r, "/dev/demo", climb("/dev/demo", &c(k, "dev"))).unwrap(),
            hook: Expect::Fail(7, &["/dev/demo in the container rootfs: ENOENT", NOWHERE]),
            shim: Expect::Inject,
            check: None,
        },
    );
}

#[test]
fn dev_subdir_is_a_file() {
    run(
        "dev_subdir_is_a_file",
        Case {
            dev_tmpfs: false,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| file(r, "/dev/demo", "not a directory").unwrap(),
            hook: Expect::Fail(7, &["Not a directory", FILE_FOR_DIR]),
            shim: Expect::Runtime("not a directory"),
            check: None,
        },
    );
}

#[test]
fn dev_node_is_a_directory() {
    run(
        "dev_node_is_a_directory",
        Case {
            dev_tmpfs: false,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| dir(r, "/dev/demo/accel0").unwrap(),
            hook: Expect::Fail(7, &["/dev/demo/accel0", "a file or directory exists"]),
            shim: Expect::Kept,
            check: None,
        },
    );
}

#[test]
fn dev_node_is_a_fifo() {
    run(
        "dev_node_is_a_fifo",
        Case {
            dev_tmpfs: false,
            runtime_writes: false,
            ldconfig: false,
            trap: |r, _| fifo(r, "/dev/demo/accel0").unwrap(),
            hook: Expect::Inject,
            shim: Expect::Kept,
            check: None,
        },
    );
}

// The forward-compatibility directory.

/// The image's forward-compatibility directory holds, beside its newer libdemo, a link to a
/// library on a volume (a host directory the spec mounts into the container). The hook's reader
/// follows no link there; ldconfig, which writes the cache here, must not either: it is shown
/// only the libraries the hook verified, so the container's cache lists the image's newer
/// libdemo first and never the volume's library, and that library is not even read.
#[test]
fn ldconfig_follows_no_link_in_the_forward_compat_directory() {
    if !require_runc_demo() {
        return;
    }
    const COMPAT: &str = "/opt/compat";
    const VOLUME: &str = "/mnt/volume";
    for via in [runc::Via::Hook, runc::Via::Shim] {
        let ctx = format!("{via:?}");
        let rig = rig();
        set_config(&rig.host.config, "ldcache", "\"ldconfig\"").unwrap();
        let profile = rig.host.profiles_dir.join("demo.toml");
        let mut text = std::fs::read_to_string(&profile).unwrap();
        text.push_str(&format!(
            "[forward_compat]\ndir = \"{COMPAT}\"\nlibrary = \"libdemo.so\"\n"
        ));
        std::fs::write(&profile, text).unwrap();

        let mut b = Bundle::new(&rig.dir.join("bundle"), &demo_probe_args()).unwrap();
        b.env("DEMO_VISIBLE_DEVICES=0");
        let rootfs = b.rootfs();
        // The image's newer libdemo (2 over the host's 1), with its soname link.
        let compat = rootfs.join(COMPAT.trim_start_matches('/'));
        devinject_tests::cprog::shared_lib(&compat, "libdemo.so.2.0.0", "libdemo.so.1").unwrap();
        std::os::unix::fs::symlink("libdemo.so.2.0.0", compat.join("libdemo.so.1")).unwrap();
        // The link to the volume's library: one whose soname carries the canary's mark, in a
        // host directory of its own (its access time is watched, which the canary's
        // fingerprints would disturb).
        let volume = rig.dir.join("volume");
        devinject_tests::cprog::shared_lib(&volume, CANARY_LIB, CANARY_LIB).unwrap();
        std::os::unix::fs::symlink(Path::new(VOLUME).join(CANARY_LIB), compat.join(CANARY_LIB))
            .unwrap();
        std::fs::create_dir_all(rootfs.join(VOLUME.trim_start_matches('/'))).unwrap();
        b.spec["mounts"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "destination": VOLUME,
                "type": "bind",
                "source": volume,
                // Writable: a read-only mount never updates access times.
                "options": ["rbind"],
            }));

        // Reading the volume's library moves its access time back past its modification time
        // (relatime): seen here first, so that the check below can fail.
        let outside = volume.join(CANARY_LIB);
        let atime = |p: &Path| std::fs::metadata(p).unwrap().accessed().unwrap();
        let past = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1);
        let set_past = || {
            let f = std::fs::File::options().write(true).open(&outside).unwrap();
            f.set_times(std::fs::FileTimes::new().set_accessed(past))
                .unwrap();
        };
        set_past();
        std::fs::read(&outside).unwrap();
        assert_ne!(
            atime(&outside),
            past,
            "{ctx}: reads do not show in atime here"
        );
        set_past();
        let guard = rig.canary.guard();

        let out = b
            .run_via(via, &rig.host.config, &container_id("compat"))
            .unwrap();
        let full = format!("{ctx}: {}", describe(&out));
        assert!(out.status.success(), "must start: {full}");
        let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
        assert!(report.lib(SONAME).in_ldcache, "soname cached: {full}");
        let cache = std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap();
        let cache = String::from_utf8_lossy(&cache);
        assert!(
            cache.contains(&format!("{COMPAT}/libdemo.so.1")),
            "the image's newer libdemo is in the cache: {full}"
        );
        assert!(
            !cache.contains(MARK),
            "the container's linker cache lists the volume's library: {full}"
        );
        assert_eq!(
            atime(&outside),
            past,
            "the volume's library was read: {full}"
        );
        guard.assert_unchanged(&ctx);
    }
}
