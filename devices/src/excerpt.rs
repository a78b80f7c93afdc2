//! How a value a container controls appears in a message: bounded and escaped.
//!
//! # Why
//!
//! A refusal quotes what the container wrote (a function, a request item, an annotation) so its
//! author can find it, and that text reaches `docker run`'s error, `kubectl describe pod`, the
//! runtime's log and ours. Quoted whole, a 200 KiB function value became a 200 KiB error (issue
//! 32, finding 9), and a newline in an annotation could forge a log line. Every message that
//! quotes a container's value formats it through [`Excerpt`], and nothing else: at most
//! [`MAX_SHOWN`] characters of it, escaped as Rust's `{:?}` escapes a string, then its length
//! when it was cut.
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
        let mut escaped = String::new();
        if quoted {
            f.write_char('"')?;
        }
        let mut shown = 0;
        for c in self.0.chars() {
            escaped.clear();
            if c == '\'' {
                // `str`'s Debug leaves single quotes alone; `char::escape_debug` does not.
                escaped.push(c);
            } else {
                escaped.extend(c.escape_debug());
            }
            if shown + escaped.len() > MAX_SHOWN {
                if quoted {
                    f.write_char('"')?;
                }
                return write!(f, "... ({} bytes in all)", self.0.len());
            }
            shown += escaped.len();
            f.write_str(&escaped)?;
        }
        if quoted {
            f.write_char('"')?;
        }
        Ok(())
    }
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
