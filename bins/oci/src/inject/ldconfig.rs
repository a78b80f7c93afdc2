//! Refreshing the container's linker cache.
//!
//! The host's static `ldconfig` is opened in the host namespace, then run in a forked child that
//! joins the container's mount namespace, makes its mounts private, chroots into the rootfs and
//! `fexecve`s it with an empty environment: nothing from the image's env (LD_PRELOAD,
//! LD_LIBRARY_PATH, PATH) reaches it (CVE-2025-23266 class), no binary from the image runs, and
//! whatever links the image holds resolve inside the chroot (CVE-2025-23267 class). `-X` leaves
//! links alone: we made the soname links ourselves.
//!
//! # When
//!
//! ldconfig is the fallback: the hook writes the cache itself when it can
//! ([`super::ld_so_cache`]), and runs ldconfig only for what that cannot handle (an image cache in
//! an old or damaged format, a library whose cache flags it cannot tell, links known without
//! their libraries) or when the host config asks for it (`ldcache = "ldconfig"`).
//!
//! # Security
//!
//! What the child does before ldconfig runs (procfs detached under the rootfs, the rootfs tree
//! `nodev,nosuid`, a fresh tmpfs over the aux cache's directory, the cache staged or its temp
//! name removed first, a static ldconfig only: [`open_ldconfig`]), and the escapes each step
//! stops: docs/security.md, "ldconfig is chrooted and cannot leave the chroot" and "ldconfig
//! cannot touch a device node or a host file", and the threat table's ldconfig rows.
//!
//! # Speed
//!
//! ldconfig `fsync`s the cache it writes, which costs more than everything else the hook does
//! (docs/benchmarks.md). A container's cache needs no durability: it lives in a throw-away
//! layer, and a cache lost in a crash is rebuilt by the next start (ld.so ignores a truncated
//! one). So ldconfig writes it into a private tmpfs mounted over the rootfs's `/dev` in the
//! child's own mount namespace (nothing reads `/dev` there, and the container never sees it),
//! where `fsync` is free, and the child then installs it as `/etc/ld.so.cache` with a temp file
//! and a rename, resolved in-root. A rootfs without `/dev` gets the old behaviour.

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::{umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use nix::sys::wait::{waitpid, WaitStatus};

use devinject_devices::{Excerpt, ForwardCompat};
use devinject_discovery::elf_linkage::{linkage_from, Linkage};
use devinject_hostconfig::{CacheWriter, HostConfig};

use super::forward_compat;
use super::ld_so_cache::update::{self, CACHE};
use super::rootfs::{Crossing, Rootfs, RootfsError};
use super::InjectError;
use crate::sys;
use devinject_contained::child::{self, ChildError};
use devinject_contained::sys::{close_range, fork_run};
use devinject_hostfs::path_fd::proc_path;

/// The cache ldconfig writes into the staging tmpfs (container path, in the child's namespace).
const STAGED: &str = "/dev/ld.so.cache";
/// The child's exit code when ldconfig ran out of time.
const TIMED_OUT: i32 = 101;

/// How the linker cache is refreshed: who writes it, the host's ldconfig and how long it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ldconfig {
    /// Who writes the cache.
    pub writer: CacheWriter,
    /// A static ldconfig on the host.
    pub path: PathBuf,
    /// Seconds before it is killed (`SIGALRM`, armed before `exec`); 0: no limit.
    pub timeout_secs: u32,
}

impl Ldconfig {
    /// The cache writer, ldconfig and time limit the host config names (`ldcache`, `ldconfig`,
    /// `ldconfig_timeout`).
    pub fn from_config(config: &HostConfig) -> Self {
        Self {
            writer: config.ldcache,
            path: config.ldconfig.clone(),
            timeout_secs: config.ldconfig_timeout,
        }
    }
}

