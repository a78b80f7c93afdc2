//! Running a host program from the hook, the shim or the NRI plugin: a profile's prepare step;
//! and, with [`call`], work the hook does in a forked child without `exec` (the injection in the
//! container's mount namespace, ldconfig), under the same deadline and bounds.
//!
//! # Security
//!
//! All run as root for a container, so all run the same way:
//! - by absolute path, checked before the fork ([`check_runnable`]) so that a missing program is
//!   named with its fix by the caller;
//! - with exactly the environment the caller gives (nothing of the container's or the runtime's
//!   reaches it), stdin from `/dev/null`, and exactly the descriptors 0, 1 and 2: every other
//!   one is closed right before `exec` (`close_range`), whether or not it was close-on-exec;
//! - as pid 1 of a PID namespace of its own (`sys::fork_contained`), so that whatever ends it
//!   ends everything it started, however that detached itself (`setsid`, a double fork, a
//!   daemon): when it exits, or is killed, the kernel kills every process left in its namespace. A
//!   process it leaves holding its stdout therefore dies with it rather than holding the start
//!   until the deadline;
//! - under a deadline, after which it is killed with all it started ([`ChildError::Timeout`]).
//!   The wait is bounded by the same deadline as the reading of its output (its pidfd is polled
//!   with the pipes), so a program that closes its output and hangs times out too. As init of
//!   its namespace it ignores every signal it has no handler for but `SIGKILL` and `SIGSTOP`
//!   from outside (an alarm, its own `kill`, a `SIGTERM` from the host), so it is ended with
//!   `SIGKILL`. It also dies with its parent (`PR_SET_PDEATHSIG`), taking its namespace along;
//! - with its output read within bounds: more stdout than the caller allows kills it, and only
//!   the first [`MAX_STDERR_BYTES`] of stderr are kept.
//!
//! The outcome is typed ([`Finished`], [`ChildError`]); each caller words the messages, since
//! only it knows which setting or install step is the fix.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use crate::sys;

/// The most of a child's stderr kept for messages.
pub const MAX_STDERR_BYTES: usize = 16 << 10;

/// The child's exit code when the program could not be executed.
pub const EXEC_FAILED: i32 = 127;

/// One program to run.
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    /// Its absolute path.
    pub path: &'a Path,
    /// Its arguments, after `argv[0]` (the path).
    pub args: &'a [OsString],
    /// Its whole environment, `NAME=value` each.
    pub env: &'a [OsString],
    /// How long it may run.
    pub limit: Duration,
    /// The most stdout it may write; one byte more kills it.
    pub max_stdout: usize,
}

/// What a program that ran left.
#[derive(Debug)]
pub struct Finished {
    /// How it ended.
    pub status: WaitStatus,
    /// Its stdout, whole.
    pub stdout: Vec<u8>,
    /// The start of its stderr.
    pub stderr: Vec<u8>,
}

impl Finished {
    /// Its stderr as one line, blank lines dropped, the others joined by ` | `.
    pub fn message(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        lines.join(" | ")
    }

    /// How it ended, in words: `exit code 3`, `killed by SIGTERM`; `None` for exit code 0.
    pub fn failure(&self) -> Option<String> {
        match self.status {
            WaitStatus::Exited(_, 0) => None,
            WaitStatus::Exited(_, code) => Some(format!("exit code {code}")),
            WaitStatus::Signaled(_, sig, _) => Some(format!("killed by {sig}")),
            other => Some(format!("{other:?}")),
        }
    }

    /// Its stderr as one line for a failure's message: [`Self::message`], or `no message`.
    pub fn failure_message(&self) -> String {
        let message = self.message();
        if message.is_empty() {
            "no message".to_owned()
        } else {
            message
        }
    }
}

/// Why a program did not finish on its own.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// An argument or env entry holds a NUL byte, which no command line can carry.
    #[error("{arg:?} contains a NUL byte")]
    Argument {
        /// The argument.
        arg: String,
    },
    /// Pipes, fork or wait failed.
    #[error("{step}: {errno}")]
    Spawn {
        /// The step that failed.
        step: &'static str,
        /// The system error.
        errno: Errno,
    },
    /// It outlived its deadline and was killed.
    #[error("it did not finish within {} ms and was killed", limit.as_millis())]
    Timeout {
        /// The deadline it had.
        limit: Duration,
    },
    /// It wrote more stdout than allowed and was killed.
    #[error("it wrote more than {max} bytes and was killed")]
    Oversize {
        /// The bound.
        max: usize,
    },
}

