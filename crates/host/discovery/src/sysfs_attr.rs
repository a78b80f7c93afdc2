//! Reading one sysfs attribute: its first line, bounded, as discovery and the bus selectors
//! read them.

use std::io::Read;
use std::path::Path;

/// The most of a sysfs attribute read: the kernel serves at most a page.
const MAX_ATTRIBUTE_BYTES: u64 = 4096;

/// The first line of the sysfs attribute at `path`, trimmed; `None` when it cannot be read, is
/// empty or is not text.
pub fn read_attr(path: &Path) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_ATTRIBUTE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    let line = text.lines().next()?.trim().to_owned();
    (!line.is_empty()).then_some(line)
}
