//! Integration tests against real runtimes (runc, docker, containerd) and the kubelet protocol.
//!
//! - [`kubelet`]: a test kubelet that speaks the device plugin API v1beta1 (a `Registration`
//!   server that dials plugins back like the kubelet), plus helpers that build simulated hosts
//!   (device nodes made with mknod, sysfs attributes, profiles) and run the real
//!   `devinject-device-plugin` binary against them. Used by `tests/device_plugin.rs` and by the
//!   `device-plugin-bench` binary.

pub mod kubelet;
