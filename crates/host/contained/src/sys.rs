//! The unsafe code of running something contained: `fork` (plain, and as the first process of
//! a new PID namespace), and the descriptor and pidfd syscalls around it.
//!
//! Each function is a thin, checked wrapper; callers get `nix::Result` and owned fds.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::unistd::Pid;

/// Forks; the child runs `child` and exits with its return value without unwinding or running
/// the parent's atexit handlers. Returns the child's pid to the parent.
///
/// The child is killed when the parent dies (`PR_SET_PDEATHSIG`, kept across `exec`): a runtime
/// enforcing a hook timeout kills only the hook, and a child left waiting (ldconfig on an image's
/// FIFO) would otherwise stay on the host holding the container's mount namespace.
///
/// Only for a child of a child that is already the init of its own PID namespace
/// ([`fork_contained`]): whatever this child starts then ends with that init. Everything the hook
/// forks from the host goes through [`fork_contained`].
///
/// The hook is single-threaded (no async runtime, no logging threads), which is what makes
/// `fork` sound here and what `setns(CLONE_NEWNS)` in the child requires.
pub fn fork_run(child: impl FnOnce() -> i32) -> nix::Result<Pid> {
    let parent = nix::unistd::getpid();
    // SAFETY: fork(2) in a single-threaded process: the child gets a consistent copy of the
    // address space (no other thread can hold a lock), and it leaves only through _exit below.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(child),
        nix::unistd::ForkResult::Child => {
            // If the parent died before the death signal was armed, nothing would deliver it.
            let armed = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            let code = if armed.is_ok() && nix::unistd::getppid() == parent {
                child()
            } else {
                1
            };
            // SAFETY: _exit(2) ends the child at once; it never returns and runs no destructors
            // that could touch state shared with the parent (buffered stdio, temp files).
            unsafe { libc::_exit(code) }
        }
    }
}

/// A child forked by [`fork_contained`]: the first process, pid 1, of a PID namespace of its own.
#[derive(Debug)]
pub struct Contained {
    /// Its pid, as the caller sees it.
    pub pid: Pid,
    /// A pidfd of it, readable once it has ended (`pidfd_open(2)`); `None` on kernels before
    /// 5.3, where the caller waits for it another way.
    pub pidfd: Option<OwnedFd>,
    /// The write end of a pipe the child checks once its death signal is armed: while the parent
    /// lives the pipe has a writer. Held until the child is reaped.
    _alive: OwnedFd,
}

/// Forks `child` as pid 1 of a new PID namespace; it runs `child` and exits with its return
/// value like [`fork_run`] (dying with the parent as well).
///
/// Why: nothing leaves a PID namespace. When its init ends, on its own or by `SIGKILL` from the
/// parent, the kernel kills every process left in it, whatever they did to get away (`setsid`, a
/// double fork, a daemon), and the pidfd becomes readable only once they are all gone. So a program
/// the child `exec`s cannot leave a process on the host, nor a helper holding its output pipes. The
/// price: as init, the program ignores every signal it has no handler for, but `SIGKILL` and
/// `SIGSTOP` from outside its namespace (pid_namespaces(7)): its own `kill -TERM $$`, an alarm, a
/// `SIGTERM` from the host. The caller bounds it with a deadline and `SIGKILL` instead.
///
/// How: `unshare(CLONE_NEWPID)` on the calling thread makes its next child init of a new
/// namespace; the thread is set back to its own namespace (`setns`) right after the fork, so the
/// namespace change never outlives this call and no other thread sees it. The caller needs
/// `CAP_SYS_ADMIN` (the hook, the shim and the NRI plugin run as root).
///
/// The caller may have other threads (the NRI plugin runs this from a tokio runtime): `child`
/// must use only async-signal-safe calls (raw syscalls, no allocation) before it `exec`s, or run
/// in a single-threaded process.
pub fn fork_contained(child: impl FnOnce() -> i32) -> nix::Result<Contained> {
    use nix::fcntl::OFlag;
    use nix::sched::CloneFlags;
    // The caller's own PID namespace, to go back to after the fork.
    let own = nix::fcntl::open(
        "/proc/thread-self/ns/pid",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let (alive_r, alive_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    nix::sched::unshare(CloneFlags::CLONE_NEWPID)?;
    // SAFETY: fork(2); the child gets a copy of the address space in which another thread of the
    // parent may have held a lock: it runs only async-signal-safe code (close, prctl, poll, then
    // `child`, whose callers keep to the same rule or run single-threaded) and leaves only
    // through _exit below.
    let forked = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            // Our copy of the write end must go, or the check below could not see the parent
            // gone.
            drop(alive_w);
            let armed = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_ok()
                && parent_lives(&alive_r);
            drop(alive_r);
            let code = if armed { child() } else { 1 };
            // SAFETY: _exit(2) ends the child at once; it never returns and runs no destructors
            // that could touch state shared with the parent (buffered stdio, temp files).
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => Ok(child),
        Err(errno) => Err(errno),
    };
    // Back to our own namespace for this thread's later children, whatever the fork did.
    let restored = nix::sched::setns(&own, CloneFlags::CLONE_NEWPID);
    let pid = forked?;
    if let Err(errno) = restored {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
        return Err(errno);
    }
    let pidfd = pidfd_open(pid).ok();
    Ok(Contained {
        pid,
        pidfd,
        _alive: alive_w,
    })
}

/// Whether the parent still holds the write end of the `alive` pipe: after the death signal is
/// armed, a parent that died before it was would otherwise leave the child running unbounded.
/// The child is init of its own namespace, so `getppid` (0) cannot tell.
fn parent_lives(alive: &OwnedFd) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut set = [PollFd::new(alive.as_fd(), PollFlags::POLLIN)];
    // Nothing is ever written: any event is the hang-up of a pipe without writers.
    matches!(nix::poll::poll(&mut set, PollTimeout::ZERO), Ok(0))
}

/// `pidfd_open(pid, 0)`: a descriptor of the process `pid` that becomes readable when it ends.
fn pidfd_open(pid: Pid) -> nix::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1; it touches
    // no memory of ours.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    let raw = Errno::result(ret)?;
    // SAFETY: on success pidfd_open(2) returns a new descriptor (close-on-exec) nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

/// Closes every descriptor from `first` to `last`, both included (a program gets exactly the
/// descriptors it is given, whatever the engine or a caller left open without close-on-exec).
/// `close_range(2)` where the kernel has it (5.9), else one `close` per descriptor number below the
/// soft `RLIMIT_NOFILE`. Async-signal-safe: for a forked child right before `exec`.
pub fn close_range(first: u32, last: u32) -> nix::Result<()> {
    if first > last {
        return Ok(());
    }
    // SAFETY: close_range(2) takes two descriptor numbers and flags; it touches no memory of
    // ours, and closing descriptors is what the caller, a child about to exec, asks for.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    match Errno::result(ret) {
        Ok(_) => return Ok(()),
        Err(Errno::ENOSYS) => {}
        Err(e) => return Err(e),
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) fills the `rlimit` we pass a pointer to, which lives across the call.
    Errno::result(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) })?;
    let end = limit.rlim_cur.min(u64::from(last) + 1);
    let end = i32::try_from(end).unwrap_or(i32::MAX);
    for fd in i32::try_from(first).unwrap_or(i32::MAX)..end {
        // SAFETY: close(2) on a number that may or may not be open (EBADF then); the caller is
        // a child about to exec, which owns every descriptor it has and wants these gone.
        unsafe { libc::close(fd) };
    }
    Ok(())
}