/// Opens the host's ldconfig for a later `fexecve`, refusing anything but a static ELF
/// executable: it runs chrooted in the image, where a program interpreter would be the image's.
pub fn open_ldconfig(path: &Path) -> Result<OwnedFd, InjectError> {
    let fd = nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()).map_err(
        |errno| InjectError::Source {
            path: path.to_owned(),
            errno,
        },
    )?;
    let file = std::fs::File::from(fd);
    let not_static = |why: String| InjectError::LdconfigNotStatic {
        path: path.to_owned(),
        why,
    };
    match linkage_from(&file) {
        Ok(Some(Linkage::Static)) => {}
        Ok(Some(Linkage::Dynamic(interp))) => {
            return Err(not_static(format!(
                "it is dynamically linked (interpreter {interp})"
            )))
        }
        Ok(Some(Linkage::NotElf)) => return Err(not_static("it is not an ELF executable".into())),
        Ok(None) => return Err(not_static("its ELF headers are truncated".into())),
        Err(e) => return Err(not_static(format!("it cannot be read: {e}"))),
    }
    Ok(OwnedFd::from(file))
}

/// Runs ldconfig for `dirs` inside the container, killed after `timeout_secs` (0: never), in a
/// child of [`child::call`] (the first 16 KiB of its output kept). Failures are returned with
/// ldconfig's output; the caller decides whether they are fatal (a read-only rootfs cannot take
/// a new cache).
///
/// The image decides what ldconfig reads: a FIFO as `/etc/ld.so.conf`, as a file it includes or
/// as `/var/cache/ldconfig/aux-cache` blocks it in `open` forever. An alarm armed before `exec`
/// (it survives `exec`; ldconfig is not the init of the namespace, so it is delivered) bounds
/// that; and the children die with the hook (`PR_SET_PDEATHSIG`, see `sys::fork_run`) when the
/// runtime kills the hook on its own timeout. The child of [`child::call`] is init of its own PID
/// namespace: whatever ldconfig starts ends with it.
pub fn refresh(
    mnt_ns: &OwnedFd,
    rootfs: &Path,
    ldconfig: &OwnedFd,
    timeout_secs: u32,
    dirs: &[PathBuf],
    compat: Option<&ForwardCompat>,
) -> Result<(), InjectError> {
    let mut dir_args = Vec::with_capacity(dirs.len());
    for d in dirs {
        dir_args.push(CString::new(d.as_os_str().as_encoded_bytes()).map_err(|_| {
            InjectError::Ldconfig {
                output: format!("directory {} contains NUL", d.display()),
            }
        })?);
    }
    // The alarm armed before ldconfig's exec ends ldconfig at its limit; the deadline, a second
    // later, also bounds the steps before it (a rootfs path that never answers).
    let limit = match timeout_secs {
        0 => Duration::from_secs(u64::from(u32::MAX)),
        secs => Duration::from_secs(u64::from(secs) + 1),
    };
    let called = child::call(limit, |wr| {
        // Only ldconfig's output goes to the pipe; a failure before exec says which step.
        let _ = nix::unistd::dup2_stdout(wr);
        let _ = nix::unistd::dup2_stderr(wr);
        match in_container(mnt_ns, rootfs, ldconfig, timeout_secs, &dir_args, compat) {
            Ok(code) => code,
            Err(msg) => {
                let line = format!("ldconfig setup failed: {msg}\n");
                let _ = nix::unistd::write(wr, line.as_bytes());
                127
            }
        }
    })
    .map_err(|e| match e {
        ChildError::Spawn { errno, .. } => InjectError::Fork(errno),
        ChildError::Timeout { .. } => InjectError::LdconfigTimeout { secs: timeout_secs },
        other => InjectError::Ldconfig {
            output: other.to_string(),
        },
    })?;
    let output = String::from_utf8_lossy(&called.message);
    match called.status {
        WaitStatus::Exited(_, 0) => {
            if !output.trim().is_empty() {
                tracing::debug!(output = %Excerpt(output.trim()), "ldconfig said");
            }
            Ok(())
        }
        WaitStatus::Exited(_, TIMED_OUT) | WaitStatus::Signaled(_, Signal::SIGALRM, _) => {
            Err(InjectError::LdconfigTimeout { secs: timeout_secs })
        }
        status => Err(InjectError::Ldconfig {
            output: describe_failure(status, &output),
        }),
    }
}

