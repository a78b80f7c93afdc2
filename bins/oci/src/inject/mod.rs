//! The namespace applier: applies a plan's edits inside a creating container.
//!
//! Runs from a `prestart`/`createRuntime` hook, while the container's init waits before
//! `pivot_root`. Host-side preparation happens in this (single-threaded) process: the container's
//! mount namespace fd, detached mount trees for every source, the ldconfig binary. Then a forked
//! child joins the container's mount namespace (`setns` needs a single-threaded caller, hence the
//! fork) and creates nodes, mounts and links through [`rootfs::Rootfs`]; it reports failures
//! through a pipe. Mounts made there die with the container's namespace and never propagate to
//! the host.

pub mod at_name;
pub mod forward_compat;
pub mod id_map;
pub mod layout;
pub mod ld_so_cache;
pub mod ldconfig;
pub mod mountinfo;
pub mod mounts;
pub mod nodes;
pub mod ns_calls;
pub mod privileged;
pub mod rootfs;
pub mod symlinks;
#[cfg(test)]
mod tests;

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use devinject_devices::{ContainerEdits, DeviceNode, ForwardCompat, Mount};
use devinject_hostconfig::{CacheWriter, MountApi};
use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::wait::WaitStatus;

use crate::oci::User;
use devinject_contained::child::{self, ChildError};
use id_map::{IdMap, IdMaps};
use ld_so_cache::update;
use mounts::{MountAttrs, Source};
pub use privileged::{Privileged, Work};
use rootfs::RootfsError;

/// Why injection failed.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// The container's mount namespace could not be opened.
    #[error("cannot open mount namespace of container pid {pid}: {errno} (is the hook a prestart or createRuntime hook?)")]
    Namespace {
        /// The container's init pid.
        pid: i32,
        errno: Errno,
    },
    /// A host source could not be opened or cloned.
    #[error("cannot prepare host file {path}: {errno}")]
    Source {
        /// The host path.
        path: PathBuf,
        errno: Errno,
    },
    /// A path inside the rootfs could not be used.
    #[error(transparent)]
    Rootfs(#[from] RootfsError),
    /// A node the container's user namespace would see owned by nobody, unusable by the
    /// container, and no copy it owns can be made.
    #[error("device node {} (mode {mode:o}, owner {uid}:{gid} as the container sees it) cannot be given to a container with a user namespace: {why}; the container would start and get EACCES, so it is not started", path.display())]
    UnusableInUserNamespace {
        /// The host node.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// The owner it would have in the container.
        uid: u32,
        /// The group it would have in the container.
        gid: u32,
        /// Why, with the fix.
        why: &'static str,
    },
    /// A node's host path leads to another device than the one decided for it.
    #[error(transparent)]
    NodeChanged(#[from] devinject_devices::NodeError),
    /// A mount failed.
    #[error("cannot mount onto {path} in the container: {errno}")]
    Mount {
        /// The container path.
        path: PathBuf,
        errno: Errno,
    },
    /// fork, pipe or wait failed.
    #[error("cannot run the injection child: {0}")]
    Fork(Errno),
    /// The child failed; its message.
    #[error("{0}")]
    Child(String),
    /// ldconfig failed.
    #[error("ldconfig failed in the container: {output}")]
    Ldconfig {
        /// Its output and exit status.
        output: String,
    },
    /// The configured ldconfig is not a static executable.
    #[error("refusing to run ldconfig {path} in the container: {why}; it runs chrooted in the image, where a program interpreter would be the image's (set `ldconfig` in the devinject config to a statically linked ldconfig, e.g. Debian's /sbin/ldconfig)")]
    LdconfigNotStatic {
        /// The configured path.
        path: PathBuf,
        /// What it is instead.
        why: String,
    },
    /// A node the runtime made could not be given to the process's group.
    #[error("refusing to give {path} to the group of the container's process: {why}; the node must be the one the runtime made on the container's own /dev (mount no volume over it), or give the container the node's group (securityContext.supplementalGroups) or run it with the devinject runtime")]
    Regroup {
        /// The container path.
        path: PathBuf,
        /// What it is instead.
        why: String,
    },
    /// The injection child ran past [`CHILD_LIMIT`] and was killed.
    #[error("injecting into the container did not finish within {secs} s and was killed: a path it touches in the rootfs may be on a filesystem that does not answer (a FUSE or network volume mounted over an image directory devinject writes into, such as /dev, /etc or a library directory)")]
    Timeout {
        /// The limit.
        secs: u64,
    },
    /// ldconfig ran past its time limit and was killed.
    #[error("ldconfig did not finish within {secs} s in the container and was killed: the image's /etc/ld.so.conf, a file it includes, or /var/cache/ldconfig/aux-cache may be a FIFO or device (raise ldconfig_timeout in the devinject config if the image is just large)")]
    LdconfigTimeout {
        /// The limit.
        secs: u32,
    },
}

/// The container being injected.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its init pid in the host pid namespace.
    pub pid: i32,
    /// Its rootfs (host path, also valid in its mount namespace before `pivot_root`).
    pub rootfs: PathBuf,
    /// Nodes must be bind-mounted (user namespace or rootless).
    pub bind_nodes: bool,
    /// The rootfs is read-only: a failed linker cache refresh is only a warning.
    pub readonly_rootfs: bool,
    /// The process's user, when nodes are made (not bound): a node only its group may use
    /// ([`DeviceNode::access_group`]) is given to the process's own group when it lacks that
    /// one, so that a non-root process can use what it was granted.
    pub user: Option<User>,
    /// Nodes the runtime already made (from `linux.devices`) that the process may need given
    /// to its group, as above: NRI's adjustment cannot add a group to the process.
    pub regroup: Vec<DeviceNode>,
    /// Libraries the runtime already mounted (a CDI spec's `mounts`), for the linker cache to
    /// list beside the ones mounted here: their host files give the cache flags.
    pub mounted_libraries: Vec<Mount>,
}

