//! AArch64 decoding, over the fixed 32-bit encodings: the few instruction
//! classes that decide probe placement are told apart by their masks (as the
//! kernel's own `arch/arm64/kernel/probes/decode-insn.c` does), everything
//! else is "some instruction that falls through". The same [`Decoded`] comes
//! out as from the x86-64 decoder.
//!
//! What the arm64 kernel does under a uprobe (decode-insn.c, 6.13 and
//! later): it simulates `b`, `bl`, `b.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`,
//! `br`, `blr`, `ret`, `adr`/`adrp`, `ldr`/`ldrsw` (literal) and `nop`;
//! it single-steps the rest, except what it refuses: the pointer-
//! authenticating branches (`retaa`, `braa`, `blraa`, ...), exception and
//! system-register instructions, hints other than `nop`, BTI and the
//! signing PAC hints (`autiasp` is refused, `paciasp` stepped), exclusive
//! loads and stores, and literal loads it does not simulate. So on arm64 a probe on `ret` is the cheap one, and the usual
//! first instruction, `stp x29, x30, [sp, #-N]!`, the expensive one.
//!
//! The frame key works as on x86-64: SP at a `ret` equals SP at the entry
//! (the return address is in x30, not on the stack), so an entry probe
//! placed after the prologue moved SP by N bytes keys the frame by SP + N.

use anyhow::{bail, Result};

use super::{
    Arch, Call, Decoded, EntryCandidate, Image, Insn, InsnInfo, Internal, InternalJump,
    JumpOperand, NoImage, ProbeCost, Range, TailJump, Target,
};

/// Instructions in the straight-line start of a function considered for the
/// entry probe.
const MAX_PROLOGUE: usize = 16;
/// Instructions followed back from a `br` to recognise a jump table.
const MAX_TABLE_WALK: usize = 16;
/// Entries read from one jump table at most.
const MAX_TABLE: usize = 4096;

/// What one instruction does to control flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `ret` (through x30), or `retaa`/`retab` (`pac`).
    Ret {
        pac: bool,
    },
    /// `ret xN` with another register: a return to an address in a
    /// register other than the link register (hand-written code).
    RetReg,
    B(u64),
    Bl(u64),
    /// `b.cond`, with the ARM condition (0..=15).
    BCond(u64, u8),
    /// `cbz`/`cbnz`/`tbz`/`tbnz`: branches on a register's value.
    RegCond(u64),
    Br {
        reg: u8,
        pac: bool,
    },
    Blr {
        reg: u8,
        pac: bool,
    },
    /// `adr` (address) or `adrp` (page address) into `rd`.
    Adr {
        rd: u8,
        target: u64,
    },
    Nop,
    /// Anything that does not branch (or an exception-raising one).
    Other,
}

/// How an instruction changes SP or the frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SpEffect {
    /// SP moves by this many bytes (negative: the stack grows).
    Delta(i32),
    /// SP is written in a way not modelled.
    Unknown,
    /// `add sp, x29, #imm` / `mov sp, x29`: SP from the frame pointer.
    FromFp(i32),
    /// `add x29, sp, #imm` / `mov x29, sp`: the frame pointer set from SP.
    SetsFp(i32),
    /// x29 written otherwise.
    ClobbersFp,
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug)]
struct A64 {
    addr: u64,
    word: u32,
    op: Op,
}

fn sext(v: u32, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((u64::from(v) << shift) as i64) >> shift
}

fn rel(addr: u64, v: u32, bits: u32) -> u64 {
    addr.wrapping_add((sext(v, bits) << 2) as u64)
}

fn classify(addr: u64, w: u32) -> Op {
    if w & 0xfc00_0000 == 0x1400_0000 {
        return Op::B(rel(addr, w & 0x03ff_ffff, 26));
    }
    if w & 0xfc00_0000 == 0x9400_0000 {
        return Op::Bl(rel(addr, w & 0x03ff_ffff, 26));
    }
    if w & 0xff00_0010 == 0x5400_0000 {
        return Op::BCond(rel(addr, (w >> 5) & 0x7ffff, 19), (w & 0xf) as u8);
    }
    if w & 0x7e00_0000 == 0x3400_0000 {
        return Op::RegCond(rel(addr, (w >> 5) & 0x7ffff, 19));
    }
    if w & 0x7e00_0000 == 0x3600_0000 {
        return Op::RegCond(rel(addr, (w >> 5) & 0x3fff, 14));
    }
    if w & 0x9f00_0000 == 0x1000_0000 {
        let imm = ((w >> 5) & 0x7ffff) << 2 | (w >> 29) & 3;
        let target = addr.wrapping_add(sext(imm, 21) as u64);
        return Op::Adr {
            rd: (w & 31) as u8,
            target,
        };
    }
    if w & 0x9f00_0000 == 0x9000_0000 {
        let imm = ((w >> 5) & 0x7ffff) << 2 | (w >> 29) & 3;
        let target = (addr & !0xfff).wrapping_add((sext(imm, 21) << 12) as u64);
        return Op::Adr {
            rd: (w & 31) as u8,
            target,
        };
    }
    if w == 0xd503_201f {
        return Op::Nop;
    }
    // Unconditional branch (register): 1101011 opc op2(11111) op3 Rn op4.
    if w & 0xfe1f_0000 == 0xd61f_0000 {
        let opc = (w >> 21) & 0xf;
        let op3 = (w >> 10) & 0x3f;
        let rn = ((w >> 5) & 31) as u8;
        let pac = opc & 8 != 0 || op3 != 0;
        return match opc & 7 {
            0 => Op::Br { reg: rn, pac },
            1 => Op::Blr { reg: rn, pac },
            2 if pac => Op::Ret { pac: true },
            2 if rn == 30 => Op::Ret { pac: false },
            2 => Op::RetReg,
            _ => Op::Other,
        };
    }
    Op::Other
}

