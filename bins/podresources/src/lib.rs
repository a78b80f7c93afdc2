//! `devinject-podresources`' interface, for the programs and tests that run it: its command line
//! ([`Request`], `--socket=PATH --timeout-ms=N --namespace=NS --pod=NAME --container=NAME`) and
//! its exit codes ([`ToolExit`]; on failure its stderr is one line, the message the policy would
//! show). What it prints on success is the kubelet crate's [`devinject_kubelet::answer::Answer`].
//! See docs/policy.md.
#![warn(missing_docs)]

pub mod exit;
pub mod request;

pub use exit::ToolExit;
pub use request::{Invocation, Request, UsageError, USAGE};