impl Target {
    /// The group `node` must get in the container for the process to use it, when not its own.
    pub fn process_group_for(&self, node: &DeviceNode) -> Option<u32> {
        let user = self.user.as_ref()?;
        let gid = node.access_group()?;
        user.lacks_group(gid).then_some(user.gid)
    }

    /// The group `node` has in the container: the process's where it lacks the node's
    /// ([`Target::process_group_for`]), else the host's.
    pub fn node_group(&self, node: &DeviceNode) -> u32 {
        self.process_group_for(node).unwrap_or(node.gid)
    }

    /// The container's id mappings (read from `/proc/<pid>/{uid,gid}_map`) when nodes are
    /// bound and it has a user namespace of its own, else `None`.
    pub fn id_maps(&self) -> Option<IdMaps> {
        if !self.bind_nodes {
            return None;
        }
        // The files are a few lines the kernel writes; the bound keeps a read bounded anyway.
        let read = |file: &str| -> Option<IdMap> {
            let f = std::fs::File::open(format!("/proc/{}/{file}", self.pid)).ok()?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::Read::take(f, 64 << 10), &mut text).ok()?;
            Some(IdMap::parse(&text))
        };
        let maps = IdMaps {
            uid: read("uid_map")?,
            gid: read("gid_map")?,
        };
        (!maps.is_initial()).then_some(maps)
    }
}

/// What was done, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Nodes created or bound.
    pub nodes: usize,
    /// Files mounted.
    pub mounts: usize,
    /// Links made.
    pub links: usize,
    /// Whether the linker cache lists the injected libraries (refreshed, or already current).
    pub ldcache: bool,
    /// Whether it already did, so that nothing was written.
    pub ldcache_was_current: bool,
    /// Whether the host's ldconfig wrote it (configured, or the image's cache needed it).
    pub ldconfig_ran: bool,
    /// Whether the new mount API was used.
    pub new_mount_api: bool,
}

