//! The allow prefix: instructions placed in front of a runtime's device program.
//!
//! A device program receives `R1 = struct bpf_cgroup_dev_ctx *`
//! (`{ u32 access_type; u32 major; u32 minor; }`, `access_type = access << 16 | type`) and
//! returns 1 to allow. The prefix first decodes the context into registers:
//!
//! | register | value |
//! |---|---|
//! | R2 | device type (`access_type & 0xffff`) |
//! | R3 | requested access (`access_type >> 16`) |
//! | R4 | major |
//! | R5 | minor |
//!
//! then one block per rule: type, access subset (`(R3 & allowed) == R3`, computed in R0),
//! major and minor are compared, and on a match the program returns 1. A non-matching
//! request falls through to the first instruction of the original program, unchanged, so
//! whatever the runtime allowed stays allowed and everything else stays denied.
//!
//! Why only in front: runc's generated code uses R1 as scratch, so nothing can be appended
//! after it. Why this register discipline: after the header only R0 is written; R1 (the
//! context pointer) is never touched, so the original program finds R1 exactly as the kernel
//! passed it, and its relative jumps stay valid because it is copied as one block.
//! (libnvidia-container reused R2 as the access temporary, so its later blocks compared a
//! clobbered type.)

use super::insn::{Insn, Reg, LD_IMM64};
use crate::DeviceRule;

/// Byte offsets of the `bpf_cgroup_dev_ctx` fields.
const CTX_ACCESS_TYPE: i16 = 0;
const CTX_MAJOR: i16 = 4;
const CTX_MINOR: i16 = 8;

/// Number of instructions in the header that loads R2–R5.
pub const HEADER_LEN: usize = 6;

/// The context-decoding header (see the module documentation).
pub fn header() -> [Insn; HEADER_LEN] {
    [
        Insn::load_u32(Reg::R2, Reg::R1, CTX_ACCESS_TYPE),
        Insn::and32_imm(Reg::R2, 0xffff),
        Insn::load_u32(Reg::R3, Reg::R1, CTX_ACCESS_TYPE),
        Insn::rsh32_imm(Reg::R3, 16),
        Insn::load_u32(Reg::R4, Reg::R1, CTX_MAJOR),
        Insn::load_u32(Reg::R5, Reg::R1, CTX_MINOR),
    ]
}

/// The instructions that allow `rule` and otherwise fall through to the next instruction
/// after the block. Expects the header's register layout.
pub fn rule_block(rule: &DeviceRule) -> Vec<Insn> {
    // Jumps to "next" are emitted with offset 0 and patched once the length is known.
    let mut block = Vec::with_capacity(8);
    let mut to_next = Vec::with_capacity(4);

    to_next.push(block.len());
    block.push(Insn::jne_imm(Reg::R2, imm(rule.kind.bpf_type()), 0));

    let allowed = rule.access.bpf_mask();
    if allowed != 0b111 {
        // Every requested bit must be allowed: (requested & allowed) == requested.
        block.push(Insn::mov32_reg(Reg::R0, Reg::R3));
        block.push(Insn::and32_imm(Reg::R0, imm(allowed)));
        to_next.push(block.len());
        block.push(Insn::jne_reg(Reg::R0, Reg::R3, 0));
    }

    to_next.push(block.len());
    block.push(Insn::jne_imm(Reg::R4, imm(rule.major), 0));
    to_next.push(block.len());
    block.push(Insn::jne_imm(Reg::R5, imm(rule.minor), 0));
    block.push(Insn::mov32_imm(Reg::R0, 1));
    block.push(Insn::exit());

    let len = block.len();
    for i in to_next {
        // Blocks are at most 8 instructions long.
        block[i].off = i16::try_from(len - i - 1).unwrap_or(i16::MAX);
    }
    block
}

/// Header plus one block per rule; empty when there are no rules.
pub fn allow_prefix(rules: &[DeviceRule]) -> Vec<Insn> {
    if rules.is_empty() {
        return Vec::new();
    }
    let mut prefix = header().to_vec();
    for rule in rules {
        prefix.extend(rule_block(rule));
    }
    prefix
}

