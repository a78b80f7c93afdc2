//! Real containers on a simulated device host, for the demo and the integration tests.
//!
//! - [`sim`]: a simulated `demo` accelerator host: mknod'ed nodes under a dev root and a real
//!   `libdemo.so.1` under a driver root.
//! - [`rootfs`]: a busybox rootfs (plus the host's static `ldconfig` so `ldconfig -p` works).
//! - [`runc`]: OCI bundles with the hook wired in, run by the real `runc`.
//! - [`probe`]: the in-container probe and the parser for its report.
//! - [`bins`]: where the built devinject binaries are, refusing stale ones.
//! - [`demo`]: the README's demo, through the hook or the shim.
//! - [`canary`], [`hostile`]: a host canary and its fingerprints, and the traps a hostile image
//!   sets in a rootfs.
//! - [`vendor_node`]: simulated nodes of vendors' real driver stacks.
//!
//! The README's main command (`scripts/demo.sh`) builds this crate and the hook only: nothing
//! here may pull a build that needs more than the Rust toolchain, gcc and libc.

pub mod bins;
pub mod canary;
pub mod demo;
pub mod hostile;
pub mod probe;
pub mod rootfs;
pub mod runc;
pub mod sim;
pub mod vendor_node;
