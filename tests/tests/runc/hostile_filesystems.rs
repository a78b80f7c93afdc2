//! Hostile input along the filesystem axis: which filesystem a path we read or write lands on.
//! The hostile matrix (`hostile_matrix.rs`) plants objects in the image; here the spec and the
//! runtime bring the filesystems, with the real runc, through the hook and through the shim:
//!
//! - procfs, which runc mounts before the hooks run: an image linking its linker cache to
//!   `/proc/kmsg` must not have root read (and so consume) the host kernel's log;
//! - volumes the spec mounts straight at the directories we write (`/etc`, `/usr/lib`, `/usr/bin`,
//!   `/var/cache`, the device directory), root-owned host directories a uid-1000 process could
//!   not write: nothing of ours may land in them, nothing of theirs may be removed;
//! - a read-only rootfs that is a plain directory (an image other containers run from): never
//!   written, while a read-only rootfs mounted for the container alone is injected as before;
//! - the image's linker cache kept from the container's user (`0600 root`): the new one is not
//!   handed to it readable.
//!
//! The threats are rows of docs/security.md's threat model. Each case pins its outcome per applier;
//! the volumes and the rootfs are fingerprinted (type, mode, owner, size, times, content) before
//! and after.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use devinject_tests::canary::HostGuard;
use devinject_tests::hostile::link;
use devinject_tests::probe::Report;
use devinject_tests::runc::{container_id, describe, hook_failure, Bundle, Via};
use devinject_tests::sim::{demo_host, demo_probe_args, set_config, SimHost, LIB, SONAME};
use devinject_tests::skip::require_runc_demo;
use serde_json::json;

const VIAS: [Via; 2] = [Via::Hook, Via::Shim];

/// A demo host and a bundle asking for demo device 0.
struct Rig {
    _t: tempfile::TempDir,
    dir: PathBuf,
    host: SimHost,
}

fn rig() -> Rig {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().to_owned();
    let host = demo_host(&dir.join("host"), &["demo"]).unwrap();
    Rig { _t: t, dir, host }
}

impl Rig {
    fn bundle(&self, name: &str) -> Bundle {
        let mut b = Bundle::new(&self.dir.join(name), &demo_probe_args()).unwrap();
        b.env("DEMO_VISIBLE_DEVICES=0");
        b
    }
}

