//! What the BPF side is told about each probe: the program that runs it and
//! the cookie that program reads, and how probes are grouped into links.
//! The bit layouts are those of `src/bpf/tachy.h`; the constants below are
//! its values, checked against the header by a test.

use std::collections::HashMap;

use super::{GoProbe, ItemKind, Plan, ProbeKind};
use crate::disasm::{Base, CheckedJump, JumpOperand};

/// Entry cookie: function id in bits 0-30 (TACHY_ENTRY_ID_MASK).
pub const ENTRY_ID_MASK: u64 = 0x7fff_ffff;
/// Entry cookie: the entry instruction is itself a direct tail jump.
pub const ENTRY_TAILING: u64 = 0x8000_0000;
/// Site cookie: slot (the probed address's index) in bits 0-28
/// (TACHY_SITE_SLOT_MASK).
pub const SITE_SLOT_MASK: u64 = 0x0fff_ffff;
/// Site cookie: the site is an inlined instance (signed SP adjustment in
/// bits 32-63).
pub const SITE_INLINED: u64 = 0x1000_0000;
/// Site cookie of an indirect call (not an inlined instance): it reads
/// its callee from the operand in bits 32-63, in the jump cookie's layout
/// of bits 0-31 ([`operand_bits`]), with this flag set there.
pub const CALL_READ: u64 = 0x8;
/// The callees counted apart per indirect call site and process
/// (TACHY_CALLEES); calls to others are counted together.
pub const CALLEES: usize = 16;
/// Site-end cookie: slot in bits 0-23, taken only when the x86 condition
/// in bits 24-27 holds (SITE_END_CONDITIONAL); signed SP adjustment in
/// bits 32-63.
pub const SITE_END_SLOT_MASK: u64 = 0x00ff_ffff;
pub const SITE_END_COND_SHIFT: u32 = 24;
pub const SITE_END_CONDITIONAL: u64 = 0x1000_0000;
pub const SITE_ENDS_WITH_PARENT: u64 = 0x2000_0000;
pub const SITE_TAIL: u64 = 0x4000_0000;
pub const SITE_EXIT_FIRST: u64 = 0x8000_0000;
/// Tail cookie: the x86 condition code of a conditional tail jump.
pub const TAIL_COND_MASK: u64 = 0x0f;
pub const TAIL_CONDITIONAL: u64 = 0x10;
pub const TAIL_INDIRECT: u64 = 0x20;
/// Jump cookie flags (TACHY_JUMP_*): the target is read from memory, at
/// an address with an index register, relative to the jump; what to
/// assume when it cannot be read.
pub const JUMP_MEM: u64 = 0x1;
pub const JUMP_INDEX: u64 = 0x2;
pub const JUMP_RIP: u64 = 0x4;
pub const JUMP_INSIDE: u64 = 0x8;
/// Jump cookie fields: where each starts (TACHY_JUMP_*_SHIFT).
pub const JUMP_REG_SHIFT: u32 = 4;
pub const JUMP_INDEX_SHIFT: u32 = 8;
pub const JUMP_SCALE_SHIFT: u32 = 12;
pub const JUMP_DISP_SHIFT: u32 = 14;
pub const JUMP_RIP_SHIFT: u32 = 4;
pub const JUMP_BEFORE_SHIFT: u32 = 32;
pub const JUMP_AFTER_SHIFT: u32 = 48;
/// Exit cookie: taken only when the x86 condition in the low bits holds;
/// signed SP adjustment in bits 32-63.
pub const EXIT_COND_MASK: u64 = 0x0f;
pub const EXIT_CONDITIONAL: u64 = 0x10;
/// Go cookie: function id in bits 0-29 (TACHY_GO_ID_MASK), kind in bits
/// 30-31, signed SP adjustment in bits 32-63.
pub const GO_ID_MASK: u64 = 0x3fff_ffff;
pub const GO_KIND_SHIFT: u32 = 30;
pub const GO_ENTRY: u64 = 0;
pub const GO_RET: u64 = 1;
pub const GO_MORESTACK: u64 = 2;
pub const GO_GOEXIT: u64 = 3;
/// Nodes of a nested tree, traced functions included (TACHY_MAX_NODES).
pub const MAX_NODES: usize = 4096;
/// `--by`: groups the kernel keeps unless TACHY_BY_GROUPS says otherwise
/// (TACHY_BY_GROUPS of tachy.h).
pub const BY_GROUPS: u32 = 4096;