/// How the kernel treats a uprobe on `w`: its cost, and whether it accepts
/// one at all (decode-insn.c `arm_probe_decode_insn`).
fn kernel_view(w: u32, op: Op) -> (ProbeCost, bool) {
    use ProbeCost::*;
    match op {
        Op::Ret { pac: true } | Op::Br { pac: true, .. } | Op::Blr { pac: true, .. } => {
            return (SingleStepped, false)
        }
        Op::Other => {}
        _ => return (Emulated, true),
    }
    // Literal loads: `ldr`/`ldrsw` into a general register are simulated;
    // `prfm` and the vector ones are not.
    if w & 0x3b00_0000 == 0x1800_0000 {
        let simulated = w & 0x0400_0000 == 0 && (w >> 30) < 3;
        return (Emulated, simulated);
    }
    // Exception generation (`svc`, `brk`, `hlt`, ...) and the rest of the
    // branch/system class.
    if w & 0xff00_0000 == 0xd400_0000 || w & 0xfe00_0000 == 0xd600_0000 {
        return (SingleStepped, false);
    }
    if w & 0xffc0_0000 == 0xd500_0000 {
        // Hints: only those that sign (not those that authenticate) and
        // the BTIs may be stepped (`aarch64_insn_is_steppable_hint`).
        if w & 0xffff_f01f == 0xd503_201f {
            let hint = (w >> 5) & 0x7f;
            let steppable = matches!(
                hint,
                0x07 | 0x08 | 0x0a | 0x18 | 0x19 | 0x1a | 0x1b | 0x20 | 0x22 | 0x24 | 0x26
            );
            return (SingleStepped, steppable);
        }
        let mrs = w & 0xfff0_0000 == 0xd530_0000;
        let msr = w & 0xfff0_0000 == 0xd510_0000 || w & 0xfff8_f01f == 0xd500_401f;
        return (SingleStepped, !(mrs || msr));
    }
    // Load/store exclusive (and load-acquire/store-release) cannot finish
    // under a single-step.
    if w & 0x3f00_0000 == 0x0800_0000 {
        return (SingleStepped, false);
    }
    // Permanently undefined (`udf`).
    if w & 0xffff_0000 == 0 {
        return (SingleStepped, false);
    }
    (SingleStepped, true)
}

/// What `w` does to SP and x29.
fn sp_effect(w: u32) -> Option<SpEffect> {
    let rn = (w >> 5) & 31;
    let rd = w & 31;
    // Load/store pair (general or vector registers).
    if w & 0x3a00_0000 == 0x2800_0000 {
        let idx = (w >> 23) & 3;
        let vector = w & 0x0400_0000 != 0;
        let opc = w >> 30;
        let scale = match (vector, opc) {
            (false, 2) | (true, 1) => 8,
            (true, 2) => 16,
            _ => 4,
        };
        let load = w & 0x0040_0000 != 0;
        let (rt, rt2) = (w & 31, (w >> 10) & 31);
        if rn == 31 && (idx == 1 || idx == 3) {
            return Some(SpEffect::Delta(sext((w >> 15) & 0x7f, 7) as i32 * scale));
        }
        if load && !vector && (rt == 29 || rt2 == 29) {
            return Some(SpEffect::ClobbersFp);
        }
        return None;
    }
    // Load/store register, immediate pre/post-indexed.
    if w & 0x3b20_0000 == 0x3800_0000 {
        let idx = (w >> 10) & 3;
        if rn == 31 && (idx == 1 || idx == 3) {
            return Some(SpEffect::Delta(sext((w >> 12) & 0x1ff, 9) as i32));
        }
        let load = (w >> 22) & 3 != 0 && w & 0x0400_0000 == 0;
        return (load && rd == 29).then_some(SpEffect::ClobbersFp);
    }
    // Add/subtract (immediate), 64-bit, flags not set: the forms that
    // address SP.
    if w & 0xff00_0000 == 0x9100_0000 || w & 0xff00_0000 == 0xd100_0000 {
        let imm = ((w >> 10) & 0xfff) << if w & 0x0040_0000 != 0 { 12 } else { 0 };
        let imm = imm as i32 * if w & 0x4000_0000 != 0 { -1 } else { 1 };
        return match (rd, rn) {
            (31, 31) => Some(SpEffect::Delta(imm)),
            (31, 29) => Some(SpEffect::FromFp(imm)),
            (31, _) => Some(SpEffect::Unknown),
            (29, 31) => Some(SpEffect::SetsFp(imm)),
            (29, _) => Some(SpEffect::ClobbersFp),
            _ => None,
        };
    }
    // Add/subtract (extended register) and logical (immediate) may write
    // SP as their destination.
    if (w & 0x1f20_0000 == 0x0b20_0000 && w & 0x2000_0000 == 0)
        || (w & 0x1f80_0000 == 0x1200_0000 && w & 0x6000_0000 != 0x6000_0000)
    {
        return match rd {
            31 => Some(SpEffect::Unknown),
            29 => Some(SpEffect::ClobbersFp),
            _ => None,
        };
    }
    // Any other write to x29 (mov x29, x0; ldr x29, ...): most data
    // processing and load forms put their destination in bits 0-4; those
    // that do not (stores, compares) leave x29 alone.
    if rd == 29 && writes_rd(w) {
        return Some(SpEffect::ClobbersFp);
    }
    None
}

/// Whether `w`'s bits 0-4 name a register it writes (data processing and
/// loads), as far as the frame-pointer tracking needs to know: wrongly
/// saying yes only makes the frame depth unknown.
fn writes_rd(w: u32) -> bool {
    let op0 = (w >> 25) & 0xf;
    let store = op0 & 0b0101 == 0b0100 && w & 0x0040_0000 == 0;
    !store && w & 0xff00_0000 != 0xd500_0000
}

