//! Control flow of one x86-64 function: what the stack depth is at each
//! instruction, where its indirect jumps can go, and which code outside its
//! named ranges belongs to it (fragments without a symbol).
//!
//! A forward data-flow pass from the entry over the decoded instructions.
//! Its state is the stack depth (bytes below SP at entry, through push/pop,
//! `sub`/`add`/`lea` on RSP, a frame pointer set by `mov %rsp,%rbp` and
//! restored by `leave` or `mov %rbp,%rsp`), and for each general register
//! what the dispatch idioms need: an address taken with `lea x(%rip)`, an
//! entry loaded from a table of pointers, or a table's relative entry added
//! to its base. Where paths disagree, or an instruction does something not
//! modelled (`and $-16,%rsp`), the value is unknown.

use std::collections::{BTreeMap, BTreeSet};

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess,
    OpKind, Register,
};

use super::{AddrMap, Image, Internal, MAX_SP_OFFSET};

/// Entries read from one jump table at most.
const MAX_TABLE: usize = 4096;
/// Instructions decoded outside the function's named ranges at most.
const MAX_EXTRA: usize = 1 << 14;
/// Rounds of seeding code that only indirect jumps reach.
const MAX_ROUNDS: usize = 4;

/// What a register is known to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Unknown,
    /// An address computed from RIP (`lea x(%rip),%reg`).
    Addr(u64),
    /// An 8-byte entry of the table of pointers at this address.
    Load8(u64),
    /// A 4-byte signed entry of the relative table at this address.
    Rel32(u64),
    /// A relative table's entry plus its base: a target of that table.
    RelTarget(u64),
    /// An 8-byte entry of a table whose address is not known.
    LoadedPointer,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    /// Bytes below SP at entry.
    sp: Option<i32>,
    /// RBP as bytes below SP at entry, while it is a frame pointer.
    rbp: Option<i32>,
    regs: [Val; 16],
}

impl State {
    fn entry() -> State {
        State {
            sp: Some(0),
            rbp: None,
            regs: [Val::Unknown; 16],
        }
    }

    fn seeded(sp: Option<i32>, rbp: Option<i32>) -> State {
        State {
            sp,
            rbp,
            regs: [Val::Unknown; 16],
        }
    }

    /// Meets `other` into `self`; whether anything changed.
    fn meet(&mut self, other: &State) -> bool {
        let before = self.clone();
        if self.sp != other.sp {
            self.sp = None;
        }
        if self.rbp != other.rbp {
            self.rbp = None;
        }
        for (a, b) in self.regs.iter_mut().zip(other.regs.iter()) {
            if a != b {
                *a = Val::Unknown;
            }
        }
        *self != before
    }

    fn reg(&self, r: Register) -> Val {
        gpr(r).map_or(Val::Unknown, |i| self.regs[i])
    }

    fn set(&mut self, r: Register, v: Val) {
        if let Some(i) = gpr(r) {
            self.regs[i] = v;
        }
    }
}

/// Index of a 64-bit general register, RSP and RBP included.
pub(super) fn gpr(r: Register) -> Option<usize> {
    const GPRS: [Register; 16] = [
        Register::RAX,
        Register::RCX,
        Register::RDX,
        Register::RBX,
        Register::RSP,
        Register::RBP,
        Register::RSI,
        Register::RDI,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
        Register::R12,
        Register::R13,
        Register::R14,
        Register::R15,
    ];
    GPRS.iter().position(|&g| g == r)
}

/// Registers a call may change (System V): the rest survive it.
const CALL_CLOBBERED: [Register; 9] = [
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RSI,
    Register::RDI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
];

/// What the pass found.
#[derive(Debug, Default)]
pub struct Flow {
    /// Stack depth before each instruction reached, where it is known.
    pub depth: AddrMap<Option<i32>>,
    /// Indirect jumps that stay in the function, and why.
    pub internal: BTreeMap<u64, Internal>,
    /// Targets of indirect jumps that are known (jump tables, labels).
    pub targets: BTreeSet<u64>,
    /// Whether an internal jump has targets that are not known.
    pub unknown_targets: bool,
    /// Instructions decoded outside the named ranges (fragments without a
    /// symbol), by address.
    pub extra: BTreeMap<u64, Instruction>,
    /// Start addresses of those fragments.
    pub fragment_starts: BTreeSet<u64>,
}

