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
/// digit sorts after any other byte at the same place.
///
/// glibc parses each digit run into a C `int` and returns `val1 - val2`: past `INT_MAX` that is
/// signed overflow, undefined in C, and wrapping it (as this function once did) is not an order
/// at all (`lib5` < `lib2147483653` < `lib7` < `lib5`): the sort then aborted the hook. Runs
/// are compared here as numbers of any size (leading zeros dropped, then by length, then
/// digit by digit): exactly glibc's order wherever glibc's is defined, and a total order
/// everywhere.
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
            let (s1, s2) = (i, j);
            while digit(at(a, i)) {
                i += 1;
            }
            while digit(at(b, j)) {
                j += 1;
            }
            let order = number_cmp(&a[s1..i], &b[s2..j]);
            if order != Ordering::Equal {
                return order;
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

/// Two runs of ASCII digits compared as the numbers they write, of any size.
fn number_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (significant(a), significant(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// A digit run without its leading zeros.
fn significant(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&c| c == b'0').count();
    &digits[zeros..]
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
    use proptest::prelude::*;

    proptest! {
        /// A total order on adversarial names: antisymmetric and transitive, so that sorting
        /// can never detect an inconsistency and abort.
        #[test]
        fn libcmp_is_a_total_order(
            names in proptest::collection::vec("(lib|[a.])?[0-9]{0,25}(\\.so)?[0-9a.]{0,3}", 3),
        ) {
            let (a, b, c) = (names[0].as_bytes(), names[1].as_bytes(), names[2].as_bytes());
            prop_assert_eq!(libcmp(a, b), libcmp(b, a).reverse());
            if libcmp(a, b) != Ordering::Greater && libcmp(b, c) != Ordering::Greater {
                prop_assert_ne!(libcmp(a, c), Ordering::Greater, "{:?} {:?} {:?}", a, b, c);
            }
        }

        /// Where glibc's `int` arithmetic is defined, the order is glibc's.
        #[test]
        fn small_numbers_order_as_glibc(x in 0u32..=i32::MAX as u32, y in 0u32..=i32::MAX as u32) {
            let (a, b) = (format!("lib{x}.so"), format!("lib{y}.so"));
            prop_assert_eq!(libcmp(a.as_bytes(), b.as_bytes()), x.cmp(&y));
        }
    }

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

    /// Numbers past `INT_MAX` compare as numbers: wrapped, they would make the order not total, and
    /// the sort would abort the injection child.
    #[test]
    fn huge_numbers_compare_as_numbers() {
        let less = [
            (&b"lib5.so"[..], &b"lib2147483653.so"[..]),
            (b"lib2147483647.so", b"lib2147483648.so"),
            (
                b"lib99999999999999999999.so",
                b"lib100000000000000000000.so",
            ),
            (b"lib0005.so", b"lib6.so"),
        ];
        for (a, b) in less {
            assert_eq!(libcmp(a, b), Ordering::Less, "{a:?} {b:?}");
            assert_eq!(libcmp(b, a), Ordering::Greater, "{b:?} {a:?}");
        }
        assert_eq!(libcmp(b"lib0005.so", b"lib5.so"), Ordering::Equal);
        let mut v: Vec<&[u8]> = vec![b"lib7.so", b"lib2147483653.so", b"lib5.so"];
        v.sort_by(|x: &&[u8], y: &&[u8]| libcmp(x, y));
        assert_eq!(v, [&b"lib5.so"[..], b"lib7.so", b"lib2147483653.so"]);
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
