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

/// What the reader finds in an ELF file: the machine it is built for and, for a shared object
/// that has one, its `DT_SONAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfLibrary {
    /// `e_machine` ([`devinject_devices::elf_machine`]).
    pub machine: u16,
    /// `DT_SONAME`.
    pub soname: Option<String>,
}

/// The library's `DT_SONAME`, if it is an ELF shared object that has one.
pub fn read_soname(path: &Path) -> Option<String> {
    read_library(path)?.soname
}

/// The machine and the `DT_SONAME` of the ELF file at `path`; `None` when it is not ELF.
pub fn read_library(path: &Path) -> Option<ElfLibrary> {
    library_of(&File::open(path).ok()?)
}

/// [`read_soname`] of a file already open (one the caller checked is a regular file).
pub fn soname_of(file: &File) -> Option<String> {
    library_of(file)?.soname
}

/// [`read_library`] of a file already open.
pub fn library_of(file: &File) -> Option<ElfLibrary> {
    // The ELF header: 52 bytes for 32-bit files, 64 for 64-bit ones.
    let mut head = [0u8; 64];
    let n = file.read_at(&mut head, 0).ok()?;
    if n < 52 {
        return None;
    }
    let machine = devinject_devices::elf_machine::of_header(&head[..n])?;
    Some(ElfLibrary {
        machine,
        soname: soname_in(file, &head[..n]),
    })
}

