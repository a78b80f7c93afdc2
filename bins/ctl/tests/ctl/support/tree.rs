//! Copying and comparing directory trees of host files.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What a tree holds: relative path -> file content (`None` for a directory).
pub type Snapshot = BTreeMap<PathBuf, Option<Vec<u8>>>;

/// Copies `from` into `to` (which must exist).
pub fn copy_tree(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).expect("read source dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            fs::create_dir_all(&target).expect("mkdir");
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Everything under `root`, except paths for which `skip` is true.
pub fn snapshot(root: &Path, skip: &dyn Fn(&Path) -> bool) -> Snapshot {
    let mut out = Snapshot::new();
    walk(root, root, skip, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, skip: &dyn Fn(&Path) -> bool, out: &mut Snapshot) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let entry = entry.expect("entry");
        let path = entry.path();
        let rel = path.strip_prefix(root).expect("below root").to_path_buf();
        if skip(&rel) {
            continue;
        }
        if entry.file_type().expect("file type").is_dir() {
            out.insert(rel, None);
            walk(root, &path, skip, out);
        } else {
            out.insert(rel, Some(fs::read(&path).expect("read")));
        }
    }
}

/// Asserts two snapshots are equal, showing the first difference readably.
pub fn assert_same(actual: &Snapshot, expected: &Snapshot, what: &str) {
    let keys: std::collections::BTreeSet<_> = actual.keys().chain(expected.keys()).collect();
    for key in keys {
        let a = actual.get(key);
        let e = expected.get(key);
        if a != e {
            let show = |v: Option<&Option<Vec<u8>>>| match v {
                None => "<absent>".to_string(),
                Some(None) => "<directory>".to_string(),
                Some(Some(b)) => String::from_utf8_lossy(b).into_owned(),
            };
            panic!(
                "{what}: {} differs\n--- expected\n{}\n--- actual\n{}",
                key.display(),
                show(e),
                show(a)
            );
        }
    }
}

/// The permission bits of `path`.
pub fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

/// Is `rel` one of our state files?
pub fn is_state_file(rel: &Path) -> bool {
    rel.file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with(".devinject-state"))
}
