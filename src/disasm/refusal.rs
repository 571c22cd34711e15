//! What the kernel's x86-64 uprobe code refuses to probe, from an
//! instruction's bytes alone. `uprobe_register` fails with ENOTSUPP for
//! such an instruction, and an uprobe_multi link fails as a whole when one
//! of its addresses is refused (arch/x86/kernel/uprobes.c, Linux 6.x:
//! `uprobe_init_insn`, `branch_setup_xol_ops`). The rules are kept
//! conservative: refusing an instruction the kernel would accept only moves
//! a probe, accepting one it refuses fails an attach.

/// Why the kernel refuses a probe on an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A `lock` or `cs`/`ds`/`es`/`ss` prefix (`is_prefix_bad`); compilers
    /// pad with `cs nopw`, and `notrack` jumps reuse the `ds` prefix.
    Prefix,
    /// `mov` to SS or `pop ss`: they mask the single-step trap.
    MasksTrap,
    /// An opcode the kernel's table of good one-byte instructions leaves
    /// out (`in`, `out`, `int3`, `hlt`, ...).
    Opcode(u8),
    /// A VEX-, EVEX- or XOP-encoded instruction whose opcode byte the
    /// kernel looks up in its one-byte table, where it stands for an
    /// instruction it refuses (`vmovd` is 0x6e there: `outsb`).
    Vector(u8),
    /// A two-byte opcode (0x0f xx) the kernel's table leaves out
    /// (`syscall`, `ud2`, `sysenter`, ...).
    TwoByte(u8),
    /// A `call`, `jmp` or `jcc` with an operand-size (0x66) prefix, such
    /// as the padded `data16 call __tls_get_addr` of TLS code.
    BranchData16,
}

impl Refusal {
    pub fn describe(self) -> String {
        match self {
            Refusal::Prefix => "a lock or segment prefix".to_string(),
            Refusal::MasksTrap => "a write of SS, which masks the single-step trap".to_string(),
            Refusal::Opcode(b) => format!("opcode {b:#04x}"),
            Refusal::Vector(b) => format!("a vector instruction with opcode byte {b:#04x}"),
            Refusal::TwoByte(b) => format!("opcode 0x0f {b:#04x}"),
            Refusal::BranchData16 => "a branch with an operand-size (0x66) prefix".to_string(),
        }
    }
}

/// Bit per one-byte opcode the kernel accepts (`good_insns_64`), one row
/// of 16 opcodes per entry, opcode 0 in the lowest bit.
const GOOD_1: [u16; 16] = [
    0b1011_1111_0011_1111, // 00: 06 07 0e invalid; 0f escapes
    0b0011_1111_0011_1111, // 10: 16 17 1e 1f invalid
    0b0111_1111_0111_1111, // 20: 27 2f invalid (26 2e prefixes)
    0b0111_1111_0111_1111, // 30: 37 3f invalid (36 3e prefixes)
    0xffff,                // 40: REX
    0xffff,                // 50: push/pop
    0b0000_1111_1111_1000, // 60: 60-62 invalid; 6c-6f ins/outs
    0xffff,                // 70: jcc
    0b1111_1111_1111_1011, // 80: 82 invalid
    0b1111_1011_1111_1111, // 90: 9a invalid
    0xffff,                // a0
    0xffff,                // b0
    0b0000_1111_1111_1111, // c0: cc int3, cd int, ce, cf iret
    0b1111_1111_1000_1111, // d0: d4-d6 invalid
    0b0000_1011_0000_1111, // e0: e4-e7 in/out, ea invalid, ec-ef in/out
    0b1111_0011_1110_1101, // f0: f1 int1, f4 hlt, fa cli, fb sti (f0 lock)
];

