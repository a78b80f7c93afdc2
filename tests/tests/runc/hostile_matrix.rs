//! Hostile input as a matrix, not a list: every path the hook, the shim's finish step and the
//! ldconfig fallback open, read or write inside a rootfs, times every kind of object an image or
//! a volume can put there, through the hook and through the shim with the real runc on cgroup v1
//! and v2, with the built-in cache writer and with the ldconfig fallback
//! (`ldcache = "ldconfig"`), and with the library mounted under its soname
//! (`library_names = "soname"`: the soname's path is then a mount point, not a link), and with
//! the container in a user namespace (the image's files seen owned by nobody, the nodes given as
//! copies the container owns).
//!
//! For each case the host canaries (a canary tree, the real host paths an escape would write,
//! the file a hard link points to, the file behind a loop device) must stay byte-identical,
//! nothing the image planted (a FIFO, a socket, a device node, a hard link to a host file, a
//! file of another mount) may be opened, read or written by us (inotify watches each planted
//! inode; the container runs `/bin/true`, so no event can be its own), and the start either
//! succeeds or fails with our message naming the path or one of its parents.
//!
//! Through docker (`docker run --runtime=devinject`, the shim behind a real dockerd and
//! containerd), what an image can hold comes in an image layer (`docker import` of the planted
//! tree: files, directories, links, FIFOs and device nodes, as docker unpacks them), and what
//! only a volume can bring (a hard link to a host file, a socket, a mount of another uid) comes
//! as a `-v` bind mount. The engine runs on the `vfs` storage driver so that the container's root
//! filesystem is a plain directory that exists once the container is created: its planted inodes
//! are watched before `docker start`. (An overlay mount would hide opens of lower-layer special
//! files from inotify.) Where docker's own mounts (`/etc/hosts` and friends) cannot be made
//! because the image broke `/etc`, the start fails in the runtime before any of our code runs;
//! such a refusal must still name the path.
//!
//! The runtime's `/dev` tmpfs hides the image's `/dev`, so node destinations are not in the
//! matrix (tests/tests/runc/hostile_rootfs.rs covers images run without that tmpfs).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use devinject_tests::bins::bin;
use devinject_tests::canary::Canary;
use devinject_tests::docker::{Engine, RuntimeEntry};
use devinject_tests::hostile::{self, char_node, climb, dir, fifo, file, link};
use devinject_tests::runc::{cgroup_v2, container_id, describe, runc_path, shim_command, Bundle};
use devinject_tests::sim::{demo_host, set_config, SimHost};
use devinject_tests::skip::{require, require_binary, require_runc_demo};
use inotify::{Inotify, WatchMask};

/// Paths where a file of ours (or ldconfig's) goes.
const FILES: &[&str] = &[
    "/usr/lib/libdemo.so.1.0.0",
    "/usr/lib/libdemo.so.1",
    "/usr/bin/demo-smi",
    "/etc/ld.so.cache",
    "/etc/ld.so.cache~devinject",
    "/etc/ld.so.cache~",
    "/var/cache/ldconfig/aux-cache~",
];

/// Directories we create files in, or ldconfig writes in.
const DIRS: &[&str] = &[
    "/usr/lib",
    "/usr/bin",
    "/etc",
    "/var/cache/ldconfig",
    "/var/cache",
];

/// What an image or a volume can put at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    AbsoluteLink,
    RelativeLink,
    DanglingLink,
    HardLinkToHost,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    ForeignMount,
}

const KINDS: [Kind; 11] = [
    Kind::File,
    Kind::Dir,
    Kind::AbsoluteLink,
    Kind::RelativeLink,
    Kind::DanglingLink,
    Kind::HardLinkToHost,
    Kind::Fifo,
    Kind::Socket,
    Kind::CharDevice,
    Kind::BlockDevice,
    Kind::ForeignMount,
];

/// The host configuration and profile a matrix runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    /// As installed: the hook writes the cache, libraries keep their file names.
    Default,
    /// `ldcache = "ldconfig"`: ldconfig writes the cache.
    Ldconfig,
    /// `library_names = "soname"` in the demo profile.
    SonameNames,
    /// As installed, the container in a user namespace (its ids 0-65535 as the host's
    /// 100000-165535): the image's objects are seen owned by others, the nodes are given as
    /// copies, and the root hook must do no more with the image than without one.
    UserNamespace,
}

