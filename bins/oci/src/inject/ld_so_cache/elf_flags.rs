//! The cache flags ldconfig gives a library, from its ELF header.
//!
//! ld.so only takes a cache entry whose flags equal its own `_DL_CACHE_DEFAULT_ID` (for
//! x86-64 `FLAG_X8664_LIB64 | FLAG_ELF_LIBC6`), so a 32-bit library listed with 64-bit flags
//! would be handed to 64-bit programs. The values are glibc's (`sysdeps/generic/ldconfig.h`,
//! per-architecture `readelflib.c`); machines whose flags depend on more than the class and
//! machine (32-bit arm's float ABI, MIPS, RISC-V, LoongArch) are not mapped, and their
//! libraries leave the cache to ldconfig.

use std::os::unix::fs::FileExt;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use devinject_devices::elf_machine::{self, EM_386, EM_AARCH64, EM_PPC64, EM_S390, EM_X86_64};

use crate::inject::rootfs::{reopen_regular, Regular};

/// `FLAG_ELF_LIBC6`: every library glibc's ldconfig lists today.
const ELF_LIBC6: i32 = 0x0003;

/// The flags for a library with this ELF header, or `None` when it is not one we can map.
pub fn from_header(header: &[u8]) -> Option<i32> {
    // Checks the magic and the length before the class is read.
    let machine = elf_machine::of_header(header)?;
    let class64 = match header[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let arch = match (machine, class64) {
        (EM_X86_64, true) => 0x0300,
        (EM_X86_64, false) => 0x0800,
        (EM_386, false) => 0,
        (EM_AARCH64, true) => 0x0a00,
        (EM_PPC64, true) => 0x0500,
        (EM_S390, true) => 0x0400,
        _ => return None,
    };
    Some(arch | ELF_LIBC6)
}

/// The flags for the library at `path` (a host file), or `None` when it cannot be read or mapped.
///
/// The path is a host file the finish step or the plan names (a driver library, possibly under a
/// driver root another container provides): it is reached as an `O_PATH` fd and read only when
/// that is a regular file, so a FIFO or a device node there is never opened (an open can block,
/// or act: a watchdog's node reboots the host).
pub fn read(path: &Path) -> Option<i32> {
    let fd = nix::fcntl::open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
    let Ok(Regular::File(file)) = reopen_regular(&fd, u64::MAX) else {
        return None;
    };
    of_file(&file)
}

/// The flags for a library already open (a regular file the caller checked), or `None`.
pub fn of_file(file: &std::fs::File) -> Option<i32> {
    let mut header = [0u8; 20];
    file.read_exact_at(&mut header, 0).ok()?;
    from_header(&header)
}

/// The flags ld.so of this build's architecture accepts for its own libraries.
pub const NATIVE: Option<i32> = if cfg!(target_arch = "x86_64") {
    Some(0x0303)
} else if cfg!(target_arch = "aarch64") {
    Some(0x0a03)
} else if cfg!(target_arch = "powerpc64") {
    Some(0x0503)
} else if cfg!(target_arch = "s390x") {
    Some(0x0403)
} else {
    None
};

#[cfg(test)]
mod tests {
    use super::*;

    fn header(class: u8, data: u8, machine: u16) -> Vec<u8> {
        let mut h = b"\x7fELF".to_vec();
        h.extend([class, data, 1]);
        h.resize(18, 0);
        h.extend(if data == 2 {
            machine.to_be_bytes()
        } else {
            machine.to_le_bytes()
        });
        h
    }

    #[test]
    fn maps_class_and_machine_as_ldconfig_does() {
        assert_eq!(from_header(&header(2, 1, EM_X86_64)), Some(0x0303));
        assert_eq!(from_header(&header(1, 1, EM_X86_64)), Some(0x0803));
        assert_eq!(from_header(&header(1, 1, EM_386)), Some(0x0003));
        assert_eq!(from_header(&header(2, 1, EM_AARCH64)), Some(0x0a03));
        assert_eq!(from_header(&header(2, 2, EM_PPC64)), Some(0x0503));
        assert_eq!(from_header(&header(2, 2, EM_S390)), Some(0x0403));
        // 32-bit arm (float ABI in e_flags), unknown class, not ELF, short.
        assert_eq!(from_header(&header(1, 1, 40)), None);
        assert_eq!(from_header(&header(3, 1, EM_X86_64)), None);
        assert_eq!(from_header(b"#!/bin/sh\n0123456789"), None);
        assert_eq!(from_header(&header(2, 1, EM_X86_64)[..19]), None);
    }

    #[test]
    fn this_hosts_libc_has_the_native_flags() {
        let Some(native) = NATIVE else { return };
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .find(|p| Path::new(p).exists());
        if !devinject_testkit::require(libc.is_some(), "needs the host's libc.so.6 (Debian layout)")
        {
            return;
        }
        assert_eq!(read(Path::new(libc.unwrap())), Some(native));
    }

    #[test]
    fn only_a_regular_file_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        // A FIFO without a writer: opening it for reading would wait for one, for ever.
        let fifo = dir.path().join("libfifo.so.1");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o644)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = fifo.clone();
        std::thread::spawn(move || tx.send(read(&p)).unwrap());
        let seen = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("reading the flags of a FIFO must not open it");
        assert_eq!(seen, None);
        assert_eq!(read(dir.path()), None, "a directory");
        // A regular ELF file, directly and through a link (driver roots hold soname links).
        let elf = std::env::current_exe().unwrap();
        let link = dir.path().join("libself.so.1");
        std::os::unix::fs::symlink(&elf, &link).unwrap();
        assert!(read(&elf).is_some());
        assert_eq!(read(&link), read(&elf));
    }
}