/// The child: joins the container's mount namespace in a private copy without its procfs, runs
/// ldconfig (staged on a tmpfs when it can) and installs its cache. Returns the exit code for the
/// parent.
fn in_container(
    mnt_ns: &OwnedFd,
    rootfs: &Path,
    ldconfig: &OwnedFd,
    timeout_secs: u32,
    dirs: &[CString],
    compat: Option<&ForwardCompat>,
) -> Result<i32, String> {
    nix::sched::setns(mnt_ns.as_fd(), CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("setns: {e}"))?;
    nix::sched::unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("unshare: {e}"))?;
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("make mounts private: {e}"))?;
    detach_procfs(rootfs)?;
    harden(rootfs)?;
    let root = Rootfs::open(rootfs).map_err(|e| e.to_string())?;
    private_aux_cache(&root)?;
    let staged = stage(&root);
    if !staged {
        // ldconfig will write /etc/ld.so.cache~ with O_TRUNC: make sure that is a new file.
        remove_cache_temp(&root).map_err(|e| e.to_string())?;
    }
    // ldconfig lists the directories given first ahead of the rest for a soname: the image's
    // newer driver libraries before ours, as the hook's own cache would.
    let compat_dir = match compat {
        Some(fc) => match compat_view(&root, fc) {
            Ok(true) => Some(
                CString::new(fc.dir.as_os_str().as_encoded_bytes())
                    .map_err(|_| format!("directory {} contains NUL", fc.dir.display()))?,
            ),
            Ok(false) => None,
            Err(why) => {
                // Printed among ldconfig's output; the host's libraries serve, as when the
                // hook's own reader finds the directory unusable.
                let _ = writeln!(
                    std::io::stderr(),
                    "forward compatibility: the image's libraries are not preferred: {why}"
                );
                None
            }
        },
        None => None,
    };
    let mut argv = vec![
        c"ldconfig".to_owned(),
        c"-X".to_owned(),
        c"-C".to_owned(),
        CString::new(if staged { STAGED } else { CACHE }).expect("no NUL"),
        c"-f".to_owned(),
        c"/etc/ld.so.conf".to_owned(),
    ];
    argv.extend(compat_dir);
    argv.extend(dirs.iter().cloned());
    let run = fork_run(|| {
        let step = (|| -> Result<(), String> {
            nix::unistd::chroot(rootfs).map_err(|e| format!("chroot: {e}"))?;
            nix::unistd::chdir("/").map_err(|e| format!("chdir: {e}"))?;
            if timeout_secs > 0 {
                nix::unistd::alarm::set(timeout_secs);
            }
            // ldconfig gets 0-2 and, for the exec, its own close-on-exec descriptor; nothing
            // else.
            let keep =
                u32::try_from(ldconfig.as_raw_fd()).map_err(|_| "bad descriptor".to_owned())?;
            close_range(3, keep.saturating_sub(1))
                .and_then(|()| close_range(keep + 1, u32::MAX))
                .map_err(|e| format!("close descriptors: {e}"))?;
            let env: [CString; 0] = [];
            let e = nix::unistd::fexecve(ldconfig.as_fd(), &argv, &env).unwrap_err();
            Err(format!("exec: {e}"))
        })();
        if let Err(msg) = step {
            let _ = writeln!(std::io::stderr(), "ldconfig setup failed: {msg}");
        }
        127
    })
    .map_err(|e| format!("fork: {e}"))?;
    match waitpid(run, None).map_err(|e| format!("wait: {e}"))? {
        WaitStatus::Exited(_, 0) => {}
        // ldconfig's own failure, passed on (its output is already in the pipe).
        WaitStatus::Exited(_, TIMED_OUT) => return Ok(1),
        WaitStatus::Exited(_, code) => return Ok(code),
        WaitStatus::Signaled(_, Signal::SIGALRM, _) => return Ok(TIMED_OUT),
        WaitStatus::Signaled(_, sig, _) => return Err(format!("ldconfig killed by {sig}")),
        other => return Err(format!("ldconfig ended abnormally: {other:?}")),
    }
    if staged {
        install(&root).map_err(|e| format!("install {CACHE}: {e}"))?;
    }
    Ok(0)
}