/// How the container is started: runc with the hook or behind the shim, on this host's
/// cgroup v1 or on cgroup v2 (runc in a private mount namespace with cgroup2 mounted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Hook,
    Shim,
    HookV2,
    ShimV2,
    /// `docker run --runtime=devinject` (the shim) on a private docker engine.
    Docker,
}

/// The host side of the matrix: the simulated devices, the canary, a loop device backed by a
/// canary file, and a host file for hard links.
struct Host {
    _t: tempfile::TempDir,
    dir: PathBuf,
    sim: SimHost,
    canary: Canary,
    loop_dev: Loop,
    hard_target: PathBuf,
}

/// A loop device over a canary file, detached on drop.
struct Loop {
    dev: PathBuf,
    backing: PathBuf,
    rdev: u64,
}

impl Loop {
    fn new(backing: &Path) -> Loop {
        std::fs::write(backing, vec![0xa5u8; 1 << 20]).unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(backing)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {out:?}");
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let rdev = std::fs::metadata(&dev).unwrap().rdev();
        Loop {
            dev,
            backing: backing.to_owned(),
            rdev,
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

fn host() -> Host {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().to_owned();
    let sim = demo_host(&dir.join("host"), &["demo"]).unwrap();
    // Short, so that ldconfig blocked on an image's FIFO ends quickly.
    set_config(&sim.config, "ldconfig_timeout", "3").unwrap();
    let canary = Canary::new(&dir.join("canary")).unwrap();
    let loop_dev = Loop::new(&dir.join("canary-disk.img"));
    // Outside the canary tree: unlinking the image's name for it changes its link count and
    // ctime, which is not a write; its bytes, mode and owner are checked instead.
    let hard_target = dir.join("hard-link-target");
    std::fs::write(&hard_target, "a host file the image hard-linked\n").unwrap();
    Host {
        _t: t,
        dir,
        sim,
        canary,
        loop_dev,
        hard_target,
    }
}

/// Puts `kind` at container path `at`; returns the host paths of what was planted that must
/// never be opened (watched with inotify).
fn plant(h: &Host, rootfs: &Path, at: &str, kind: Kind) -> Vec<PathBuf> {
    let p = hostile::host(rootfs, at);
    let target = h.canary.path("usr/lib");
    match kind {
        Kind::File => {
            file(rootfs, at, "planted by the image\n").unwrap();
            vec![p]
        }
        Kind::Dir => {
            dir(rootfs, at).unwrap();
            vec![]
        }
        Kind::AbsoluteLink => {
            link(rootfs, at, &target).unwrap();
            vec![]
        }
        Kind::RelativeLink => {
            link(rootfs, at, climb(at, &target)).unwrap();
            vec![]
        }
        Kind::DanglingLink => {
            link(rootfs, at, "/nowhere/devinject-dangling").unwrap();
            vec![]
        }
        Kind::HardLinkToHost => {
            hostile::remove(&p).unwrap();
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::hard_link(&h.hard_target, &p).unwrap();
            vec![p]
        }
        Kind::Fifo => {
            fifo(rootfs, at).unwrap();
            vec![p]
        }
        Kind::Socket => {
            hostile::remove(&p).unwrap();
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            drop(std::os::unix::net::UnixListener::bind(&p).unwrap());
            vec![p]
        }
        Kind::CharDevice => {
            // A real driver whose open is harmless and observable: /dev/zero's.
            char_node(rootfs, at, 1, 5).unwrap();
            vec![p]
        }
        Kind::BlockDevice => {
            hostile::remove(&p).unwrap();
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            nix::sys::stat::mknod(
                &p,
                nix::sys::stat::SFlag::S_IFBLK,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                h.loop_dev.rdev,
            )
            .unwrap();
            vec![p]
        }
        Kind::ForeignMount => {
            // A volume owned by another uid; a file in it stands for what the volume holds.
            let d = if FILES.contains(&at) {
                p.parent().unwrap().to_owned()
            } else {
                p.clone()
            };
            std::fs::create_dir_all(&d).unwrap();
            nix::mount::mount(
                Some("tmpfs"),
                &d,
                Some("tmpfs"),
                nix::mount::MsFlags::empty(),
                Some("uid=1000,gid=1000,mode=0755,size=4m"),
            )
            .unwrap();
            let inside = if FILES.contains(&at) {
                p.clone()
            } else {
                d.join("volume-file")
            };
            std::fs::write(&inside, "a file of the volume\n").unwrap();
            std::os::unix::fs::chown(&inside, Some(1000), Some(1000)).unwrap();
            vec![inside]
        }
    }
}

/// What must never happen to a planted object: a special file opened at all, or any file written
/// in place. (The image's regular files, hard-linked or on a volume, may be read: the cache is.)
fn watch(paths: &[PathBuf], kind: Kind) -> Inotify {
    let ino = Inotify::init().unwrap();
    let mask = match kind {
        Kind::Fifo | Kind::Socket | Kind::CharDevice | Kind::BlockDevice => {
            WatchMask::OPEN | WatchMask::ACCESS | WatchMask::MODIFY
        }
        _ => WatchMask::MODIFY,
    } | WatchMask::DONT_FOLLOW;
    for p in paths {
        ino.watches()
            .add(p, mask)
            .unwrap_or_else(|e| panic!("watch {}: {e}", p.display()));
    }
    ino
}

fn events(ino: &mut Inotify) -> Vec<String> {
    let mut buf = [0u8; 4096];
    match ino.read_events(&mut buf) {
        // IGNORED: the watch went with its inode, which the hook replaced (unlinked): fine.
        Ok(evs) => evs
            .filter(|e| !e.mask.contains(inotify::EventMask::IGNORED))
            .map(|e| format!("{:?}", e.mask))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Vec::new(),
        Err(e) => panic!("inotify: {e}"),
    }
}

/// The paths a refusal may name for a trap at `at`: it, or one of its parents.
fn named(at: &str) -> Vec<String> {
    let mut out = vec![at.to_owned()];
    let mut p = Path::new(at);
    while let Some(parent) = p.parent() {
        if parent != Path::new("/") {
            out.push(parent.to_string_lossy().into_owned());
        }
        p = parent;
    }
    out
}

/// What a case leaves to check after the start: the planted inodes being watched, and the host
/// files' state before it.
struct Before {
    ino: Inotify,
    backing: Vec<u8>,
    hard: HostFile,
    guard: devinject_tests::canary::HostGuard,
}

type HostFile = (Vec<u8>, u32, u32, u32);

fn host_file(p: &Path) -> HostFile {
    let m = std::fs::metadata(p).unwrap();
    (std::fs::read(p).unwrap(), m.mode(), m.uid(), m.gid())
}

fn before(h: &Host, planted: &[PathBuf], kind: Kind) -> Before {
    Before {
        backing: std::fs::read(&h.loop_dev.backing).unwrap(),
        hard: host_file(&h.hard_target),
        guard: h.canary.guard(),
        ino: watch(planted, kind),
    }
}

/// Checks what must hold whatever the outcome, then the outcome itself: started, refused by us
/// naming the path or a parent, or (docker only) refused by the runtime naming it.
fn check(h: &Host, mut b: Before, at: &str, via: Via, out: &Output, name: &str) -> &'static str {
    let seen = events(&mut b.ino);
    let ctx = format!("{name}: {}", describe(out));
    assert!(
        seen.is_empty(),
        "planted objects were touched: {seen:?}\n{ctx}"
    );
    let changes = b.guard.changes();
    assert!(
        changes.is_empty(),
        "host canary changed: {changes:?}\n{ctx}"
    );
    assert!(
        std::fs::read(&h.loop_dev.backing).unwrap() == b.backing,
        "the loop device's disk was written\n{ctx}"
    );
    assert!(
        host_file(&h.hard_target) == b.hard,
        "the hard-linked host file was written\n{ctx}"
    );
    if out.status.success() {
        return "started";
    }
    let err = String::from_utf8_lossy(&out.stderr).replace("\\\"", "\"");
    assert!(
        named(at).iter().any(|p| err.contains(p.as_str())),
        "the refusal names neither {at} nor a parent\n{ctx}"
    );
    if err.contains("devinject") {
        "refused"
    } else {
        assert!(via == Via::Docker, "not our refusal\n{ctx}");
        "refused by the runtime"
    }
}

fn case_name(at: &str, kind: Kind, via: Via, setting: Setting) -> String {
    match setting {
        Setting::Default => format!("{at} as {kind:?} via {via:?}"),
        _ => format!("{at} as {kind:?} via {via:?} ({setting:?})"),
    }
}

/// The directory a planted volume was mounted on, for `kind` at `at` under `root`.
fn volume_dir(root: &Path, at: &str) -> PathBuf {
    let p = hostile::host(root, at);
    if FILES.contains(&at) {
        p.parent().unwrap().to_owned()
    } else {
        p
    }
}

fn run_case(h: &Host, at: &str, kind: Kind, via: Via, setting: Setting) -> &'static str {
    let name = case_name(at, kind, via, setting);
    let mut b = Bundle::new(&h.dir.join("bundle"), &["/bin/true".to_owned()]).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0");
    if setting == Setting::UserNamespace {
        b.user_namespace(100_000, 65_536);
    }
    let rootfs = b.rootfs();
    let planted = plant(h, &rootfs, at, kind);
    let state = before(h, &planted, kind);
    let id = container_id("matrix");
    let runc = runc_path();
    let mut cmd = match via {
        Via::Hook | Via::HookV2 => {
            b.hook("createRuntime", &bin("devinject-hook"), &h.sim.config);
            vec![runc]
        }
        Via::Shim | Via::ShimV2 => shim_command(&h.sim.config, &runc),
        Via::Docker => unreachable!("docker cases run in docker_case"),
    };
    if matches!(via, Via::HookV2 | Via::ShimV2) {
        let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
        cmd = cgroup_v2(&refs);
    }
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out: Output = b.run_with(&refs, &id).unwrap();
    let outcome = check(h, state, at, via, &out, &name);
    // Unmount a planted volume before the bundle goes.
    if kind == Kind::ForeignMount {
        nix::mount::umount2(&volume_dir(&rootfs, at), nix::mount::MntFlags::MNT_DETACH).unwrap();
    }
    hostile::remove(&h.dir.join("bundle")).unwrap();
    outcome
}

/// The docker engine of the docker cases: the shim registered as `devinject`, on `vfs`, with a
/// plain busybox image for the cases that bring their trap in a volume.
fn docker_engine(h: &Host) -> Engine {
    let runc = runc_path();
    let shim = RuntimeEntry::new(
        "devinject",
        &bin("devinject-runtime"),
        &[
            "--config".to_owned(),
            h.sim.config.to_str().unwrap().to_owned(),
            "--runtime".to_owned(),
            runc,
        ],
    );
    let engine = Engine::start_with(&[shim], &["--storage-driver=vfs"]).unwrap();
    engine.import_busybox().unwrap();
    engine
}

/// One case through docker: the trap in an image layer, or in a volume where only a volume can
/// bring it.
fn docker_case(h: &Host, engine: &Engine, at: &str, kind: Kind) -> &'static str {
    let name = case_name(at, kind, Via::Docker, Setting::Default);
    let work = h.dir.join("docker-case");
    let in_volume = matches!(
        kind,
        Kind::HardLinkToHost | Kind::Socket | Kind::ForeignMount
    );
    let mut args: Vec<String> = vec![
        "create".into(),
        "--runtime=devinject".into(),
        "-e".into(),
        "DEMO_VISIBLE_DEVICES=0".into(),
    ];
    let image_root = work.join("image");
    let volume_root = work.join("volume");
    let image = if in_volume {
        let planted = plant(h, &volume_root, at, kind);
        let dir = volume_dir(&volume_root, at);
        let source = if kind == Kind::ForeignMount || FILES.contains(&at) {
            dir
        } else {
            hostile::host(&volume_root, at)
        };
        let target = source.strip_prefix(&volume_root).unwrap();
        args.push("-v".into());
        args.push(format!("{}:/{}", source.display(), target.display()));
        (devinject_tests::docker::IMAGE.to_owned(), planted)
    } else {
        devinject_tests::rootfs::busybox(&image_root).unwrap();
        let planted = plant(h, &image_root, at, kind);
        engine.import(&image_root, "devinject-matrix:case").unwrap();
        ("devinject-matrix:case".to_owned(), planted)
    };
    args.push(image.0.clone());
    args.push("/bin/true".into());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = engine.docker_ok(&refs).unwrap();
    // The planted inodes as the container will see them: the volume's are the host's own, the
    // image's are copies in the container's vfs directory.
    // docker's init layer puts its own `/etc` (and `/etc/hosts` ...) over the image's: an
    // object it replaced is not in the container at all.
    let mut replaced = false;
    let planted: Vec<PathBuf> = if in_volume {
        image.1
    } else {
        let rootfs = engine.vfs_rootfs(&id).unwrap();
        let kind_of = |p: &Path| std::fs::symlink_metadata(p).map(|m| m.file_type()).ok();
        image
            .1
            .iter()
            .filter_map(|p| {
                let seen = rootfs.join(p.strip_prefix(&image_root).unwrap());
                let same = kind_of(&seen) == kind_of(p);
                replaced |= !same;
                same.then_some(seen)
            })
            .collect()
    };
    let state = before(h, &planted, kind);
    let out = engine.docker(&["start", "-a", &id]);
    let outcome = match check(h, state, at, Via::Docker, &out, &name) {
        "started" if replaced => "started (the engine replaced the trap)",
        outcome => outcome,
    };
    engine.docker_ok(&["rm", "-f", &id]).unwrap();
    if in_volume {
        if kind == Kind::ForeignMount {
            nix::mount::umount2(
                &volume_dir(&volume_root, at),
                nix::mount::MntFlags::MNT_DETACH,
            )
            .unwrap();
        }
    } else {
        engine.docker_ok(&["rmi", "devinject-matrix:case"]).unwrap();
    }
    hostile::remove(&work).unwrap();
    outcome
}

