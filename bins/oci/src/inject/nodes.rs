//! Device nodes in the container's `/dev`.
//!
//! Normally a node is made with `mknodat` in the runtime's `/dev` tmpfs (never in a volume:
//! [`Rootfs::node_dir`]), with the host node's
//! type, numbers, mode and owner. In a user namespace `mknod` is refused and a node on a tmpfs
//! mounted there would not work anyway; the host node, bound, would be seen owned by nobody. So
//! the node is a copy made on a tmpfs of the hook's own, in the host's user namespace, owned by
//! the host ids the container maps for its owner and group ([`owned_node`]), and
//! attached like a bind. Without the ids mapped or the new mount API, a node others may not use
//! is refused before the container starts.
//!
//! A node only its group may use (a render node's `0660 root:render`) is made with the
//! process's own group when the process lacks that one (it runs as uid 1000 with no
//! supplementary groups): the device grant is what decides, not the host's group list. Where the
//! runtime made the node (NRI, whose adjustment cannot add a group to the process), [`regroup`]
//! changes the group of that node, and of nothing else.

use std::os::fd::AsFd;
use std::path::Path;

use devinject_devices::node::{major, makedev, minor};
use devinject_devices::{DeviceKind, DeviceNode};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::sys::statfs::{fstatfs, TMPFS_MAGIC};

use super::at_name::{self, AtName};
use super::mounts::{attach, MountAttrs, Source};
use super::rootfs::{entry_at, split, Rootfs, RootfsError};
use super::InjectError;
use devinject_hostfs::file_kind;

/// Creates `node` in the rootfs, with group `gid`: by mknod when `bind` is `None`, else by
/// attaching `bind` (which keeps the host node's owner).
pub fn create(
    root: &Rootfs,
    node: &DeviceNode,
    bind: Option<Source>,
    gid: u32,
) -> Result<(), InjectError> {
    let path = &node.container_path;
    if !path.starts_with("/dev") || path == Path::new("/dev") {
        return Err(InjectError::Rootfs(RootfsError {
            op: "create a device node outside /dev at",
            path: path.clone(),
            errno: Errno::EINVAL,
        }));
    }
    if let Some(source) = bind {
        return attach(root, path, source, MountAttrs::Device);
    }
    let (parent, name) = split(path)?;
    let dir = root.node_dir(&parent)?;
    let rerr = |op, errno| {
        InjectError::Rootfs(RootfsError {
            op,
            path: path.clone(),
            errno,
        })
    };
    let kind = file_type(node.kind);
    let rdev = makedev(node.major, node.minor);
    let calls = root.calls();
    match at_name::for_node(entry_at(calls, &dir, name, path)?, kind, rdev) {
        AtName::Make => {}
        AtName::Keep => return Ok(()),
        AtName::Refuse { op, errno } => return Err(rerr(op, errno)),
        AtName::Replace => {
            calls
                .unlink_at(dir.as_fd(), name)
                .map_err(|e| rerr("replace", e))?;
        }
    }
    calls
        .mknod_at(dir.as_fd(), name, kind, node.mode, rdev)
        .map_err(|e| rerr("mknod", e))?;
    calls
        .chown_at(dir.as_fd(), name, Some(node.uid), Some(gid))
        .map_err(|e| rerr("chown", e))?;
    Ok(())
}

