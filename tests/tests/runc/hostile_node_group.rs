//! Hostile input for the one write the finish step makes in a container's `/dev`: giving a node
//! the runtime made to the process's group (`devinject-hook finish --group-node`, which the NRI
//! plugin asks for, since NRI cannot add a group to the process).
//!
//! The real runc makes `/dev/demo/accel0` (`0660 root:4242`, from `linux.devices`) for a
//! process running as uid 1000 without that group. Normally the node is on the runtime's own
//! `/dev` tmpfs and ends in group 1000. Then a volume mounted over `/dev/demo` (or over the node
//! itself) brings every kind of object a volume can hold at that name: a file, a directory,
//! links (absolute, climbing, dangling), a hard link to the host's node, a FIFO, a socket, a
//! node of the same numbers on the host's disk, another char device, a block device, and a host
//! tmpfs (empty, so that runc makes the node on it, or holding one). For each, the start must be
//! refused (by us naming the path, or by runc), every host object must stay byte-, mode- and
//! owner-identical, and no planted special file may be opened (inotify).
//!
//! Needs root, runc and busybox; skipped otherwise (fails under `CI=true`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use devinject_tests::bins::bin;
use devinject_tests::canary::Fingerprint;
use devinject_tests::hostile::{self, char_node, climb, dir, fifo, file, link};
use devinject_tests::runc::{container_id, describe, Bundle};
use devinject_tests::sim::{demo_host, SimHost, ACCELS};
use devinject_tests::skip::require_runc_demo;
use inotify::{Inotify, WatchMask};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serde_json::json;

/// The group owning the accelerators.
const GROUP: u32 = 4242;
/// The node, in the container.
const NODE: &str = "/dev/demo/accel0";

/// What a volume brings at the node's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trap {
    File,
    Dir,
    AbsoluteLink,
    RelativeLink,
    DanglingLink,
    HardLinkToHostNode,
    Fifo,
    Socket,
    SameNumbersOnDisk,
    OtherCharDevice,
    BlockDevice,
    /// A host tmpfs over `/dev/demo` with nothing at the name: runc makes the node on it.
    EmptyHostTmpfs,
    /// A host tmpfs over `/dev/demo` already holding a node of the same numbers.
    HostTmpfsWithNode,
    /// The host's node itself bind-mounted over `/dev/demo/accel0`.
    HostNodeBind,
}

const TRAPS: [Trap; 14] = [
    Trap::File,
    Trap::Dir,
    Trap::AbsoluteLink,
    Trap::RelativeLink,
    Trap::DanglingLink,
    Trap::HardLinkToHostNode,
    Trap::Fifo,
    Trap::Socket,
    Trap::SameNumbersOnDisk,
    Trap::OtherCharDevice,
    Trap::BlockDevice,
    Trap::EmptyHostTmpfs,
    Trap::HostTmpfsWithNode,
    Trap::HostNodeBind,
];

/// A demo host whose accelerators are `0660 root:GROUP`.
fn host(dir: &Path) -> SimHost {
    let host = demo_host(&dir.join("host"), &["demo"]).unwrap();
    for (name, _, _) in ACCELS {
        let node = host.dev_root.join("demo").join(name);
        std::os::unix::fs::chown(&node, Some(0), Some(GROUP)).unwrap();
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o660)).unwrap();
    }
    host
}

/// A bundle running `args` as uid 1000 (no supplementary groups) whose spec makes accel0 and
/// whose finish hook is asked to give it to the process's group.
fn bundle(dir: &Path, host: &SimHost, args: &[&str]) -> Bundle {
    let (_, major, minor) = ACCELS[0];
    let mut b = Bundle::new(&dir.join("bundle"), args).unwrap();
    b.spec["process"]["user"] = json!({"uid": 1000, "gid": 1000});
    b.spec["linux"]["devices"] = json!([{
        "path": NODE, "type": "c", "major": major, "minor": minor,
        "fileMode": 0o660, "uid": 0, "gid": GROUP,
    }]);
    b.push_hook(
        "createRuntime",
        json!({
            "path": bin("devinject-hook"),
            "args": ["devinject-hook", "--config", host.config, "finish", "--group-node", NODE],
            "env": [],
            "timeout": 30,
        }),
    );
    b
}

/// Mounts `source` over container path `at` (a bind).
fn volume(b: &mut Bundle, source: &Path, at: &str) {
    b.spec["mounts"]
        .as_array_mut()
        .expect("mounts")
        .push(json!({"destination": at, "type": "bind", "source": source, "options": ["rbind"]}));
}

fn tmpfs(at: &Path) {
    std::fs::create_dir_all(at).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("mode=0755,size=1m"),
    )
    .unwrap();
}

