//! The container's linker cache, `/etc/ld.so.cache`, read and written by the hook itself.
//!
//! Running ldconfig in the container costs a fork, an exec, a scan of every library directory
//! the image configures and a read of every library in them, on every start that injects
//! libraries. The hook already knows everything the cache must learn: each injected library's
//! soname, its path in the container and its ELF class and machine. So it reads the image's
//! cache, adds those entries in the order glibc's ldconfig keeps ([`order`]), and writes the
//! result in glibc's current format (`glibc-ld.so.cache1.1`, glibc `sysdeps/generic/dl-cache.h`),
//! which every glibc since 2.2 reads.
//!
//! Everything the image's cache held is kept: its entries, their flags and hwcap values, and the
//! glibc-hwcaps subdirectory table those refer to. Injected libraries come first among entries
//! of the same name and flags, so a program finds the host driver's library rather than a copy
//! the image carries (as it would with the library mounted over the image's own file). What we
//! cannot read faithfully (an old-format-only cache, another byte order, a damaged file, a
//! library whose flags we cannot tell) is reported as [`Unsupported`], and the caller runs
//! ldconfig instead.

pub mod elf_flags;
pub mod order;
pub mod update;

use std::collections::HashMap;

use order::{entry_order, SortKey};

/// `CACHEMAGIC_VERSION_NEW`.
const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
/// `CACHEMAGIC`, the libc5 / glibc 2.0 format that older ldconfigs put first.
const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
/// `struct cache_file` (the old header): magic, padding, nlibs.
const OLD_HEADER: usize = 16;
/// `struct file_entry` (old): flags, key, value.
const OLD_ENTRY: usize = 12;
/// `struct cache_file_new`.
const HEADER: usize = 48;
/// `struct file_entry_new`: flags, key, value, osversion_unused, hwcap.
const ENTRY: usize = 24;
/// `cache_extension_magic`.
const EXTENSION_MAGIC: u32 = (-358_342_284_i32) as u32;
/// `cache_extension_tag_generator`.
const TAG_GENERATOR: u32 = 0;
/// `cache_extension_tag_glibc_hwcaps`.
const TAG_GLIBC_HWCAPS: u32 = 1;
/// `DL_CACHE_HWCAP_EXTENSION`.
const HWCAP_EXTENSION: u64 = 1 << 62;
/// The ISA level bits of the hwcap field's upper half (`DL_CACHE_HWCAP_ISA_LEVEL_MASK`).
const ISA_LEVEL_MASK: u64 = (1 << 10) - 1;
/// `cache_file_new_flags_endian_current`.
const ENDIAN_CURRENT: u8 = if cfg!(target_endian = "little") { 2 } else { 3 };
/// Bounds on what we read: far above any real cache (a full desktop lists a few thousand
/// libraries), low enough that a crafted file cannot make the hook spin.
const MAX_ENTRIES: usize = 200_000;
const MAX_STRING: usize = 4096;
const MAX_HWCAPS: usize = 1024;

/// Why a cache is not one we merge into (ldconfig then rebuilds it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// Only the libc5 / glibc 2.0 format, or an unknown magic.
    #[error("the image's /etc/ld.so.cache is in a format older than glibc 2.2's or unknown")]
    Format,
    /// Written for the other byte order.
    #[error("the image's /etc/ld.so.cache was written for another byte order")]
    Endian,
    /// Out of bounds, unterminated, too large.
    #[error("the image's /etc/ld.so.cache is damaged: {0}")]
    Damaged(&'static str),
    /// A library whose cache flags we cannot tell.
    #[error("cannot tell the cache flags of {0} from its ELF header")]
    Flags(String),
}

/// One cache entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `FLAG_*` bits: library type and architecture.
    pub flags: i32,
    /// The soname looked up.
    pub name: Vec<u8>,
    /// The file ld.so loads.
    pub path: Vec<u8>,
    /// The hwcap field: 0, a legacy hwcap mask, or glibc's `DL_CACHE_HWCAP_EXTENSION` bit with an index into
    /// [`Cache::hwcaps`] in the lower half.
    pub hwcap: u64,
}

impl Entry {
    /// The glibc-hwcaps subdirectory this entry belongs to, if any.
    fn hwcaps<'a>(&self, names: &'a [Vec<u8>]) -> Option<&'a [u8]> {
        let is_ext = (self.hwcap >> 32) & !ISA_LEVEL_MASK == HWCAP_EXTENSION >> 32;
        is_ext.then(|| {
            names
                .get((self.hwcap & 0xffff_ffff) as usize)
                .map(Vec::as_slice)
        })?
    }
}

