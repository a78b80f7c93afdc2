//! Device nodes read from the host: what is at a path under the dev root, or whether what is
//! there now is still the device decided for a container.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use devinject_devices::node::{major, minor};
use devinject_devices::{DeviceKind, DeviceNode, DeviceNumber, NodeError};
use devinject_hostfs::file_kind;
use devinject_hostfs::path_fd::{Follow, PathFd};
use nix::sys::stat::SFlag;

/// Reads a node's type, numbers and mode from the host (following symlinks, as the host's
/// `/dev` is trusted), and maps its path under `dev_root` to `/dev/...` in the container.
pub fn read(host_path: &Path, dev_root: &Path) -> Result<DeviceNode, NodeError> {
    let meta = std::fs::metadata(host_path).map_err(|source| NodeError::Stat {
        path: host_path.to_owned(),
        source,
    })?;
    let ft = meta.file_type();
    let kind = if ft.is_char_device() {
        DeviceKind::Char
    } else if ft.is_block_device() {
        DeviceKind::Block
    } else {
        return Err(NodeError::NotDevice {
            path: host_path.to_owned(),
        });
    };
    let rdev = meta.rdev();
    let number = DeviceNumber::new(kind, major(rdev), minor(rdev));
    DeviceNode::found(
        host_path,
        dev_root,
        number,
        meta.mode(),
        meta.uid(),
        meta.gid(),
    )
}

/// The node at `host_path` as the device `decided` for it: looked at through an `O_PATH`
/// descriptor (following links, as discovery did; opening nothing), refused unless what it
/// leads to now is that device. Its mode and owner are the host's now; its kind and numbers
/// are the decision's, so a step that makes the node makes the device decided, whatever
/// happened to the path since.
pub fn read_decided(
    host_path: &Path,
    dev_root: &Path,
    decided: DeviceNumber,
) -> Result<DeviceNode, NodeError> {
    let held = PathFd::at(None, host_path, Follow::Yes).map_err(|e| NodeError::Stat {
        path: host_path.to_owned(),
        source: e.into(),
    })?;
    let st = held.stat();
    match number_of(st.st_mode, st.st_rdev) {
        Some(found) if found == decided => {}
        found => {
            return Err(NodeError::Changed {
                path: host_path.to_owned(),
                decided,
                found: found.map_or_else(
                    || file_kind::a_name(st.st_mode),
                    |n| format!("the device {n}"),
                ),
            })
        }
    }
    DeviceNode::found(
        host_path, dev_root, decided, st.st_mode, st.st_uid, st.st_gid,
    )
}

/// The device a file of `mode` and `rdev` is; `None` when it is not a device.
pub fn number_of(mode: u32, rdev: u64) -> Option<DeviceNumber> {
    let kind = match file_kind::of_mode(mode) {
        SFlag::S_IFCHR => DeviceKind::Char,
        SFlag::S_IFBLK => DeviceKind::Block,
        _ => return None,
    };
    Some(DeviceNumber::new(kind, major(rdev), minor(rdev)))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn reads_a_real_node() {
        let n = read(Path::new("/dev/null"), Path::new("/dev")).unwrap();
        assert_eq!((n.kind, n.major, n.minor), (DeviceKind::Char, 1, 3));
        assert_eq!(n.container_path, PathBuf::from("/dev/null"));
        // Only the permission bits, not the file type: /dev/null is crw-rw-rw- everywhere.
        assert_eq!(n.mode, 0o666);
    }

    #[test]
    fn rejects_regular_files_and_outside_paths() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, "").unwrap();
        assert!(matches!(
            read(&f, dir.path()),
            Err(NodeError::NotDevice { .. })
        ));
        assert!(matches!(
            read(Path::new("/dev/null"), dir.path()),
            Err(NodeError::OutsideDevRoot { .. })
        ));
    }

    /// The node is the decision's: a link retargeted after it (to another device, or to a
    /// file) is refused naming the path and both devices, never followed to what it leads to
    /// now. Real nodes and a real link; what this cannot show is a driver that renumbers a
    /// node in place, which reads the same through the fd.
    #[test]
    fn a_node_is_made_as_decided_or_refused_when_its_path_now_leads_elsewhere() {
        let t = tempfile::tempdir().unwrap();
        let link = t.path().join("stable");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let null = DeviceNumber::new(DeviceKind::Char, 1, 3);
        let n = read_decided(&link, t.path(), null).unwrap();
        assert_eq!(n.number(), null);
        assert_eq!(n.container_path, PathBuf::from("/dev/stable"));
        assert_eq!(n.mode, 0o666, "the host node's mode, through the link");

        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = read_decided(&link, t.path(), null).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{} is the device c 1:5 now", link.display()))
                && err.contains("not the device c 1:3 decided")
                && err.contains("start the container again"),
            "{err}"
        );

        let file = t.path().join("file");
        std::fs::write(&file, "").unwrap();
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let err = read_decided(&link, t.path(), null).unwrap_err().to_string();
        assert!(err.contains("is a regular file now"), "{err}");
    }
}
