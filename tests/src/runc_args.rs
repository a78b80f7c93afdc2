//! What a wrapper of runc (a test fixture between an engine and runc) needs of runc's command
//! line.

use std::path::PathBuf;

/// runc's global flags that take a value (`runc --help`, 1.1).
const VALUE_FLAGS: [&str; 5] = ["--root", "--log", "--log-format", "--criu", "--rootless"];

/// The bundle directory when `args` (runc's) create a container, else `None`.
pub fn creating_bundle(args: &[&str]) -> Option<PathBuf> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if VALUE_FLAGS.contains(&a) {
            i += 2;
            continue;
        }
        if a.starts_with('-') {
            i += 1;
            continue;
        }
        if a != "create" && a != "run" {
            return None;
        }
        let rest = &args[i + 1..];
        for (j, b) in rest.iter().enumerate() {
            if let Some(v) = b.strip_prefix("--bundle=") {
                return Some(PathBuf::from(v));
            }
            if (*b == "--bundle" || *b == "-b") && j + 1 < rest.len() {
                return Some(PathBuf::from(rest[j + 1]));
            }
        }
        return std::env::current_dir().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_bundle_of_create_only() {
        let args = [
            "--root",
            "/r",
            "--log",
            "/l",
            "--log-format",
            "json",
            "create",
            "--bundle",
            "/b",
            "--pid-file",
            "/p",
            "id",
        ];
        assert_eq!(creating_bundle(&args), Some(PathBuf::from("/b")));
        assert_eq!(
            creating_bundle(&["--debug", "run", "-b", "/x", "id"]),
            Some(PathBuf::from("/x"))
        );
        assert_eq!(
            creating_bundle(&["create", "--bundle=/y", "id"]),
            Some(PathBuf::from("/y"))
        );
        assert_eq!(creating_bundle(&["--root", "/r", "start", "id"]), None);
        assert_eq!(
            creating_bundle(&["--root", "/r", "update", "--resources", "-", "id"]),
            None
        );
    }
}
