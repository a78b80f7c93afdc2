//! The installer's only unsafe code: entering the host's namespaces in a child process before
//! it execs, which is what `nsenter -t 1 -m -u -i -n` does (the image has no nsenter).

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sched::CloneFlags;

/// Makes `cmd`'s child join each namespace in `namespaces` (an fd of `/proc/<pid>/ns/<kind>`
/// opened by the caller, and its kind) before it execs. Joining the mount namespace also makes
/// the child's root and working directory those of that namespace (setns(2)), so an absolute
/// program path is looked up in the host's filesystem.
pub fn enter_before_exec(cmd: &mut Command, namespaces: Vec<(OwnedFd, CloneFlags)>) {
    let hook = move || -> std::io::Result<()> {
        for (fd, kind) in &namespaces {
            nix::sched::setns(fd, *kind).map_err(std::io::Error::from)?;
        }
        Ok(())
    };
    // SAFETY: pre_exec(2)'s closure runs in the forked child, where only async-signal-safe
    // operations are allowed: it iterates over a vector built before the fork (no allocation)
    // and calls setns(2), a plain system call; errors become an io::Error from the errno value
    // without allocating. The fds stay open in the parent until the Command is dropped.
    unsafe {
        cmd.pre_exec(hook);
    }
}
