//! Why a mountinfo line was rejected, and which line it was.

use std::fmt;

/// A field of a mountinfo line, in the order proc(5) numbers them (the optional fields and the
/// `-` separator have no variant: they have their own [`Malformed`] cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// (1) the mount's id.
    MountId,
    /// (2) the parent mount's id.
    ParentId,
    /// (3) `major:minor` of the filesystem's device.
    Device,
    /// (4) the directory of the filesystem that is the mount's root.
    Root,
    /// (5) where the mount is, relative to the reader's root.
    MountPoint,
    /// (6) the per-mount options.
    MountOptions,
    /// (9) the filesystem type.
    FsType,
    /// (10) the filesystem's source, such as a block device.
    Source,
    /// (11) the per-superblock options.
    SuperOptions,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::MountId => "mount id",
            Field::ParentId => "parent id",
            Field::Device => "major:minor",
            Field::Root => "root",
            Field::MountPoint => "mount point",
            Field::MountOptions => "mount options",
            Field::FsType => "filesystem type",
            Field::Source => "mount source",
            Field::SuperOptions => "super options",
        })
    }
}

/// What is wrong with one mountinfo line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// The line is longer than [`crate::MAX_LINE_LEN`] bytes; no kernel writes one that long.
    #[error("longer than {} bytes", crate::MAX_LINE_LEN)]
    TooLong,
    /// The line ends before this field.
    #[error("no {0} field")]
    Missing(Field),
    /// A numeric field (an id, or `major:minor`) is not a decimal number that fits 32 bits.
    #[error("the {0} field is not a number")]
    NotANumber(Field),
    /// No `-` field ends the optional fields.
    #[error("no `-` separator after the optional fields")]
    NoSeparator,
    /// More optional fields than [`crate::MAX_OPTIONAL_FIELDS`] before the separator.
    #[error("more than {} optional fields", crate::MAX_OPTIONAL_FIELDS)]
    TooManyOptionalFields,
}

/// A line of a mountinfo file that did not parse: its 1-based number, its text and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mountinfo line {line}: {reason}: {text:?}")]
pub struct ParseError {
    line: usize,
    text: String,
    reason: Malformed,
}

/// How much of a rejected line an error keeps, in bytes: enough to recognise it, without
/// copying a line of [`crate::MAX_LINE_LEN`] into every message.
const QUOTED_LEN: usize = 512;

impl ParseError {
    /// The error for line number `line` (1-based) holding `text`; the text is kept up to
    /// 512 bytes, with `…` where it was cut, and bytes that are not UTF-8 replaced.
    pub fn new(line: usize, text: &[u8], reason: Malformed) -> Self {
        let quoted = text.get(..QUOTED_LEN).unwrap_or(text);
        let mut kept = String::from_utf8_lossy(quoted).into_owned();
        if quoted.len() < text.len() {
            kept.push('…');
        }
        Self {
            line,
            text: kept,
            reason,
        }
    }

    /// The 1-based number of the rejected line.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The rejected line as text (cut and lossily decoded, for messages).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Why the line was rejected.
    pub fn reason(&self) -> Malformed {
        self.reason
    }
}