fn matrix(via: Via, setting: Setting) {
    if !(require_runc_demo()
        && require_binary("losetup")
        && (via != Via::Docker
            || (require_binary("dockerd")
                && require_binary("containerd")
                && require_binary("tar")))
        && require_binary("unshare")
        && require(
            Path::new("/dev/loop-control").exists(),
            "needs loop devices",
        ))
    {
        return;
    }
    let h = host();
    match setting {
        Setting::Default | Setting::UserNamespace => {}
        Setting::Ldconfig => set_config(&h.sim.config, "ldcache", "\"ldconfig\"").unwrap(),
        Setting::SonameNames => h
            .sim
            .set_profile_key("demo", "library_names", "\"soname\"")
            .unwrap(),
    }
    let engine = (via == Via::Docker).then(|| docker_engine(&h));
    let mut tally = std::collections::BTreeMap::new();
    let mut cases = 0;
    for at in FILES.iter().chain(DIRS) {
        for kind in KINDS {
            // A directory where a directory belongs is the normal image.
            if kind == Kind::Dir && DIRS.contains(at) {
                continue;
            }
            let outcome = match &engine {
                Some(engine) => docker_case(&h, engine, at, kind),
                None => run_case(&h, at, kind, via, setting),
            };
            *tally.entry(outcome).or_insert(0) += 1;
            cases += 1;
        }
    }
    eprintln!("{cases} cases via {via:?} ({setting:?}): {tally:?}");
    assert!(cases >= 100, "the matrix shrank to {cases} cases");
}