/// Gives the node the runtime made for `node` to group `gid`, after proving through its fd that
/// it is that node and lies on a filesystem only the container's namespace holds (the
/// runtime's `/dev` tmpfs, or a tmpfs of the spec), never one the host shows: `host_devs` are
/// the device numbers of the host's mounts. A volume over `/dev/...` holding a host's node, a
/// link, another device or any other object is refused, and nothing is opened but an `O_PATH`
/// fd (which reaches no driver).
pub fn regroup(
    root: &Rootfs,
    node: &DeviceNode,
    gid: u32,
    host_devs: &[(u32, u32)],
) -> Result<(), InjectError> {
    let path = &node.container_path;
    let refuse = |why: String| InjectError::Regroup {
        path: path.clone(),
        why,
    };
    let rerr = |op, errno| {
        InjectError::Rootfs(RootfsError {
            op,
            path: path.clone(),
            errno,
        })
    };
    let fd = root.resolve(path, OFlag::O_PATH | OFlag::O_NOFOLLOW)?;
    let st = fstat(&fd).map_err(|e| rerr("stat", e))?;
    let fs = fstatfs(&fd).map_err(|e| rerr("statfs", e))?;
    let found = Found {
        mode: st.st_mode,
        rdev: st.st_rdev,
        dev: st.st_dev,
        on_tmpfs: fs.filesystem_type() == TMPFS_MAGIC,
    };
    if let Some(why) = regroup_refusal(node, &found, host_devs) {
        return Err(refuse(why));
    }
    root.calls()
        .chown_fd(fd.as_fd(), None, Some(gid))
        .map_err(|e| rerr("chown", e))
}

/// What [`regroup`] found at the node's path, through its `O_PATH` fd.
#[derive(Debug, Clone, Copy)]
struct Found {
    /// `st_mode`.
    mode: u32,
    /// `st_rdev`.
    rdev: u64,
    /// `st_dev`: the filesystem it is on.
    dev: u64,
    /// Whether that filesystem is a tmpfs.
    on_tmpfs: bool,
}

/// Why what was found may not be given to the process's group, if it may not: it must be the
/// node asked for, on a tmpfs no host mount shows (`host_devs`).
fn regroup_refusal(node: &DeviceNode, found: &Found, host_devs: &[(u32, u32)]) -> Option<String> {
    let kind = file_kind::of_mode(found.mode);
    if kind != file_type(node.kind) || found.rdev != makedev(node.major, node.minor) {
        return Some(format!(
            "it is {}, not the runtime's {} node {}:{}",
            describe(found.mode, found.rdev),
            node.kind.letter(),
            node.major,
            node.minor
        ));
    }
    if !found.on_tmpfs {
        return Some("it is not on a tmpfs of the container (the runtime's /dev)".into());
    }
    if host_devs.contains(&(major(found.dev), minor(found.dev))) {
        return Some("its filesystem is mounted on the host too (a volume)".into());
    }
    None
}

/// The file type bits of a node of `kind`.
pub fn file_type(kind: DeviceKind) -> SFlag {
    match kind {
        DeviceKind::Char => SFlag::S_IFCHR,
        DeviceKind::Block => SFlag::S_IFBLK,
    }
}

/// What a file of mode `mode` is, with its numbers when a device.
fn describe(mode: u32, rdev: u64) -> String {
    let what = file_kind::a_name(mode);
    match file_kind::of_mode(mode) {
        SFlag::S_IFCHR | SFlag::S_IFBLK => format!("{what} {}:{}", major(rdev), minor(rdev)),
        _ => what,
    }
}

