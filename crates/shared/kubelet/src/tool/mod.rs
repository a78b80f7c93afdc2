//! What the request policy (in `devinject-hook`, `devinject-runtime` and `devinject-nri`) learns
//! from the kubelet's pod-resources API about one container, and the command line and exit
//! codes of `devinject-podresources`, which makes the same call from a shell. No gRPC here: the
//! host config, the policy and the tool all build on it.
//!
//! - [`answer`]: what the kubelet lists for one container: its devices per resource name, or
//!   the pod's other containers; the tool prints it as small versioned JSON.
//! - [`request`]: the tool's command line, `--socket=PATH --timeout-ms=N --namespace=NS
//!   --pod=NAME --container=NAME`.
//! - [`exit`]: the tool's exit codes; on failure its stderr is one line, the message the policy
//!   would show (the socket is missing, the kubelet did not answer in time, ...).
//!
//! See docs/policy.md.

pub mod answer;
pub mod exit;
pub mod request;

pub use answer::{Answer, AnswerError, PodEntry, Rpc, ANSWER_VERSION, MAX_ANSWER_BYTES};
pub use exit::ToolExit;
pub use request::{Invocation, Request, UsageError};