/// The x86 condition code (as the BPF side evaluates it from flags) that
/// holds exactly when ARM condition `c` does, reading the ARM flags as
/// x86 ones with the carry inverted (CF = !C, ZF = Z, SF = N, OF = V):
/// ARM sets C on a subtraction without borrow, x86 sets CF on a borrow.
/// `None` for `al`/`nv` (always).
pub fn x86_condition(c: u8) -> Option<u8> {
    Some(match c {
        0 => 4,   // eq: e
        1 => 5,   // ne: ne
        2 => 3,   // cs/hs: ae
        3 => 2,   // cc/lo: b
        4 => 8,   // mi: s
        5 => 9,   // pl: ns
        6 => 0,   // vs: o
        7 => 1,   // vc: no
        8 => 7,   // hi: a
        9 => 6,   // ls: be
        10 => 13, // ge: ge
        11 => 12, // lt: l
        12 => 15, // gt: g
        13 => 14, // le: le
        _ => return None,
    })
}

const CONDS: [&str; 16] = [
    "eq", "ne", "cs", "cc", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al", "nv",
];

/// Register `r` as a 64-bit (`x`) or 32-bit (`w`) name; 31 is `sp` where
/// the operand addresses the stack, else the zero register.
fn reg(r: u32, x: bool, sp: bool) -> String {
    match (r, sp, x) {
        (31, true, true) => "sp".into(),
        (31, true, false) => "wsp".into(),
        (31, false, true) => "xzr".into(),
        (31, false, false) => "wzr".into(),
        (r, _, true) => format!("x{r}"),
        (r, _, false) => format!("w{r}"),
    }
}

/// The instruction in the GNU assembler's syntax, for the forms probe
/// placement shows (prologues, branches); others as `.inst 0x...`.
fn text(addr: u64, w: u32) -> String {
    let (rd, rn, rt2) = (w & 31, (w >> 5) & 31, (w >> 10) & 31);
    let x = w & 0x8000_0000 != 0;
    match classify(addr, w) {
        Op::Ret { pac: false } => return "ret".into(),
        Op::Ret { pac: true } => {
            return if w & 0x400 != 0 { "retab" } else { "retaa" }.into();
        }
        Op::RetReg => return format!("ret x{rn}"),
        Op::B(t) => return format!("b {t:#x}"),
        Op::Bl(t) => return format!("bl {t:#x}"),
        Op::BCond(t, c) => return format!("b.{} {t:#x}", CONDS[c as usize]),
        Op::RegCond(t) if w & 0x7e00_0000 == 0x3400_0000 => {
            let nz = if w & 0x0100_0000 != 0 { "cbnz" } else { "cbz" };
            return format!("{nz} {}, {t:#x}", reg(rd, x, false));
        }
        Op::RegCond(t) => {
            let nz = if w & 0x0100_0000 != 0 { "tbnz" } else { "tbz" };
            let bit = (w >> 31) << 5 | (w >> 19) & 31;
            return format!("{nz} {}, #{bit}, {t:#x}", reg(rd, bit >= 32, false));
        }
        Op::Br { reg: r, pac: false } => return format!("br x{r}"),
        Op::Blr { reg: r, pac: false } => return format!("blr x{r}"),
        Op::Adr { rd, target } => {
            let name = if w & 0x8000_0000 != 0 { "adrp" } else { "adr" };
            return format!("{name} x{rd}, {target:#x}");
        }
        Op::Nop => return "nop".into(),
        _ => {}
    }
    if w & 0xffff_f01f == 0xd503_201f {
        let name = match (w >> 5) & 0x7f {
            0x19 => "paciasp",
            0x1b => "pacibsp",
            0x1d => "autiasp",
            0x1f => "autibsp",
            0x20 => "bti",
            0x22 => "bti c",
            0x24 => "bti j",
            0x26 => "bti jc",
            _ => "",
        };
        if !name.is_empty() {
            return name.into();
        }
    }
    // Load/store pair of general registers.
    if w & 0x3e00_0000 == 0x2800_0000 && w >> 30 != 1 && w >> 30 != 3 {
        let idx = (w >> 23) & 3;
        let x = w >> 30 == 2;
        let off = sext((w >> 15) & 0x7f, 7) * if x { 8 } else { 4 };
        let name = if w & 0x0040_0000 != 0 { "ldp" } else { "stp" };
        let (a, b, base) = (reg(rd, x, false), reg(rt2, x, false), reg(rn, true, true));
        return match idx {
            1 => format!("{name} {a}, {b}, [{base}], #{off}"),
            3 => format!("{name} {a}, {b}, [{base}, #{off}]!"),
            _ if off == 0 => format!("{name} {a}, {b}, [{base}]"),
            _ => format!("{name} {a}, {b}, [{base}, #{off}]"),
        };
    }
    // Load/store of a 32- or 64-bit general register: unsigned offset, or
    // pre/post-indexed.
    let size = w >> 30;
    let plain = w & 0x0400_0000 == 0 && size >= 2 && (w >> 22) & 3 <= 1;
    if plain && w & 0x3b00_0000 == 0x3900_0000 {
        let x = size == 3;
        let off = ((w >> 10) & 0xfff) << size;
        let name = if w & 0x0040_0000 != 0 { "ldr" } else { "str" };
        let (t, base) = (reg(rd, x, false), reg(rn, true, true));
        return if off == 0 {
            format!("{name} {t}, [{base}]")
        } else {
            format!("{name} {t}, [{base}, #{off}]")
        };
    }
    if plain && w & 0x3b20_0000 == 0x3800_0000 && (w >> 10) & 1 == 1 {
        let x = size == 3;
        let off = sext((w >> 12) & 0x1ff, 9);
        let name = if w & 0x0040_0000 != 0 { "ldr" } else { "str" };
        let (t, base) = (reg(rd, x, false), reg(rn, true, true));
        return match (w >> 10) & 3 {
            1 => format!("{name} {t}, [{base}], #{off}"),
            _ => format!("{name} {t}, [{base}, #{off}]!"),
        };
    }
    // Add/subtract (immediate): `mov` to or from SP, `cmp`, `add`, `sub`.
    if w & 0x1f00_0000 == 0x1100_0000 {
        let sub = w & 0x4000_0000 != 0;
        let flags = w & 0x2000_0000 != 0;
        let imm = ((w >> 10) & 0xfff) << if w & 0x0040_0000 != 0 { 12 } else { 0 };
        if !sub && !flags && imm == 0 && (rd == 31 || rn == 31) {
            return format!("mov {}, {}", reg(rd, x, true), reg(rn, x, true));
        }
        if sub && flags && rd == 31 {
            return format!("cmp {}, #{imm:#x}", reg(rn, x, true));
        }
        let name = match (sub, flags) {
            (false, false) => "add",
            (false, true) => "adds",
            (true, false) => "sub",
            (true, true) => "subs",
        };
        return format!(
            "{name} {}, {}, #{imm:#x}",
            reg(rd, x, !flags),
            reg(rn, x, true)
        );
    }
    // `mov` between general registers (orr with the zero register).
    if w & 0x7fe0_ffe0 == 0x2a00_03e0 {
        return format!(
            "mov {}, {}",
            reg(rd, x, false),
            reg((w >> 16) & 31, x, false)
        );
    }
    // `mov` of a 16-bit immediate (movz, shift 0).
    if w & 0x7fe0_0000 == 0x5280_0000 {
        return format!("mov {}, #{:#x}", reg(rd, x, false), (w >> 5) & 0xffff);
    }
    format!(".inst {w:#010x}")
}

