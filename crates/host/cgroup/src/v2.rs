//! cgroup v2: extend the runtime's device program(s) with our rules and swap them in.
//!
//! Device programs attached with `BPF_F_ALLOW_MULTI` are ANDed: every program on the cgroup
//! (and its ancestors) must allow a request. Attaching a second, allowing program therefore
//! grants nothing; the programs already there must be replaced. For each program attached
//! to the container's cgroup we read its translated instructions, prepend our allow rules
//! ([`crate::ebpf::prefix`]) and load the result. Every attached program gets the prefix,
//! because one unextended program would still deny (systemd-managed containers can carry
//! systemd's program next to the runtime's). All programs are loaded before anything is
//! swapped, so a verifier failure changes nothing.
//!
//! Then each old program is swapped for its extension with `BPF_F_REPLACE` (one atomic step
//! per program, no window in which the cgroup has fewer programs). Kernels before 5.6 lack
//! `BPF_F_REPLACE`; there the new program is attached first and the old one detached after,
//! and while both are attached their verdicts are ANDed, so access never widens beyond the
//! old program's. A cgroup in single-program mode (attach flags without `ALLOW_MULTI`)
//! swaps its one program whenever a new one is attached with the same flags.
//!
//! Programs attached to ancestor cgroups are not ours to change; they are logged.
//! With no program attached at all there is no device filter to extend, and none is added:
//! attaching a deny-by-default program of our own would take away access the container has.

use std::path::{Path, PathBuf};

use tracing::{debug, info, warn};

use crate::ebpf::prefix;
use crate::ebpf::program::F_ALLOW_MULTI;
use crate::ebpf::ReplaceOutcome;
use crate::error::{CgroupError, Result};
use crate::kernel::Kernel;
use crate::DeviceRule;

/// Name given to the programs we load (at most 15 characters).
pub const PROGRAM_NAME: &str = "devinject_dev";

/// One runtime program replaced by its extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramSwap {
    /// Id of the program that was attached.
    pub old_id: u32,
    /// Id of the extended program now attached in its place.
    pub new_id: u32,
    /// Instruction count of the extended program.
    pub insns: usize,
}

/// What happened on cgroup v2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum V2Outcome {
    /// No cgroup2 file system is mounted here: nothing to do.
    NotMounted,
    /// The process is in the root cgroup v2. Device programs there (if any) filter every
    /// process on the host, so they are left alone and nothing is attached.
    RootCgroup {
        /// The root cgroup v2 directory.
        cgroup: PathBuf,
    },
    /// The container's cgroup has no device program: it is not device-restricted on v2, and
    /// nothing was attached.
    NoProgramAttached {
        /// The container's cgroup v2 directory.
        cgroup: PathBuf,
    },
    /// Every readable program was swapped atomically (`BPF_F_REPLACE`, or single-program
    /// mode).
    Replaced {
        /// The container's cgroup v2 directory.
        cgroup: PathBuf,
        /// One entry per replaced program, in attachment order.
        programs: Vec<ProgramSwap>,
        /// Ids of attached programs that could not be opened (EPERM/EACCES) and still
        /// apply unchanged.
        unreadable: Vec<u32>,
    },
    /// The kernel lacks `BPF_F_REPLACE` (< 5.6): the extension was attached, then the old
    /// program detached.
    AttachedThenDetached {
        /// The container's cgroup v2 directory.
        cgroup: PathBuf,
        /// One entry per replaced program, in attachment order.
        programs: Vec<ProgramSwap>,
        /// Ids of attached programs that could not be opened and still apply unchanged.
        unreadable: Vec<u32>,
    },
    /// Nothing was written: [`crate::CgroupOptions::skip_writes`] was set, or there were no
    /// rules.
    Skipped,
}

impl V2Outcome {
    /// The program swaps made, if any.
    pub fn swaps(&self) -> &[ProgramSwap] {
        match self {
            V2Outcome::Replaced { programs, .. }
            | V2Outcome::AttachedThenDetached { programs, .. } => programs,
            _ => &[],
        }
    }
}

