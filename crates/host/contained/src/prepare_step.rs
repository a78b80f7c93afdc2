//! Running a plan's prepare steps (docs/prepare.md): each profile's prepare program, once per
//! allocated device, on the host, before the container starts.
//!
//! The runs were planned by `devinject_devices::prepare_step` (what each gets is decided there);
//! they run here the way the hook runs any host program ([`crate::child`]): by absolute path,
//! with only the planned environment, stdin from `/dev/null`, under the profile's deadline. They
//! run one after the other, in the plan's order, and the first failure stops the container's
//! start with the program's own message: nothing has been injected yet, and the shim has not
//! written `config.json`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use devinject_devices::{DeviceId, Excerpt, PrepareRun, ProfileName};
use devinject_exit::ExitCode;

use crate::child::{self, ChildError, Program, Unrunnable};

/// The most stdout a prepare program may write (it is logged, not parsed).
pub const MAX_STDOUT_BYTES: usize = 64 << 10;

/// Which run failed: `the prepare program P of profile F for device D (function X)`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs, reason = "the doc above names each field in its place")]
pub struct Step {
    pub profile: ProfileName,
    pub program: PathBuf,
    pub device: DeviceId,
    /// The function it was loading.
    pub function: Option<String>,
}

impl PrepareStepError {
    /// The documented exit code, for the hook and the shim alike.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::Prepare
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the prepare program {} of profile {} for device {}",
            self.program.display(),
            self.profile,
            self.device
        )?;
        match &self.function {
            Some(function) => write!(f, " (function {function})"),
            None => Ok(()),
        }
    }
}

impl Step {
    fn of(run: &PrepareRun) -> Box<Self> {
        Box::new(Self {
            profile: run.profile.clone(),
            program: run.program.clone(),
            device: run.device.clone(),
            function: run.function.clone(),
        })
    }
}

/// Why a prepare step failed.
#[derive(Debug, thiserror::Error)]
pub enum PrepareStepError {
    /// The program is not there, or cannot be run.
    #[error(
        "{step} cannot be run: {problem}: install it, or fix `prepare.command` in the profile"
    )]
    Unrunnable {
        /// Which run.
        step: Box<Step>,
        /// What is wrong.
        problem: String,
    },
    /// It could not be started, or did not finish.
    #[error("{step}: {source}")]
    Run {
        /// Which run.
        step: Box<Step>,
        /// What went wrong.
        source: ChildError,
    },
    /// It was cut short by its caller's deadline, before its own: killed when the time the
    /// caller had left ran out, or not started when none was left.
    #[error("{step} did not finish within the {} ms its caller had left and was killed", left.as_millis())]
    OutOfTime {
        /// Which run.
        step: Box<Step>,
        /// The time it was given.
        left: Duration,
    },
    /// It ran and failed. Its output is shown through [`Excerpt`]: the program's message can
    /// carry what a container or claim gave it, and this error reaches the engine's error, the
    /// pod's events and the node's log (docs/security.md, values a container controls).
    #[error("{step} failed ({status}): {}", Excerpt(.output))]
    Failed {
        /// Which run.
        step: Box<Step>,
        /// Its exit code or signal.
        status: String,
        /// What it wrote on stderr (`no message` when nothing), as written: unescaped, whole.
        output: String,
    },
}

/// Runs every prepare step in order; stops at the first failure.
pub fn run_all(runs: &[PrepareRun]) -> Result<(), PrepareStepError> {
    for r in runs {
        run_one(r, r.limit)?;
    }
    Ok(())
}

/// [`run_all`], every step also finished by `deadline`: each runs under the lesser of its own
/// limit and the time left, and one the deadline cuts short is killed (the NRI plugin must
/// answer the engine in time whatever a program does).
pub fn run_all_by(runs: &[PrepareRun], deadline: Instant) -> Result<(), PrepareStepError> {
    for r in runs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left >= r.limit {
            run_one(r, r.limit)?;
            continue;
        }
        let out_of_time = || PrepareStepError::OutOfTime {
            step: Step::of(r),
            left,
        };
        if left.is_zero() {
            return Err(out_of_time());
        }
        match run_one(r, left) {
            Err(PrepareStepError::Run {
                source: ChildError::Timeout { .. },
                ..
            }) => return Err(out_of_time()),
            other => other?,
        }
    }
    Ok(())
}

