//! Fake hosts for the installer tests: a host root seeded with real engine configuration files
//! (the runtime-config crate's golden inputs), a fake payload, and tree snapshots that include
//! file modes and symlinks, so "byte-identical" means exactly that.

#![allow(dead_code)]

pub mod engine;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A golden input tree of the runtime-config crate.
pub fn golden_before(case: &str) -> PathBuf {
    repo()
        .join("bins/ctl/tests/golden")
        .join(case)
        .join("before")
}

/// Copies `from` into `to` (which must exist), skipping `.keep` placeholders.
pub fn copy_tree(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).expect("read source dir") {
        let entry = entry.expect("entry");
        if entry.file_name() == ".keep" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            fs::create_dir_all(&target).expect("mkdir");
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// A fake host: a temp dir with `host/` (the host root, seeded from a golden case plus `/opt`,
/// `/run` and a `/var/run -> /run` link like a real host) and `payload/` (fake binaries and the
/// shipped profiles).
pub struct FakeHost {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub payload: PathBuf,
}

/// The owner of the files a golden case seeds.
pub const SEEDED_OWNER: (u32, u32) = (4321, 4322);

fn chown_tree(dir: &Path, (uid, gid): (u32, u32)) {
    for entry in fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).expect("lchown");
        if fs::symlink_metadata(&path).expect("lstat").is_dir() {
            chown_tree(&path, (uid, gid));
        }
    }
}

impl FakeHost {
    /// A host seeded from golden case `case` (`None`: nothing but the base directories).
    pub fn new(case: Option<&str>) -> FakeHost {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("host");
        for d in ["opt", "run", "var/lib", "etc"] {
            fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::os::unix::fs::symlink("/run", root.join("var/run")).expect("symlink");
        if let Some(case) = case {
            copy_tree(&golden_before(case), &root);
            // The seeded files belong to someone else than the installer (root): every restore
            // is then checked to bring their owner back too (snapshots compare owners). Only
            // root can give files away; elsewhere the owner is the test's own.
            if nix::unistd::geteuid().is_root() {
                chown_tree(&root, SEEDED_OWNER);
            }
        }
        let payload = dir.path().join("payload");
        write_payload(&payload, "v1");
        FakeHost { dir, root, payload }
    }

    /// Path of host path `p` in the fake host.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    /// Reads host path `p`.
    pub fn read(&self, p: &str) -> String {
        fs::read_to_string(self.path(p)).unwrap_or_else(|e| panic!("read {p}: {e}"))
    }

    /// Writes host path `p`, creating parents.
    pub fn write(&self, p: &str, text: &str) {
        let path = self.path(p);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    /// The whole host tree.
    pub fn snapshot(&self) -> Snapshot {
        snapshot(&self.root)
    }
}

/// Writes a payload: a fake of each installed binary whose content carries `version`, and the
/// shipped profiles.
pub fn write_payload(payload: &Path, version: &str) {
    fs::create_dir_all(payload.join("bin")).expect("mkdir");
    for b in devinject_installer::install::BINARIES {
        let p = payload.join("bin").join(b);
        fs::write(&p, format!("#!/bin/false\n# fake {b} {version}\n")).expect("write");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    fs::create_dir_all(payload.join("profiles")).expect("mkdir");
    copy_tree(&repo().join("profiles"), &payload.join("profiles"));
}

/// What a tree holds: relative path -> entry.
pub type Snapshot = BTreeMap<PathBuf, Node>;

/// One entry of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir {
        mode: u32,
        owner: (u32, u32),
    },
    File {
        mode: u32,
        owner: (u32, u32),
        bytes: Vec<u8>,
    },
    Link {
        target: PathBuf,
        owner: (u32, u32),
    },
    Other,
}

/// Everything under `root`.
pub fn snapshot(root: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let entry = entry.expect("entry");
        let path = entry.path();
        let rel = path.strip_prefix(root).expect("below root").to_path_buf();
        let meta = fs::symlink_metadata(&path).expect("lstat");
        let mode = meta.permissions().mode() & 0o7777;
        // Who owns it counts too: a restore that loses the owner is not a restore.
        let owner = (
            std::os::unix::fs::MetadataExt::uid(&meta),
            std::os::unix::fs::MetadataExt::gid(&meta),
        );
        let ft = meta.file_type();
        if ft.is_symlink() {
            out.insert(
                rel,
                Node::Link {
                    target: fs::read_link(&path).expect("readlink"),
                    owner,
                },
            );
        } else if ft.is_dir() {
            out.insert(rel, Node::Dir { mode, owner });
            walk(root, &path, out);
        } else if ft.is_file() {
            out.insert(
                rel,
                Node::File {
                    mode,
                    owner,
                    bytes: fs::read(&path).expect("read"),
                },
            );
        } else {
            out.insert(rel, Node::Other);
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
            let show = |v: Option<&Node>| match v {
                None => "<absent>".to_string(),
                Some(Node::File { mode, owner, bytes }) => {
                    format!(
                        "mode {mode:o} owner {}:{}\n{}",
                        owner.0,
                        owner.1,
                        String::from_utf8_lossy(bytes)
                    )
                }
                Some(other) => format!("{other:?}"),
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
