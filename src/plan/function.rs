//! A traced function: where its entry probe stands, and how its return is
//! observed (probes on each `ret` and tail jump, or a uretprobe where
//! `unwind` proves nothing can unwind through it).

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};

use super::encode::jump_cookie;
use super::{
    unwind, Item, ItemKind, Plan, ProbeKind, TailReach, TracedFunc, TAIL_CONDITIONAL, TAIL_INDIRECT,
};
use crate::disasm::{Arch, Decoded, EntryCandidate, Internal, ProbeCost, Target};
use crate::symbols::{ElfObject, Function, SymSource};

/// Tail-called functions whose returns are followed, per traced function.
const MAX_TAIL_CALLEES: usize = 16;

/// How a traced function's return is observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitMode {
    /// Probes on every `ret` (and tail jump): safe whatever unwinds.
    Rets,
    /// A uretprobe: the function calls nothing, so no exception crosses it.
    UretprobeLeaf,
    /// A uretprobe: its object has no exception or unwinding machinery,
    /// and it calls only code of its own object or quiet library functions.
    UretprobeNoUnwind,
    /// A uretprobe: the function and everything it can call never throw,
    /// never call through a pointer and leave the object only for quiet
    /// library functions (`unwind::prove_quiet`).
    UretprobeQuiet,
    /// A uretprobe: no object of the process can raise or catch an unwind
    /// (`unwind::process_cannot_unwind`), whatever the function calls.
    UretprobeProcess,
    /// A uretprobe because the user asked (`--uretprobe`).
    UretprobeForced,
    /// Go code: probes on every `ret`, frames kept per goroutine; never a
    /// uretprobe.
    Go,
}

impl ExitMode {
    pub fn describe(self) -> &'static str {
        match self {
            ExitMode::Rets => "probes on each ret (safe if an exception passes)",
            ExitMode::UretprobeLeaf => "uretprobe (a leaf: nothing can unwind through it)",
            ExitMode::UretprobeNoUnwind => {
                "uretprobe (its object has no exception or unwinding code)"
            }
            ExitMode::UretprobeQuiet => "uretprobe (calls only code that cannot throw)",
            ExitMode::UretprobeProcess => "uretprobe (process cannot unwind: no C++ runtime, no Rust unwinding, no exception tables outside libc)",
            ExitMode::UretprobeForced => {
                "uretprobe (--uretprobe: an exception through it aborts the process)"
            }
            ExitMode::Go => "probes on each ret, frames kept per goroutine (Go: never a uretprobe)",
        }
    }
}

/// How a traced function's exit is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitSummary {
    pub mode: ExitMode,
    /// Why its returns are probed rather than timed by a uretprobe: what
    /// stops the proof that nothing can unwind through it (`None` with a
    /// uretprobe).
    pub why_rets: Option<String>,
    pub rets: usize,
    /// `ret`s seen coming at emulated jumps into their epilogue (early
    /// exits), and the probes that see them.
    pub early_rets: usize,
    pub early_points: usize,
    /// Instructions of epilogues probed (single-stepped) where a way into
    /// them cannot be seen cheaply.
    pub early_stepped: usize,
    /// Direct tail callees whose returns end this function's frame.
    pub tail_callees: Vec<String>,
    /// Tail jumps to an unknown callee: timed up to the jump.
    pub unknown_tails: usize,
    /// Ways out, of the function or of its tail callees, where its return
    /// value is not known: tail jumps to unknown code, and jumps checked
    /// at run time (which may leave it).
    pub value_unknown: usize,
    /// Indirect jumps proven to stay inside the function: not probed.
    pub internal_jumps: usize,
    /// Indirect jumps whose target is checked at run time (the function's
    /// and its tail callees'): each pass single-steps the jump.
    pub checked_jumps: usize,
    /// Indexed jumps taken to stay inside without proof or check: their
    /// operand does not fit a jump cookie.
    pub unchecked_jumps: usize,
    /// Fragments of the function without a symbol (`.cold` parts of a
    /// stripped object), found by following its jumps.
    pub unnamed_fragments: usize,
}