/// Our refusal: the code and the `devinject: ` line, from a failed hook or from the shim itself.
fn refusal(out: &Output) -> Option<(i32, String)> {
    if let Some(f) = hook_failure(out) {
        return Some((f.code, f.line("devinject: ")?));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .map(str::trim)
        .find_map(|l| l.find("devinject: ").map(|i| l[i..].to_owned()))?;
    Some((out.status.code()?, line))
}

/// Asserts the start was refused with exit code 7 and a message holding every text of `want`.
fn assert_refused(out: &Output, want: &[&str], ctx: &str) {
    let full = format!("{ctx}: {}", describe(out));
    assert!(!out.status.success(), "must not start: {full}");
    let (code, line) = refusal(out).unwrap_or_else(|| panic!("no refusal of ours: {full}"));
    assert_eq!(code, 7, "exit code: {full}");
    for text in want {
        assert!(line.contains(text), "want {text:?} in {line:?}: {full}");
    }
}

/// Asserts the container started with device 0 and the library, read-only and cached.
fn assert_injected(out: &Output, ctx: &str) {
    let full = format!("{ctx}: {}", describe(out));
    assert!(out.status.success(), "must start: {full}");
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    let n = report.node("/dev/demo/accel0");
    assert_eq!(
        (n.major, n.minor, n.open.as_str()),
        (10, 237, "ok"),
        "{full}"
    );
    let lib = report.lib(LIB);
    assert!(lib.present && lib.read_only, "library: {full}");
    assert!(report.lib(SONAME).in_ldcache, "soname cached: {full}");
}

// procfs.

/// Everything `/proc/kmsg` has for a reader now (non-blocking: it stops when the log is drained).
fn drain_kmsg() -> String {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open("/proc/kmsg")
        .expect("open /proc/kmsg");
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("read /proc/kmsg: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An image links `/etc/ld.so.cache -> /proc/kmsg`. runc mounts the container's procfs before its
/// createRuntime hooks, and `/proc/kmsg` is a regular file to `fstat`: a hook reading it as host
/// root would consume the host kernel's log. What the hook reads of the image resolves on the
/// rootfs's own filesystem only: the link is replaced by a new cache and a line logged just before
/// the start is still there for the host's reader.
#[test]
fn a_linker_cache_linked_onto_procfs_is_never_read() {
    if !require_runc_demo() {
        return;
    }
    let rig = rig();
    for via in VIAS {
        let ctx = format!("/etc/ld.so.cache -> /proc/kmsg via {via:?}");
        let mut b = rig.bundle(&format!("kmsg-{via:?}"));
        link(&b.rootfs(), "/etc/ld.so.cache", "/proc/kmsg").unwrap();
        drain_kmsg();
        let marker = format!("devinject-kmsg-marker-{}", container_id("m"));
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/kmsg")
            .and_then(|mut f| f.write_all(format!("{marker}\n").as_bytes()))
            .expect("log a line to /dev/kmsg");
        let out = b
            .run_via(via, &rig.host.config, &container_id("kmsg"))
            .unwrap();
        let log = drain_kmsg();
        assert!(
            log.contains(&marker),
            "{ctx}: the kernel log line was consumed before the host read it"
        );
        assert_injected(&out, &ctx);
        let cache = std::fs::symlink_metadata(b.rootfs().join("etc/ld.so.cache")).unwrap();
        assert!(cache.is_file(), "{ctx}: the link is replaced by a cache");
    }
}

// Volumes the spec mounts.

/// A root-owned host directory (0755) holding `files`, mounted read-write by the spec at `at`.
fn volume(b: &mut Bundle, host_dir: &Path, at: &str, files: &[(&str, u32)]) {
    std::fs::create_dir_all(host_dir).unwrap();
    std::fs::set_permissions(host_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, mode) in files {
        let p = host_dir.join(name);
        std::fs::write(&p, format!("the volume's own {name}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    b.spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": at,
        "type": "bind",
        "source": host_dir,
        "options": ["rbind", "rw"],
    }));
}

/// One volume case: where it is mounted, what it holds, and whether the container may start
/// (nothing of ours goes there) or must be refused naming the path.
struct VolumeCase {
    at: &'static str,
    files: &'static [(&'static str, u32)],
    starts: bool,
}

const VOLUME_CASES: [VolumeCase; 5] = [
    VolumeCase {
        at: "/etc",
        files: &[("ld.so.cache", 0o600), ("passwd", 0o644)],
        starts: false,
    },
    VolumeCase {
        at: "/usr/lib",
        files: &[("libdemo.so.1.0.0", 0o644), ("libdemo.so.1", 0o644)],
        starts: false,
    },
    VolumeCase {
        at: "/usr/bin",
        files: &[("demo-smi", 0o755)],
        starts: false,
    },
    VolumeCase {
        at: "/var/cache",
        files: &[("keep", 0o600)],
        starts: true,
    },
    VolumeCase {
        at: "/dev/demo",
        files: &[("keep", 0o600)],
        starts: false,
    },
];

/// Root-owned host directories mounted by the spec straight at every directory we write, for a
/// uid-1000 process that could not write them. Through the hook and the shim, with the built-in
/// cache writer and with ldconfig: the volumes stay byte-, mode- and owner-identical (no file,
/// link, node or cache of ours lands in them, none of theirs is replaced), and the start is refused
/// naming the path wherever the plan needs to write there.
#[test]
fn volumes_the_spec_mounts_are_never_written_for_the_container() {
    if !require_runc_demo() {
        return;
    }
    for writer in ["builtin", "ldconfig"] {
        let rig = rig();
        set_config(&rig.host.config, "ldcache", &format!("\"{writer}\"")).unwrap();
        for case in &VOLUME_CASES {
            for via in VIAS {
                let ctx = format!("a volume at {} via {via:?} ({writer})", case.at);
                let name = format!("vol{}-{via:?}", case.at.replace('/', "-"));
                let mut b = rig.bundle(&name);
                b.spec["process"]["user"] = json!({"uid": 1000, "gid": 1000});
                let host_dir = rig.dir.join(format!("{name}-volume"));
                volume(&mut b, &host_dir, case.at, case.files);
                let guard = HostGuard::new(vec![host_dir.clone()]);
                let out = b
                    .run_via(via, &rig.host.config, &container_id("vol"))
                    .unwrap();
                if case.starts {
                    let full = format!("{ctx}: {}", describe(&out));
                    assert!(out.status.success(), "must start: {full}");
                } else {
                    assert_refused(&out, &[case.at], &ctx);
                }
                guard.assert_unchanged(&ctx);
            }
        }
    }
}

// A read-only rootfs.

/// The spec sets `root.readonly` on a rootfs that is a plain directory, as podman `--rootfs DIR
/// --read-only` and runc bundles over one image have it. runc makes it read-only only after the
/// createRuntime hooks, so placeholders, a soname link and a cache written by the hook would land
/// in the shared image, and a later container that asked for nothing would find a link to an empty
/// library. Nothing is written into it: the start is refused, saying why and what to do, and the
/// image stays byte-identical.
#[test]
fn a_read_only_rootfs_shared_as_a_plain_directory_is_never_written() {
    if !require_runc_demo() {
        return;
    }
    let rig = rig();
    for via in VIAS {
        let ctx = format!("a read-only plain-directory rootfs via {via:?}");
        let mut b = rig.bundle(&format!("ro-{via:?}"));
        b.spec["root"]["readonly"] = json!(true);
        let guard = HostGuard::new(vec![b.rootfs()]);
        let out = b
            .run_via(via, &rig.host.config, &container_id("ro"))
            .unwrap();
        assert_refused(&out, &["read-only", "writes nothing into it"], &ctx);
        guard.assert_unchanged(&ctx);
    }
}

/// The rootfs mounted for this container alone, as an engine's layer is (here a bind of the
/// bundle's directory onto itself), detached again when dropped.
struct OwnMount(PathBuf);

impl OwnMount {
    fn new(rootfs: &Path) -> Self {
        nix::mount::mount(
            Some(rootfs),
            rootfs,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        Self(rootfs.to_owned())
    }
}

impl Drop for OwnMount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The other side of the shared plain directory: a read-only rootfs that is a mount of its own
/// (every engine's per-container layer: containerd's and CRI-O's snapshots, docker's overlay) is
/// written before the runtime makes it read-only, as `readOnlyRootFilesystem` pods need.
#[test]
fn a_read_only_rootfs_mounted_for_the_container_alone_is_injected() {
    if !require_runc_demo() {
        return;
    }
    let rig = rig();
    for via in VIAS {
        let ctx = format!("a read-only rootfs of its own via {via:?}");
        let mut b = rig.bundle(&format!("ro-own-{via:?}"));
        b.spec["root"]["readonly"] = json!(true);
        let _own = OwnMount::new(&b.rootfs());
        let out = b
            .run_via(via, &rig.host.config, &container_id("ro-own"))
            .unwrap();
        assert_injected(&out, &ctx);
    }
}

// The linker cache's readers.

/// An image whose `/etc/ld.so.cache` is `0600 root` keeps it from a non-root process; merged into a
/// new `0644` cache, it would hand the process what it could not read. The new cache keeps the old
/// one's mode and owner.
#[test]
fn the_new_linker_cache_keeps_the_image_cache_mode_and_owner() {
    if !require_runc_demo() {
        return;
    }
    let rig = rig();
    for via in VIAS {
        let ctx = format!("a 0600 root cache via {via:?}");
        let mut b = rig.bundle(&format!("cache-{via:?}"));
        let cache = b.rootfs().join("etc/ld.so.cache");
        std::fs::copy("/etc/ld.so.cache", &cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o600)).unwrap();
        let before = std::fs::read(&cache).unwrap();
        let out = b
            .run_via(via, &rig.host.config, &container_id("cache"))
            .unwrap();
        assert_injected(&out, &ctx);
        let after = std::fs::symlink_metadata(&cache).unwrap();
        assert_ne!(std::fs::read(&cache).unwrap(), before, "{ctx}: not merged");
        assert_eq!(after.mode() & 0o7777, 0o600, "{ctx}: mode");
        assert_eq!((after.uid(), after.gid()), (0, 0), "{ctx}: owner");
    }
}
