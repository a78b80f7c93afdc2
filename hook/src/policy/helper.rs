//! The real [`GrantSource`]: `devinject-podresources`, executed only when a Kubernetes
//! container asks for devices, the way the hook runs any host program ([`crate::child`]).
//!
//! The gRPC client lives in the helper (docs/policy.md says why and what it costs), so the hook
//! and the shim link none and pay for it only when they need the kubelet's answer. The helper
//! runs
//! - by absolute path (the configured `pod_resources_helper`, else next to the running hook or
//!   shim, where the installer puts all three), checked before the fork so that a missing one
//!   is named with the fix;
//! - with an empty environment and stdin from `/dev/null`: nothing of the container's or the
//!   runtime's environment reaches it;
//! - under a deadline of `pod_resources_timeout_ms` plus [`MARGIN`] (its own deadline for the
//!   kubelet is `pod_resources_timeout_ms`, so normally it answers or says why first), after
//!   which it is killed with everything it started (it runs as pid 1 of a PID namespace of its
//!   own, see [`crate::child`]), also should it close its output and hang; it also dies with the
//!   hook (`PR_SET_PDEATHSIG`);
//! - with its output read within bounds: [`MAX_ANSWER_BYTES`] of stdout (more kills it), and
//!   [`child::MAX_STDERR_BYTES`] of stderr kept.
//!
//! The arguments, exit codes and answer are defined once, in `devinject-podresources-protocol`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use devinject_hostconfig::HostConfig;
use devinject_podresources_protocol::{
    Answer, AnswerError, HelperExit, Request, HELPER_NAME, MAX_ANSWER_BYTES,
};
use nix::errno::Errno;
use nix::sys::wait::WaitStatus;

use super::GrantSource;
use crate::child::{self, ChildError, Finished, Program, Unrunnable};

/// How much longer than the kubelet's deadline the helper may take: process start and exit.
pub const MARGIN: Duration = Duration::from_millis(500);

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

impl PodResourcesHelper {
    /// The helper, socket and deadline the host config names (`pod_resources_helper`,
    /// `pod_resources_socket`, `pod_resources_timeout_ms`). Nothing runs until a lookup.
    pub fn from_config(config: &HostConfig) -> Self {
        Self {
            path: config.pod_resources_helper.clone(),
            socket: config.pod_resources_socket.clone(),
            timeout: Duration::from_millis(config.pod_resources_timeout_ms),
        }
    }
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
        interpret(&path, finished)
    }
}

/// The helper must be an absolute path to an executable regular file.
fn check_runnable(path: &Path) -> Result<(), LookupError> {
    child::check_runnable(path).map_err(|e| match e {
        Unrunnable::Missing => LookupError::HelperMissing {
            path: path.to_owned(),
        },
        Unrunnable::Unusable(problem) => LookupError::HelperUnusable {
            path: path.to_owned(),
            problem,
        },
    })
}

/// Runs the helper with `args`, an empty environment and stdin from `/dev/null`
/// ([`child::run`]); kills it at `limit` or when it writes more than an answer can be.
fn execute(path: &Path, args: &[OsString], limit: Duration) -> Result<Finished, LookupError> {
    child::run(Program {
        path,
        args,
        env: &[],
        limit,
        max_stdout: MAX_ANSWER_BYTES,
    })
    .map_err(|e| match e {
        ChildError::Argument { arg } => LookupError::Argument {
            path: path.to_owned(),
            arg,
        },
        ChildError::Spawn { step, errno } => LookupError::Spawn {
            path: path.to_owned(),
            step,
            errno,
        },
        ChildError::Timeout { limit } => LookupError::Timeout {
            path: path.to_owned(),
            limit,
        },
        ChildError::Oversize { .. } => LookupError::Oversize {
            path: path.to_owned(),
        },
    })
}

/// The answer, or the error the exit status and stderr describe.
fn interpret(path: &Path, f: Finished) -> Result<Answer, LookupError> {
    let output = f.message();
    let failed = |status: String| LookupError::Failed {
        path: path.to_owned(),
        status,
        output: f.failure_message(),
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
        _ => Err(failed(f.failure().unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use devinject_podresources_protocol::{PodEntry, Rpc};
    use nix::sys::signal::Signal;

    use super::*;
    use crate::child::test_support::{script, signal_when_running};

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
        let crashed_sleep = d.join("crashed-sleep");
        std::os::unix::fs::symlink("/bin/sleep", &crashed_sleep).unwrap();
        let crashed = script(
            d,
            "crashed",
            &format!("echo 'oops' >&2\nexec {} 30", crashed_sleep.display()),
        );
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

        // Ended by a signal: SIGKILL from outside, the one an init of its namespace cannot ignore.
        let killer = signal_when_running(crashed_sleep, Signal::SIGKILL);
        let err = ask(&crashed).unwrap_err();
        killer.join().unwrap();
        assert!(matches!(err, LookupError::Failed { .. }), "{err}");
        assert!(
            err.to_string().contains("(killed by SIGKILL): oops"),
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

    /// A helper that closed its output and hangs past the deadline timed out; any other
    /// signal is a failure named by the signal.
    #[test]
    fn a_helper_that_closes_its_output_and_hangs_timed_out() {
        // A timeout naming the deadline (the configured 200 ms plus the margin).
        let t = tempfile::tempdir().unwrap();
        let hangs = script(
            t.path(),
            "hangs-quietly",
            "exec >/dev/null 2>&1\nexec /bin/sleep 30",
        );
        let start = Instant::now();
        let err = helper(&hangs, 200)
            .lookup("ml", "trainer", "main")
            .unwrap_err();
        assert!(matches!(err, LookupError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("within 700 ms"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
        // Another signal is a failure naming it.
        let path = Path::new("/opt/devinject/devinject-podresources");
        let killed = Finished {
            status: WaitStatus::Signaled(nix::unistd::Pid::from_raw(1), Signal::SIGKILL, false),
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        let err = interpret(path, killed).unwrap_err();
        assert!(matches!(err, LookupError::Failed { .. }), "{err}");
        assert!(
            err.to_string().contains("(killed by SIGKILL): no message"),
            "{err}"
        );
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

    #[test]
    fn built_from_the_host_config() {
        let p = Path::new("/c.toml");
        let c = HostConfig::parse(
            "pod_resources_socket = \"/k/pr.sock\"\npod_resources_timeout_ms = 50\n",
            p,
        )
        .unwrap();
        let h = PodResourcesHelper::from_config(&c);
        assert_eq!(h.socket, Path::new("/k/pr.sock"));
        assert_eq!(h.timeout, Duration::from_millis(50));
        assert_eq!(h.path, None, "next to the hook by default");
        let c = HostConfig::parse(
            "pod_resources_helper = \"/opt/devinject/bin/devinject-podresources\"\n",
            p,
        )
        .unwrap();
        assert_eq!(
            PodResourcesHelper::from_config(&c).path.as_deref(),
            Some(Path::new("/opt/devinject/bin/devinject-podresources"))
        );
    }
}
