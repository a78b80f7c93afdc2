//! How an ELF executable is linked: whether it names a program interpreter (`PT_INTERP`).
//!
//! The hook runs the host's `ldconfig` chrooted in a container's rootfs: a dynamically linked one
//! would have the kernel load the *image's* `ld-linux` as host root, so the hook and
//! `devinject-ctl doctor` both refuse one with an interpreter. Reads are bounded by the caller.

use std::io::Read;
use std::path::Path;

/// How an executable is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linkage {
    /// An ELF file without a program interpreter.
    Static,
    /// An ELF file with a program interpreter (`PT_INTERP`), named here.
    Dynamic(String),
    /// Not an ELF file (a script, ...).
    NotElf,
}

const PT_INTERP: u32 = 3;

/// Reads the ELF header and program headers of `bytes` (ELF32/ELF64, either byte order) and
/// says whether it names a program interpreter. `None` when the headers are truncated.
pub fn linkage(bytes: &[u8]) -> Option<Linkage> {
    if bytes.len() < 16 || &bytes[..4] != b"\x7fELF" {
        return Some(Linkage::NotElf);
    }
    let wide = match bytes[4] {
        1 => false,
        2 => true,
        _ => return Some(Linkage::NotElf),
    };
    let big = bytes[5] == 2;
    let u16_at = |o: usize| -> Option<u64> {
        let b: [u8; 2] = bytes.get(o..o + 2)?.try_into().ok()?;
        Some(u64::from(if big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }))
    };
    let u32_at = |o: usize| -> Option<u64> {
        let b: [u8; 4] = bytes.get(o..o + 4)?.try_into().ok()?;
        Some(u64::from(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }))
    };
    let u64_at = |o: usize| -> Option<u64> {
        let b: [u8; 8] = bytes.get(o..o + 8)?.try_into().ok()?;
        Some(if big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    };
    let word = |o: usize| if wide { u64_at(o) } else { u32_at(o) };
    let (phoff, phentsize, phnum) = if wide {
        (u64_at(32)?, u16_at(54)?, u16_at(56)?)
    } else {
        (u32_at(28)?, u16_at(42)?, u16_at(44)?)
    };
    for i in 0..phnum {
        let at = usize::try_from(phoff + i * phentsize).ok()?;
        if u32_at(at)? as u32 != PT_INTERP {
            continue;
        }
        let (offset, size) = if wide {
            (word(at + 8)?, word(at + 32)?)
        } else {
            (word(at + 4)?, word(at + 16)?)
        };
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        let name = bytes.get(start..end)?;
        let name = String::from_utf8_lossy(name)
            .trim_end_matches('\0')
            .to_string();
        return Some(Linkage::Dynamic(name));
    }
    Some(Linkage::Static)
}

/// Reads enough of `path` to find its program headers (64 KiB).
pub fn linkage_of(path: &Path) -> std::io::Result<Option<Linkage>> {
    linkage_from(std::fs::File::open(path)?)
}

/// Reads the first 64 KiB of `file` (enough for the program headers) and says how it is linked.
pub fn linkage_from(file: impl Read) -> std::io::Result<Option<Linkage>> {
    let mut bytes = Vec::new();
    file.take(HEADERS_READ).read_to_end(&mut bytes)?;
    Ok(linkage(&bytes))
}

