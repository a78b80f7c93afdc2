//! The privileged operations [`crate::grant`] needs, behind a trait: [`RealKernel`] performs
//! them (cgroup file writes, bpf(2)); the test-only `fake::FakeKernel` records them and plays
//! a scripted kernel, so the decision logic is tested without root.

use std::path::Path;

use crate::ebpf::insn::Insn;
use crate::ebpf::program::{AttachedPrograms, CgroupDir, DeviceProgram, ReplaceOutcome};
use crate::error::Result;
use crate::v1;
use crate::DeviceRule;

/// Cgroup writes and device program operations.
pub(crate) trait Kernel {
    /// An open cgroup v2 directory.
    type Cgroup;
    /// An open device program.
    type Program;

    /// Appends `rules` to `<dir>/devices.allow` (cgroup v1).
    fn allow_v1(&mut self, dir: &Path, rules: &[DeviceRule]) -> Result<()>;
    /// Opens a cgroup v2 directory.
    fn open_cgroup(&mut self, dir: &Path) -> Result<Self::Cgroup>;
    /// Device programs attached to the cgroup itself, with its attach flags.
    fn attached(&mut self, cgroup: &Self::Cgroup) -> Result<AttachedPrograms>;
    /// Device programs in effect for the cgroup, ancestors' included.
    fn effective(&mut self, cgroup: &Self::Cgroup) -> Result<Vec<u32>>;
    /// Opens a program by id; `None` when permission is denied.
    fn open_program(&mut self, id: u32) -> Result<Option<Self::Program>>;
    /// A program's translated instructions.
    fn instructions(&mut self, program: &Self::Program) -> Result<Vec<Insn>>;
    /// Loads a new device program.
    fn load(&mut self, insns: &[Insn], name: &str) -> Result<Self::Program>;
    /// A program's id.
    fn program_id(&self, program: &Self::Program) -> u32;
    /// Attaches a program with `flags`.
    fn attach(&mut self, cgroup: &Self::Cgroup, program: &Self::Program, flags: u32) -> Result<()>;
    /// Replaces `old` by `new` atomically, when the kernel supports it.
    fn replace(
        &mut self,
        cgroup: &Self::Cgroup,
        new: &Self::Program,
        old: &Self::Program,
    ) -> Result<ReplaceOutcome>;
    /// Detaches a program.
    fn detach(&mut self, cgroup: &Self::Cgroup, program: &Self::Program) -> Result<()>;
}

/// The running kernel.
#[derive(Debug, Default)]
pub(crate) struct RealKernel;

impl Kernel for RealKernel {
    type Cgroup = CgroupDir;
    type Program = DeviceProgram;

    fn allow_v1(&mut self, dir: &Path, rules: &[DeviceRule]) -> Result<()> {
        v1::allow(dir, rules)
    }

    fn open_cgroup(&mut self, dir: &Path) -> Result<CgroupDir> {
        CgroupDir::open(dir)
    }

    fn attached(&mut self, cgroup: &CgroupDir) -> Result<AttachedPrograms> {
        cgroup.device_programs()
    }

    fn effective(&mut self, cgroup: &CgroupDir) -> Result<Vec<u32>> {
        cgroup.effective_device_programs()
    }

    fn open_program(&mut self, id: u32) -> Result<Option<DeviceProgram>> {
        DeviceProgram::open(id)
    }

    fn instructions(&mut self, program: &DeviceProgram) -> Result<Vec<Insn>> {
        program.instructions()
    }

    fn load(&mut self, insns: &[Insn], name: &str) -> Result<DeviceProgram> {
        DeviceProgram::load(insns, name)
    }

    fn program_id(&self, program: &DeviceProgram) -> u32 {
        program.id()
    }

    fn attach(&mut self, cgroup: &CgroupDir, program: &DeviceProgram, flags: u32) -> Result<()> {
        program.attach(cgroup, flags)
    }

    fn replace(
        &mut self,
        cgroup: &CgroupDir,
        new: &DeviceProgram,
        old: &DeviceProgram,
    ) -> Result<ReplaceOutcome> {
        new.replace(cgroup, old)
    }

    fn detach(&mut self, cgroup: &CgroupDir, program: &DeviceProgram) -> Result<()> {
        program.detach(cgroup)
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A scripted kernel that records every privileged call.

    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use super::Kernel;
    use crate::ebpf::insn::Insn;
    use crate::ebpf::program::{AttachedPrograms, ReplaceOutcome, F_ALLOW_MULTI};
    use crate::error::{CgroupError, Result};
    use crate::DeviceRule;

    /// One privileged call, in order.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Call {
        AllowV1(PathBuf, Vec<String>),
        OpenCgroup(PathBuf),
        Query,
        QueryEffective,
        OpenProgram(u32),
        Instructions(u32),
        Load(u32),
        Attach { id: u32, flags: u32 },
        Replace { new: u32, old: u32 },
        Detach(u32),
    }

