//! Granting the planned nodes in the container's device cgroup (v1, v2, or both on hybrid hosts).
//!
//! The plan's rules are the cgroup crate's own [`DeviceRule`]s (`devinject-device-rule`), so
//! they are handed over as they are: nothing is re-parsed between the planner and the kernel.

use devinject_cgroup::{CgroupError, CgroupOptions, DeviceRule};

/// Lets the container's cgroup use the planned nodes. `rootless`: the runtime could not write
/// cgroups either, so neither do we.
pub fn grant(pid: i32, rules: &[DeviceRule], rootless: bool) -> Result<(), CgroupError> {
    if rules.is_empty() {
        return Ok(());
    }
    let opts = CgroupOptions {
        skip_writes: rootless,
        ..CgroupOptions::default()
    };
    let report = devinject_cgroup::grant(pid, rules, &opts)?;
    tracing::info!(?report, "device cgroup updated");
    Ok(())
}
