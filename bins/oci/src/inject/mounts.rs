//! Read-only bind mounts of host files (and, in user namespaces, device nodes) into the rootfs.
//!
//! Sources are prepared in the host mount namespace: with the new mount API each becomes a
//! detached tree (`open_tree(OPEN_TREE_CLONE)`) that is made read-only, nosuid and nodev before it
//! is ever attached, then moved onto the target fd with `move_mount`: the file is never visible
//! writable, and the target is the fd we resolved, not a path the image could swap. Kernels
//! without that API (before 5.2, or `mount_api = "classic"`) get `mount(MS_BIND)` through
//! `/proc/self/fd` and a remount.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sys::stat::{fstat, Mode, SFlag};

use devinject_devices::{DeviceNumber, NodeError};
use devinject_discovery::node::number_of;

use super::at_name::{self, AtName};
use super::ns_calls::NsCalls;
use super::rootfs::{entry_at, open_nofollow, split, Rootfs, RootfsError};
use super::InjectError;
use crate::sys;

/// Mount attributes a source gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountAttrs {
    /// Files: read-only, nosuid, nodev.
    File,
    /// Device nodes bound in user namespaces: nosuid, noexec (a read-only mount does not stop
    /// writes to a device, and nodev would stop it working).
    Device,
}

impl MountAttrs {
    /// The attributes as the new mount API sets them (`mount_setattr`).
    pub(super) fn new_api(self) -> u64 {
        match self {
            Self::File => {
                libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV
            }
            Self::Device => libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC,
        }
    }

    fn classic(self) -> MsFlags {
        match self {
            Self::File => MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Self::Device => MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        }
    }
}

/// A mount source, ready to be attached in the container's namespace.
#[derive(Debug)]
pub enum Source {
    /// A detached tree with its attributes already set.
    Tree(OwnedFd),
    /// A host path, bound classically in the container's namespace (visible there before
    /// `pivot_root`, as the namespace is a copy of the host's), refused unless it is the device
    /// decided for it when one is given.
    Path(PathBuf, Option<DeviceNumber>),
}

/// Refuses what `fd` holds unless it is `decided`, when a device was decided for `host_path`:
/// a node is bound as the device the admission chose, never as whatever its path (or a stable
/// link to it) leads to by the time it is bound.
fn check_decided(
    fd: &OwnedFd,
    host_path: &Path,
    decided: Option<DeviceNumber>,
) -> Result<(), InjectError> {
    let Some(decided) = decided else {
        return Ok(());
    };
    let st = fstat(fd).map_err(|errno| InjectError::Source {
        path: host_path.to_owned(),
        errno,
    })?;
    match number_of(st.st_mode, st.st_rdev) {
        Some(found) if found == decided => Ok(()),
        found => Err(NodeError::Changed {
            path: host_path.to_owned(),
            decided,
            found: found.map_or_else(
                || devinject_hostfs::file_kind::a_name(st.st_mode),
                |n| format!("the device {n}"),
            ),
        }
        .into()),
    }
}