/// The BPF program a probe runs: one uprobe program per kind, attached by
/// uprobe_multi links or single uprobes (tachy.bpf.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Program {
    Entry,
    Exit,
    Tail,
    /// Runs at the return of the probed function (a uretprobe).
    Uret,
    Site,
    SiteEnd,
    /// An indirect jump whose target is checked at run time.
    Jump,
    /// A probe of Go code (frames kept per goroutine).
    Go,
    /// A call site of Go code, and its return (cookies as `Site`'s and
    /// `SiteEnd`'s), in the goroutine's frames.
    GoSite,
    GoSiteEnd,
}

impl Program {
    pub const ALL: [Program; 10] = [
        Program::Entry,
        Program::Exit,
        Program::Tail,
        Program::Uret,
        Program::Site,
        Program::SiteEnd,
        Program::Jump,
        Program::Go,
        Program::GoSite,
        Program::GoSiteEnd,
    ];

    /// Its name in the BPF object (tachy.bpf.c).
    pub fn name(self) -> &'static str {
        match self {
            Program::Entry => "tachy_entry",
            Program::Exit => "tachy_exit",
            Program::Tail => "tachy_tail",
            Program::Uret => "tachy_uret",
            Program::Site => "tachy_site",
            Program::SiteEnd => "tachy_send",
            Program::Jump => "tachy_ijmp",
            Program::Go => "tachy_go",
            Program::GoSite => "tachy_gsite",
            Program::GoSiteEnd => "tachy_gsend",
        }
    }

    /// Whether the probe is a return probe.
    pub fn is_return(self) -> bool {
        self == Program::Uret
    }

    /// When its links are attached: the probes that end frames before
    /// those that open them, and function entries last. A call in flight
    /// while the links go live is then either not seen at all or seen with
    /// every probe that can end it already live: a frame is never opened
    /// whose exit probes were not yet there (its call would be counted as
    /// left by exception). Go code has entries and returns in one program.
    pub fn activation_rank(self) -> u8 {
        match self {
            Program::Exit | Program::Tail | Program::Uret | Program::Jump => 0,
            Program::SiteEnd | Program::GoSiteEnd => 1,
            Program::Site | Program::GoSite => 2,
            Program::Go => 3,
            Program::Entry => 4,
        }
    }
}

/// The program a probe runs and the cookie it reads.
pub fn encode(kind: ProbeKind) -> (Program, u64) {
    // Signed SP adjustments travel as their 32-bit two's complement.
    let high = |v: i32| u64::from(v as u32) << 32;
    match kind {
        ProbeKind::Entry {
            id,
            sp_adjust,
            tailing,
        } => (
            Program::Entry,
            (u64::from(id) & ENTRY_ID_MASK)
                | if tailing { ENTRY_TAILING } else { 0 }
                | high(sp_adjust),
        ),
        ProbeKind::Exit { sp_adjust, cond } => (
            Program::Exit,
            cond.map_or(0, |c| EXIT_CONDITIONAL | (u64::from(c) & EXIT_COND_MASK))
                | high(sp_adjust),
        ),
        ProbeKind::Tail { cookie } => (Program::Tail, cookie),
        ProbeKind::Jump { cookie } => (Program::Jump, cookie),
        ProbeKind::Uret => (Program::Uret, 0),
        ProbeKind::Site {
            slot,
            tail,
            exit_first,
            ends_with_parent,
            go,
            sp_adjust,
            inlined,
            reads,
        } => (
            if go { Program::GoSite } else { Program::Site },
            (u64::from(slot) & SITE_SLOT_MASK)
                | if inlined { SITE_INLINED } else { 0 }
                | match reads.as_ref().and_then(operand_bits) {
                    Some(op) if !inlined => (op | CALL_READ) << 32,
                    _ => high(sp_adjust),
                }
                | if tail { SITE_TAIL } else { 0 }
                | if exit_first { SITE_EXIT_FIRST } else { 0 }
                | if ends_with_parent {
                    SITE_ENDS_WITH_PARENT
                } else {
                    0
                },
        ),
        ProbeKind::SiteEnd {
            slot,
            sp_adjust,
            cond,
            go,
        } => (
            if go {
                Program::GoSiteEnd
            } else {
                Program::SiteEnd
            },
            (u64::from(slot) & SITE_END_SLOT_MASK)
                | cond.map_or(0, |c| {
                    SITE_END_CONDITIONAL | (u64::from(c) & 0x0f) << SITE_END_COND_SHIFT
                })
                | high(sp_adjust),
        ),
        ProbeKind::Go {
            id,
            kind,
            sp_adjust,
        } => {
            let k = match kind {
                GoProbe::Entry => GO_ENTRY,
                GoProbe::Ret => GO_RET,
                GoProbe::Morestack => GO_MORESTACK,
                GoProbe::Goexit => GO_GOEXIT,
            };
            (
                Program::Go,
                (u64::from(id) & GO_ID_MASK) | k << GO_KIND_SHIFT | high(sp_adjust),
            )
        }
    }
}