    /// A program the fake kernel knows.
    #[derive(Debug, Clone)]
    pub(crate) struct FakeProgram {
        pub insns: Vec<Insn>,
        pub readable: bool,
    }

    /// Scripted state plus the call log.
    #[derive(Debug)]
    pub(crate) struct FakeKernel {
        pub calls: Vec<Call>,
        pub programs: BTreeMap<u32, FakeProgram>,
        /// Ids attached to the container's cgroup, in order.
        pub attached: Vec<u32>,
        /// The cgroup's attach flags.
        pub flags: u32,
        /// Ids attached to ancestors.
        pub inherited: Vec<u32>,
        pub replace_supported: bool,
        next_id: u32,
    }

    impl FakeKernel {
        /// A kernel with `BPF_F_REPLACE` and nothing attached.
        pub(crate) fn new() -> Self {
            Self {
                calls: Vec::new(),
                programs: BTreeMap::new(),
                attached: Vec::new(),
                flags: 0,
                inherited: Vec::new(),
                replace_supported: true,
                next_id: 100,
            }
        }

        /// Attaches a program with `insns` as id `id` (ALLOW_MULTI).
        pub(crate) fn with_program(mut self, id: u32, insns: Vec<Insn>, readable: bool) -> Self {
            self.programs.insert(id, FakeProgram { insns, readable });
            self.attached.push(id);
            self.flags = F_ALLOW_MULTI;
            self
        }

        /// The loaded instructions of an attached program.
        pub(crate) fn insns(&self, id: u32) -> &[Insn] {
            &self.programs[&id].insns
        }

        /// True when something was written, loaded or attached.
        pub(crate) fn changed_anything(&self) -> bool {
            self.calls.iter().any(|c| {
                matches!(
                    c,
                    Call::AllowV1(..)
                        | Call::Load(_)
                        | Call::Attach { .. }
                        | Call::Replace { .. }
                        | Call::Detach(_)
                )
            })
        }
    }

    impl Kernel for FakeKernel {
        type Cgroup = PathBuf;
        type Program = u32;

        fn allow_v1(&mut self, dir: &Path, rules: &[DeviceRule]) -> Result<()> {
            let lines = rules.iter().map(ToString::to_string).collect();
            self.calls.push(Call::AllowV1(dir.to_owned(), lines));
            Ok(())
        }

        fn open_cgroup(&mut self, dir: &Path) -> Result<PathBuf> {
            self.calls.push(Call::OpenCgroup(dir.to_owned()));
            Ok(dir.to_owned())
        }

        fn attached(&mut self, _: &PathBuf) -> Result<AttachedPrograms> {
            self.calls.push(Call::Query);
            Ok(AttachedPrograms {
                ids: self.attached.clone(),
                flags: self.flags,
            })
        }

        fn effective(&mut self, _: &PathBuf) -> Result<Vec<u32>> {
            self.calls.push(Call::QueryEffective);
            Ok(self
                .inherited
                .iter()
                .chain(&self.attached)
                .copied()
                .collect())
        }

        fn open_program(&mut self, id: u32) -> Result<Option<u32>> {
            self.calls.push(Call::OpenProgram(id));
            Ok(self.programs.get(&id).filter(|p| p.readable).map(|_| id))
        }

        fn instructions(&mut self, program: &u32) -> Result<Vec<Insn>> {
            self.calls.push(Call::Instructions(*program));
            let insns = self.programs[program].insns.clone();
            if insns.is_empty() {
                return Err(CgroupError::HiddenInstructions { id: *program });
            }
            Ok(insns)
        }

        fn load(&mut self, insns: &[Insn], _: &str) -> Result<u32> {
            let id = self.next_id;
            self.next_id += 1;
            self.programs.insert(
                id,
                FakeProgram {
                    insns: insns.to_vec(),
                    readable: true,
                },
            );
            self.calls.push(Call::Load(id));
            Ok(id)
        }

        fn program_id(&self, program: &u32) -> u32 {
            *program
        }

        fn attach(&mut self, _: &PathBuf, program: &u32, flags: u32) -> Result<()> {
            self.calls.push(Call::Attach {
                id: *program,
                flags,
            });
            if flags & F_ALLOW_MULTI != 0 {
                self.attached.push(*program);
            } else {
                // Without ALLOW_MULTI the kernel keeps one program and swaps it.
                self.attached = vec![*program];
            }
            Ok(())
        }

        fn replace(&mut self, _: &PathBuf, new: &u32, old: &u32) -> Result<ReplaceOutcome> {
            self.calls.push(Call::Replace {
                new: *new,
                old: *old,
            });
            if !self.replace_supported {
                return Ok(ReplaceOutcome::Unsupported);
            }
            let slot = self.attached.iter_mut().find(|id| **id == *old);
            *slot.expect("replacing an attached program") = *new;
            Ok(ReplaceOutcome::Replaced)
        }

        fn detach(&mut self, _: &PathBuf, program: &u32) -> Result<()> {
            self.calls.push(Call::Detach(*program));
            self.attached.retain(|id| id != program);
            Ok(())
        }
    }
}
