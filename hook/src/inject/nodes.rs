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

use super::mounts::{attach, MountAttrs, Source};
use super::rootfs::{entry_at, kind_name, split, Entry, Rootfs, RootfsError};
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
    match entry_at(&dir, name, path)? {
        Entry::Missing => {}
        // Already there (e.g. the engine passed it with --device): keep it.
        Entry::Device { kind: k, rdev: r } if k == kind && r == rdev => return Ok(()),
        Entry::Device { .. } => {
            return Err(rerr(
                "create device node (a different device exists)",
                Errno::EEXIST,
            ))
        }
        Entry::Dir | Entry::File => {
            return Err(rerr(
                "create device node (a file or directory exists)",
                Errno::EEXIST,
            ))
        }
        Entry::Symlink | Entry::Other => {
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
    let want = file_type(node.kind);
    let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    if kind != want || st.st_rdev != makedev(node.major, node.minor) {
        return Err(refuse(format!(
            "it is {}, not the runtime's {} node {}:{}",
            describe(st.st_mode, st.st_rdev),
            node.kind.letter(),
            node.major,
            node.minor
        )));
    }
    let fs = fstatfs(&fd).map_err(|e| rerr("statfs", e))?;
    if fs.filesystem_type() != TMPFS_MAGIC {
        return Err(refuse(
            "it is not on a tmpfs of the container (the runtime's /dev)".into(),
        ));
    }
    if host_devs.contains(&(major(st.st_dev), minor(st.st_dev))) {
        return Err(refuse(
            "its filesystem is mounted on the host too (a volume)".into(),
        ));
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
