//! The order glibc keeps cache entries in.
//!
//! ld.so finds a soname by binary search over the entries with `_dl_cache_libcmp` (glibc
//! `elf/dl-cache.c`), then takes the first usable entry among those with that name. So a cache we
//! write must be sorted exactly as ldconfig sorts (glibc `elf/cache.c`, `compare`): names in
//! descending `_dl_cache_libcmp` order, then higher flags first, then glibc-hwcaps entries
//! (by subdirectory name) before plain ones. Equal entries keep the order they came in, which is
//! the preference among libraries of the same name.

use std::cmp::Ordering;
use std::ffi::c_char;

/// `_dl_cache_libcmp`: bytes compare as C `char` (signed on x86-64, unsigned on arm64), except
/// that runs of decimal digits compare as numbers (`libfoo.so.10` after `libfoo.so.9`), and a
/// digit sorts after any other byte at the same place. The numbers wrap like the C `int` they
/// are parsed into, so that even absurd names sort as the loader compares them.
pub fn libcmp(a: &[u8], b: &[u8]) -> Ordering {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    let digit = |c: u8| c.is_ascii_digit();
    let (mut i, mut j) = (0, 0);
    loop {
        let (c1, c2) = (at(a, i), at(b, j));
        if c1 == 0 {
            return as_char(0).cmp(&as_char(c2));
        }
        if digit(c1) {
            if !digit(c2) {
                return Ordering::Greater;
            }
            let mut v1: i32 = 0;
            while digit(at(a, i)) {
                v1 = v1.wrapping_mul(10).wrapping_add(i32::from(at(a, i) - b'0'));
                i += 1;
            }
            let mut v2: i32 = 0;
            while digit(at(b, j)) {
                v2 = v2.wrapping_mul(10).wrapping_add(i32::from(at(b, j) - b'0'));
                j += 1;
            }
            // C returns `val1 - val2`, an int that may wrap: keep its sign.
            let d = v1.wrapping_sub(v2);
            if d != 0 {
                return d.cmp(&0);
            }
        } else if digit(c2) {
            return Ordering::Less;
        } else if c1 != c2 {
            return as_char(c1).cmp(&as_char(c2));
        } else {
            i += 1;
            j += 1;
        }
    }
}

/// A byte as this platform's C `char`, widened so that a difference cannot wrap.
fn as_char(b: u8) -> i32 {
    // c_char is i8 or u8 depending on the target: the cast reinterprets the byte as it.
    #[allow(clippy::cast_possible_wrap)]
    i32::from(b as c_char)
}

/// What ldconfig's `compare` looks at in one entry.
#[derive(Debug, Clone, Copy)]
pub struct SortKey<'a> {
    /// The soname.
    pub name: &'a [u8],
    /// The entry's flags.
    pub flags: i32,
    /// The glibc-hwcaps subdirectory name, for entries that have one.
    pub hwcaps: Option<&'a [u8]>,
}

/// ldconfig's order: `Less` means `a` comes first in the file.
pub fn entry_order(a: &SortKey<'_>, b: &SortKey<'_>) -> Ordering {
    libcmp(b.name, a.name)
        .then_with(|| b.flags.cmp(&a.flags))
        .then_with(|| match (a.hwcaps, b.hwcaps) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_compare_as_numbers() {
        assert_eq!(libcmp(b"libfoo.so.10", b"libfoo.so.9"), Ordering::Greater);
        assert_eq!(libcmp(b"libfoo.so.9", b"libfoo.so.10"), Ordering::Less);
        assert_eq!(libcmp(b"libfoo.so.01", b"libfoo.so.1"), Ordering::Equal);
        assert_eq!(libcmp(b"lib2", b"libx"), Ordering::Greater);
        assert_eq!(libcmp(b"libx", b"lib2"), Ordering::Less);
        assert_eq!(libcmp(b"liba", b"libb"), Ordering::Less);
        assert_eq!(libcmp(b"liba", b"liba.so"), Ordering::Less);
        assert_eq!(libcmp(b"liba.so", b"liba"), Ordering::Greater);
        assert_eq!(libcmp(b"", b""), Ordering::Equal);
    }

    #[test]
    fn bytes_compare_as_c_char() {
        // 0xc3 is negative as a signed char: before 'a' on x86-64, after it on arm64.
        let expect = if std::ffi::c_char::MIN == 0 {
            Ordering::Greater
        } else {
            Ordering::Less
        };
        assert_eq!(libcmp("libé".as_bytes(), b"liba"), expect);
    }

    #[test]
    fn huge_numbers_wrap_like_c() {
        // Must not panic; the result only has to be consistent with itself.
        let a = b"lib99999999999999999999.so";
        let b = b"lib1.so";
        assert_eq!(libcmp(a, b), libcmp(b, a).reverse());
    }

    #[test]
    fn entries_sort_names_descending_then_flags_then_hwcaps_first() {
        let k = |name: &'static [u8], flags, hwcaps| SortKey {
            name,
            flags,
            hwcaps,
        };
        let mut v = [
            k(b"liba.so.1", 0x0303, None),
            k(b"libb.so.1", 0x0303, None),
            k(b"liba.so.1", 0x0003, None),
            k(b"liba.so.1", 0x0303, Some(&b"x86-64-v3"[..])),
            k(b"liba.so.1", 0x0303, Some(&b"x86-64-v2"[..])),
        ];
        v.sort_by(entry_order);
        let got: Vec<_> = v.iter().map(|e| (e.name, e.flags, e.hwcaps)).collect();
        assert_eq!(
            got,
            [
                (&b"libb.so.1"[..], 0x0303, None),
                (&b"liba.so.1"[..], 0x0303, Some(&b"x86-64-v2"[..])),
                (&b"liba.so.1"[..], 0x0303, Some(&b"x86-64-v3"[..])),
                (&b"liba.so.1"[..], 0x0303, None),
                (&b"liba.so.1"[..], 0x0003, None),
            ]
        );
    }
}
