//! Reading `/proc/self/mountinfo`: which procfs mounts lie inside a rootfs, and which
//! filesystems a mount namespace shows.
//!
//! Before `pivot_root`, the container's procfs is mounted at `<rootfs>/proc`, and its
//! `/proc/1/root` is runc init's root: the host's `/`. A chroot into the rootfs does not stop a
//! process from following that magic link out, so the linker cache refresh detaches every procfs
//! mount under the rootfs (in its own private copy of the namespace) before it chroots.

use std::path::{Path, PathBuf};

use devinject_mountinfo::Mount;

/// Mount points of procfs mounts at or below `root`, deepest first. `text` is a mountinfo file
/// (lines that do not parse are passed over); `root` must be canonical (mountinfo paths are).
pub fn procfs_under(text: impl AsRef<[u8]>, root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = mounts(text.as_ref())
        .filter(|m| m.fs_type == "proc")
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(root))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// The `(major, minor)` device numbers of every filesystem mounted in a mountinfo file
/// `text`: a file whose `st_dev` is not among the host's is on a filesystem only a container's
/// namespace holds.
pub fn devices(text: impl AsRef<[u8]>) -> Vec<(u32, u32)> {
    mounts(text.as_ref()).map(|m| (m.major, m.minor)).collect()
}

/// The mounts of `text` whose lines parse. Both questions above have a safe answer without a
/// line the kernel would never write, so such a line is passed over rather than failing the
/// container's start.
fn mounts(text: &[u8]) -> impl Iterator<Item = Mount> + '_ {
    devinject_mountinfo::parse(text).filter_map(Result::ok)
}

#[cfg(test)]
mod tests {
    use devinject_mountinfo::unescape;

    use super::*;

    const TEXT: &str = "\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
100 99 0:50 / /run/b/my\\040root rw,relatime - overlay overlay rw
101 100 0:60 / /run/b/my\\040root/proc rw,nosuid,nodev,noexec,relatime - proc proc rw
102 101 0:61 / /run/b/my\\040root/proc/acpi ro,relatime - tmpfs tmpfs ro
103 100 0:21 /sys /run/b/my\\040root/host-proc-sys rw master:5 - proc proc rw
104 100 0:62 / /run/b/my\\040root/dev rw,nosuid - tmpfs tmpfs rw,mode=755
105 1 0:63 / /run/b/my\\040rootless/proc rw - proc proc rw
";

    #[test]
    fn finds_procfs_and_proc_binds_inside_the_root_deepest_first() {
        let got = procfs_under(TEXT, Path::new("/run/b/my root"));
        assert_eq!(
            got,
            [
                PathBuf::from("/run/b/my root/proc"),
                PathBuf::from("/run/b/my root/host-proc-sys"),
            ]
        );
        assert!(procfs_under(TEXT, Path::new("/elsewhere")).is_empty());
    }

    #[test]
    fn lists_the_device_numbers_of_every_mount() {
        let got = devices(TEXT);
        assert_eq!(got.len(), 7);
        assert_eq!(got[0], (0, 21));
        assert!(got.contains(&(0, 62)));
        assert!(!got.contains(&(0, 64)));
        assert!(devices("garbage\n1 2 x:y / /").is_empty());
    }

    #[test]
    fn unescapes_octal_and_keeps_the_rest() {
        assert_eq!(unescape("a\\040b\\134c\\012"), "a b\\c\n");
        assert_eq!(unescape("plain\\x"), "plain\\x");
        assert_eq!(unescape("end\\04"), "end\\04");
    }
}