impl ExitSummary {
    /// Exits timed as `mode` at `rets` returns, with nothing else to say:
    /// no early exits, tail calls or jumps to count.
    pub fn new(mode: ExitMode, rets: usize) -> Self {
        ExitSummary {
            mode,
            why_rets: None,
            rets,
            early_rets: 0,
            early_points: 0,
            early_stepped: 0,
            tail_callees: Vec::new(),
            unknown_tails: 0,
            value_unknown: 0,
            internal_jumps: 0,
            checked_jumps: 0,
            unchecked_jumps: 0,
            unnamed_fragments: 0,
        }
    }

    /// How the return is timed and why, as `list` and `--verbose` say it.
    pub fn describe(&self) -> String {
        match (&self.why_rets, self.mode) {
            (Some(why), ExitMode::Rets) => format!("probes on each ret: {why}"),
            (Some(layout), ExitMode::Go) => format!("{}; {layout}", self.mode.describe()),
            _ => self.mode.describe().to_string(),
        }
    }
}

impl Plan {
    /// Adds a function: an entry probe, and exit probes on its `ret`s, its
    /// tail jumps, and the `ret`s of the functions it tail-calls (or one
    /// uretprobe where that is safe).
    pub fn add_function(
        &mut self,
        obj: &ElfObject,
        f: &Function,
        source: SymSource,
    ) -> Result<u32> {
        let object = self.object_index(obj);
        if let Some(&id) = self.function_ids.get(&(object, f.addr)) {
            return Ok(id);
        }
        if f.names.lang == crate::symbols::demangle::Lang::Go {
            return self.add_go_function(obj, object, f, source);
        }
        let id = self.items.len() as u32;
        let decoded = super::decode_function(obj, f)?;
        let index = obj.symbols()?;
        let known_callee = |a: u64| index.name_starting_at(a).is_some();
        let entry = entry_of(obj, f, &decoded, &known_callee)?;
        let entry_tail = decoded.tails.iter().find(|t| t.addr == entry.addr).copied();
        let tailing =
            entry_tail.is_some_and(|t| t.cond.is_none() && matches!(t.target, Target::Direct(_)));
        self.push(
            obj,
            object,
            entry.addr,
            ProbeKind::Entry {
                id,
                sp_adjust: entry.sp_offset,
                tailing,
            },
        )?;
        let first_exit = self.probes.len();
        // Unasked, a uretprobe shares the entry probe's trap, so the entry
        // must stand where SP holds the return address: a trap of its own
        // would cost as much as the single-stepped `ret` it replaces.
        let uret = if self.settings.uretprobe {
            Ok(ExitMode::UretprobeForced)
        } else if decoded.arch == Arch::Arm64 {
            // arch/arm64/kernel/probes/simulate-insn.c: `ret` is simulated.
            Err("on arm64 the kernel simulates ret: as cheap as a uretprobe".to_string())
        } else if entry.sp_offset != 0 {
            Err(format!(
                "the entry probe stands after the stack pointer moved ({} bytes)",
                entry.sp_offset
            ))
        } else if decoded.calls.is_empty() && decoded.tails.is_empty() {
            Ok(ExitMode::UretprobeLeaf)
        } else {
            match unwind::prove_quiet(obj, f, &decoded) {
                Ok(()) if obj.unwinds(|o| unwind::object_unwinds(o).unwrap_or(true)) => {
                    Ok(ExitMode::UretprobeQuiet)
                }
                Ok(()) => Ok(ExitMode::UretprobeNoUnwind),
                Err(_) if self.process_cannot_unwind => Ok(ExitMode::UretprobeProcess),
                Err(obstacle) => Err(obstacle.to_string()),
            }
        };
        let exits = match uret {
            Ok(mode) => {
                // A uretprobe is far cheaper than a probe on `ret` (the
                // kernel single-steps `ret`), and safe where no unwinder can
                // meet its trampoline. It must stand where SP is at the
                // return address: on the entry probe when that is so,
                // sharing its trap.
                // On arm64 the return address is in x30 until the
                // prologue saves (or signs) it: only the first instruction
                // is sure to see it.
                let lr_intact = decoded.arch != Arch::Arm64 || entry.addr == f.addr;
                let at = if entry.sp_offset == 0 && lr_intact {
                    entry.addr
                } else {
                    f.addr
                };
                self.push(obj, object, at, ProbeKind::Uret)?;
                // No probe stands on its tail jumps: the entry of a traced
                // function it tail-calls tells its handover from a frame
                // left behind.
                if !decoded.tails.is_empty() {
                    let reach = tail_reach(obj, &decoded, f.addr);
                    self.tail_reach.insert(id, reach);
                }
                ExitSummary {
                    internal_jumps: decoded.internal_jumps.len(),
                    unnamed_fragments: decoded.unnamed_fragments.len(),
                    ..ExitSummary::new(mode, decoded.rets.len())
                }
            }
            Err(why) => {
                let own_entry_tail = tailing.then_some(entry.addr);
                let mut decoded = decoded;
                checks_start_at_entry(&mut decoded, f.addr, entry.addr);
                ExitSummary {
                    why_rets: Some(why),
                    ..self.add_exits(obj, object, f, decoded, own_entry_tail)?
                }
            }
        };
        let hits = self.probes[first_exit..]
            .iter()
            .filter(|p| matches!(p.kind, ProbeKind::Exit { .. } | ProbeKind::Uret))
            .map(|p| p.hit())
            .collect();
        self.exit_hits.insert(id, hits);
        self.push_function_item(obj, object, f, source, entry, exits);
        Ok(id)
    }

