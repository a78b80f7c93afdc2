//! The OCI hook (namespace applier) and the runtime shim (spec applier).
//!
//! The host configuration (`/etc/devinject/config.toml`) is read with `devinject-hostconfig`;
//! its settings are plain data, turned into what runs here ([`policy::kubelet::PodResources`],
//! [`inject::ldcache::Ldconfig`]). The exit codes are `devinject-exit`'s.
//!
//! - [`oci`]: the OCI state and the parts of `config.json` we read, size-bounded.
//! - [`prepare`]: a container's requests → one merged plan (shared by hook and shim).
//! - [`admit`]: env and annotations → policy → plan, the step the hook, the shim and the NRI
//!   plugin share.
//! - [`policy`]: which requests are honoured; in Kubernetes only what the kubelet's
//!   pod-resources API says the device plugin granted (shared by hook and shim).
//! - [`prepare_step`]: running the profiles' prepare programs before the container starts.
//! - [`inject`]: applying a plan inside the container's mount namespace, safely against a hostile
//!   rootfs ([`inject::rootfs`]), then [`cgroup_rules`] for the device cgroup.
//! - [`child`]: running a host program (a prepare step) under a
//!   deadline, with a given environment and bounded output.
//! - [`run`]: one hook invocation; [`error`] maps failures to the documented exit codes.
//!
//! - [`shim`]: the runtime shim `devinject-runtime`, which writes the plan into `config.json`
//!   and execs runc or crun.
//!
//! All unsafe code is in the private `sys` module.

pub mod admit;
pub mod cgroup_rules;
pub mod child;
pub mod error;
pub mod finish;
pub mod inject;
pub mod logging;
pub mod oci;
pub mod policy;
pub mod prepare;
pub mod prepare_step;
pub mod run;
pub mod shim;
#[allow(unsafe_code)]
mod sys;

/// Prefix of the annotations devinject reads.
pub const ANNOTATION_PREFIX: &str = devinject_devices::plan::ANNOTATION_PREFIX;
