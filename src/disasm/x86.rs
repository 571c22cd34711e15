//! x86-64 decoding with iced-x86.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};
use iced_x86::{
    ConditionCode, Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction,
    Mnemonic, OpKind, Register,
};

use super::{
    flow, Base, Call, CheckedJump, Decoded, EntryCandidate, Image, Insn, InsnInfo, Internal,
    InternalJump, JumpOperand, NoImage, ProbeCost, Range, TailJump, Target,
};

/// Instructions in the straight-line start of a function considered for the
/// entry probe.
const MAX_PROLOGUE: usize = 16;

/// An instruction in GNU assembler syntax. One formatter per thread: making
/// one builds its tables, which took longer than decoding a function.
fn gas_text(insn: &Instruction) -> String {
    thread_local! {
        static GAS: std::cell::RefCell<GasFormatter> = std::cell::RefCell::new(GasFormatter::new());
    }
    let mut text = String::new();
    GAS.with_borrow_mut(|f| f.format(insn, &mut text));
    text
}

/// Decodes the ranges of one function (its body first, then fragments such as
/// `.cold` parts), knowing nothing of the object around them.
pub fn decode(ranges: &[Range<'_>]) -> Result<Decoded> {
    decode_in(ranges, &NoImage)
}

/// Decodes the ranges of one function in its object. A jump to an address
/// outside every range is a tail jump, unless it is made with the frame
/// still allocated to code no symbol starts (a fragment without a name: it
/// is decoded too). An indirect jump is a tail jump unless it provably
/// stays inside (see [`Internal`]).
pub fn decode_in(ranges: &[Range<'_>], image: &dyn Image) -> Result<Decoded> {
    let mut out = Decoded::default();
    let mut prologue_open = true;
    let mut sp_offset: i32 = 0;
    if let Some(r) = ranges.first() {
        out.body_end = r.addr + r.bytes.len() as u64;
    }
    // Every instruction of the named ranges, in order, with its range.
    let mut swept: Vec<(usize, Instruction)> = Vec::new();
    for (ri, range) in ranges.iter().enumerate() {
        let mut dec = Decoder::with_ip(64, range.bytes, range.addr, DecoderOptions::NONE);
        let mut insn = Instruction::default();
        while dec.can_decode() {
            dec.decode_out(&mut insn);
            if insn.is_invalid() {
                bail!(
                    "undecodable instruction at {:#x}: the symbol's bytes are not x86-64 code",
                    insn.ip()
                );
            }
            swept.push((ri, insn));
        }
    }
    let by_addr: BTreeMap<u64, Instruction> = swept.iter().map(|(_, i)| (i.ip(), *i)).collect();
    let flow = match ranges.first() {
        Some(r) => flow::analyze(&by_addr, r.addr, image),
        None => flow::Flow::default(),
    };
    let inside = |a: u64| by_addr.contains_key(&a) || flow.extra.contains_key(&a);
    let mut targets: BTreeSet<u64> = flow.targets.clone();
    let mut computed_jump = flow.unknown_targets;
    let mut opaque_targets: Vec<u64> = Vec::new();
    // Fragments without a name, after the named ranges, by address.
    let extra = flow.extra.values().map(|i| (usize::MAX, *i));
    let mut prev_end: Option<u64> = None;
    // Indirect jumps not proven internal, and whether they were taken to
    // stay inside.
    let mut unproven: Vec<(Instruction, bool)> = Vec::new();
    for (ri, insn) in swept.iter().copied().chain(extra) {
        let ip = insn.ip();
        let bytes = match ranges.get(ri) {
            Some(r) => r.bytes.get((ip - r.addr) as usize..),
            None => image.code(ip),
        };
        let probeable = probeable(&insn)
            && !bytes.is_some_and(|b| {
                super::refusal::kernel_refusal(b.get(..insn.len()).unwrap_or(b)).is_some()
            });
        if ri == usize::MAX {
            match out.unnamed_fragments.last_mut() {
                Some(last) if prev_end == Some(ip) => last.1 = insn.next_ip(),
                _ => out.unnamed_fragments.push((ip, insn.next_ip())),
            }
            prev_end = Some(insn.next_ip());
        }
        out.boundaries.push(ip);
        out.insns.push(InsnInfo {
            addr: ip,
            cost: probe_cost(&insn),
            probeable,
            sp_change: sp_change(&insn),
            falls_through: insn.flow_control() == FlowControl::Next,
            jump: direct_jump(&insn),
            len: insn.len() as u8,
            is_nop: insn.mnemonic() == Mnemonic::Nop,
            is_call: is_call(&insn),
        });
        if insn.op0_kind() == OpKind::NearBranch64
            && matches!(
                insn.flow_control(),
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
            )
        {
            targets.insert(insn.near_branch_target());
            if direct_jump(&insn).is_none() {
                opaque_targets.push(insn.near_branch_target());
            }
        }
        if ri == 0 && prologue_open && out.prologue.len() < MAX_PROLOGUE {
            let text = gas_text(&insn);
            out.prologue.push(EntryCandidate {
                addr: ip,
                text,
                cost: probe_cost(&insn),
                probeable,
                sp_offset,
                branch_target: false,
            });
            match sp_change(&insn) {
                Some(d)
                    if insn.flow_control() == FlowControl::Next
                        && sp_offset
                            .checked_sub(d)
                            .is_some_and(|o| o.abs() <= super::MAX_SP_OFFSET) =>
                {
                    sp_offset -= d
                }
                _ => prologue_open = false,
            }
        }
        if ri == 0 && out.first.is_none() {
            let text = gas_text(&insn);
            out.first = Some(Insn {
                addr: ip,
                len: insn.len() as u32,
                text,
                cost: probe_cost(&insn),
            });
        }
        match insn.flow_control() {
            FlowControl::Return => {
                if matches!(insn.mnemonic(), Mnemonic::Ret) {
                    out.rets.push(ip);
                }
            }
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
                if insn.op0_kind() == OpKind::NearBranch64
                    && !inside(insn.near_branch_target()) =>
            {
                out.tails.push(TailJump {
                    addr: ip,
                    target: Target::Direct(insn.near_branch_target()),
                    cond: cond_code(insn.condition_code()),
                });
            }
            FlowControl::IndirectBranch => {
                if let Some(&why) = flow.internal.get(&ip) {
                    out.internal_jumps.push(InternalJump { addr: ip, why });
                } else if let Some(target) = indirect_target(&insn) {
                    out.tails.push(TailJump {
                        addr: ip,
                        target,
                        cond: None,
                    });
                    unproven.push((insn, false));
                } else {
                    // An indexed table the analysis did not reach: taken
                    // for a `switch` that stays inside.
                    computed_jump = true;
                    out.internal_jumps.push(InternalJump {
                        addr: ip,
                        why: Internal::IndexedMemory,
                    });
                    unproven.push((insn, true));
                }
            }
            FlowControl::Call | FlowControl::IndirectCall if is_call(&insn) => {
                let target = if insn.op0_kind() == OpKind::NearBranch64 {
                    Target::Direct(insn.near_branch_target())
                } else if insn.is_ip_rel_memory_operand() {
                    Target::Slot(insn.ip_rel_memory_address())
                } else {
                    Target::Indirect
                };
                out.calls.push(Call {
                    addr: ip,
                    next: insn.next_ip(),
                    target,
                    // A GOT slot that is no import's is an indirect call too.
                    read: match target {
                        Target::Direct(_) => None,
                        _ => jump_operand(&insn),
                    },
                });
            }
            _ => {}
        }
    }
    // Each unproven jump is checked at run time against the range holding
    // it (the unnamed runs are complete only now).
    let named = ranges
        .iter()
        .map(|r| (r.addr, r.addr + r.bytes.len() as u64));
    let all: Vec<(u64, u64)> = named.chain(out.unnamed_fragments.iter().copied()).collect();
    for (insn, assumed_inside) in unproven {
        let ip = insn.ip();
        let Some(&range) = all.iter().find(|r| r.0 <= ip && ip < r.1) else {
            continue;
        };
        if let Some(operand) = jump_operand(&insn) {
            out.checked_jumps.push(CheckedJump {
                addr: ip,
                operand,
                range,
                assumed_inside,
            });
        }
    }
    for c in out.prologue.iter_mut() {
        c.branch_target = computed_jump || targets.contains(&c.addr);
    }
    out.branch_targets = targets;
    // Arrivals that no direct jmp or jcc explains.
    out.other_targets = flow.targets.clone();
    out.other_targets.extend(opaque_targets);
    out.depths = flow.depth;
    // An unproven jump that stays inside may land anywhere after the entry
    // probe (its check takes a target up to the entry probe for a new call:
    // see `Plan::add_function`), so the entry candidates above keep their
    // places, and the rest of the code may be reached from it.
    out.computed_jump = computed_jump || out.checked_jumps.iter().any(|j| !j.assumed_inside);
    Ok(out)
}

/// How an instruction moves the stack pointer, if it is known: `push` -8,
/// `pop` +8, `sub $n,%rsp` -n, `add $n,%rsp` +n, 0 if it does not write it.
fn sp_change(insn: &Instruction) -> Option<i32> {
    let imm = || match insn.op1_kind() {
        OpKind::Immediate8to64 | OpKind::Immediate32to64 => Some(insn.immediate(1) as i64 as i32),
        OpKind::Immediate8 | OpKind::Immediate32 => Some(insn.immediate(1) as i32),
        _ => None,
    };
    let writes_rsp = insn.op_count() > 0
        && insn.op0_kind() == OpKind::Register
        && insn.op0_register() == Register::RSP;
    match insn.mnemonic() {
        Mnemonic::Push if insn.op0_kind() == OpKind::Register => Some(-8),
        Mnemonic::Pop if insn.op0_kind() == OpKind::Register && !writes_rsp => Some(8),
        Mnemonic::Sub if writes_rsp => imm().and_then(i32::checked_neg),
        Mnemonic::Add if writes_rsp => imm(),
        Mnemonic::Cmp | Mnemonic::Test => Some(0),
        Mnemonic::Push
        | Mnemonic::Pop
        | Mnemonic::Enter
        | Mnemonic::Leave
        | Mnemonic::Pushfq
        | Mnemonic::Popfq => None,
        _ if writes_rsp => None,
        _ => Some(0),
    }
}

/// Whether the kernel accepts a uprobe on this instruction. It refuses
/// lock-prefixed instructions (measured: a probe on `lock add` is accepted
/// and never fires), those with an ES, CS, SS or DS prefix (the padding
/// `cs nopw`, a `notrack` jump: attaching to a running process fails with
/// ENOTSUPP, arch/x86/kernel/uprobes.c is_prefix_bad), and the privileged
/// or trapping ones.
fn probeable(insn: &Instruction) -> bool {
    if insn.has_lock_prefix()
        || matches!(
            insn.segment_prefix(),
            Register::ES | Register::CS | Register::SS | Register::DS
        )
    {
        return false;
    }
    !matches!(
        insn.mnemonic(),
        Mnemonic::Int3
            | Mnemonic::Int
            | Mnemonic::Into
            | Mnemonic::Int1
            | Mnemonic::Hlt
            | Mnemonic::Cli
            | Mnemonic::Sti
            | Mnemonic::Syscall
            | Mnemonic::Sysenter
            | Mnemonic::In
            | Mnemonic::Out
            | Mnemonic::Insb
            | Mnemonic::Insw
            | Mnemonic::Insd
            | Mnemonic::Outsb
            | Mnemonic::Outsw
            | Mnemonic::Outsd
            | Mnemonic::Ud2
            | Mnemonic::Ud0
            | Mnemonic::Ud1
    )
}

/// An indirect `jmp` leaves the function unless it reads a jump table
/// (a memory operand with an index register: a `switch`).
fn indirect_target(insn: &Instruction) -> Option<Target> {
    match insn.op0_kind() {
        OpKind::Register => Some(Target::Indirect),
        OpKind::Memory => {
            if insn.memory_index() != Register::None {
                None
            } else if insn.is_ip_rel_memory_operand() {
                Some(Target::Slot(insn.ip_rel_memory_address()))
            } else {
                Some(Target::Indirect)
            }
        }
        _ => None,
    }
}

/// Where an indirect `jmp` or `call` reads its target, if the operand is
/// a 64-bit general register or a memory operand built from them.
fn jump_operand(insn: &Instruction) -> Option<JumpOperand> {
    let reg = |r: Register| flow::gpr(r).map(|i| i as u8);
    match insn.op0_kind() {
        OpKind::Register => reg(insn.op0_register()).map(JumpOperand::Register),
        OpKind::Memory => {
            // A segment override (`%fs:`) reads from an address BPF cannot
            // form from the saved registers.
            if !matches!(insn.segment_prefix(), Register::None | Register::DS)
                || insn.memory_size() != iced_x86::MemorySize::QwordOffset
            {
                return None;
            }
            let index = match insn.memory_index() {
                Register::None => None,
                r => Some((reg(r)?, insn.memory_index_scale() as u8)),
            };
            let (base, disp) = if insn.is_ip_rel_memory_operand() {
                let target = insn.ip_rel_memory_address();
                (Base::Jump, target.wrapping_sub(insn.ip()) as i64)
            } else {
                let base = match insn.memory_base() {
                    Register::None => Base::None,
                    r => Base::Register(reg(r)?),
                };
                (base, insn.memory_displacement64() as i64)
            };
            Some(JumpOperand::Memory { base, index, disp })
        }
        _ => None,
    }
}

/// A direct `jmp` or `jcc`: its target and condition code.
/// Whether `insn` is a `call`: iced files `syscall`, `sysenter` and the
/// like under the same flow control, but they push no return address and
/// run no code of the process (no callee, nothing that could unwind).
fn is_call(insn: &Instruction) -> bool {
    insn.mnemonic() == Mnemonic::Call
}

fn direct_jump(insn: &Instruction) -> Option<(u64, Option<u8>)> {
    let branch = matches!(
        insn.flow_control(),
        FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
    );
    let cond = cond_code(insn.condition_code());
    // `loop` and `jrcxz` branch on a condition no flags hold.
    let opaque = insn.flow_control() == FlowControl::ConditionalBranch && cond.is_none();
    (branch && !opaque && insn.op0_kind() == OpKind::NearBranch64)
        .then(|| (insn.near_branch_target(), cond))
}

fn cond_code(cc: ConditionCode) -> Option<u8> {
    use ConditionCode::*;
    Some(match cc {
        None => return Option::None,
        o => 0,
        no => 1,
        b => 2,
        ae => 3,
        e => 4,
        ne => 5,
        be => 6,
        a => 7,
        s => 8,
        ns => 9,
        p => 10,
        np => 11,
        l => 12,
        ge => 13,
        le => 14,
        g => 15,
    })
}

/// The kernel's x86 uprobe code emulates `push reg`, `nop`s and relative
/// branches and calls; everything else is single-stepped out of line.
fn probe_cost(insn: &Instruction) -> ProbeCost {
    let emulated = match insn.mnemonic() {
        Mnemonic::Nop => true,
        Mnemonic::Push => insn.op0_kind() == OpKind::Register,
        Mnemonic::Call | Mnemonic::Jmp => insn.op0_kind() == OpKind::NearBranch64,
        _ => insn.flow_control() == FlowControl::ConditionalBranch,
    };
    if emulated {
        ProbeCost::Emulated
    } else {
        ProbeCost::SingleStepped
    }
}

/// The addresses the rip-relative `lea`s of `code` (decoded from `addr`)
/// load, in order: an IFUNC resolver picks the function it returns so.
pub fn rip_lea_targets(code: &[u8], addr: u64) -> Vec<u64> {
    let mut dec = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut out = Vec::new();
    let mut insn = Instruction::default();
    while dec.can_decode() {
        dec.decode_out(&mut insn);
        if insn.mnemonic() == Mnemonic::Lea && insn.is_ip_rel_memory_operand() {
            out.push(insn.ip_rel_memory_address());
        }
    }
    out
}

/// What the kernel does with a probe on the instruction at the start of
/// `code` (decoded at `addr`).
pub fn probe_cost_at(code: &[u8], addr: u64) -> ProbeCost {
    let mut dec = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let insn = dec.decode();
    if insn.is_invalid() {
        return ProbeCost::SingleStepped;
    }
    probe_cost(&insn)
}

/// The instruction at the start of `code` (decoded at `addr`) as users read
/// it, with why the kernel will not probe it: "`vmovd %esi,%xmm0` (a vector
/// instruction with opcode byte 0x6e)".
pub fn refused_text(code: &[u8], addr: u64) -> String {
    let mut dec = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let insn = dec.decode();
    if insn.is_invalid() {
        return "an undecodable instruction".to_string();
    }
    let text = gas_text(&insn);
    match super::refusal::kernel_refusal(code.get(..insn.len()).unwrap_or(code)) {
        Some(r) => format!("`{text}` ({})", r.describe()),
        None => format!("`{text}`"),
    }
}

/// The general-purpose registers (bit N: x86 encoding number N, as in
/// `tachy.h`) that the instructions of `code`, decoded from `addr`, may
/// write. What a probe placed after them reads of an argument register is
/// the caller's value only where its bit is clear.
pub fn written_registers(code: &[u8], addr: u64) -> u16 {
    let mut info = iced_x86::InstructionInfoFactory::new();
    let mut mask = 0u16;
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    while d.can_decode() {
        let insn = d.decode();
        if insn.is_invalid() {
            return u16::MAX;
        }
        for u in info.info(&insn).used_registers() {
            if !matches!(
                u.access(),
                iced_x86::OpAccess::Write
                    | iced_x86::OpAccess::CondWrite
                    | iced_x86::OpAccess::ReadWrite
                    | iced_x86::OpAccess::ReadCondWrite
            ) {
                continue;
            }
            let r = u.register().full_register();
            if r.is_gpr64() {
                mask |= 1 << (r.number() as u16 & 15);
            }
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mov %rdi,%rbx; xor %esi,%esi; push %rbp`: rbx, rsi and rsp.
    #[test]
    fn registers_written_before_an_address() {
        let m = written_registers(&[0x48, 0x89, 0xfb, 0x31, 0xf6, 0x55], 0x1000);
        assert_eq!(m, 1 << 3 | 1 << 6 | 1 << 4);
    }
    use crate::disasm::EarlyExit;

    fn range(addr: u64, bytes: &[u8]) -> Range<'_> {
        Range { addr, bytes }
    }

    #[test]
    fn sees_rets_coming_at_the_jumps_into_their_epilogue() {
        let code = [
            0x53, // 0x1000 push rbx
            0x85, 0xff, // 0x1001 test edi,edi
            0x74, 0x0b, // 0x1003 je 0x1010
            0xe8, 0xf6, 0x0f, 0x00, 0x00, // 0x1005 call 0x2000
            0x85, 0xc0, // 0x100a test eax,eax
            0x75, 0x02, // 0x100c jne 0x1010
            0x31, 0xc0, // 0x100e xor eax,eax
            0x5b, // 0x1010 pop rbx
            0xc3, // 0x1011 ret
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        let at = |addr, cond| EarlyExit {
            addr,
            sp_adjust: 8,
            cond,
            stepped: false,
        };
        // `je` taken; `jne` either way (taken, or falling to the xor).
        assert_eq!(
            d.early_exits().get(&0x1011),
            Some(&vec![at(0x1003, Some(4)), at(0x100c, None)])
        );
    }

    /// A system call wrapper (`getppid`) makes no call: `syscall` enters
    /// the kernel and returns to the next instruction, so it is no call
    /// site and no indirect call that could reach code able to unwind.
    #[test]
    fn a_syscall_is_no_call() {
        let code = [
            0xb8, 0x6e, 0x00, 0x00, 0x00, // 0x1000 mov eax,0x6e
            0x0f, 0x05, // 0x1005 syscall
            0xff, 0xd0, // 0x1007 call rax
            0xc3, // 0x1009 ret
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        let calls: Vec<u64> = d.calls.iter().map(|c| c.addr).collect();
        assert_eq!(calls, [0x1007]);
        let is_call: Vec<u64> = d
            .insns
            .iter()
            .filter(|i| i.is_call)
            .map(|i| i.addr)
            .collect();
        assert_eq!(is_call, [0x1007]);
    }

    /// Padding after a `ret` is not a way into the next epilogue, and the
    /// kernel refuses its `cs` prefix.
    #[test]
    fn padding_before_an_epilogue_is_walked_past() {
        let code = [
            0x85, 0xff, // 0x1000 test edi,edi
            0x7e, 0x0d, // 0x1002 jle 0x1011
            0x31, 0xc0, // 0x1004 xor eax,eax
            0xc3, // 0x1006 ret
            0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00, // cs nopw
            0x31, 0xc0, // 0x1011 xor eax,eax
            0xc3, // 0x1013 ret
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        let early = d.early_exits();
        assert_eq!(
            early.get(&0x1013),
            Some(&vec![EarlyExit {
                addr: 0x1002,
                sp_adjust: 0,
                cond: Some(14),
                stepped: false,
            }])
        );
        // The other `ret` is seen at the same `jcc`, not taken.
        assert_eq!(
            early.get(&0x1006),
            Some(&vec![EarlyExit {
                addr: 0x1002,
                sp_adjust: 0,
                cond: Some(15),
                stepped: false,
            }])
        );
        let nop = d.insns.iter().find(|i| i.addr == 0x1007).unwrap();
        assert!(!nop.probeable);
    }

    /// A loop's closing `jcc` that falls into the epilogue would be hit on
    /// every turn: the `ret` keeps its probe.
    #[test]
    fn a_jcc_that_closes_a_loop_is_no_early_exit() {
        let code = [
            0x53, // 0x1000 push rbx
            0x31, 0xc0, // 0x1001 xor eax,eax
            0x83, 0xc0, 0x01, // 0x1003 add eax,1
            0x39, 0xf8, // 0x1006 cmp eax,edi
            0x75, 0xf9, // 0x1008 jne 0x1003
            0x5b, // 0x100a pop rbx
            0xc3, // 0x100b ret
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert!(d.early_exits().is_empty());
    }

    /// Where a loop's `jcc` leads into the epilogue, only a single-step
    /// there would see it: the `ret` keeps its probe, which costs the same
    /// on that path, and the `jmp` below is no early exit either.
    #[test]
    fn a_way_in_from_a_loop_leaves_the_ret_its_probe() {
        let code = [
            0x53, // 0x1000 push rbx
            0x31, 0xc0, // 0x1001 xor eax,eax
            0x83, 0xc0, 0x01, // 0x1003 add eax,1
            0x39, 0xf0, // 0x1006 cmp eax,esi
            0x74, 0x06, // 0x1008 je 0x1010
            0x39, 0xf8, // 0x100a cmp eax,edi
            0x75, 0xf5, // 0x100c jne 0x1003
            0xeb, 0x02, // 0x100e jmp 0x1012
            0x89, 0xc3, // 0x1010 mov ebx,eax
            0x5b, // 0x1012 pop rbx
            0xc3, // 0x1013 ret
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert!(d.early_exits().is_empty());
    }

    /// Redis's `getGenericCommand`: the last call returns into `xor
    /// %eax,%eax` ahead of the epilogue, and an error path jumps into it.
    /// A probe on the `xor` would be single-stepped on the path it serves,
    /// as the `ret` is: the `ret` keeps its probe.
    #[test]
    fn a_call_returning_ahead_of_the_epilogue_leaves_the_ret_its_probe() {
        let code = [
            0x53, // 0x1000 push rbx
            0x85, 0xff, // 0x1001 test edi,edi
            0x75, 0x09, // 0x1003 jne 0x100e
            0xe8, 0xf6, 0x0f, 0x00, 0x00, // 0x1005 call 0x2000
            0x31, 0xc0, // 0x100a xor eax,eax
            0x5b, // 0x100c pop rbx
            0xc3, // 0x100d ret
            0xb8, 0xff, 0xff, 0xff, 0xff, // 0x100e mov eax,-1
            0xeb, 0xf7, // 0x1013 jmp 0x100c
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert!(d.early_exits().is_empty());
    }

    /// Where the call returns onto padding before the epilogue, the kernel
    /// emulates the `nop` there: it stands for that way in.
    #[test]
    fn a_call_returning_onto_a_nop_is_seen_there() {
        let code = [
            0x53, // 0x1000 push rbx
            0x85, 0xff, // 0x1001 test edi,edi
            0x74, 0x09, // 0x1003 je 0x100e
            0xe8, 0xf6, 0x0f, 0x00, 0x00, // 0x1005 call 0x2000
            0x0f, 0x1f, 0x40, 0x00, // 0x100a nopl 0x0(%rax)
            0x5b, // 0x100e pop rbx
            0xc3, // 0x100f ret
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        let at = |addr, cond| EarlyExit {
            addr,
            sp_adjust: 8,
            cond,
            stepped: false,
        };
        assert_eq!(
            d.early_exits().get(&0x100f),
            Some(&vec![at(0x1003, Some(4)), at(0x100a, None)])
        );
    }

    #[test]
    fn keeps_the_ret_probe_where_a_call_returns_into_the_epilogue() {
        // push rbx; call 0x2000; pop rbx; ret
        let code = [0x53, 0xe8, 0xfa, 0x0f, 0x00, 0x00, 0x5b, 0xc3];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert!(d.early_exits().is_empty());
        // xor eax,eax; ret: the entry runs straight into it.
        let d = decode(&[range(0x1000, &[0x31, 0xc0, 0xc3])]).unwrap();
        assert!(d.early_exits().is_empty());
        // mov rsp,rbp (SP from a register) before the epilogue.
        // test edi,edi; je 0x1005; nop; mov rsp,rbp; pop rbp; ret
        let code = [0x85, 0xff, 0x74, 0x01, 0x90, 0x48, 0x89, 0xec, 0x5d, 0xc3];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert!(d.early_exits().is_empty());
    }

    #[test]
    fn finds_rets_tail_jumps_and_calls() {
        // push rbp; call +0x10; test eax,eax; je out(0x2000); pop rbp; ret; jmp 0x3000
        let code = [
            0x55, // 0x1000 push rbp
            0xe8, 0x10, 0x00, 0x00, 0x00, // 0x1001 call 0x1016
            0x85, 0xc0, // 0x1006 test eax,eax
            0x0f, 0x84, 0xf2, 0x0f, 0x00, 0x00, // 0x1008 je 0x2000
            0x5d, // 0x100e pop rbp
            0xc3, // 0x100f ret
            0xe9, 0xeb, 0x1f, 0x00, 0x00, // 0x1010 jmp 0x3000
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert_eq!(d.rets, vec![0x100f]);
        assert_eq!(
            d.tails,
            vec![
                TailJump {
                    addr: 0x1008,
                    target: Target::Direct(0x2000),
                    cond: Some(4)
                },
                TailJump {
                    addr: 0x1010,
                    target: Target::Direct(0x3000),
                    cond: None
                },
            ]
        );
        assert_eq!(
            d.calls,
            vec![Call {
                addr: 0x1001,
                next: 0x1006,
                target: Target::Direct(0x1016),
                read: None,
            }]
        );
        assert_eq!(
            d.boundaries,
            vec![0x1000, 0x1001, 0x1006, 0x1008, 0x100e, 0x100f, 0x1010]
        );
        let first = d.first.unwrap();
        assert_eq!(
            (first.text.as_str(), first.cost),
            ("push %rbp", ProbeCost::Emulated)
        );
    }

    #[test]
    fn jumps_into_a_fragment_are_internal() {
        let body = [0x0f, 0x84, 0xfa, 0x0f, 0x00, 0x00, 0xc3]; // je 0x2000; ret
        let cold = [0xc3]; // 0x2000 ret
        let d = decode(&[range(0x1000, &body), range(0x2000, &cold)]).unwrap();
        assert!(d.tails.is_empty());
        assert_eq!(d.rets, vec![0x1006, 0x2000]);
    }

    #[test]
    fn switch_tables_are_not_tail_jumps_but_register_jumps_are() {
        // jmp *(%rax,%rcx,8) ; jmp *%rax ; jmp *0x10(%rip)
        let code = [
            0xff, 0x24, 0xc8, 0xff, 0xe0, 0xff, 0x25, 0x10, 0x00, 0x00, 0x00,
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert_eq!(
            d.tails,
            vec![
                TailJump {
                    addr: 0x1003,
                    target: Target::Indirect,
                    cond: None
                },
                TailJump {
                    addr: 0x1005,
                    target: Target::Slot(0x101b),
                    cond: None
                },
            ]
        );
    }

    #[test]
    fn unproven_indirect_jumps_are_checked_at_run_time() {
        // jmp *(%rax,%rcx,8); jmp *%rax; jmp *0x10(%rip); notrack jmp *0x8(%rdi);
        // jmp *%fs:0x10; jmp *0x601000(,%r9,8)
        let code = [
            0xff, 0x24, 0xc8, 0xff, 0xe0, 0xff, 0x25, 0x10, 0x00, 0x00, 0x00, 0x3e, 0xff, 0x67,
            0x08, 0x64, 0xff, 0x24, 0x25, 0x10, 0x00, 0x00, 0x00, 0x42, 0xff, 0x24, 0xcd, 0x00,
            0x10, 0x60, 0x00,
        ];
        let frag = [0x41, 0xff, 0xe3]; // 0x2000: jmp *%r11
        let d = decode(&[range(0x1000, &code), range(0x2000, &frag)]).unwrap();
        let body = (0x1000, 0x101f);
        let check = |addr, operand, range, assumed_inside| CheckedJump {
            addr,
            operand,
            range,
            assumed_inside,
        };
        let mem = |base, index, disp| JumpOperand::Memory { base, index, disp };
        assert_eq!(
            d.checked_jumps,
            vec![
                check(0x1000, mem(Base::Register(0), Some((1, 8)), 0), body, true),
                check(0x1003, JumpOperand::Register(0), body, false),
                // The slot is at 0x100b + 0x10: 0x16 from the jump.
                check(0x1005, mem(Base::Jump, None, 0x16), body, false),
                check(0x100b, mem(Base::Register(7), None, 8), body, false),
                // %fs: is not a register BPF can read: not checked.
                check(0x1017, mem(Base::None, Some((9, 8)), 0x601000), body, true),
                check(0x2000, JumpOperand::Register(11), (0x2000, 0x2003), false),
            ]
        );
        // The frameless ones without a table stay tail jumps as well.
        let tails: Vec<u64> = d.tails.iter().map(|t| t.addr).collect();
        assert_eq!(tails, vec![0x1003, 0x1005, 0x100b, 0x100f, 0x2000]);
        // A jump with the frame allocated is proven internal: no check.
        // push %rbx; jmp *%rax
        let d = decode(&[range(0x1000, &[0x53, 0xff, 0xe0])]).unwrap();
        assert!(d.checked_jumps.is_empty() && d.tails.is_empty());
    }

    /// An object image of a few byte runs, with the unwind tables' part
    /// bounds where given.
    struct Mem(Vec<(u64, Vec<u8>)>, Vec<(u64, u64)>);

    impl Mem {
        fn at(&self, addr: u64, len: u64) -> Option<&[u8]> {
            self.0.iter().find_map(|(a, b)| {
                let off = addr.checked_sub(*a)? as usize;
                b.get(off..off + len as usize)
            })
        }
    }

    impl Image for Mem {
        fn pointer(&self, addr: u64) -> Option<u64> {
            Some(u64::from_le_bytes(self.at(addr, 8)?.try_into().ok()?))
        }
        fn read_i32(&self, addr: u64) -> Option<i32> {
            Some(i32::from_le_bytes(self.at(addr, 4)?.try_into().ok()?))
        }
        fn code(&self, addr: u64) -> Option<&[u8]> {
            self.0
                .iter()
                .find_map(|(a, b)| b.get(addr.checked_sub(*a)? as usize..))
        }
        fn is_function_start(&self, addr: u64) -> bool {
            addr == 0x3000
        }
        fn part_bounds(&self, addr: u64) -> Option<(u64, u64)> {
            self.1.iter().copied().find(|b| b.0 <= addr && addr < b.1)
        }
    }

    #[test]
    fn a_relative_jump_table_stays_inside() {
        // cmp $2,%edi; ja ret; lea tab(%rip),%rcx; movslq (%rcx,%rdi,4),%rdx;
        // add %rcx,%rdx; notrack jmp *%rdx; three cases `mov $n,%eax; ret`.
        let code = [
            0x83, 0xff, 0x02, 0x77, 0x22, 0x48, 0x8d, 0x0d, 0x1c, 0x00, 0x00, 0x00, 0x48, 0x63,
            0x14, 0xb9, 0x48, 0x01, 0xca, 0x3e, 0xff, 0xe2, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3,
            0xb8, 0x02, 0x00, 0x00, 0x00, 0xc3, 0xb8, 0x03, 0x00, 0x00, 0x00, 0xc3,
        ];
        // The table at 0x1028: three entries, then data that is no entry.
        let table = [
            0xee, 0xff, 0xff, 0xff, 0xf4, 0xff, 0xff, 0xff, 0xfa, 0xff, 0xff, 0xff, 0x00, 0x00,
            0xff, 0x7f,
        ];
        let mem = Mem(vec![(0x1028, table.to_vec())], vec![]);
        let d = decode_in(&[range(0x1000, &code)], &mem).unwrap();
        assert!(d.tails.is_empty(), "{:?}", d.tails);
        assert_eq!(
            d.internal_jumps,
            vec![InternalJump {
                addr: 0x1013,
                why: Internal::Table { entries: 3 }
            }]
        );
        assert!(!d.computed_jump);
        for case in [0x1016, 0x101c, 0x1022] {
            assert!(d.branch_targets.contains(&case), "{case:#x}");
        }
        // Without the object's data the table is unknown, and a frameless
        // register jump may leave: a tail jump, as before.
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert_eq!(d.tails.len(), 1);
    }

    #[test]
    fn computed_goto_with_a_frame_stays_inside() {
        // push %rbx; lea tab8(%rip),%rsi; movzbl (%rdi),%eax;
        // mov (%rsi,%rax,8),%rax; jmp *%rax;
        // l0: add $1,%rdi; movzbl (%rdi),%eax; jmp *(%rsi,%rax,8);
        // l1: pop %rbx; ret
        let code = [
            0x53, 0x48, 0x8d, 0x35, 0x38, 0x00, 0x00, 0x00, 0x0f, 0xb6, 0x07, 0x48, 0x8b, 0x04,
            0xc6, 0xff, 0xe0, 0x48, 0x83, 0xc7, 0x01, 0x0f, 0xb6, 0x07, 0xff, 0x24, 0xc6, 0x5b,
            0xc3,
        ];
        // The labels as values at 0x1040: l0, l1.
        let mut table = Vec::new();
        table.extend(0x1011u64.to_le_bytes());
        table.extend(0x101bu64.to_le_bytes());
        let mem = Mem(vec![(0x1040, table)], vec![]);
        let d = decode_in(&[range(0x1000, &code)], &mem).unwrap();
        assert!(d.tails.is_empty(), "{:?}", d.tails);
        assert_eq!(
            d.internal_jumps,
            vec![
                InternalJump {
                    addr: 0x100f,
                    why: Internal::Table { entries: 2 }
                },
                InternalJump {
                    addr: 0x1018,
                    why: Internal::Table { entries: 2 }
                },
            ]
        );
        // Without the table, the pushed %rbx proves both jumps internal.
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert!(d.tails.is_empty(), "{:?}", d.tails);
        assert_eq!(
            d.internal_jumps[0],
            InternalJump {
                addr: 0x100f,
                why: Internal::FrameAllocated { depth: 8 }
            }
        );
        assert!(d.computed_jump);
        assert_eq!(d.rets, vec![0x101c]);
    }

    #[test]
    fn stack_depth_follows_frame_pointers_and_stops_at_alignment() {
        // push %rbp; mov %rsp,%rbp; sub $0x20,%rsp; leave; jmp *%rax
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20, 0xc9, 0xff, 0xe0,
        ];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert_eq!(d.tails.len(), 1, "the frame is gone at the jump");
        // push %rbp; mov %rsp,%rbp; sub $0x20,%rsp; jmp *%rax
        let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20, 0xff, 0xe0];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert!(d.tails.is_empty());
        // and $-16,%rsp; jmp *%rax: the depth is unknown, the jump may leave.
        let code = [0x48, 0x83, 0xe4, 0xf0, 0xff, 0xe0];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert_eq!(d.tails.len(), 1);
    }

    #[test]
    fn a_fragment_without_a_symbol_is_part_of_the_function() {
        // push %rbx; test %edi,%edi; jne 0x2000; pop %rbx; ret
        let body = [
            0x53, 0x85, 0xff, 0x0f, 0x85, 0xf7, 0x0f, 0x00, 0x00, 0x5b, 0xc3,
        ];
        // 0x2000: call 0x3000; test %eax,%eax; je 0x200b; pop %rbx; ret;
        // 0x200b: jmp 0x1009 (back into the body)
        let frag = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00, 0x85, 0xc0, 0x74, 0x02, 0x5b, 0xc3, 0xe9, 0xf9, 0xef,
            0xff, 0xff, 0xcc, 0xcc,
        ];
        let mem = Mem(vec![(0x2000, frag.to_vec())], vec![]);
        let d = decode_in(&[range(0x1000, &body)], &mem).unwrap();
        assert!(d.tails.is_empty(), "{:?}", d.tails);
        assert_eq!(d.rets, vec![0x100a, 0x200a]);
        assert_eq!(
            d.calls,
            vec![Call {
                addr: 0x2000,
                next: 0x2005,
                target: Target::Direct(0x3000),
                read: None,
            }]
        );
        assert_eq!(d.unnamed_fragments, vec![(0x2000, 0x2010)]);
        // A frameless jump there may be a tail call to a function with no
        // symbol; one to a function start is a tail call.
        let body = [0x85, 0xff, 0x0f, 0x85, 0xf8, 0x0f, 0x00, 0x00, 0xc3];
        let d = decode_in(&[range(0x1000, &body)], &mem).unwrap();
        assert_eq!(d.tails.len(), 1);
        assert!(d.unnamed_fragments.is_empty());
    }

    #[test]
    fn an_unnamed_part_ends_where_the_unwind_tables_say() {
        // push %rbx; test %edi,%edi; jne 0x2000; pop %rbx; ret
        let body = [
            0x53, 0x85, 0xff, 0x0f, 0x85, 0xf7, 0x0f, 0x00, 0x00, 0x5b, 0xc3,
        ];
        // 0x2000: call 0x3000 (it does not return), then another function's
        // cold part: pop %rbx; ret
        let frag = [0xe8, 0xfb, 0x0f, 0x00, 0x00, 0x5b, 0xc3];
        let bounds = vec![(0x1000, 0x100b), (0x2000, 0x2005), (0x2005, 0x2007)];
        let mem = Mem(vec![(0x2000, frag.to_vec())], bounds);
        let d = decode_in(&[range(0x1000, &body)], &mem).unwrap();
        assert_eq!(d.unnamed_fragments, vec![(0x2000, 0x2005)]);
        assert_eq!(d.rets, vec![0x100a]);
        // Without the tables, the decoder follows the code on.
        let mem = Mem(vec![(0x2000, frag.to_vec())], vec![]);
        let d = decode_in(&[range(0x1000, &body)], &mem).unwrap();
        assert_eq!(d.rets, vec![0x100a, 0x2006]);
    }

    #[test]
    fn a_jump_to_the_entry_or_through_one_entry_is_no_proof() {
        // lea 0x1000(%rip) (the entry),%rax; jmp *%rax: a new call.
        let code = [0x48, 0x8d, 0x05, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xe0];
        let d = decode(&[range(0x1000, &code)]).unwrap();
        assert_eq!(d.tails.len(), 1);
        // lea tab(%rip),%rsi; mov (%rsi,%rdi,8),%rax; jmp *%rax, where the
        // table's one entry inside is followed by a pointer elsewhere.
        let code = [
            0x48, 0x8d, 0x35, 0x39, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x04, 0xfe, 0xff, 0xe0, 0xc3,
        ];
        let mut table = Vec::new();
        table.extend(0x100du64.to_le_bytes());
        table.extend(0x5000u64.to_le_bytes());
        let mem = Mem(vec![(0x1040, table)], vec![]);
        let d = decode_in(&[range(0x1000, &code)], &mem).unwrap();
        assert_eq!(d.tails.len(), 1, "{:?}", d.internal_jumps);
    }

    #[test]
    fn endbr64_and_lea_are_single_stepped() {
        let d = decode(&[range(0x1000, &[0xf3, 0x0f, 0x1e, 0xfa, 0xc3])]).unwrap();
        assert_eq!(d.first.unwrap().cost, ProbeCost::SingleStepped);
        let d = decode(&[range(0x1000, &[0x48, 0x8d, 0x47, 0x01, 0xc3])]).unwrap();
        assert_eq!(d.first.unwrap().cost, ProbeCost::SingleStepped);
    }

    #[test]
    fn invalid_bytes_are_refused() {
        assert!(decode(&[range(0x1000, &[0x06])]).is_err());
    }
}