    /// Records `f`, probed at `entry` and left as `exits` says, as the next
    /// item.
    pub(super) fn push_function_item(
        &mut self,
        obj: &ElfObject,
        object: usize,
        f: &Function,
        source: SymSource,
        entry: EntryCandidate,
        exits: ExitSummary,
    ) {
        self.function_ids
            .insert((object, f.addr), self.items.len() as u32);
        self.items.push(Item {
            name: f.display_name(),
            raw_name: f.raw.clone(),
            kind: ItemKind::Function(TracedFunc {
                object,
                addr: f.addr,
                size: f.size,
                fragments: f.fragments.len(),
                source,
                source_text: obj.describe_source(source),
                entry_addr: entry.addr,
                entry_insn: entry.text,
                entry_cost: entry.cost,
                exits,
                inlined: None,
            }),
        });
    }

    /// Moves the entry probe of function `id` (`f` of `obj`) back to its
    /// first instruction, where every argument is still where the caller
    /// put it: `--filter` reads a register that an instruction before the
    /// cheaper place overwrites. The first instruction may be
    /// single-stepped (~11 us a call instead of ~0.6 us).
    pub fn entry_at_start(&mut self, obj: &ElfObject, f: &Function, id: u32) -> Result<()> {
        let d = super::decode_function(obj, f)?;
        let Some(first) = d
            .prologue
            .first()
            .filter(|c| c.probeable && c.addr == f.addr)
        else {
            bail!(
                "{}: the kernel cannot probe its first instruction, and a later one comes after an argument register is overwritten",
                f.display_name()
            );
        };
        let Some(ItemKind::Function(t)) = self.items.get_mut(id as usize).map(|i| &mut i.kind)
        else {
            return Ok(());
        };
        if t.entry_addr == first.addr {
            return Ok(());
        }
        let (old, object) = (t.entry_addr, t.object);
        t.entry_addr = first.addr;
        t.entry_insn = first.text.clone();
        t.entry_cost = first.cost;
        let offset = obj.vaddr_to_offset(first.addr).with_context(|| {
            format!("address {:#x} is not in an executable segment", first.addr)
        })?;
        for p in &mut self.probes {
            if let ProbeKind::Entry {
                id: pid,
                sp_adjust,
                tailing,
            } = &mut p.kind
            {
                if *pid == id {
                    if *tailing {
                        bail!(
                            "{}: its entry is a tail jump, and an argument register is overwritten before it",
                            f.display_name()
                        );
                    }
                    p.vaddr = first.addr;
                    p.offset = offset;
                    p.cost = first.cost;
                    *sp_adjust = first.sp_offset;
                }
            }
        }
        // A uretprobe shares the entry probe's trap (see add_function).
        for p in &mut self.probes {
            if p.kind == ProbeKind::Uret && p.object == object && p.vaddr == old {
                p.vaddr = first.addr;
                p.offset = offset;
            }
        }
        Ok(())
    }

