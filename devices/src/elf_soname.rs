//! Reads a shared library's `DT_SONAME` without loading the file.
//!
//! Driver libraries are large (libcuda is tens of MiB) and the hook resolves them on every
//! container start, so this reads only the ELF header, the program header table, the dynamic
//! segment and the one string it needs: four positioned reads. Both ELF classes and byte orders are
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
const MAX_PHENTSIZE: u64 = 256;
const MAX_DYN_ENTRIES: u64 = 4096;
const MAX_SONAME: usize = 255;

/// Reads `len` bytes at `off`, all or nothing.
fn read_block(file: &File, off: u64, len: u64) -> Option<Vec<u8>> {
    let mut b = vec![0u8; usize::try_from(len).ok()?];
    file.read_exact_at(&mut b, off).ok()?;
    Some(b)
}

/// Fields of one block read from the file (one `pread` per header table, not per field: for 64
/// libraries that was ~5,000 reads per container start).
struct Fields<'a> {
    bytes: &'a [u8],
    is64: bool,
    le: bool,
}

impl Fields<'_> {
    fn bytes<const N: usize>(&self, off: u64) -> Option<[u8; N]> {
        let start = usize::try_from(off).ok()?;
        self.bytes
            .get(start..start.checked_add(N)?)?
            .try_into()
            .ok()
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
    // The ELF header: 52 bytes for 32-bit files, 64 for 64-bit ones.
    let mut head = [0u8; 64];
    let n = file.read_at(&mut head, 0).ok()?;
    if n < 52 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let (is64, le) = (head[4] == 2, head[5] == 1);
    let h = Fields {
        bytes: &head[..n],
        is64,
        le,
    };
    let (phoff, phentsize, phnum) = if is64 {
        (h.u64(0x20)?, h.u16(0x36)?, h.u16(0x38)?)
    } else {
        (h.u32(0x1c)?, h.u16(0x2a)?, h.u16(0x2c)?)
    };
    if phnum > MAX_PHDRS || phentsize > MAX_PHENTSIZE || phentsize < if is64 { 56 } else { 32 } {
        return None;
    }
    let table = read_block(&file, phoff, phnum * phentsize)?;
    let ph = Fields {
        bytes: &table,
        is64,
        le,
    };
    // (p_offset, p_vaddr, p_filesz) of each PT_LOAD, and the PT_DYNAMIC segment.
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let base = i * phentsize;
        let ptype = ph.u32(base)?;
        let (offset, vaddr, filesz) = if is64 {
            (ph.u64(base + 8)?, ph.u64(base + 16)?, ph.u64(base + 32)?)
        } else {
            (ph.u32(base + 4)?, ph.u32(base + 8)?, ph.u32(base + 16)?)
        };
        match ptype {
            PT_LOAD => loads.push((offset, vaddr, filesz)),
            PT_DYNAMIC => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    let (dyn_off, dyn_size) = dynamic?;
    let entry = if is64 { 16 } else { 8 };
    let dyn_size = dyn_size.min(MAX_DYN_ENTRIES * entry) / entry * entry;
    let block = read_block(&file, dyn_off, dyn_size)?;
    let d = Fields {
        bytes: &block,
        is64,
        le,
    };
    let (mut strtab, mut soname) = (None, None);
    for i in 0..dyn_size / entry {
        let at = i * entry;
        let tag = d.word(at)?;
        let val = d.word(at + entry / 2)?;
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
        .find(|(_, vaddr, filesz)| {
            strtab >= *vaddr && vaddr.checked_add(*filesz).is_some_and(|end| strtab < end)
        })
        .and_then(|(offset, vaddr, _)| offset.checked_add(strtab - vaddr))?;
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
    fn agrees_with_readelf_on_the_host_libraries() {
        // binutils comes with gcc; without readelf there is nothing to compare against.
        if !devinject_testkit::require_binary("readelf") {
            return;
        }
        let mut checked = 0;
        for dir in [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
        ] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten().take(300) {
                let path = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.contains(".so") || !path.is_file() {
                    continue;
                }
                let out = std::process::Command::new("readelf")
                    .args(["-d", "-W"])
                    .arg(&path)
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout);
                let want = text.lines().find(|l| l.contains("(SONAME)")).and_then(|l| {
                    let (_, rest) = l.split_once('[')?;
                    Some(rest.trim_end_matches(']').to_owned())
                });
                assert_eq!(read_soname(&path), want, "{}", path.display());
                checked += 1;
            }
        }
        assert!(checked > 0, "no host library found to compare");
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