/// Fills the volume `vol` for `trap`; returns what must never be opened.
fn plant(vol: &Path, host: &SimHost, trap: Trap) -> Vec<PathBuf> {
    let (_, major, minor) = ACCELS[0];
    let host_node = host.dev_root.join("demo/accel0");
    let at = "/accel0";
    let p = hostile::host(vol, at);
    std::fs::create_dir_all(vol).unwrap();
    match trap {
        Trap::File => file(vol, at, "a file of the volume\n").unwrap(),
        Trap::Dir => dir(vol, at).unwrap(),
        Trap::AbsoluteLink => link(vol, at, &host_node).unwrap(),
        Trap::RelativeLink => link(vol, at, climb(NODE, &host_node)).unwrap(),
        Trap::DanglingLink => link(vol, at, "/nowhere/devinject-dangling").unwrap(),
        Trap::HardLinkToHostNode => std::fs::hard_link(&host_node, &p).unwrap(),
        Trap::Fifo => fifo(vol, at).unwrap(),
        Trap::Socket => drop(std::os::unix::net::UnixListener::bind(&p).unwrap()),
        Trap::SameNumbersOnDisk | Trap::HostTmpfsWithNode => {
            if trap == Trap::HostTmpfsWithNode {
                tmpfs(vol);
            }
            char_node(vol, at, major.into(), minor.into()).unwrap();
            std::os::unix::fs::chown(&p, Some(0), Some(GROUP)).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o660)).unwrap();
        }
        // /dev/zero's numbers: a driver whose open would be harmless, and seen.
        Trap::OtherCharDevice => char_node(vol, at, 1, 5).unwrap(),
        Trap::BlockDevice => mknod(
            &p,
            SFlag::S_IFBLK,
            Mode::from_bits_truncate(0o660),
            makedev(7, 255),
        )
        .unwrap(),
        Trap::EmptyHostTmpfs => {
            tmpfs(vol);
            return Vec::new();
        }
        Trap::HostNodeBind => return vec![host_node],
    }
    match trap {
        Trap::Fifo
        | Trap::Socket
        | Trap::SameNumbersOnDisk
        | Trap::HostTmpfsWithNode
        | Trap::OtherCharDevice
        | Trap::BlockDevice
        | Trap::HardLinkToHostNode => vec![p],
        _ => Vec::new(),
    }
}

fn watch(paths: &[PathBuf]) -> Inotify {
    let ino = Inotify::init().unwrap();
    for p in paths {
        ino.watches()
            .add(
                p,
                WatchMask::OPEN | WatchMask::ACCESS | WatchMask::MODIFY | WatchMask::DONT_FOLLOW,
            )
            .unwrap_or_else(|e| panic!("watch {}: {e}", p.display()));
    }
    ino
}

fn events(ino: &mut Inotify) -> Vec<String> {
    let mut buf = [0u8; 4096];
    match ino.read_events(&mut buf) {
        Ok(evs) => evs.map(|e| format!("{:?}", e.mask)).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Vec::new(),
        Err(e) => panic!("inotify: {e}"),
    }
}

/// The refusal's text: runc's stderr, where a hook's message ends up.
fn refusal(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).replace("\\\"", "\"")
}

#[test]
fn on_the_runtimes_own_dev_the_node_goes_to_the_process_group() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = host(t.path());
    let b = bundle(
        t.path(),
        &host,
        &["/bin/stat", "-c", "%F %t:%T %a %u:%g", NODE],
    );
    let before = Fingerprint::of(std::slice::from_ref(&host.dev_root));
    let out = b.run(&container_id("regroup")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "character special file a:ed 660 0:1000",
        "runc made the node with the host's mode; the finish step gave it group 1000\n{}",
        describe(&out)
    );
    let changes = Fingerprint::of(std::slice::from_ref(&host.dev_root)).diff(&before);
    assert!(changes.is_empty(), "the host's nodes changed: {changes:?}");
}

#[test]
fn a_volume_over_the_node_is_refused_and_the_host_keeps_its_objects() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = host(t.path());
    let mut tally = std::collections::BTreeMap::new();
    for trap in TRAPS {
        let case = t.path().join(format!("{trap:?}"));
        let vol = case.join("volume");
        let mut b = bundle(&case, &host, &["/bin/true"]);
        let planted = plant(&vol, &host, trap);
        if trap == Trap::HostNodeBind {
            volume(&mut b, &host.dev_root.join("demo/accel0"), NODE);
        } else {
            volume(&mut b, &vol, "/dev/demo");
        }
        let roots = [host.dev_root.clone(), vol.clone()];
        let before = Fingerprint::of(&roots);
        let mut ino = watch(&planted);
        let out = b.run(&container_id("regroup-trap")).unwrap();
        let ctx = format!("{trap:?}: {}", describe(&out));

        let seen = events(&mut ino);
        assert!(
            seen.is_empty(),
            "planted objects were touched: {seen:?}\n{ctx}"
        );
        let mut changes = Fingerprint::of(&roots).diff(&before);
        if trap == Trap::EmptyHostTmpfs {
            // runc itself makes its node on the host tmpfs (and so touches the directory):
            // that node must keep the host's group.
            let made = vol.join("accel0");
            if let Ok(m) = std::fs::symlink_metadata(&made) {
                assert_eq!(
                    m.gid(),
                    GROUP,
                    "runc's node on the host tmpfs was regrouped\n{ctx}"
                );
            }
            changes.retain(|c| {
                !(c.starts_with(&format!("appeared {}", made.display()))
                    || c.starts_with(&format!("changed {}:", vol.display())))
            });
        }
        assert!(
            changes.is_empty(),
            "host objects changed: {changes:?}\n{ctx}"
        );
        assert!(!out.status.success(), "started over a volume\n{ctx}");
        let err = refusal(&out);
        assert!(
            err.contains(NODE) || err.contains("/dev/demo"),
            "the refusal does not name the node\n{ctx}"
        );
        let by = if err.contains("refusing to give") {
            "refused by devinject"
        } else {
            "refused by runc"
        };
        *tally.entry(by).or_insert(0) += 1;

        if matches!(trap, Trap::EmptyHostTmpfs | Trap::HostTmpfsWithNode) {
            nix::mount::umount2(&vol, nix::mount::MntFlags::MNT_DETACH).unwrap();
        }
        hostile::remove(&case).unwrap();
    }
    eprintln!("{} traps: {tally:?}", TRAPS.len());
    assert!(
        tally.get("refused by devinject").copied().unwrap_or(0) >= 4,
        "the finish step's own checks were reached too rarely to be tested: {tally:?}"
    );
}
