//! Granting the planned nodes in the container's device cgroup (v1, v2, or both on hybrid hosts).

use devinject_cgroup::{Access, CgroupError, CgroupOptions, DeviceKind, DeviceRule};
use devinject_devices::{CgroupRule, NodeKind};

/// Converts plan rules to the cgroup crate's rules.
pub fn to_rules(rules: &[CgroupRule]) -> Result<Vec<DeviceRule>, CgroupError> {
    rules
        .iter()
        .map(|r| {
            let kind = match r.kind {
                NodeKind::Char => DeviceKind::Char,
                NodeKind::Block => DeviceKind::Block,
            };
            let access: Access = r.access.parse()?;
            Ok(DeviceRule::new(kind, r.major, r.minor, access))
        })
        .collect()
}

/// Lets the container's cgroup use the planned nodes. `rootless`: the runtime could not write
/// cgroups either, so neither do we.
pub fn grant(pid: i32, rules: &[CgroupRule], rootless: bool) -> Result<(), CgroupError> {
    if rules.is_empty() {
        return Ok(());
    }
    let rules = to_rules(rules)?;
    let opts = CgroupOptions {
        skip_writes: rootless,
        ..CgroupOptions::default()
    };
    let report = devinject_cgroup::grant(pid, &rules, &opts)?;
    tracing::info!(?report, "device cgroup updated");
    Ok(())
}
