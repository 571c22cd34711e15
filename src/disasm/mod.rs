//! Machine-code decoding: the exits (`ret`s, tail jumps) and call sites of a
//! function, and the instruction boundaries probes may be placed on. Behind
//! this small interface sits one decoder per architecture (x86-64 and
//! AArch64), picked by the object's ELF machine ([`Arch`]).
//! Pure: bytes in, addresses out.

pub mod arm64;
mod flow;
pub mod refusal;
mod x86;

pub use x86::{decode, decode_in, rip_lea_targets};

/// The instruction set of an object's code (its ELF `e_machine`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Arch {
    #[default]
    X86_64,
    Arm64,
}

impl Arch {
    /// The name users know it by, as `uname -m` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }

    /// The architecture this tachy runs on and attaches probes in.
    pub fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Arm64
        } else {
            Arch::X86_64
        }
    }
}

/// Decodes the ranges of one function of an object of architecture `arch`
/// (see [`x86::decode_in`], [`arm64::decode_in`]).
pub fn decode_arch(arch: Arch, ranges: &[Range<'_>], image: &dyn Image) -> anyhow::Result<Decoded> {
    match arch {
        Arch::X86_64 => x86::decode_in(ranges, image),
        Arch::Arm64 => arm64::decode_in(ranges, image),
    }
}

/// The instruction at the start of `code` (decoded at `addr`) as users read
/// it, with why the kernel will not probe it.
pub fn refused_text(arch: Arch, code: &[u8], addr: u64) -> String {
    match arch {
        Arch::X86_64 => x86::refused_text(code, addr),
        Arch::Arm64 => arm64::refused_text(code, addr),
    }
}

/// What the kernel does with a probe on the instruction at the start of
/// `code` (decoded at `addr`): emulate it, or single-step it.
pub fn probe_cost_at(arch: Arch, code: &[u8], addr: u64) -> ProbeCost {
    match arch {
        Arch::X86_64 => x86::probe_cost_at(code, addr),
        Arch::Arm64 => arm64::probe_cost_at(code, addr),
    }
}

/// The general-purpose registers that the instructions of `code`, decoded
/// from `addr`, may write (bit N: register N as `arch` numbers them: the x86
/// encoding number, or xN).
pub fn written_registers(arch: Arch, code: &[u8], addr: u64) -> u16 {
    match arch {
        Arch::X86_64 => x86::written_registers(code, addr),
        Arch::Arm64 => arm64::written_registers(code),
    }
}

/// A map keyed by code address, hashed with one multiplication (FxHash's)
/// rather than SipHash: the keys are addresses of the code being decoded,
/// not input anyone chooses to collide, and hashing them with SipHash took
/// about a sixth of the time of planning every function of libc.
pub type AddrMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<AddrHasher>>;

/// The hasher of [`AddrMap`].
#[derive(Clone, Copy, Default)]
pub struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

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
    /// Every code or data address that the object's relocations store as a
    /// pointer (labels taken as values, tables of handlers), sorted.
    fn relocated_pointers(&self) -> &[u64] {
        &[]
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
    /// With the frame allocated, it reads a table of 8-byte pointers whose
    /// base the analysis lost (kept on the stack): a table of the labels
    /// of the function that the object's relocations store (computed goto).
    Labels { entries: usize },
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
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

impl std::fmt::Display for JumpOperand {
    /// Registers by number (x86's encoding, arm64's `xN`), a memory
    /// operand as the address the pointer is read at: `*r0`,
    /// `*[r3+r1*8+0x18]`, `*[ip+0x2fd0]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (base, index, disp) = match *self {
            JumpOperand::Register(r) => return write!(f, "*r{r}"),
            JumpOperand::Memory { base, index, disp } => (base, index, disp),
        };
        let mut terms = Vec::new();
        match base {
            Base::None => {}
            Base::Register(r) => terms.push(format!("r{r}")),
            Base::Jump => terms.push("ip".to_string()),
        }
        if let Some((r, scale)) = index {
            terms.push(format!("r{r}*{scale}"));
        }
        let mut text = terms.join("+");
        match disp {
            0 if !text.is_empty() => {}
            d if d < 0 => text.push_str(&format!("-{:#x}", d.unsigned_abs())),
            d if text.is_empty() => text.push_str(&format!("{d:#x}")),
            d => text.push_str(&format!("+{d:#x}")),
        }
        write!(f, "*[{text}]")
    }
}

/// The base of a memory operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
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
    /// An indirect call: where it reads its callee (a register, or a
    /// pointer in memory), when BPF can form it from the saved registers.
    pub read: Option<JumpOperand>,
}

/// Does the kernel emulate this instruction under a uprobe (cheap), or
/// single-step it out of line (expensive)?
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
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
    /// The instruction set decoded.
    pub arch: Arch,
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
    /// Targets of jumps that are not a direct `jmp` or `jcc`: the known
    /// targets of its internal indirect jumps (jump tables, labels), and
    /// those of `loop` and `jrcxz`.
    pub other_targets: std::collections::BTreeSet<u64>,
    /// Bytes below SP at entry before each instruction the stack analysis
    /// reached, where known (x86-64; empty on arm64).
    pub depths: AddrMap<Option<i32>>,
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
    /// A direct jump's target and, for a `jcc`, its condition code.
    pub jump: Option<(u64, Option<u8>)>,
    /// Whether it is a `call`.
    pub is_call: bool,
    /// Its length in bytes.
    pub len: u8,
    pub is_nop: bool,
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