/// One library the container must find through the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    /// The name programs link against.
    pub soname: String,
    /// Its path in the container (the soname link, or the file itself).
    pub path: std::path::PathBuf,
    /// Its cache flags ([`elf_flags`]).
    pub flags: i32,
}

/// A parsed cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cache {
    /// The entries, in ldconfig's order.
    pub entries: Vec<Entry>,
    /// The glibc-hwcaps subdirectory names, in the file's order (entries refer to them by
    /// index).
    pub hwcaps: Vec<Vec<u8>>,
}

/// Keeps what a parsed cache holds linear in the file's size.
///
/// Entries name their strings by offset, and a crafted file can point 100,000 entries at the
/// same few KiB of text, or at 100,000 different suffixes of it. Decoded, each entry's strings
/// spelled out, that took gigabytes of memory and minutes of sorting, and wrote a cache hundreds
/// of times the input. In a real cache each entry's path is its own string and its name a
/// suffix of it, so everything its entries name adds up to about its own size. The budget: all
/// the strings the entries name may add up to [`AMPLIFICATION`] times the file, plus
/// [`BUDGET_SLACK`]; past that the file is [`Unsupported`] (ldconfig rebuilds the cache without
/// reading it). Memory, sorting and the written cache are then linear in the input.
struct StringBudget {
    left: usize,
}

/// How many times its own size the strings a cache's entries name may add up to.
const AMPLIFICATION: usize = 4;
/// What every cache may name regardless of its size.
const BUDGET_SLACK: usize = 64 << 10;

impl StringBudget {
    fn new(file_len: usize) -> Self {
        Self {
            left: file_len.saturating_mul(AMPLIFICATION) + BUDGET_SLACK,
        }
    }

    /// Counts `s` against the budget.
    fn take(&mut self, s: Vec<u8>) -> Result<Vec<u8>, Unsupported> {
        self.left = self
            .left
            .checked_sub(s.len() + 1)
            .ok_or(Unsupported::Damaged(
                "its entries name far more text than it holds",
            ))?;
        Ok(s)
    }
}

/// A little reader over the file with bounds checks.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn array<const N: usize>(&self, at: usize) -> Result<[u8; N], Unsupported> {
        let end = at
            .checked_add(N)
            .ok_or(Unsupported::Damaged("offset overflows"))?;
        let b = self
            .0
            .get(at..end)
            .ok_or(Unsupported::Damaged("truncated"))?;
        Ok(b.try_into().expect("N bytes"))
    }

    fn u32(&self, at: usize) -> Result<u32, Unsupported> {
        self.array(at).map(u32::from_ne_bytes)
    }

    fn u64(&self, at: usize) -> Result<u64, Unsupported> {
        self.array(at).map(u64::from_ne_bytes)
    }

    /// The NUL-terminated string at `base + off`.
    fn string(&self, base: usize, off: u32) -> Result<Vec<u8>, Unsupported> {
        let start = base
            .checked_add(off as usize)
            .ok_or(Unsupported::Damaged("string offset overflows"))?;
        let rest = self
            .0
            .get(start..)
            .ok_or(Unsupported::Damaged("string offset past the end"))?;
        let rest = &rest[..rest.len().min(MAX_STRING + 1)];
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(Unsupported::Damaged("unterminated or overlong string"))?;
        Ok(rest[..len].to_vec())
    }
}

