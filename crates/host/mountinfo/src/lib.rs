//! One reader of `/proc/<pid>/mountinfo` (proc(5)) for the whole workspace.
//!
//! A line looks like
//!
//! ```text
//! 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//! ```
//!
//! [`parse_line`] reads one into a [`Mount`] with every field; [`parse`] reads a whole file
//! lazily, naming the line of each error. Path fields are bytes, with the kernel's octal
//! escapes undone by [`unescape`] (the rule is in [`escape`]). No input makes the reader
//! panic, and a line longer than [`MAX_LINE_LEN`] or with more than [`MAX_OPTIONAL_FIELDS`]
//! optional fields is rejected rather than read.
//!
//! ```
//! let text = b"22 1 0:21 / /run/my\\040root rw shared:5 - tmpfs tmpfs rw\n";
//! let mount = devinject_mountinfo::parse(text).next().unwrap().unwrap();
//! assert_eq!(mount.mount_point, std::path::Path::new("/run/my root"));
//! assert_eq!(mount.fs_type, "tmpfs");
//! ```
#![warn(missing_docs)]

mod decimal;
mod error;
mod escape;
mod limits;
mod mount;
mod optional_field;
mod parse;

pub use error::{Field, Malformed, ParseError};
pub use escape::{escape, unescape, MANGLED};
pub use limits::{MAX_LINE_LEN, MAX_OPTIONAL_FIELDS};
pub use mount::Mount;
pub use optional_field::OptionalField;
pub use parse::{parse, parse_line};