/// Where an indirect jump or call reads its target, as bits 0-31 of the
/// jump cookie (TACHY_JUMP_MEM, _INDEX, _RIP and the fields), if it fits:
/// a displacement of at most 18 bits (28 relative to the instruction), a
/// base register unless relative to the instruction.
pub fn operand_bits(op: &JumpOperand) -> Option<u64> {
    // A signed value in `bits` bits, as the low bits of a u64.
    let signed = |v: i64, bits: u32| {
        let half = 1i64 << (bits - 1);
        (-half..half)
            .contains(&v)
            .then(|| (v as u64) & ((1u64 << bits) - 1))
    };
    Some(match *op {
        JumpOperand::Register(r) => u64::from(r) << JUMP_REG_SHIFT,
        JumpOperand::Memory {
            base: Base::Jump,
            index: None,
            disp,
        } => JUMP_MEM | JUMP_RIP | signed(disp, 32 - JUMP_RIP_SHIFT)? << JUMP_RIP_SHIFT,
        JumpOperand::Memory {
            base: Base::Register(b),
            index,
            disp,
        } => {
            let index = match index {
                None => 0,
                Some((r, scale)) => {
                    JUMP_INDEX
                        | u64::from(r) << JUMP_INDEX_SHIFT
                        | u64::from(scale.trailing_zeros()) << JUMP_SCALE_SHIFT
                }
            };
            JUMP_MEM
                | u64::from(b) << JUMP_REG_SHIFT
                | index
                | signed(disp, 32 - JUMP_DISP_SHIFT)? << JUMP_DISP_SHIFT
        }
        // An absolute table address, or a RIP-relative one with an index
        // (x86 has none), does not fit.
        JumpOperand::Memory { .. } => return None,
    })
}

/// The cookie of the jump program for an indirect jump checked at run
/// time, if it fits: its operand ([`operand_bits`]), and the jump at most
/// 64 KiB from either end of its range.
pub fn jump_cookie(j: &CheckedJump) -> Option<u64> {
    let operand = operand_bits(&j.operand)?;
    let before = j.addr.checked_sub(j.range.0)?;
    let after = j.range.1.checked_sub(j.addr)?;
    if before > 0xffff || after > 0xffff {
        return None;
    }
    Some(
        operand
            | if j.assumed_inside { JUMP_INSIDE } else { 0 }
            | before << JUMP_BEFORE_SHIFT
            | after << JUMP_AFTER_SHIFT,
    )
}

/// The key of the `site_nodes` map: a site's slot and the id of the frame
/// (traced function or site) it is a child of.
pub fn site_node_key(slot: u32, parent: u32) -> u64 {
    u64::from(slot) << 32 | u64::from(parent)
}

/// The entries of the `site_nodes` map: which node each site slot times
/// under each parent, and (`tachy_site_node`, as bytes) for a site of a
/// callee under an indirect call, how far its probe stands past the
/// callee's start, plus one.
pub fn site_nodes(plan: &Plan) -> Vec<(u64, [u8; 8])> {
    let first = plan.items.len() as u32;
    plan.sites
        .iter()
        .enumerate()
        .map(|(i, n)| {
            // Signed: a site of the callee's `.cold` part stands below
            // its start.
            let via = n.via.as_ref().map_or(0, |v| {
                let at = slot_probe(plan, n.slot).unwrap_or(v.addr);
                (at.wrapping_sub(v.addr) as u32).wrapping_add(1)
            });
            let mut value = [0u8; 8];
            value[..4].copy_from_slice(&(first + i as u32).to_ne_bytes());
            value[4..].copy_from_slice(&via.to_ne_bytes());
            (site_node_key(n.slot, n.parent), value)
        })
        .collect()
}

/// Where the probe that opens site `slot` stands.
fn slot_probe(plan: &Plan, slot: u32) -> Option<u64> {
    plan.probes.iter().find_map(|p| match p.kind {
        ProbeKind::Site { slot: s, .. } if s == slot => Some(p.vaddr),
        _ => None,
    })
}

/// The keys of the BPF map `tail_pairs` (caller id << 32 | callee id):
/// per function timed by a uretprobe (`Plan::tail_reach`), each traced
/// function of its object that its tail jumps can reach, and ANY_ID as
/// the callee when some tail jump goes where the plan cannot tell.
pub fn tail_pairs(plan: &Plan) -> Vec<u64> {
    let mut keys = Vec::new();
    for (&caller, reach) in &plan.tail_reach {
        let Some(ItemKind::Function(from)) = plan.items.get(caller as usize).map(|i| &i.kind)
        else {
            continue;
        };
        let high = u64::from(caller) << 32;
        if reach.unknown {
            keys.push(high | u64::from(u32::MAX));
        }
        for (callee, item) in plan.items.iter().enumerate() {
            if let ItemKind::Function(to) = &item.kind {
                if to.object == from.object && reach.addrs.contains(&to.addr) {
                    keys.push(high | callee as u64);
                }
            }
        }
    }
    keys
}

