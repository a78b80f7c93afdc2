//! What kind of file an `fstat` found, and its name in messages ("FIFO", "character device"):
//! every reader that refuses what is not a regular file says what it found in the same words.

use nix::sys::stat::{FileStat, SFlag};

/// The file type bits of `st`.
pub fn of(st: &FileStat) -> SFlag {
    of_mode(st.st_mode)
}

/// The file type bits of a `st_mode` (or `statx` `stx_mode`).
pub fn of_mode(mode: u32) -> SFlag {
    SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits())
}

/// The name of the file type of `mode` with its article ("a FIFO", "a symbolic link"), for
/// messages that say "it is ...".
pub fn a_name(mode: u32) -> String {
    format!("a {}", name(of_mode(mode)))
}

/// The name of a file type, as messages give it.
pub fn name(kind: SFlag) -> &'static str {
    match kind {
        SFlag::S_IFREG => "regular file",
        SFlag::S_IFDIR => "directory",
        SFlag::S_IFLNK => "symbolic link",
        SFlag::S_IFIFO => "FIFO",
        SFlag::S_IFSOCK => "socket",
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFBLK => "block device",
        _ => "special file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_has_its_word() {
        assert_eq!(name(SFlag::S_IFIFO), "FIFO");
        assert_eq!(name(SFlag::S_IFCHR), "character device");
        let st = nix::sys::stat::stat("/").unwrap();
        assert_eq!(name(of(&st)), "directory");
        assert_eq!(a_name(0o020644), "a character device");
        assert_eq!(a_name(0o120777), "a symbolic link");
    }
}