/// The `DT_SONAME` of the ELF file `file` whose header is `head`.
fn soname_in(file: &File, head: &[u8]) -> Option<String> {
    let (is64, le) = (head[4] == 2, head[5] == 1);
    let h = Fields {
        bytes: head,
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
    let table = read_block(file, phoff, phnum * phentsize)?;
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
    let block = read_block(file, dyn_off, dyn_size)?;
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
pub(crate) mod tests {
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

    /// An ELF shared object written field by field, so that each bound of the reader can be
    /// moved on its own. Program headers sit at offset 64; everything else is a blob at a
    /// file offset of the test's choosing.
    struct Elf {
        is64: bool,
        le: bool,
        /// `e_machine`.
        machine: u16,
        phentsize: u64,
        /// `(p_type, p_offset, p_vaddr, p_filesz)`.
        phdrs: Vec<(u64, u64, u64, u64)>,
        blobs: Vec<(u64, Vec<u8>)>,
    }

    const PHOFF: u64 = 64;
    /// Where [`library`] maps its string table: file `base + 0x100` is vaddr `STR_VADDR`.
    const LOAD_VADDR: u64 = 0x40_0000;
    const STR_VADDR: u64 = LOAD_VADDR + 0x100;

    impl Elf {
        fn int(&self, v: u64, size: usize) -> Vec<u8> {
            let b = if self.le {
                v.to_le_bytes()[..size].to_vec()
            } else {
                v.to_be_bytes()[8 - size..].to_vec()
            };
            assert!(
                size == 8 || v >> (size * 8) == 0,
                "{v:#x} does not fit in {size} bytes"
            );
            b
        }

        fn word(&self, v: u64) -> Vec<u8> {
            self.int(v, if self.is64 { 8 } else { 4 })
        }

        /// The bytes of a dynamic table with these `(tag, value)` entries.
        fn dynamic(&self, entries: &[(u64, u64)]) -> Vec<u8> {
            entries
                .iter()
                .flat_map(|&(tag, val)| [self.word(tag), self.word(val)].concat())
                .collect()
        }

        /// The size of one dynamic entry.
        fn entry(&self) -> u64 {
            if self.is64 {
                16
            } else {
                8
            }
        }

        /// Replaces the dynamic table (the blob `PT_DYNAMIC` points at) and its size.
        fn set_dynamic(&mut self, entries: &[(u64, u64)]) {
            let bytes = self.dynamic(entries);
            let dynamic = self.phdrs.iter_mut().find(|p| p.0 == PT_DYNAMIC).unwrap();
            dynamic.3 = bytes.len() as u64;
            let at = dynamic.1;
            self.blobs.retain(|(o, _)| *o != at);
            self.blobs.push((at, bytes));
        }

        fn bytes(&self) -> Vec<u8> {
            let mut out = vec![0u8; 64];
            let mut put = |at: u64, b: &[u8]| {
                let at = usize::try_from(at).unwrap();
                if out.len() < at + b.len() {
                    out.resize(at + b.len(), 0);
                }
                out[at..at + b.len()].copy_from_slice(b);
            };
            put(0, b"\x7fELF");
            put(
                4,
                &[
                    if self.is64 { 2 } else { 1 },
                    if self.le { 1 } else { 2 },
                    1,
                ],
            );
            put(18, &self.int(u64::from(self.machine), 2));
            let phnum = self.phdrs.len() as u64;
            if self.is64 {
                put(0x20, &self.int(PHOFF, 8));
                put(0x36, &self.int(self.phentsize, 2));
                put(0x38, &self.int(phnum, 2));
            } else {
                put(0x1c, &self.int(PHOFF, 4));
                put(0x2a, &self.int(self.phentsize, 2));
                put(0x2c, &self.int(phnum, 2));
            }
            for (i, &(ptype, offset, vaddr, filesz)) in self.phdrs.iter().enumerate() {
                let at = PHOFF + i as u64 * self.phentsize;
                put(at, &self.int(ptype, 4));
                let fields = if self.is64 { [8, 16, 32] } else { [4, 8, 16] };
                for (f, v) in fields.into_iter().zip([offset, vaddr, filesz]) {
                    put(at + f, &self.word(v));
                }
            }
            for (at, b) in &self.blobs {
                put(*at, b);
            }
            out
        }
    }

    /// A library named `soname`: one `PT_LOAD` maps file `base..base + 0x2000` at `LOAD_VADDR`,
    /// the string table is at `base + 0x100` and the dynamic table at `base + 0x1000`.
    fn library(is64: bool, le: bool, soname: &[u8], base: u64) -> Elf {
        let mut elf = Elf {
            is64,
            le,
            machine: devinject_devices::elf_machine::host(),
            phentsize: if is64 { 56 } else { 32 },
            phdrs: vec![
                (PT_LOAD, base, LOAD_VADDR, 0x2000),
                (PT_DYNAMIC, base + 0x1000, LOAD_VADDR + 0x1000, 0),
            ],
            blobs: vec![(base + 0x100, [b"\0", soname, b"\0"].concat())],
        };
        elf.set_dynamic(&[(DT_STRTAB, STR_VADDR), (DT_SONAME, 1), (DT_NULL, 0)]);
        elf
    }

    /// A little-endian ELF64 shared object whose `DT_SONAME` is `soname`, for the tests of the
    /// modules that read sonames.
    pub(crate) fn shared_object(soname: &str) -> Vec<u8> {
        library(true, true, soname.as_bytes(), 0x200).bytes()
    }

    /// A little-endian shared object named `soname` built for `machine`, 64-bit or not.
    pub(crate) fn shared_object_for(soname: &str, machine: u16, is64: bool) -> Vec<u8> {
        let mut elf = library(is64, true, soname.as_bytes(), 0x200);
        elf.machine = machine;
        elf.bytes()
    }

    fn soname_of(bytes: &[u8]) -> Option<String> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("lib.so");
        std::fs::write(&f, bytes).unwrap();
        read_soname(&f)
    }

    #[test]
    fn reads_both_classes_and_byte_orders() {
        for is64 in [false, true] {
            for le in [false, true] {
                let elf = library(is64, le, b"libdemo.so.1", 0x200);
                assert_eq!(
                    soname_of(&elf.bytes()).as_deref(),
                    Some("libdemo.so.1"),
                    "is64 {is64} le {le}"
                );
            }
        }
    }

    #[test]
    fn a_bad_magic_is_not_elf() {
        let mut bytes = library(true, true, b"libdemo.so.1", 0x200).bytes();
        bytes[1] = b'X';
        assert_eq!(soname_of(&bytes), None);
    }

    /// The program header table is bounded: at most 256 entries of at most 256 bytes, and an
    /// entry no smaller than the class's own (56 or 32 bytes), even when the fields we read
    /// would fit in a smaller one.
    #[test]
    fn program_header_table_bounds() {
        for is64 in [false, true] {
            let with = |phnum: usize, phentsize: u64| {
                let mut elf = library(is64, true, b"libdemo.so.1", 0x2_0000);
                elf.phentsize = phentsize;
                elf.phdrs.resize(phnum, (0, 0, 0, 0));
                soname_of(&elf.bytes())
            };
            let own = if is64 { 56 } else { 32 };
            let small = if is64 { 40 } else { 20 };
            let want = Some("libdemo.so.1".to_owned());
            assert_eq!(with(2, own), want, "is64 {is64}");
            assert_eq!(with(256, own), want, "is64 {is64}: 256 entries");
            assert_eq!(with(257, own), None, "is64 {is64}: 257 entries");
            assert_eq!(with(2, 256), want, "is64 {is64}: 256-byte entries");
            assert_eq!(with(2, 257), None, "is64 {is64}: 257-byte entries");
            assert_eq!(with(2, small), None, "is64 {is64}: {small}-byte entries");
            assert_eq!(
                with(2, own - 1),
                None,
                "is64 {is64}: {}-byte entries",
                own - 1
            );
        }
    }

    /// `DT_NULL` ends the table, a table without one ends with its segment, and at most 4096
    /// entries are read.
    #[test]
    fn dynamic_table_bounds() {
        for is64 in [false, true] {
            let mut elf = library(is64, true, b"libdemo.so.1\0other.so", 0x200);
            let other = 1 + "libdemo.so.1".len() as u64 + 1;
            elf.set_dynamic(&[
                (DT_STRTAB, STR_VADDR),
                (DT_SONAME, 1),
                (DT_NULL, 0),
                (DT_SONAME, other),
            ]);
            assert_eq!(soname_of(&elf.bytes()).as_deref(), Some("libdemo.so.1"));
            elf.set_dynamic(&[(DT_STRTAB, STR_VADDR), (DT_SONAME, other)]);
            assert_eq!(
                soname_of(&elf.bytes()).as_deref(),
                Some("other.so"),
                "no DT_NULL"
            );
            // A segment size that is not a whole number of entries drops the partial one.
            elf.phdrs[1].3 += elf.entry() / 2;
            assert_eq!(
                soname_of(&elf.bytes()).as_deref(),
                Some("other.so"),
                "partial entry"
            );

            // DT_SONAME as entry 4096 (the last read) and as entry 4097; 21 is DT_DEBUG.
            let mut entries = vec![(21, 0); 4094];
            entries.insert(0, (DT_STRTAB, STR_VADDR));
            entries.push((DT_SONAME, 1));
            elf.set_dynamic(&entries);
            assert_eq!(
                soname_of(&elf.bytes()).as_deref(),
                Some("libdemo.so.1"),
                "4096"
            );
            entries.insert(1, (21, 0));
            elf.set_dynamic(&entries);
            assert_eq!(soname_of(&elf.bytes()), None, "4097 entries");
        }
    }

    /// `DT_STRTAB` is a virtual address, found in the `PT_LOAD` whose `[vaddr, vaddr + filesz)`
    /// holds it, then moved to that segment's file offset.
    #[test]
    fn the_string_table_is_found_through_the_right_load_segment() {
        for is64 in [false, true] {
            // Two loads mapping adjacent addresses from distant file offsets: 0x1100 is the first
            // byte of the second one, not one past the end of the first.
            let mut elf = library(is64, true, b"right.so", 0x400);
            elf.phdrs = vec![
                (PT_LOAD, 0x200, 0x1000, 0x100),
                (PT_LOAD, 0x400 + 0x100, 0x1100, 0x100),
                (PT_DYNAMIC, 0x1400, 0, 0),
            ];
            elf.blobs.push((0x300, b"\0wrong.so\0".to_vec()));
            elf.set_dynamic(&[(DT_STRTAB, 0x1100), (DT_SONAME, 1), (DT_NULL, 0)]);
            assert_eq!(
                soname_of(&elf.bytes()).as_deref(),
                Some("right.so"),
                "is64 {is64}"
            );
            // Below every load, then past the end of all of them.
            for strtab in [0xfff, 0x1200] {
                elf.set_dynamic(&[(DT_STRTAB, strtab), (DT_SONAME, 1), (DT_NULL, 0)]);
                assert_eq!(soname_of(&elf.bytes()), None, "is64 {is64}: {strtab:#x}");
            }
        }
    }

    #[test]
    fn the_soname_is_a_plain_file_name_of_at_most_255_bytes() {
        let name = |n: &[u8]| soname_of(&library(true, true, n, 0x200).bytes());
        let long = "l".repeat(255);
        assert_eq!(name(long.as_bytes()), Some(long.clone()));
        assert_eq!(name(format!("{long}l").as_bytes()), None, "256 bytes");
        for bad in [&b""[..], b"a/b", b"/libx.so", b".", b"..", b"lib\xffx.so"] {
            assert_eq!(name(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(name(b"...").as_deref(), Some("..."));
    }

    /// A file cut short at each part the reader needs, or pointing past its end, has none.
    #[test]
    fn truncated_images_and_offsets_past_the_end_have_none() {
        for is64 in [false, true] {
            // The soname last in the file, after the dynamic table, in the same load segment.
            let mut elf = library(is64, false, b"libdemo.so.1", 0x200);
            elf.blobs.push((0x200 + 0x1800, b"libtail.so\0".to_vec()));
            elf.set_dynamic(&[(DT_STRTAB, STR_VADDR), (DT_SONAME, 0x1700), (DT_NULL, 0)]);
            let full = elf.bytes();
            assert_eq!(
                soname_of(&full).as_deref(),
                Some("libtail.so"),
                "is64 {is64}"
            );
            let (entry, phentsize) = if is64 { (16, 56) } else { (8, 32) };
            for (cut, part) in [
                (40, "the ELF header"),
                (64 + phentsize + 10, "the program headers"),
                (0x1200 + entry + 3, "the dynamic table"),
                (full.len() - 4, "the soname"),
                (full.len() - 1, "the soname's NUL"),
            ] {
                assert_eq!(soname_of(&full[..cut]), None, "is64 {is64}: cut in {part}");
            }
            let mut past = library(is64, false, b"libdemo.so.1", 0x200);
            past.phdrs[0].1 = 0x10_0000;
            assert_eq!(
                soname_of(&past.bytes()),
                None,
                "is64 {is64}: load past the end"
            );
            let mut past = library(is64, false, b"libdemo.so.1", 0x200);
            past.phdrs[1].1 = 0x10_0000;
            assert_eq!(
                soname_of(&past.bytes()),
                None,
                "is64 {is64}: dynamic past the end"
            );
            let mut past = library(is64, false, b"libdemo.so.1", 0x200);
            past.set_dynamic(&[(DT_STRTAB, STR_VADDR), (DT_SONAME, 0x10_0000), (DT_NULL, 0)]);
            assert_eq!(
                soname_of(&past.bytes()),
                None,
                "is64 {is64}: name past the end"
            );
        }
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