/// Probes of one program in one object, attached as one link where the
/// kernel has uprobe_multi.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkGroup {
    /// Index into `Plan::objects`.
    pub object: usize,
    pub program: Program,
    /// (file offset, cookie), each offset at most once.
    pub sites: Vec<(u64, u64)>,
}

impl Program {
    /// Whether its probes belong to one call site (its slot in the cookie):
    /// such probes are attached one link per site, so that a site can be
    /// detached while the others go on (`--max-overhead`).
    pub fn is_site(self) -> bool {
        matches!(
            self,
            Program::Site | Program::SiteEnd | Program::GoSite | Program::GoSiteEnd
        )
    }
}

impl LinkGroup {
    /// A group of call-site probes split per slot (the site each probe
    /// times, from its cookie), in slot order; any other group is one part
    /// with no slot.
    pub fn per_slot(&self) -> Vec<(Option<u32>, LinkGroup)> {
        if !self.program.is_site() {
            return vec![(None, self.clone())];
        }
        let mut by: std::collections::BTreeMap<u32, Vec<(u64, u64)>> = Default::default();
        for &(offset, cookie) in &self.sites {
            let slot = match self.program {
                Program::Site | Program::GoSite => cookie & SITE_SLOT_MASK,
                _ => cookie & SITE_END_SLOT_MASK,
            } as u32;
            by.entry(slot).or_default().push((offset, cookie));
        }
        by.into_iter()
            .map(|(slot, sites)| {
                (
                    Some(slot),
                    LinkGroup {
                        object: self.object,
                        program: self.program,
                        sites,
                    },
                )
            })
            .collect()
    }
}

/// The plan's probes grouped into links: per object and program, in the
/// order they are attached (`Program::activation_rank`). A link holds an offset once, so a probe whose offset is
/// already in a group goes to the next group of the same object and
/// program.
pub fn link_groups(plan: &Plan) -> Vec<LinkGroup> {
    let mut groups: Vec<LinkGroup> = Vec::new();
    // (object, program) -> indexes of its groups, in order.
    let mut index: HashMap<(usize, Program), Vec<usize>> = HashMap::new();
    // How often each (object, program, offset) was seen so far: the
    // group a repeat goes to.
    let mut seen: HashMap<(usize, Program, u64), usize> = HashMap::new();
    for p in &plan.probes {
        let (program, cookie) = encode(p.kind);
        let nth = seen.entry((p.object, program, p.offset)).or_insert(0);
        let mine = index.entry((p.object, program)).or_default();
        if *nth == mine.len() {
            mine.push(groups.len());
            groups.push(LinkGroup {
                object: p.object,
                program,
                sites: Vec::new(),
            });
        }
        groups[mine[*nth]].sites.push((p.offset, cookie));
        *nth += 1;
    }
    groups.sort_by_key(|g| (g.program.activation_rank(), g.object, g.program));
    groups
}

#[cfg(test)]
mod tests {
    use super::super::Probe;
    use super::*;
    use crate::plan::filter::{self, Cmp};

    #[test]
    fn entry_cookie() {
        let (prog, c) = encode(ProbeKind::Entry {
            id: 5,
            sp_adjust: -8,
            tailing: true,
        });
        assert_eq!(prog, Program::Entry);
        assert_eq!(c & ENTRY_ID_MASK, 5);
        assert_ne!(c & ENTRY_TAILING, 0);
        assert_eq!((c >> 32) as u32 as i32, -8);
        let (_, c) = encode(ProbeKind::Entry {
            id: 7,
            sp_adjust: 24,
            tailing: false,
        });
        assert_eq!(c, 7 | 24 << 32);
    }

    /// A traced function of object `object` at `addr`, timed by a
    /// uretprobe.
    fn traced(object: usize, addr: u64) -> super::super::Item {
        use super::super::{ExitMode, ExitSummary, Item, TracedFunc};
        Item {
            name: format!("f{addr:x}"),
            raw_name: format!("f{addr:x}"),
            kind: ItemKind::Function(TracedFunc {
                object,
                addr,
                size: 0x10,
                fragments: 0,
                source: crate::symbols::SymSource::Symtab,
                source_text: ".symtab".into(),
                entry_addr: addr,
                entry_insn: "push rbp".into(),
                entry_cost: crate::disasm::ProbeCost::Emulated,
                inlined: None,
                exits: ExitSummary::new(ExitMode::UretprobeNoUnwind, 1),
            }),
        }
    }

