//! cgroup v2 device programs: instruction encoding ([`insn`]) and the allow prefix generator
//! ([`prefix`], pure and tested in an interpreter).

pub mod insn;
pub mod prefix;
#[cfg(test)]
pub(crate) mod testing;

pub use insn::{Insn, Reg};
