//! The real [`GrantSource`]: `devinject-podresources`, executed only when a Kubernetes
//! container asks for devices.
//!
//! The gRPC client (tonic, tokio, hyper) would make a binary that runs for every container half
//! as large again (docs/policy.md has the figures), so it lives in the helper, and the hook and
//! the shim pay for it only when they need the kubelet's answer. The helper runs
//! - by absolute path (the configured `pod_resources_helper`, else next to the running hook or
//!   shim, where the installer puts all three), checked before the fork so that a missing one
//!   is named with the fix;
//! - with an empty environment and stdin from `/dev/null`: nothing of the container's or the
//!   runtime's environment reaches it;
//! - under a deadline of `pod_resources_timeout_ms` plus [`MARGIN`] (its own deadline for the
//!   kubelet is `pod_resources_timeout_ms`, so normally it answers or says why first), after
//!   which it is killed; it also dies with the hook (`PR_SET_PDEATHSIG`, see `sys::fork_run`),
//!   and an alarm armed before `exec` ends it should it close its output and hang;
//! - with its output read within bounds: [`MAX_ANSWER_BYTES`] of stdout (more kills it), and
//!   [`MAX_STDERR_BYTES`] of stderr kept.
//!
//! The arguments, exit codes and answer are defined once, in `devinject-podresources-protocol`.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use devinject_podresources_protocol::{
    Answer, AnswerError, HelperExit, Request, HELPER_NAME, MAX_ANSWER_BYTES,
};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use super::GrantSource;
use crate::sys;

/// How much longer than the kubelet's deadline the helper may take: process start and exit.
pub const MARGIN: Duration = Duration::from_millis(500);

/// The most of the helper's stderr kept for messages.
pub const MAX_STDERR_BYTES: usize = 16 << 10;

/// The child's exit code when the helper could not be executed.
const EXEC_FAILED: i32 = 127;

/// The kubelet's pod-resources API, asked through the helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResourcesHelper {
    /// The helper; `None`: `devinject-podresources` next to the running executable.
    pub path: Option<PathBuf>,
    /// The kubelet's socket.
    pub socket: PathBuf,
    /// The kubelet's deadline; the helper gets [`MARGIN`] more.
    pub timeout: Duration,
}

/// Why the kubelet's answer could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The helper could not ask the kubelet; its message says why (the socket is missing, the
    /// kubelet did not answer in time, ...).
    #[error("{message}")]
    Kubelet {
        /// Which kind of failure the helper reported.
        kind: HelperExit,
        /// The helper's message.
        message: String,
    },
    /// Nothing at the helper's path.
    #[error("the pod-resources helper {path} does not exist: install {HELPER_NAME} next to devinject-hook and devinject-runtime (the installer does), or set `pod_resources_helper` in the devinject config to where it is")]
    HelperMissing {
        /// The path looked at.
        path: PathBuf,
    },
    /// Something is at the path, but it cannot be run.
    #[error("cannot run the pod-resources helper {path}: {problem}: install {HELPER_NAME} there with mode 0755, or set `pod_resources_helper` in the devinject config to where it is")]
    HelperUnusable {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The running executable's directory is unknown, and no path was configured.
    #[error("cannot find the pod-resources helper next to the running executable ({source}): set `pod_resources_helper` in the devinject config")]
    NoDefaultPath {
        /// Why `/proc/self/exe` could not be read.
        source: std::io::Error,
    },
    /// An argument holds a NUL byte, which no command line can carry.
    #[error("cannot pass {arg:?} to the pod-resources helper {path}: it contains a NUL byte")]
    Argument {
        /// The helper.
        path: PathBuf,
        /// The argument.
        arg: String,
    },
    /// Pipes, fork or wait failed.
    #[error("cannot run the pod-resources helper {path}: {step}: {errno}")]
    Spawn {
        /// The helper.
        path: PathBuf,
        /// The step that failed.
        step: &'static str,
        /// The system error.
        errno: Errno,
    },
    /// The helper outlived its deadline and was killed.
    #[error("the pod-resources helper {path} did not finish within {} ms and was killed (`pod_resources_timeout_ms` is {} ms): is the node overloaded?", limit.as_millis(), limit.saturating_sub(MARGIN).as_millis())]
    Timeout {
        /// The helper.
        path: PathBuf,
        /// The deadline it had.
        limit: Duration,
    },
    /// The helper wrote more than an answer can be, and was killed.
    #[error("the pod-resources helper {path} wrote more than {MAX_ANSWER_BYTES} bytes and was killed: check that it is {HELPER_NAME} from the same release as devinject-hook")]
    Oversize {
        /// The helper.
        path: PathBuf,
    },
    /// The helper failed in a way that is not about the kubelet.
    #[error("the pod-resources helper {path} failed ({status}): {output}: check that it is {HELPER_NAME} from the same release as devinject-hook")]
    Failed {
        /// The helper.
        path: PathBuf,
        /// Its exit code or signal.
        status: String,
        /// What it wrote on stderr.
        output: String,
    },
    /// The helper succeeded but its answer does not parse.
    #[error("the pod-resources helper {path} gave an answer this hook cannot read: {source}: install {HELPER_NAME} from the same release as devinject-hook")]
    BadAnswer {
        /// The helper.
        path: PathBuf,
        /// What is wrong with the answer.
        source: AnswerError,
    },
}