    /// Probes on the `ret`s and tail jumps of a function, and on the `ret`s
    /// of the functions it tail-calls, transitively (bounded). A direct
    /// tail jump that is the entry instruction (`entry_tail`) needs no
    /// probe of its own: the entry probe opens the frame as already left.
    fn add_exits(
        &mut self,
        obj: &ElfObject,
        object: usize,
        f: &Function,
        decoded: Decoded,
        entry_tail: Option<u64>,
    ) -> Result<ExitSummary> {
        // The item is added once its exits are planned.
        let id = self.items.len() as u32;
        let mut exits = ExitSummary {
            internal_jumps: decoded
                .internal_jumps
                .iter()
                .filter(|j| j.why != Internal::IndexedMemory)
                .count(),
            // Less those checked, below.
            unchecked_jumps: decoded
                .internal_jumps
                .iter()
                .filter(|j| j.why == Internal::IndexedMemory)
                .count(),
            unnamed_fragments: decoded.unnamed_fragments.len(),
            ..ExitSummary::new(ExitMode::Rets, decoded.rets.len())
        };
        let mut seen: BTreeSet<u64> = BTreeSet::from([f.addr]);
        let mut work = vec![decoded];
        let mut own = true;
        while let Some(d) = work.pop() {
            let early = d.early_exits();
            for &r in &d.rets {
                let points = early.get(&r).filter(|points| {
                    !self.settings.read_ret || points.iter().all(|p| value_kept(obj, &d, p, r))
                });
                let Some(points) = points else {
                    self.push(obj, object, r, super::RET_EXIT)?;
                    continue;
                };
                let mut probes = Vec::with_capacity(points.len());
                for p in points {
                    let kind = ProbeKind::Exit {
                        sp_adjust: p.sp_adjust,
                        cond: p.cond,
                    };
                    probes.push(self.probe(obj, object, p.addr, kind)?);
                }
                self.probes.extend(probes.iter().cloned());
                if own {
                    exits.early_rets += 1;
                    exits.early_points += points.iter().filter(|p| !p.stepped).count();
                    exits.early_stepped += points.iter().filter(|p| p.stepped).count();
                }
                let ret = self.probe(obj, object, r, super::RET_EXIT)?;
                self.early.push(super::EarlyGroup {
                    object,
                    ret: r,
                    ret_offset: ret.offset,
                    ret_cost: ret.cost,
                    item: own.then_some(id),
                    probes,
                });
            }
            for t in &d.tails {
                let cond = t.cond.map_or(0, |c| TAIL_CONDITIONAL | c as u64);
                let callee = match t.target {
                    Target::Direct(a) if seen.len() <= MAX_TAIL_CALLEES => {
                        match obj.symbols()?.function_starting_at(a) {
                            Some(g) => Some(g),
                            None => crate::symbols::code::unnamed_function_at(obj, a)?,
                        }
                    }
                    _ => None,
                };
                match callee {
                    Some(g) => {
                        if !(own && entry_tail == Some(t.addr)) {
                            self.push(obj, object, t.addr, ProbeKind::Tail { cookie: cond })?;
                        }
                        if seen.insert(g.addr) {
                            if own {
                                exits.tail_callees.push(g.display_name());
                            }
                            work.push(super::decode_function(obj, &g)?);
                        }
                    }
                    None => {
                        if self.check_jump(obj, object, &d, t.addr, &mut exits)? {
                            continue;
                        }
                        self.push(
                            obj,
                            object,
                            t.addr,
                            ProbeKind::Tail {
                                cookie: cond | TAIL_INDIRECT,
                            },
                        )?;
                        if own {
                            exits.unknown_tails += 1;
                        }
                        exits.value_unknown += 1;
                    }
                }
            }
            for j in d.checked_jumps.iter().filter(|j| j.assumed_inside) {
                if self.check_jump(obj, object, &d, j.addr, &mut exits)? && own {
                    exits.unchecked_jumps -= 1;
                }
            }
            own = false;
        }
        Ok(exits)
    }
}