/// Covers the image's forward-compatibility directory, in this child's own namespace, with a
/// fresh tmpfs that holds only the libraries the hook's reader verified
/// ([`forward_compat::newer`]): each bound from the very fd it was read through. Returns whether
/// the directory is to be given to ldconfig (the image's libraries are newer and some verified).
///
/// ldconfig is given directories by path and follows every link in them as root: handed the
/// image's own directory it read a link's target wherever it led (a volume, a host file mounted
/// into the container) and put it into the cache, though the hook's reader refuses links. The
/// path ldconfig is given must stay the image's (the cache names files by it), so what is
/// behind that path is replaced instead: the directory fd the reader listed is the mount point,
/// the tmpfs is made detached and attached through fds (nothing is resolved by name again), and
/// each library is a bind of its verified file (no copy of tens of megabytes per start). A
/// `/proc/self/fd` path would not serve: ldconfig runs chrooted without procfs, and it would
/// still follow the directory's links.
fn compat_view(root: &Rootfs, fc: &ForwardCompat) -> Result<bool, String> {
    let Some(newer) = forward_compat::newer(root, fc).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    if newer.libraries.is_empty() {
        return Ok(false);
    }
    let shown = fc.dir.display();
    let attrs = libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC;
    let inodes = CString::new((forward_compat::MAX_ENTRIES + 1).to_string()).expect("no NUL");
    let tmp = sys::tmpfs_detached(
        &[
            (c"mode", c"0755"),
            (c"size", c"64k"),
            (c"nr_inodes", inodes.as_c_str()),
        ],
        attrs,
    )
    .map_err(|e| format!("make a private tmpfs for {shown}: {e}"))?;
    let mut placeholders = Vec::with_capacity(newer.libraries.len());
    for (lib, _) in &newer.libraries {
        let name = lib
            .path
            .file_name()
            .ok_or_else(|| format!("{}: no file name", lib.path.display()))?;
        let fd = nix::fcntl::openat(
            &tmp,
            name,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|e| format!("make {} on the private tmpfs: {e}", lib.path.display()))?;
        placeholders.push(fd);
    }
    sys::move_mount(&tmp, &newer.dir).map_err(|e| format!("cover {shown}: {e}"))?;
    for ((lib, file), placeholder) in newer.libraries.iter().zip(&placeholders) {
        sys::open_tree_clone(file)
            .and_then(|tree| sys::move_mount(&tree, placeholder))
            .map_err(|e| format!("bind {}: {e}", lib.path.display()))?;
    }
    Ok(true)
}

/// Mounts a private tmpfs over the rootfs's `/dev` (in this child's own namespace only). Not
/// when the image makes `/dev` resolve to its root or its `/etc`: the tmpfs would hide what
/// ldconfig reads.
fn stage(root: &Rootfs) -> bool {
    let dir = |p: &str| root.resolve(Path::new(p), OFlag::O_PATH | OFlag::O_DIRECTORY);
    let id = |fd: &OwnedFd| nix::sys::stat::fstat(fd).map(|st| (st.st_dev, st.st_ino));
    let Ok(dev) = dir("/dev") else {
        return false;
    };
    let Ok(dev_id) = id(&dev) else {
        return false;
    };
    for other in ["/", "/etc"] {
        if dir(other).is_ok_and(|fd| id(&fd).is_ok_and(|o| o == dev_id)) {
            return false;
        }
    }
    nix::mount::mount(
        Some("tmpfs"),
        &proc_path(&dev),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0755"),
    )
    .is_ok()
}