    #[test]
    fn tail_pairs_name_the_traced_functions_a_tail_jump_reaches() {
        use super::super::TailReach;
        // 0 tail-calls 1 (and untraced 0x3000); 2, in another object, has
        // the same address as 1; 3 has an indirect tail jump.
        let mut plan = Plan {
            items: vec![
                traced(0, 0x1000),
                traced(0, 0x2000),
                traced(1, 0x2000),
                traced(0, 0x4000),
            ],
            ..Plan::default()
        };
        plan.tail_reach.insert(
            0,
            TailReach {
                addrs: [0x2000, 0x3000].into(),
                unknown: false,
            },
        );
        plan.tail_reach.insert(
            3,
            TailReach {
                addrs: Default::default(),
                unknown: true,
            },
        );
        assert_eq!(tail_pairs(&plan), vec![1, 3 << 32 | 0xffff_ffff]);
    }

    #[test]
    fn site_cookies() {
        let (prog, c) = encode(ProbeKind::Site {
            slot: 130,
            tail: true,
            exit_first: true,
            ends_with_parent: false,
            go: false,
            sp_adjust: 0,
            inlined: false,
            reads: None,
        });
        assert_eq!(prog, Program::Site);
        assert_eq!(c & SITE_SLOT_MASK, 130);
        assert_eq!(c >> 32, 0);
        assert_eq!(
            c & (SITE_TAIL | SITE_EXIT_FIRST | SITE_ENDS_WITH_PARENT),
            SITE_TAIL | SITE_EXIT_FIRST
        );
        let (_, c) = encode(ProbeKind::Site {
            slot: 1,
            tail: false,
            exit_first: false,
            ends_with_parent: true,
            go: false,
            sp_adjust: 0,
            inlined: false,
            reads: None,
        });
        assert_eq!(c, 1 | SITE_ENDS_WITH_PARENT);
        let (prog, c) = encode(ProbeKind::SiteEnd {
            slot: 9,
            sp_adjust: -16,
            cond: None,
            go: false,
        });
        assert_eq!(prog, Program::SiteEnd);
        assert_eq!(c, 9 | (u64::from(-16i32 as u32) << 32));
        assert_eq!(site_node_key(7, 2), 7 << 32 | 2);
        // An inlined instance: keyed off SP, left only under a condition.
        let (_, c) = encode(ProbeKind::Site {
            slot: 3,
            tail: false,
            exit_first: false,
            ends_with_parent: false,
            go: false,
            sp_adjust: 23,
            inlined: true,
            reads: None,
        });
        assert_eq!(c, 3 | SITE_INLINED | 23 << 32);
        let (_, c) = encode(ProbeKind::SiteEnd {
            slot: 3,
            sp_adjust: 7,
            cond: Some(6),
            go: false,
        });
        assert_eq!(
            c,
            3 | SITE_END_CONDITIONAL | 6 << SITE_END_COND_SHIFT | 7 << 32
        );
        assert_eq!(
            SITE_END_SLOT_MASK & (SITE_END_CONDITIONAL | 0x0f << SITE_END_COND_SHIFT),
            0
        );
        // Go sites: the same cookies, read by the goroutine programs.
        let (prog, c) = encode(ProbeKind::Site {
            slot: 1,
            tail: false,
            exit_first: true,
            ends_with_parent: true,
            go: true,
            sp_adjust: 0,
            inlined: false,
            reads: None,
        });
        assert_eq!(prog, Program::GoSite);
        assert_eq!(c, 1 | SITE_EXIT_FIRST | SITE_ENDS_WITH_PARENT);
        // An indirect call reads its callee: the operand in bits 32-63.
        let vtable = JumpOperand::Memory {
            base: Base::Register(3),
            index: None,
            disp: 0x18,
        };
        let (prog, c) = encode(ProbeKind::Site {
            slot: 4,
            tail: false,
            exit_first: false,
            ends_with_parent: false,
            go: false,
            sp_adjust: 0,
            inlined: false,
            reads: Some(vtable),
        });
        assert_eq!(prog, Program::Site);
        assert_eq!(
            c,
            4 | (CALL_READ | JUMP_MEM | 3 << JUMP_REG_SHIFT | 0x18 << JUMP_DISP_SHIFT) << 32
        );
        assert_eq!(vtable.to_string(), "*[r3+0x18]");
        assert_eq!(JumpOperand::Register(0).to_string(), "*r0");
        let (prog, c) = encode(ProbeKind::SiteEnd {
            slot: 9,
            sp_adjust: 8,
            cond: None,
            go: true,
        });
        assert_eq!(prog, Program::GoSiteEnd);
        assert_eq!(c, 9 | 8 << 32);
    }

