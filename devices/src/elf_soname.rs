//! Reads a shared library's `DT_SONAME` without loading the file.
//!
//! Driver libraries are large (libcuda is tens of MiB) and the hook resolves them on every
//! container start, so this reads only the ELF header, the program headers, the dynamic segment
//! and the one string it needs, with positioned reads. Both ELF classes and byte orders are
//! handled; anything unexpected yields `None` (no soname link is made) rather than an error.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

const PT_LOAD: u64 = 1;
const PT_DYNAMIC: u64 = 2;
const DT_NULL: u64 = 0;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;
/// Bounds on what a sane library has, so a hostile or corrupt file cannot make us read much.
const MAX_PHDRS: u64 = 256;
const MAX_DYN_ENTRIES: u64 = 4096;
const MAX_SONAME: usize = 255;

struct Reader<'a> {
    file: &'a File,
    is64: bool,
    le: bool,
}

impl Reader<'_> {
    fn bytes<const N: usize>(&self, off: u64) -> Option<[u8; N]> {
        let mut b = [0u8; N];
        self.file.read_exact_at(&mut b, off).ok()?;
        Some(b)
    }
    fn u16(&self, off: u64) -> Option<u64> {
        let b = self.bytes::<2>(off)?;
        Some(u64::from(if self.le {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }))
    }
    fn u32(&self, off: u64) -> Option<u64> {
        let b = self.bytes::<4>(off)?;
        Some(u64::from(if self.le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }))
    }
    fn u64(&self, off: u64) -> Option<u64> {
        let b = self.bytes::<8>(off)?;
        Some(if self.le {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        })
    }
    /// A native-width word (address, offset, size).
    fn word(&self, off: u64) -> Option<u64> {
        if self.is64 {
            self.u64(off)
        } else {
            self.u32(off)
        }
    }
}

/// The library's `DT_SONAME`, if it is an ELF shared object that has one.
pub fn read_soname(path: &Path) -> Option<String> {
    let file = File::open(path).ok()?;
    let ident: [u8; 16] = {
        let mut b = [0u8; 16];
        file.read_exact_at(&mut b, 0).ok()?;
        b
    };
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    let r = Reader {
        file: &file,
        is64: ident[4] == 2,
        le: ident[5] == 1,
    };
    let (phoff, phentsize, phnum) = if r.is64 {
        (r.u64(0x20)?, r.u16(0x36)?, r.u16(0x38)?)
    } else {
        (r.u32(0x1c)?, r.u16(0x2a)?, r.u16(0x2c)?)
    };
    if phnum > MAX_PHDRS {
        return None;
    }
    // (p_type, p_offset, p_vaddr, p_filesz) for each program header.
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let base = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let ptype = r.u32(base)?;
        let (offset, vaddr, filesz) = if r.is64 {
            (r.u64(base + 8)?, r.u64(base + 16)?, r.u64(base + 32)?)
        } else {
            (r.u32(base + 4)?, r.u32(base + 8)?, r.u32(base + 16)?)
        };
        match ptype {
            PT_LOAD => loads.push((offset, vaddr, filesz)),
            PT_DYNAMIC => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    let (dyn_off, dyn_size) = dynamic?;
    let entry = if r.is64 { 16 } else { 8 };
    let (mut strtab, mut soname) = (None, None);
    for i in 0..(dyn_size / entry).min(MAX_DYN_ENTRIES) {
        let at = dyn_off + i * entry;
        let tag = r.word(at)?;
        let val = r.word(at + entry / 2)?;
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(val),
            DT_SONAME => soname = Some(val),
            _ => {}
        }
    }
    // DT_STRTAB is a virtual address: map it to a file offset through the PT_LOAD segments.
    let strtab = strtab?;
    let str_off = loads
        .iter()
        .find(|(_, vaddr, filesz)| strtab >= *vaddr && strtab < vaddr + filesz)
        .map(|(offset, vaddr, _)| offset + (strtab - vaddr))?;
    let mut buf = [0u8; MAX_SONAME + 1];
    let n = file.read_at(&mut buf, str_off.checked_add(soname?)?).ok()?;
    let end = buf[..n].iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&buf[..end]).ok()?;
    let ok = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
    ok.then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_soname_of_a_system_library() {
        // libc is on every glibc host; find it through the usual multiarch dirs.
        let candidates = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
            "/usr/lib64/libc.so.6",
        ];
        let path = candidates
            .iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("no libc.so.6 on this host");
        assert_eq!(read_soname(path).as_deref(), Some("libc.so.6"));
    }

    #[test]
    fn non_elf_and_missing_files_have_none() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.so");
        std::fs::write(&f, b"\x7fELF garbage that is far too short").unwrap();
        assert_eq!(read_soname(&f), None);
        std::fs::write(&f, b"not elf").unwrap();
        assert_eq!(read_soname(&f), None);
        assert_eq!(read_soname(&dir.path().join("missing")), None);
    }
}
