//! `devinject-installer idle`: waits until the container is stopped. The uninstall DaemonSet's
//! main container runs it to stay up once the init container has uninstalled (so that `kubectl
//! rollout status` shows when every node is done) without pulling another image: an
//! air-gapped cluster has only the images it was given.

use nix::sys::signal::{SigSet, Signal};

use crate::exit_code::ExitCode;

/// Blocks SIGTERM and SIGINT and waits for one of them. As the container's pid 1 the process
/// has no default action for them, so they must be waited for, not left to the kernel.
pub fn run() -> ExitCode {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    if let Err(e) = set.thread_block() {
        eprintln!("devinject-installer idle: cannot block SIGTERM: {e}");
        return ExitCode::Usage;
    }
    match set.wait() {
        Ok(_) => ExitCode::Success,
        Err(e) => {
            eprintln!("devinject-installer idle: waiting for SIGTERM failed: {e}");
            ExitCode::Usage
        }
    }
}