impl Cache {
    /// Parses a cache file; an empty file is an empty cache.
    pub fn parse(file: &[u8]) -> Result<Self, Unsupported> {
        if file.is_empty() {
            return Ok(Self::default());
        }
        let b = Bytes(file);
        let base = if file.starts_with(MAGIC_NEW) {
            0
        } else if file.starts_with(MAGIC_OLD) {
            // The compat layout: the new format follows the old entries, 8-byte aligned.
            let old = b.u32(12)? as usize;
            let end = old
                .checked_mul(OLD_ENTRY)
                .and_then(|n| n.checked_add(OLD_HEADER))
                .ok_or(Unsupported::Damaged("old entry count overflows"))?;
            let base = end.next_multiple_of(8);
            if !file.get(base..).is_some_and(|r| r.starts_with(MAGIC_NEW)) {
                return Err(Unsupported::Format);
            }
            base
        } else {
            return Err(Unsupported::Format);
        };
        let flags = *file
            .get(base + 28)
            .ok_or(Unsupported::Damaged("truncated"))?;
        if flags != 0 && flags & 3 != ENDIAN_CURRENT {
            return Err(Unsupported::Endian);
        }
        let nlibs = b.u32(base + 20)? as usize;
        if nlibs > MAX_ENTRIES {
            return Err(Unsupported::Damaged("too many entries"));
        }
        if base + HEADER + nlibs * ENTRY > file.len() {
            return Err(Unsupported::Damaged("entries past the end"));
        }
        let hwcaps = Self::parse_hwcaps(&b, base)?;
        let mut entries = Vec::with_capacity(nlibs);
        let mut strings = StringBudget::new(file.len());
        for i in 0..nlibs {
            let at = base + HEADER + i * ENTRY;
            let (name, path) = (b.u32(at + 4)?, b.u32(at + 8)?);
            let entry = Entry {
                flags: b.u32(at)? as i32,
                name: strings.take(b.string(base, name)?)?,
                path: strings.take(b.string(base, path)?)?,
                hwcap: b.u64(at + 16)?,
            };
            let is_ext = (entry.hwcap >> 32) & !ISA_LEVEL_MASK == HWCAP_EXTENSION >> 32;
            if is_ext && entry.hwcaps(&hwcaps).is_none() {
                return Err(Unsupported::Damaged("hwcaps index out of range"));
            }
            entries.push(entry);
        }
        Ok(Self { entries, hwcaps })
    }

    /// The glibc-hwcaps names from the extension directory, if it has that section.
    fn parse_hwcaps(b: &Bytes<'_>, base: usize) -> Result<Vec<Vec<u8>>, Unsupported> {
        let ext = b.u32(base + 32)? as usize;
        if ext == 0 {
            return Ok(Vec::new());
        }
        if !ext.is_multiple_of(4) || b.u32(ext)? != EXTENSION_MAGIC {
            return Err(Unsupported::Damaged("bad extension directory"));
        }
        let count = b.u32(ext + 4)? as usize;
        if count > 64 {
            return Err(Unsupported::Damaged("too many extension sections"));
        }
        for i in 0..count {
            let at = ext + 8 + i * 16;
            if b.u32(at)? != TAG_GLIBC_HWCAPS {
                continue;
            }
            // In the compat layout glibc reads these names relative to the file but writes
            // them relative to the new header: we do not guess which one a file meant.
            if base != 0 {
                return Err(Unsupported::Format);
            }
            let (offset, size) = (b.u32(at + 8)? as usize, b.u32(at + 12)? as usize);
            if !size.is_multiple_of(4) || size / 4 > MAX_HWCAPS {
                return Err(Unsupported::Damaged("bad glibc-hwcaps section"));
            }
            return (0..size / 4)
                .map(|k| b.string(0, b.u32(offset + 4 * k)?))
                .collect();
        }
        Ok(Vec::new())
    }

    /// Adds `libs`, first among the entries of their name and flags, dropping an image entry
    /// that already lists the same name at the same path with the same flags, then restores
    /// ldconfig's order.
    pub fn add(&mut self, libs: &[Library]) {
        let ours: Vec<Entry> = libs
            .iter()
            .map(|l| Entry {
                flags: l.flags,
                name: l.soname.as_bytes().to_vec(),
                path: l.path.as_os_str().as_encoded_bytes().to_vec(),
                hwcap: 0,
            })
            .collect();
        self.entries.retain(|e| {
            !ours
                .iter()
                .any(|o| o.name == e.name && o.path == e.path && o.flags == e.flags)
                || e.hwcap != 0
        });
        let mut all = ours;
        all.append(&mut self.entries);
        let names = &self.hwcaps;
        // Stable: equal entries keep their order, ours first.
        all.sort_by(|a, b| entry_order(&key(a, names), &key(b, names)));
        self.entries = all;
    }

    /// The most [`Cache::to_bytes`] writes for a cache parsed from a file of `file_len` bytes,
    /// holding `entries` entries once libraries whose sonames and paths add up to
    /// `added_strings` bytes were added: the output is linear in the input (the strings the
    /// entries name add up to at most four times the file plus 64 KiB, or the file is refused).
    /// Tests and the fuzz target hold the writer to it.
    pub fn output_bound(file_len: usize, entries: usize, added_strings: usize) -> usize {
        // Header, the entry table, every string once with its NUL, the extension directory.
        const EXTENSION: usize = 256;
        HEADER
            + entries * ENTRY
            + AMPLIFICATION * file_len
            + BUDGET_SLACK
            + added_strings
            + EXTENSION
    }