/// The registers a function's code is known to hold at one instruction,
/// for recognising a jump table: found by walking back from a `br`.
struct Walk<'a> {
    insns: &'a [A64],
    /// Index of the `br`.
    at: usize,
}

impl Walk<'_> {
    /// The last instruction before the `br` (within the same straight-line
    /// run, passing conditional branches) that writes register `r`, with
    /// its index.
    fn def(&self, r: u32, before: usize) -> Option<(usize, u32)> {
        let lo = self.at.saturating_sub(MAX_TABLE_WALK);
        for k in (lo..before).rev() {
            let i = &self.insns[k];
            if k + 1 < self.insns.len() && self.insns[k + 1].addr != i.addr + 4 {
                return None;
            }
            match i.op {
                Op::B(_) | Op::Bl(_) | Op::Blr { .. } | Op::Br { .. } | Op::Ret { .. } => {
                    return None
                }
                Op::Adr { rd, .. } if u32::from(rd) == r => return Some((k, i.word)),
                Op::Other if i.word & 31 == r && writes_rd(i.word) => return Some((k, i.word)),
                _ => {}
            }
        }
        None
    }
}

/// A jump table's shape: `br xN` after `add xN, xBase, wIdx, {s,u}xt{b,h}
/// #2` (or `lsl #2`), where xBase is `adr` of a label of the function and
/// wIdx a `ldrb`/`ldrh`/`ldr` (register offset) from the table, whose
/// address is `adrp` + `add`; the number of entries from the `cmp` + `b.hi`
/// or `b.hs` that guards it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TableShape {
    base: u64,
    table: Option<u64>,
    /// Entry size in bytes (1, 2 or 4), signed or not, and the shift.
    size: u32,
    signed: bool,
    shift: u32,
    entries: Option<usize>,
}

fn table_shape(insns: &[A64], at: usize, target_reg: u8) -> Option<TableShape> {
    let walk = Walk { insns, at };
    let (k_add, add) = walk.def(u32::from(target_reg), at)?;
    let (base_reg, idx_reg, signed, shift, ext_size) = if add & 0xffe0_0000 == 0x8b20_0000 {
        // add (extended register): option in bits 13-15.
        let option = (add >> 13) & 7;
        let size = match option & 3 {
            0 => 1,
            1 => 2,
            _ => 4,
        };
        (
            (add >> 5) & 31,
            (add >> 16) & 31,
            option >= 4,
            (add >> 10) & 7,
            size,
        )
    } else if add & 0xffe0_0000 == 0x8b00_0000 && (add >> 22) & 3 == 0 {
        // add (shifted register), lsl.
        (
            (add >> 5) & 31,
            (add >> 16) & 31,
            false,
            (add >> 10) & 63,
            4,
        )
    } else {
        return None;
    };
    // The base: `adr` of a label (an `adrp` page is no label).
    let (k_adr, adr) = walk.def(base_reg, k_add)?;
    let Op::Adr { target: base, .. } = insns[k_adr].op else {
        return None;
    };
    if adr & 0x8000_0000 != 0 {
        return None;
    }
    let mut shape = TableShape {
        base,
        table: None,
        size: ext_size,
        signed,
        shift,
        entries: None,
    };
    // The load of the entry: register offset, `ldrb`/`ldrh`/`ldr`/`ldrs*`.
    let Some((k_ld, ld)) = walk.def(idx_reg, k_add) else {
        return Some(shape);
    };
    if ld & 0x3b20_0c00 != 0x3820_0800 || ld & 0x0400_0000 != 0 {
        return Some(shape);
    }
    shape.size = 1 << (ld >> 30);
    shape.signed = (ld >> 22) & 3 >= 2 || signed;
    let (table_reg, key_reg) = ((ld >> 5) & 31, (ld >> 16) & 31);
    // The table's address: adrp + add, or adr.
    if let Some((k_t, t)) = walk.def(table_reg, k_ld) {
        match insns[k_t].op {
            Op::Adr { target, .. } if t & 0x8000_0000 == 0 => shape.table = Some(target),
            _ if t & 0xff80_0000 == 0x9100_0000 && (t >> 5) & 31 == table_reg => {
                if let Some((k_p, p)) = walk.def(table_reg, k_t) {
                    if let (Op::Adr { target, .. }, true) = (insns[k_p].op, p & 0x8000_0000 != 0) {
                        shape.table = Some(target + u64::from((t >> 10) & 0xfff));
                    }
                }
            }
            _ => {}
        }
    }
    // The bound: `cmp wK, #n` then `b.hi` (n + 1 entries) or `b.hs` (n).
    let lo = at.saturating_sub(MAX_TABLE_WALK);
    for k in (lo..k_ld).rev() {
        let w = insns[k].word;
        if w & 0x7f80_001f == 0x7100_001f && (w >> 5) & 31 == key_reg && (w >> 22) & 1 == 0 {
            let n = ((w >> 10) & 0xfff) as usize;
            let guard = insns[k + 1..k_ld].iter().find_map(|i| match i.op {
                Op::BCond(_, 8) => Some(n + 1),
                Op::BCond(_, 2) => Some(n),
                _ => None,
            });
            shape.entries = guard;
            break;
        }
        if walk.def(key_reg, k + 1).map(|d| d.0) == Some(k) {
            break;
        }
    }
    Some(shape)
}

