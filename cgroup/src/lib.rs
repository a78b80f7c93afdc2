//! Device access for a container's cgroups (work in progress): device rules, errors, the
//! eBPF allow prefix and device program handles.

mod error;
mod rule;
#[allow(unsafe_code)]
mod sys;

pub mod ebpf;

pub use error::{CgroupError, Result};
pub use rule::{Access, DeviceKind, DeviceRule, MAX_MAJOR, MAX_MINOR};
