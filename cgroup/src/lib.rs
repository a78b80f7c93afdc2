//! Device access for a container's cgroups (work in progress): device rules, errors and the
//! eBPF allow prefix.

mod error;
mod rule;

pub mod ebpf;

pub use error::{CgroupError, Result};
pub use rule::{Access, DeviceKind, DeviceRule, MAX_MAJOR, MAX_MINOR};