/// Where a `ret` can be seen coming on an instruction the kernel emulates:
/// a direct jump into the straight-line code that ends at the `ret`, or the
/// `jcc` (not taken) or emulated instruction that falls into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EarlyExit {
    pub addr: u64,
    /// Add to SP there to get SP at the `ret`.
    pub sp_adjust: i32,
    /// Only when this x86 condition holds (a `jcc` taken to the epilogue,
    /// or the negated condition of one that falls into it).
    pub cond: Option<u8>,
    /// An instruction single-stepped under the probe: one of the epilogue
    /// itself, where a way into it cannot be seen cheaply, or the one
    /// before a `ret` the kernel refuses to probe.
    pub stepped: bool,
}

/// Instructions followed back from a `ret` in search of early exits: an
/// epilogue restores a few registers and frees the frame.
const MAX_EPILOGUE: usize = 24;

/// Early exits kept per `ret`; more jumps into one epilogue keep the `ret`
/// probe.
const MAX_EARLY_EXITS: usize = 32;

impl Decoded {
    /// For each `ret` that can be seen coming, the early exits that see it:
    /// every path to the `ret` passes exactly one of them and then runs only
    /// straight-line code without calls (the epilogue). A `ret` whose
    /// epilogue is reached by a call's return, an indirect jump, or
    /// straight-line code from the entry keeps its own probe (the kernel
    /// single-steps `ret`; it emulates the jumps, at a fraction of the cost).
    pub fn early_exits(&self) -> std::collections::BTreeMap<u64, Vec<EarlyExit>> {
        use std::collections::BTreeMap;
        let mut out = BTreeMap::new();
        // A `ret` the kernel will not probe (arm64's `retaa`) is seen on
        // the instruction that falls into it, unless the cheaper ways in
        // below are found.
        for &r in &self.rets {
            if let Some(e) = self.before_unprobeable_ret(r) {
                out.insert(r, vec![e]);
            }
        }
        if self.computed_jump {
            return out;
        }
        let pos: AddrMap<usize> = self
            .insns
            .iter()
            .enumerate()
            .map(|(k, i)| (i.addr, k))
            .collect();
        let mut into: AddrMap<Vec<(u64, Option<u8>)>> = AddrMap::default();
        for i in &self.insns {
            if let Some((t, c)) = i.jump {
                into.entry(t).or_default().push((i.addr, c));
            }
        }
        let entry = self.first.as_ref().map(|f| f.addr);
        let loops = self.loop_spans();
        let in_loop = |a: u64| {
            let k = loops.partition_point(|&(lo, _)| lo <= a);
            k > 0 && a <= loops[k - 1].1
        };
        for &r in &self.rets {
            let Some(&k0) = pos.get(&r) else { continue };
            // A `ret` the kernel emulates (arm64 simulates it) is as cheap
            // as any early exit.
            if self.insns[k0].cost == ProbeCost::Emulated && self.insns[k0].probeable {
                continue;
            }
            // A `jcc` runs each time round a loop it is in, whichever way it
            // goes: one probe hit per turn would cost more than the `ret`'s
            // one. A `jmp` to the epilogue runs once.
            if let Some(mut points) = self.epilogue_entries(k0, entry, &into, &pos, &in_loop) {
                merge_complements(&mut points);
                // A way in seen only by a single-step (a call returning
                // into the epilogue) costs there what the `ret`'s own
                // probe costs, one single-step (measured alike for `xor`
                // and `ret`), and each conditional exit passed untaken on
                // the way adds an emulated hit: the `ret` serves that path
                // as cheaply, and every other, with one probe.
                let stepped = points.iter().any(|p| p.stepped);
                if stepped && self.insns[k0].probeable {
                    continue;
                }
                if !points.is_empty() && points.len() <= MAX_EARLY_EXITS {
                    out.insert(r, points);
                }
            }
        }
        out
    }

    /// For a `ret` the kernel refuses to probe, the instruction that falls
    /// into it, where nothing else leads to the `ret`: it runs once on each
    /// way out, with SP as at the `ret` less its own change.
    fn before_unprobeable_ret(&self, r: u64) -> Option<EarlyExit> {
        let k = self.insns.iter().position(|i| i.addr == r)?;
        if self.insns[k].probeable
            || self.computed_jump
            || self.branch_targets.contains(&r)
            || self.other_targets.contains(&r)
        {
            return None;
        }
        let p = &self.insns[k.checked_sub(1)?];
        let ok = p.addr + u64::from(p.len) == r && p.falls_through && p.probeable;
        let sp_adjust = p.sp_change.filter(|d| (0..=MAX_SP_OFFSET).contains(d))?;
        ok.then_some(EarlyExit {
            addr: p.addr,
            sp_adjust,
            cond: None,
            stepped: true,
        })
    }

