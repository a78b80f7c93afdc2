//! Device access for a container's cgroups (work in progress): device rules and errors.

mod error;
mod rule;

pub use error::{CgroupError, Result};
pub use rule::{Access, DeviceKind, DeviceRule, MAX_MAJOR, MAX_MINOR};