impl GrantSource for PodResourcesHelper {
    fn lookup(&self, namespace: &str, pod: &str, container: &str) -> Result<Answer, LookupError> {
        let path = match &self.path {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .map(|exe| exe.with_file_name(HELPER_NAME))
                .map_err(|source| LookupError::NoDefaultPath { source })?,
        };
        check_runnable(&path)?;
        let request = Request {
            socket: self.socket.clone(),
            timeout: self.timeout,
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            container: container.to_owned(),
        };
        let limit = self.timeout + MARGIN;
        let started = Instant::now();
        let finished = execute(&path, &request.to_args(), limit)?;
        tracing::debug!(helper = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, status = ?finished.status, "pod-resources helper finished");
        interpret(&path, limit, finished)
    }
}

/// The helper must be an absolute path to an executable regular file.
fn check_runnable(path: &Path) -> Result<(), LookupError> {
    use std::os::unix::fs::PermissionsExt;
    let unusable = |problem: String| LookupError::HelperUnusable {
        path: path.to_owned(),
        problem,
    };
    if !path.is_absolute() {
        // A relative path would be looked up in the runtime's working directory, the bundle.
        return Err(unusable("the path is not absolute".into()));
    }
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(LookupError::HelperMissing {
            path: path.to_owned(),
        }),
        Err(e) => Err(unusable(e.to_string())),
        Ok(m) if !m.is_file() => Err(unusable("it is not a regular file".into())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Err(unusable("it is not executable".into()))
        }
        Ok(_) => Ok(()),
    }
}

/// What the helper left.
#[derive(Debug)]
struct Finished {
    status: WaitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// How reading the helper's output ended.
enum Collected {
    /// Both pipes reached end of file.
    Closed { stdout: Vec<u8>, stderr: Vec<u8> },
    /// The deadline passed first.
    TimedOut,
    /// Stdout went past [`MAX_ANSWER_BYTES`].
    Oversize,
}

/// Runs `path` with `args`, an empty environment and stdin from `/dev/null`, reads its output
/// within bounds, and reaps it; kills it at `limit`.
fn execute(path: &Path, args: &[OsString], limit: Duration) -> Result<Finished, LookupError> {
    let spawn = |step: &'static str| {
        move |errno| LookupError::Spawn {
            path: path.to_owned(),
            step,
            errno,
        }
    };
    let cstr = |s: &OsStr| {
        CString::new(s.as_bytes()).map_err(|_| LookupError::Argument {
            path: path.to_owned(),
            arg: s.to_string_lossy().into_owned(),
        })
    };
    let mut argv = vec![cstr(path.as_os_str())?];
    for a in args {
        argv.push(cstr(a)?);
    }
    let exec_failed = format!("cannot execute {}: ", path.display());
    let null = nix::fcntl::open(
        "/dev/null",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(spawn("open /dev/null"))?;
    let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(spawn("pipe"))?;
    let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(spawn("pipe"))?;
    // Whole seconds, rounded up: the backstop never fires before the deadline below.
    let alarm_secs = u32::try_from(limit.as_secs() + 1).unwrap_or(u32::MAX);
    let deadline = Instant::now() + limit;
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
        let env: [CString; 0] = [];
        let Err(errno) = nix::unistd::execve(&argv[0], &argv, &env);
        let stderr = std::io::stderr();
        let _ = nix::unistd::write(stderr.as_fd(), exec_failed.as_bytes());
        let _ = nix::unistd::write(stderr.as_fd(), errno.desc().as_bytes());
        EXEC_FAILED
    })
    .map_err(spawn("fork"))?;
    drop((null, out_w, err_w));
    let (stdout, stderr) = match collect(&out_r, &err_r, deadline) {
        Ok(Collected::Closed { stdout, stderr }) => (stdout, stderr),
        Ok(Collected::TimedOut) => {
            return Err(killed(
                child,
                LookupError::Timeout {
                    path: path.to_owned(),
                    limit,
                },
            ))
        }
        Ok(Collected::Oversize) => {
            return Err(killed(
                child,
                LookupError::Oversize {
                    path: path.to_owned(),
                },
            ))
        }
        Err(errno) => return Err(killed(child, spawn("read its output")(errno))),
    };
    let status = wait(child).map_err(spawn("wait"))?;
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

