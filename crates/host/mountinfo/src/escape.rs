//! The kernel's octal escapes in mountinfo fields.
//!
//! `fs/proc_namespace.c` writes the root, the mount point, the filesystem type and the source
//! through `mangle()`, which is `seq_escape(m, s, " \t\n\\")`: each of those four bytes becomes
//! a backslash and three octal digits (`\040`, `\011`, `\012`, `\134`). Every other byte,
//! including bytes that are not UTF-8, is written as it is. Filesystems print their super
//! options with `seq_show_option()`, which escapes `,` and `=` the same way.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// The bytes the kernel's `mangle()` escapes in a mountinfo path field.
pub const MANGLED: &[u8] = b" \t\n\\";

/// Undoes the kernel's escapes in one field: a backslash followed by three octal digits whose
/// value fits a byte (`\000` to `\377`) becomes that byte. Anything else, such as a lone
/// backslash, `\x`, a short `\04` at the end or `\400`, stays as written, so a field from some
/// other writer never loses bytes.
pub fn unescape(field: impl AsRef<[u8]>) -> OsString {
    let bytes = field.as_ref();
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some((&first, tail)) = rest.split_first() {
        match (first, octal_byte(tail)) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                rest = &tail[3..];
            }
            _ => {
                out.push(first);
                rest = tail;
            }
        }
    }
    OsString::from_vec(out)
}

/// The byte that the three octal digits at the start of `digits` spell, when they do and it
/// fits in a byte.
fn octal_byte(digits: &[u8]) -> Option<u8> {
    let digits = digits.get(..3)?;
    let value = digits.iter().try_fold(0u16, |acc, &d| {
        (b'0'..=b'7')
            .contains(&d)
            .then(|| acc * 8 + u16::from(d - b'0'))
    })?;
    u8::try_from(value).ok()
}

/// Escapes `raw` the way the kernel's `mangle()` does: each byte of [`MANGLED`] becomes `\ooo`.
/// Writes mountinfo fixtures for tests, and states the rule that [`unescape`] undoes.
pub fn escape(raw: impl AsRef<[u8]>) -> Vec<u8> {
    let raw = raw.as_ref();
    let mut out = Vec::with_capacity(raw.len());
    for &byte in raw {
        if MANGLED.contains(&byte) {
            out.extend_from_slice(&[
                b'\\',
                b'0' + (byte >> 6),
                b'0' + ((byte >> 3) & 7),
                b'0' + (byte & 7),
            ]);
        } else {
            out.push(byte);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_four_mangled_bytes() {
        assert_eq!(unescape(r"a\040b\011c\012d\134e"), "a b\tc\nd\\e");
        assert_eq!(escape("a b\tc\nd\\e"), br"a\040b\011c\012d\134e");
    }

    #[test]
    fn keeps_what_is_not_an_escape() {
        assert_eq!(unescape(r"plain\x"), r"plain\x");
        assert_eq!(unescape(r"end\04"), r"end\04");
        assert_eq!(unescape(r"big\400"), r"big\400");
        assert_eq!(unescape(r"\\040"), "\\ ");
        assert_eq!(unescape(r"\"), r"\");
        assert_eq!(unescape(""), "");
    }

    #[test]
    fn decodes_any_byte_value_and_keeps_non_utf8() {
        assert_eq!(unescape(r"\377\000").into_vec(), [0xff, 0]);
        assert_eq!(unescape(b"\xff\\040").into_vec(), [0xff, b' ']);
    }
}
