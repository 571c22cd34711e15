//! x86-64 decoding with iced-x86.

use anyhow::{bail, Result};
use iced_x86::{
    ConditionCode, Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction,
    Mnemonic, OpKind, Register,
};

use super::{Call, Decoded, EntryCandidate, Insn, InsnInfo, ProbeCost, Range, TailJump, Target};

/// Instructions in the straight-line start of a function considered for the
/// entry probe.
const MAX_PROLOGUE: usize = 16;

/// Decodes the ranges of one function (its body first, then fragments such as
/// `.cold` parts). A jump to an address outside every range is a tail jump.
pub fn decode(ranges: &[Range<'_>]) -> Result<Decoded> {
    let inside = |a: u64| ranges.iter().any(|r| r.contains(a));
    let mut out = Decoded::default();
    let mut fmt = GasFormatter::new();
    let mut targets: Vec<u64> = Vec::new();
    // A jump table (or any computed jump that stays inside) may reach any
    // instruction: then no instruction but the first is a safe entry.
    let mut computed_jump = false;
    let mut prologue_open = true;
    let mut sp_offset: i32 = 0;
    if let Some(r) = ranges.first() {
        out.body_end = r.addr + r.bytes.len() as u64;
    }
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
            let ip = insn.ip();
            out.boundaries.push(ip);
            out.insns.push(InsnInfo {
                addr: ip,
                cost: probe_cost(&insn),
                probeable: probeable(&insn),
                sp_change: sp_change(&insn),
                falls_through: insn.flow_control() == FlowControl::Next,
            });
            if insn.op0_kind() == OpKind::NearBranch64
                && matches!(
                    insn.flow_control(),
                    FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
                )
            {
                targets.push(insn.near_branch_target());
            }
            if insn.flow_control() == FlowControl::IndirectBranch
                && indirect_target(&insn).is_none()
            {
                computed_jump = true;
            }
            if ri == 0 && prologue_open && out.prologue.len() < MAX_PROLOGUE {
                let mut text = String::new();
                fmt.format(&insn, &mut text);
                out.prologue.push(EntryCandidate {
                    addr: ip,
                    text,
                    cost: probe_cost(&insn),
                    probeable: probeable(&insn),
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
                let mut text = String::new();
                fmt.format(&insn, &mut text);
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
                    if let Some(target) = indirect_target(&insn) {
                        out.tails.push(TailJump {
                            addr: ip,
                            target,
                            cond: None,
                        });
                    }
                }
                FlowControl::Call | FlowControl::IndirectCall => {
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
                    });
                }
                _ => {}
            }
        }
    }
    for c in out.prologue.iter_mut() {
        c.branch_target = computed_jump || targets.contains(&c.addr);
    }
    out.branch_targets = targets.into_iter().collect();
    out.computed_jump = computed_jump;
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
/// and never fires) and the privileged or trapping ones.
fn probeable(insn: &Instruction) -> bool {
    if insn.has_lock_prefix() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn range(addr: u64, bytes: &[u8]) -> Range<'_> {
        Range { addr, bytes }
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
                target: Target::Direct(0x1016)
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