/// Bit per two-byte opcode (0x0f xx) the kernel's table accepts
/// (`good_2byte_insns`); newer kernels accept every 0x0f opcode, older ones
/// consult this table.
const GOOD_2: [u16; 16] = [
    0b1111_0100_0001_1100, // 00: 0f 00/01 system, 05 syscall, 06-09, 0b ud2
    0xffff,                // 10
    0xffff,                // 20
    0b1111_1111_0100_1110, // 30: 30 wrmsr, 34/35 sysenter/exit, 37 getsec
    0xffff,                // 40
    0xffff,                // 50
    0xffff,                // 60
    0b1111_1100_1111_1111, // 70: 78/79 vmread/vmwrite
    0xffff,                // 80
    0xffff,                // 90
    0b1011_1111_1111_1111, // a0: ae group 15
    0xffff,                // b0
    0xffff,                // c0
    0xffff,                // d0
    0xffff,                // e0
    0xffff,                // f0
];

fn good(table: &[u16; 16], op: u8) -> bool {
    table[usize::from(op >> 4)] >> (op & 0xf) & 1 == 1
}

/// Why the kernel refuses a uprobe on the x86-64 instruction that `bytes`
/// starts with (whole: `bytes` runs at least to its end), or `None` if it
/// accepts one.
pub fn kernel_refusal(bytes: &[u8]) -> Option<Refusal> {
    let mut data16 = false;
    let mut i = 0;
    // Legacy prefixes.
    loop {
        match *bytes.get(i)? {
            0x26 | 0x2e | 0x36 | 0x3e | 0xf0 => return Some(Refusal::Prefix),
            0x66 => data16 = true,
            0x64 | 0x65 | 0x67 | 0xf2 | 0xf3 => {}
            _ => break,
        }
        i += 1;
        if i >= 15 {
            return Some(Refusal::Prefix);
        }
    }
    // The kernel's decoder sees VEX (c4, c5), EVEX (62) and XOP (8f with a
    // ModRM reg field other than 0) as prefixes and keeps only the byte
    // after them as the opcode, which it then looks up in the one-byte
    // table whatever the opcode map.
    let vector = |at: usize| {
        let op = *bytes.get(at)?;
        (!good(&GOOD_1, op)).then_some(Refusal::Vector(op))
    };
    match *bytes.get(i)? {
        0xc5 => return vector(i + 2),
        0xc4 => return vector(i + 3),
        0x62 => return vector(i + 4),
        // XOP is AMD's alone and rare: refused rather than modelled.
        0x8f if bytes.get(i + 1)? >> 3 & 7 != 0 => return Some(Refusal::Vector(0x8f)),
        _ => {}
    }
    // REX.
    if bytes[i] & 0xf0 == 0x40 {
        i += 1;
    }
    let op = *bytes.get(i)?;
    let branch = match op {
        0x0f => {
            let op2 = *bytes.get(i + 1)?;
            if !good(&GOOD_2, op2) {
                return Some(Refusal::TwoByte(op2));
            }
            (0x80..=0x8f).contains(&op2)
        }
        // mov r/m16, Sreg with SS as the segment register.
        0x8e if bytes.get(i + 1)? >> 3 & 7 == 2 => return Some(Refusal::MasksTrap),
        0x17 => return Some(Refusal::MasksTrap),
        _ if !good(&GOOD_1, op) => return Some(Refusal::Opcode(op)),
        0x70..=0x7f | 0xe8 | 0xe9 | 0xeb => true,
        _ => false,
    };
    (branch && data16).then_some(Refusal::BranchData16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instructions that failed whole uprobe_multi attaches to libc and
    /// libstdc++, and their neighbours that the kernel accepts.
    #[test]
    fn refusals_of_encoded_instructions() {
        let cases: &[(&[u8], Option<Refusal>)] = &[
            // vmovd %esi,%xmm0 (the entry of __memset_avx2_unaligned_erms)
            (&[0xc5, 0xf9, 0x6e, 0xc6], Some(Refusal::Vector(0x6e))),
            // vmovdqu (%rsi),%ymm0: 0x6f is outsd in the one-byte table
            (&[0xc5, 0xfe, 0x6f, 0x06], Some(Refusal::Vector(0x6f))),
            // vmovdqu %ymm0,(%rdi): 0x7f is jg
            (&[0xc5, 0xfe, 0x7f, 0x07], None),
            // vpbroadcastb %xmm0,%ymm0 (three-byte VEX, opcode 0x78)
            (&[0xc4, 0xe2, 0x7d, 0x78, 0xc0], None),
            // vzeroupper
            (&[0xc5, 0xf8, 0x77], None),
            // vmovdqu64 (%rsi),%zmm16 (EVEX, opcode 0x6f)
            (
                &[0x62, 0xe1, 0xfe, 0x48, 0x6f, 0x06],
                Some(Refusal::Vector(0x6f)),
            ),
            // data16 data16 rex.W call __tls_get_addr
            (
                &[0x66, 0x66, 0x48, 0xe8, 0, 0, 0, 0],
                Some(Refusal::BranchData16),
            ),
            // data16 lea 0x0(%rip),%rdi (the same TLS sequence) is accepted
            (&[0x66, 0x48, 0x8d, 0x3d, 0, 0, 0, 0], None),
            // call, jmp, je rel32 without the prefix
            (&[0xe8, 0, 0, 0, 0], None),
            (&[0xe9, 0, 0, 0, 0], None),
            (&[0x0f, 0x84, 0, 0, 0, 0], None),
            // data16 je rel32, data16 jmp rel8
            (&[0x66, 0x0f, 0x84, 0, 0, 0, 0], Some(Refusal::BranchData16)),
            (&[0x66, 0xeb, 0x00], Some(Refusal::BranchData16)),
            // xchg %ax,%ax (66 90) and nopw are fine
            (&[0x66, 0x90], None),
            (&[0x66, 0x0f, 0x1f, 0x44, 0, 0], None),
            // cs nopw; lock add
            (
                &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
                Some(Refusal::Prefix),
            ),
            (
                &[0xf0, 0x48, 0x83, 0x05, 0, 0, 0, 0, 1],
                Some(Refusal::Prefix),
            ),
            // notrack jmp *%rax
            (&[0x3e, 0xff, 0xe0], Some(Refusal::Prefix)),
            // syscall, ud2, int3, hlt
            (&[0x0f, 0x05], Some(Refusal::TwoByte(0x05))),
            (&[0x0f, 0x0b], Some(Refusal::TwoByte(0x0b))),
            (&[0xcc], Some(Refusal::Opcode(0xcc))),
            (&[0xf4], Some(Refusal::Opcode(0xf4))),
            // mov %eax,%ss; mov %eax,%ds
            (&[0x8e, 0xd0], Some(Refusal::MasksTrap)),
            (&[0x8e, 0xd8], None),
            // push %rbp, endbr64, ret, rep stos, fs mov
            (&[0x55], None),
            (&[0xf3, 0x0f, 0x1e, 0xfa], None),
            (&[0xc3], None),
            (&[0xf3, 0xaa], None),
            (&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], None),
            // pop (%rax) is 8f /0, not XOP; XOP is refused
            (&[0x8f, 0x00], None),
            (&[0x8f, 0xe9, 0x78, 0x12, 0xc0], Some(Refusal::Vector(0x8f))),
        ];
        for (bytes, want) in cases {
            assert_eq!(kernel_refusal(bytes), *want, "{bytes:02x?}");
        }
    }

    /// The tables say what the kernel's do for the opcodes named in its
    /// comments.
    #[test]
    fn tables_match_the_kernels_named_opcodes() {
        let bad = [
            0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x62,
            0x6c, 0x6d, 0x6e, 0x6f, 0x82, 0x9a, 0xcc, 0xcd, 0xce, 0xcf, 0xd4, 0xd5, 0xd6, 0xe4,
            0xe5, 0xe6, 0xe7, 0xea, 0xec, 0xed, 0xee, 0xef, 0xf1, 0xf4, 0xfa, 0xfb,
        ];
        for op in 0..=255u8 {
            assert_eq!(good(&GOOD_1, op), !bad.contains(&op), "{op:#x}");
        }
        let bad2 = [
            0x00, 0x01, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0b, 0x30, 0x34, 0x35, 0x37, 0x78, 0x79,
            0xae,
        ];
        for op in 0..=255u8 {
            assert_eq!(good(&GOOD_2, op), !bad2.contains(&op), "0f {op:#x}");
        }
    }
}