/// Where the tail jumps of a function (`addr`, decoded as `decoded`) can
/// lead, following those of its direct tail callees (at most
/// MAX_TAIL_CALLEES); a callee that cannot be read is an unknown one.
fn tail_reach(obj: &ElfObject, decoded: &Decoded, addr: u64) -> TailReach {
    let mut reach = TailReach::default();
    let mut seen: BTreeSet<u64> = BTreeSet::from([addr]);
    let mut work: Vec<Decoded> = vec![decoded.clone()];
    while let Some(d) = work.pop() {
        for t in &d.tails {
            let Target::Direct(a) = t.target else {
                reach.unknown = true;
                continue;
            };
            reach.addrs.insert(a);
            if seen.len() > MAX_TAIL_CALLEES || !seen.insert(a) {
                continue;
            }
            let callee = obj
                .symbols()
                .ok()
                .and_then(|s| s.function_starting_at(a))
                .or_else(|| {
                    crate::symbols::code::unnamed_function_at(obj, a)
                        .ok()
                        .flatten()
                });
            match callee.and_then(|g| super::decode_function(obj, &g).ok()) {
                Some(d) => work.push(d),
                None => reach.unknown = true,
            }
        }
    }
    reach
}

impl Plan {
    /// Puts a run-time check on the indirect jump at `addr` when the
    /// decoder left its target unproven and its operand fits a cookie;
    /// whether it did.
    fn check_jump(
        &mut self,
        obj: &ElfObject,
        object: usize,
        d: &Decoded,
        addr: u64,
        exits: &mut ExitSummary,
    ) -> Result<bool> {
        let cookie = d
            .checked_jumps
            .iter()
            .find(|j| j.addr == addr)
            .and_then(jump_cookie);
        let Some(cookie) = cookie else {
            return Ok(false);
        };
        self.push(obj, object, addr, ProbeKind::Jump { cookie })?;
        exits.checked_jumps += 1;
        exits.value_unknown += 1;
        Ok(true)
    }
}

/// Whether the return register at early exit `p` is still the value the
/// `ret` at `r` returns: nothing on the straight-line way from it to the
/// `ret` writes the register. The way starts at the jump's target for a
/// jump taken into the epilogue, after a `jcc` that falls into it, at the
/// instruction itself otherwise (both of a `jcc` that does either).
fn value_kept(obj: &ElfObject, d: &Decoded, p: &crate::disasm::EarlyExit, r: u64) -> bool {
    let insn = d.insns.iter().find(|i| i.addr == p.addr);
    let next = insn.map_or(p.addr, |i| p.addr + u64::from(i.len));
    let from = match insn.and_then(|i| i.jump) {
        Some((t, None)) => t,
        Some((t, Some(c))) => match p.cond {
            Some(pc) if pc == c => t,
            Some(_) => next,
            None => t.min(next),
        },
        None => p.addr,
    };
    if from > r || r - from > 4096 {
        return false;
    }
    // Bit 0: rax on x86-64, x0 on arm64, where a value is returned.
    obj.code(from, r - from)
        .is_some_and(|c| crate::disasm::written_registers(obj.arch, c, from) & 1 == 0)
}

/// A jump checked at run time stays inside only past the entry probe: a
/// target at or before it starts a new call (the entry probe fires, or the
/// code runs on into it). The checks made in the body of the function at
/// `start` count from `entry` instead.
fn checks_start_at_entry(d: &mut Decoded, start: u64, entry: u64) {
    for j in d.checked_jumps.iter_mut() {
        if j.range.0 == start {
            j.range.0 = entry;
        }
    }
}

