//! Device access for a container's cgroups (work in progress): device rules, errors, the
//! eBPF allow prefix, device program handles, locating cgroups and v1 devices.allow.

mod error;
mod rule;
#[allow(unsafe_code)]
mod sys;
#[allow(dead_code)]
mod v1;

pub mod ebpf;
pub mod locate;

pub use error::{CgroupError, Result};
pub use rule::{Access, DeviceKind, DeviceRule, MAX_MAJOR, MAX_MINOR};
