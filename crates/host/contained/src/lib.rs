//! Running something on the host for a container, contained, the same way for the hook, the
//! runtime shim and the NRI plugin: a profile's prepare program, and work the hook forks
//! without `exec` (the injection in the container's mount namespace, the linker cache). All run
//! as root for a container, so none may outlive its deadline, leave a process behind, or see a
//! descriptor or an environment variable it was not given.
//!
//! - [`child`]: one program or one forked piece of work, as pid 1 of a PID namespace of its
//!   own, under a deadline, with bounded output and a typed outcome.
//! - [`prepare_step`]: the prepare programs a plan lists, run in order within their budget.
//! - [`sys`]: the unsafe code: `fork` (plain, and into a new PID namespace) and the descriptor
//!   and pidfd syscalls around it.
#![warn(missing_docs)]

pub mod child;
pub mod prepare_step;
#[allow(unsafe_code)]
pub mod sys;