    #[test]
    fn exits_tails_and_returns() {
        assert_eq!(encode(super::super::RET_EXIT), (Program::Exit, 0));
        let early = ProbeKind::Exit {
            sp_adjust: 0x148,
            cond: Some(5),
        };
        assert_eq!(
            encode(early),
            (Program::Exit, 0x148 << 32 | EXIT_CONDITIONAL | 5)
        );
        assert_eq!(encode(ProbeKind::Uret), (Program::Uret, 0));
        let cookie = TAIL_CONDITIONAL | TAIL_INDIRECT | 0x5;
        assert_eq!(encode(ProbeKind::Tail { cookie }), (Program::Tail, cookie));
        assert!(Program::Uret.is_return() && !Program::Exit.is_return());
    }

    #[test]
    fn go_cookies() {
        let go = |id, kind, sp_adjust| {
            encode(ProbeKind::Go {
                id,
                kind,
                sp_adjust,
            })
        };
        assert_eq!(go(5, GoProbe::Entry, 0), (Program::Go, 5));
        assert_eq!(go(5, GoProbe::Ret, 0), (Program::Go, 5 | 1 << 30));
        assert_eq!(go(2, GoProbe::Morestack, 0).1, 2 | 2 << 30);
        assert_eq!(go(0, GoProbe::Goexit, 0).1, 3 << 30);
        assert_eq!(
            go(1, GoProbe::Entry, -8).1,
            1 | u64::from(-8i32 as u32) << 32
        );
    }

