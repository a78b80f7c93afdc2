//! `devinject-podresources`: asks the kubelet's pod-resources API what one container was
//! granted, with the call and the reduction the request policy of `devinject-hook` and
//! `devinject-runtime` makes in-process, for checking by hand what the policy would get.
//!
//! Usage: `devinject-podresources --socket=PATH --timeout-ms=N --namespace=NS --pod=NAME
//! --container=NAME`. On success the answer is JSON on stdout; on failure stderr holds one
//! line, the message to show, and the exit code says which kind of failure it was
//! ([`ToolExit`], docs/policy.md). It reads no environment and
//! no stdin and starts no logging, so that stderr carries only that message.

use std::io::Write;
use std::process::ExitCode;

use devinject_kubelet::pod_resources::{answer, PodResourcesClient, PodResourcesError};
use devinject_podresources::{Invocation, Request, ToolExit, USAGE};

fn exit(code: ToolExit) -> ExitCode {
    ExitCode::from(code.code())
}

fn main() -> ExitCode {
    let request = match Request::parse_args(std::env::args_os().skip(1)) {
        Ok(Invocation::Lookup(r)) => r,
        Ok(Invocation::Help) => {
            println!("{USAGE}");
            return exit(ToolExit::Answered);
        }
        Ok(Invocation::Version) => {
            println!("devinject-podresources {}", env!("CARGO_PKG_VERSION"));
            return exit(ToolExit::Answered);
        }
        Err(e) => {
            eprintln!("devinject-podresources: {e}\n{USAGE}");
            return exit(ToolExit::Usage);
        }
    };
    let client = PodResourcesClient::new(&request.socket, request.timeout);
    let lookup = match client.pod(&request.namespace, &request.pod) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return exit(kind(&e));
        }
    };
    let json = match answer::for_container(&lookup, &request.container).to_json() {
        Ok(j) => j,
        Err(e) => {
            eprintln!("devinject-podresources: {e}");
            return exit(ToolExit::Internal);
        }
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(&json).and_then(|()| out.flush()) {
        eprintln!("devinject-podresources: cannot write the answer to stdout: {e}");
        return exit(ToolExit::Internal);
    }
    exit(ToolExit::Answered)
}

/// The documented exit code for a failed lookup.
fn kind(e: &PodResourcesError) -> ToolExit {
    match e {
        PodResourcesError::SocketMissing { .. }
        | PodResourcesError::NotASocket { .. }
        | PodResourcesError::Stat { .. } => ToolExit::Socket,
        PodResourcesError::Connect { .. } => ToolExit::Connect,
        PodResourcesError::Rpc { .. } | PodResourcesError::Answer { .. } => ToolExit::Kubelet,
        PodResourcesError::Timeout { .. } => ToolExit::Timeout,
    }
}
