//! eBPF instruction encoding: the 8-byte `struct bpf_insn` of `linux/bpf.h`.
//!
//! Only what device programs need is given a constructor (32-bit context loads, 32-bit ALU,
//! 64-bit conditional jumps, `exit`); any instruction can still be decoded, inspected and
//! re-encoded unchanged, which is how a runtime's program is carried over.
//! Reference: <https://docs.kernel.org/bpf/standardization/instruction-set.html>.

/// Instruction classes (the low three bits of the opcode).
pub(crate) mod class {
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const ALU: u8 = 0x04;
    pub const JMP: u8 = 0x05;
    pub const ALU64: u8 = 0x07;
}

const SIZE_W: u8 = 0x00;
const SIZE_DW: u8 = 0x18;
const MODE_IMM: u8 = 0x00;
const MODE_MEM: u8 = 0x60;
const SRC_K: u8 = 0x00;
const SRC_X: u8 = 0x08;

const ALU_AND: u8 = 0x50;
const ALU_RSH: u8 = 0x70;
const ALU_MOV: u8 = 0xb0;

const JMP_JA: u8 = 0x00;
const JMP_JEQ: u8 = 0x10;
const JMP_JNE: u8 = 0x50;
pub(crate) const JMP_CALL: u8 = 0x80;
const JMP_EXIT: u8 = 0x90;

/// `BPF_LD | BPF_DW | BPF_IMM`: the first half of a two-slot 64-bit immediate load.
pub(crate) const LD_IMM64: u8 = class::LD | SIZE_DW | MODE_IMM;

/// An eBPF register. `R1` holds the context pointer on entry, `R0` the return value on exit,
/// `R10` is the read-only frame pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum Reg {
    R0 = 0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
}