/// Makes the rootfs, and every mount below it, `nodev` and `nosuid` in this child's private
/// namespace: ldconfig then cannot open an image's device node at all. The rootfs is bound onto
/// itself first so that it is a mount root (runc makes it one; a plain directory is not).
/// Kernels without `mount_setattr` (before 5.12) get a classic remount of the top mount only.
fn harden(rootfs: &Path) -> Result<(), String> {
    nix::mount::mount(
        Some(rootfs),
        rootfs,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("bind the rootfs: {e}"))?;
    let fd = nix::fcntl::open(
        rootfs,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("open the rootfs: {e}"))?;
    let attrs = libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOSUID;
    match sys::mount_setattr_recursive(&fd, attrs) {
        Ok(()) => Ok(()),
        Err(Errno::ENOSYS) => nix::mount::mount(
            None::<&str>,
            rootfs,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
            None::<&str>,
        )
        .map_err(|e| format!("remount the rootfs nodev: {e}")),
        Err(e) => Err(format!("make the rootfs nodev: {e}")),
    }
}

/// Mounts a fresh tmpfs over the directory ldconfig saves its aux cache in
/// (`/var/cache/ldconfig`, resolved in-root as ldconfig will resolve it in the chroot), or over
/// `/var/cache` when the image has no such directory (ldconfig then creates it there). Without
/// `/var/cache` ldconfig cannot create the directory and saves no aux cache.
fn private_aux_cache(root: &Rootfs) -> Result<(), String> {
    for dir in ["/var/cache/ldconfig", "/var/cache"] {
        let Ok(fd) = root.resolve(Path::new(dir), OFlag::O_PATH | OFlag::O_DIRECTORY) else {
            continue;
        };
        return nix::mount::mount(
            Some("tmpfs"),
            &proc_path(&fd),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("mode=0700,size=16m"),
        )
        .map_err(|e| format!("mount a private tmpfs over {dir}: {e}"));
    }
    Ok(())
}

/// Removes `/etc/ld.so.cache~`, on the rootfs's own mount, before an unstaged ldconfig run.
fn remove_cache_temp(root: &Rootfs) -> Result<(), RootfsError> {
    let etc = root.writable_dir(Path::new("/etc"))?;
    match nix::unistd::unlinkat(
        &etc,
        "ld.so.cache~",
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    ) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(RootfsError {
            op: "remove",
            path: PathBuf::from("/etc/ld.so.cache~"),
            errno,
        }),
    }
}

/// Copies the staged cache to `/etc/ld.so.cache` (see [`update::install`]).
fn install(root: &Rootfs) -> Result<(), RootfsError> {
    // ldconfig always writes its cache; a stand-in that did not leaves the old one, as before.
    // The staged cache is on the tmpfs `stage` mounted in this child's own namespace.
    match update::read(root, STAGED, Crossing::Allowed) {
        Ok(cache) if !cache.is_empty() => update::install(root, &cache, None),
        _ => {
            tracing::debug!("ldconfig left no cache to install");
            Ok(())
        }
    }
}

/// Detaches every procfs mount at or below `rootfs` in the caller's (private) mount namespace, so
/// that nothing chrooted there can follow a `/proc/<pid>/root` or `/proc/<pid>/cwd` magic link
/// out of it.
fn detach_procfs(rootfs: &Path) -> Result<(), String> {
    let root = std::fs::canonicalize(rootfs)
        .map_err(|e| format!("resolve the rootfs {}: {e}", rootfs.display()))?;
    let text = std::fs::read("/proc/self/mountinfo")
        .map_err(|e| format!("read /proc/self/mountinfo: {e}"))?;
    for point in super::mountinfo::procfs_under(&text, &root) {
        match umount2(&point, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
            // EINVAL: no longer a mount point (went with a detached parent).
            Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(format!("detach {}: {e}", point.display())),
        }
    }
    Ok(())
}

