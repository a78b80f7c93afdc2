//! Device nodes in the container's `/dev`.
//!
//! Normally a node is made with `mknodat` in the runtime's `/dev` tmpfs, with the host node's
//! type, numbers, mode and owner. In a user namespace `mknod` is refused and a node on a tmpfs
//! mounted there would not work anyway, so the host node is bind-mounted instead (as runc does
//! for its own devices under user namespaces).

use std::path::Path;

use devinject_devices::node::makedev;
use devinject_devices::{DeviceNode, NodeKind};
use nix::errno::Errno;
use nix::sys::stat::{mknodat, Mode, SFlag};
use nix::unistd::{fchownat, Gid, Uid};

use super::mounts::{attach, MountAttrs, Source};
use super::rootfs::{entry_at, split, Entry, Rootfs, RootfsError};
use super::InjectError;

/// Creates `node` in the rootfs: by mknod when `bind` is `None`, else by attaching `bind`.
pub fn create(root: &Rootfs, node: &DeviceNode, bind: Option<Source>) -> Result<(), InjectError> {
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
    let dir = root.mkdir_all(&parent)?;
    let rerr = |op, errno| {
        InjectError::Rootfs(RootfsError {
            op,
            path: path.clone(),
            errno,
        })
    };
    let kind = match node.kind {
        NodeKind::Char => SFlag::S_IFCHR,
        NodeKind::Block => SFlag::S_IFBLK,
    };
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
        Some(Gid::from_raw(node.gid)),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(|e| rerr("chown", e))?;
    Ok(())
}
