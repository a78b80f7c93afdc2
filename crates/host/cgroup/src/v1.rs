//! cgroup v1: append rules to the `devices` controller's `devices.allow`.
//!
//! The kernel parses one rule per write(2), so each rule gets its own write of exactly one
//! line. Exceptions only add access; a parent cgroup must already allow what a child is
//! given, which holds for runtimes' container cgroups (their parents allow everything).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use crate::error::{CgroupError, Result};
use crate::DeviceRule;

/// Name of the allow list file in a devices cgroup directory.
pub const DEVICES_ALLOW: &str = "devices.allow";

/// Writes each rule as one line (`c 1:3 rwm`) to `<dir>/devices.allow`.
pub fn allow(dir: &Path, rules: &[DeviceRule]) -> Result<()> {
    let path = dir.join(DEVICES_ALLOW);
    // No O_CREAT: a missing file means `dir` is not a devices cgroup.
    let mut file = OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|source| CgroupError::WriteDevicesAllow {
            path: path.clone(),
            rule: rules.first().map(ToString::to_string).unwrap_or_default(),
            source,
        })?;
    for rule in rules {
        let line = format!("{rule}\n");
        let written = file.write(line.as_bytes());
        let error = match written {
            Ok(n) if n == line.len() => continue,
            Ok(n) => std::io::Error::other(format!("short write of {n} of {} bytes", line.len())),
            Err(e) => e,
        };
        return Err(CgroupError::WriteDevicesAllow {
            path,
            rule: rule.to_string(),
            source: error,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_one_line_per_rule() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(DEVICES_ALLOW);
        std::fs::write(&file, "").expect("create");
        let rules: Vec<DeviceRule> = ["c 1:9 rw", "b 8:0 r", "c 10:200 rwm"]
            .iter()
            .map(|r| r.parse().expect("valid"))
            .collect();
        allow(dir.path(), &rules).expect("written");
        assert_eq!(
            std::fs::read_to_string(&file).expect("read"),
            "c 1:9 rw\nb 8:0 r\nc 10:200 rwm\n"
        );
    }

    #[test]
    fn missing_allow_file_names_path_and_rule() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rule: DeviceRule = "c 1:9 rw".parse().expect("valid");
        let err = allow(dir.path(), &[rule])
            .expect_err("not a devices cgroup")
            .to_string();
        assert!(
            err.contains("devices.allow") && err.contains("c 1:9 rw"),
            "{err}"
        );
    }
}
