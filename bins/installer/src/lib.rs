//! Installs devinject on a node from a DaemonSet init container, and takes it off again.
//!
//! The init container mounts the host's directories under a root (`--host-root /host`), and
//! [`install::install`] puts the hook, the shim, devinject-podresources, devinject-ctl, the
//! profiles and the hook's host configuration there, then configures the node's container engine through the runtime-config
//! library and restarts it when (and only when) its configuration changed.
//! [`uninstall::uninstall`] undoes all of it.
//!
//! The parts:
//! - [`options`]: what to install where ([`options::Layout`], [`options::InstallOptions`]).
//! - [`host`]: host paths versus the paths this process opens.
//! - [`detect`]: which engine the node runs (containerd, CRI-O, docker; k3s/RKE2 containerd).
//! - [`host_config`]: the hook's and shim's `config.toml`, checked with the strict parser they
//!   read it with before it is written.
//! - [`k3s`]: the containerd template that survives k3s/RKE2 regenerating `config.toml`.
//! - [`activate`]: restart/reload through systemd in the host's namespaces, or by signal,
//!   behind the [`activate::HostControl`] trait (with a recording fake).
//! - [`journal`]: every change is saved first and undone if its step fails or is killed;
//!   [`steps`] runs a step in a journal transaction.
//! - [`record`]: what was installed, for uninstall; [`files`] puts and takes one file.
//! - [`in_use`]: containers still running through the shim (what uninstall must leave).
//! - [`probe`]: the device plugin's liveness/readiness check.
//! - [`fault`]: fault injection for the interruption tests.
//!
//! All unsafe code is in the private `sys` module.

pub mod activate;
pub mod detect;
pub mod engine_step;
pub mod error;
pub mod fault;
pub mod files;
pub mod host;
pub mod host_config;
pub mod in_use;
pub mod install;
pub mod journal;
pub mod k3s;
pub mod options;
pub mod probe;
pub mod record;
pub mod report;
pub mod steps;
#[allow(unsafe_code)]
mod sys;
pub mod uninstall;

pub use error::{InstallError, Result};
pub use install::install;
pub use options::{
    EngineChoice, HostConfigSettings, InstallOptions, Layout, Policy, RestartMode, UninstallOptions,
};
pub use report::{Failure, Report};
pub use uninstall::uninstall;
