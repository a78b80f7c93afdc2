//! The OCI hook (namespace applier) and the runtime shim (spec applier).
//!
//! The host configuration (`/etc/devinject/config.toml`) is read with `devinject-hostconfig`;
//! its settings are plain data, turned into what runs here ([`inject::ldconfig::Ldconfig`]).
//! What a container gets (its requests, the request policy, the plan) is decided by
//! `devinject-admission`; the prepare programs and every forked child run through
//! `devinject-contained`; the NRI plugin shares both. The exit codes are `devinject-exit`'s.
//!
//! - [`oci`]: the OCI state and the parts of `config.json` we read, size-bounded; [`bundle`]:
//!   where the state's container has its bundle.
//! - [`inject`]: applying a plan inside the container's mount namespace, safely against a hostile
//!   rootfs ([`inject::rootfs`]), then [`cgroup_rules`] for the device cgroup.
//! - [`run`]: one hook invocation; [`error`] maps failures to the documented exit codes;
//!   [`refusal`] records a failed start in the node's decision log.
//!
//! - [`shim`]: the runtime shim `devinject-runtime`, which writes the plan into `config.json`
//!   and execs runc or crun.
//!
//! The hook's own unsafe code (the new mount API) is in the private `sys` module.

pub mod bundle;
pub mod cgroup_rules;
pub mod error;
pub mod finish;
pub mod inject;
pub mod logging;
pub mod oci;
pub mod refusal;
pub mod run;
pub mod shim;
#[allow(unsafe_code)]
mod sys;

/// The allocator of the musl builds (scripts/release-build.sh). musl's own returns memory to
/// the kernel as soon as a group of its blocks empties: on the NVIDIA 535 node `perf` put a
/// fifth of the shim's CPU per create in the `mmap` and `munmap` under `malloc` and `free`.
/// dlmalloc keeps what it took (docs/benchmarks.md, "NVIDIA's Container Toolkit against
/// devinject"). The glibc builds keep glibc's allocator.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
