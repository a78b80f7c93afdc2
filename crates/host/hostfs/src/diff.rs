//! Unified diffs for `--dry-run` and for reports.

use similar::TextDiff;

/// A unified diff (3 lines of context) from `old` to `new` for the file `path`.
///
/// A missing file is shown as `/dev/null`, as `diff -u` and git do. Returns an empty string when
/// the contents are equal.
pub fn unified(path: &str, old: Option<&str>, new: Option<&str>) -> String {
    if old == new {
        return String::new();
    }
    let old_name = if old.is_some() {
        format!("a{path}")
    } else {
        "/dev/null".to_string()
    };
    let new_name = if new.is_some() {
        format!("b{path}")
    } else {
        "/dev/null".to_string()
    };
    let old = old.unwrap_or("");
    let new = new.unwrap_or("");
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&old_name, &new_name)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_is_empty() {
        assert_eq!(unified("/x", Some("a\n"), Some("a\n")), "");
    }

    #[test]
    fn shows_added_line_with_headers() {
        let d = unified("/etc/x", Some("a\nb\n"), Some("a\nc\nb\n"));
        assert!(d.starts_with("--- a/etc/x\n+++ b/etc/x\n"), "{d}");
        assert!(d.contains("+c\n"), "{d}");
    }

    #[test]
    fn created_file_is_from_dev_null() {
        let d = unified("/etc/new", None, Some("x\n"));
        assert!(d.starts_with("--- /dev/null\n+++ b/etc/new\n"), "{d}");
    }
}