/// A copy of `node` owned by the host ids `uid` and `gid`, as a detached tree: made with
/// `mknodat` on a tmpfs of its own that this process mounts, so in the host's user namespace,
/// where a node opens (a tmpfs a container's user namespace mounts is `nodev` to the kernel,
/// and the host node, bound, shows that namespace an owner it does not map: nobody). The copy
/// has the host node's type, numbers and permission bits; the device cgroup still decides what
/// may be opened. `Ok(None)` when this kernel lacks the new mount API or this process may not
/// mount (an unprivileged hook).
pub fn owned_node(node: &DeviceNode, uid: u32, gid: u32) -> Result<Option<Source>, InjectError> {
    let err = |errno| InjectError::Source {
        path: node.host_path.clone(),
        errno,
    };
    let attrs = MountAttrs::Device.new_api();
    let tmp = match crate::sys::tmpfs_detached(
        &[(c"mode", c"0755"), (c"size", c"4k"), (c"nr_inodes", c"2")],
        attrs,
    ) {
        Ok(tmp) => tmp,
        Err(Errno::ENOSYS | Errno::EPERM) => return Ok(None),
        Err(errno) => return Err(err(errno)),
    };
    let name = Path::new("node");
    let kind = file_type(node.kind);
    let perm = Mode::from_bits_truncate(node.mode & 0o777);
    let rdev = devinject_devices::node::makedev(node.major, node.minor);
    nix::sys::stat::mknodat(&tmp, name, kind, perm, rdev).map_err(err)?;
    nix::unistd::fchownat(
        &tmp,
        name,
        Some(uid.into()),
        Some(gid.into()),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(err)?;
    // mknod applied this process's umask: the host node's bits, exactly.
    nix::sys::stat::fchmodat(
        &tmp,
        name,
        perm,
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .map_err(err)?;
    let made = nix::fcntl::openat(
        &tmp,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)?;
    let tree = crate::sys::open_tree_clone(&made).map_err(err)?;
    crate::sys::mount_setattr(&tree, attrs).map_err(err)?;
    Ok(Some(Source::Tree(tree)))
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;

    use super::super::ns_calls::recording::{fake_rootfs, Call};
    use super::*;

    fn render() -> DeviceNode {
        DeviceNode {
            host_path: "/dev/dri/renderD128".into(),
            container_path: "/dev/dri/renderD128".into(),
            kind: DeviceKind::Char,
            major: 226,
            minor: 128,
            mode: 0o660,
            uid: 0,
            gid: 107,
        }
    }

    /// The runtime's node for `render()` on the container's `/dev` tmpfs (device 0:50).
    fn runtimes() -> Found {
        Found {
            mode: SFlag::S_IFCHR.bits() | 0o660,
            rdev: makedev(226, 128),
            dev: makedev(0, 50),
            on_tmpfs: true,
        }
    }

    #[test]
    fn only_the_runtimes_node_on_the_containers_tmpfs_is_regrouped() {
        let host_devs = [(0, 22), (8, 1)];
        assert_eq!(regroup_refusal(&render(), &runtimes(), &host_devs), None);
        let cases = [
            (
                Found {
                    rdev: makedev(226, 129),
                    ..runtimes()
                },
                "it is a character device 226:129, not the runtime's c node 226:128",
            ),
            (
                Found {
                    mode: SFlag::S_IFBLK.bits() | 0o660,
                    ..runtimes()
                },
                "it is a block device 226:128, not the runtime's c node 226:128",
            ),
            (
                Found {
                    mode: SFlag::S_IFREG.bits() | 0o644,
                    ..runtimes()
                },
                "it is a regular file, not the runtime's c node",
            ),
            (
                Found {
                    on_tmpfs: false,
                    ..runtimes()
                },
                "not on a tmpfs of the container",
            ),
            (
                Found {
                    dev: makedev(0, 22),
                    ..runtimes()
                },
                "mounted on the host too (a volume)",
            ),
        ];
        for (found, why) in cases {
            let got = regroup_refusal(&render(), &found, &host_devs);
            assert!(
                got.as_deref().is_some_and(|g| g.contains(why)),
                "{found:?}: {got:?}"
            );
        }
    }

    fn mkdirs(paths: &[&str]) -> Vec<Call> {
        paths
            .iter()
            .map(|p| Call::Mkdir {
                path: p.into(),
                mode: 0o755,
            })
            .collect()
    }

    fn mknod_render() -> Call {
        Call::Mknod {
            path: "/dev/dri/renderD128".into(),
            kind: SFlag::S_IFCHR,
            mode: 0o660,
            rdev: makedev(226, 128),
        }
    }

    fn chown_render(gid: u32) -> Call {
        Call::Chown {
            path: "/dev/dri/renderD128".into(),
            uid: Some(0),
            gid: Some(gid),
            by_fd: false,
        }
    }

    #[test]
    fn a_missing_node_is_made_with_its_numbers_mode_owner_and_the_given_group() {
        let (_t, fake, root) = fake_rootfs();
        create(&root, &render(), None, 1000).unwrap();
        let mut want = mkdirs(&["/dev", "/dev/dri"]);
        want.extend([mknod_render(), chown_render(1000)]);
        assert_eq!(fake.changes(), want);
    }

    #[test]
    fn the_same_node_already_there_is_kept_untouched() {
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir_all(t.path().join("dev/dri")).unwrap();
        fake.seed_node(
            "/dev/dri/renderD128",
            SFlag::S_IFCHR,
            0o600,
            makedev(226, 128),
        );
        create(&root, &render(), None, 107).unwrap();
        assert_eq!(fake.changes(), vec![]);
    }

    #[test]
    fn a_link_or_fifo_at_the_name_is_replaced_by_the_node() {
        for what in ["link", "fifo"] {
            let (t, fake, root) = fake_rootfs();
            let dri = t.path().join("dev/dri");
            std::fs::create_dir_all(&dri).unwrap();
            match what {
                "link" => std::os::unix::fs::symlink("/etc/shadow", dri.join("renderD128")),
                _ => nix::unistd::mkfifo(
                    &dri.join("renderD128"),
                    nix::sys::stat::Mode::from_bits_truncate(0o600),
                )
                .map_err(std::io::Error::from),
            }
            .unwrap();
            create(&root, &render(), None, 107).unwrap();
            let unlink = Call::Unlink {
                path: "/dev/dri/renderD128".into(),
            };
            assert_eq!(
                fake.changes(),
                vec![unlink, mknod_render(), chown_render(107)],
                "{what}"
            );
        }
    }

    #[test]
    fn a_file_directory_or_other_device_at_the_name_is_refused_and_nothing_is_made() {
        for what in ["file", "dir", "device"] {
            let (t, fake, root) = fake_rootfs();
            let dri = t.path().join("dev/dri");
            std::fs::create_dir_all(&dri).unwrap();
            match what {
                "file" => std::fs::write(dri.join("renderD128"), "image").unwrap(),
                "dir" => std::fs::create_dir(dri.join("renderD128")).unwrap(),
                _ => fake.seed_node("/dev/dri/renderD128", SFlag::S_IFCHR, 0o666, makedev(1, 3)),
            }
            let err = create(&root, &render(), None, 107).unwrap_err();
            assert!(
                matches!(&err, InjectError::Rootfs(e) if e.errno == Errno::EEXIST),
                "{what}: {err}"
            );
            assert_eq!(fake.changes(), vec![], "{what}");
        }
    }

    #[test]
    fn a_node_outside_dev_is_refused_before_any_call() {
        let (_t, fake, root) = fake_rootfs();
        for path in ["/etc/renderD128", "/dev"] {
            let node = DeviceNode {
                container_path: path.into(),
                ..render()
            };
            let err = create(&root, &node, None, 107).unwrap_err();
            assert!(err.to_string().contains("outside /dev"), "{err}");
        }
        assert_eq!(fake.calls(), vec![]);
    }

    #[test]
    fn a_bound_node_is_an_empty_placeholder_with_the_tree_moved_onto_it() {
        let (_t, fake, root) = fake_rootfs();
        let tree: OwnedFd = std::fs::File::open("/").unwrap().into();
        create(&root, &render(), Some(Source::Tree(tree)), 107).unwrap();
        let mut want = mkdirs(&["/dev", "/dev/dri"]);
        want.extend([
            Call::Create {
                path: "/dev/dri/renderD128".into(),
                mode: 0o644,
                write: false,
            },
            Call::MoveMount {
                target: "/dev/dri/renderD128".into(),
            },
        ]);
        assert_eq!(
            fake.changes(),
            want,
            "no mknod, no chown: the host node's owner"
        );
    }

    #[test]
    fn what_is_not_the_runtimes_node_is_never_regrouped() {
        let (t, fake, root) = fake_rootfs();
        let dri = t.path().join("dev/dri");
        std::fs::create_dir_all(&dri).unwrap();
        std::fs::write(dri.join("renderD128"), "a volume's file").unwrap();
        let err = regroup(&root, &render(), 1000, &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("it is a regular file, not the runtime's c node 226:128"),
            "{err}"
        );
        assert_eq!(fake.calls(), vec![]);
    }
}