/// Checks that `original`, as dumped by the kernel (`xlated_prog_insns`), can be loaded again.
///
/// The translated dump is not always loadable: helper and subprogram calls carry kernel
/// addresses instead of helper ids, map references carry map ids instead of fds, and
/// constant blinding (`net.core.bpf_jit_harden`) introduces the hidden register 11. Device
/// programs from runc, crun and systemd use none of these.
pub fn check_extendable(original: &[Insn]) -> Result<(), String> {
    if original.is_empty() {
        return Err("it has no instructions".to_owned());
    }
    for (i, insn) in original.iter().enumerate() {
        if insn.is_call() {
            return Err(format!(
                "instruction {i} is a call (code {:#04x}); calls cannot be carried over from \
                 the kernel's translated dump",
                insn.code
            ));
        }
        if insn.code == LD_IMM64 {
            if insn.src != 0 {
                return Err(format!(
                    "instruction {i} references a map or kernel object (pseudo source {})",
                    insn.src
                ));
            }
            continue;
        }
        if insn.dst > Reg::R10 as u8 || insn.src > Reg::R10 as u8 {
            return Err(format!(
                "instruction {i} uses the JIT's hidden register: constants were blinded \
                 (net.core.bpf_jit_harden)"
            ));
        }
    }
    Ok(())
}

/// The prefix for `rules` followed by `original`; fails when `original` cannot be carried
/// over (see [`check_extendable`]).
pub fn extend(rules: &[DeviceRule], original: &[Insn]) -> Result<Vec<Insn>, String> {
    check_extendable(original)?;
    let mut program = allow_prefix(rules);
    program.extend_from_slice(original);
    Ok(program)
}