/// Applies `edits` to `target` on this host. Env edits are ignored here (a hook cannot change
/// the process env; the shim writes them into the spec).
pub fn apply(
    target: &Target,
    edits: &ContainerEdits,
    mount_api: MountApi,
    ldconfig: &ldconfig::Ldconfig,
) -> Result<Report, InjectError> {
    apply_on(&privileged::System, target, edits, mount_api, ldconfig)
}

/// [`apply`] through `host`'s privileged operations: what is decided here (which sources are
/// detached trees, which nodes are bound or made and with which group, whether the hook or
/// ldconfig writes the linker cache, what a read-only rootfs forgives) is tested with a
/// recording host, without root.
pub fn apply_on<P: Privileged>(
    host: &P,
    target: &Target,
    edits: &ContainerEdits,
    mount_api: MountApi,
    ldconfig: &ldconfig::Ldconfig,
) -> Result<Report, InjectError> {
    let mut report = Report::default();
    let regroup: Vec<(&DeviceNode, u32)> = target
        .regroup
        .iter()
        .filter_map(|n| Some((n, target.process_group_for(n)?)))
        .collect();
    if nothing_to_apply(edits, &regroup) {
        return Ok(report);
    }
    // The filesystems the host shows: a node to regroup, or a node's directory off the
    // rootfs's own mount, must be on none of them.
    let host_devs = if regroup.is_empty() && edits.device_nodes.is_empty() {
        Vec::new()
    } else {
        host.host_filesystems()?
    };
    // A read-only rootfs that is a plain directory may be the image of other containers too:
    // nothing is written into it (the runtime makes it read-only only after the hooks).
    let shared_read_only = target.readonly_rootfs && !host.rootfs_is_own_mount(&target.rootfs)?;
    let mnt_ns = host.mount_namespace(target.pid)?;
    let id_maps = host.id_maps(target);

    let sources = sources(host, target, id_maps.as_ref(), edits, mount_api)?;
    report.new_mount_api = sources.detached;

    if shared_read_only && !edits.ldcache_dirs.is_empty() {
        tracing::warn!("read-only rootfs shared as a plain directory: linker cache not refreshed");
    }
    let dirs = if shared_read_only {
        &[][..]
    } else {
        &edits.ldcache_dirs[..]
    };
    let cache = builtin_cache(target, edits, dirs, ldconfig);
    let work = Work {
        rootfs: &target.rootfs,
        userns_owner: id_maps.as_ref().and_then(IdMaps::root),
        nodes: edits
            .device_nodes
            .iter()
            .zip(sources.nodes)
            .map(|(node, source)| (node, source, target.node_group(node)))
            .collect(),
        regroup,
        host_devs,
        files: edits
            .mounts
            .iter()
            .map(|m| m.container_path.as_path())
            .zip(sources.files)
            .collect(),
        links: &edits.symlinks,
        writable_etc: !dirs.is_empty(),
        cache: cache.libraries.as_deref(),
        forward_compat: edits.forward_compat.as_ref().filter(|_| !dirs.is_empty()),
        readonly_rootfs: target.readonly_rootfs,
        shared_read_only,
    };
    let ChildReport {
        outcome,
        compat_preferred,
    } = host.in_container(&mnt_ns, work)?;
    report.nodes = edits.device_nodes.len();
    report.mounts = edits.mounts.len();
    report.links = edits.symlinks.len();

    let ldconfig_because = note_cache_outcome(outcome, cache.unmergeable, &mut report);
    // ldconfig writes the cache when the hook did not plan to, or found it could not.
    if !dirs.is_empty() && (cache.libraries.is_none() || ldconfig_because.is_some()) {
        if let Some(why) = &ldconfig_because {
            tracing::debug!(reason = %why, "linker cache left to ldconfig");
        }
        // The image's newer driver libraries, when the child found them so: ldconfig is shown
        // only the ones the hook verifies again in its own child (see `ldconfig`).
        let compat = edits.forward_compat.as_ref().filter(|_| compat_preferred);
        run_ldconfig(host, &mnt_ns, target, ldconfig, dirs, compat, &mut report)?;
    }
    Ok(report)
}

