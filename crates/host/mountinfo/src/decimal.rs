//! The numbers of a mountinfo line: ids, device numbers, peer groups.

/// A decimal number of ASCII digits only (no sign, no spaces) that fits 32 bits.
pub fn decimal(raw: &[u8]) -> Option<u32> {
    if raw.is_empty() {
        return None;
    }
    raw.iter().try_fold(0u32, |acc, &d| {
        let digit = d.is_ascii_digit().then(|| u32::from(d - b'0'))?;
        acc.checked_mul(10)?.checked_add(digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_digits_only_within_32_bits() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"4294967295"), Some(u32::MAX));
        assert_eq!(decimal(b"4294967296"), None);
        assert_eq!(decimal(b""), None);
        assert_eq!(decimal(b"+1"), None);
        assert_eq!(decimal(b"1 "), None);
    }
}
