//! The privileged operations the applier needs, behind one trait.
//!
//! [`super::apply_on`] decides; a [`Privileged`] implementation acts. [`System`] is this
//! machine (namespaces opened through `/proc`, detached mount trees, a forked child in the
//! container's mount namespace, the host's static ldconfig); the applier's unit tests use a
//! recording host instead, so every decision is checked without root. What the child does in
//! the namespace is one value, [`Work`], that [`System`] performs there and a recording host
//! keeps.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use devinject_devices::{DeviceNode, DeviceNumber, ForwardCompat, Symlink};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::id_map::IdMaps;
use super::ld_so_cache::{update, Library};
use super::mounts::{self, MountAttrs, Source};
use super::rootfs::Rootfs;
use super::{
    forward_compat, ldconfig, mountinfo, nodes, symlinks, ChildOutcome, ChildReport, InjectError,
    Target,
};

/// What the applier asks of the host.
pub trait Privileged {
    /// An open mount namespace.
    type Namespace;

    /// The mount namespace of the container whose init is `pid`.
    fn mount_namespace(&self, pid: i32) -> Result<Self::Namespace, InjectError>;

    /// The `major:minor` of every filesystem the host shows (a node to regroup must be on none).
    fn host_filesystems(&self) -> Result<Vec<(u32, u32)>, InjectError>;

    /// `host_path` as a detached tree with `attrs` set, refused unless it is the `device`
    /// decided for it when one is given; `Ok(None)` when the kernel lacks the new mount API.
    fn detach_tree(
        &self,
        host_path: &Path,
        attrs: MountAttrs,
        device: Option<DeviceNumber>,
    ) -> Result<Option<Source>, InjectError>;

    /// The container's user namespace mappings, when it has a user namespace of its own.
    fn id_maps(&self, target: &Target) -> Option<IdMaps>;

    /// A detached tree holding a copy of `node` (its type, numbers and mode) owned by the host
    /// ids `uid` and `gid`, on a tmpfs of the host's user namespace, where the node works: what
    /// a container with a user namespace gets instead of the host node, which it would see owned
    /// by nobody. `Ok(None)` when this kernel or this process cannot make one.
    fn owned_node(
        &self,
        node: &DeviceNode,
        uid: u32,
        gid: u32,
    ) -> Result<Option<Source>, InjectError>;

    /// Whether the rootfs at `rootfs` is a mount of its own in the runtime's namespace (as an
    /// engine's per-container layer is), rather than a plain directory that other containers
    /// may run from.
    fn rootfs_is_own_mount(&self, rootfs: &Path) -> Result<bool, InjectError>;

    /// Does `work` inside `ns`.
    fn in_container(
        &self,
        ns: &Self::Namespace,
        work: Work<'_>,
    ) -> Result<ChildReport, InjectError>;

    /// Runs `ldconfig` chrooted in the container's rootfs, inside `ns`, over `dirs`, after the
    /// image's forward-compatibility directory `compat` (only what the hook verifies of it).
    fn run_ldconfig(
        &self,
        ns: &Self::Namespace,
        rootfs: &Path,
        ldconfig: &ldconfig::Ldconfig,
        dirs: &[PathBuf],
        compat: Option<&ForwardCompat>,
    ) -> Result<(), InjectError>;
}

