//! What the applier does with what an image already has at a name it is about to make: a
//! device node, a soname link, or the file a bind mount goes onto. Pure decisions, so that each
//! case has a unit test that needs no root and no rootfs; [`super::nodes`], [`super::symlinks`]
//! and [`super::mounts`] look at the name through the directory's fd ([`Entry`]), ask here, and
//! make the calls.
//!
//! # Security
//!
//! The image chose what is at the name. Nothing is ever followed or opened because of it: a
//! link or a FIFO is removed (as `ldconfig` would remove a stale link), a directory is never
//! removed or mounted over, and an existing device node is kept only when it is exactly the
//! node asked for.

use nix::errno::Errno;
use nix::sys::stat::SFlag;

use super::rootfs::Entry;

/// What to do at the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtName {
    /// Nothing is there: make it.
    Make,
    /// What is there is what we want (or, for a mount, something to mount onto): keep it.
    Keep,
    /// Remove what is there (never a directory), then make it.
    Replace,
    /// Fail with this operation and errno, touching nothing.
    Refuse {
        /// What we were doing, as the error names it.
        op: &'static str,
        errno: Errno,
    },
}

/// A device node of type `kind` and number `rdev`: an identical node is kept (the engine passed
/// it with `--device`), another node or a file or directory refused, a link or anything else
/// replaced.
pub fn for_node(existing: Entry, kind: SFlag, rdev: u64) -> AtName {
    match existing {
        Entry::Missing => AtName::Make,
        Entry::Device { kind: k, rdev: r } if k == kind && r == rdev => AtName::Keep,
        Entry::Device { .. } => AtName::Refuse {
            op: "create device node (a different device exists)",
            errno: Errno::EEXIST,
        },
        Entry::Dir | Entry::File => AtName::Refuse {
            op: "create device node (a file or directory exists)",
            errno: Errno::EEXIST,
        },
        Entry::Symlink | Entry::Other => AtName::Replace,
    }
}

/// A soname link: a link that already points at the target is kept (`points_at_target` is
/// asked only for a link), any other link, file, node or FIFO replaced, a directory refused.
pub fn for_link(existing: Entry, points_at_target: impl FnOnce() -> bool) -> AtName {
    match existing {
        Entry::Missing => AtName::Make,
        Entry::Symlink if points_at_target() => AtName::Keep,
        Entry::Symlink | Entry::File | Entry::Device { .. } | Entry::Other => AtName::Replace,
        Entry::Dir => AtName::Refuse {
            op: "create soname link (a directory exists)",
            errno: Errno::EISDIR,
        },
    }
}

/// The file a bind mount goes onto: a file or a node is mounted over as it is (and checked
/// again through the fd it is opened by), a link or anything else replaced by an empty file, a
/// directory refused.
pub fn for_mount_target(existing: Entry) -> AtName {
    match existing {
        Entry::Missing => AtName::Make,
        Entry::File | Entry::Device { .. } => AtName::Keep,
        Entry::Symlink | Entry::Other => AtName::Replace,
        Entry::Dir => AtName::Refuse {
            op: "mount a file over a directory at",
            errno: Errno::EISDIR,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHR: SFlag = SFlag::S_IFCHR;
    const BLK: SFlag = SFlag::S_IFBLK;

    fn refused(a: AtName) -> Option<Errno> {
        match a {
            AtName::Refuse { errno, .. } => Some(errno),
            _ => None,
        }
    }

    #[test]
    fn a_node_is_kept_only_when_identical() {
        assert_eq!(for_node(Entry::Missing, CHR, 7), AtName::Make);
        let same = Entry::Device { kind: CHR, rdev: 7 };
        assert_eq!(for_node(same, CHR, 7), AtName::Keep);
        for other in [
            Entry::Device { kind: CHR, rdev: 8 },
            Entry::Device { kind: BLK, rdev: 7 },
            Entry::File,
            Entry::Dir,
        ] {
            assert_eq!(
                refused(for_node(other, CHR, 7)),
                Some(Errno::EEXIST),
                "{other:?}"
            );
        }
        assert_eq!(for_node(Entry::Symlink, CHR, 7), AtName::Replace);
        assert_eq!(for_node(Entry::Other, CHR, 7), AtName::Replace);
    }

    #[test]
    fn a_link_replaces_anything_but_a_directory() {
        assert_eq!(for_link(Entry::Missing, unreachable_target), AtName::Make);
        assert_eq!(for_link(Entry::Symlink, || true), AtName::Keep);
        assert_eq!(for_link(Entry::Symlink, || false), AtName::Replace);
        for other in [
            Entry::File,
            Entry::Device { kind: CHR, rdev: 1 },
            Entry::Other,
        ] {
            assert_eq!(
                for_link(other, unreachable_target),
                AtName::Replace,
                "{other:?}"
            );
        }
        assert_eq!(
            refused(for_link(Entry::Dir, unreachable_target)),
            Some(Errno::EISDIR)
        );
    }

    /// The link's target is read only for a link.
    fn unreachable_target() -> bool {
        panic!("the target of something that is not a link was read")
    }

    #[test]
    fn a_mount_goes_onto_a_file_or_node_never_a_directory() {
        assert_eq!(for_mount_target(Entry::Missing), AtName::Make);
        assert_eq!(for_mount_target(Entry::File), AtName::Keep);
        assert_eq!(
            for_mount_target(Entry::Device { kind: BLK, rdev: 3 }),
            AtName::Keep
        );
        assert_eq!(for_mount_target(Entry::Symlink), AtName::Replace);
        assert_eq!(for_mount_target(Entry::Other), AtName::Replace);
        assert_eq!(refused(for_mount_target(Entry::Dir)), Some(Errno::EISDIR));
    }
}
