//! Root tests against the running kernel: real cgroup v1 and v2 hierarchies, real device
//! programs, real `open(2)` of device nodes by processes inside the test cgroups.
//!
//! They need root (bpf(2), mounts, cgroup writes). Without it each test prints why it is
//! skipped; with `CI=true` it fails instead. The v2 tests run in a private mount namespace
//! of the test thread with a fresh cgroup2 mount, so they work on v1, hybrid and v2 hosts
//! and leave no mounts behind. The runc test runs the installed runc in cgroup v2 mode
//! (cgroup2 mounted over /sys/fs/cgroup in that namespace) and skips when runc or a static
//! busybox for the rootfs is missing.

mod runc;
mod support;
mod v1;
mod v2;