/// Everything done inside the container's mount namespace, decided before it is entered.
#[derive(Debug)]
pub struct Work<'a> {
    /// The container's rootfs.
    pub rootfs: &'a Path,
    /// Who owns what is created, when the container has a user namespace.
    pub userns_owner: Option<(u32, u32)>,
    /// Nodes to create: each with its bind source (`None`: made with mknod) and its group.
    pub nodes: Vec<(&'a DeviceNode, Option<Source>, u32)>,
    /// Nodes the runtime made, to give to the process's group.
    pub regroup: Vec<(&'a DeviceNode, u32)>,
    /// The host's filesystems (for `regroup`, and for where nodes may be made).
    pub host_devs: Vec<(u32, u32)>,
    /// Files to mount read-only: container path and source.
    pub files: Vec<(&'a Path, Source)>,
    /// Links to make.
    pub links: &'a [Symlink],
    /// `/etc` must be a writable directory (the linker cache is refreshed).
    pub writable_etc: bool,
    /// The libraries the hook adds to the linker cache itself; `None`: it does not write it.
    pub cache: Option<&'a [Library]>,
    /// The image's directory of newer driver libraries to prefer, when the profile has one and
    /// the linker cache is refreshed.
    pub forward_compat: Option<&'a ForwardCompat>,
    /// The rootfs is read-only: a cache that cannot be written is only a warning.
    pub readonly_rootfs: bool,
    /// The rootfs is read-only and not a mount of its own: nothing is written into it
    /// ([`Rootfs::shared_read_only`]).
    pub shared_read_only: bool,
}

impl Work<'_> {
    /// Performs the work; must run inside the container's mount namespace.
    pub fn perform(self) -> Result<ChildReport, InjectError> {
        nix::sys::stat::umask(Mode::empty());
        let mut root = Rootfs::open(self.rootfs)?
            .with_userns_owner(self.userns_owner)
            .with_host_filesystems(self.host_devs.clone());
        if self.shared_read_only {
            root = root.shared_read_only();
        }
        for (node, source, gid) in self.nodes {
            nodes::create(&root, node, source, gid)?;
        }
        for (node, gid) in &self.regroup {
            nodes::regroup(&root, node, *gid, &self.host_devs)?;
        }
        for (path, source) in self.files {
            mounts::attach(&root, path, source, MountAttrs::File)?;
        }
        for l in self.links {
            symlinks::create(&root, l)?;
        }
        if self.writable_etc {
            root.writable_dir(Path::new("/etc"))?;
        }
        let compat = match self.forward_compat {
            Some(fc) if !self.shared_read_only => newer_libraries(&root, fc),
            _ => None,
        };
        let compat_preferred = compat.is_some();
        let outcome = match self.cache {
            None => ChildOutcome::Done,
            Some(libs) => {
                // The image's newer libraries first: among entries of one soname, ld.so takes
                // the first.
                let all: Vec<Library> = compat
                    .into_iter()
                    .flatten()
                    .chain(libs.iter().cloned())
                    .collect();
                match update::update(&root, &all) {
                    Ok(update::Updated::Written) => ChildOutcome::CacheWritten,
                    Ok(update::Updated::AlreadyCurrent) => ChildOutcome::CacheCurrent,
                    Err(update::UpdateError::Unsupported(why)) => {
                        ChildOutcome::NeedsLdconfig(why.to_string())
                    }
                    Err(e @ update::UpdateError::Write(_)) if self.readonly_rootfs => {
                        tracing::warn!(error = %e, "read-only rootfs: linker cache not refreshed; soname links are in place");
                        ChildOutcome::Done
                    }
                    Err(e) => return Err(InjectError::Child(e.to_string())),
                }
            }
        };
        Ok(ChildReport {
            outcome,
            compat_preferred,
        })
    }
}

/// The image's newer driver libraries for `fc`, when it has them; a directory that cannot be
/// read is only a warning (the host's libraries serve the container, as without one).
fn newer_libraries(root: &Rootfs, fc: &ForwardCompat) -> Option<Vec<Library>> {
    match forward_compat::newer_libraries(root, fc) {
        Ok(libs) => libs,
        Err(e) => {
            tracing::warn!(error = %e, "forward compatibility: the image's libraries are not preferred");
            None
        }
    }
}

/// This machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct System;

impl Privileged for System {
    type Namespace = OwnedFd;

    fn mount_namespace(&self, pid: i32) -> Result<OwnedFd, InjectError> {
        let ns_path = format!("/proc/{pid}/ns/mnt");
        nix::fcntl::open(
            ns_path.as_str(),
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| InjectError::Namespace { pid, errno })
    }

    fn host_filesystems(&self) -> Result<Vec<(u32, u32)>, InjectError> {
        let path = Path::new("/proc/self/mountinfo");
        let text = std::fs::read(path).map_err(|e| InjectError::Source {
            path: path.to_owned(),
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })?;
        Ok(mountinfo::devices(&text))
    }

    fn detach_tree(
        &self,
        host_path: &Path,
        attrs: MountAttrs,
        device: Option<DeviceNumber>,
    ) -> Result<Option<Source>, InjectError> {
        mounts::detach_tree(host_path, attrs, device)
    }

    fn id_maps(&self, target: &Target) -> Option<IdMaps> {
        target.id_maps()
    }

    fn owned_node(
        &self,
        node: &DeviceNode,
        uid: u32,
        gid: u32,
    ) -> Result<Option<Source>, InjectError> {
        nodes::owned_node(node, uid, gid)
    }

    fn rootfs_is_own_mount(&self, rootfs: &Path) -> Result<bool, InjectError> {
        let err = |errno| InjectError::Source {
            path: rootfs.to_owned(),
            errno,
        };
        let fd = nix::fcntl::open(
            rootfs,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(err)?;
        // Kernels before 5.8 do not say: the rootfs is then taken for a shared one, which
        // refuses writes rather than risk them.
        Ok(crate::sys::is_mount_root(&fd)
            .map_err(err)?
            .unwrap_or(false))
    }

    fn in_container(&self, ns: &OwnedFd, work: Work<'_>) -> Result<ChildReport, InjectError> {
        super::run_in_namespace(ns, super::CHILD_LIMIT, || work.perform())
    }

    fn run_ldconfig(
        &self,
        ns: &OwnedFd,
        rootfs: &Path,
        ldconfig: &ldconfig::Ldconfig,
        dirs: &[PathBuf],
        compat: Option<&ForwardCompat>,
    ) -> Result<(), InjectError> {
        let fd = ldconfig::open_ldconfig(&ldconfig.path)?;
        ldconfig::refresh(ns, rootfs, &fd, ldconfig.timeout_secs, dirs, compat)
    }
}