/// Prepares `host_path` in the host namespace, refused unless it is the `device` decided for it
/// when one is given. `Ok(None)` when the kernel lacks the new mount API, meaning the caller
/// should use [`Source::Path`] for everything.
pub fn detach_tree(
    host_path: &Path,
    attrs: MountAttrs,
    device: Option<DeviceNumber>,
) -> Result<Option<Source>, InjectError> {
    let src_err = |errno| InjectError::Source {
        path: host_path.to_owned(),
        errno,
    };
    let fd = nix::fcntl::open(host_path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(src_err)?;
    check_decided(&fd, host_path, device)?;
    let tree = match sys::open_tree_clone(&fd) {
        Ok(t) => t,
        Err(Errno::ENOSYS) => return Ok(None),
        Err(errno) => return Err(src_err(errno)),
    };
    match sys::mount_setattr(&tree, attrs.new_api()) {
        Ok(()) => Ok(Some(Source::Tree(tree))),
        Err(Errno::ENOSYS) => Ok(None),
        Err(errno) => Err(src_err(errno)),
    }
}

/// Makes sure a non-directory placeholder exists at `container_path` and returns an fd to it. An
/// image's symlink, FIFO or socket at that name is replaced (inside the rootfs only); a
/// directory is an error. File placeholders ([`MountAttrs::File`]) must lie on the rootfs's own
/// mount ([`Rootfs::writable_dir`]); device nodes go into the runtime's `/dev` tmpfs
/// ([`Rootfs::node_dir`]).
pub fn placeholder(
    root: &Rootfs,
    container_path: &Path,
    attrs: MountAttrs,
) -> Result<OwnedFd, InjectError> {
    let (parent, name) = split(container_path)?;
    let dir = match attrs {
        MountAttrs::File => root.writable_dir(&parent)?,
        MountAttrs::Device => root.node_dir(&parent)?,
    };
    let rerr = |op, errno| {
        InjectError::Rootfs(RootfsError {
            op,
            path: container_path.to_owned(),
            errno,
        })
    };
    // The usual case, a name the image does not have: the file we create is the target, with
    // no second lookup (`O_EXCL | O_NOFOLLOW`: it is new and ours, nothing else to check).
    let create = |calls: &dyn NsCalls| calls.create_file(dir.as_fd(), name, 0o644, false);
    match root.create(create) {
        Ok(target) => return Ok(target),
        Err(Errno::EEXIST) => {}
        Err(e) => return Err(rerr("create", e)),
    }
    // Someone else's file may appear between our calls: that is fine, it is checked below.
    let ensure = |calls: &dyn NsCalls| match create(calls) {
        Ok(_) | Err(Errno::EEXIST) => Ok(()),
        Err(e) => Err(e),
    };
    match at_name::for_mount_target(entry_at(root.calls(), &dir, name, container_path)?) {
        AtName::Keep => {}
        AtName::Refuse { op, errno } => return Err(rerr(op, errno)),
        AtName::Replace => {
            root.calls()
                .unlink_at(dir.as_fd(), name)
                .map_err(|e| rerr("replace", e))?;
            root.create(ensure).map_err(|e| rerr("create", e))?;
        }
        AtName::Make => root.create(ensure).map_err(|e| rerr("create", e))?,
    }
    let target = open_nofollow(&dir, name, container_path)?;
    // Between the checks above and this open the image cannot run, but a volume shared with
    // another container could be raced: check what we actually opened.
    let st = fstat(&target).map_err(|e| rerr("stat", e))?;
    let kind = devinject_hostfs::file_kind::of(&st);
    if !matches!(kind, SFlag::S_IFREG | SFlag::S_IFCHR | SFlag::S_IFBLK) {
        return Err(rerr("mount onto (changed under us)", Errno::ELOOP));
    }
    Ok(target)
}

/// Attaches `source` at `container_path` inside `root` (called in the container's namespace).
pub fn attach(
    root: &Rootfs,
    container_path: &Path,
    source: Source,
    attrs: MountAttrs,
) -> Result<(), InjectError> {
    let target = placeholder(root, container_path, attrs)?;
    let merr = |errno| InjectError::Mount {
        path: container_path.to_owned(),
        errno,
    };
    let calls = root.calls();
    match source {
        Source::Tree(tree) => calls.move_mount(tree.as_fd(), target.as_fd()).map_err(merr),
        Source::Path(host, device) => {
            let src = nix::fcntl::open(&host, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|errno| InjectError::Source {
                    path: host.clone(),
                    errno,
                })?;
            check_decided(&src, &host, device)?;
            calls
                .bind_mount(src.as_fd(), target.as_fd())
                .map_err(merr)?;
            // The fd still names the placeholder underneath; reopen to reach the new mount.
            let (parent, name) = split(container_path)?;
            let dir = root.resolve(&parent, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
            let mounted = open_nofollow(&dir, name, container_path)?;
            calls
                .remount_bind(mounted.as_fd(), attrs.classic())
                .map_err(merr)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ns_calls::recording::{fake_rootfs, Call};
    use super::*;

    const LIB: &str = "/usr/lib/libdemo.so.1.2";

    fn tree() -> Source {
        Source::Tree(std::fs::File::open("/").unwrap().into())
    }

    fn create_target() -> Call {
        Call::Create {
            path: LIB.into(),
            mode: 0o644,
            write: false,
        }
    }

    fn move_onto_target() -> Call {
        Call::MoveMount { target: LIB.into() }
    }

    #[test]
    fn a_file_goes_onto_a_new_empty_placeholder_in_one_move() {
        let (_t, fake, root) = fake_rootfs();
        attach(&root, Path::new(LIB), tree(), MountAttrs::File).unwrap();
        let mkdir = |p: &str| Call::Mkdir {
            path: p.into(),
            mode: 0o755,
        };
        assert_eq!(
            fake.changes(),
            vec![
                mkdir("/usr"),
                mkdir("/usr/lib"),
                create_target(),
                move_onto_target()
            ]
        );
    }

    #[test]
    fn an_image_file_at_the_target_is_mounted_over_as_it_is() {
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir_all(t.path().join("usr/lib")).unwrap();
        std::fs::write(t.path().join("usr/lib/libdemo.so.1.2"), "image").unwrap();
        attach(&root, Path::new(LIB), tree(), MountAttrs::File).unwrap();
        assert_eq!(fake.changes(), vec![create_target(), move_onto_target()]);
    }

    #[test]
    fn an_image_link_at_the_target_is_replaced_by_an_empty_file() {
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir_all(t.path().join("usr/lib")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", t.path().join("usr/lib/libdemo.so.1.2")).unwrap();
        attach(&root, Path::new(LIB), tree(), MountAttrs::File).unwrap();
        let unlink = Call::Unlink { path: LIB.into() };
        assert_eq!(
            fake.changes(),
            vec![create_target(), unlink, create_target(), move_onto_target()]
        );
        let st = std::fs::symlink_metadata(t.path().join("usr/lib/libdemo.so.1.2")).unwrap();
        assert!(st.is_file() && st.len() == 0);
    }

    #[test]
    fn a_directory_at_the_target_is_refused_and_nothing_is_mounted() {
        let (t, fake, root) = fake_rootfs();
        std::fs::create_dir_all(t.path().join("usr/lib/libdemo.so.1.2")).unwrap();
        let err = attach(&root, Path::new(LIB), tree(), MountAttrs::File).unwrap_err();
        assert!(err.to_string().contains("over a directory"), "{err}");
        assert_eq!(fake.changes(), vec![create_target()]);
    }

    #[test]
    fn without_the_new_api_a_path_is_bound_then_remounted_read_only() {
        let (t, fake, root) = fake_rootfs();
        let host = t.path().join("host-lib");
        std::fs::write(&host, "host").unwrap();
        let host = host.canonicalize().unwrap();
        attach(
            &root,
            Path::new(LIB),
            Source::Path(host.clone(), None),
            MountAttrs::File,
        )
        .unwrap();
        let changes = fake.changes();
        assert_eq!(
            changes[changes.len() - 3..],
            [
                create_target(),
                Call::BindMount {
                    source: host,
                    target: LIB.into()
                },
                Call::Remount {
                    target: LIB.into(),
                    flags: MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV
                }
            ]
        );
    }

    #[test]
    fn a_bound_device_in_a_user_namespace_stays_writable_but_noexec() {
        let (t, fake, root) = fake_rootfs();
        let host = t.path().join("host-node");
        std::fs::write(&host, "").unwrap();
        let node = Path::new("/dev/demo0");
        attach(&root, node, Source::Path(host, None), MountAttrs::Device).unwrap();
        let remount = fake.changes().pop().unwrap();
        assert_eq!(
            remount,
            Call::Remount {
                target: node.into(),
                flags: MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC
            }
        );
    }

    /// A node bound as a source (a user namespace without copies, or no new mount API) is the
    /// device decided for it: a stable link retargeted since (here to /dev/zero for a decided
    /// /dev/null) is refused before anything is cloned or bound, naming both devices.
    #[test]
    fn a_bound_node_whose_path_now_leads_to_another_device_is_refused_before_any_mount() {
        let (t, fake, root) = fake_rootfs();
        let link = t.path().join("stable-link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let null = DeviceNumber::new(devinject_devices::DeviceKind::Char, 1, 3);
        let node = Path::new("/dev/demo0");
        let err = attach(
            &root,
            node,
            Source::Path(link.clone(), Some(null)),
            MountAttrs::Device,
        )
        .unwrap_err();
        assert!(
            matches!(&err, InjectError::NodeChanged(_))
                && err.to_string().contains("is the device c 1:5 now")
                && err.to_string().contains("not the device c 1:3 decided"),
            "{err}"
        );
        assert!(
            !fake
                .changes()
                .iter()
                .any(|c| matches!(c, Call::BindMount { .. } | Call::Remount { .. })),
            "{:?}",
            fake.changes()
        );
        let err = detach_tree(&link, MountAttrs::Device, Some(null)).unwrap_err();
        assert!(matches!(err, InjectError::NodeChanged(_)), "{err}");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        attach(
            &root,
            node,
            Source::Path(link, Some(null)),
            MountAttrs::Device,
        )
        .unwrap();
    }

    #[test]
    fn a_failed_move_names_the_container_path() {
        let (_t, fake, root) = fake_rootfs();
        fake.fail_next("move_mount", Errno::EPERM);
        let err = attach(&root, Path::new(LIB), tree(), MountAttrs::File).unwrap_err();
        assert!(
            matches!(&err, InjectError::Mount { path, errno: Errno::EPERM } if path == Path::new(LIB)),
            "{err}"
        );
    }
}
