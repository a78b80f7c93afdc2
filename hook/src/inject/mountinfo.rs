//! Reading `/proc/self/mountinfo`: which procfs mounts lie inside a rootfs, and which
//! filesystems a mount namespace shows.
//!
//! Before `pivot_root`, the container's procfs is mounted at `<rootfs>/proc`, and its
//! `/proc/1/root` is runc init's root: the host's `/`. A chroot into the rootfs does not stop a
//! process from following that magic link out, so the linker cache refresh detaches every procfs
//! mount under the rootfs (in its own private copy of the namespace) before it chroots.

use std::path::{Path, PathBuf};

/// Mount points of procfs mounts at or below `root`, deepest first. `text` is a mountinfo file;
/// `root` must be canonical (mountinfo paths are).
pub fn procfs_under(text: &str, root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = text
        .lines()
        .filter_map(parse_line)
        .filter(|(_, fstype)| *fstype == "proc")
        .map(|(point, _)| point)
        .filter(|p| p.starts_with(root))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// The `(major, minor)` device numbers of every filesystem mounted in a mountinfo file
/// `text`: a file whose `st_dev` is not among the host's is on a filesystem only a container's
/// namespace holds.
pub fn devices(text: &str) -> Vec<(u32, u32)> {
    text.lines()
        .filter_map(|l| {
            let (major, minor) = l.split(' ').nth(2)?.split_once(':')?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .collect()
}

/// `(mount point, fstype)` of one mountinfo line (proc(5): the fstype follows the ` - `
/// separator, after a variable number of optional fields).
fn parse_line(line: &str) -> Option<(PathBuf, &str)> {
    let (before, after) = line.split_once(" - ")?;
    let point = before.split(' ').nth(4)?;
    let fstype = after.split(' ').next()?;
    Some((PathBuf::from(unescape(point)), fstype))
}

/// Undoes the kernel's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
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