/// A function the kernel will let no entry probe stand in: its first
/// instruction is refused, and no later one runs exactly once per call.
/// Among many functions, it is left out with this line; alone, it is the
/// error.
#[derive(Debug)]
pub struct Unprobeable(pub String);

impl std::fmt::Display for Unprobeable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unprobeable {}

/// The entry probe's place: the first instruction, unless a later one of
/// the straight-line start is cheaper (emulated rather than single-stepped)
/// or the first cannot be probed. A later one must run exactly once per
/// call: no branch may reach it, and the stack offset up to it is known.
/// The entry of `f` (see [`choose_entry`]), or why it has none (an
/// [`Unprobeable`], naming the first instruction of `obj`'s code).
pub fn entry_of(
    obj: &ElfObject,
    f: &Function,
    d: &Decoded,
    known_callee: &dyn Fn(u64) -> bool,
) -> Result<EntryCandidate> {
    match choose_entry(d, known_callee) {
        Some(entry) => Ok(entry),
        None => {
            let first = obj
                .code(f.addr, f.size.min(15))
                .map(|b| crate::disasm::refused_text(obj.arch, b, f.addr))
                .unwrap_or_else(|| "?".to_string());
            Err(Unprobeable(format!(
                "{} (at {:#x} in {}): the kernel cannot probe its first instruction, {first} at offset 0, and no later instruction runs exactly once per call",
                f.display_name(),
                f.addr,
                obj.display.display()
            ))
            .into())
        }
    }
}