    /// The file glibc's ld.so reads: header, entries, strings, extension directory with the
    /// generator and (when there are any) the glibc-hwcaps names.
    pub fn to_bytes(&self) -> Vec<u8> {
        let table_start = HEADER + self.entries.len() * ENTRY;
        let mut strings = Strings::new(table_start);
        let refs: Vec<(u32, u32)> = self
            .entries
            .iter()
            .map(|e| (strings.add(&e.name), strings.add(&e.path)))
            .collect();
        let hwcap_refs: Vec<u32> = self.hwcaps.iter().map(|n| strings.add(n)).collect();
        let len_strings = strings.bytes.len();
        let ext = (table_start + len_strings).next_multiple_of(4);

        let mut out = Vec::with_capacity(ext + 64);
        out.extend_from_slice(MAGIC_NEW);
        out.extend_from_slice(&(self.entries.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(len_strings as u32).to_ne_bytes());
        out.extend_from_slice(&[ENDIAN_CURRENT, 0, 0, 0]);
        out.extend_from_slice(&(ext as u32).to_ne_bytes());
        out.resize(HEADER, 0);
        for (e, (k, v)) in self.entries.iter().zip(refs) {
            out.extend_from_slice(&e.flags.to_ne_bytes());
            out.extend_from_slice(&k.to_ne_bytes());
            out.extend_from_slice(&v.to_ne_bytes());
            out.extend_from_slice(&0u32.to_ne_bytes());
            out.extend_from_slice(&e.hwcap.to_ne_bytes());
        }
        out.extend_from_slice(&strings.bytes);
        out.resize(ext, 0);

        let generator = concat!("devinject ", env!("CARGO_PKG_VERSION")).as_bytes();
        let sections = if hwcap_refs.is_empty() { 1 } else { 2 };
        let data = ext + 8 + 16 * sections;
        let section = |out: &mut Vec<u8>, tag: u32, offset: usize, size: usize| {
            for v in [tag, 0, offset as u32, size as u32] {
                out.extend_from_slice(&v.to_ne_bytes());
            }
        };
        out.extend_from_slice(&EXTENSION_MAGIC.to_ne_bytes());
        out.extend_from_slice(&(sections as u32).to_ne_bytes());
        let hwcaps_size = 4 * hwcap_refs.len();
        section(&mut out, TAG_GENERATOR, data + hwcaps_size, generator.len());
        if !hwcap_refs.is_empty() {
            section(&mut out, TAG_GLIBC_HWCAPS, data, hwcaps_size);
        }
        for r in hwcap_refs {
            out.extend_from_slice(&r.to_ne_bytes());
        }
        out.extend_from_slice(generator);
        out
    }

    /// True when ld.so, looking up each library's soname with its flags, would find its path:
    /// the first plain (non-hwcaps) entry of that name and flags points there.
    pub fn finds_all(&self, libs: &[Library]) -> bool {
        libs.iter().all(|l| {
            self.entries
                .iter()
                .find(|e| e.name == l.soname.as_bytes() && e.flags == l.flags && e.hwcap == 0)
                .is_some_and(|e| e.path == l.path.as_os_str().as_encoded_bytes())
        })
    }
}

fn key<'a>(e: &'a Entry, names: &'a [Vec<u8>]) -> SortKey<'a> {
    SortKey {
        name: &e.name,
        flags: e.flags,
        hwcaps: e.hwcaps(names),
    }
}

/// The string table being built; offsets are from the start of the file.
struct Strings {
    start: usize,
    bytes: Vec<u8>,
    seen: HashMap<Vec<u8>, u32>,
}

impl Strings {
    fn new(start: usize) -> Self {
        Self {
            start,
            bytes: Vec::new(),
            seen: HashMap::new(),
        }
    }

    fn add(&mut self, s: &[u8]) -> u32 {
        if let Some(&at) = self.seen.get(s) {
            return at;
        }
        let at = (self.start + self.bytes.len()) as u32;
        self.bytes.extend_from_slice(s);
        self.bytes.push(0);
        self.seen.insert(s.to_vec(), at);
        at
    }
}

#[cfg(test)]
mod tests;
