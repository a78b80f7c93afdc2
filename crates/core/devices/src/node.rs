//! A device node as found on the host and as it should appear in a container.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use devinject_device_rule::{Access, DeviceKind, DeviceNumber, DeviceRule};
use devinject_hostfs::file_kind;
use devinject_hostfs::path_fd::{Follow, PathFd};
use nix::sys::stat::SFlag;
use serde::Serialize;

/// One device node: where it is on the host, where it goes in the container, and what it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DeviceNode {
    /// The node on the host (under the dev root).
    pub host_path: PathBuf,
    /// Where the node appears in the container, always under `/dev`.
    pub container_path: PathBuf,
    /// Character or block.
    pub kind: DeviceKind,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Permission bits (`0o666`).
    pub mode: u32,
    /// Owner uid on the host.
    pub uid: u32,
    /// Owner gid on the host.
    pub gid: u32,
}

/// Why a path is not a usable device node.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum NodeError {
    /// `stat` failed.
    #[error("cannot stat device node {path}: {source}")]
    Stat {
        /// The node.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The path exists but is not a device.
    #[error("{path} is not a character or block device")]
    NotDevice { path: PathBuf },
    /// The path is not under the dev root.
    #[error("{path} is not under the dev root {dev_root}")]
    OutsideDevRoot { path: PathBuf, dev_root: PathBuf },
    /// The path leads to another device (or to none) than the one decided for it.
    #[error("{path} is {found} now, not the device {decided} decided for the container: the node or a link to it changed after the decision (a driver reload, a retargeted link); start the container again to have its devices decided anew")]
    Changed {
        path: PathBuf,
        decided: DeviceNumber,
        found: String,
    },
}

impl DeviceNode {
    /// Reads a node's type, numbers and mode from the host (following symlinks, as the host's
    /// `/dev` is trusted), and maps its path under `dev_root` to `/dev/...` in the container.
    pub fn from_host(host_path: &Path, dev_root: &Path) -> Result<Self, NodeError> {
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
        Self::found(
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
    pub fn decided_on_host(
        host_path: &Path,
        dev_root: &Path,
        decided: DeviceNumber,
    ) -> Result<Self, NodeError> {
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
        Self::found(
            host_path, dev_root, decided, st.st_mode, st.st_uid, st.st_gid,
        )
    }

    /// The node `number` found at `host_path` with `mode` and owner `uid:gid`, at its place
    /// under `/dev` in the container.
    fn found(
        host_path: &Path,
        dev_root: &Path,
        number: DeviceNumber,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Self, NodeError> {
        let rel = host_path
            .strip_prefix(dev_root)
            .map_err(|_| NodeError::OutsideDevRoot {
                path: host_path.to_owned(),
                dev_root: dev_root.to_owned(),
            })?;
        Ok(Self {
            host_path: host_path.to_owned(),
            container_path: Path::new("/dev").join(rel),
            kind: number.kind,
            major: number.major,
            minor: number.minor,
            mode: mode & 0o7777,
            uid,
            gid,
        })
    }

    /// Its kind and numbers.
    pub fn number(&self) -> DeviceNumber {
        DeviceNumber::new(self.kind, self.major, self.minor)
    }

    /// The cgroup rule letting a container read, write and mknod this node: what the shim
    /// writes to `linux.resources.devices`, the hook to the device cgroup, and CDI to the
    /// node's `permissions`.
    pub fn rule(&self) -> DeviceRule {
        DeviceRule::new(self.kind, self.major, self.minor, Access::RWM)
    }

    /// The group a non-root process must be in to use the node: its gid when the group may
    /// read or write it and others may not (a render node's `0660 root:render`). `None` when
    /// others have the group's access, and for gid 0: handing a container the root group is
    /// a privilege no device grant implies (such a node stays root-only, as on the host).
    pub fn access_group(&self) -> Option<u32> {
        let group = (self.mode >> 3) & 0o6;
        let other = self.mode & 0o6;
        (self.gid != 0 && group & !other != 0).then_some(self.gid)
    }
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

/// The groups a non-root process needs to use `nodes` ([`DeviceNode::access_group`]), sorted
/// and without repeats.
pub fn access_groups<'a>(nodes: impl IntoIterator<Item = &'a DeviceNode>) -> Vec<u32> {
    let mut gids: Vec<u32> = nodes
        .into_iter()
        .filter_map(DeviceNode::access_group)
        .collect();
    gids.sort_unstable();
    gids.dedup();
    gids
}

/// The major number of a Linux `dev_t` (glibc's encoding).
pub fn major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)) as u32
}

