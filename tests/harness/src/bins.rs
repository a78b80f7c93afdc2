//! Locating the workspace's built binaries from an integration test, and refusing stale ones.
//!
//! `cargo test` builds only the tested package's own binaries, so the test command builds all of
//! them first (`cargo build --workspace --bins`, see scripts/test.sh) and tests find them next to
//! the test executable's directory, or in `DEVINJECT_BIN_DIR`.
//!
//! A test must test the tree it belongs to: after an edit to the request parser, a test that runs
//! yesterday's `devinject-hook` passes or fails for the wrong reason. So a binary found next to
//! the test executable is checked against the dep-info file cargo writes beside it
//! (`target/<profile>/<name>.d`, every source file the binary was built from, the same list cargo
//! uses to decide freshness): a source newer than the binary fails the test with the command to
//! run. Binaries from `DEVINJECT_BIN_DIR` (installed or release builds that benchmarks measure)
//! are taken as they are.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The path of the built binary `name`, refusing one older than its sources.
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("DEVINJECT_BIN_DIR") {
        // Absolute: the path is also written into files other processes read (a CDI spec's
        // hook, a runtime entry), from other working directories.
        let p = std::path::absolute(PathBuf::from(dir).join(name)).expect("an absolute path");
        assert!(
            p.is_file(),
            "{} is not there (DEVINJECT_BIN_DIR)",
            p.display()
        );
        return p;
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> or target/<profile>/<bin>
    let parent = exe.parent().expect("exe dir").to_path_buf();
    let dir = if parent.ends_with("deps") {
        parent.parent().expect("profile dir").to_path_buf()
    } else {
        parent
    };
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} is not built: run `cargo build --workspace --bins` first (scripts/test.sh does)",
        p.display()
    );
    if let Err(why) = fresh(&p) {
        panic!(
            "{} is stale ({why}): run `cargo build --workspace --bins` first (scripts/test.sh does)",
            p.display()
        );
    }
    p
}

/// `Ok` when no source listed in `binary`'s dep-info file is newer than `binary`.
pub fn fresh(binary: &Path) -> Result<(), String> {
    let built = mtime(binary).map_err(|e| format!("cannot stat it: {e}"))?;
    let dep_info = binary.with_extension("d");
    let text = std::fs::read_to_string(&dep_info)
        .map_err(|e| format!("cannot read {}: {e}", dep_info.display()))?;
    let sources = dep_info_sources(&text, binary)
        .ok_or_else(|| format!("{} does not list {}", dep_info.display(), binary.display()))?;
    for src in sources {
        // A source that is gone was renamed or deleted since: the binary is stale too.
        let changed = mtime(&src).map_err(|_| format!("{} is gone", src.display()))?;
        if changed > built {
            return Err(format!("{} changed after it was built", src.display()));
        }
    }
    Ok(())
}

/// The sources that a make-style dep-info file lists for `target`: the words after
/// `<target>:` on its line, with `\ ` for a space in a path.
fn dep_info_sources(text: &str, target: &Path) -> Option<Vec<PathBuf>> {
    let head = format!("{}:", target.display());
    let line = text.lines().find_map(|l| l.strip_prefix(&head))?;
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                word.push(' ');
                chars.next();
            }
            ' ' => {
                if !word.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut word)));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(PathBuf::from(word));
    }
    Some(out)
}

fn mtime(p: &Path) -> std::io::Result<SystemTime> {
    std::fs::metadata(p)?.modified()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dep_info_lists_sources_with_escaped_spaces() {
        let text = "/t/debug/x: /w/a.rs /w/dir\\ name/b.rs\n\n/w/a.rs:\n";
        let got = dep_info_sources(text, Path::new("/t/debug/x")).unwrap();
        assert_eq!(
            got,
            [PathBuf::from("/w/a.rs"), PathBuf::from("/w/dir name/b.rs")]
        );
        assert_eq!(dep_info_sources(text, Path::new("/t/debug/y")), None);
    }

    /// A source newer than the binary makes the binary stale: after an edit to a source, a test
    /// runs a rebuilt binary, never the old one.
    #[test]
    fn a_source_newer_than_the_binary_makes_it_stale() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("main.rs");
        let binary = dir.path().join("tool");
        std::fs::write(&src, "fn main() {}").unwrap();
        std::fs::write(&binary, "built").unwrap();
        std::fs::write(
            dir.path().join("tool.d"),
            format!("{}: {}\n", binary.display(), src.display()),
        )
        .unwrap();
        let t = SystemTime::now();
        let set = |p: &Path, at: SystemTime| {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(at)
                .unwrap()
        };
        set(&src, t - std::time::Duration::from_secs(10));
        set(&binary, t);
        assert_eq!(fresh(&binary), Ok(()));
        set(&src, t + std::time::Duration::from_secs(10));
        let err = fresh(&binary).unwrap_err();
        assert!(err.contains("main.rs changed after it was built"), "{err}");
        std::fs::remove_file(&src).unwrap();
        assert!(fresh(&binary).unwrap_err().contains("is gone"));
    }
}