/// Extends every device program attached to `dir` with `rules`.
pub(crate) fn grant<K: Kernel>(
    kernel: &mut K,
    dir: &Path,
    rules: &[DeviceRule],
) -> Result<V2Outcome> {
    let cgroup = kernel.open_cgroup(dir)?;
    let attached = kernel.attached(&cgroup)?;
    // Only for the log: ancestors' programs also filter this cgroup but are not ours.
    match kernel.effective(&cgroup) {
        Ok(effective) => {
            let inherited: Vec<u32> = effective
                .into_iter()
                .filter(|id| !attached.ids.contains(id))
                .collect();
            if !inherited.is_empty() {
                warn!(
                    cgroup = %dir.display(),
                    programs = ?inherited,
                    "device programs attached to ancestor cgroups also apply and are not extended"
                );
            }
        }
        Err(error) => {
            debug!(cgroup = %dir.display(), %error, "cannot list effective device programs")
        }
    }
    if attached.ids.is_empty() {
        info!(cgroup = %dir.display(), "no device program attached; nothing to extend");
        return Ok(V2Outcome::NoProgramAttached {
            cgroup: dir.to_owned(),
        });
    }

    // Load every extension before swapping any, so that a failure leaves the cgroup as it was.
    let mut pending = Vec::with_capacity(attached.ids.len());
    let mut unreadable = Vec::new();
    for &id in &attached.ids {
        let Some(old) = kernel.open_program(id)? else {
            warn!(
                cgroup = %dir.display(),
                program = id,
                "device program cannot be opened (permission denied); it stays as it is"
            );
            unreadable.push(id);
            continue;
        };
        let original = kernel.instructions(&old)?;
        let code = prefix::extend(rules, &original)
            .map_err(|reason| CgroupError::Unextendable { id, reason })?;
        let new = kernel.load(&code, PROGRAM_NAME)?;
        debug!(
            old = id,
            new = kernel.program_id(&new),
            original = original.len(),
            insns = code.len(),
            "loaded extended device program"
        );
        pending.push((old, new, code.len()));
    }
    if pending.is_empty() {
        return Err(CgroupError::NoReadableProgram {
            path: dir.to_owned(),
            ids: unreadable,
        });
    }

    let mut programs = Vec::with_capacity(pending.len());
    let mut fell_back = false;
    let multi = attached.flags & F_ALLOW_MULTI != 0;
    for (old, new, insns) in &pending {
        let swap = ProgramSwap {
            old_id: kernel.program_id(old),
            new_id: kernel.program_id(new),
            insns: *insns,
        };
        if !multi {
            // One program per cgroup: attaching with the same flags swaps it.
            kernel.attach(&cgroup, new, attached.flags)?;
        } else if fell_back || kernel.replace(&cgroup, new, old)? == ReplaceOutcome::Unsupported {
            if !fell_back {
                warn!(
                    cgroup = %dir.display(),
                    "kernel lacks BPF_F_REPLACE; attaching the extended program, then \
                     detaching the old one"
                );
            }
            fell_back = true;
            kernel.attach(&cgroup, new, F_ALLOW_MULTI)?;
            kernel.detach(&cgroup, old)?;
        }
        info!(
            cgroup = %dir.display(),
            old_id = swap.old_id,
            new_id = swap.new_id,
            insns = swap.insns,
            rules = rules.len(),
            atomic = !fell_back,
            "device program replaced"
        );
        programs.push(swap);
    }

    let cgroup = dir.to_owned();
    Ok(if fell_back {
        V2Outcome::AttachedThenDetached {
            cgroup,
            programs,
            unreadable,
        }
    } else {
        V2Outcome::Replaced {
            cgroup,
            programs,
            unreadable,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ebpf::insn::Insn;
    use crate::ebpf::program::F_ALLOW_OVERRIDE;
    use crate::ebpf::testing::{deny_all, rules, run, runc_like};
    use crate::kernel::fake::{Call, FakeKernel};
    use crate::{Access, DeviceKind};

    fn dir() -> PathBuf {
        PathBuf::from("/sys/fs/cgroup/ctr")
    }

    fn runtime() -> Vec<Insn> {
        runc_like(&rules(&["c 1:3 rwm", "c 5:0 rw"]))
    }

    #[test]
    fn no_program_attached_attaches_nothing() {
        let mut k = FakeKernel::new();
        let out = grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect("granted");
        assert_eq!(out, V2Outcome::NoProgramAttached { cgroup: dir() });
        assert!(!k.changed_anything(), "{:?}", k.calls);
        assert!(k.attached.is_empty());
    }

    #[test]
    fn one_program_is_replaced_atomically_with_all_rules() {
        let mut k = FakeKernel::new().with_program(7, runtime(), true);
        let granted = rules(&["c 1:9 rw", "c 10:200 rwm"]);
        let out = grant(&mut k, &dir(), &granted).expect("granted");
        let new_id = 100;
        assert_eq!(
            out,
            V2Outcome::Replaced {
                cgroup: dir(),
                programs: vec![ProgramSwap {
                    old_id: 7,
                    new_id,
                    insns: k.insns(new_id).len()
                }],
                unreadable: vec![],
            }
        );
        assert_eq!(
            k.calls,
            vec![
                Call::OpenCgroup(dir()),
                Call::Query,
                Call::QueryEffective,
                Call::OpenProgram(7),
                Call::Instructions(7),
                Call::Load(new_id),
                Call::Replace {
                    new: new_id,
                    old: 7
                },
            ]
        );
        assert_eq!(
            k.attached,
            vec![new_id],
            "exactly one program, the extension"
        );
        let program = k.insns(new_id);
        assert!(
            program.ends_with(&runtime()),
            "original carried over unchanged"
        );
        // The loaded program allows the granted devices and the runtime's, nothing else.
        assert!(run(program, DeviceKind::Char, 1, 9, Access::RW));
        assert!(!run(program, DeviceKind::Char, 1, 9, Access::RWM));
        assert!(run(program, DeviceKind::Char, 10, 200, Access::RWM));
        assert!(run(program, DeviceKind::Char, 1, 3, Access::RWM));
        assert!(run(program, DeviceKind::Char, 5, 0, Access::RW));
        assert!(!run(program, DeviceKind::Char, 1, 8, Access::R));
    }

    #[test]
    fn without_replace_support_attaches_new_then_detaches_old() {
        let mut k = FakeKernel::new().with_program(7, runtime(), true);
        k.replace_supported = false;
        let out = grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect("granted");
        assert!(
            matches!(out, V2Outcome::AttachedThenDetached { .. }),
            "{out:?}"
        );
        let tail = &k.calls[k.calls.len() - 3..];
        assert_eq!(
            tail,
            &[
                Call::Replace { new: 100, old: 7 },
                Call::Attach {
                    id: 100,
                    flags: F_ALLOW_MULTI
                },
                Call::Detach(7),
            ]
        );
        assert_eq!(k.attached, vec![100]);
    }

    #[test]
    fn every_attached_program_gets_the_prefix_and_all_are_loaded_first() {
        let systemd_like = deny_all();
        let mut k = FakeKernel::new()
            .with_program(3, systemd_like, true)
            .with_program(7, runtime(), true);
        let out = grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect("granted");
        assert_eq!(out.swaps().len(), 2);
        assert_eq!(k.attached, vec![100, 101]);
        let first_swap = k
            .calls
            .iter()
            .position(|c| matches!(c, Call::Replace { .. }))
            .expect("replaced");
        let last_load = k
            .calls
            .iter()
            .rposition(|c| matches!(c, Call::Load(_)))
            .expect("loaded");
        assert!(last_load < first_swap, "{:?}", k.calls);
        // ANDed verdict of what is attached now.
        let allowed = |kind, major, minor, access| {
            k.attached
                .iter()
                .all(|id| run(k.insns(*id), kind, major, minor, access))
        };
        assert!(allowed(DeviceKind::Char, 1, 9, Access::RW));
        assert!(
            !allowed(DeviceKind::Char, 1, 3, Access::R),
            "systemd-like program still denies"
        );
    }

    #[test]
    fn unreadable_programs_are_skipped_and_reported() {
        let mut k = FakeKernel::new()
            .with_program(3, deny_all(), false)
            .with_program(7, runtime(), true);
        let out = grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect("granted");
        match out {
            V2Outcome::Replaced {
                programs,
                unreadable,
                ..
            } => {
                assert_eq!(unreadable, vec![3]);
                assert_eq!(programs.len(), 1);
                assert_eq!(programs[0].old_id, 7);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(k.attached, vec![3, 100]);
    }

    #[test]
    fn all_programs_unreadable_is_an_error_and_changes_nothing() {
        let mut k = FakeKernel::new().with_program(3, deny_all(), false);
        let err = grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect_err("nothing readable");
        assert!(matches!(err, CgroupError::NoReadableProgram { ref ids, .. } if ids == &[3]));
        assert!(err.to_string().contains("/sys/fs/cgroup/ctr"), "{err}");
        assert!(!k.changed_anything());
    }

    #[test]
    fn single_program_mode_swaps_by_attaching_with_the_same_flags() {
        let mut k = FakeKernel::new().with_program(7, runtime(), true);
        k.flags = F_ALLOW_OVERRIDE;
        let out = grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect("granted");
        assert!(matches!(out, V2Outcome::Replaced { .. }), "{out:?}");
        assert!(k.calls.contains(&Call::Attach {
            id: 100,
            flags: F_ALLOW_OVERRIDE
        }));
        assert!(!k
            .calls
            .iter()
            .any(|c| matches!(c, Call::Replace { .. } | Call::Detach(_))));
        assert_eq!(k.attached, vec![100]);
    }

    #[test]
    fn unextendable_program_fails_before_any_change() {
        let call = Insn::from_bytes([0x85, 0, 0, 0, 14, 0, 0, 0]);
        let mut k = FakeKernel::new().with_program(7, vec![call, Insn::exit()], true);
        let err = grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect_err("call");
        assert!(err.to_string().contains("program 7"), "{err}");
        assert!(!k.changed_anything());
    }

    #[test]
    fn hidden_instructions_fail_loudly_before_any_change() {
        let mut k = FakeKernel::new().with_program(7, vec![], true);
        let err = grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect_err("hidden");
        assert!(err.to_string().contains("bpf_jit_harden"), "{err}");
        assert!(!k.changed_anything());
    }

    #[test]
    fn ancestor_programs_are_left_alone() {
        let mut k = FakeKernel::new().with_program(7, runtime(), true);
        k.inherited = vec![1, 2];
        grant(&mut k, &dir(), &rules(&["c 1:9 rw"])).expect("granted");
        assert!(!k.calls.contains(&Call::OpenProgram(1)));
        assert!(!k.calls.contains(&Call::OpenProgram(2)));
    }
}