    /// The address ranges that loops may cover, merged and sorted: each
    /// backward jump (a direct one, or an internal indirect one to any of
    /// the known targets at or before it) spans from its target to itself.
    /// Every cycle has such an edge, so an instruction outside every span
    /// runs at most once per call.
    fn loop_spans(&self) -> Vec<(u64, u64)> {
        let mut spans: Vec<(u64, u64)> = self
            .insns
            .iter()
            .filter_map(|i| {
                i.jump
                    .filter(|&(t, _)| t <= i.addr)
                    .map(|(t, _)| (t, i.addr))
            })
            .collect();
        for j in &self.internal_jumps {
            if let Some(&lo) = self.other_targets.range(..=j.addr).next() {
                spans.push((lo, j.addr));
            }
        }
        spans.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (lo, hi) in spans {
            match merged.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        merged
    }

    /// Follows the straight-line code before instruction `k` (a `ret`) back
    /// to where every way into it is an emulated instruction that runs at
    /// most once per call. Where a way in is not (a call returns there, a
    /// `jcc` inside a loop, an indirect jump lands there), the probe stands
    /// on that instruction of the straight-line code itself: it runs only
    /// on the way out. On a `nop` (padding before a jump target) the kernel
    /// emulates it; on anything else it is single-stepped like the `ret`,
    /// and [`Decoded::early_exits`] leaves the `ret` its own probe.
    fn epilogue_entries(
        &self,
        mut k: usize,
        entry: Option<u64>,
        into: &AddrMap<Vec<(u64, Option<u8>)>>,
        pos: &AddrMap<usize>,
        in_loop: &dyn Fn(u64) -> bool,
    ) -> Option<Vec<EarlyExit>> {
        let mut points = Vec::new();
        let mut off = 0i32;
        for turn in 0..=MAX_EPILOGUE {
            let x = &self.insns[k];
            if Some(x.addr) == entry {
                return None;
            }
            let cap = |mut points: Vec<EarlyExit>| {
                // Without an emulated way in, nothing is gained.
                (turn > 0 && x.probeable && !points.is_empty()).then(|| {
                    points.push(EarlyExit {
                        addr: x.addr,
                        sp_adjust: off,
                        cond: None,
                        stepped: x.cost == ProbeCost::SingleStepped,
                    });
                    points
                })
            };
            let jumps = into.get(&x.addr).map_or(&[][..], |v| &v[..]);
            let costly = |j: u64, cond: Option<u8>| {
                !pos.get(&j).is_some_and(|&jk| self.insns[jk].probeable)
                    || (cond.is_some() && in_loop(j))
            };
            if turn == MAX_EPILOGUE
                || self.other_targets.contains(&x.addr)
                || jumps.iter().any(|&(j, c)| costly(j, c))
            {
                return cap(points);
            }
            let p = match k.checked_sub(1).map(|pk| &self.insns[pk]) {
                Some(p) if p.addr + u64::from(p.len) == x.addr => Some(p),
                _ => None,
            };
            if let Some(p) = p {
                let stop = p.is_call
                    || matches!(p.jump, Some((_, Some(_))))
                        && costly(p.addr, p.jump.and_then(|j| j.1))
                    || (p.falls_through
                        && p.sp_change
                            .and_then(|d| off.checked_add(d))
                            .map_or(true, |o| !(0..=MAX_SP_OFFSET).contains(&o)));
                if stop {
                    return cap(points);
                }
            }
            for &(j, cond) in jumps {
                points.push(EarlyExit {
                    addr: j,
                    sp_adjust: off,
                    cond,
                    stepped: false,
                });
            }
            // The start of a fragment: only jumps lead here.
            let Some(p) = p else { return Some(points) };
            if let Some((_, Some(cc))) = p.jump {
                // Falling through a `jcc` is its condition not holding.
                points.push(EarlyExit {
                    addr: p.addr,
                    sp_adjust: off,
                    cond: Some(cc ^ 1),
                    stepped: false,
                });
                return Some(points);
            }
            if !p.falls_through {
                return Some(points);
            }
            off += p.sp_change.unwrap_or(0);
            // A `nop` is walked past: it may be padding after another `ret`.
            if p.cost == ProbeCost::Emulated && p.probeable && !p.is_nop {
                points.push(EarlyExit {
                    addr: p.addr,
                    sp_adjust: off,
                    cond: None,
                    stepped: false,
                });
                return Some(points);
            }
            k -= 1;
        }
        None
    }
}

/// A `jcc` that reaches the epilogue both when taken and when not is one
/// unconditional exit.
fn merge_complements(points: &mut Vec<EarlyExit>) {
    points.sort();
    points.dedup();
    let mut k = 0;
    while k + 1 < points.len() {
        let (a, b) = (points[k], points[k + 1]);
        let complements = matches!((a.cond, b.cond), (Some(x), Some(y)) if x ^ 1 == y);
        if a.addr == b.addr && a.sp_adjust == b.sp_adjust && complements {
            points[k].cond = None;
            points.remove(k + 1);
        } else {
            k += 1;
        }
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
