//! `devinject-ctl`'s library: what the program reports about a host, apart from the engine
//! configuration it makes through `devinject-engine-config` and the CDI specs it writes through
//! `devinject-cdi`.
//!
//! - [`doctor`]: `doctor`, what is wrong on this host (cgroups, runtimes, engines and their
//!   devinject configuration read back with each engine's `detect`, the host configuration,
//!   profiles, devices, driver files, stale CDI specs, ldconfig, the kubelet's sockets).
//! - [`device_list`]: `devices list`, the devices each profile finds on this host.
#![warn(missing_docs)]

pub mod device_list;
pub mod doctor;
