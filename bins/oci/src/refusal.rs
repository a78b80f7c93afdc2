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

use std::collections::BTreeMap;

use devinject_admission::admit::{asked_profiles, AdmitError, Asked};
use devinject_admission::policy::identity::{identify, Identity};
use devinject_decision_log::{Decision, EnginePath, Pod, Reason};
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
    /// The pod the container belongs to, once its annotations are read and where they name one
    /// that admission would trust.
    pub pod: Option<Pod>,
}

impl Seen {
    /// Notes the profiles the container asks devices of, from what admission found it asks
    /// ([`devinject_admission::admit::Admission::asked`]) or from its refusal, and, unless it
    /// asks for nothing (most containers: no refusal can follow), the pod its `annotations`
    /// name ([`Seen::annotated`]).
    pub fn asked(
        &mut self,
        asked: &Result<Option<Asked>, AdmitError>,
        annotations: &BTreeMap<String, String>,
    ) {
        self.profiles = asked_profiles(asked);
        if !matches!(asked, Ok(None)) {
            self.annotated(annotations);
        }
    }

    /// Notes the pod the container's CRI annotations name. Annotations that admission would not
    /// trust (incomplete, or containerd's and CRI-O's keys disagreeing) name none, and neither
    /// does a pod without a UID: its Event could not be tied to that pod alone.
    pub fn annotated(&mut self, annotations: &BTreeMap<String, String>) {
        self.pod = match identify(annotations) {
            Ok(Identity::Container { pod, .. }) => pod
                .uid
                .as_deref()
                .and_then(|uid| Pod::new(&pod.namespace, &pod.name, uid)),
            _ => None,
        };
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
    )
    .of_pod(seen.pod);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_pod_is_the_one_the_runtime_names_and_none_when_its_keys_disagree() {
        let containerd = [
            ("io.kubernetes.cri.container-type", "container"),
            ("io.kubernetes.cri.sandbox-uid", "5f0c-11"),
            ("io.kubernetes.cri.sandbox-name", "web"),
            ("io.kubernetes.cri.sandbox-namespace", "shop"),
            ("io.kubernetes.cri.container-name", "main"),
        ];
        let mut seen = Seen::default();
        seen.annotated(&annotations(&containerd));
        assert_eq!(seen.pod, Pod::new("shop", "web", "5f0c-11"));

        let mut forged = containerd.to_vec();
        forged.push(("io.kubernetes.pod.namespace", "kube-system"));
        forged.push(("io.kubernetes.pod.name", "web"));
        forged.push(("io.kubernetes.pod.uid", "5f0c-11"));
        forged.push(("io.kubernetes.container.name", "main"));
        seen.annotated(&annotations(&forged));
        assert_eq!(seen.pod, None, "disagreeing keys name no pod");

        seen.annotated(&annotations(&[]));
        assert_eq!(seen.pod, None, "not a pod's container");
    }
}