/// A `br` (by its index in address order) that may read a jump table: the
/// table's shape, if recognised, and its targets, if read and all inside.
type TableAt = (usize, Option<TableShape>, Option<Vec<u64>>);

/// The targets of a jump table, if every entry can be read from the image.
fn read_table(shape: &TableShape, image: &dyn Image) -> Option<Vec<u64>> {
    let (table, n) = (shape.table?, shape.entries?);
    if n == 0 || n > MAX_TABLE {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let raw = image.read_i32(table + i * u64::from(shape.size))? as u32;
        let v = match (shape.size, shape.signed) {
            (1, true) => i64::from(raw as u8 as i8),
            (1, false) => i64::from(raw as u8),
            (2, true) => i64::from(raw as u16 as i16),
            (2, false) => i64::from(raw as u16),
            (_, true) => i64::from(raw as i32),
            _ => i64::from(raw),
        };
        out.push(shape.base.wrapping_add((v << shape.shift) as u64));
    }
    Some(out)
}

/// Decodes the ranges of one function, knowing nothing of its object.
pub fn decode(ranges: &[Range<'_>]) -> Result<Decoded> {
    decode_in(ranges, &NoImage)
}

/// Decodes the ranges of one function (body first, then fragments such as
/// `.cold` parts) in its object.
pub fn decode_in(ranges: &[Range<'_>], image: &dyn Image) -> Result<Decoded> {
    let mut insns: Vec<A64> = Vec::new();
    let mut range_of: Vec<usize> = Vec::new();
    for (ri, r) in ranges.iter().enumerate() {
        if r.addr % 4 != 0 {
            bail!(
                "function at {:#x} is not 4-byte aligned: not AArch64 code",
                r.addr
            );
        }
        for (k, c) in r.bytes.chunks_exact(4).enumerate() {
            let word = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let addr = r.addr + 4 * k as u64;
            insns.push(A64 {
                addr,
                word,
                op: classify(addr, word),
            });
            range_of.push(ri);
        }
    }
    let inside = |a: u64| ranges.iter().any(|r| r.contains(a)) && a % 4 == 0;
    let entry = ranges.first().map(|r| r.addr);
    // Jump tables, by the index of their `br`.
    let mut tables: Vec<TableAt> = Vec::new();
    let mut sorted = insns.clone();
    sorted.sort_by_key(|i| i.addr);
    for (k, i) in sorted.iter().enumerate() {
        if let Op::Br { reg, pac: false } = i.op {
            let shape = table_shape(&sorted, k, reg);
            let targets = shape
                .as_ref()
                .and_then(|s| read_table(s, image))
                .filter(|ts| ts.iter().all(|&t| inside(t) && Some(t) != entry));
            tables.push((k, shape, targets));
        }
    }
    let depths = stack_depths(&sorted, entry, &inside, &tables);

    let mut out = Decoded {
        arch: Arch::Arm64,
        ..Decoded::default()
    };
    if let Some(r) = ranges.first() {
        out.body_end = r.addr + r.bytes.len() as u64;
    }
    let mut prologue_open = true;
    let mut sp_offset = 0i32;
    let mut computed_jump = false;
    for (n, i) in insns.iter().enumerate() {
        let (cost, probeable) = kernel_view(i.word, i.op);
        let effect = sp_effect(i.word);
        let sp_change = match effect {
            None | Some(SpEffect::SetsFp(_)) | Some(SpEffect::ClobbersFp) => Some(0),
            Some(SpEffect::Delta(d)) => Some(d),
            Some(SpEffect::Unknown) | Some(SpEffect::FromFp(_)) => None,
        };
        let falls_through = matches!(i.op, Op::Other | Op::Adr { .. } | Op::Nop);
        let jump = match i.op {
            Op::B(t) => Some((t, None)),
            Op::BCond(t, c) => Some((t, x86_condition(c))),
            _ => None,
        };
        out.boundaries.push(i.addr);
        out.insns.push(InsnInfo {
            addr: i.addr,
            cost,
            probeable,
            sp_change,
            falls_through,
            jump,
            is_call: matches!(i.op, Op::Bl(_) | Op::Blr { .. }),
            len: 4,
            is_nop: i.op == Op::Nop,
        });
        if range_of[n] == 0 && out.first.is_none() {
            out.first = Some(Insn {
                addr: i.addr,
                len: 4,
                text: text(i.addr, i.word),
                cost,
            });
        }
        // A `ret` past the first instruction ends the straight-line start
        // without being a place for the entry: the kernel simulates it, but
        // it is an exit.
        let is_ret = matches!(i.op, Op::Ret { .. } | Op::RetReg);
        if range_of[n] == 0
            && prologue_open
            && out.prologue.len() < MAX_PROLOGUE
            && !(is_ret && n > 0)
        {
            out.prologue.push(EntryCandidate {
                addr: i.addr,
                text: text(i.addr, i.word),
                cost,
                probeable,
                sp_offset,
                branch_target: false,
            });
            match sp_change {
                Some(d)
                    if falls_through
                        && sp_offset
                            .checked_sub(d)
                            .is_some_and(|o| o.abs() <= super::MAX_SP_OFFSET) =>
                {
                    sp_offset -= d
                }
                _ => prologue_open = false,
            }
        } else {
            prologue_open = false;
        }
        match i.op {
            Op::Ret { .. } => out.rets.push(i.addr),
            Op::B(t) | Op::BCond(t, _) => {
                out.branch_targets.insert(t);
                if !inside(t) {
                    let cond = match i.op {
                        Op::BCond(_, c) => x86_condition(c),
                        _ => None,
                    };
                    out.tails.push(TailJump {
                        addr: i.addr,
                        target: Target::Direct(t),
                        cond,
                    });
                }
            }
            Op::RegCond(t) => {
                if !inside(t) {
                    bail!(
                        "`{}` at {:#x} branches out of the function on a register's value: a conditional tail call tachy cannot time on arm64",
                        text(i.addr, i.word),
                        i.addr
                    );
                }
                out.branch_targets.insert(t);
                out.other_targets.insert(t);
            }
            Op::Bl(t) => out.calls.push(Call {
                addr: i.addr,
                next: i.addr + 4,
                target: Target::Direct(t),
                read: None,
            }),
            // BPF sees x0-x15 of a uprobe's registers (regs.h save_regs);
            // a signed pointer (`blraa`) is not an address.
            Op::Blr { reg, pac } => out.calls.push(Call {
                addr: i.addr,
                next: i.addr + 4,
                target: Target::Indirect,
                read: (reg < 16 && !pac).then_some(JumpOperand::Register(reg)),
            }),
            Op::Br { .. } | Op::RetReg => {
                let k = sorted.partition_point(|s| s.addr < i.addr);
                let table = tables.iter().find(|t| t.0 == k);
                let depth = depths.get(k).copied().flatten();
                let why = match (table, depth) {
                    (Some((_, _, Some(ts))), _) => {
                        out.other_targets.extend(ts.iter().copied());
                        out.branch_targets.extend(ts.iter().copied());
                        Some(Internal::Table { entries: ts.len() })
                    }
                    (_, Some(d)) if d > 0 => Some(Internal::FrameAllocated { depth: d }),
                    (Some((_, Some(_), None)), _) => Some(Internal::IndexedMemory),
                    _ => None,
                };
                match why {
                    Some(why) => {
                        computed_jump |= why.targets_unknown();
                        out.internal_jumps.push(InternalJump { addr: i.addr, why });
                    }
                    None => out.tails.push(TailJump {
                        addr: i.addr,
                        target: Target::Indirect,
                        cond: None,
                    }),
                }
            }
            _ => {}
        }
    }
    out.computed_jump = computed_jump;
    for c in out.prologue.iter_mut() {
        c.branch_target = computed_jump || out.branch_targets.contains(&c.addr);
    }
    Ok(out)
}

/// Stack depth (bytes below SP at entry) before each instruction of
/// `insns` (sorted by address), where the paths that reach it agree: a
/// forward pass from `entry` through SP and frame-pointer (x29) changes.
fn stack_depths(
    insns: &[A64],
    entry: Option<u64>,
    inside: &dyn Fn(u64) -> bool,
    tables: &[TableAt],
) -> Vec<Option<i32>> {
    type State = (Option<i32>, Option<i32>);
    let mut states: Vec<Option<State>> = vec![None; insns.len()];
    let index = |a: u64| insns.binary_search_by_key(&a, |i| i.addr).ok();
    let Some(start) = entry.and_then(index) else {
        return vec![None; insns.len()];
    };
    let mut work = vec![start];
    states[start] = Some((Some(0), None));
    while let Some(k) = work.pop() {
        let Some((sp, fp)) = states[k] else { continue };
        let i = insns[k];
        let (sp2, fp2) = match sp_effect(i.word) {
            None => (sp, fp),
            Some(SpEffect::Delta(d)) => (sp.and_then(|s| s.checked_sub(d)), fp),
            Some(SpEffect::Unknown) => (None, fp),
            Some(SpEffect::FromFp(imm)) => (fp.and_then(|f| f.checked_sub(imm)), fp),
            Some(SpEffect::SetsFp(imm)) => (sp, sp.and_then(|s| s.checked_sub(imm))),
            Some(SpEffect::ClobbersFp) => (sp, None),
        };
        let sp2 = sp2.filter(|s| s.abs() <= super::MAX_SP_OFFSET);
        let next = (k + 1 < insns.len() && insns[k + 1].addr == i.addr + 4).then_some(k + 1);
        let mut succ: Vec<usize> = Vec::new();
        match i.op {
            Op::Ret { .. } | Op::RetReg => {}
            Op::B(t) => succ.extend(index(t).filter(|_| inside(t))),
            Op::BCond(t, _) | Op::RegCond(t) => {
                succ.extend(index(t).filter(|_| inside(t)));
                succ.extend(next);
            }
            Op::Br { .. } => {
                if let Some((_, _, Some(ts))) = tables.iter().find(|t| t.0 == k) {
                    succ.extend(ts.iter().filter_map(|&t| index(t)));
                }
            }
            _ => succ.extend(next),
        }
        for s in succ {
            let new = match states[s] {
                None => (sp2, fp2),
                Some((a, b)) => (
                    if a == sp2 { a } else { None },
                    if b == fp2 { b } else { None },
                ),
            };
            if states[s] != Some(new) {
                states[s] = Some(new);
                work.push(s);
            }
        }
    }
    states.into_iter().map(|s| s.and_then(|s| s.0)).collect()
}

/// What the kernel does with a probe on the instruction at the start of
/// `code` (at `addr`).
pub fn probe_cost_at(code: &[u8], addr: u64) -> ProbeCost {
    let Some(c) = code.get(..4) else {
        return ProbeCost::SingleStepped;
    };
    let w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    kernel_view(w, classify(addr, w)).0
}

/// The instruction at the start of `code` (at `addr`) as users read it,
/// with why the kernel will not probe it where it will not.
pub fn refused_text(code: &[u8], addr: u64) -> String {
    let Some(c) = code.get(..4) else {
        return "an undecodable instruction".to_string();
    };
    let w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    let t = text(addr, w);
    match kernel_view(w, classify(addr, w)) {
        (_, true) => format!("`{t}`"),
        (_, false) => format!("`{t}` (the arm64 kernel neither steps nor simulates it)"),
    }
}

/// The GOT slot a PLT stub (`adrp x16, PAGE; ldr x17, [x16, #OFF]; add
/// x16, x16, #OFF; br x17`) at `addr` jumps through.
pub fn plt_slot(code: &[u8], addr: u64) -> Option<u64> {
    let w = |k: usize| -> Option<u32> {
        let c = code.get(4 * k..4 * k + 4)?;
        Some(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    };
    let (adrp, ldr, br) = (w(0)?, w(1)?, w(3)?);
    let Op::Adr { rd, target: page } = classify(addr, adrp) else {
        return None;
    };
    // ldr xT, [xN, #imm] (64-bit, unsigned offset) from the page register.
    if adrp & 0x8000_0000 == 0 || ldr & 0xffc0_0000 != 0xf940_0000 {
        return None;
    }
    if (ldr >> 5) & 31 != u32::from(rd) {
        return None;
    }
    let Op::Br { reg, pac: false } = classify(addr + 12, br) else {
        return None;
    };
    (u32::from(reg) == ldr & 31).then(|| page + (u64::from((ldr >> 10) & 0xfff) << 3))
}

/// The general-purpose registers (bit N: xN, for N < 16) that the
/// instructions of `code` may write; every bit for code it cannot read.
pub fn written_registers(code: &[u8]) -> u16 {
    let mut mask = 0u16;
    for c in code.chunks(4) {
        let Ok(c) = <[u8; 4]>::try_from(c) else {
            return u16::MAX;
        };
        let w = u32::from_le_bytes(c);
        let rd = w & 31;
        let writes = match classify(0, w) {
            Op::Adr { .. } => true,
            Op::Other => writes_rd(w),
            Op::Bl(_) | Op::Blr { .. } => return u16::MAX,
            _ => false,
        };
        // Loads of a pair write Rt2 too.
        if w & 0x3e40_0000 == 0x2840_0000 {
            let rt2 = (w >> 10) & 31;
            if rt2 < 16 {
                mask |= 1 << rt2;
            }
        }
        if writes && rd < 16 {
            mask |= 1 << rd;
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disasm::EarlyExit;

    fn code(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn dec(words: &[u32]) -> Decoded {
        let bytes = code(words);
        decode(&[Range {
            addr: 0x1000,
            bytes: &bytes,
        }])
        .unwrap()
    }

    const STP_FP_LR_32: u32 = 0xa9be7bfd; // stp x29, x30, [sp, #-32]!
    const MOV_FP_SP: u32 = 0x910003fd; // mov x29, sp
    const LDP_FP_LR_32: u32 = 0xa8c27bfd; // ldp x29, x30, [sp], #32
    const RET: u32 = 0xd65f03c0;
    const NOP: u32 = 0xd503201f;

    #[test]
    fn texts_of_prologue_instructions() {
        assert_eq!(text(0, STP_FP_LR_32), "stp x29, x30, [sp, #-32]!");
        assert_eq!(text(0, MOV_FP_SP), "mov x29, sp");
        assert_eq!(text(0, LDP_FP_LR_32), "ldp x29, x30, [sp], #32");
        assert_eq!(text(0, 0xf9000bf3), "str x19, [sp, #16]");
        assert_eq!(text(0, 0xd10083ff), "sub sp, sp, #0x20");
        assert_eq!(text(0x1000, 0x94000400), "bl 0x2000");
        assert_eq!(text(0x1000, 0x54000041), "b.ne 0x1008");
        assert_eq!(text(0x1000, 0x34000040), "cbz w0, 0x1008");
        assert_eq!(text(0, 0xd503233f), "paciasp");
        assert_eq!(text(0, 0xd65f0bff), "retaa");
        assert_eq!(text(0, 0x2a0003e1), "mov w1, w0");
        assert_eq!(text(0, 0xf81e0ff3), "str x19, [sp, #-32]!");
    }

    /// `stp x29, x30, [sp, #-32]!; mov x29, sp; bl 0x2000; ldp; ret`: the
    /// entry moves onto the `bl`, 32 bytes below SP at entry; the `ret`
    /// is cheap and probed itself.
    #[test]
    fn entry_moves_past_the_frame_onto_a_simulated_instruction() {
        let d = dec(&[STP_FP_LR_32, MOV_FP_SP, 0x940003fe, LDP_FP_LR_32, RET]);
        assert_eq!(d.rets, vec![0x1010]);
        assert_eq!(d.calls.len(), 1);
        assert_eq!(d.calls[0].target, Target::Direct(0x2000));
        let first = d.first.clone().unwrap();
        assert_eq!(first.cost, ProbeCost::SingleStepped);
        let e = crate::plan::choose_entry(&d, &|_| true).unwrap();
        assert_eq!(
            (e.addr, e.sp_offset, e.cost),
            (0x1008, 32, ProbeCost::Emulated)
        );
        assert!(d.early_exits().is_empty());
        let ret = d.insns.iter().find(|i| i.addr == 0x1010).unwrap();
        assert_eq!(ret.cost, ProbeCost::Emulated);
    }

    /// A leaf whose only simulated instruction is its `ret` keeps its entry
    /// on the first instruction.
    #[test]
    fn entry_never_moves_onto_a_ret() {
        let d = dec(&[0x11000400, RET]); // add w0, w0, #1; ret
        let e = crate::plan::choose_entry(&d, &|_| true).unwrap();
        assert_eq!(e.addr, 0x1000);
    }

    #[test]
    fn pointer_authentication_exits() {
        // paciasp; stp; mov; bl; ldp; autiasp; ret
        let d = dec(&[
            0xd503233f,
            STP_FP_LR_32,
            MOV_FP_SP,
            0x94000400,
            LDP_FP_LR_32,
            0xd50323bf,
            RET,
        ]);
        assert_eq!(d.rets, vec![0x1018]);
        let e = crate::plan::choose_entry(&d, &|_| true).unwrap();
        assert_eq!((e.addr, e.sp_offset), (0x100c, 32));
        // retaa: an exit the kernel refuses to probe; the instruction
        // before it stands for it.
        let d = dec(&[STP_FP_LR_32, 0x94000400, LDP_FP_LR_32, 0xd65f0bff]);
        assert_eq!(d.rets, vec![0x100c]);
        let retaa = d.insns.iter().find(|i| i.addr == 0x100c).unwrap();
        assert!(!retaa.probeable);
        assert_eq!(
            d.early_exits().get(&0x100c),
            Some(&vec![EarlyExit {
                addr: 0x1008,
                sp_adjust: 32,
                cond: None,
                stepped: true
            }])
        );
    }

    #[test]
    fn tail_calls_and_conditional_branches() {
        // cmp w0, #3; b.gt 0x3000 (out: a conditional tail call);
        // cbz w0, 0x1010; b 0x2000 (a tail call); ret
        let d = dec(&[0x71000c1f, 0x5400ffec, 0x34000040, 0x140003fd, RET]);
        assert_eq!(
            d.tails,
            vec![
                TailJump {
                    addr: 0x1004,
                    target: Target::Direct(0x3000),
                    cond: Some(15)
                },
                TailJump {
                    addr: 0x100c,
                    target: Target::Direct(0x2000),
                    cond: None
                },
            ]
        );
        assert!(d.other_targets.contains(&0x1010));
        assert_eq!(d.rets, vec![0x1010]);
        // br x16 with no frame and no table: an indirect tail call.
        let d = dec(&[0xd61f0200]);
        assert_eq!(d.tails[0].target, Target::Indirect);
        // With the frame allocated it stays inside.
        let d = dec(&[STP_FP_LR_32, 0xd61f0200]);
        assert!(d.tails.is_empty());
        assert_eq!(
            d.internal_jumps[0].why,
            Internal::FrameAllocated { depth: 32 }
        );
    }

    /// GCC's switch: `cmp w0, #2; b.hi def; adrp x1, T; add x1, x1, #off;
    /// ldrb w1, [x1, w0, uxtw]; adr x2, L; add x1, x2, w1, sxtb #2;
    /// br x1`, with the byte table in data.
    #[test]
    fn a_jump_table_stays_inside() {
        let words = [
            0x7100081f, // 0x1000 cmp w0, #2
            0x54000168, // 0x1004 b.hi 0x1030
            0x90000001, // 0x1008 adrp x1, 0x1000
            0x91400021, // 0x100c add x1, x1, #0x0, lsl #12 -> patched below
            0x38604821, // 0x1010 ldrb w1, [x1, w0, uxtw]
            0x10000062, // 0x1014 adr x2, 0x1020
            0x8b218841, // 0x1018 add x1, x2, w1, sxtb #2
            0xd61f0020, // 0x101c br x1
            0x52800020, // 0x1020 mov w0, #1
            RET,        // 0x1024
            0x52800040, // 0x1028 mov w0, #2
            RET,        // 0x102c
            0x52800000, // 0x1030 mov w0, #0
            RET,        // 0x1034
        ];
        let mut words = words.to_vec();
        // add x1, x1, #0x800 (the table at 0x1800)
        words[3] = 0x91200021;
        let bytes = code(&words);
        struct Table;
        impl Image for Table {
            fn pointer(&self, _: u64) -> Option<u64> {
                None
            }
            fn read_i32(&self, addr: u64) -> Option<i32> {
                // Entries 0, 2, 4 (words after 0x1020), then padding.
                let t = [0u8, 2, 4, 0, 0, 0, 0, 0];
                let o = addr.checked_sub(0x1800)? as usize;
                Some(i32::from_le_bytes(t.get(o..o + 4)?.try_into().ok()?))
            }
            fn code(&self, _: u64) -> Option<&[u8]> {
                None
            }
            fn is_function_start(&self, _: u64) -> bool {
                false
            }
        }
        let r = [Range {
            addr: 0x1000,
            bytes: &bytes,
        }];
        let d = decode_in(&r, &Table).unwrap();
        assert!(d.tails.is_empty(), "{:?}", d.tails);
        assert_eq!(
            d.internal_jumps,
            vec![InternalJump {
                addr: 0x101c,
                why: Internal::Table { entries: 3 }
            }]
        );
        assert!(!d.computed_jump);
        for t in [0x1020, 0x1028, 0x1030] {
            assert!(d.other_targets.contains(&t), "{t:#x}");
        }
        // Without the data the table is recognised but not proven: taken
        // to stay inside, unchecked.
        let d = decode(&r).unwrap();
        assert_eq!(d.internal_jumps[0].why, Internal::IndexedMemory);
        assert!(d.computed_jump && d.tails.is_empty());
    }

    #[test]
    fn kernel_refusals() {
        for w in [
            0xd65f0bffu32, // retaa
            0xd4000001,    // svc #0
            0xd53bd040,    // mrs x0, tpidr_el0
            0x885f7c01,    // ldxr w1, [x0]
            0xd503203f,    // yield
            0x00000000,    // udf #0
        ] {
            assert!(!kernel_view(w, classify(0, w)).1, "{w:#x}");
        }
        for w in [NOP, 0xd503233f, 0xd503245f, STP_FP_LR_32, 0x58000040] {
            assert!(kernel_view(w, classify(0, w)).1, "{w:#x}");
        }
        assert_eq!(kernel_view(NOP, Op::Nop).0, ProbeCost::Emulated);
    }

    #[test]
    fn plt_stubs_name_their_slot() {
        // adrp x16, 0x11000; ldr x17, [x16, #4088]; add x16, x16, #0xff8; br x17
        let stub = code(&[0xb0000090, 0xf947fe11, 0x913fe210, 0xd61f0220]);
        assert_eq!(plt_slot(&stub, 0x400), Some(0x11000 + 4088));
    }

    #[test]
    fn conditions_map_to_x86_flags() {
        assert_eq!(x86_condition(0), Some(4));
        assert_eq!(x86_condition(8), Some(7));
        assert_eq!(x86_condition(14), None);
    }
}
