//! Test harness for devinject's integration tests against real runtimes.
//!
//! - [`skip`]: tests that need root or a daemon skip with a printed reason locally, and fail under
//!   `CI=true`.
//! - [`bins`]: where the built devinject binaries are.
//! - [`rootfs`]: a busybox rootfs (plus the host's static `ldconfig` so `ldconfig -p` works).
//! - [`sim`]: a simulated `demo` accelerator host: mknod'ed nodes under a dev root and a real
//!   `libdemo.so.1` under a driver root.
//! - [`runc`]: OCI bundles with the hook wired in, run by the real `runc`.
//! - [`probe`]: the in-container probe and the parser for its report.
//! - [`podresources`]: a test kubelet serving the pod-resources v1 API on a Unix socket, for the
//!   request policy tests.

pub mod bins;
pub mod podresources;
pub mod probe;
pub mod rootfs;
pub mod runc;
pub mod sim;
pub mod skip;
