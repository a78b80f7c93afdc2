//! The last decisions, for `devinject-ctl doctor`.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::decision::{parse_lines, Decision};
use crate::dir::{size, Access, LogDir, LOG_NAME, ROTATED_NAME};
use crate::error::{DecisionLogError, Result};

/// The most bytes read of one file: its tail, when something else made it larger.
pub const MAX_READ_BYTES: u64 = 2 * crate::MAX_LOG_BYTES;

/// The last `n` decisions of both files, newest last; none when the directory or the files do
/// not exist. Malformed lines are skipped.
pub fn last(dir: &Path, n: usize) -> Result<Vec<Decision>> {
    let Some(dir) = LogDir::open(dir, false)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for name in [ROTATED_NAME, LOG_NAME] {
        let Some((file, st)) = dir.open_file(name, Access::Read)? else {
            continue;
        };
        let bytes = read_tail(file, size(&st)).map_err(|source| DecisionLogError::Io {
            op: "read",
            path: dir.file_path(name),
            source,
        })?;
        out.extend(parse_lines(&bytes).0);
    }
    let skip = out.len().saturating_sub(n);
    Ok(out.split_off(skip))
}

/// The whole lines of the last [`MAX_READ_BYTES`] of `file`, which is `size` bytes long.
fn read_tail(mut file: std::fs::File, size: u64) -> std::io::Result<Vec<u8>> {
    let start = size.saturating_sub(MAX_READ_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES).read_to_end(&mut bytes)?;
    // From the middle of a line: drop up to the first newline.
    if start > 0 {
        let first = bytes
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..first);
    }
    // A line still being written, or cut: not whole.
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    bytes.truncate(end);
    Ok(bytes)
}
