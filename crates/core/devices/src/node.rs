//! A device node as found on the host and as it should appear in a container. The
//! devinject-discovery crate reads nodes from the host (`node::read`); this is what it found.

use std::path::{Path, PathBuf};

use devinject_device_rule::{Access, DeviceKind, DeviceNumber, DeviceRule};
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
    /// The node `number` found at `host_path` with `mode` and owner `uid:gid`, at its place
    /// under `/dev` in the container: what the devinject-discovery crate makes of a node it
    /// looked at on the host.
    pub fn found(
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
}
