//! How a value a container controls appears in a message: bounded and escaped.
//!
//! # Why
//!
//! A refusal quotes what the container wrote (a function, a request item, an annotation) so its
//! author can find it, and that text reaches `docker run`'s error, `kubectl describe pod`, the
//! runtime's log and ours. Quoted whole, a 200 KiB function value would be a 200 KiB error, and a
//! newline in an annotation could forge a log line. Every message that quotes a container's value
//! formats it through [`Excerpt`], and nothing else: at most [`MAX_SHOWN`] characters of it,
//! escaped as Rust's `{:?}` escapes a string, then its length when it was cut.
//!
//! `{:?}` writes the excerpt quoted (`"nlb3"`), `{}` unquoted (for names read as part of a
//! sentence, such as a pod's). A value that fits is written exactly as `{:?}` / `{}` would write
//! it escaped, so short messages do not change.

use std::fmt::{self, Write};

/// The most characters of a value a message shows (after escaping).
pub const MAX_SHOWN: usize = 128;

/// A container's value as a message shows it; see the module docs.
#[derive(Clone, Copy)]
pub struct Excerpt<'a>(pub &'a str);

impl Excerpt<'_> {
    fn write(&self, f: &mut fmt::Formatter<'_>, quoted: bool) -> fmt::Result {
        write_excerpt(f, self.0, quoted, MAX_SHOWN, false)
    }
}

/// A longer text of ours that quotes a container's values, such as a message read back from the
/// node's decision log: every character that [`Excerpt`] escapes is escaped alike (controls,
/// bidi overrides, anything not printable), but for quotes and backslashes, which are the
/// text's own quoting; cut at the given number of characters (after escaping) instead of
/// [`MAX_SHOWN`].
#[derive(Clone, Copy)]
pub struct Longer<'a>(pub &'a str, pub usize);

impl fmt::Debug for Longer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_excerpt(f, self.0, true, self.1, true)
    }
}

impl fmt::Display for Longer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_excerpt(f, self.0, false, self.1, true)
    }
}

/// The one escaping: each character as `char::escape_debug` writes it (single quotes left
/// alone, as `str`'s Debug does; double quotes and backslashes too with `own_quoting`), at most
/// `max` characters of escapes, then the length.
fn write_excerpt(
    f: &mut fmt::Formatter<'_>,
    text: &str,
    quoted: bool,
    max: usize,
    own_quoting: bool,
) -> fmt::Result {
    let mut escaped = String::new();
    if quoted {
        f.write_char('"')?;
    }
    let mut shown = 0;
    for c in text.chars() {
        escaped.clear();
        if c == '\'' || (own_quoting && matches!(c, '"' | '\\')) {
            // `str`'s Debug leaves single quotes alone; `char::escape_debug` does not.
            escaped.push(c);
        } else {
            escaped.extend(c.escape_debug());
        }
        if shown + escaped.len() > max {
            if quoted {
                f.write_char('"')?;
            }
            return write!(f, "... ({} bytes in all)", text.len());
        }
        shown += escaped.len();
        f.write_str(&escaped)?;
    }
    if quoted {
        f.write_char('"')?;
    }
    Ok(())
}

impl fmt::Debug for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, true)
    }
}

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_longer_text_is_escaped_alike_but_its_quotes_and_cut_at_its_own_bound() {
        let v = "refused \u{1b}[2J \u{85} \u{9b} \u{202e} \u{2066} it's";
        assert_eq!(format!("{}", Longer(v, 4096)), format!("{}", Excerpt(v)));
        assert_eq!(
            format!("{}", Longer(v, 4096)),
            r"refused \u{1b}[2J \u{85} \u{9b} \u{202e} \u{2066} it's"
        );
        let ours = r#"device "\u{1b}" was not granted"#;
        assert_eq!(format!("{}", Longer(ours, 4096)), ours);
        let long = "x".repeat(300);
        assert_eq!(format!("{}", Longer(&long, 4096)), long);
        assert_eq!(
            format!("{}", Longer(&long, 200)),
            format!("{}... (300 bytes in all)", "x".repeat(200))
        );
    }

    #[test]
    fn a_value_that_fits_is_written_as_debug_writes_it() {
        for v in [
            "nlb3",
            "",
            "a\"b\\c",
            "it's",
            "tab\there",
            "line\nbreak",
            "\u{1b}[31m",
            "é\u{301}",
        ] {
            assert_eq!(format!("{:?}", Excerpt(v)), format!("{v:?}"), "{v:?}");
            let debug = format!("{v:?}");
            assert_eq!(format!("{}", Excerpt(v)), debug[1..debug.len() - 1]);
        }
        let full = "x".repeat(MAX_SHOWN);
        assert_eq!(format!("{:?}", Excerpt(&full)), format!("{full:?}"));
    }

    #[test]
    fn a_long_value_is_cut_and_its_length_given() {
        let long = "x".repeat(200 << 10);
        let shown = format!("{:?}", Excerpt(&long));
        assert_eq!(
            shown,
            format!("\"{}\"... (204800 bytes in all)", "x".repeat(MAX_SHOWN))
        );
        // Escapes count against the bound, and a cut never splits one.
        let controls = "\u{1}".repeat(100);
        let shown = format!("{}", Excerpt(&controls));
        assert!(shown.len() <= MAX_SHOWN + 30, "{shown}");
        assert!(
            shown.starts_with(&"\\u{1}".repeat(MAX_SHOWN / 5)),
            "{shown}"
        );
        assert!(shown.ends_with("\\u{1}... (100 bytes in all)"), "{shown}");
        // Never a raw line break, whatever the value holds.
        assert!(!format!("{}", Excerpt(&"a\n".repeat(500))).contains('\n'));
    }
}
