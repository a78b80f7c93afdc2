//! What kind of file an `fstat` found, and its name in messages ("FIFO", "character device"):
//! every reader that refuses what is not a regular file says what it found in the same words.

use nix::sys::stat::{FileStat, SFlag};

/// The file type bits of `st`.
pub fn of(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
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
    }
}