fn imm(value: u32) -> i32 {
    // Types, access masks and validated device numbers are all far below 2^31.
    i32::try_from(value).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ebpf::insn::class;
    use crate::ebpf::testing::{deny_all, rules, run, runc_like};
    use crate::{Access, DeviceKind};

    fn all_accesses() -> impl Iterator<Item = Access> {
        (0..8).map(Access::from_bpf_mask)
    }

    /// Checks `program` against the rule lists over every type, access subset and a spread
    /// of majors and minors around the ones named.
    fn assert_decision_table(program: &[Insn], granted: &[DeviceRule], runtime: &[DeviceRule]) {
        let mut majors: Vec<u32> = vec![0, 1, 7, 4095];
        let mut minors: Vec<u32> = vec![0, 1, 1_048_575];
        for r in granted.iter().chain(runtime) {
            majors.extend([r.major, r.major + 1, r.major.saturating_sub(1)]);
            minors.extend([r.minor, r.minor + 1, r.minor.saturating_sub(1)]);
        }
        majors.sort_unstable();
        majors.dedup();
        minors.sort_unstable();
        minors.dedup();
        let mut checked = 0;
        for kind in [DeviceKind::Char, DeviceKind::Block] {
            for &major in &majors {
                for &minor in &minors {
                    for access in all_accesses() {
                        let expected = granted
                            .iter()
                            .chain(runtime)
                            .any(|r| r.allows(kind, major, minor, access));
                        let got = run(program, kind, major, minor, access);
                        assert_eq!(
                            got, expected,
                            "{kind} {major}:{minor} {access:?}: \
                             program says {got}, rules say {expected}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100, "decision table too small: {checked}");
    }

    #[test]
    fn prefix_over_deny_all_allows_exactly_the_rules() {
        let granted = rules(&[
            "c 10:200 rw",
            "b 8:0 r",
            "c 1:9 rwm",
            "c 226:128 m",
            "c 195:255 w",
        ]);
        let program = extend(&granted, &deny_all()).expect("extendable");
        assert_decision_table(&program, &granted, &[]);
    }

    #[test]
    fn prefix_over_runc_like_program_keeps_the_runtime_rules() {
        let runtime = rules(&[
            "c 1:3 rwm",
            "c 1:5 rwm",
            "c 5:0 rw",
            "c 136:0 rw",
            "b 7:0 m",
        ]);
        let original = runc_like(&runtime);
        // The runtime's program alone allows only its rules.
        assert_decision_table(&original, &[], &runtime);
        let granted = rules(&["c 1:9 rw", "c 10:200 rwm", "b 259:1 r"]);
        let program = extend(&granted, &original).expect("extendable");
        assert_decision_table(&program, &granted, &runtime);
    }

    #[test]
    fn sixteen_rules_in_one_prefix() {
        let granted: Vec<DeviceRule> = (0..16)
            .map(|i| DeviceRule::new(DeviceKind::Char, 240 + i / 4, i, Access::RW))
            .collect();
        let runtime = rules(&["c 1:3 rwm"]);
        let program = extend(&granted, &runc_like(&runtime)).expect("extendable");
        assert_decision_table(&program, &granted, &runtime);
    }

    #[test]
    fn an_ungranted_device_still_reaches_the_original_deny() {
        let program = extend(&rules(&["c 1:9 r"]), &deny_all()).expect("extendable");
        assert!(run(&program, DeviceKind::Char, 1, 9, Access::R));
        assert!(!run(&program, DeviceKind::Char, 1, 9, Access::RW));
        assert!(!run(&program, DeviceKind::Char, 1, 8, Access::R));
        assert!(!run(&program, DeviceKind::Block, 1, 9, Access::R));
    }

    #[test]
    fn prefix_writes_no_argument_register_after_the_header() {
        let prefix = allow_prefix(&rules(&["c 1:9 rw", "b 8:0 rwm", "c 10:200 m"]));
        assert_eq!(&prefix[..HEADER_LEN], &header());
        for (i, insn) in prefix.iter().enumerate().skip(HEADER_LEN) {
            if matches!(insn.class(), class::ALU | class::ALU64 | class::LDX) {
                assert_eq!(
                    insn.dst,
                    Reg::R0 as u8,
                    "instruction {i} writes r{}",
                    insn.dst
                );
            }
        }
        assert!(prefix.iter().all(|insn| insn.dst != Reg::R1 as u8));
    }

    #[test]
    fn prefix_jumps_stay_inside_the_prefix_or_land_on_the_original() {
        let prefix = allow_prefix(&rules(&["c 1:9 rw", "b 8:0 rwm"]));
        for (i, insn) in prefix.iter().enumerate() {
            if insn.class() == class::JMP && *insn != Insn::exit() {
                let target = i as i64 + 1 + i64::from(insn.off);
                assert!(
                    target > i as i64 && target <= prefix.len() as i64,
                    "jump at {i}"
                );
            }
        }
    }

    #[test]
    fn no_rules_means_no_prefix() {
        assert!(allow_prefix(&[]).is_empty());
        assert_eq!(extend(&[], &deny_all()).expect("extendable"), deny_all());
    }

    #[test]
    fn programs_that_cannot_be_reloaded_are_refused() {
        let call = Insn::from_bytes([0x85, 0, 0, 0, 14, 0, 0, 0]);
        let err = check_extendable(&[call, Insn::exit()]).expect_err("call");
        assert!(err.contains("instruction 0 is a call"), "{err}");

        let map_ref = Insn::from_bytes([0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        let second = Insn::from_bytes([0; 8]);
        let err = check_extendable(&[map_ref, second, Insn::exit()]).expect_err("map");
        assert!(err.contains("map"), "{err}");

        let blinded = Insn::from_bytes([0xb4, 0x0b, 0, 0, 1, 0, 0, 0]);
        let err = check_extendable(&[blinded, Insn::exit()]).expect_err("blinded");
        assert!(err.contains("bpf_jit_harden"), "{err}");
        // Register 11 as the source too; the frame pointer R10 is an ordinary register here,
        // as destination (`*(u32 *)(r10 - 4) = r1`) and as source.
        let blinded_src = Insn::from_bytes([0xbc, 0xb0, 0, 0, 0, 0, 0, 0]);
        let err = check_extendable(&[blinded_src, Insn::exit()]).expect_err("blinded source");
        assert!(err.contains("bpf_jit_harden"), "{err}");
        let store = Insn::from_bytes([0x63, 0x1a, 0xfc, 0xff, 0, 0, 0, 0]);
        let load = Insn::load_u32(Reg::R2, Reg::R10, -4);
        assert!(check_extendable(&[store, load, Insn::exit()]).is_ok());

        assert!(check_extendable(&[]).is_err());

        let const64 = Insn::from_bytes([0x18, 0x00, 0, 0, 7, 0, 0, 0]);
        assert!(check_extendable(&[const64, second, Insn::exit()]).is_ok());
    }
}

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default): for random
    //! rule lists and random device requests, the prefix run in the rbpf interpreter allows
    //! exactly what the rule list allows, and hands everything else to the original program
    //! untouched.

    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;
    use crate::ebpf::testing::{echo_major, run, run_raw, runc_like};
    use crate::{Access, DeviceKind, RuleError, MAX_MAJOR, MAX_MINOR};

    fn kind() -> impl Strategy<Value = DeviceKind> {
        prop_oneof![Just(DeviceKind::Char), Just(DeviceKind::Block)]
    }

    fn number(max: u32) -> impl Strategy<Value = u32> {
        prop_oneof![3 => 0u32..8, 1 => Just(max), 1 => 0..=max]
    }

    fn rule() -> impl Strategy<Value = DeviceRule> {
        (kind(), number(MAX_MAJOR), number(MAX_MINOR), 1u32..8)
            .prop_map(|(k, ma, mi, acc)| DeviceRule::new(k, ma, mi, Access::from_bpf_mask(acc)))
    }

    /// One device request: type, major, minor, access.
    type Req = (DeviceKind, u32, u32, Access);

    /// The rules with requests near them (same numbers or off by one) or anywhere.
    fn request(rules: Vec<DeviceRule>) -> impl Strategy<Value = (Vec<DeviceRule>, Vec<Req>)> {
        let n = rules.len().max(1);
        let one = (
            0..n,
            kind(),
            0u32..3,
            0u32..3,
            0u32..8,
            any::<bool>(),
            number(MAX_MAJOR),
            number(MAX_MINOR),
        );
        (Just(rules), vec(one, 1..24)).prop_map(|(rules, picks)| {
            let reqs = picks
                .into_iter()
                .map(|(i, k, dma, dmi, acc, near, ma, mi)| {
                    let access = Access::from_bpf_mask(acc);
                    match rules.get(i) {
                        Some(r) if near => (
                            if dma == 2 { k } else { r.kind },
                            (r.major + dma).saturating_sub(1).min(MAX_MAJOR),
                            (r.minor + dmi).saturating_sub(1).min(MAX_MINOR),
                            access,
                        ),
                        _ => (k, ma, mi, access),
                    }
                })
                .collect();
            (rules, reqs)
        })
    }

    proptest! {
        #[test]
        fn prefix_allows_exactly_the_rules_and_falls_through_otherwise(
            (granted, requests) in vec(rule(), 0..12).prop_flat_map(request),
        ) {
            let program = extend(&granted, &echo_major()).unwrap();
            for (kind, major, minor, access) in requests {
                let allowed = granted.iter().any(|r| r.allows(kind, major, minor, access));
                let got = run_raw(&program, kind, major, minor, access);
                if allowed {
                    prop_assert_eq!(got, 1, "{} {}:{} {:?} must be allowed", kind, major, minor, access);
                } else {
                    prop_assert_eq!(
                        got,
                        u64::from(major) + 0x10000,
                        "{} {}:{} {:?} must reach the original program with R1 intact", kind, major, minor, access
                    );
                }
            }
        }

        #[test]
        fn prefix_over_a_runc_program_allows_the_union(
            (granted, requests) in vec(rule(), 0..8).prop_flat_map(request),
            runtime in vec(rule(), 0..8),
        ) {
            let program = extend(&granted, &runc_like(&runtime)).unwrap();
            for (kind, major, minor, access) in requests {
                let expected = granted.iter().chain(&runtime).any(|r| r.allows(kind, major, minor, access));
                prop_assert_eq!(run(&program, kind, major, minor, access), expected, "{} {}:{} {:?}", kind, major, minor, access);
            }
        }

        #[test]
        fn rule_text_round_trips(r in rule()) {
            let text = r.to_string();
            prop_assert_eq!(text.parse::<DeviceRule>().unwrap(), r);
        }

        #[test]
        fn rule_parser_never_panics_and_names_the_input(
            s in prop_oneof![
                "[cb*a ]{0,2}[0-9:*]{0,12} ?[rwm]{0,4}",
                "[cba*] 0{0,2}[0-9*]{1,8}:0{0,2}[0-9*]{1,8} [rwmx]{0,4}",
                any::<String>(),
            ],
        ) {
            match s.parse::<DeviceRule>() {
                Ok(r) => prop_assert!(r.validate().is_ok()),
                Err(RuleError::Parse { input, .. }) => prop_assert_eq!(input, s),
                // Well-formed but out of range: named in canonical form.
                Err(RuleError::Invalid { rule, .. }) => {
                    let canonical: DeviceRule = DeviceRule::new(
                        if s.starts_with('b') { DeviceKind::Block } else { DeviceKind::Char },
                        0,
                        0,
                        Access::R,
                    );
                    prop_assert!(rule.starts_with(canonical.kind.letter()), "{}", rule);
                }
            }
        }
    }
}