/// How much of a file is read for its headers.
pub const HEADERS_READ: u64 = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian ELF64 header with one program header of type `ptype` pointing at
    /// `/lib/ld.so\0`.
    fn elf64(ptype: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56 + 16];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        b[64..68].copy_from_slice(&ptype.to_le_bytes());
        b[72..80].copy_from_slice(&120u64.to_le_bytes());
        b[96..104].copy_from_slice(&11u64.to_le_bytes());
        b[120..131].copy_from_slice(b"/lib/ld.so\0");
        b
    }

    /// An ELF32 header in either byte order with one program header of type `ptype` pointing
    /// at `/lib/ld-linux.so.2\0`.
    fn elf32(ptype: u32, big: bool) -> Vec<u8> {
        let int = |v: u32, size: usize| {
            if big {
                v.to_be_bytes()[4 - size..].to_vec()
            } else {
                v.to_le_bytes()[..size].to_vec()
            }
        };
        let mut b = vec![0u8; 52 + 32];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 1;
        b[5] = if big { 2 } else { 1 };
        b[28..32].copy_from_slice(&int(52, 4));
        b[42..44].copy_from_slice(&int(32, 2));
        b[44..46].copy_from_slice(&int(1, 2));
        b[52..56].copy_from_slice(&int(ptype, 4));
        b[56..60].copy_from_slice(&int(84, 4));
        b[68..72].copy_from_slice(&int(19, 4));
        b.extend_from_slice(b"/lib/ld-linux.so.2\0");
        b
    }

    #[test]
    fn reads_elf32_in_both_byte_orders() {
        for big in [false, true] {
            assert_eq!(linkage(&elf32(1, big)), Some(Linkage::Static), "big {big}");
            assert_eq!(
                linkage(&elf32(PT_INTERP, big)),
                Some(Linkage::Dynamic("/lib/ld-linux.so.2".to_string())),
                "big {big}"
            );
            assert_eq!(linkage(&elf32(PT_INTERP, big)[..90]), None, "big {big}");
        }
    }

    /// Anything shorter than the 16-byte identification is not ELF (and is not indexed past
    /// its end); a whole identification with no header after it is a truncated ELF file.
    #[test]
    fn short_inputs_and_unknown_classes() {
        for short in [&b""[..], b"#!", b"\x7fEL", b"\x7fELF\x02\x01"] {
            assert_eq!(linkage(short), Some(Linkage::NotElf), "{short:?}");
        }
        let ident = &elf64(PT_INTERP)[..16];
        assert_eq!(linkage(ident), None);
        let mut other_class = elf64(PT_INTERP);
        other_class[4] = 3;
        assert_eq!(linkage(&other_class), Some(Linkage::NotElf));
    }

    /// The program headers are found anywhere in the first 64 KiB, and not after it.
    #[test]
    fn headers_are_read_from_the_first_64_kib() {
        let at = |phoff: u64| {
            let mut b = elf64(PT_INTERP);
            let (header, interp) = (b[64..120].to_vec(), b[120..131].to_vec());
            b[32..40].copy_from_slice(&phoff.to_le_bytes());
            let start = usize::try_from(phoff).unwrap();
            b.resize(start + 56 + 11, 0);
            b[start..start + 56].copy_from_slice(&header);
            b[start + 8..start + 16].copy_from_slice(&(phoff + 56).to_le_bytes());
            b[start + 56..].copy_from_slice(&interp);
            linkage_from(std::io::Cursor::new(b)).unwrap()
        };
        let dynamic = Some(Linkage::Dynamic("/lib/ld.so".to_string()));
        assert_eq!(at(4096), dynamic);
        assert_eq!(at(HEADERS_READ - 56 - 11), dynamic);
        assert_eq!(at(HEADERS_READ - 56), None, "the name is past the bound");
        assert_eq!(at(HEADERS_READ), None);
    }

    #[test]
    fn tells_static_dynamic_and_scripts_apart() {
        assert_eq!(linkage(&elf64(1)), Some(Linkage::Static));
        assert_eq!(
            linkage(&elf64(PT_INTERP)),
            Some(Linkage::Dynamic("/lib/ld.so".to_string()))
        );
        assert_eq!(linkage(b"#!/bin/sh\nexec x\n"), Some(Linkage::NotElf));
        assert_eq!(linkage(&elf64(PT_INTERP)[..70]), None);
    }

    /// Debian's ldconfig is static, its /bin/sh is not.
    #[test]
    fn the_hosts_own_binaries() {
        if !(devinject_testkit::require_path("/bin/sh", "a dynamic binary")
            && devinject_testkit::require_path("/sbin/ldconfig", "Debian's static ldconfig"))
        {
            return;
        }
        let sh = linkage_of(Path::new("/bin/sh")).unwrap();
        assert!(matches!(sh, Some(Linkage::Dynamic(_))), "{sh:?}");
        let ldconfig = linkage_of(Path::new("/sbin/ldconfig")).unwrap();
        assert_eq!(ldconfig, Some(Linkage::Static));
    }
}
