//! Device access for a container's cgroups: cgroup v1 `devices.allow` and cgroup v2 eBPF
//! device program replacement.
//!
//! [`grant`] is the entry point. Given the pid of a container process and a list of
//! [`DeviceRule`]s, it
//! 1. finds the process's device cgroups from `/proc` ([`locate`]),
//! 2. on cgroup v1, appends one line per rule to `devices.allow` (`v1`),
//! 3. on cgroup v2, extends each device program attached to the cgroup with an allow prefix
//!    and swaps it in atomically (`v2`, using [`ebpf`]),
//!
//! and does both on hybrid hosts, where the kernel consults the v1 controller and the v2
//! programs and both must allow.
//!
//! The parts:
//! - [`DeviceRule`], [`DeviceKind`], [`Access`] and their `c 1:3 rwm` text form come from
//!   `devinject-device-rule`, the vocabulary the planner makes its rules in, so the hook hands
//!   the plan's rules over as they are;
//! - [`locate`]: `/proc/<pid>/cgroup` to directories, at the conventional mount points when
//!   `cgroup.procs` proves them, else through `/proc/self/mountinfo`;
//! - [`ebpf::insn`]: eBPF instruction encoding;
//! - [`ebpf::prefix`]: the allow prefix generator (pure; tested in an eBPF interpreter);
//! - [`ebpf::program`]: safe handles for loading, querying, attaching and replacing programs;
//! - `sys`: the raw bpf(2) calls, the crate's only `unsafe` code;
//! - `kernel`: the privileged operations behind a trait, so the decision logic in `v1`/`v2`
//!   is tested with a recording fake, and against the real kernel in `tests/` as root;
//! - `error`: [`CgroupError`].
//!
//! Everything is synchronous and single-threaded: it runs inside a short-lived OCI hook.
//!
//! On v2 nothing is ever attached where no device program was (the container is not
//! device-restricted there), and programs of the root cgroup or of ancestors, which filter
//! other processes too, are never changed.
//!
//! Caveat: an extended program lives until something attaches a new one to the cgroup.
//! Measured with runc 1.1.5 and 1.4.3 (`tests/tests/runc/runc_cgroup_v2.rs`): `runc update` with empty resources
//! keeps it. `systemctl daemon-reload` with the systemd cgroup driver re-attaches systemd's
//! own program without our rules (NVIDIA/nvidia-container-toolkit#48). Devices listed in the
//! container spec survive that; this crate is the fallback for runtimes that only run hooks.
#![warn(missing_docs)]

use std::path::PathBuf;

use tracing::{debug, info, info_span};

mod error;
mod kernel;
#[allow(unsafe_code)]
mod sys;
mod v1;
mod v2;

pub mod ebpf;
pub mod locate;

pub use devinject_device_rule::{Access, DeviceKind, DeviceRule, RuleError, MAX_MAJOR, MAX_MINOR};
pub use error::{CgroupError, Result};
pub use v2::{ProgramSwap, V2Outcome, PROGRAM_NAME};

use kernel::{Kernel, RealKernel};

/// Where to look and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupOptions {
    /// The proc file system to read `<pid>/cgroup` and `self/mountinfo` from.
    pub proc_root: PathBuf,
    /// Where cgroup file systems are conventionally mounted (`/sys/fs/cgroup`), tried before
    /// `mountinfo` ([`locate::conventional`]); `None`: `mountinfo` only.
    pub sys_cgroup: Option<PathBuf>,
    /// Write nothing: for rootless and user-namespace containers, whose runtime could not
    /// write cgroups either, so no device filter of the runtime's restricts them.
    pub skip_writes: bool,
}

impl Default for CgroupOptions {
    fn default() -> Self {
        Self {
            proc_root: PathBuf::from("/proc"),
            sys_cgroup: Some(PathBuf::from("/sys/fs/cgroup")),
            skip_writes: false,
        }
    }
}

/// What [`grant`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantReport {
    /// The v1 devices cgroup directory whose `devices.allow` was written, if any.
    pub v1: Option<PathBuf>,
    /// What happened on cgroup v2.
    pub v2: V2Outcome,
}

/// Lets the container process `pid` use the devices in `rules`, in its v1 devices cgroup
/// and its v2 device programs, whichever exist.
///
/// The rules are validated first. With no rules, or with
/// [`skip_writes`](CgroupOptions::skip_writes), nothing is read or written. On v2, with no
/// device program attached nothing is attached (the container is not device-restricted
/// there); otherwise all rules go in with one replacement per attached program.
pub fn grant(pid: i32, rules: &[DeviceRule], opts: &CgroupOptions) -> Result<GrantReport> {
    grant_with(&mut RealKernel, pid, rules, opts)
}

