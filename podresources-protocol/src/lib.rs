//! The contract between the request policy (in `devinject-hook` and `devinject-runtime`) and
//! `devinject-podresources`, the helper that asks the kubelet's pod-resources API what a
//! container was granted.
//!
//! The hook runs for every container and must stay small: it links no gRPC client. When a
//! Kubernetes container asks for devices, the policy executes the helper instead (absolute
//! path, empty environment, stdin from `/dev/null`, killed when the hook dies or the deadline
//! passes) and reads its answer:
//!
//! - [`request`]: the command line, `--socket=PATH --timeout-ms=N --namespace=NS --pod=NAME
//!   --container=NAME`, written by the policy and parsed by the helper.
//! - [`exit`]: the helper's exit codes; on failure its stderr is one line, the message the
//!   policy shows (the socket is missing, the kubelet did not answer in time, ...).
//! - [`answer`]: on success, a small versioned JSON document on stdout with what the kubelet
//!   lists for that container: its devices per resource name, or the pod's other containers.
//!
//! Both sides depend on this crate, so they cannot disagree about the shape; the version in the
//! answer catches a hook and a helper from different releases. See docs/policy.md.

pub mod answer;
pub mod exit;
pub mod request;

pub use answer::{Answer, AnswerError, PodEntry, Rpc, ANSWER_VERSION, MAX_ANSWER_BYTES};
pub use exit::HelperExit;
pub use request::{Invocation, Request, UsageError};

/// The helper's file name; the hook and the shim look for it next to themselves unless the
/// host config names another path.
pub const HELPER_NAME: &str = "devinject-podresources";

/// Where the kubelet serves the pod-resources API unless its root directory was moved.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