/// One eBPF instruction, as
/// `struct bpf_insn { u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm; }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Opcode: class, size/mode or operation, source flag.
    pub code: u8,
    /// Destination register number (0..=10, 11 is the kernel's hidden `BPF_REG_AX`).
    pub dst: u8,
    /// Source register number, or a pseudo marker for calls and 64-bit loads.
    pub src: u8,
    /// Signed offset: memory displacement or jump distance in instructions.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// Encoded size of one instruction in bytes.
    pub const SIZE: usize = 8;

    /// The instruction class, `code & 0x07`.
    pub fn class(self) -> u8 {
        self.code & 0x07
    }

    /// `dst = *(u32 *)(src + off)`, zero-extended.
    pub fn load_u32(dst: Reg, src: Reg, off: i16) -> Self {
        Self::new(class::LDX | SIZE_W | MODE_MEM, dst, src, off, 0)
    }

    /// `dst = (u32) imm`, the upper half cleared.
    pub fn mov32_imm(dst: Reg, imm: i32) -> Self {
        Self::new(class::ALU | ALU_MOV | SRC_K, dst, Reg::R0, 0, imm)
    }

    /// `dst = (u32) src`, the upper half cleared.
    pub fn mov32_reg(dst: Reg, src: Reg) -> Self {
        Self::new(class::ALU | ALU_MOV | SRC_X, dst, src, 0, 0)
    }

    /// `dst = imm`, sign-extended to 64 bits.
    pub fn mov64_imm(dst: Reg, imm: i32) -> Self {
        Self::new(class::ALU64 | ALU_MOV | SRC_K, dst, Reg::R0, 0, imm)
    }

    /// `dst = (u32) dst & (u32) imm`.
    pub fn and32_imm(dst: Reg, imm: i32) -> Self {
        Self::new(class::ALU | ALU_AND | SRC_K, dst, Reg::R0, 0, imm)
    }

    /// `dst = (u32) dst >> imm` (logical).
    pub fn rsh32_imm(dst: Reg, imm: i32) -> Self {
        Self::new(class::ALU | ALU_RSH | SRC_K, dst, Reg::R0, 0, imm)
    }

    /// `if dst != imm goto +off` (64-bit compare, `imm` sign-extended).
    pub fn jne_imm(dst: Reg, imm: i32, off: i16) -> Self {
        Self::new(class::JMP | JMP_JNE | SRC_K, dst, Reg::R0, off, imm)
    }

    /// `if dst != src goto +off` (64-bit compare).
    pub fn jne_reg(dst: Reg, src: Reg, off: i16) -> Self {
        Self::new(class::JMP | JMP_JNE | SRC_X, dst, src, off, 0)
    }

    /// `if dst == imm goto +off` (64-bit compare, `imm` sign-extended).
    pub fn jeq_imm(dst: Reg, imm: i32, off: i16) -> Self {
        Self::new(class::JMP | JMP_JEQ | SRC_K, dst, Reg::R0, off, imm)
    }

    /// `goto +off`.
    pub fn ja(off: i16) -> Self {
        Self::new(class::JMP | JMP_JA, Reg::R0, Reg::R0, off, 0)
    }

    /// `exit`: return `R0`.
    pub fn exit() -> Self {
        Self::new(class::JMP | JMP_EXIT, Reg::R0, Reg::R0, 0, 0)
    }

    fn new(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Self {
        Self {
            code,
            dst: dst as u8,
            src: src as u8,
            off,
            imm,
        }
    }

    /// True for `BPF_JMP | BPF_CALL` (helper, kfunc or subprogram call).
    pub fn is_call(self) -> bool {
        self.code == class::JMP | JMP_CALL
    }

    /// The little-endian wire form (x86-64 and arm64 are little-endian; big-endian hosts
    /// are not supported by this crate).
    pub fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    /// Decodes one instruction from its wire form.
    pub fn from_bytes(b: [u8; Self::SIZE]) -> Self {
        Self {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Encodes a program.
    pub fn encode(insns: &[Insn]) -> Vec<u8> {
        insns.iter().flat_map(|i| i.to_bytes()).collect()
    }

    /// Decodes a program; `None` when the length is not a multiple of [`Insn::SIZE`].
    pub fn decode(bytes: &[u8]) -> Option<Vec<Insn>> {
        if !bytes.len().is_multiple_of(Self::SIZE) {
            return None;
        }
        Some(
            bytes
                .chunks_exact(Self::SIZE)
                .map(|c| {
                    let mut b = [0u8; Self::SIZE];
                    b.copy_from_slice(c);
                    Insn::from_bytes(b)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_the_kernel_macros() {
        // Values as produced by BPF_LDX_MEM(BPF_W, BPF_REG_2, BPF_REG_1, 4),
        // BPF_ALU32_IMM(BPF_AND, BPF_REG_2, 0xffff), BPF_JMP_REG(BPF_JNE, BPF_REG_0, BPF_REG_3, 4),
        // BPF_MOV32_IMM(BPF_REG_0, 1) and BPF_EXIT_INSN() in linux/filter.h.
        assert_eq!(
            Insn::load_u32(Reg::R2, Reg::R1, 4).to_bytes(),
            [0x61, 0x12, 4, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::and32_imm(Reg::R2, 0xffff).to_bytes(),
            [0x54, 0x02, 0, 0, 0xff, 0xff, 0, 0]
        );
        assert_eq!(
            Insn::jne_reg(Reg::R0, Reg::R3, 4).to_bytes(),
            [0x5d, 0x30, 4, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::mov32_imm(Reg::R0, 1).to_bytes(),
            [0xb4, 0x00, 0, 0, 1, 0, 0, 0]
        );
        assert_eq!(Insn::exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            Insn::jne_imm(Reg::R4, 237, -2).to_bytes(),
            [0x55, 0x04, 0xfe, 0xff, 237, 0, 0, 0]
        );
        // BPF_JMP_IMM(BPF_JEQ, BPF_REG_2, 2, 3), BPF_JMP_A(-7), BPF_MOV64_IMM(BPF_REG_0, -1),
        // BPF_MOV32_REG(BPF_REG_0, BPF_REG_3) and BPF_ALU32_IMM(BPF_RSH, BPF_REG_3, 16).
        assert_eq!(
            Insn::jeq_imm(Reg::R2, 2, 3).to_bytes(),
            [0x15, 0x02, 3, 0, 2, 0, 0, 0]
        );
        assert_eq!(Insn::ja(-7).to_bytes(), [0x05, 0, 0xf9, 0xff, 0, 0, 0, 0]);
        assert_eq!(
            Insn::mov64_imm(Reg::R0, -1).to_bytes(),
            [0xb7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            Insn::mov32_reg(Reg::R0, Reg::R3).to_bytes(),
            [0xbc, 0x30, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::rsh32_imm(Reg::R3, 16).to_bytes(),
            [0x74, 0x03, 0, 0, 16, 0, 0, 0]
        );
    }

    #[test]
    fn decode_inverts_encode() {
        let prog = vec![
            Insn::load_u32(Reg::R5, Reg::R1, 8),
            Insn::rsh32_imm(Reg::R3, 16),
            Insn::mov32_reg(Reg::R0, Reg::R3),
            Insn::mov64_imm(Reg::R0, -1),
            Insn::jeq_imm(Reg::R2, 2, 3),
            Insn::ja(-7),
            Insn::exit(),
        ];
        assert_eq!(Insn::decode(&Insn::encode(&prog)), Some(prog));
    }

    #[test]
    fn decode_rejects_partial_instructions() {
        assert_eq!(Insn::decode(&[0u8; 12]), None);
        assert_eq!(Insn::decode(&[]), Some(vec![]));
    }

    #[test]
    fn class_and_call_detection() {
        let call = Insn::from_bytes([0x85, 0, 0, 0, 14, 0, 0, 0]);
        assert!(call.is_call());
        assert_eq!(call.class(), class::JMP);
        assert!(!Insn::exit().is_call());
        assert_eq!(Insn::mov64_imm(Reg::R0, 0).class(), class::ALU64);
    }
}
