//! Reading host configuration files, and parsing them with errors that point at a line.
//!
//! Files are parsed into editable documents (`toml_edit::DocumentMut`, `serde_json::Value` with
//! key order preserved), never into our own structs, so that every comment, key order and unknown
//! key of the engine's configuration survives an edit.

use std::path::Path;

use crate::error::{Result, RuntimeConfigError};
use devinject_hostfs::host_dir::{self, Name};

/// Reads a text file (a path as this process names it); `None` when it does not exist.
///
/// Through [`devinject_hostfs::host_dir`]: a link at the final name is not followed, and anything but a
/// regular file within [`devinject_hostfs::host_dir::MAX_FILE_BYTES`] is refused unopened (a FIFO there
/// would block the read for ever, a device node would be opened).
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| crate::RuntimeConfigError::io("read", path, e))?
            .join(path)
    };
    Ok(host_dir::read(Path::new("/"), &path, Name::Theirs)?)
}

/// The 1-based line and column of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// Parses TOML for editing; a syntax error names the file, line and column.
pub fn parse_toml(path: &Path, text: &str) -> Result<toml_edit::DocumentMut> {
    text.parse::<toml_edit::DocumentMut>().map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        RuntimeConfigError::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })
}

/// Parses JSON; a syntax error names the file, line and column. Blank text is `{}`.
pub fn parse_json(path: &Path, text: &str) -> Result<serde_json::Value> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(text).map_err(|e| RuntimeConfigError::Syntax {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e
            .to_string()
            .split(" at line ")
            .next()
            .unwrap_or_default()
            .to_string(),
    })
}

/// The 1-based line where the value at `keys` starts in the TOML `text`, when it exists.
///
/// `DocumentMut` drops source positions, so this parses `text` again with spans kept.
pub fn toml_line(text: &str, keys: &[&str]) -> Option<usize> {
    let doc = toml_edit::Document::parse(text).ok()?;
    let (first, rest) = keys.split_first()?;
    let mut item = doc.get(first)?;
    for key in rest {
        item = item.as_table_like()?.get(key)?;
    }
    let span = item.span().or_else(|| {
        let (parent, last) = keys.split_at(keys.len() - 1);
        let mut t = doc.as_table() as &dyn toml_edit::TableLike;
        for k in parent {
            t = t.get(k)?.as_table_like()?;
        }
        t.key(last[0])?.span()
    })?;
    Some(line_col(text, span.start).0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let text = "a = 1\nb = ?\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 10), (2, 5));
    }

    #[test]
    fn toml_error_names_line() {
        let err = parse_toml(Path::new("/etc/x.toml"), "a = 1\n[b\nc = 2\n").expect_err("broken");
        let msg = err.to_string();
        assert!(msg.starts_with("/etc/x.toml:2:"), "{msg}");
        assert!(msg.contains("was not changed"), "{msg}");
    }

    #[test]
    fn json_error_names_line() {
        let err = parse_json(Path::new("/etc/d.json"), "{\n  \"a\": 1,\n}\n").expect_err("broken");
        let msg = err.to_string();
        assert!(msg.starts_with("/etc/d.json:3:1:"), "{msg}");
    }

    #[test]
    fn toml_line_finds_keys_and_tables() {
        let text = "a = 1\n\n[t]\nb = [1]\n";
        assert_eq!(toml_line(text, &["a"]), Some(1));
        assert_eq!(toml_line(text, &["t", "b"]), Some(4));
        assert_eq!(toml_line(text, &["t"]), Some(3));
        assert_eq!(toml_line(text, &["x"]), None);
    }

    #[test]
    fn blank_json_is_an_empty_object() {
        let v = parse_json(Path::new("/x"), " \n").expect("blank");
        assert_eq!(v, serde_json::json!({}));
    }
}
