//! cgroup v2 device programs: instruction encoding ([`insn`]), the allow prefix generator
//! ([`prefix`], pure and tested in an interpreter) and safe handles on loaded programs and
//! cgroup attachments ([`program`], over the raw calls in the crate's `sys` module).

pub mod insn;
pub mod prefix;
pub mod program;
#[cfg(test)]
pub(crate) mod testing;

pub use insn::{Insn, Reg};
pub use program::{AttachedPrograms, CgroupDir, DeviceProgram, ReplaceOutcome};