/// Kills and reaps the helper, then returns `err`.
fn killed(child: Pid, err: LookupError) -> LookupError {
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

/// Reads both pipes until both are closed, the deadline passes, or stdout is too long.
fn collect(out: &OwnedFd, err: &OwnedFd, deadline: Instant) -> nix::Result<Collected> {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut open = [true, true];
    let mut buf = [0u8; 8192];
    while open.contains(&true) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Collected::TimedOut);
        }
        let fds = [out, err];
        let which: Vec<usize> = (0..2).filter(|i| open[*i]).collect();
        let mut set: Vec<PollFd<'_>> = which
            .iter()
            .map(|i| PollFd::new(fds[*i].as_fd(), PollFlags::POLLIN))
            .collect();
        // Rounded up to the next millisecond so that the deadline is reached, not spun on.
        let timeout =
            PollTimeout::try_from(left + Duration::from_micros(999)).unwrap_or(PollTimeout::MAX);
        match nix::poll::poll(&mut set, timeout) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
        let ready: Vec<usize> = which
            .iter()
            .zip(&set)
            .filter(|(_, p)| p.revents().is_some_and(|r| !r.is_empty()))
            .map(|(i, _)| *i)
            .collect();
        for i in ready {
            let n = match nix::unistd::read(fds[i], &mut buf) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                open[i] = false;
            } else if i == 0 {
                if stdout.len() + n > MAX_ANSWER_BYTES {
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

/// The helper's stderr as one line.
fn message(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join(" | ")
}

/// The answer, or the error the exit status and stderr describe.
fn interpret(path: &Path, limit: Duration, f: Finished) -> Result<Answer, LookupError> {
    let output = message(&f.stderr);
    let failed = |status: String| LookupError::Failed {
        path: path.to_owned(),
        status,
        output: if output.is_empty() {
            "no message".to_owned()
        } else {
            output.clone()
        },
    };
    match f.status {
        WaitStatus::Exited(_, 0) => {
            Answer::parse(&f.stdout).map_err(|source| LookupError::BadAnswer {
                path: path.to_owned(),
                source,
            })
        }
        WaitStatus::Exited(_, code) => match HelperExit::from_code(code) {
            Some(kind) if kind.is_kubelet_failure() => Err(LookupError::Kubelet {
                kind,
                message: if output.is_empty() {
                    format!(
                        "the pod-resources helper {} exited with code {code} ({kind:?}) without a message",
                        path.display()
                    )
                } else {
                    output
                },
            }),
            _ => Err(failed(format!("exit code {code}"))),
        },
        WaitStatus::Signaled(_, Signal::SIGALRM, _) => Err(LookupError::Timeout {
            path: path.to_owned(),
            limit,
        }),
        WaitStatus::Signaled(_, sig, _) => Err(failed(format!("killed by {sig}"))),
        other => Err(failed(format!("{other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use devinject_podresources_protocol::{PodEntry, Rpc};

    use super::*;

    /// A fake helper: a shell script with `body`.
    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn helper(path: &Path, timeout_ms: u64) -> PodResourcesHelper {
        PodResourcesHelper {
            path: Some(path.to_owned()),
            socket: PathBuf::from("/k/kubelet.sock"),
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    fn ask(path: &Path) -> Result<Answer, LookupError> {
        helper(path, 2000).lookup("ml", "trainer", "main")
    }

    /// Feeds `stdout` and `stderr` to [`collect`] through pipes, from writer threads.
    fn collect_bytes(stdout: usize, stderr: usize) -> Collected {
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
        let got = collect(&out_r, &err_r, Instant::now() + Duration::from_secs(20)).unwrap();
        drop((out_r, err_r));
        a.join().unwrap();
        b.join().unwrap();
        got
    }

    /// The bounds hold exactly: an answer of [`MAX_ANSWER_BYTES`] is read whole, one byte more
    /// is oversize; stderr keeps its first [`MAX_STDERR_BYTES`].
    #[test]
    fn output_bounds_are_exact() {
        match collect_bytes(MAX_ANSWER_BYTES, MAX_STDERR_BYTES + 100) {
            Collected::Closed { stdout, stderr } => {
                assert_eq!(stdout.len(), MAX_ANSWER_BYTES);
                assert_eq!(stderr.len(), MAX_STDERR_BYTES);
            }
            _ => panic!("an answer at the limit must be read"),
        }
        assert!(matches!(
            collect_bytes(MAX_ANSWER_BYTES + 1, 0),
            Collected::Oversize
        ));
        match collect_bytes(10, 10) {
            Collected::Closed { stdout, stderr } => {
                assert_eq!((stdout.len(), stderr.len()), (10, 10))
            }
            _ => panic!("small output must be read"),
        }
    }

    const ANSWER: &str = r#"{"version":1,"answered_by":"Get","pods":[{"container":"found","devices":{"devinject.io/demo":["0"]}}]}"#;

    // The scripts are written once, before any runs: a script still open for writing while
    // another test thread forks cannot be executed (ETXTBSY).
    #[test]
    fn fake_helpers() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let record = d.join("record");
        let answers = script(
            d,
            "answers",
            &format!(
                "{{ printf '%s\\n' \"$@\"; echo ENV; /usr/bin/env; echo STDIN; /bin/cat; }} > {}\necho '{ANSWER}'",
                record.display()
            ),
        );
        let garbage = script(d, "garbage", "echo 'not json'");
        let newer = script(
            d,
            "newer",
            r#"echo '{"version":2,"answered_by":"Get","pods":[],"claims":[]}'"#,
        );
        let oversize = script(d, "oversize", "exec /usr/bin/yes '\"0\",'");
        let socket_missing = script(
            d,
            "socket-missing",
            "echo 'the kubelet'\"'\"'s pod-resources socket /k/kubelet.sock does not exist: is the kubelet running?' >&2\nexit 3",
        );
        let silent = script(d, "silent", "exit 6");
        let crashed = script(d, "crashed", "echo 'oops' >&2\nkill -TERM $$");
        let usage = script(d, "usage", "echo 'devinject-podresources: unknown argument \"--pod=x\"' >&2\necho 'usage: ...' >&2\nexit 2");
        let hangs = script(d, "hangs", "exec /bin/sleep 30");
        let chatty = script(
            d,
            "chatty",
            &format!("/usr/bin/head -c 100000 /dev/zero >&2\necho '{ANSWER}'"),
        );
        let not_exec = d.join("not-executable");
        std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
        let not_elf = d.join("not-elf");
        std::fs::write(&not_elf, "\x7fELF garbage").unwrap();
        std::fs::set_permissions(&not_elf, std::fs::Permissions::from_mode(0o755)).unwrap();

        // The answer, and exactly the documented arguments, no environment, empty stdin.
        let a = ask(&answers).unwrap();
        assert_eq!(a.answered_by, Rpc::Get);
        assert!(matches!(&a.pods[..], [PodEntry::Found { .. }]), "{a:?}");
        let seen = std::fs::read_to_string(&record).unwrap();
        // The shell exports PWD itself.
        let seen: Vec<&str> = seen.lines().filter(|l| !l.starts_with("PWD=")).collect();
        assert_eq!(
            seen,
            [
                "--socket=/k/kubelet.sock",
                "--timeout-ms=2000",
                "--namespace=ml",
                "--pod=trainer",
                "--container=main",
                "ENV",
                "STDIN"
            ]
        );

        let err = ask(&garbage).unwrap_err();
        assert!(matches!(err, LookupError::BadAnswer { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&garbage.display().to_string())
                && text.contains("cannot read")
                && text.contains("same release"),
            "{text}"
        );
        let err = ask(&newer).unwrap_err();
        assert!(err.to_string().contains("version 2"), "{err}");

        let err = ask(&oversize).unwrap_err();
        assert!(matches!(err, LookupError::Oversize { .. }), "{err}");
        assert!(err.to_string().contains("more than 1048576 bytes"), "{err}");

        // The kubelet's failures pass through as the helper worded them.
        let err = ask(&socket_missing).unwrap_err();
        assert!(
            matches!(
                err,
                LookupError::Kubelet {
                    kind: HelperExit::Socket,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "the kubelet's pod-resources socket /k/kubelet.sock does not exist: is the kubelet running?"
        );
        let err = ask(&silent).unwrap_err();
        assert!(
            err.to_string()
                .contains("code 6 (Timeout) without a message"),
            "{err}"
        );

        let err = ask(&crashed).unwrap_err();
        assert!(matches!(err, LookupError::Failed { .. }), "{err}");
        assert!(
            err.to_string().contains("(killed by SIGTERM): oops"),
            "{err}"
        );
        let err = ask(&usage).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(
                "(exit code 2): devinject-podresources: unknown argument \"--pod=x\" | usage: ..."
            ) && text.contains("same release"),
            "{text}"
        );

        // Killed at the deadline plus the margin, not when it would have finished.
        let start = Instant::now();
        let err = helper(&hangs, 200)
            .lookup("ml", "trainer", "main")
            .unwrap_err();
        let took = start.elapsed();
        assert!(matches!(err, LookupError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("within 700 ms"), "{err}");
        assert!(took < Duration::from_secs(5), "{took:?}");

        // Plenty of stderr with an answer: the answer counts, stderr is bounded.
        assert!(ask(&chatty).is_ok());

        let missing = d.join("nowhere/devinject-podresources");
        let err = ask(&missing).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LookupError::HelperMissing { .. }), "{text}");
        assert!(
            text.contains(&missing.display().to_string())
                && text.contains("does not exist")
                && text.contains("pod_resources_helper"),
            "{text}"
        );
        for (path, problem) in [
            (&not_exec, "not executable"),
            (&d.to_path_buf(), "not a regular file"),
            (&PathBuf::from("bin/devinject-podresources"), "not absolute"),
        ] {
            let err = ask(path).unwrap_err();
            assert!(matches!(err, LookupError::HelperUnusable { .. }), "{err}");
            assert!(err.to_string().contains(problem), "{err}");
        }
        let err = ask(&not_elf).unwrap_err();
        assert!(
            err.to_string().contains("(exit code 127): cannot execute"),
            "{err}"
        );
        let err = helper(&answers, 2000)
            .lookup("ml", "a\0b", "main")
            .unwrap_err();
        assert!(matches!(err, LookupError::Argument { .. }), "{err}");
    }

    #[test]
    fn the_default_is_next_to_the_running_executable() {
        let h = PodResourcesHelper {
            path: None,
            socket: PathBuf::from("/k/kubelet.sock"),
            timeout: Duration::from_millis(100),
        };
        let exe = std::env::current_exe().unwrap();
        // The test binary has no helper next to it in deps/.
        let err = h.lookup("ml", "p", "c").unwrap_err();
        let expected = exe.with_file_name(HELPER_NAME);
        assert!(
            err.to_string().contains(&expected.display().to_string()),
            "{err}"
        );
    }
}
