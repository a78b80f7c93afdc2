//! Recording a refused container start in the node's decision log
//! ([`devinject_decision_log`]), which the device plugin counts by reason and
//! `devinject-ctl doctor` shows.
//!
//! Every start that the hook (its run or its `finish` step) or the shim (on `create` and `run`)
//! fails once the host config is read is recorded: the refusals of admission (`request`,
//! `policy`, `host`, `config`) and the failures after it (`prepare`, `inject`, `cgroup`,
//! `input`, `internal`), each with its exit code's word. A bad command line or an unreadable host
//! config is not: no log directory is known then (`devinject-ctl doctor` reports a broken
//! config itself). Recording never changes the exit code or the message: the binaries record
//! after they have written the message, and a failure to record is logged at `debug` only: the
//! hook's and the shim's stderr is the message the runtime shows the user, so a warning there
//! would change it. `devinject-ctl doctor` names a log that cannot be written.

use devinject_admission::admit::{asked_profiles, AdmitError, Asked};
use devinject_decision_log::{Decision, EnginePath, Reason};
use devinject_devices::Excerpt;
use devinject_exit::ExitCode;
use devinject_hostconfig::HostConfig;

/// What a start knew of its container when it failed: filled in as the start learns it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The container's id; empty until the state (hook) or the command line (shim) is read.
    pub container: String,
    /// The profiles the container asks for; empty until they are known.
    pub profiles: Vec<String>,
}

impl Seen {
    /// Notes the profiles the container asks devices of, from what admission found it asks
    /// ([`devinject_admission::admit::Admission::asked`]) or from its refusal.
    pub fn asked(&mut self, asked: &Result<Option<Asked>, AdmitError>) {
        self.profiles = asked_profiles(asked);
    }
}

/// Records a start that `path` failed with `code` and `message` (the line the user saw, without
/// the `devinject: ` prefix), in the host config's decision log.
pub fn record(config: &HostConfig, path: EnginePath, seen: Seen, code: ExitCode, message: &str) {
    let decision = Decision::now(
        path,
        seen.container,
        seen.profiles,
        Reason::from(code),
        message,
    );
    let Some(dir) = config.decision_log() else {
        return;
    };
    if let Err(e) = devinject_decision_log::record(dir, &decision) {
        tracing::debug!(
            container = %Excerpt(&decision.container),
            reason = %decision.reason,
            "the refusal is not in the decision log: {e}"
        );
    }
}
