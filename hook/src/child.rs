//! Running a host program from the hook or the shim: the pod-resources helper and a profile's
//! prepare step; and, with [`call`], work the hook does in a forked child without `exec` (the
//! injection in the container's mount namespace), under the same deadline and bounds.
//!
//! Both run as root for a container, so both run the same way:
//! - by absolute path, checked before the fork ([`check_runnable`]) so that a missing program is
//!   named with its fix by the caller;
//! - with exactly the environment the caller gives (nothing of the container's or the runtime's
//!   reaches it) and stdin from `/dev/null`;
//! - under a deadline, after which it is killed; it also dies with its parent
//!   (`PR_SET_PDEATHSIG`, see `sys::fork_run`), and an alarm armed before `exec` ends it should
//!   it close its output and hang (reported as the timeout it is, [`ChildError::Timeout`]);
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
    // Whole seconds, rounded up: the backstop never fires before the deadline below.
    let alarm_secs = u32::try_from(program.limit.as_secs() + 1).unwrap_or(u32::MAX);
    let deadline = Instant::now() + program.limit;
    let child = sys::fork_run(|| {
        // Only async-signal-safe calls from here on: the parent may have had other threads
        // (tests) holding locks at the fork.
        let redirected = nix::unistd::dup2_stdin(&null)
            .and_then(|()| nix::unistd::dup2_stdout(&out_w))
            .and_then(|()| nix::unistd::dup2_stderr(&err_w));
        if redirected.is_err() {
            return EXEC_FAILED;
        }
        nix::unistd::alarm::set(alarm_secs);
        let Err(errno) = nix::unistd::execve(&argv[0], &argv, &env);
        let stderr = std::io::stderr();
        let _ = nix::unistd::write(stderr.as_fd(), exec_failed.as_bytes());
        let _ = nix::unistd::write(stderr.as_fd(), errno.desc().as_bytes());
        EXEC_FAILED
    })
    .map_err(spawn("fork"))?;
    drop((null, out_w, err_w));
    let (stdout, stderr) = match collect(Some(&out_r), &err_r, deadline, program.max_stdout) {
        Ok(Collected::Closed { stdout, stderr }) => (stdout, stderr),
        Ok(Collected::TimedOut) => {
            return Err(killed(
                child,
                ChildError::Timeout {
                    limit: program.limit,
                },
            ))
        }
        Ok(Collected::Oversize) => {
            return Err(killed(
                child,
                ChildError::Oversize {
                    max: program.max_stdout,
                },
            ))
        }
        Err(errno) => return Err(killed(child, spawn("read its output")(errno))),
    };
    let status = wait(child).map_err(spawn("wait"))?;
    if let WaitStatus::Signaled(_, Signal::SIGALRM, _) = status {
        // The backstop armed before `exec` ended it: it outlived its deadline.
        return Err(ChildError::Timeout {
            limit: program.limit,
        });
    }
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
    let child = sys::fork_run(|| work(&msg_w)).map_err(spawn("fork"))?;
    drop(msg_w);
    // The message is read as a program's stderr is: its first bytes kept, the rest drained.
    let message = match collect(None, &msg_r, deadline, 0) {
        Ok(Collected::Closed { stderr, .. }) => stderr,
        Ok(Collected::TimedOut) => return Err(killed(child, ChildError::Timeout { limit })),
        // Only stdout has a bound that kills, and none is read here.
        Ok(Collected::Oversize) => return Err(killed(child, ChildError::Oversize { max: 0 })),
        Err(errno) => return Err(killed(child, spawn("read its message")(errno))),
    };
    let status = wait(child).map_err(spawn("wait"))?;
    Ok(Called { status, message })
}

/// Kills and reaps the child, then returns `err`.
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

/// Reads stdout (when there is one) and stderr until both are closed, the deadline passes, or
/// stdout goes past `max_stdout`.
fn collect(
    out: Option<&OwnedFd>,
    err: &OwnedFd,
    deadline: Instant,
    max_stdout: usize,
) -> nix::Result<Collected> {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let fds = [out, Some(err)];
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

    /// A shell script `dir/name` running `body`, executable. Write every script a test needs
    /// before it runs any: a script still open for writing while another test thread forks
    /// cannot be executed (ETXTBSY).
    pub(crate) fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

#[cfg(test)]
mod tests {
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
            let got = collect(Some(&out_r), &err_r, deadline, 16).unwrap();
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

    /// The descriptors from 3 that an `ls -l` of a `fd` directory shows leading to `/dev/null`.
    fn dev_null_fds(listing: &str) -> Vec<u32> {
        listing
            .lines()
            .filter_map(|l| l.rsplit_once(" -> "))
            .filter(|(_, target)| *target == "/dev/null")
            .filter_map(|(head, _)| head.rsplit(' ').next()?.parse().ok())
            .filter(|&fd| fd >= 3)
            .collect()
    }

    /// The program gets stdin, stdout and stderr and nothing else of ours: the `/dev/null` that
    /// becomes its stdin is opened close-on-exec, so it does not stay open a second time.
    #[test]
    fn only_the_standard_descriptors_reach_the_program() {
        let ours: Vec<u32> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == Path::new("/dev/null")))
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        let finished = run(Program {
            path: Path::new("/bin/ls"),
            args: &["-l".into(), "/proc/self/fd/".into()],
            env: &[],
            limit: Duration::from_secs(20),
            max_stdout: 64 << 10,
        })
        .unwrap();
        assert_eq!(finished.failure(), None, "{}", finished.message());
        let listing = String::from_utf8(finished.stdout).unwrap();
        assert!(listing.contains(" 0 -> /dev/null"), "{listing}");
        let extra: Vec<u32> = dev_null_fds(&listing)
            .into_iter()
            .filter(|fd| !ours.contains(fd))
            .collect();
        assert_eq!(extra, Vec::<u32>::new(), "{listing}");
    }

    /// A program the alarm ends (here it raises SIGALRM itself) outlived its deadline.
    #[test]
    fn a_program_ended_by_the_alarm_timed_out() {
        let t = tempfile::tempdir().unwrap();
        let path = script(t.path(), "alarmed", "kill -ALRM $$");
        let err = run(Program {
            path: &path,
            args: &[],
            env: &[],
            limit: Duration::from_secs(20),
            max_stdout: 0,
        })
        .unwrap_err();
        assert!(
            matches!(err, ChildError::Timeout { limit } if limit == Duration::from_secs(20)),
            "{err}"
        );
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