pub fn choose_entry(d: &Decoded, known_callee: &dyn Fn(u64) -> bool) -> Option<EntryCandidate> {
    // A direct tail jump can be the entry: the entry probe then opens the
    // frame as already left (see add_function). Any other would need its
    // entry and tail probes to run in an order the kernel does not promise.
    let bad_tail = |a: u64| {
        d.tails.iter().any(|t| {
            t.addr == a
                && (t.cond.is_some() || !matches!(t.target, Target::Direct(c) if known_callee(c)))
        })
    };
    // Past the first instruction, a candidate runs once per call only if
    // nothing jumps to it or to any instruction before it.
    let reached_once = d
        .prologue
        .iter()
        .skip(1)
        .take_while(|c| !c.branch_target)
        .count()
        + 1;
    let cands: Vec<&EntryCandidate> = d
        .prologue
        .iter()
        .take(reached_once)
        .enumerate()
        .filter(|(i, c)| c.probeable && (*i == 0 || !bad_tail(c.addr)))
        .map(|(_, c)| c)
        .collect();
    cands
        .iter()
        .find(|c| c.cost == ProbeCost::Emulated)
        .or_else(|| cands.first())
        .map(|c| (*c).clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disasm::{decode, Range};

    fn entry_of(code: &[u8], known: bool) -> EntryCandidate {
        let d = decode(&[Range {
            addr: 0x1000,
            bytes: code,
        }])
        .unwrap();
        choose_entry(&d, &|_| known).unwrap()
    }

    #[test]
    fn entry_moves_past_endbr64_onto_push() {
        // endbr64; push %rbp; mov %rsp,%rbp; pop %rbp; ret
        let e = entry_of(
            &[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3],
            true,
        );
        assert_eq!(
            (e.addr, e.sp_offset, e.cost),
            (0x1004, 0, ProbeCost::Emulated)
        );
    }

    #[test]
    fn entry_after_sub_rsp_keeps_the_stack_offset() {
        // sub $0x18,%rsp; call 0x2000; add $0x18,%rsp; ret
        let e = entry_of(
            &[
                0x48, 0x83, 0xec, 0x18, 0xe8, 0xf7, 0x0f, 0x00, 0x00, 0x48, 0x83, 0xc4, 0x18, 0xc3,
            ],
            true,
        );
        assert_eq!((e.addr, e.sp_offset), (0x1004, 0x18));
        // push %rbx; push %rbp: the second push stands 8 bytes down.
        let e = entry_of(&[0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0x55, 0xc3], true);
        assert_eq!((e.addr, e.sp_offset), (0x1004, 0));
    }

    #[test]
    fn absurd_stack_adjustments_stop_the_walk() {
        // Found by fuzzing: sub $-0x80000000,%rsp; push %rbp, and a run of
        // huge subs, overflowed the stack offset.
        let e = entry_of(
            &[0x48, 0x81, 0xec, 0x00, 0x00, 0x00, 0x80, 0x55, 0xc3],
            true,
        );
        assert_eq!(e.addr, 0x1000);
        let mut code = Vec::new();
        for _ in 0..4 {
            code.extend([0x48, 0x81, 0xec, 0xff, 0xff, 0xff, 0x7f]); // sub $0x7fffffff,%rsp
        }
        code.extend([0x55, 0xc3]);
        let d = decode(&[Range {
            addr: 0x1000,
            bytes: &code,
        }])
        .unwrap();
        let _ = choose_entry(&d, &|_| true);
        for b in &d.boundaries {
            let _ = super::super::sites::site_end(&d, *b, None, &|_| false);
        }
    }

    /// Planning many functions reads the object's symbol tables once: a
    /// lookup per function (its callees, its tail calls) is a search in the
    /// object's index, never a rescan of the tables.
    #[test]
    fn planning_reads_the_symbol_tables_once() {
        let exe = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&exe, &exe).unwrap();
        let found =
            crate::symbols::find(&obj, &crate::symbols::Pattern::parse("*").unwrap()).unwrap();
        assert!(found.functions.len() > 1000, "{}", found.functions.len());
        let mut plan = Plan::default();
        let mut planned = 0;
        for f in found.functions.iter().take(2000) {
            if plan.add_function(&obj, f, found.source).is_ok() {
                planned += 1;
            }
        }
        assert!(planned > 1000, "{planned}");
        assert_eq!(obj.symbol_table_reads(), 1);
    }

    #[test]
    fn checked_jumps_keep_the_entry_cheap_and_count_from_it() {
        // endbr64; push %rbx; pop %rbx; jmp *%rax: the jump may come back
        // anywhere, but a target at or before the entry probe is a new call.
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0x5b, 0xff, 0xe0];
        let mut d = decode(&[Range {
            addr: 0x1000,
            bytes: &code,
        }])
        .unwrap();
        assert!(d.computed_jump);
        let e = choose_entry(&d, &|_| true).unwrap();
        assert_eq!((e.addr, e.cost), (0x1004, ProbeCost::Emulated));
        assert_eq!(d.checked_jumps[0].range, (0x1000, 0x1008));
        checks_start_at_entry(&mut d, 0x1000, e.addr);
        let cookie = jump_cookie(&d.checked_jumps[0]).unwrap();
        // The jump is 2 bytes past the entry probe, 2 before the end.
        assert_eq!(cookie >> 32, 2 | 2 << 16);
        // A walk for a later place to probe stops at once: the jump may
        // land on any instruction past the entry.
        assert_eq!(d.probe_points_from(0x1005).len(), 1);
    }

    #[test]
    fn entry_never_moves_onto_a_branch_target() {
        // lea 1(%rdi),%eax; nop; jne 0x1003 (back onto the nop); ret
        let e = entry_of(&[0x8d, 0x47, 0x01, 0x90, 0x75, 0xfd, 0xc3], true);
        assert_eq!(e.addr, 0x1000);
    }

    #[test]
    fn unprobeable_first_instruction_moves_the_entry() {
        // lock addq $1,0x10(%rip); add $1,%edi; jmp 0x2000 (a tail call)
        let code = [
            0xf0, 0x48, 0x83, 0x05, 0x10, 0x00, 0x00, 0x00, 0x01, 0x83, 0xc7, 0x01, 0xe9, 0xef,
            0x0f, 0x00, 0x00,
        ];
        assert_eq!(entry_of(&code, true).addr, 0x100c);
        // Tail jump to unknown code: the entry stays off it.
        assert_eq!(entry_of(&code, false).addr, 0x1009);
    }
}
