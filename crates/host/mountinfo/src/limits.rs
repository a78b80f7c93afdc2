//! How much of a line the reader accepts, so that no input makes it read without bound.

/// The longest line read, in bytes. The kernel's longest fields are paths of up to 4096
/// bytes, four times as long once escaped, and option lists; an overlay mount with hundreds of
/// layers stays well below this.
pub const MAX_LINE_LEN: usize = 1 << 20;

/// The most optional fields read before the separator. The kernel writes at most four
/// (`shared`, `master`, `propagate_from`, `unbindable`).
pub const MAX_OPTIONAL_FIELDS: usize = 64;