/// Runs the pass over `swept` (the instructions of the named ranges, by
/// address) from `entry`.
pub fn analyze(swept: &BTreeMap<u64, Instruction>, entry: u64, image: &dyn Image) -> Flow {
    let mut a = Analysis {
        swept,
        image,
        entry,
        parts: BTreeSet::new(),
        states: AddrMap::default(),
        flow: Flow::default(),
        info: InstructionInfoFactory::new(),
    };
    a.run(vec![(entry, State::entry())]);
    // Code that only indirect jumps reach (the cases of a switch whose table
    // was not recovered, the labels of computed goto) starts after an
    // instruction that does not fall through. It runs with the stack depth
    // of those jumps, when they agree on one.
    for _ in 0..MAX_ROUNDS {
        let mut depths = a
            .flow
            .internal
            .iter()
            .filter(|(_, why)| why.targets_unknown())
            .filter_map(|(addr, _)| a.states.get(addr))
            .map(|s| (s.sp, s.rbp));
        let Some(first) = depths.next() else { break };
        let (sp, rbp) = if depths.all(|d| d == first) {
            first
        } else {
            (None, None)
        };
        let mut seeds = Vec::new();
        let mut prev_falls = true;
        for (&addr, insn) in swept.iter() {
            if !prev_falls && !a.states.contains_key(&addr) {
                seeds.push((addr, State::seeded(sp, rbp)));
            }
            prev_falls = falls_through(insn);
        }
        if seeds.is_empty() {
            break;
        }
        a.run(seeds);
    }
    for (addr, s) in &a.states {
        a.flow.depth.insert(*addr, s.sp);
    }
    a.flow
}

fn falls_through(insn: &Instruction) -> bool {
    matches!(
        insn.flow_control(),
        FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall
    ) || insn.flow_control() == FlowControl::ConditionalBranch
}

struct Analysis<'a> {
    swept: &'a BTreeMap<u64, Instruction>,
    image: &'a dyn Image,
    entry: u64,
    /// Bounds of the unnamed parts entered, where the unwind tables give
    /// them: code past a part's end (after a call that does not return)
    /// belongs to some other function.
    parts: BTreeSet<(u64, u64)>,
    states: AddrMap<State>,
    flow: Flow,
    info: InstructionInfoFactory,
}

