//! Refreshing the container's linker cache.
//!
//! The host's static `ldconfig` is opened in the host namespace, then run in a forked child that
//! joins the container's mount namespace, makes its mounts private, chroots into the rootfs and
//! `fexecve`s it with an empty environment: nothing from the image's env (LD_PRELOAD,
//! LD_LIBRARY_PATH, PATH) reaches it (CVE-2025-23266 class), no binary from the image runs, and
//! whatever links the image holds resolve inside the chroot (CVE-2025-23267 class). `-X` leaves
//! links alone: we made the soname links ourselves.
//!
//! A chroot alone does not contain a process that can reach a procfs: before `pivot_root` the
//! container's `/proc/1/root` is runc init's root, the host's `/`, and an image linking
//! `/var/cache -> /proc/1/root/<dir>` had ldconfig create `<dir>/ldconfig/aux-cache` on the host
//! (it always writes its aux cache there), or listing `/proc/1/root/usr/lib` in `ld.so.conf` had
//! it put host libraries into the container's cache. So the child detaches every procfs mount
//! under the rootfs from its private copy of the namespace before it chroots
//! ([`super::mountinfo`]); ldconfig needs no `/proc`.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::{umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use nix::sys::wait::{waitpid, WaitStatus};

use super::InjectError;
use crate::sys;

/// The host's ldconfig and how long it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ldconfig {
    /// A static ldconfig on the host.
    pub path: PathBuf,
    /// Seconds before it is killed (`SIGALRM`, armed before `exec`); 0: no limit.
    pub timeout_secs: u32,
}

/// Opens the host's ldconfig for a later `fexecve`.
pub fn open_ldconfig(path: &Path) -> Result<OwnedFd, InjectError> {
    nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()).map_err(|errno| {
        InjectError::Source {
            path: path.to_owned(),
            errno,
        }
    })
}

/// Runs ldconfig for `dirs` inside the container, killed after `timeout_secs` (0: never).
/// Failures are returned with ldconfig's output; the caller decides whether they are fatal (a
/// read-only rootfs cannot take a new cache).
///
/// The image decides what ldconfig reads: a FIFO as `/etc/ld.so.conf`, as a file it includes or
/// as `/var/cache/ldconfig/aux-cache` blocks it in `open` forever. An alarm armed before `exec`
/// (it survives `exec`) bounds that; and the child dies with the hook (`PR_SET_PDEATHSIG`, see
/// `sys::fork_run`) when the runtime kills the hook on its own timeout.
pub fn refresh(
    mnt_ns: &OwnedFd,
    rootfs: &Path,
    ldconfig: &OwnedFd,
    timeout_secs: u32,
    dirs: &[PathBuf],
) -> Result<(), InjectError> {
    let (rd, wr) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(InjectError::Fork)?;
    let mut argv = vec![
        c"ldconfig".to_owned(),
        c"-X".to_owned(),
        c"-C".to_owned(),
        c"/etc/ld.so.cache".to_owned(),
        c"-f".to_owned(),
        c"/etc/ld.so.conf".to_owned(),
    ];
    for d in dirs {
        argv.push(CString::new(d.as_os_str().as_encoded_bytes()).map_err(|_| {
            InjectError::Ldconfig {
                output: format!("directory {} contains NUL", d.display()),
            }
        })?);
    }
    let rootfs_c = rootfs.to_owned();
    let child = sys::fork_run(|| {
        // Only ldconfig's output goes to the pipe; a failure before exec says which step.
        let _ = nix::unistd::dup2_stdout(&wr);
        let _ = nix::unistd::dup2_stderr(&wr);
        let step = (|| -> Result<(), String> {
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
            detach_procfs(&rootfs_c)?;
            nix::unistd::chroot(&rootfs_c).map_err(|e| format!("chroot: {e}"))?;
            nix::unistd::chdir("/").map_err(|e| format!("chdir: {e}"))?;
            let env: [CString; 0] = [];
            if timeout_secs > 0 {
                nix::unistd::alarm::set(timeout_secs);
            }
            let e = nix::unistd::fexecve(ldconfig.as_fd(), &argv, &env).unwrap_err();
            Err(format!("exec: {e}"))
        })();
        if let Err(msg) = step {
            let line = format!("ldconfig setup failed: {msg}\n");
            let _ = nix::unistd::write(&wr, line.as_bytes());
        }
        127
    })
    .map_err(InjectError::Fork)?;
    drop(wr);
    let mut output = String::new();
    let _ = std::fs::File::from(rd)
        .take(64 * 1024)
        .read_to_string(&mut output);
    match waitpid(child, None) {
        Ok(WaitStatus::Exited(_, 0)) => {
            if !output.trim().is_empty() {
                tracing::debug!(output = %output.trim(), "ldconfig said");
            }
            Ok(())
        }
        Ok(WaitStatus::Signaled(_, Signal::SIGALRM, _)) => {
            Err(InjectError::LdconfigTimeout { secs: timeout_secs })
        }
        Ok(status) => Err(InjectError::Ldconfig {
            output: describe_failure(status, &output),
        }),
        Err(errno) => Err(InjectError::Fork(errno)),
    }
}

/// Detaches every procfs mount at or below `rootfs` in the caller's (private) mount namespace, so
/// that nothing chrooted there can follow a `/proc/<pid>/root` or `/proc/<pid>/cwd` magic link
/// out of it.
fn detach_procfs(rootfs: &Path) -> Result<(), String> {
    let root = std::fs::canonicalize(rootfs)
        .map_err(|e| format!("resolve the rootfs {}: {e}", rootfs.display()))?;
    let text = std::fs::read_to_string("/proc/self/mountinfo")
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
        format!("{how}: {}", said.join("; "))
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
    }
}