#[test]
fn hook_matrix_with_the_builtin_cache_writer() {
    matrix(Via::Hook, Setting::Default);
}

#[test]
fn shim_matrix_with_the_builtin_cache_writer() {
    matrix(Via::Shim, Setting::Default);
}

#[test]
fn hook_matrix_with_the_ldconfig_fallback() {
    matrix(Via::Hook, Setting::Ldconfig);
}

#[test]
fn hook_matrix_with_libraries_named_by_soname() {
    matrix(Via::Hook, Setting::SonameNames);
}

#[test]
fn shim_matrix_with_libraries_named_by_soname() {
    matrix(Via::Shim, Setting::SonameNames);
}

#[test]
fn hook_matrix_on_cgroup_v2() {
    matrix(Via::HookV2, Setting::Default);
}

#[test]
fn shim_matrix_on_cgroup_v2() {
    matrix(Via::ShimV2, Setting::Default);
}

#[test]
fn hook_matrix_in_a_user_namespace() {
    matrix(Via::Hook, Setting::UserNamespace);
}

#[test]
fn shim_matrix_in_a_user_namespace() {
    matrix(Via::Shim, Setting::UserNamespace);
}

#[test]
fn docker_matrix_with_the_shim() {
    matrix(Via::Docker, Setting::Default);
}