/// Whether `edits` and the nodes to regroup leave nothing to do in the container.
fn nothing_to_apply(edits: &ContainerEdits, regroup: &[(&DeviceNode, u32)]) -> bool {
    edits.device_nodes.is_empty()
        && edits.mounts.is_empty()
        && edits.symlinks.is_empty()
        && edits.ldcache_dirs.is_empty()
        && regroup.is_empty()
}

/// Where each node (`None`: made, not bound) and each mounted file comes from.
struct Sources {
    nodes: Vec<Option<Source>>,
    files: Vec<Source>,
    /// Every source is a detached tree (the new mount API).
    detached: bool,
}

/// Every source as a detached, already read-only tree when the kernel can (`mount_api` is
/// `auto`); else, or when one cannot be detached, every source as a host path.
fn sources<P: Privileged>(
    host: &P,
    target: &Target,
    id_maps: Option<&IdMaps>,
    edits: &ContainerEdits,
    mount_api: MountApi,
) -> Result<Sources, InjectError> {
    if mount_api == MountApi::Auto {
        if let Some(sources) = detached_sources(host, target, id_maps, edits)? {
            return Ok(sources);
        }
    }
    if id_maps.is_some() {
        for n in &edits.device_nodes {
            let why = "a copy it owns needs the new mount API (mount_api = \"auto\" in the devinject config, Linux 5.12 or later)";
            refuse_unless_usable_by_others(target, n, why)?;
        }
    }
    Ok(Sources {
        nodes: edits
            .device_nodes
            .iter()
            .map(|n| {
                target
                    .bind_nodes
                    .then(|| Source::Path(n.host_path.clone(), Some(n.number())))
            })
            .collect(),
        files: edits
            .mounts
            .iter()
            .map(|m| Source::Path(m.host_path.clone(), None))
            .collect(),
        detached: false,
    })
}

/// Every source as a detached tree: the bound nodes', then the files'. `Ok(None)` at the first
/// the kernel cannot detach (no new mount API), the trees made so far dropped.
fn detached_sources<P: Privileged>(
    host: &P,
    target: &Target,
    id_maps: Option<&IdMaps>,
    edits: &ContainerEdits,
) -> Result<Option<Sources>, InjectError> {
    let mut nodes = Vec::with_capacity(edits.device_nodes.len());
    for n in &edits.device_nodes {
        if !target.bind_nodes {
            nodes.push(None);
            continue;
        }
        if let Some(maps) = id_maps {
            // The node as the hook would make it without a user namespace (the host's owner,
            // the process's group where it lacks the node's), owned by the host ids those are.
            let why = match maps.uid.to_host(n.uid).zip(maps.gid.to_host(target.node_group(n))) {
                Some((host_uid, host_gid)) => match host.owned_node(n, host_uid, host_gid)? {
                    Some(copy) => {
                        nodes.push(Some(copy));
                        continue;
                    }
                    None => "this kernel or this unprivileged hook cannot make a copy the container owns (run the hook as root on Linux 5.12 or later)",
                },
                None => "its owner is not mapped into the container's user namespace (map it in the container's uidMappings and gidMappings, or give the node a mode others may use)",
            };
            // Bound as it is, the container sees the host node owned by nobody.
            refuse_unless_usable_by_others(target, n, why)?;
        }
        match host.detach_tree(&n.host_path, MountAttrs::Device, Some(n.number()))? {
            Some(s) => nodes.push(Some(s)),
            None => return Ok(None),
        }
    }
    let mut files = Vec::with_capacity(edits.mounts.len());
    for m in &edits.mounts {
        match host.detach_tree(&m.host_path, MountAttrs::File, None)? {
            Some(s) => files.push(s),
            None => return Ok(None),
        }
    }
    Ok(Some(Sources {
        nodes,
        files,
        detached: true,
    }))
}