    /// The `#define`s of tachy.h with a number for a value.
    fn header_defines() -> HashMap<String, u64> {
        let text = include_str!("../bpf/tachy.h");
        let mut out = HashMap::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("#define") {
                continue;
            }
            let (Some(name), Some(value)) = (words.next(), words.next()) else {
                continue;
            };
            let value = value.trim_end_matches("ULL").trim_end_matches('U');
            let parsed = match value.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => value.parse(),
            };
            if let Ok(v) = parsed {
                out.insert(name.to_string(), v);
            }
        }
        out
    }

    #[test]
    fn constants_match_tachy_h() {
        let defines = header_defines();
        for (name, value) in [
            ("TACHY_ENTRY_ID_MASK", ENTRY_ID_MASK),
            ("TACHY_ENTRY_TAILING", ENTRY_TAILING),
            ("TACHY_EXIT_COND_MASK", EXIT_COND_MASK),
            ("TACHY_EXIT_CONDITIONAL", EXIT_CONDITIONAL),
            ("TACHY_SITE_SLOT_MASK", SITE_SLOT_MASK),
            ("TACHY_SITE_ENDS_WITH_PARENT", SITE_ENDS_WITH_PARENT),
            ("TACHY_SITE_TAIL", SITE_TAIL),
            ("TACHY_SITE_EXIT_FIRST", SITE_EXIT_FIRST),
            ("TACHY_SITE_INLINED", SITE_INLINED),
            ("TACHY_SEND_SLOT_MASK", SITE_END_SLOT_MASK),
            ("TACHY_SEND_COND_SHIFT", SITE_END_COND_SHIFT.into()),
            ("TACHY_SEND_CONDITIONAL", SITE_END_CONDITIONAL),
            ("TACHY_TAIL_COND_MASK", TAIL_COND_MASK),
            ("TACHY_TAIL_CONDITIONAL", TAIL_CONDITIONAL),
            ("TACHY_TAIL_INDIRECT", TAIL_INDIRECT),
            ("TACHY_MAX_NODES", MAX_NODES as u64),
            ("TACHY_BY_GROUPS", BY_GROUPS.into()),
            ("TACHY_BY_KEYS", crate::plan::by::MAX_KEYS as u64),
            ("TACHY_SUB_BITS", crate::report::hist::SUB_BITS.into()),
            ("TACHY_JUMP_MEM", JUMP_MEM),
            ("TACHY_JUMP_INDEX", JUMP_INDEX),
            ("TACHY_JUMP_RIP", JUMP_RIP),
            ("TACHY_JUMP_INSIDE", JUMP_INSIDE),
            ("TACHY_CALL_READ", CALL_READ),
            ("TACHY_CALLEES", CALLEES as u64),
            ("TACHY_JUMP_REG_SHIFT", JUMP_REG_SHIFT.into()),
            ("TACHY_JUMP_INDEX_SHIFT", JUMP_INDEX_SHIFT.into()),
            ("TACHY_JUMP_SCALE_SHIFT", JUMP_SCALE_SHIFT.into()),
            ("TACHY_JUMP_DISP_SHIFT", JUMP_DISP_SHIFT.into()),
            ("TACHY_JUMP_RIP_SHIFT", JUMP_RIP_SHIFT.into()),
            ("TACHY_JUMP_BEFORE_SHIFT", JUMP_BEFORE_SHIFT.into()),
            ("TACHY_JUMP_AFTER_SHIFT", JUMP_AFTER_SHIFT.into()),
            ("TACHY_GO_ID_MASK", GO_ID_MASK),
            ("TACHY_GO_KIND_SHIFT", GO_KIND_SHIFT.into()),
            ("TACHY_GO_ENTRY", GO_ENTRY),
            ("TACHY_GO_RET", GO_RET),
            ("TACHY_GO_MORESTACK", GO_MORESTACK),
            ("TACHY_GO_GOEXIT", GO_GOEXIT),
            ("TACHY_MAX_TERMS", filter::MAX_TERMS as u64),
            ("TACHY_OPND_REG", filter::OPND_REG.into()),
            ("TACHY_OPND_STACK", filter::OPND_STACK.into()),
            ("TACHY_OPND_TID", filter::OPND_TID.into()),
            ("TACHY_OPND_PID", filter::OPND_PID.into()),
            ("TACHY_TERM_SIGNED", filter::TERM_SIGNED.into()),
            ("TACHY_TERM_LAST", filter::TERM_LAST.into()),
            ("TACHY_CMP_EQ", Cmp::Eq.code().into()),
            ("TACHY_CMP_NE", Cmp::Ne.code().into()),
            ("TACHY_CMP_LT", Cmp::Lt.code().into()),
            ("TACHY_CMP_LE", Cmp::Le.code().into()),
            ("TACHY_CMP_GT", Cmp::Gt.code().into()),
            ("TACHY_CMP_GE", Cmp::Ge.code().into()),
        ] {
            assert_eq!(defines.get(name), Some(&value), "{name} in tachy.h");
        }
        // The flags sit above the ids they share a cookie with.
        assert_eq!(ENTRY_ID_MASK & ENTRY_TAILING, 0);
        for flag in [
            SITE_ENDS_WITH_PARENT,
            SITE_TAIL,
            SITE_EXIT_FIRST,
            SITE_INLINED,
        ] {
            assert_eq!(flag & SITE_SLOT_MASK, 0);
        }
        assert_eq!(TAIL_COND_MASK & (TAIL_CONDITIONAL | TAIL_INDIRECT), 0);
        // The jump fields follow each other without overlap: flags, then
        // base, index, scale and displacement; the range above them.
        let flags = JUMP_MEM | JUMP_INDEX | JUMP_RIP | JUMP_INSIDE;
        assert_eq!(flags, (1 << JUMP_REG_SHIFT) - 1);
        assert_eq!(JUMP_INDEX_SHIFT, JUMP_REG_SHIFT + 4);
        assert_eq!(JUMP_SCALE_SHIFT, JUMP_INDEX_SHIFT + 4);
        assert_eq!(JUMP_DISP_SHIFT, JUMP_SCALE_SHIFT + 2);
        assert_eq!(JUMP_RIP_SHIFT, JUMP_REG_SHIFT);
        assert_eq!((JUMP_BEFORE_SHIFT, JUMP_AFTER_SHIFT), (32, 48));
    }

    fn jump(addr: u64, operand: JumpOperand, range: (u64, u64), inside: bool) -> CheckedJump {
        CheckedJump {
            addr,
            operand,
            range,
            assumed_inside: inside,
        }
    }

    #[test]
    fn jump_cookies() {
        let mem = |base, index, disp| JumpOperand::Memory { base, index, disp };
        // jmp *%r11 at 0x1010 of [0x1000, 0x1100).
        let c = jump_cookie(&jump(
            0x1010,
            JumpOperand::Register(11),
            (0x1000, 0x1100),
            false,
        ));
        assert_eq!(c, Some(11 << 4 | 0x10 << 32 | 0xf0 << 48));
        // jmp *-0x10(%rsi,%rax,8), taken to stay inside before.
        let c = jump_cookie(&jump(
            0x2000,
            mem(Base::Register(6), Some((0, 8)), -0x10),
            (0x2000, 0x2001),
            true,
        ))
        .unwrap();
        assert_eq!(c & 0xf, JUMP_MEM | JUMP_INDEX | JUMP_INSIDE);
        assert_eq!((c >> JUMP_REG_SHIFT) & 0xf, 6);
        assert_eq!((c >> JUMP_INDEX_SHIFT) & 0xf, 0);
        assert_eq!((c >> JUMP_SCALE_SHIFT) & 3, 3);
        assert_eq!((c as u32 as i32) >> JUMP_DISP_SHIFT, -0x10);
        assert_eq!(c >> 32, 1 << 16);
        // jmp *0x8(%rdi): no index.
        let c = jump_cookie(&jump(
            0x10,
            mem(Base::Register(7), None, 8),
            (0, 0x20),
            false,
        ));
        assert_eq!(
            c,
            Some(JUMP_MEM | 7 << 4 | 8 << 14 | 0x10 << 32 | 0x10 << 48)
        );
        // jmp *disp(%rip), the slot 100 MiB behind the jump: 28 bits.
        let c = jump_cookie(&jump(
            0x10,
            mem(Base::Jump, None, -100 << 20),
            (0, 0x20),
            false,
        ))
        .unwrap();
        assert_eq!(c & 0xf, JUMP_MEM | JUMP_RIP);
        assert_eq!((c as u32 as i32) >> JUMP_RIP_SHIFT, -100 << 20);
        // What does not fit: a displacement past 18 bits off a register, a
        // slot past 128 MiB, an absolute table, a jump 64 KiB into its range.
        for op in [
            mem(Base::Register(0), None, 1 << 17),
            mem(Base::Jump, None, 1 << 27),
            mem(Base::None, Some((1, 8)), 0x601000),
        ] {
            assert_eq!(
                jump_cookie(&jump(0x10, op, (0, 0x20), false)),
                None,
                "{op:?}"
            );
        }
        assert!(jump_cookie(&jump(
            0x10,
            mem(Base::Register(0), None, (1 << 17) - 1),
            (0, 0x20),
            false
        ))
        .is_some());
        let r = JumpOperand::Register(0);
        assert_eq!(jump_cookie(&jump(0x10000, r, (0, 0x10001), false)), None);
        assert_eq!(jump_cookie(&jump(0x10, r, (0, 0x10010), false)), None);
        assert!(jump_cookie(&jump(0xffff, r, (0, 0x1fffe), false)).is_some());
        assert_eq!(encode(ProbeKind::Jump { cookie: 5 }), (Program::Jump, 5));
    }

    #[test]
    fn groups_per_object_and_program_with_each_offset_once() {
        let mut plan = Plan::default();
        let probe = |object, offset, kind| Probe {
            object,
            vaddr: offset,
            offset,
            kind,
            cost: crate::disasm::ProbeCost::Emulated,
        };
        let site = |slot| ProbeKind::Site {
            slot,
            tail: false,
            exit_first: false,
            ends_with_parent: false,
            go: false,
            sp_adjust: 0,
            inlined: false,
            reads: None,
        };
        plan.probes = vec![
            probe(0, 0x10, super::super::RET_EXIT),
            probe(
                0,
                0x00,
                ProbeKind::Entry {
                    id: 0,
                    sp_adjust: 0,
                    tailing: false,
                },
            ),
            probe(0, 0x20, super::super::RET_EXIT),
            probe(1, 0x20, super::super::RET_EXIT),
            // Offsets repeated: each link holds an offset once.
            probe(0, 0x30, site(1)),
            probe(0, 0x38, site(2)),
            probe(0, 0x30, site(3)),
            probe(0, 0x38, site(4)),
            probe(0, 0x30, site(5)),
        ];
        let groups: Vec<(usize, Program, Vec<u64>)> = link_groups(&plan)
            .into_iter()
            .map(|g| (g.object, g.program, g.sites.iter().map(|s| s.0).collect()))
            .collect();
        assert_eq!(
            groups,
            vec![
                (0, Program::Exit, vec![0x10, 0x20]),
                (1, Program::Exit, vec![0x20]),
                (0, Program::Site, vec![0x30, 0x38]),
                (0, Program::Site, vec![0x30, 0x38]),
                (0, Program::Site, vec![0x30]),
                (0, Program::Entry, vec![0x00]),
            ]
        );
        // Call-site probes split per slot, each slot's probes together.
        let site = link_groups(&plan)
            .into_iter()
            .find(|g| g.program == Program::Site)
            .unwrap_or_else(|| panic!("no site group"));
        let parts: Vec<(Option<u32>, Vec<u64>)> = site
            .per_slot()
            .into_iter()
            .map(|(slot, g)| (slot, g.sites.iter().map(|s| s.0).collect()))
            .collect();
        assert_eq!(parts, vec![(Some(1), vec![0x30]), (Some(2), vec![0x38])]);
        let exits = link_groups(&plan)[0].per_slot();
        assert_eq!(exits.len(), 1);
        assert_eq!(exits[0].0, None);
    }
}
