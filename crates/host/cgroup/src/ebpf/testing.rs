//! Test helpers: run device programs in the rbpf interpreter, and reference programs.

use super::insn::{Insn, Reg};
use crate::{Access, DeviceKind, DeviceRule};

/// Runs `program` in the rbpf interpreter on one device request; true when allowed.
pub(crate) fn run(
    program: &[Insn],
    kind: DeviceKind,
    major: u32,
    minor: u32,
    access: Access,
) -> bool {
    match run_raw(program, kind, major, minor, access) {
        0 => false,
        1 => true,
        other => panic!("device program returned {other}"),
    }
}

/// Runs `program` on one device request and returns R0 as it is at `exit`.
pub(crate) fn run_raw(
    program: &[Insn],
    kind: DeviceKind,
    major: u32,
    minor: u32,
    access: Access,
) -> u64 {
    let code = Insn::encode(program);
    let vm = rbpf::EbpfVmRaw::new(Some(&code)).expect("rbpf accepts the program");
    let mut ctx = Vec::with_capacity(12);
    ctx.extend_from_slice(&(access.bpf_mask() << 16 | kind.bpf_type()).to_le_bytes());
    ctx.extend_from_slice(&major.to_le_bytes());
    ctx.extend_from_slice(&minor.to_le_bytes());
    vm.execute_program(&mut ctx).expect("program runs")
}

/// A stand-in for a runtime's program that returns `major + 0x10000`, read through R1: what
/// a request that falls through the prefix gets, proving R1 still points at the context.
pub(crate) fn echo_major() -> Vec<Insn> {
    // BPF_ALU | BPF_ADD | BPF_K on r0 with imm 0x10000.
    let add = Insn::from_bytes([0x04, 0x00, 0, 0, 0x00, 0x00, 0x01, 0x00]);
    vec![Insn::load_u32(Reg::R0, Reg::R1, 4), add, Insn::exit()]
}

/// `r0 = 0; exit`.
pub(crate) fn deny_all() -> Vec<Insn> {
    vec![Insn::mov64_imm(Reg::R0, 0), Insn::exit()]
}

/// A program shaped like runc's (`libcontainer/cgroups/devices/devicefilter`): its own
/// header, R1 reused as the access scratch register, no access test for `rwm` rules, default
/// deny.
pub(crate) fn runc_like(rules: &[DeviceRule]) -> Vec<Insn> {
    let mut p = vec![
        Insn::load_u32(Reg::R2, Reg::R1, 0),
        Insn::and32_imm(Reg::R2, 0xffff),
        Insn::load_u32(Reg::R3, Reg::R1, 0),
        Insn::rsh32_imm(Reg::R3, 16),
        Insn::load_u32(Reg::R4, Reg::R1, 4),
        Insn::load_u32(Reg::R5, Reg::R1, 8),
    ];
    for rule in rules {
        let mask = rule.access.bpf_mask() as i32;
        let full = mask == 7;
        let len: i16 = if full { 5 } else { 8 };
        let mut i: i16 = 0;
        p.push(Insn::jne_imm(
            Reg::R2,
            rule.kind.bpf_type() as i32,
            len - i - 1,
        ));
        i += 1;
        if !full {
            p.push(Insn::mov32_reg(Reg::R1, Reg::R3));
            p.push(Insn::and32_imm(Reg::R1, mask));
            i += 2;
            p.push(Insn::jne_reg(Reg::R1, Reg::R3, len - i - 1));
            i += 1;
        }
        p.push(Insn::jne_imm(Reg::R4, rule.major as i32, len - i - 1));
        i += 1;
        p.push(Insn::jne_imm(Reg::R5, rule.minor as i32, len - i - 1));
        p.push(Insn::mov32_imm(Reg::R0, 1));
        p.push(Insn::exit());
    }
    p.push(Insn::mov32_imm(Reg::R0, 0));
    p.push(Insn::exit());
    p
}

/// Parses rule texts.
pub(crate) fn rules(text: &[&str]) -> Vec<DeviceRule> {
    text.iter()
        .map(|t| t.parse().expect("valid rule"))
        .collect()
}
