//! The eBPF allow prefix: rules and a device request decoded from the input; the prefix in
//! front of a stand-in runtime program, run in rbpf, allows exactly what a rule allows and
//! otherwise reaches the original program with R1 intact (it returns major + 0x10000).
#![no_main]

use devinject_cgroup::ebpf::insn::{Insn, Reg};
use devinject_cgroup::ebpf::prefix::extend;
use devinject_cgroup::{Access, DeviceKind, DeviceRule, MAX_MAJOR, MAX_MINOR};
use libfuzzer_sys::fuzz_target;

fn word(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn kind(b: u8) -> DeviceKind {
    if b & 1 == 0 {
        DeviceKind::Char
    } else {
        DeviceKind::Block
    }
}

fuzz_target!(|data: &[u8]| {
    // 9 bytes per rule (kind+access, major, minor), then one request of the same shape.
    if data.len() < 9 {
        return;
    }
    let (rules_bytes, req) = data.split_at(data.len() - 9);
    let rules: Vec<DeviceRule> = rules_bytes
        .chunks_exact(9)
        .take(64)
        .map(|c| {
            let access = Access::from_bpf_mask(u32::from(c[0] >> 1) % 7 + 1);
            DeviceRule::new(
                kind(c[0]),
                word(&c[1..5]) % (MAX_MAJOR + 1),
                word(&c[5..9]) % (MAX_MINOR + 1),
                access,
            )
        })
        .collect();
    let (k, access) = (
        kind(req[0]),
        Access::from_bpf_mask(u32::from(req[0] >> 1) & 7),
    );
    // Requests often hit a rule's numbers exactly.
    let (major, minor) = match rules.get(usize::from(req[1]) % (rules.len() + 1)) {
        Some(r) if req[2] & 1 == 0 => (r.major, r.minor),
        _ => (
            word(&req[1..5]) % (MAX_MAJOR + 1),
            word(&req[5..9]) % (MAX_MINOR + 1),
        ),
    };
    let add = Insn::from_bytes([0x04, 0x00, 0, 0, 0x00, 0x00, 0x01, 0x00]);
    let original = vec![Insn::load_u32(Reg::R0, Reg::R1, 4), add, Insn::exit()];
    let program = extend(&rules, &original).expect("extendable");
    let code = Insn::encode(&program);
    let vm = rbpf::EbpfVmRaw::new(Some(&code)).expect("rbpf accepts the program");
    let mut ctx = Vec::with_capacity(12);
    ctx.extend_from_slice(&(access.bpf_mask() << 16 | k.bpf_type()).to_le_bytes());
    ctx.extend_from_slice(&major.to_le_bytes());
    ctx.extend_from_slice(&minor.to_le_bytes());
    let got = vm.execute_program(&mut ctx).expect("program runs");
    let allowed = rules.iter().any(|r| r.allows(k, major, minor, access));
    if allowed {
        assert_eq!(got, 1, "{k} {major}:{minor} {access} must be allowed");
    } else {
        assert_eq!(
            got,
            u64::from(major) + 0x10000,
            "{k} {major}:{minor} {access} must fall through"
        );
    }
});
