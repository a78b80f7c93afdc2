//! Device nodes in the container's `/dev`.
//!
//! Normally a node is made with `mknodat` in the runtime's `/dev` tmpfs (never in a volume:
//! [`Rootfs::node_dir`]), with the host node's
//! type, numbers, mode and owner. In a user namespace `mknod` is refused and a node on a tmpfs
//! mounted there would not work anyway, so the host node is bind-mounted instead (as runc does
//! for its own devices under user namespaces).
//!
//! A node only its group may use (a render node's `0660 root:render`) is made with the
//! process's own group when the process lacks that one (it runs as uid 1000 with no
//! supplementary groups): the device grant is what decides, not the host's group list. Where the
//! runtime made the node (NRI, whose adjustment cannot add a group to the process), [`regroup`]
//! changes the group of that node, and of nothing else.

use std::path::Path;

use devinject_devices::node::{major, makedev, minor};
use devinject_devices::{DeviceKind, DeviceNode};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, mknodat, Mode, SFlag};
use nix::sys::statfs::{fstatfs, TMPFS_MAGIC};
use nix::unistd::{fchownat, Gid, Uid};

use super::at_name::{self, AtName};
use super::mounts::{attach, MountAttrs, Source};
use super::rootfs::{entry_at, kind_name, split, Rootfs, RootfsError};
use super::InjectError;

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
    match at_name::for_node(entry_at(&dir, name, path)?, kind, rdev) {
        AtName::Make => {}
        AtName::Keep => return Ok(()),
        AtName::Refuse { op, errno } => return Err(rerr(op, errno)),
        AtName::Replace => {
            nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir)
                .map_err(|e| rerr("replace", e))?;
        }
    }
    mknodat(&dir, name, kind, Mode::from_bits_truncate(node.mode), rdev)
        .map_err(|e| rerr("mknod", e))?;
    fchownat(
        &dir,
        name,
        Some(Uid::from_raw(node.uid)),
        Some(Gid::from_raw(gid)),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
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
    fchownat(
        &fd,
        "",
        None,
        Some(Gid::from_raw(gid)),
        AtFlags::AT_EMPTY_PATH,
    )
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
    let kind = SFlag::from_bits_truncate(found.mode & SFlag::S_IFMT.bits());
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
fn file_type(kind: DeviceKind) -> SFlag {
    match kind {
        DeviceKind::Char => SFlag::S_IFCHR,
        DeviceKind::Block => SFlag::S_IFBLK,
    }
}

/// What a file of mode `mode` is, with its numbers when a device.
fn describe(mode: u32, rdev: u64) -> String {
    let what = kind_name(mode);
    match SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFCHR | SFlag::S_IFBLK => format!("{what} {}:{}", major(rdev), minor(rdev)),
        _ => what.to_owned(),
    }
}

#[cfg(test)]
mod tests {

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
}