/// Refuses `node` for a container with a user namespace unless others may use it as its owner
/// may: bound as it is, the container sees it owned by nobody.
fn refuse_unless_usable_by_others(
    target: &Target,
    node: &DeviceNode,
    why: &'static str,
) -> Result<(), InjectError> {
    let owner = (node.mode >> 6) & 0o6;
    if node.mode & owner == owner {
        return Ok(());
    }
    Err(InjectError::UnusableInUserNamespace {
        path: node.host_path.clone(),
        mode: node.mode,
        uid: node.uid,
        gid: target.node_group(node),
        why,
    })
}

/// The linker cache's entries when the hook writes the cache itself.
struct BuiltinCache {
    /// The libraries to list; `None`: ldconfig writes the cache (configured so, no library
    /// directory, or the libraries cannot be merged).
    libraries: Option<Vec<ld_so_cache::Library>>,
    /// Why the libraries cannot be merged into the image's cache, when they cannot.
    unmergeable: Option<String>,
}

/// The cache entries of the libraries mounted here and by the runtime, when the configured
/// writer is the hook's own and there are library directories (`dirs`) to list.
fn builtin_cache(
    target: &Target,
    edits: &ContainerEdits,
    dirs: &[PathBuf],
    ldconfig: &ldconfig::Ldconfig,
) -> BuiltinCache {
    if dirs.is_empty() || ldconfig.writer != CacheWriter::Builtin {
        return BuiltinCache {
            libraries: None,
            unmergeable: None,
        };
    }
    match update::libraries(
        edits.mounts.iter().chain(&target.mounted_libraries),
        &edits.symlinks,
    ) {
        None => BuiltinCache {
            libraries: None,
            unmergeable: None,
        },
        Some(Ok(libraries)) => BuiltinCache {
            libraries: Some(libraries),
            unmergeable: None,
        },
        Some(Err(why)) => BuiltinCache {
            libraries: None,
            unmergeable: Some(why.to_string()),
        },
    }
}

/// Notes in `report` what the child did with the linker cache; returns why ldconfig must
/// write it, when the child says so or the libraries could not be merged (`unmergeable`).
fn note_cache_outcome(
    outcome: ChildOutcome,
    unmergeable: Option<String>,
    report: &mut Report,
) -> Option<String> {
    match outcome {
        ChildOutcome::CacheWritten => {
            report.ldcache = true;
            None
        }
        ChildOutcome::CacheCurrent => {
            report.ldcache = true;
            report.ldcache_was_current = true;
            None
        }
        ChildOutcome::NeedsLdconfig(why) => Some(why),
        ChildOutcome::Done => unmergeable,
    }
}

