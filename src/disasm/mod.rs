//! Machine-code decoding: the exits (`ret`s, tail jumps) and call sites of a
//! function, and the instruction boundaries probes may be placed on. Behind
//! this small interface sits one decoder per architecture (x86-64 for now).
//! Pure: bytes in, addresses out.

mod flow;
mod x86;

pub use x86::{decode, decode_in};

/// What decoding needs of the object beyond the function's own bytes: its
/// data (jump tables), code outside the function's named ranges (fragments
/// without a symbol), and where functions start.
pub trait Image {
    /// The 8-byte pointer at `addr` as the loaded object holds it (after
    /// relative relocation), if `addr` is in the object.
    fn pointer(&self, addr: u64) -> Option<u64>;
    /// The 4-byte signed value at `addr`.
    fn read_i32(&self, addr: u64) -> Option<i32>;
    /// Code bytes from `addr` on (at least one instruction's worth unless
    /// the code ends), if `addr` is in an executable part of the object.
    fn code(&self, addr: u64) -> Option<&[u8]>;
    /// Whether a function symbol starts at `addr`.
    fn is_function_start(&self, addr: u64) -> bool;
    /// The bounds of the piece of code holding `addr` (a function, or a
    /// part of one such as a `.cold` part), from the unwind tables, which
    /// stripped objects keep: `[start, end)`.
    fn part_bounds(&self, _addr: u64) -> Option<(u64, u64)> {
        None
    }
}

/// An image that knows nothing beyond the ranges decoded.
pub struct NoImage;

impl Image for NoImage {
    fn pointer(&self, _: u64) -> Option<u64> {
        None
    }
    fn read_i32(&self, _: u64) -> Option<i32> {
        None
    }
    fn code(&self, _: u64) -> Option<&[u8]> {
        None
    }
    fn is_function_start(&self, _: u64) -> bool {
        false
    }
}

/// Why an indirect jump stays inside its function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Internal {
    /// It reads a jump table whose entries all point into the function.
    Table { entries: usize },
    /// It jumps to a label of the function taken as a value.
    Label,
    /// It jumps with `depth` bytes of the frame still on the stack: a tail
    /// call would leave them there, and the callee's `ret` would not
    /// return to our caller.
    FrameAllocated { depth: i32 },
    /// It reads an indexed table (`jmp *(%rax,%rcx,8)`) in code the stack
    /// analysis did not reach.
    IndexedMemory,
}

impl Internal {
    /// Whether the jump's targets are not known.
    pub fn targets_unknown(self) -> bool {
        matches!(
            self,
            Internal::FrameAllocated { .. } | Internal::IndexedMemory
        )
    }
}

/// Where an indirect jump reads its target, in terms the BPF side can
/// evaluate from the registers saved at the probe. Registers are numbered
/// as x86 encodes them (0 `rax`, 1 `rcx`, 2 `rdx`, 3 `rbx`, 4 `rsp`, 5 `rbp`,
/// 6 `rsi`, 7 `rdi`, 8-15 `r8`-`r15`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JumpOperand {
    /// `jmp *%reg`.
    Register(u8),
    /// `jmp *disp(%base,%index,scale)`: the target is the pointer at
    /// base + index * scale + disp.
    Memory {
        base: Base,
        /// The index register and the scale (1, 2, 4 or 8).
        index: Option<(u8, u8)>,
        disp: i64,
    },
}

/// The base of a memory operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// No base register: the displacement is an absolute address.
    None,
    Register(u8),
    /// RIP-relative: the displacement counts from the jump's own address
    /// (the decoder adds the instruction's length to the encoded one).
    Jump,
}

/// An indirect jump that the analysis could not prove internal: whether its
/// target lies inside the function is decided at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedJump {
    pub addr: u64,
    pub operand: JumpOperand,
    /// The decoded range holding the jump (the body, a named fragment, or a
    /// run of an unnamed one): `[start, end)`. A target in `(start, end)`
    /// stays inside; one at `start` (the entry, for the body) is a new call.
    pub range: (u64, u64),
    /// What was assumed of it before: `true` for an indexed table the
    /// analysis did not reach (taken to stay inside, [`Internal::IndexedMemory`]),
    /// `false` for a jump with the frame gone and no table found (taken
    /// for a tail jump: it is also in [`Decoded::tails`]).
    pub assumed_inside: bool,
}

/// An indirect jump proven to stay inside the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InternalJump {
    pub addr: u64,
    pub why: Internal,
}

/// Where a jump or call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A known address.
    Direct(u64),
    /// Through a pointer in memory at a known address (a GOT slot: `-fno-plt`).
    Slot(u64),
    /// Through a register or computed memory: unknown until run time.
    Indirect,
}

/// A jump that leaves the function for good: the callee returns to our caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailJump {
    pub addr: u64,
    pub target: Target,
    /// x86 condition code (0..=15) of a conditional tail jump.
    pub cond: Option<u8>,
}

/// A call instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub addr: u64,
    /// Address of the instruction after the call: the return address.
    pub next: u64,
    pub target: Target,
}

/// Does the kernel emulate this instruction under a uprobe (cheap), or
/// single-step it out of line (expensive)?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeCost {
    Emulated,
    SingleStepped,
}