/// ldconfig's exit and output on one line: the hook's first stderr line is what users see.
fn describe_failure(status: WaitStatus, output: &str) -> String {
    let how = match status {
        WaitStatus::Exited(_, code) => format!("exit status {code}"),
        WaitStatus::Signaled(_, sig, _) => format!("killed by {sig}"),
        other => format!("{other:?}"),
    };
    let said: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if said.is_empty() {
        how
    } else {
        // Its output names the image's files: bounded and escaped, as every such value.
        format!("{how}: {}", Excerpt(&said.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::unistd::Pid;

    #[test]
    fn failures_fit_on_one_line() {
        let pid = Pid::from_raw(7);
        assert_eq!(
            describe_failure(
                WaitStatus::Exited(pid, 1),
                "ldconfig: Can't create temporary cache file /etc/ld.so.cache~: Too many levels of symbolic links\n\nmore\n"
            ),
            "exit status 1: ldconfig: Can't create temporary cache file /etc/ld.so.cache~: Too many levels of symbolic links; more"
        );
        assert_eq!(
            describe_failure(WaitStatus::Signaled(pid, Signal::SIGSEGV, false), ""),
            "killed by SIGSEGV"
        );
        // ldconfig's output names the image's files: escaped and bounded.
        let said = describe_failure(
            WaitStatus::Exited(pid, 1),
            &format!(
                "ldconfig: /usr/lib/lib\u{1b}[2J\u{9b}\u{202e}x.so is not an ELF file{}\n",
                "!".repeat(20_000)
            ),
        );
        assert!(
            said.starts_with(
                r"exit status 1: ldconfig: /usr/lib/lib\u{1b}[2J\u{9b}\u{202e}x.so is not"
            ),
            "{said}"
        );
        assert!(said.len() < 300, "{said}");
        assert!(!said.contains(['\u{1b}', '\u{9b}', '\u{202e}']), "{said:?}");
    }

    /// A dynamically linked ldconfig would have the kernel load the image's `ld-linux` as root; it
    /// is refused, and so is anything but an ELF executable. The programs are built here (gcc), so
    /// that the test does not depend on how the host's are linked.
    #[test]
    fn only_a_static_ldconfig_is_run() {
        if !devinject_testkit::require(
            std::process::Command::new("gcc")
                .arg("--version")
                .output()
                .is_ok(),
            "needs gcc (apt-get install gcc libc6-dev)",
        ) {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("main.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let build = |name: &str, flags: &[&str]| {
            let out = t.path().join(name);
            let status = std::process::Command::new("gcc")
                .args(flags)
                .arg("-o")
                .arg(&out)
                .arg(&src)
                .status()
                .unwrap();
            assert!(status.success(), "gcc {flags:?}");
            out
        };
        let dynamic = build("dynamic", &[]);
        let fixed = build("static", &["-static"]);
        let static_pie = build("static-pie", &["-static-pie"]);
        let script = t.path().join("script");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();

        assert!(open_ldconfig(&fixed).is_ok());
        assert!(open_ldconfig(&static_pie).is_ok());
        let err = open_ldconfig(&dynamic).unwrap_err().to_string();
        assert!(
            err.contains("it is dynamically linked (interpreter /lib"),
            "{err}"
        );
        assert!(
            err.contains("set `ldconfig` in the devinject config"),
            "{err}"
        );
        let err = open_ldconfig(&script).unwrap_err().to_string();
        assert!(err.contains("it is not an ELF executable"), "{err}");
        let missing = open_ldconfig(&t.path().join("none")).unwrap_err();
        assert!(matches!(missing, InjectError::Source { .. }), "{missing}");
    }
}