/// Why a path cannot be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unrunnable {
    /// Nothing is there.
    Missing,
    /// Something is there that cannot be run; the text says what.
    Unusable(String),
}

/// Checks that `path` is an absolute path to an executable regular file.
pub fn check_runnable(path: &Path) -> Result<(), Unrunnable> {
    use std::os::unix::fs::PermissionsExt;
    if !path.is_absolute() {
        // A relative path would be looked up in the runtime's working directory, the bundle.
        return Err(Unrunnable::Unusable("the path is not absolute".into()));
    }
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Unrunnable::Missing),
        Err(e) => Err(Unrunnable::Unusable(e.to_string())),
        Ok(m) if !m.is_file() => Err(Unrunnable::Unusable("it is not a regular file".into())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Err(Unrunnable::Unusable("it is not executable".into()))
        }
        Ok(_) => Ok(()),
    }
}

/// How reading a child's output ended.
enum Collected {
    /// Both pipes reached end of file.
    Closed { stdout: Vec<u8>, stderr: Vec<u8> },
    /// The deadline passed first.
    TimedOut,
    /// Stdout went past its bound.
    Oversize,
}

/// Runs `program`, reads its output within bounds, and reaps it; kills it at its deadline.
pub fn run(program: Program<'_>) -> Result<Finished, ChildError> {
    let spawn = |step: &'static str| move |errno| ChildError::Spawn { step, errno };
    let cstr = |s: &OsStr| {
        CString::new(s.as_bytes()).map_err(|_| ChildError::Argument {
            arg: s.to_string_lossy().into_owned(),
        })
    };
    let mut argv = vec![cstr(program.path.as_os_str())?];
    for a in program.args {
        argv.push(cstr(a)?);
    }
    let env = program
        .env
        .iter()
        .map(|e| cstr(e))
        .collect::<Result<Vec<_>, _>>()?;
    let exec_failed = format!("cannot execute {}: ", program.path.display());
    let null = nix::fcntl::open(
        "/dev/null",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(spawn("open /dev/null"))?;
    let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(spawn("pipe"))?;
    let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(spawn("pipe"))?;
    let deadline = Instant::now() + program.limit;
    let child = sys::fork_contained(|| {
        // Only async-signal-safe calls from here on: the parent may have other threads (the NRI
        // plugin, tests) that held locks at the fork.
        let redirected = nix::unistd::dup2_stdin(&null)
            .and_then(|()| nix::unistd::dup2_stdout(&out_w))
            .and_then(|()| nix::unistd::dup2_stderr(&err_w))
            // Exactly 0-2: nothing the engine or a caller left open without close-on-exec reaches
            // the program.
            .and_then(|()| sys::close_range(3, u32::MAX));
        if redirected.is_err() {
            return EXEC_FAILED;
        }
        let Err(errno) = nix::unistd::execve(&argv[0], &argv, &env);
        let stderr = std::io::stderr();
        let _ = nix::unistd::write(stderr.as_fd(), exec_failed.as_bytes());
        let _ = nix::unistd::write(stderr.as_fd(), errno.desc().as_bytes());
        EXEC_FAILED
    })
    .map_err(spawn("start it in a PID namespace of its own"))?;
    drop((null, out_w, err_w));
    let (stdout, stderr) = match collect(
        Some(&out_r),
        &err_r,
        child.pidfd.as_ref(),
        deadline,
        program.max_stdout,
    ) {
        Ok(Collected::Closed { stdout, stderr }) => (stdout, stderr),
        Ok(Collected::TimedOut) => {
            return Err(killed(
                child.pid,
                ChildError::Timeout {
                    limit: program.limit,
                },
            ))
        }
        Ok(Collected::Oversize) => {
            return Err(killed(
                child.pid,
                ChildError::Oversize {
                    max: program.max_stdout,
                },
            ))
        }
        Err(errno) => return Err(killed(child.pid, spawn("read its output")(errno))),
    };
    let status = match reap(child.pid, deadline) {
        Ok(Some(status)) => status,
        // It closed its output and went on: the deadline ends it all the same.
        Ok(None) => {
            return Err(killed(
                child.pid,
                ChildError::Timeout {
                    limit: program.limit,
                },
            ))
        }
        Err(errno) => return Err(killed(child.pid, spawn("wait")(errno))),
    };
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

/// What a forked call left: how it ended and what it wrote to its message pipe.
#[derive(Debug)]
pub struct Called {
    /// How it ended.
    pub status: WaitStatus,
    /// The first [`MAX_STDERR_BYTES`] of what it wrote.
    pub message: Vec<u8>,
}

/// Runs `work` in a forked child (no `exec` of its own: work that must happen in another
/// namespace first), handing it the write end of a message pipe, where it may also send a program's
/// output; its return value is the exit code. Like [`run`]: a deadline after which it is killed,
/// and only the first [`MAX_STDERR_BYTES`] of its message kept (more is read and dropped, so a
/// chatty program is not stopped by a full pipe).
pub fn call(limit: Duration, work: impl FnOnce(&OwnedFd) -> i32) -> Result<Called, ChildError> {
    let spawn = |step: &'static str| move |errno| ChildError::Spawn { step, errno };
    let (msg_r, msg_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(spawn("pipe"))?;
    let deadline = Instant::now() + limit;
    let child = sys::fork_contained(|| work(&msg_w))
        .map_err(spawn("start it in a PID namespace of its own"))?;
    drop(msg_w);
    let pid = child.pid;
    // The message is read as a program's stderr is: its first bytes kept, the rest drained.
    let message = match collect(None, &msg_r, child.pidfd.as_ref(), deadline, 0) {
        Ok(Collected::Closed { stderr, .. }) => stderr,
        Ok(Collected::TimedOut) => return Err(killed(pid, ChildError::Timeout { limit })),
        // Only stdout has a bound that kills, and none is read here.
        Ok(Collected::Oversize) => return Err(killed(pid, ChildError::Oversize { max: 0 })),
        Err(errno) => return Err(killed(pid, spawn("read its message")(errno))),
    };
    let status = match reap(pid, deadline) {
        Ok(Some(status)) => status,
        Ok(None) => return Err(killed(pid, ChildError::Timeout { limit })),
        Err(errno) => return Err(killed(pid, spawn("wait")(errno))),
    };
    Ok(Called { status, message })
}

/// Kills and reaps the child, then returns `err`. The child is init of its own PID namespace:
/// the kernel kills everything left in it, and the wait returns once all of it is gone.
fn killed(child: Pid, err: ChildError) -> ChildError {
    let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
    let _ = wait(child);
    err
}

/// `waitpid`, again when interrupted.
fn wait(child: Pid) -> nix::Result<WaitStatus> {
    loop {
        match nix::sys::wait::waitpid(child, None) {
            Err(Errno::EINTR) => continue,
            other => return other,
        }
    }
}

/// Reaps the child by `deadline`: `None` if it is still running then. Once [`collect`] has seen
/// its pidfd readable this returns at once; without a pidfd (kernels before 5.3) it looks every
/// 10 ms.
fn reap(child: Pid, deadline: Instant) -> nix::Result<Option<WaitStatus>> {
    loop {
        match nix::sys::wait::waitpid(child, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
            Ok(WaitStatus::StillAlive) => {}
            Ok(status) => return Ok(Some(status)),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        std::thread::sleep(left.min(Duration::from_millis(10)));
    }
}

/// Reads stdout (when there is one) and stderr until both are closed and the child has ended
/// (its pidfd readable, when there is one), the deadline passes, or stdout goes past
/// `max_stdout`. The child ending ends everything it started (it is init of its own PID
/// namespace), so the pipes then close too.
fn collect(
    out: Option<&OwnedFd>,
    err: &OwnedFd,
    exit: Option<&OwnedFd>,
    deadline: Instant,
    max_stdout: usize,
) -> nix::Result<Collected> {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let fds = [out, Some(err), exit];
    let mut open = fds.map(|f| f.is_some());
    let mut buf = [0u8; 8192];
    while open.contains(&true) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Collected::TimedOut);
        }
        let which: Vec<(usize, &OwnedFd)> = fds
            .iter()
            .enumerate()
            .filter_map(|(i, fd)| Some((i, (*fd)?)))
            .filter(|(i, _)| open[*i])
            .collect();
        let mut set: Vec<PollFd<'_>> = which
            .iter()
            .map(|(_, fd)| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
            .collect();
        // Rounded up to the next millisecond so that the deadline is reached, not spun on.
        let timeout =
            PollTimeout::try_from(left + Duration::from_micros(999)).unwrap_or(PollTimeout::MAX);
        match nix::poll::poll(&mut set, timeout) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
        let ready: Vec<(usize, &OwnedFd)> = which
            .iter()
            .zip(&set)
            .filter(|(_, p)| p.revents().is_some_and(|r| !r.is_empty()))
            .map(|(w, _)| *w)
            .collect();
        for (i, fd) in ready {
            if i == 2 {
                // The pidfd: readable once the child has ended; there is nothing to read.
                open[i] = false;
                continue;
            }
            let n = match nix::unistd::read(fd, &mut buf) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                open[i] = false;
            } else if i == 0 {
                if stdout.len() + n > max_stdout {
                    return Ok(Collected::Oversize);
                }
                stdout.extend_from_slice(&buf[..n]);
            } else {
                let keep = n.min(MAX_STDERR_BYTES - stderr.len());
                stderr.extend_from_slice(&buf[..keep]);
            }
        }
    }
    Ok(Collected::Closed { stdout, stderr })
}

/// What the tests of the modules that run programs share.
#[cfg(test)]
pub(crate) mod test_support {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    use nix::sys::signal::Signal;
    use nix::unistd::Pid;

    /// A shell script `dir/name` running `body`, executable. Write every script a test needs
    /// before it runs any: a script still open for writing while another test thread forks
    /// cannot be executed (ETXTBSY).
    pub(crate) fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Sends `signal`, from outside its PID namespace, to the first process found running
    /// `program` (its command line's first word), from a thread, to join. A program is init of
    /// its own namespace and ignores every signal without a handler but `SIGKILL` and `SIGSTOP`
    /// from outside: a test that needs one ended by a signal has it `exec` `program` (a link to
    /// `sleep`) once ready, and kills it from here.
    pub(crate) fn signal_when_running(
        program: PathBuf,
        signal: Signal,
    ) -> std::thread::JoinHandle<()> {
        let wanted = [program.as_os_str().as_encoded_bytes(), b"\0"].concat();
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while std::time::Instant::now() < until {
                for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                    let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                        continue;
                    };
                    let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                        continue;
                    };
                    if cmdline.starts_with(&wanted) {
                        nix::sys::signal::kill(Pid::from_raw(pid), signal).unwrap();
                        return;
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            panic!("{} never ran", program.display());
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::test_support::script;
    use super::*;

    /// Feeds `stdout` and `stderr` to [`collect`] through pipes, from writer threads.
    fn collect_bytes(stdout: usize, stderr: usize, max: usize) -> Collected {
        let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let feed = |w: OwnedFd, n: usize| {
            std::thread::spawn(move || {
                use std::io::Write;
                // A reader that stops early closes the pipe: EPIPE is fine here.
                let _ = std::fs::File::from(w).write_all(&vec![b'x'; n]);
            })
        };
        let (a, b) = (feed(out_w, stdout), feed(err_w, stderr));
        let got = collect(
            Some(&out_r),
            &err_r,
            None,
            Instant::now() + Duration::from_secs(20),
            max,
        )
        .unwrap();
        drop((out_r, err_r));
        a.join().unwrap();
        b.join().unwrap();
        got
    }

    #[test]
    fn a_call_returns_its_code_and_message() {
        let got = call(Duration::from_secs(20), |w| {
            let _ = nix::unistd::write(w, b"hello");
            7
        })
        .unwrap();
        assert_eq!(got.status, WaitStatus::Exited(got.status.pid().unwrap(), 7));
        assert_eq!(got.message, b"hello");
    }

    #[test]
    fn a_call_past_its_deadline_is_killed_and_reaped() {
        let start = Instant::now();
        let err = call(Duration::from_millis(200), |_| {
            std::thread::sleep(Duration::from_secs(30));
            0
        })
        .unwrap_err();
        assert!(matches!(err, ChildError::Timeout { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_call_writing_more_than_the_bound_runs_on_and_keeps_the_first_bytes() {
        let got = call(Duration::from_secs(20), |w| {
            let chunk = [b'x'; 1024];
            for _ in 0..4 * MAX_STDERR_BYTES / chunk.len() {
                if nix::unistd::write(w, &chunk).is_err() {
                    return 1;
                }
            }
            0
        })
        .unwrap();
        assert_eq!(got.status, WaitStatus::Exited(got.status.pid().unwrap(), 0));
        assert_eq!(got.message.len(), MAX_STDERR_BYTES);
    }

    /// The bounds hold exactly: stdout of the bound is read whole, one byte more is oversize;
    /// stderr keeps its first [`MAX_STDERR_BYTES`].
    #[test]
    fn output_bounds_are_exact() {
        const MAX: usize = 1 << 20;
        match collect_bytes(MAX, MAX_STDERR_BYTES + 100, MAX) {
            Collected::Closed { stdout, stderr } => {
                assert_eq!(stdout.len(), MAX);
                assert_eq!(stderr.len(), MAX_STDERR_BYTES);
            }
            _ => panic!("output at the bound must be read"),
        }
        assert!(matches!(
            collect_bytes(MAX + 1, 0, MAX),
            Collected::Oversize
        ));
        match collect_bytes(10, 10, MAX) {
            Collected::Closed { stdout, stderr } => {
                assert_eq!((stdout.len(), stderr.len()), (10, 10))
            }
            _ => panic!("small output must be read"),
        }
    }

    /// A deadline less than a millisecond away is waited for and reported as a timeout: the
    /// poll timeout is the time left rounded up to a whole millisecond.
    #[test]
    fn a_deadline_under_a_millisecond_times_out() {
        let (out_r, _out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let (err_r, _err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        for micros in [100, 300, 600, 900, 1500] {
            let deadline = Instant::now() + Duration::from_micros(micros);
            let got = collect(Some(&out_r), &err_r, None, deadline, 16).unwrap();
            assert!(matches!(got, Collected::TimedOut), "{micros} µs");
            assert!(Instant::now() >= deadline, "{micros} µs: returned early");
        }
    }

    #[test]
    fn runs_with_exactly_the_given_environment_and_no_stdin() {
        let t = tempfile::tempdir().unwrap();
        let path = script(
            t.path(),
            "env",
            "/usr/bin/env\necho STDIN\n/bin/cat\necho err >&2\nexit 3",
        );
        let finished = run(Program {
            path: &path,
            args: &[],
            env: &["A=1".into(), "B=two words".into()],
            limit: Duration::from_secs(20),
            max_stdout: 4096,
        })
        .unwrap();
        let out = String::from_utf8(finished.stdout.clone()).unwrap();
        // The shell exports PWD itself.
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("PWD=")).collect();
        assert_eq!(lines, ["A=1", "B=two words", "STDIN"]);
        assert_eq!(finished.failure().as_deref(), Some("exit code 3"));
        assert_eq!(finished.message(), "err");
        assert_eq!(finished.failure_message(), "err");
    }

    /// The descriptors an `ls -l` of a `fd` directory shows, with their targets.
    fn listed_fds(listing: &str) -> Vec<(u32, String)> {
        listing
            .lines()
            .filter_map(|l| l.rsplit_once(" -> "))
            .filter_map(|(head, target)| {
                Some((head.rsplit(' ').next()?.parse().ok()?, target.into()))
            })
            .collect()
    }

    /// A descriptor the caller holds without close-on-exec (an engine's `--preserve-fds`, a
    /// caller's open file) does not reach the program: it gets 0, 1 and 2, and nothing else but the
    /// directory its own listing opens.
    #[test]
    fn only_descriptors_0_to_2_reach_the_program() {
        let t = tempfile::tempdir().unwrap();
        let inherited = t.path().join("inherited");
        std::fs::write(&inherited, "").unwrap();
        let open = nix::fcntl::open(&inherited, OFlag::O_RDONLY, Mode::empty()).unwrap();
        let got = run(Program {
            path: Path::new("/bin/ls"),
            args: &["-l".into(), "/proc/self/fd/".into()],
            env: &[],
            limit: Duration::from_secs(20),
            max_stdout: 64 << 10,
        });
        drop(open);
        let finished = got.unwrap();
        assert_eq!(finished.failure(), None, "{}", finished.message());
        let listing = String::from_utf8(finished.stdout).unwrap();
        let fds = listed_fds(&listing);
        let numbers: Vec<u32> = fds.iter().map(|(fd, _)| *fd).collect();
        assert_eq!(numbers, [0, 1, 2, 3], "{listing}");
        assert_eq!(fds[0].1, "/dev/null", "{listing}");
        assert!(
            fds[3].1.starts_with("/proc/") && fds[3].1.ends_with("/fd"),
            "only the listing's own directory may be open: {listing}"
        );
    }

    /// A link to `sleep` inside `dir`: every process running it names `dir` in its command line.
    fn sleeper(dir: &Path) -> PathBuf {
        let path = dir.join("sleeper");
        std::os::unix::fs::symlink("/bin/sleep", &path).unwrap();
        path
    }

    /// The processes whose command line names `marker`, killed (so that a failing test leaves
    /// nothing behind), as `pid: command line`.
    fn survivors(marker: &Path) -> Vec<String> {
        let found = devinject_testkit::processes::naming(marker.as_os_str().as_encoded_bytes());
        for (pid, _) in &found {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        found
            .into_iter()
            .map(|(pid, cmdline)| format!("{pid}: {cmdline}"))
            .collect()
    }

    /// Runs `body` as a script in `dir` under `limit`, timed.
    fn run_script(
        dir: &Path,
        body: &str,
        limit: Duration,
    ) -> (Result<Finished, ChildError>, Duration) {
        let path = script(dir, "program", body);
        let start = Instant::now();
        let got = run(Program {
            path: &path,
            args: &[],
            env: &[],
            limit,
            max_stdout: 4096,
        });
        (got, start.elapsed())
    }

    /// A program that exits at once but leaves a helper holding its stdout, detached with `setsid`,
    /// finishes at once, and the helper ends with it.
    #[test]
    fn a_detached_helper_holding_stdout_ends_with_the_program() {
        let t = tempfile::tempdir().unwrap();
        let sleeper = sleeper(t.path());
        let (got, took) = run_script(
            t.path(),
            &format!("setsid {} 300 &\necho started", sleeper.display()),
            Duration::from_secs(20),
        );
        let left = survivors(t.path());
        let finished = got.unwrap();
        assert_eq!(finished.failure(), None, "{}", finished.message());
        assert_eq!(finished.stdout, b"started\n");
        assert!(took < Duration::from_secs(10), "took {took:?}");
        assert_eq!(left, Vec::<String>::new(), "left running");
    }

    /// A program killed at its deadline takes with it what it started, here a child that hangs and
    /// a grandchild detached by a double fork and `setsid`.
    #[test]
    fn a_program_killed_at_its_deadline_takes_its_detached_children() {
        let t = tempfile::tempdir().unwrap();
        let sleeper = sleeper(t.path());
        let s = sleeper.display();
        let (got, took) = run_script(
            t.path(),
            &format!("(setsid {s} 300 >/dev/null 2>&1 &)\n{s} 300"),
            Duration::from_millis(500),
        );
        let left = survivors(t.path());
        let err = got.unwrap_err();
        assert!(matches!(err, ChildError::Timeout { .. }), "{err}");
        assert!(took < Duration::from_secs(10), "took {took:?}");
        assert_eq!(left, Vec::<String>::new(), "left running");
    }

    /// A program that closes its output and hangs is killed at its deadline all the same, and
    /// the outcome is the timeout it is.
    #[test]
    fn a_program_that_closes_its_output_and_hangs_times_out() {
        let t = tempfile::tempdir().unwrap();
        let sleeper = sleeper(t.path());
        let (got, took) = run_script(
            t.path(),
            &format!("exec >/dev/null 2>&1\nexec {} 300", sleeper.display()),
            Duration::from_millis(300),
        );
        let left = survivors(t.path());
        let err = got.unwrap_err();
        assert!(
            matches!(err, ChildError::Timeout { limit } if limit == Duration::from_millis(300)),
            "{err}"
        );
        assert!(took < Duration::from_secs(10), "took {took:?}");
        assert_eq!(left, Vec::<String>::new(), "left running");
    }

    #[test]
    fn a_nul_byte_is_refused_before_the_fork() {
        let err = run(Program {
            path: Path::new("/bin/true"),
            args: &[],
            env: &["A=\0".into()],
            limit: Duration::from_secs(1),
            max_stdout: 0,
        })
        .unwrap_err();
        assert!(matches!(err, ChildError::Argument { .. }), "{err}");
    }

    #[test]
    fn runnable_paths() {
        let t = tempfile::tempdir().unwrap();
        let plain = t.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        assert_eq!(check_runnable(Path::new("/bin/sh")), Ok(()));
        assert_eq!(
            check_runnable(&t.path().join("nowhere")),
            Err(Unrunnable::Missing)
        );
        // Only absence is "missing": a path through a regular file (ENOTDIR) is unusable, with
        // the system's words.
        match check_runnable(&plain.join("x")) {
            Err(Unrunnable::Unusable(why)) => assert!(why.contains("directory"), "{why}"),
            other => panic!("a path through a file: {other:?}"),
        }
        for (path, problem) in [
            (plain.as_path(), "it is not executable"),
            (t.path(), "it is not a regular file"),
            (Path::new("bin/sh"), "the path is not absolute"),
        ] {
            assert_eq!(
                check_runnable(path),
                Err(Unrunnable::Unusable(problem.into()))
            );
        }
    }
}
