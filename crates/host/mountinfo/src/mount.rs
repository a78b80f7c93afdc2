//! One mount, as a line of mountinfo describes it.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::OptionalField;

/// Every field of one mountinfo line (proc(5)), with the kernel's escapes undone. Paths and
/// names are bytes (`PathBuf`, `OsString`): the kernel writes them as they are, UTF-8 or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// A number unique to the mount (reused after it is unmounted).
    pub mount_id: u32,
    /// The mount this one is mounted on; its own id for the root of the reader's tree.
    pub parent_id: u32,
    /// The major number of the filesystem's device (`st_dev` of files on it).
    pub major: u32,
    /// The minor number of the filesystem's device.
    pub minor: u32,
    /// The directory of the filesystem shown at the mount point: `/` for a whole filesystem,
    /// the bound directory for a bind mount (`nsfs` shows `net:[4026531840]` and the like).
    pub root: PathBuf,
    /// Where the mount is, relative to the reading process's root.
    pub mount_point: PathBuf,
    /// The per-mount options (`rw`, `nosuid`, `relatime`, ...), in order.
    pub mount_options: Vec<OsString>,
    /// The propagation fields before the `-` separator, in order.
    pub optional_fields: Vec<OptionalField>,
    /// The filesystem type (`ext4`, `cgroup2`, `fuse.sshfs`, ...).
    pub fs_type: OsString,
    /// The filesystem's source: a device, a server path, or a name such as `tmpfs`.
    pub source: OsString,
    /// The per-superblock options, in order (`rw`, `mode=755`, a v1 cgroup's controllers).
    pub super_options: Vec<OsString>,
}

impl Mount {
    /// Whether the super options hold `option` as a whole entry (`devices` in
    /// `rw,devices`, not in `rw,nodevices`).
    pub fn has_super_option(&self, option: impl AsRef<OsStr>) -> bool {
        let option = option.as_ref();
        self.super_options.iter().any(|o| o == option)
    }
}