/// The minor number of a Linux `dev_t` (glibc's encoding).
pub fn minor(dev: u64) -> u32 {
    (((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)) as u32
}

/// Encodes major and minor into a Linux `dev_t` (glibc's encoding).
pub fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (u64::from(major), u64::from(minor));
    ((ma & 0xffff_f000) << 32)
        | ((ma & 0x0000_0fff) << 8)
        | ((mi & 0xffff_ff00) << 12)
        | (mi & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(mode: u32, gid: u32) -> DeviceNode {
        DeviceNode {
            host_path: "/dev/dri/renderD128".into(),
            container_path: "/dev/dri/renderD128".into(),
            kind: DeviceKind::Char,
            major: 226,
            minor: 128,
            mode,
            uid: 0,
            gid,
        }
    }

    #[test]
    fn the_access_group_is_the_one_that_grants_what_others_lack() {
        assert_eq!(node(0o660, 107).access_group(), Some(107));
        assert_eq!(node(0o640, 107).access_group(), Some(107), "read only");
        assert_eq!(
            node(0o664, 107).access_group(),
            Some(107),
            "others only read"
        );
        assert_eq!(node(0o666, 107).access_group(), None, "others have it all");
        assert_eq!(
            node(0o600, 107).access_group(),
            None,
            "the group has nothing"
        );
        assert_eq!(
            node(0o2660, 107).access_group(),
            Some(107),
            "setgid bit ignored"
        );
        assert_eq!(node(0o660, 0).access_group(), None, "never the root group");
    }

    #[test]
    fn access_groups_are_sorted_without_repeats_or_open_nodes() {
        let nodes = [
            node(0o660, 107),
            node(0o660, 44),
            node(0o666, 5),
            node(0o660, 0),
            node(0o640, 107),
        ];
        assert_eq!(access_groups(&nodes), [44, 107]);
        assert_eq!(access_groups(&nodes[2..4]), Vec::<u32>::new());
    }

    #[test]
    fn dev_t_round_trips() {
        for (ma, mi) in [(1, 3), (10, 232), (195, 255), (511, 1_048_575), (4095, 256)] {
            let d = makedev(ma, mi);
            assert_eq!((major(d), minor(d)), (ma, mi));
        }
        assert_eq!(makedev(1, 3), 0x103);
    }

    /// Majors from 4096 and minors from 256 use the high bits of glibc's `dev_t` (bits 44-63 and
    /// 20-43): pin the whole encoding, not only that it round-trips.
    #[test]
    fn dev_t_matches_glibc_for_wide_numbers() {
        for (ma, mi, dev) in [
            (4096, 256, 0x1000_0010_0000),
            (0x1234_5678, 0x9abc_def0, 0x1234_59ab_cde6_78f0),
            (u32::MAX, u32::MAX, u64::MAX),
        ] {
            assert_eq!(makedev(ma, mi), dev, "makedev({ma:#x}, {mi:#x})");
            assert_eq!((major(dev), minor(dev)), (ma, mi), "{dev:#x}");
        }
    }

    #[test]
    fn reads_a_real_node() {
        let n = DeviceNode::from_host(Path::new("/dev/null"), Path::new("/dev")).unwrap();
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
            DeviceNode::from_host(&f, dir.path()),
            Err(NodeError::NotDevice { .. })
        ));
        assert!(matches!(
            DeviceNode::from_host(Path::new("/dev/null"), dir.path()),
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
        let n = DeviceNode::decided_on_host(&link, t.path(), null).unwrap();
        assert_eq!(n.number(), null);
        assert_eq!(n.container_path, PathBuf::from("/dev/stable"));
        assert_eq!(n.mode, 0o666, "the host node's mode, through the link");

        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = DeviceNode::decided_on_host(&link, t.path(), null)
            .unwrap_err()
            .to_string();
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
        let err = DeviceNode::decided_on_host(&link, t.path(), null)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a regular file now"), "{err}");
    }
}
