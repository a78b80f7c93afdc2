//! Locating the workspace's built binaries from an integration test.
//!
//! `cargo test` builds only the tested package's own binaries, so the test command builds all of
//! them first (`cargo build --workspace --bins`, see scripts/test.sh) and tests find them next to
//! the test executable's directory, or in `DEVINJECT_BIN_DIR`.

use std::path::PathBuf;

/// The path of the built binary `name`.
pub fn bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("DEVINJECT_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().expect("current exe");
            // target/<profile>/deps/<test> or target/<profile>/<bin>
            let parent = exe.parent().expect("exe dir").to_path_buf();
            if parent.ends_with("deps") {
                parent.parent().expect("profile dir").to_path_buf()
            } else {
                parent
            }
        });
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} is not built: run `cargo build --workspace --bins` first (scripts/test.sh does)",
        p.display()
    );
    p
}
