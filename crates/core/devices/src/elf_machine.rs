//! The machine an ELF file is built for (its `e_machine`), in the words people use, and whether
//! this host runs it: its own machine, or the 32-bit one it also runs (i386 on x86-64, 32-bit
//! ARM on AArch64: what a profile's `compat32` part carries).
//!
//! A driver root holding another architecture's libraries (an x86-64 driver copied onto an
//! arm64 node) would otherwise be mounted and listed in the linker cache, where ld.so skips the
//! entry and the program fails to load its library long after the start.

/// `e_machine` values (elf.h).
pub const EM_386: u16 = 3;
/// 32-bit ARM.
pub const EM_ARM: u16 = 40;
/// 64-bit PowerPC.
pub const EM_PPC64: u16 = 21;
/// IBM S/390.
pub const EM_S390: u16 = 22;
/// x86-64.
pub const EM_X86_64: u16 = 62;
/// AArch64.
pub const EM_AARCH64: u16 = 183;
/// RISC-V.
pub const EM_RISCV: u16 = 243;

/// The machine of the ELF header `head` (its first 20 bytes or more), in either byte order;
/// `None` when it is not an ELF header.
pub fn of_header(head: &[u8]) -> Option<u16> {
    if head.len() < 20 || !head.starts_with(b"\x7fELF") {
        return None;
    }
    let bytes = [head[18], head[19]];
    match head[5] {
        1 => Some(u16::from_le_bytes(bytes)),
        2 => Some(u16::from_be_bytes(bytes)),
        _ => None,
    }
}

/// This build's machine.
pub const fn host() -> u16 {
    if cfg!(target_arch = "aarch64") {
        EM_AARCH64
    } else if cfg!(target_arch = "x86") {
        EM_386
    } else if cfg!(target_arch = "arm") {
        EM_ARM
    } else if cfg!(target_arch = "powerpc64") {
        EM_PPC64
    } else if cfg!(target_arch = "s390x") {
        EM_S390
    } else if cfg!(target_arch = "riscv64") {
        EM_RISCV
    } else {
        EM_X86_64
    }
}

/// The 32-bit machine this host also runs, if any.
pub const fn companion() -> Option<u16> {
    match host() {
        EM_X86_64 => Some(EM_386),
        EM_AARCH64 => Some(EM_ARM),
        _ => None,
    }
}

/// Whether a library built for `machine` can be loaded by programs on this host.
pub fn runs_here(machine: u16) -> bool {
    machine == host() || companion() == Some(machine)
}

/// `machine` as people name it.
pub fn name(machine: u16) -> String {
    match machine {
        EM_386 => "i386".into(),
        EM_ARM => "32-bit ARM".into(),
        EM_PPC64 => "ppc64".into(),
        EM_S390 => "s390x".into(),
        EM_X86_64 => "x86-64".into(),
        EM_AARCH64 => "AArch64".into(),
        EM_RISCV => "RISC-V".into(),
        other => format!("ELF machine {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(order: u8, machine: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = order;
        let m = if order == 1 {
            machine.to_le_bytes()
        } else {
            machine.to_be_bytes()
        };
        h[18..20].copy_from_slice(&m);
        h
    }

    #[test]
    fn reads_the_machine_in_either_byte_order_and_only_from_elf() {
        assert_eq!(of_header(&header(1, EM_AARCH64)), Some(EM_AARCH64));
        assert_eq!(of_header(&header(2, EM_S390)), Some(EM_S390));
        assert_eq!(of_header(&header(3, EM_X86_64)), None);
        assert_eq!(of_header(&header(1, EM_X86_64)[..19]), None);
        assert_eq!(of_header(b"#!/bin/sh\n echo not an ELF file at all"), None);
    }

    #[test]
    fn the_host_runs_its_own_machine_and_its_32_bit_companion_only() {
        assert!(runs_here(host()));
        if let Some(c) = companion() {
            assert!(runs_here(c));
        }
        let other = if host() == EM_AARCH64 {
            EM_X86_64
        } else {
            EM_AARCH64
        };
        assert!(!runs_here(other), "{}", name(other));
        assert!(!runs_here(EM_RISCV) || host() == EM_RISCV);
    }
}