impl Analysis<'_> {
    fn insn(&self, addr: u64) -> Option<Instruction> {
        self.swept
            .get(&addr)
            .or_else(|| self.flow.extra.get(&addr))
            .copied()
    }

    fn known(&self, addr: u64) -> bool {
        self.swept.contains_key(&addr) || self.flow.extra.contains_key(&addr)
    }

    fn run(&mut self, seeds: Vec<(u64, State)>) {
        let mut work: Vec<u64> = Vec::new();
        for (addr, s) in seeds {
            if self.merge(addr, &s) {
                work.push(addr);
            }
        }
        while let Some(addr) = work.pop() {
            let (Some(insn), Some(state)) = (self.insn(addr), self.states.get(&addr).cloned())
            else {
                continue;
            };
            let from_extra = self.flow.extra.contains_key(&addr);
            for (t, s) in self.successors(&insn, &state, from_extra) {
                if self.merge(t, &s) {
                    work.push(t);
                }
            }
        }
    }

    fn merge(&mut self, addr: u64, s: &State) -> bool {
        match self.states.get_mut(&addr) {
            Some(old) => old.meet(s),
            None => {
                self.states.insert(addr, s.clone());
                true
            }
        }
    }

    /// Decodes code at `addr` outside the named ranges, if it may belong to
    /// the function: no symbol starts there, it is code of the object, and
    /// it lies in a part entered (`enter`: it is entered here).
    fn decode_extra(&mut self, addr: u64, enter: bool) -> bool {
        if self.known(addr) {
            return true;
        }
        if self.flow.extra.len() >= MAX_EXTRA || self.image.is_function_start(addr) {
            return false;
        }
        match self.image.part_bounds(addr) {
            Some(b) if enter => {
                if self.image.is_function_start(b.0) || self.swept.contains_key(&b.0) {
                    return false;
                }
                self.parts.insert(b);
            }
            Some(b) if !self.parts.contains(&b) => return false,
            _ => {}
        }
        let Some(bytes) = self.image.code(addr) else {
            return false;
        };
        let mut dec = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
        let insn = dec.decode();
        if insn.is_invalid() {
            return false;
        }
        self.flow.extra.insert(addr, insn);
        true
    }

    fn successors(
        &mut self,
        insn: &Instruction,
        state: &State,
        from_extra: bool,
    ) -> Vec<(u64, State)> {
        let out = self.transfer(insn, state);
        let mut succ = Vec::new();
        let next = insn.next_ip();
        let fall = |this: &mut Self, succ: &mut Vec<(u64, State)>, s: &State| {
            if this.swept.contains_key(&next) || (from_extra && this.decode_extra(next, false)) {
                succ.push((next, s.clone()));
            }
        };
        match insn.flow_control() {
            FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall => {
                fall(self, &mut succ, &out);
            }
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                if insn.flow_control() == FlowControl::ConditionalBranch {
                    fall(self, &mut succ, &out);
                }
                if insn.op0_kind() == OpKind::NearBranch64 {
                    let t = insn.near_branch_target();
                    // A jump out of the named ranges with the frame still
                    // allocated cannot be a tail call (the callee's `ret`
                    // would not return to our caller): where no symbol
                    // starts, it enters a fragment of this function.
                    let into_fragment = !self.known(t)
                        && state.sp.is_some_and(|d| d != 0)
                        && self.decode_extra(t, true);
                    if into_fragment {
                        self.flow.fragment_starts.insert(t);
                    }
                    if self.known(t) {
                        succ.push((t, out));
                    }
                }
            }
            FlowControl::IndirectBranch => {
                let found = self.indirect(insn, state);
                if found.is_none() {
                    // A later, weaker state may undo what an earlier proved.
                    self.flow.internal.remove(&insn.ip());
                }
                if let Some((why, targets)) = found {
                    self.flow.internal.insert(insn.ip(), why);
                    if why.targets_unknown() {
                        self.flow.unknown_targets = true;
                    }
                    for t in targets {
                        self.flow.targets.insert(t);
                        succ.push((t, out.clone()));
                    }
                }
            }
            _ => {}
        }
        succ
    }

    /// Whether an indirect jump stays in the function: its targets, when
    /// known, and the evidence.
    fn indirect(&mut self, insn: &Instruction, state: &State) -> Option<(Internal, Vec<u64>)> {
        let val = match insn.op0_kind() {
            OpKind::Register => state.reg(insn.op0_register()),
            OpKind::Memory => table_load(insn, state),
            _ => Val::Unknown,
        };
        let table = match val {
            Val::Addr(a) if self.known(a) && a != self.entry => {
                return Some((Internal::Label, vec![a]))
            }
            Val::Load8(t) => self.read_table(t, false),
            Val::RelTarget(t) => self.read_table(t, true),
            _ => Vec::new(),
        };
        // One entry proves little: a table of handlers may hold this
        // function among others.
        if table.len() >= 2 {
            let n = table.len();
            return Some((Internal::Table { entries: n }, table));
        }
        match state.sp {
            Some(d) if d != 0 => {
                let labels = if val == Val::LoadedPointer {
                    self.labels()
                } else {
                    Vec::new()
                };
                if labels.len() >= 2 {
                    let n = labels.len();
                    return Some((Internal::Labels { entries: n }, labels));
                }
                Some((Internal::FrameAllocated { depth: d }, Vec::new()))
            }
            _ => None,
        }
    }

    /// The labels of this function that an indexed load of 8-byte pointers
    /// (`jmp *(%rdi,%rdx,8)`, or `mov (%rdi,%rdx,8),%rdx; jmp *%rdx`) can
    /// read: every one the object stores as a pointer. (Only where the frame is allocated: a tail call through a
    /// table of handlers reads pointers to other functions.)
    fn labels(&self) -> Vec<u64> {
        self.image
            .relocated_pointers()
            .iter()
            .copied()
            .filter(|&a| self.known(a) && a != self.entry)
            .collect()
    }

    /// The entries of a jump table at `base`, while they are instructions
    /// of this function (a table has no length of its own; the data after
    /// it is not code of this function, or only by rare chance).
    fn read_table(&mut self, base: u64, relative: bool) -> Vec<u64> {
        let mut out = Vec::new();
        for i in 0..MAX_TABLE as u64 {
            let t = if relative {
                self.image
                    .read_i32(base + 4 * i)
                    .map(|e| base.wrapping_add(e as i64 as u64))
            } else {
                self.image.pointer(base + 8 * i)
            };
            match t {
                // A jump to the entry is a new call (the entry probe fires
                // again), never a jump inside.
                Some(t) if self.known(t) && t != self.entry => out.push(t),
                _ => break,
            }
        }
        out
    }

    /// The state after `insn`.
    fn transfer(&mut self, insn: &Instruction, s: &State) -> State {
        let mut o = s.clone();
        let m = insn.mnemonic();
        let op_reg = |i: u32| {
            if insn.op_kind(i) == OpKind::Register {
                insn.op_register(i)
            } else {
                Register::None
            }
        };
        let dst = op_reg(0);
        let imm = || match insn.op1_kind() {
            OpKind::Immediate8to64 | OpKind::Immediate32to64 => {
                Some(insn.immediate(1) as i64 as i32)
            }
            OpKind::Immediate8 | OpKind::Immediate32 => Some(insn.immediate(1) as i32),
            _ => None,
        };
        let bounded = |v: Option<i32>| v.filter(|d| d.unsigned_abs() <= MAX_SP_OFFSET as u32);
        // Generic effect first: every register written becomes unknown.
        let written: Vec<Register> = self
            .info
            .info(insn)
            .used_registers()
            .iter()
            .filter(|u| {
                matches!(
                    u.access(),
                    OpAccess::Write
                        | OpAccess::CondWrite
                        | OpAccess::ReadWrite
                        | OpAccess::ReadCondWrite
                )
            })
            .map(|u| u.register().full_register())
            .collect();
        for r in &written {
            o.set(*r, Val::Unknown);
        }
        if written.contains(&Register::RBP) {
            o.rbp = None;
        }
        let writes_rsp = written.contains(&Register::RSP);
        match m {
            Mnemonic::Push | Mnemonic::Pushfq => o.sp = bounded(s.sp.map(|d| d + 8)),
            Mnemonic::Pop | Mnemonic::Popfq if dst != Register::RSP => {
                o.sp = bounded(s.sp.map(|d| d - 8))
            }
            Mnemonic::Sub if dst == Register::RSP => {
                o.sp = bounded(s.sp.zip(imm()).and_then(|(d, n)| d.checked_add(n)))
            }
            Mnemonic::Add if dst == Register::RSP => {
                o.sp = bounded(s.sp.zip(imm()).and_then(|(d, n)| d.checked_sub(n)))
            }
            Mnemonic::Lea if dst == Register::RSP && insn.memory_index() == Register::None => {
                let disp = insn.memory_displacement64() as i64;
                let base = match insn.memory_base() {
                    Register::RSP => s.sp,
                    Register::RBP => s.rbp,
                    _ => None,
                };
                o.sp = bounded(
                    base.zip(i32::try_from(disp).ok())
                        .and_then(|(d, n)| d.checked_sub(n)),
                );
            }
            Mnemonic::Lea if dst == Register::RBP && insn.memory_index() == Register::None => {
                let disp = insn.memory_displacement64() as i64;
                o.rbp = if insn.memory_base() == Register::RSP {
                    bounded(
                        s.sp.zip(i32::try_from(disp).ok())
                            .and_then(|(d, n)| d.checked_sub(n)),
                    )
                } else {
                    None
                };
            }
            Mnemonic::Mov if dst == Register::RBP && op_reg(1) == Register::RSP => o.rbp = s.sp,
            Mnemonic::Mov if dst == Register::RSP && op_reg(1) == Register::RBP => o.sp = s.rbp,
            Mnemonic::Leave => {
                o.sp = bounded(s.rbp.map(|d| d - 8));
                o.rbp = None;
            }
            Mnemonic::Call => {
                o.sp = s.sp;
                for r in CALL_CLOBBERED {
                    o.set(r, Val::Unknown);
                }
            }
            _ if writes_rsp => o.sp = None,
            _ => {}
        }
        // The dispatch idioms.
        match m {
            Mnemonic::Lea if is_gpr64(dst) && insn.is_ip_rel_memory_operand() => {
                o.set(dst, Val::Addr(insn.ip_rel_memory_address()));
            }
            Mnemonic::Mov if is_gpr64(dst) && is_gpr64(op_reg(1)) => o.set(dst, s.reg(op_reg(1))),
            Mnemonic::Mov if is_gpr64(dst) && insn.op1_kind() == OpKind::Memory => {
                o.set(dst, table_load(insn, s));
            }
            Mnemonic::Movsxd
                if is_gpr64(dst)
                    && insn.op1_kind() == OpKind::Memory
                    && insn.memory_index_scale() == 4
                    && insn.memory_displacement64() == 0 =>
            {
                if let Val::Addr(t) = s.reg(insn.memory_base()) {
                    o.set(dst, Val::Rel32(t));
                }
            }
            Mnemonic::Add if is_gpr64(dst) && is_gpr64(op_reg(1)) => {
                let v = match (s.reg(dst), s.reg(op_reg(1))) {
                    (Val::Rel32(t), Val::Addr(b)) | (Val::Addr(b), Val::Rel32(t)) if t == b => {
                        Val::RelTarget(t)
                    }
                    _ => Val::Unknown,
                };
                o.set(dst, v);
            }
            _ => {}
        }
        o
    }
}

fn is_gpr64(r: Register) -> bool {
    r != Register::RSP && gpr(r).is_some()
}

/// A load from a table of pointers: `(%base,%index,8)` with a known base,
/// or `table(,%index,8)` at an absolute address.
fn table_load(insn: &Instruction, s: &State) -> Val {
    if insn.memory_index() == Register::None || insn.memory_index_scale() != 8 {
        return Val::Unknown;
    }
    let disp = insn.memory_displacement64();
    match insn.memory_base() {
        Register::None => Val::Load8(disp),
        b => match s.reg(b) {
            Val::Addr(t) => Val::Load8(t.wrapping_add(disp)),
            _ => Val::LoadedPointer,
        },
    }
}