fn grant_with<K: Kernel>(
    kernel: &mut K,
    pid: i32,
    rules: &[DeviceRule],
    opts: &CgroupOptions,
) -> Result<GrantReport> {
    let _span = info_span!("cgroup_grant", pid, rules = rules.len()).entered();
    for rule in rules {
        rule.validate()?;
    }
    if pid <= 0 {
        return Err(CgroupError::InvalidPid { pid });
    }
    let skipped = GrantReport {
        v1: None,
        v2: V2Outcome::Skipped,
    };
    if rules.is_empty() {
        debug!("no device rules to grant");
        return Ok(skipped);
    }
    if opts.skip_writes {
        info!("cgroup writes skipped: the runtime could not restrict devices by cgroup either");
        return Ok(skipped);
    }

    let found = locate::container_cgroups_at(&opts.proc_root, opts.sys_cgroup.as_deref(), pid)?;
    debug!(v1 = ?found.v1_devices, v2 = ?found.v2, "located device cgroups");

    if let Some(dir) = &found.v1_devices {
        kernel.allow_v1(dir, rules)?;
        info!(cgroup = %dir.display(), rules = rules.len(), "devices.allow written");
    }
    let v2 = match &found.v2 {
        Some(dir) if found.v2_is_root => {
            info!(
                cgroup = %dir.display(),
                "process is in the root cgroup v2; device programs there are not changed"
            );
            V2Outcome::RootCgroup {
                cgroup: dir.clone(),
            }
        }
        Some(dir) => v2::grant(kernel, dir, rules)?,
        None => V2Outcome::NotMounted,
    };
    Ok(GrantReport {
        v1: found.v1_devices,
        v2,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::*;
    use crate::ebpf::testing::{rules, runc_like};
    use crate::kernel::fake::{Call, FakeKernel};

    /// A proc tree for pid 42 plus the cgroup directories its files point at.
    fn proc_tree(root: &Path, v1: bool, v2: bool) -> CgroupOptions {
        let r = root.display();
        let mut cgroup = String::new();
        let mut mountinfo = String::from("22 1 254:1 / / rw - ext4 /dev/vda rw\n");
        if v1 {
            cgroup.push_str("11:devices:/system.slice/docker-abc.scope\n");
            mountinfo.push_str(&format!(
                "36 31 0:33 / {r}/devices rw - cgroup cgroup rw,devices\n"
            ));
            fs::create_dir_all(root.join("devices/system.slice/docker-abc.scope")).expect("mkdir");
        }
        cgroup.push_str("0::/system.slice/docker-abc.scope\n");
        if v2 {
            mountinfo.push_str(&format!(
                "41 31 0:38 / {r}/unified rw - cgroup2 cgroup2 rw\n"
            ));
            fs::create_dir_all(root.join("unified/system.slice/docker-abc.scope")).expect("mkdir");
        }
        fs::create_dir_all(root.join("proc/42")).expect("mkdir");
        fs::create_dir_all(root.join("proc/self")).expect("mkdir");
        fs::write(root.join("proc/42/cgroup"), cgroup).expect("write");
        fs::write(root.join("proc/self/mountinfo"), mountinfo).expect("write");
        CgroupOptions {
            proc_root: root.join("proc"),
            sys_cgroup: None,
            skip_writes: false,
        }
    }

    fn runtime_program() -> Vec<ebpf::Insn> {
        runc_like(&rules(&["c 1:3 rwm"]))
    }

    #[test]
    fn v1_only_host_writes_devices_allow() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let opts = proc_tree(tmp.path(), true, false);
        let mut k = FakeKernel::new();
        let report = grant_with(&mut k, 42, &rules(&["c 1:9 rw", "b 8:0 r"]), &opts).expect("ok");
        let dir = tmp.path().join("devices/system.slice/docker-abc.scope");
        assert_eq!(report.v1.as_deref(), Some(dir.as_path()));
        assert_eq!(report.v2, V2Outcome::NotMounted);
        assert_eq!(
            k.calls,
            vec![Call::AllowV1(
                dir,
                vec!["c 1:9 rw".into(), "b 8:0 r".into()]
            )]
        );
    }

    #[test]
    fn v2_only_host_replaces_the_program() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let opts = proc_tree(tmp.path(), false, true);
        let mut k = FakeKernel::new().with_program(7, runtime_program(), true);
        let report = grant_with(&mut k, 42, &rules(&["c 1:9 rw"]), &opts).expect("ok");
        assert_eq!(report.v1, None);
        assert_eq!(report.v2.swaps().len(), 1);
        assert!(!k.calls.iter().any(|c| matches!(c, Call::AllowV1(..))));
        assert_eq!(k.attached, vec![100]);
    }

    #[test]
    fn hybrid_host_writes_both() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let opts = proc_tree(tmp.path(), true, true);
        let mut k = FakeKernel::new().with_program(7, runtime_program(), true);
        let report = grant_with(&mut k, 42, &rules(&["c 1:9 rw"]), &opts).expect("ok");
        assert!(report.v1.is_some());
        assert!(
            matches!(report.v2, V2Outcome::Replaced { .. }),
            "{:?}",
            report.v2
        );
        assert!(matches!(k.calls[0], Call::AllowV1(..)));
    }

    #[test]
    fn hybrid_host_without_v2_program_writes_only_v1() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let opts = proc_tree(tmp.path(), true, true);
        let mut k = FakeKernel::new();
        let report = grant_with(&mut k, 42, &rules(&["c 1:9 rw"]), &opts).expect("ok");
        assert!(report.v1.is_some());
        assert!(matches!(report.v2, V2Outcome::NoProgramAttached { .. }));
        assert!(k.attached.is_empty());
    }

    #[test]
    fn root_cgroup_v2_programs_are_never_changed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let opts = proc_tree(tmp.path(), true, true);
        fs::write(
            tmp.path().join("proc/42/cgroup"),
            "11:devices:/system.slice/docker-abc.scope\n0::/\n",
        )
        .expect("write");
        let mut k = FakeKernel::new().with_program(7, runtime_program(), true);
        let report = grant_with(&mut k, 42, &rules(&["c 1:9 rw"]), &opts).expect("ok");
        assert_eq!(
            report.v2,
            V2Outcome::RootCgroup {
                cgroup: tmp.path().join("unified")
            }
        );
        assert!(report.v1.is_some());
        assert!(
            !k.calls.iter().any(|c| !matches!(c, Call::AllowV1(..))),
            "{:?}",
            k.calls
        );
        assert_eq!(k.attached, vec![7]);
    }

    #[test]
    fn skip_writes_touches_nothing() {
        let opts = CgroupOptions {
            proc_root: PathBuf::from("/nonexistent/proc"),
            sys_cgroup: None,
            skip_writes: true,
        };
        let mut k = FakeKernel::new().with_program(7, runtime_program(), true);
        let report = grant_with(&mut k, 42, &rules(&["c 1:9 rw"]), &opts).expect("ok");
        assert_eq!(
            report,
            GrantReport {
                v1: None,
                v2: V2Outcome::Skipped
            }
        );
        assert!(k.calls.is_empty());
    }

    #[test]
    fn no_rules_touches_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let opts = proc_tree(tmp.path(), true, true);
        let mut k = FakeKernel::new().with_program(7, runtime_program(), true);
        let report = grant_with(&mut k, 42, &[], &opts).expect("ok");
        assert_eq!(report.v2, V2Outcome::Skipped);
        assert!(k.calls.is_empty());
    }

    #[test]
    fn invalid_rules_and_pids_fail_before_anything() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let opts = proc_tree(tmp.path(), true, true);
        let mut k = FakeKernel::new().with_program(7, runtime_program(), true);
        let bad = DeviceRule::new(DeviceKind::Char, 1, 9, Access::default());
        assert!(matches!(
            grant_with(&mut k, 42, &[bad], &opts),
            Err(CgroupError::Rule(RuleError::Invalid { .. }))
        ));
        assert!(matches!(
            grant_with(&mut k, -1, &rules(&["c 1:9 rw"]), &opts),
            Err(CgroupError::InvalidPid { pid: -1 })
        ));
        assert!(k.calls.is_empty());
    }

    #[test]
    fn unknown_pid_names_the_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let opts = proc_tree(tmp.path(), true, true);
        let mut k = FakeKernel::new();
        let err = grant_with(&mut k, 4242, &rules(&["c 1:9 rw"]), &opts).expect_err("no pid");
        assert!(err.to_string().contains("4242/cgroup"), "{err}");
        assert!(k.calls.is_empty());
    }

    #[test]
    fn default_options_read_the_host_proc() {
        let opts = CgroupOptions::default();
        assert_eq!(opts.proc_root, PathBuf::from("/proc"));
        assert!(!opts.skip_writes);
    }
}