/// Runs ldconfig over `dirs` in the container; on a read-only rootfs its failure is only a
/// warning, the soname links being in place.
fn run_ldconfig<P: Privileged>(
    host: &P,
    mnt_ns: &P::Namespace,
    target: &Target,
    ldconfig: &ldconfig::Ldconfig,
    dirs: &[PathBuf],
    compat: Option<&ForwardCompat>,
    report: &mut Report,
) -> Result<(), InjectError> {
    match host.run_ldconfig(mnt_ns, &target.rootfs, ldconfig, dirs, compat) {
        Ok(()) => {
            report.ldcache = true;
            report.ldconfig_ran = true;
        }
        Err(e) if target.readonly_rootfs => {
            tracing::warn!(error = %e, "read-only rootfs: linker cache not refreshed; soname links are in place")
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

/// What the injection child did beyond nodes, mounts and links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildOutcome {
    /// Nothing more (no libraries, or a read-only rootfs refused the cache).
    Done,
    /// The hook wrote the linker cache.
    CacheWritten,
    /// The linker cache already was what the hook would write.
    CacheCurrent,
    /// The image's cache is not one the hook merges into; why.
    NeedsLdconfig(String),
}

/// What the injection child reports: its outcome, and whether the image's newer driver
/// libraries are to come first in the linker cache ([`forward_compat`]), which ldconfig must
/// know too when it writes the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildReport {
    /// What it did.
    pub outcome: ChildOutcome,
    /// The image's forward-compatibility directory is newer than the host's driver.
    pub compat_preferred: bool,
}

impl From<ChildOutcome> for ChildReport {
    fn from(outcome: ChildOutcome) -> Self {
        Self {
            outcome,
            compat_preferred: false,
        }
    }
}

/// The exit-code bit that says [`ChildReport::compat_preferred`].
const COMPAT_PREFERRED: i32 = 32;

impl ChildReport {
    /// The child's exit code, and the text it sends through the pipe.
    fn encode(&self) -> (i32, &str) {
        let (code, text) = match &self.outcome {
            ChildOutcome::Done => (0, ""),
            ChildOutcome::CacheWritten => (10, ""),
            ChildOutcome::CacheCurrent => (11, ""),
            ChildOutcome::NeedsLdconfig(why) => (12, why.as_str()),
        };
        let flag = if self.compat_preferred {
            COMPAT_PREFERRED
        } else {
            0
        };
        (code | flag, text)
    }

    /// The report an exit code and message stand for, if they are one.
    fn decode(code: i32, msg: String) -> Option<Self> {
        let compat_preferred = code & COMPAT_PREFERRED != 0;
        let outcome = match code & !COMPAT_PREFERRED {
            0 => ChildOutcome::Done,
            10 => ChildOutcome::CacheWritten,
            11 => ChildOutcome::CacheCurrent,
            12 => ChildOutcome::NeedsLdconfig(msg),
            _ => return None,
        };
        Some(Self {
            outcome,
            compat_preferred,
        })
    }
}

/// How long the injection child may take in the container's namespace. Its work (nodes, mounts,
/// links, the linker cache) takes milliseconds; a path on a filesystem that never answers (a FUSE
/// or network volume mounted into the rootfs) would otherwise hold the container's creation, and
/// the engine's, until someone kills the runtime.
pub const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// Runs `work` in a forked child that has joined `mnt_ns` ([`child::call`], under `limit`:
/// [`CHILD_LIMIT`] but in tests); its error comes back as text.
fn run_in_namespace(
    mnt_ns: &OwnedFd,
    limit: Duration,
    work: impl FnOnce() -> Result<ChildReport, InjectError>,
) -> Result<ChildReport, InjectError> {
    let called = child::call(limit, |wr| {
        let result = nix::sched::setns(mnt_ns.as_fd(), CloneFlags::CLONE_NEWNS)
            .map_err(|errno| {
                InjectError::Child(format!(
                    "cannot join the container's mount namespace: {errno}"
                ))
            })
            .and_then(|()| work());
        match result {
            Ok(outcome) => {
                let (code, text) = outcome.encode();
                let _ = nix::unistd::write(wr, text.as_bytes());
                code
            }
            Err(e) => {
                let _ = nix::unistd::write(wr, e.to_string().as_bytes());
                1
            }
        }
    })
    .map_err(|e| match e {
        ChildError::Spawn { errno, .. } => InjectError::Fork(errno),
        ChildError::Timeout { limit } => InjectError::Timeout {
            secs: limit.as_secs(),
        },
        other => InjectError::Child(format!("injection child: {other}")),
    })?;
    let msg = String::from_utf8_lossy(&called.message).into_owned();
    match called.status {
        WaitStatus::Exited(_, 1) if !msg.is_empty() => Err(InjectError::Child(msg)),
        WaitStatus::Exited(_, code) => ChildReport::decode(code, msg).ok_or_else(|| {
            InjectError::Child(format!("injection child exited with status {code}"))
        }),
        other if msg.is_empty() => Err(InjectError::Child(format!(
            "injection child ended abnormally: {other:?}"
        ))),
        _ => Err(InjectError::Child(msg)),
    }
}