/// The first instruction of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    pub addr: u64,
    pub len: u32,
    pub text: String,
    pub cost: ProbeCost,
}

/// An instruction of the straight-line start of a function, where an entry
/// probe may stand instead of at the first instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryCandidate {
    pub addr: u64,
    pub text: String,
    pub cost: ProbeCost,
    /// Whether the kernel will place a uprobe here at all.
    pub probeable: bool,
    /// Bytes the function has pushed on the stack before this instruction:
    /// the return-address slot is at SP + this.
    pub sp_offset: i32,
    /// Whether any branch of the function can reach it (other than falling
    /// through from the entry).
    pub branch_target: bool,
}

/// What decoding a function (and its fragments) found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub first: Option<Insn>,
    pub rets: Vec<u64>,
    pub tails: Vec<TailJump>,
    pub calls: Vec<Call>,
    /// Start addresses of every instruction, in order (probe-safe offsets).
    pub boundaries: Vec<u64>,
    /// The straight-line start of the function, first instruction first.
    pub prologue: Vec<EntryCandidate>,
    /// End of the function's body (its first range), exclusive.
    pub body_end: u64,
    /// Every instruction, in decoding order.
    pub insns: Vec<InsnInfo>,
    /// Targets of the function's direct jumps.
    pub branch_targets: std::collections::BTreeSet<u64>,
    /// Whether a computed jump (a jump table) may reach any instruction.
    pub computed_jump: bool,
    /// Indirect jumps that stay inside the function (no exit probe).
    pub internal_jumps: Vec<InternalJump>,
    /// Indirect jumps whose targets are not proven: the unknown tail jumps
    /// through a register or memory, and the indexed tables the analysis
    /// did not reach.
    pub checked_jumps: Vec<CheckedJump>,
    /// Fragments of the function that no symbol names, found by following
    /// its jumps: (start, end) of each run of code decoded there.
    pub unnamed_fragments: Vec<(u64, u64)>,
}

/// What probe placement needs to know of one instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsnInfo {
    pub addr: u64,
    pub cost: ProbeCost,
    pub probeable: bool,
    /// How it moves SP, when known (0 if it does not write it).
    pub sp_change: Option<i32>,
    /// Whether execution always continues with the next instruction.
    pub falls_through: bool,
}

impl Decoded {
    /// Where the arrival at `addr` can be observed: each instruction from
    /// `addr` on, along straight-line code that nothing else jumps into,
    /// that the kernel will probe and that carries no other exit probe (a
    /// `ret` or a tail jump), up to and including the first call or branch.
    pub fn probe_points_from(&self, addr: u64) -> Vec<ProbePoint> {
        let mut out = Vec::new();
        let Some(start) = self.insns.iter().position(|i| i.addr == addr) else {
            return out;
        };
        let mut sp_adjust = 0i32;
        for (k, i) in self.insns[start..].iter().enumerate() {
            if k > 0 && (self.computed_jump || self.branch_targets.contains(&i.addr)) {
                break;
            }
            if self.rets.contains(&i.addr) || self.tails.iter().any(|t| t.addr == i.addr) {
                break;
            }
            if i.probeable {
                out.push(ProbePoint {
                    addr: i.addr,
                    sp_adjust,
                    cost: i.cost,
                    is_call: self.calls.iter().any(|c| c.addr == i.addr),
                });
            }
            if !i.falls_through {
                break;
            }
            // A change no real prologue or epilogue makes ends the walk.
            match i.sp_change.and_then(|d| sp_adjust.checked_sub(d)) {
                Some(a) if a.abs() <= MAX_SP_OFFSET => sp_adjust = a,
                _ => break,
            }
        }
        out
    }
}

impl Decoded {
    /// Whether only an epilogue follows `addr`: straight-line code that
    /// nothing jumps into, with no call, ending at one of the function's
    /// `ret`s (a few instructions that restore registers).
    pub fn only_epilogue_from(&self, addr: u64) -> bool {
        let Some(start) = self.insns.iter().position(|i| i.addr == addr) else {
            return false;
        };
        for (k, i) in self.insns[start..].iter().enumerate().take(8) {
            if k > 0 && (self.computed_jump || self.branch_targets.contains(&i.addr)) {
                return false;
            }
            if self.rets.contains(&i.addr) {
                return true;
            }
            if !i.falls_through {
                return false;
            }
        }
        false
    }
}

/// The largest stack offset a probe placement follows (1 MiB): beyond it,
/// the code is no prologue or epilogue, and arithmetic stays far from
/// overflow.
pub const MAX_SP_OFFSET: i32 = 1 << 20;

/// A place to observe that an instruction was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbePoint {
    pub addr: u64,
    /// Add to SP there to get SP at the instruction observed.
    pub sp_adjust: i32,
    pub cost: ProbeCost,
    pub is_call: bool,
}

/// A range of code: the function or one of its fragments.
#[derive(Clone, Copy, Debug)]
pub struct Range<'a> {
    pub addr: u64,
    pub bytes: &'a [u8],
}

impl Range<'_> {
    pub fn contains(&self, a: u64) -> bool {
        a >= self.addr && a - self.addr < self.bytes.len() as u64
    }
}
