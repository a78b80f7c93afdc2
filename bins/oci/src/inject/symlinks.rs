//! Soname links next to injected libraries (`libcuda.so.1 -> libcuda.so.580.95`).
//!
//! Made with `symlinkat` in the parent directory fd, so they work for images without a
//! glibc `ldconfig` (musl, distroless) too. An image's own file or link at that name is replaced,
//! as `ldconfig` would; a directory there is an error. The directory must be on the rootfs's own
//! mount ([`Rootfs::writable_dir`]).

use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::fcntl::readlinkat;

use devinject_devices::Symlink;

use super::at_name::{self, AtName};
use super::rootfs::{entry_at, split, Rootfs, RootfsError};
use super::InjectError;

/// Creates `link` in the rootfs.
pub fn create(root: &Rootfs, link: &Symlink) -> Result<(), InjectError> {
    let rerr = |op, errno| {
        InjectError::Rootfs(RootfsError {
            op,
            path: link.link.clone(),
            errno,
        })
    };
    if link.target.contains('/') {
        return Err(rerr("link outside its directory from", Errno::EINVAL));
    }
    let (parent, name) = split(&link.link)?;
    let dir = root.writable_dir(&parent)?;
    // The usual case, a name the image does not have: one call.
    let make = |calls: &dyn super::ns_calls::NsCalls| {
        calls.symlink_at(link.target.as_str(), dir.as_fd(), name)
    };
    match root.create(make) {
        Ok(()) => return Ok(()),
        Err(Errno::EEXIST) => {}
        Err(e) => return Err(rerr("symlink", e)),
    }
    let points_at_target = || readlinkat(&dir, name).is_ok_and(|t| t == *link.target);
    let found = entry_at(root.calls(), &dir, name, &link.link)?;
    match at_name::for_link(found, points_at_target) {
        AtName::Make => {}
        AtName::Keep => return Ok(()),
        AtName::Refuse { op, errno } => return Err(rerr(op, errno)),
        AtName::Replace => {
            root.calls()
                .unlink_at(dir.as_fd(), name)
                .map_err(|e| rerr("replace", e))?;
        }
    }
    root.create(make).map_err(|e| rerr("symlink", e))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::ns_calls::recording::{fake_rootfs, Call};
    use super::*;

    fn soname() -> Symlink {
        Symlink {
            link: "/usr/lib/libdemo.so.1".into(),
            target: "libdemo.so.1.2".into(),
        }
    }

    fn symlink_call() -> Call {
        Call::Symlink {
            path: "/usr/lib/libdemo.so.1".into(),
            target: "libdemo.so.1.2".into(),
        }
    }

    fn points_at(root: &Path) -> String {
        std::fs::read_link(root.join("usr/lib/libdemo.so.1"))
            .unwrap()
            .display()
            .to_string()
    }

    #[test]
    fn a_new_name_is_one_symlink_call_in_a_directory_made_for_it() {
        let (t, fake, root) = fake_rootfs();
        create(&root, &soname()).unwrap();
        let mkdir = |p: &str| Call::Mkdir {
            path: p.into(),
            mode: 0o755,
        };
        assert_eq!(
            fake.changes(),
            vec![mkdir("/usr"), mkdir("/usr/lib"), symlink_call()]
        );
        assert_eq!(points_at(t.path()), "libdemo.so.1.2");
    }

    #[test]
    fn a_link_already_pointing_at_the_target_is_kept() {
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir_all(t.path().join("usr/lib")).unwrap();
        std::os::unix::fs::symlink("libdemo.so.1.2", t.path().join("usr/lib/libdemo.so.1"))
            .unwrap();
        create(&root, &soname()).unwrap();
        assert_eq!(
            fake.changes(),
            vec![symlink_call()],
            "one try, EEXIST, kept"
        );
    }

    #[test]
    fn an_image_file_or_other_link_at_the_name_is_replaced() {
        for what in ["file", "link"] {
            let (t, fake, root) = fake_rootfs();
            let at = t.path().join("usr/lib/libdemo.so.1");
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            match what {
                "file" => std::fs::write(&at, "image").unwrap(),
                _ => std::os::unix::fs::symlink("/etc/shadow", &at).unwrap(),
            }
            create(&root, &soname()).unwrap();
            let unlink = Call::Unlink {
                path: "/usr/lib/libdemo.so.1".into(),
            };
            assert_eq!(
                fake.changes(),
                vec![symlink_call(), unlink, symlink_call()],
                "{what}"
            );
            assert_eq!(points_at(t.path()), "libdemo.so.1.2", "{what}");
        }
    }

    #[test]
    fn a_directory_at_the_name_is_refused_and_kept() {
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir_all(t.path().join("usr/lib/libdemo.so.1")).unwrap();
        let err = create(&root, &soname()).unwrap_err();
        assert!(err.to_string().contains("a directory exists"), "{err}");
        assert_eq!(fake.changes(), vec![symlink_call()]);
        assert!(t.path().join("usr/lib/libdemo.so.1").is_dir());
    }

    #[test]
    fn a_target_outside_the_links_directory_is_refused_before_any_call() {
        let (_t, fake, root) = fake_rootfs();
        let link = Symlink {
            target: "../../etc/shadow".into(),
            ..soname()
        };
        let err = create(&root, &link).unwrap_err();
        assert!(
            err.to_string().contains("link outside its directory"),
            "{err}"
        );
        assert_eq!(fake.calls(), vec![]);
    }

    #[test]
    fn a_userns_rootfs_retries_a_refused_link_as_the_containers_root() {
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir_all(t.path().join("usr/lib")).unwrap();
        let root = root.with_userns_owner(Some((100_000, 100_001)));
        fake.fail_next("symlink", Errno::EOVERFLOW);
        create(&root, &soname()).unwrap();
        assert_eq!(
            fake.calls(),
            vec![
                symlink_call(),
                Call::FsIds {
                    uid: 100_000,
                    gid: 100_001
                },
                symlink_call(),
                Call::FsIds { uid: 0, gid: 0 },
            ]
        );
    }
}
