//! Test harness for devinject's integration tests against real runtimes and the kubelet.
//!
//! - [`skip`]: tests that need root or a daemon skip with a printed reason locally, and fail under
//!   `CI=true`.
//! - [`bins`]: where the built devinject binaries are.
//! - [`rootfs`]: a busybox rootfs (plus the host's static `ldconfig` so `ldconfig -p` works).
//! - [`sim`]: a simulated `demo` accelerator host: mknod'ed nodes under a dev root and a real
//!   `libdemo.so.1` under a driver root.
//! - [`runc`]: OCI bundles with the hook wired in, run by the real `runc`.
//! - [`daemons`]: private containerd (with or without CRI) and dockerd instances, torn down on
//!   drop; every test that needs a daemon starts it here.
//! - [`docker`]: a private containerd + dockerd per test, with devinject's runtimes registered.
//! - [`image`]: container images built from a rootfs as `docker save` archives, for
//!   `ctr images import`.
//! - [`cri`]: the kubelet's side of the CRI (`k8s-cri` over a unix socket), blocking.
//! - [`podman`]: a private podman (own storage, locks and containers.conf) for hooks.d tests.
//! - [`probe`]: the in-container probe and the parser for its report.
//! - [`kubelet`]: a test kubelet that speaks the device plugin API v1beta1 (a `Registration`
//!   server that dials plugins back like the kubelet), simulated hosts for the plugin, and the
//!   real `devinject-device-plugin` binary run against them. Used by `tests/tests/suite/device_plugin.rs`
//!   and by the benchmarks crate (`bench/`).
//! - [`canary`]: a host canary tree and fingerprints proving the host unchanged.
//! - [`hostile`]: booby-trapping a rootfs (links out, FIFOs, files for dirs) and a swapper thread.
//! - [`cprog`]: small C programs built with gcc (a marker-leaving preload library, a recording
//!   stand-in for ldconfig).
//! - [`nvidia_toolkit`]: NVIDIA's Container Toolkit (its runtime in `cdi` mode, `nvidia-ctk cdi
//!   generate`) on the vendor-stack node, and a create/start/wait/delete cycle through any runtime.
//! - [`churn`]: pods started and deleted continuously on a two-node cluster (shim and NRI)
//!   under scheduled faults, every start checked from inside, the nodes checked for leaks.
//! - [`podresources`]: a test kubelet serving the pod-resources v1 API on a Unix socket, for the
//!   request policy tests.

pub use devinject_harness::{bins, canary, hostile, probe, rootfs, runc, sim};
pub mod churn;
pub mod cluster;
pub mod cprog;
pub mod cri;
pub mod cri_node;
pub mod cri_release;
pub mod crio;
pub mod daemons;
pub mod docker;
pub mod image;
pub mod kubelet;
pub mod nri_plugin;
pub mod nvidia_toolkit;
pub mod podman;
pub mod podresources;
pub mod rootless;
pub mod runc_args;
pub mod runtimes;
pub mod scrape;
pub mod skip;
pub mod vendor;