fn run_one(r: &PrepareRun, limit: Duration) -> Result<(), PrepareStepError> {
    child::check_runnable(&r.program).map_err(|e| PrepareStepError::Unrunnable {
        step: Step::of(r),
        problem: match e {
            Unrunnable::Missing => "it does not exist".into(),
            Unrunnable::Unusable(p) => p,
        },
    })?;
    let started = std::time::Instant::now();
    let finished = child::run(Program {
        path: &r.program,
        args: &r.args,
        env: &r.env,
        limit,
        max_stdout: MAX_STDOUT_BYTES,
    })
    .map_err(|source| PrepareStepError::Run {
        step: Step::of(r),
        source,
    })?;
    tracing::info!(profile = %r.profile, device = %r.device, function = r.function.as_deref().unwrap_or("none"), elapsed_ms = started.elapsed().as_millis() as u64, stdout = %Excerpt(String::from_utf8_lossy(&finished.stdout).trim()), "prepare step ran");
    match finished.failure() {
        None => Ok(()),
        Some(status) => Err(PrepareStepError::Failed {
            step: Step::of(r),
            status,
            output: finished.failure_message(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use devinject_devices::DeviceId;

    use super::*;
    use nix::sys::signal::Signal;

    use crate::child::test_support::{script, signal_when_running};

    fn run_of(program: &Path, device: &str, limit_ms: u64) -> PrepareRun {
        PrepareRun {
            profile: ProfileName::new("fpga").unwrap(),
            device: DeviceId::new(device).unwrap(),
            program: program.to_owned(),
            args: vec![OsString::from("--load")],
            env: vec![
                OsString::from("DEVINJECT_DEVICE=".to_owned() + device),
                OsString::from("DEVINJECT_FUNCTION=nlb3"),
            ],
            limit: Duration::from_millis(limit_ms),
            function: Some("nlb3".into()),
        }
    }

    /// A program's message reaches the engine's error, the pod's events and the node's log:
    /// a C1 control, a bidi override and an escape sequence in it are shown escaped, byte for
    /// byte as `devices::Excerpt` writes them, and a long message is cut to its bound.
    #[test]
    fn a_programs_message_is_shown_escaped_byte_for_byte() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        // ESC [2J (clear screen), U+009B (C1 CSI), U+202E (right-to-left override), U+0085.
        let hostile = script(
            d,
            "hostile",
            "printf 'no \\033[2J fit \\302\\233 31m \\342\\200\\256 gpj.exe \\302\\205 end\\n' >&2\nexit 3",
        );
        let long = script(d, "long", "printf '%0300d\\n' 0 >&2\nexit 1");
        let err = run_all(&[run_of(&hostile, "1", 5000)]).unwrap_err();
        assert!(
            matches!(&err, PrepareStepError::Failed { output, .. }
                if output == "no \u{1b}[2J fit \u{9b} 31m \u{202e} gpj.exe \u{85} end"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "the prepare program {} of profile fpga for device 1 (function nlb3) failed \
                 (exit code 3): no \\u{{1b}}[2J fit \\u{{9b}} 31m \\u{{202e}} gpj.exe \\u{{85}} end",
                hostile.display()
            )
        );
        let err = run_all(&[run_of(&long, "1", 5000)]).unwrap_err();
        assert!(
            err.to_string().ends_with(&format!(
                "failed (exit code 1): {}... (300 bytes in all)",
                "0".repeat(devinject_devices::excerpt::MAX_SHOWN)
            )),
            "{err}"
        );
    }

    // The scripts are written before any run: a script still open for writing while another
    // test thread forks cannot be executed (ETXTBSY).
    #[test]
    fn prepare_programs() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let log = d.join("log");
        let ok = script(
            d,
            "ok",
            &format!(
                "echo \"$1 $DEVINJECT_DEVICE $DEVINJECT_FUNCTION\" >> {}",
                log.display()
            ),
        );
        let fails = script(d, "fails", "echo 'bitstream nlb3 does not fit' >&2\nexit 4");
        let silent_sleep = d.join("silent-sleep");
        std::os::unix::fs::symlink("/bin/sleep", &silent_sleep).unwrap();
        let silent = script(d, "silent", &format!("exec {} 30", silent_sleep.display()));
        let hangs = script(d, "hangs", "exec /bin/sleep 30");

        // In order, each with its device; the first failure stops the rest.
        run_all(&[run_of(&ok, "0", 5000), run_of(&ok, "2", 5000)]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "--load 0 nlb3\n--load 2 nlb3\n"
        );
        let err = run_all(&[run_of(&fails, "1", 5000), run_of(&ok, "3", 5000)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the prepare program {} of profile fpga for device 1 (function nlb3) failed (exit code 4): bitstream nlb3 does not fit",
                fails.display()
            )
        );
        assert!(!std::fs::read_to_string(&log).unwrap().contains(" 3 "));
        // Ended by a signal: SIGKILL from outside, the one an init of its namespace cannot ignore.
        let killer = signal_when_running(silent_sleep, Signal::SIGKILL);
        let err = run_all(&[run_of(&silent, "1", 20000)]).unwrap_err();
        killer.join().unwrap();
        assert!(
            err.to_string().ends_with("(killed by SIGKILL): no message"),
            "{err}"
        );

        let started = Instant::now();
        let err = run_all(&[run_of(&hangs, "1", 200)]).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            matches!(
                err,
                PrepareStepError::Run {
                    source: ChildError::Timeout { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().ends_with(
                "for device 1 (function nlb3): it did not finish within 200 ms and was killed"
            ),
            "{err}"
        );

        // A caller's deadline before the step's own: killed at the deadline, and said so;
        // steps after the deadline are not started.
        let started = Instant::now();
        let err = run_all_by(
            &[run_of(&hangs, "1", 5000)],
            Instant::now() + Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(
            matches!(err, PrepareStepError::OutOfTime { left, .. } if left <= Duration::from_millis(300)),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("for device 1 (function nlb3) did not finish within"),
            "{err}"
        );
        let before = std::fs::read_to_string(&log).unwrap();
        let err = run_all_by(&[run_of(&ok, "3", 5000)], Instant::now()).unwrap_err();
        assert!(matches!(err, PrepareStepError::OutOfTime { .. }), "{err}");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            before,
            "not started"
        );
        // A step's own deadline, shorter than the caller's, is still its own timeout.
        let err = run_all_by(
            &[run_of(&hangs, "1", 200)],
            Instant::now() + Duration::from_secs(10),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                PrepareStepError::Run {
                    source: ChildError::Timeout { .. },
                    ..
                }
            ),
            "{err}"
        );
        run_all_by(
            &[run_of(&ok, "5", 5000)],
            Instant::now() + Duration::from_secs(10),
        )
        .unwrap();

        let missing = d.join("nowhere");
        let err = run_all(&[run_of(&missing, "0", 5000)]).unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot be run: it does not exist: install it, or fix `prepare.command`"),
            "{err}"
        );
    }
}
