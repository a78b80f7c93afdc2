//! Reading the tables the docs keep of what the code defines (exit codes), so that a test can
//! hold the two in step: a new code cannot go undocumented, nor a documented one stay after it
//! is gone.

/// The codes in the first column of the first table after the first line of `markdown` that
/// starts with `heading` (`## Exit codes`, `- **Exit codes.**`), in order.
///
/// Panics naming the heading and the row when there is no such heading or table, or when a row
/// does not start with a number: the caller is a test, and the message is its failure.
pub fn table_codes(markdown: &str, heading: &str) -> Vec<u8> {
    let mut rows = markdown
        .lines()
        .skip_while(|l| !l.trim_start().starts_with(heading))
        .skip(1)
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'));
    let header = rows
        .next()
        .unwrap_or_else(|| panic!("no line starting {heading:?}, or no table after it"));
    assert!(
        rows.next().is_some_and(|l| l.contains("---")),
        "the table after {heading:?} has no separator row under {header:?}"
    );
    rows.map(|l| {
        l.trim_start()
            .trim_start_matches('|')
            .split('|')
            .next()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or_else(|| panic!("under {heading:?}, not a code row: {l}"))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_column_of_the_table_under_the_heading() {
        let doc = "# t\n\n## Other\n\n| code | x |\n|---|---|\n| 9 | no |\n\n## Exit codes\n\nText.\n\n| code | meaning |\n|---|---|\n| 0 | ok |\n| 2 | bad |\n\nAfter.\n| 7 | not in the table |\n";
        assert_eq!(table_codes(doc, "## Exit codes"), vec![0, 2]);
    }

    #[test]
    #[should_panic(expected = "not a code row")]
    fn a_row_without_a_code_fails() {
        table_codes("\n## E\n| code | m |\n|---|---|\n| x | y |\n", "## E");
    }
}
