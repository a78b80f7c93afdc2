//! The optional fields of a mountinfo line: a mount's propagation (shared subtrees).

use std::ffi::OsString;

use crate::decimal::decimal;

/// One optional field (proc(5) field 7), from `Documentation/filesystems/sharedsubtree.rst`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionalField {
    /// `shared:N`: the mount propagates to and from peer group `N`.
    Shared(u32),
    /// `master:N`: the mount receives propagation from peer group `N`.
    Master(u32),
    /// `propagate_from:N`: a slave's nearest dominant peer group `N` visible to the reader.
    PropagateFrom(u32),
    /// `unbindable`: the mount cannot be bind-mounted.
    Unbindable,
    /// A field this reader does not know (proc(5) asks parsers to ignore those), unescaped.
    Other(OsString),
}

impl OptionalField {
    /// The field written as `raw`; an unknown tag, or a known one without a number, is
    /// [`OptionalField::Other`].
    pub fn parse(raw: &[u8]) -> Self {
        let numbered = |tag: &[u8]| -> Option<u32> {
            let number = raw.strip_prefix(tag)?.strip_prefix(b":")?;
            decimal(number)
        };
        if let Some(n) = numbered(b"shared") {
            OptionalField::Shared(n)
        } else if let Some(n) = numbered(b"master") {
            OptionalField::Master(n)
        } else if let Some(n) = numbered(b"propagate_from") {
            OptionalField::PropagateFrom(n)
        } else if raw == b"unbindable" {
            OptionalField::Unbindable
        } else {
            OptionalField::Other(crate::unescape(raw))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_kind() {
        assert_eq!(OptionalField::parse(b"shared:1"), OptionalField::Shared(1));
        assert_eq!(OptionalField::parse(b"master:2"), OptionalField::Master(2));
        assert_eq!(
            OptionalField::parse(b"propagate_from:7"),
            OptionalField::PropagateFrom(7)
        );
        assert_eq!(
            OptionalField::parse(b"unbindable"),
            OptionalField::Unbindable
        );
        assert_eq!(
            OptionalField::parse(b"shared:x"),
            OptionalField::Other("shared:x".into())
        );
        assert_eq!(
            OptionalField::parse(b"future:3"),
            OptionalField::Other("future:3".into())
        );
    }
}
