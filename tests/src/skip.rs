//! Skipping tests that cannot run here: the one rule of [`devinject_testkit`] (loud, on the
//! record, never under CI), plus the prerequisites of this crate's container tests.

pub use devinject_testkit::{
    in_ci, is_root, require, require_binary, require_path, require_root, which,
};

/// The test runs containers with real runc on the simulated demo host: root, runc (or the one
/// `DEVINJECT_RUNC` names), a static busybox for the rootfs and gcc for the demo library.
pub fn require_runc_demo() -> bool {
    require_root()
        && require(
            crate::runc::runc_binary().is_some(),
            "needs runc (apt-get install runc, or DEVINJECT_RUNC=$(scripts/runc-build.sh))",
        )
        && require_binary("/bin/busybox")
        && require_binary("gcc")
}
