//! Inlined instances, timed: a function the compiler copied into its
//! callers has no entry or `ret` of its own, so each copy (an instance, as
//! DWARF lists it) is timed from its entry to wherever control leaves its
//! code. The enclosing function is decoded, and every control-flow edge
//! from the instance's code to code outside it is an exit.
//!
//! An instance pushes no return address: its frame is keyed `depth` bytes
//! below the enclosing frame's key (1 for an instance inlined straight into
//! a function, 2 for one inlined into that, ...). No return-address slot
//! lies there, so an instance never closes (or abandons) the frame of the
//! function around it, nor that of an instance around it, and the frames
//! of calls made inside it, further down the stack, end before it does.
//! The decoder knows how far SP is below its value at the enclosing
//! function's entry at each instruction, so each probe's key is SP plus a
//! constant, as for the early exits of a function.
//!
//! Code DWARF gives the instance is not one block: the compiler schedules
//! the caller's instructions between the instance's, and some of the
//! instance's (argument set-up) before its entry. Here, the instance runs
//! from its entry through its code and through any code from which its
//! code is reached again, and ends on the first edge to code from which
//! it is not; code of its ranges that only runs before the entry is not
//! part of it. An instance is left out, with the reason, where this does
//! not bound it: a tail or indirect jump inside it, its entry reached again
//! from inside it (a loop around its start), its code reached without
//! passing its entry, or SP unknown at its entry or an exit.

use std::collections::{BTreeSet, HashMap};

use anyhow::Result;

use super::function::{ExitMode, ExitSummary};
use super::{Item, ItemKind, Plan, ProbeKind, TracedFunc};
use crate::disasm::{Arch, Decoded, ProbeCost};
use crate::symbols::elf::inlined::Instance;
use crate::symbols::{ElfObject, Function, SymSource};

/// Instances nested deeper than this are left out: their keys must stay
/// between the enclosing frame's and the slot below it.
const MAX_DEPTH: u32 = 7;

/// Where an instance of an inlined function is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlinedOf {
    /// The function whose code holds the instance, as shown.
    pub enclosing: String,
    /// Its address.
    pub enclosing_addr: u64,
    /// The line the function was inlined at: `file.c:42`.
    pub call: String,
    /// How deep the instance sits among inlined instances (1: straight
    /// into the enclosing function).
    pub depth: u32,
    /// Where control leaves it, by address.
    pub exits: Vec<InstanceExit>,
}

/// One way out of an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct InstanceExit {
    pub addr: u64,
    /// Add to SP there to get the instance's key.
    pub sp_adjust: i32,
    /// Only when this x86 condition holds (a `jcc` whose one way leaves).
    pub cond: Option<u8>,
}

/// An instance's probes, as the decoder bounds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Where it opens: its entry, or the first instruction the kernel
    /// emulates after a straight-line start (see [`emulated_entry`]).
    pub entry: u64,
    /// Add to SP there to get the key.
    pub entry_adjust: i32,
    pub exits: Vec<InstanceExit>,
    /// The instructions that run inside it, its entry first.
    pub inside: BTreeSet<u64>,
    /// Whether a way out moved off a jump that closes a loop inside it.
    pub loop_exit_moved: bool,
}

/// The successors of each instruction, and what ends the walk there.
enum Next {
    /// Control goes on at these addresses.
    To(Vec<u64>),
    /// A `ret`: the enclosing function returns.
    Ret,
    /// A jump the decoder cannot follow, with what it is.
    Opaque(&'static str),
}

fn next_of(d: &Decoded, i: &crate::disasm::InsnInfo) -> Next {
    let a = i.addr;
    let after = a + u64::from(i.len);
    if d.rets.contains(&a) {
        return Next::Ret;
    }
    if let Some(t) = d.tails.iter().find(|t| t.addr == a) {
        return Next::Opaque(match t.target {
            crate::disasm::Target::Direct(_) => "a tail jump out of its function",
            _ => "an indirect jump",
        });
    }
    if d.internal_jumps.iter().any(|j| j.addr == a) || d.checked_jumps.iter().any(|j| j.addr == a) {
        return Next::Opaque("an indirect jump");
    }
    if i.is_call {
        return Next::To(vec![after]);
    }
    match i.jump {
        Some((t, None)) => Next::To(vec![t]),
        Some((t, Some(_))) => Next::To(vec![t, after]),
        None if i.falls_through => Next::To(vec![after]),
        None => Next::To(Vec::new()),
    }
}

/// Each instruction's index in `d.insns`, by address.
pub fn positions(d: &Decoded) -> HashMap<u64, usize> {
    d.insns
        .iter()
        .enumerate()
        .map(|(k, i)| (i.addr, k))
        .collect()
}

/// Bounds the instance of `depth` that starts at `entry` and whose code
/// DWARF gives as `ranges`, in the decoded function `d` that starts at
/// `start` (`pos`: its [`positions`]); or why it cannot be bounded.
pub fn bound(
    d: &Decoded,
    pos: &HashMap<u64, usize>,
    start: u64,
    entry: u64,
    ranges: &[(u64, u64)],
    depth: u32,
) -> std::result::Result<Bounds, String> {
    let at = |a: u64| format!("+{:#x}", a.wrapping_sub(start));
    if d.arch != Arch::X86_64 {
        return Err("inlined instances are timed on x86-64 only".into());
    }
    if !(1..=MAX_DEPTH).contains(&depth) {
        return Err(format!("inlined {depth} deep (at most {MAX_DEPTH})"));
    }
    if !pos.contains_key(&entry) {
        return Err(format!("its entry {} is not an instruction", at(entry)));
    }
    let inside_ranges = |a: u64| ranges.iter().any(|&(s, e)| s <= a && a < e);
    for &(s, _) in ranges {
        if !pos.contains_key(&s) {
            return Err(format!(
                "its code at {} is outside what the decoder follows of its function",
                at(s)
            ));
        }
    }
    let nexts: Vec<Next> = d.insns.iter().map(|i| next_of(d, i)).collect();
    let preds = preds_of(d);
    let dead = padding(d, &preds);
    // Its code, and the code from which its code is reached again (other
    // than through its entry) without passing its code.
    let mut region: BTreeSet<u64> = d
        .insns
        .iter()
        .map(|i| i.addr)
        .filter(|&a| inside_ranges(a))
        .collect();
    region.insert(entry);
    let mut work: Vec<u64> = region.iter().copied().filter(|&a| a != entry).collect();
    while let Some(a) = work.pop() {
        for &p in preds.get(&a).map_or(&[][..], |v| v) {
            if p != entry && region.insert(p) {
                work.push(p);
            }
        }
    }
    // What runs of it from the entry on.
    let mut inside: BTreeSet<u64> = BTreeSet::from([entry]);
    let mut work = vec![entry];
    while let Some(a) = work.pop() {
        let Some(&k) = pos.get(&a) else { continue };
        match &nexts[k] {
            Next::Opaque(what) => return Err(format!("{what} at {}", at(a))),
            Next::Ret => {}
            Next::To(ts) => {
                for &t in ts {
                    if t == entry {
                        return Err(format!(
                            "its entry {} is reached again from {} inside it (a loop around its start)",
                            at(entry),
                            at(a)
                        ));
                    }
                    if region.contains(&t) && inside.insert(t) {
                        work.push(t);
                    }
                }
            }
        }
    }
    for &a in inside.iter().filter(|&&a| a != entry) {
        if let Some(p) = preds
            .get(&a)
            .and_then(|v| v.iter().find(|p| !inside.contains(p) && !dead.contains(p)))
        {
            return Err(format!(
                "its code at {} is reached from {} without passing its entry {}",
                at(a),
                at(*p),
                at(entry)
            ));
        }
    }
    let key_at = |a: u64| -> std::result::Result<i32, String> {
        match d.depths.get(&a) {
            Some(Some(sp)) => Ok(sp - depth as i32),
            _ => Err(format!("the stack pointer is not known at {}", at(a))),
        }
    };
    let probeable = |a: u64| -> std::result::Result<(), String> {
        match pos.get(&a).map(|&k| d.insns[k].probeable) {
            Some(true) => Ok(()),
            _ => Err(format!("the kernel cannot probe its exit at {}", at(a))),
        }
    };
    let entry_adjust = key_at(entry)?;
    if !d.insns[pos[&entry]].probeable {
        return Err(format!("the kernel cannot probe its entry {}", at(entry)));
    }
    // Whether `a` is on a loop inside the instance.
    let succ = |a: u64| -> Vec<u64> {
        match &nexts[pos[&a]] {
            Next::To(ts) => ts.iter().copied().filter(|t| inside.contains(t)).collect(),
            _ => Vec::new(),
        }
    };
    let on_cycle = |a: u64| {
        let mut seen = BTreeSet::new();
        let mut work = succ(a);
        while let Some(x) = work.pop() {
            if x == a {
                return true;
            }
            if seen.insert(x) {
                work.extend(succ(x));
            }
        }
        false
    };
    // Exits on an edge to one instruction: (where, where to, on a loop).
    let mut edges: Vec<(u64, u64, bool)> = Vec::new();
    let mut exits: BTreeSet<InstanceExit> = BTreeSet::new();
    for &a in &inside {
        let i = &d.insns[pos[&a]];
        let out: Vec<u64> = match &nexts[pos[&a]] {
            Next::Ret => {
                probeable(a)?;
                exits.insert(InstanceExit {
                    addr: a,
                    sp_adjust: key_at(a)?,
                    cond: None,
                });
                continue;
            }
            Next::To(ts) => ts.iter().copied().filter(|t| !inside.contains(t)).collect(),
            Next::Opaque(_) => continue,
        };
        if out.is_empty() {
            continue;
        }
        if i.is_call {
            // It leaves when the call returns, where the call returns to.
            probeable(out[0])?;
            exits.insert(InstanceExit {
                addr: out[0],
                sp_adjust: key_at(out[0])?,
                cond: None,
            });
            continue;
        }
        let cond = match i.jump {
            Some((t, Some(cc))) if out.len() == 1 => Some(if out[0] == t { cc } else { cc ^ 1 }),
            _ => None,
        };
        probeable(a)?;
        exits.insert(InstanceExit {
            addr: a,
            sp_adjust: key_at(a)?,
            cond,
        });
        if let [to] = out[..] {
            edges.push((a, to, cond.is_some() && on_cycle(a)));
        }
    }
    // An exit on a jump that also closes a loop inside the instance is hit
    // on every turn, not once a call: it moves to where the jump leads.
    // Where only the instance leads there, the instance is open whenever
    // that instruction runs. Where code outside it leads there too, the
    // probe there finds no frame at the instance's key and does nothing,
    // once per pass: that instruction must not be on a loop of its own
    // (one that does not pass the instance's entry). Else the instance is
    // left out. An exit on an instruction the kernel single-steps moves
    // too when only the instance leads where it goes and the kernel
    // emulates that (a jump, a nop): the instruction it passes is timed
    // with the instance, a few nanoseconds. A probe where the edge lands
    // ends every edge to it: theirs go.
    let loops_back = |to: u64| {
        let mut seen = BTreeSet::new();
        let mut work = vec![to];
        while let Some(x) = work.pop() {
            let Some(&k) = pos.get(&x) else { continue };
            if let Next::To(ts) = &nexts[k] {
                for &t in ts {
                    if t == to {
                        return true;
                    }
                    if t != entry && seen.insert(t) {
                        work.push(t);
                    }
                }
            }
        }
        false
    };
    let mut landings: BTreeSet<u64> = BTreeSet::new();
    let mut loop_exit_moved = false;
    for &(a, to, every_turn) in &edges {
        let cheaper = d.insns[pos[&a]].cost != ProbeCost::Emulated
            && pos
                .get(&to)
                .is_some_and(|&k| d.insns[k].cost == ProbeCost::Emulated)
            && !d.calls.iter().any(|c| c.addr == to)
            && !d.tails.iter().any(|t| t.addr == to);
        if !every_turn && !cheaper {
            continue;
        }
        let only_from_inside = !d.other_targets.contains(&to)
            && preds.get(&to).is_some_and(|v| {
                v.iter()
                    .filter(|p| !dead.contains(p))
                    .all(|p| inside.contains(p))
            });
        let fits = to != start
            && !d.computed_jump
            && pos.get(&to).is_some_and(|&k| d.insns[k].probeable)
            && key_at(to).is_ok()
            && (only_from_inside || (every_turn && !loops_back(to)));
        if fits {
            loop_exit_moved |= every_turn;
            landings.insert(to);
        } else if every_turn {
            return Err(format!(
                "its way out at {} closes a loop inside it (a probe there would be hit on every turn), and where it leads, {}, cannot take the probe",
                at(a),
                at(to)
            ));
        }
    }
    for &to in &landings {
        for &(a, t, _) in &edges {
            if t == to {
                exits.retain(|x| x.addr != a);
            }
        }
        exits.insert(InstanceExit {
            addr: to,
            sp_adjust: key_at(to)?,
            cond: None,
        });
    }
    if exits.is_empty() {
        return Err("control never leaves it".into());
    }
    Ok(Bounds {
        entry,
        entry_adjust,
        exits: exits.into_iter().collect(),
        inside,
        loop_exit_moved,
    })
}

/// The padding of `d`: no-ops that nothing reaches (after a `ret` or a
/// jump), which fall through into the code after them.
fn padding(d: &Decoded, preds: &HashMap<u64, Vec<u64>>) -> BTreeSet<u64> {
    let mut dead = BTreeSet::new();
    if d.computed_jump {
        return dead;
    }
    let start = d.first.as_ref().map(|i| i.addr);
    // In address order: a run of no-ops is reached from the one before.
    for i in d.insns.iter().filter(|i| i.is_nop) {
        if Some(i.addr) != start
            && !d.other_targets.contains(&i.addr)
            && preds
                .get(&i.addr)
                .map_or(true, |v| v.iter().all(|p| dead.contains(p)))
        {
            dead.insert(i.addr);
        }
    }
    dead
}

/// Moves the entry of an instance bounded by `b` (of `depth`) forward to
/// the first instruction the kernel emulates (a push, a nop, a jump, or a
/// call where `call_ok`), when every instruction before it is
/// straight-line code of the instance that only its entry leads to: the
/// entry probe is then emulated, not single-stepped, and what it skips
/// (a few register moves) takes nanoseconds. At most `MAX_SKIP` of them.
pub fn emulated_entry(
    d: &Decoded,
    pos: &HashMap<u64, usize>,
    b: &mut Bounds,
    depth: u32,
    call_ok: bool,
) {
    const MAX_SKIP: usize = 8;
    let preds = preds_of(d);
    let dead = padding(d, &preds);
    let mut a = b.entry;
    for _ in 0..MAX_SKIP {
        let Some(i) = pos.get(&a).map(|&k| &d.insns[k]) else {
            return;
        };
        if i.cost == ProbeCost::Emulated
            || i.is_call
            || i.jump.is_some()
            || !i.falls_through
            || d.rets.contains(&a)
            || !matches!(next_of(d, i), Next::To(_))
            || b.exits.iter().any(|x| x.addr == a)
        {
            return;
        }
        let next = a + u64::from(i.len);
        let only_from_a = preds.get(&next).is_some_and(|v| {
            v.iter()
                .filter(|p| !dead.contains(p))
                .eq(std::iter::once(&a))
        });
        if !b.inside.contains(&next)
            || !only_from_a
            || next == b.entry
            || d.computed_jump
            || d.other_targets.contains(&next)
            || b.exits.iter().any(|x| x.addr == next)
        {
            return;
        }
        let Some(n) = pos.get(&next).map(|&k| &d.insns[k]) else {
            return;
        };
        let is_site = n.is_call || d.tails.iter().any(|t| t.addr == next);
        if n.cost == ProbeCost::Emulated && n.probeable && (call_ok || !is_site) {
            if let Some(Some(sp)) = d.depths.get(&next) {
                b.entry = next;
                b.entry_adjust = sp - depth as i32;
            }
            return;
        }
        a = next;
    }
}

impl Plan {
    /// Adds an inlined instance `inst` of `obj`, in `enclosing`: its entry
    /// and exit probes, as a traced item of its own. `Ok(None)` with the
    /// line that names it where it cannot be timed. `sites`: its calls are
    /// to be sites of their own (`tachy nested`), so its entry stays off
    /// them.
    pub fn add_inlined(
        &mut self,
        obj: &ElfObject,
        inst: &Instance,
        source: SymSource,
        sites: bool,
    ) -> Result<std::result::Result<u32, String>> {
        let index = obj.symbols()?;
        let Some(f) = index.function_containing(inst.entry) else {
            return Ok(Err(format!(
                "{} inlined at {} ({:#x}): no function symbol holds its code",
                inst.name, inst.call, inst.entry
            )));
        };
        let name = instance_name(inst, &f);
        let refuse = |why: String| Ok(Err(format!("{name} at {}: {why}", inst.call)));
        if f.names.lang == crate::symbols::demangle::Lang::Go {
            return refuse("instances inlined into Go code are not timed yet".into());
        }
        let d = match super::decode_function(obj, &f) {
            Ok(d) => d,
            Err(e) => return refuse(format!("{e:#}")),
        };
        let pos = positions(&d);
        let mut b = match bound(&d, &pos, f.addr, inst.entry, &inst.ranges, inst.depth) {
            Ok(b) => b,
            Err(why) => return refuse(why),
        };
        emulated_entry(&d, &pos, &mut b, inst.depth, !sites);
        let object = self.object_index(obj);
        // Probes of one address run in an order the kernel does not
        // promise: an entry must be alone at its address, and no exit may
        // stand on another's entry.
        let taken = |p: &super::Probe, entries_only: bool| {
            p.object == object && (!entries_only || matches!(p.kind, ProbeKind::Entry { .. }))
        };
        if let Some(p) = self
            .probes
            .iter()
            .find(|p| taken(p, false) && p.vaddr == b.entry)
        {
            return refuse(format!(
                "its entry {:#x} carries a probe of another traced item ({})",
                b.entry,
                self.kind_text(p.kind)
            ));
        }
        if let Some(x) = b.exits.iter().find(|x| {
            self.probes
                .iter()
                .any(|p| taken(p, true) && p.vaddr == x.addr)
        }) {
            return refuse(format!(
                "its exit {:#x} is the entry of another traced item",
                x.addr
            ));
        }
        let id = self.items.len() as u32;
        self.push(
            obj,
            object,
            b.entry,
            ProbeKind::Entry {
                id,
                sp_adjust: b.entry_adjust,
                tailing: false,
            },
        )?;
        let first_exit = self.probes.len();
        for x in &b.exits {
            self.push(
                obj,
                object,
                x.addr,
                ProbeKind::Exit {
                    sp_adjust: x.sp_adjust,
                    cond: x.cond,
                },
            )?;
        }
        let hits = self.probes[first_exit..].iter().map(|p| p.hit()).collect();
        self.exit_hits.insert(id, hits);
        let entry = &self.probes[first_exit - 1];
        let entry_cost = entry.cost;
        let entry_insn = obj
            .code(b.entry, 15)
            .or_else(|| obj.code(b.entry, 1))
            .map(|c| crate::disasm::refused_text(obj.arch, c, b.entry))
            .unwrap_or_default()
            .trim_matches('`')
            .to_string();
        self.items.push(Item {
            name,
            raw_name: inst.name.clone(),
            kind: ItemKind::Function(TracedFunc {
                object,
                addr: inst.entry,
                size: inst.ranges.iter().map(|(s, e)| e - s).sum(),
                fragments: 0,
                source,
                source_text: obj.describe_source(source),
                entry_addr: b.entry,
                entry_insn,
                entry_cost,
                exits: ExitSummary {
                    why_rets: Some("inlined: exits where control leaves its code".into()),
                    ..ExitSummary::new(ExitMode::Rets, b.exits.len())
                },
                inlined: Some(Box::new(InlinedOf {
                    enclosing: f.display_name(),
                    enclosing_addr: f.addr,
                    call: inst.call.clone(),
                    depth: inst.depth,
                    exits: b.exits,
                })),
            }),
        });
        Ok(Ok(id))
    }
}

/// The instances `f`'s name has, for `list` and plans: none unless DWARF
/// has them.
pub fn instances_of(obj: &ElfObject, pat: &crate::symbols::Pattern) -> Vec<Instance> {
    crate::symbols::elf::inlined::instances(obj.dwarf_data(), pat)
}

/// An instance as reports name it: `work [inlined caller_b+0x7e]`, after
/// the function it was inlined into (`f`) and where in it it starts.
pub fn instance_name(inst: &Instance, f: &Function) -> String {
    format!(
        "{} [inlined {}+{:#x}]",
        inst.name,
        f.display_name(),
        inst.entry - f.addr
    )
}

/// An inlined instance timed as a call site of `tachy nested`: it opens at
/// its entry and closes where control leaves it, keyed as `latency` keys
/// it; the calls and instances inside it are its own sites.
#[derive(Clone, Debug)]
pub struct InstanceSite {
    pub inst: Instance,
    /// Where it opens: its entry, or the instruction next to it where the
    /// entry is an address another probe may take (the enclosing
    /// function's entry, a call).
    pub entry: u64,
    pub entry_adjust: i32,
    /// Where it closes, other than by the enclosing function's return.
    pub exits: Vec<InstanceExit>,
    /// Control can leave it by the enclosing function's `ret`: it then
    /// ends with its parent's frame.
    pub by_return: bool,
    /// The instructions that run inside it.
    pub inside: BTreeSet<u64>,
}

impl InstanceSite {
    /// Whether instance `o` runs inside this one.
    pub fn holds(&self, o: &InstanceSite) -> bool {
        o.inst.depth > self.inst.depth
            && (o.inst.entry == self.inst.entry || self.inside.contains(&o.inst.entry))
    }
}

/// The predecessors of each instruction of `d`, as `bound` follows control.
fn preds_of(d: &Decoded) -> HashMap<u64, Vec<u64>> {
    let mut preds: HashMap<u64, Vec<u64>> = HashMap::new();
    for i in &d.insns {
        if let Next::To(ts) = next_of(d, i) {
            for t in ts {
                preds.entry(t).or_default().push(i.addr);
            }
        }
    }
    preds
}

/// The inlined instances in the decoded function `d`, which starts at
/// `start`, that can be timed as call sites, in address order (the calls
/// of the others are sites of the code around them). Only instances that
/// call out or loop are sites: straight-line code runs for nanoseconds,
/// less than its probes cost (C++ inlines dozens of such accessors into a
/// function).
pub fn instance_sites(obj: &ElfObject, d: &Decoded, start: u64) -> Vec<InstanceSite> {
    let mut out = Vec::new();
    if d.arch != Arch::X86_64 {
        return out;
    }
    let pos = positions(d);
    let mine: Vec<&Instance> = obj
        .all_inlined()
        .iter()
        .filter(|i| pos.contains_key(&i.entry))
        .collect();
    if mine.is_empty() {
        return out;
    }
    // Addresses other probes may take: the function's entry, its calls,
    // where they return (an instance opening there would open inside the
    // call's site, which ends with its parent then).
    let mut busy: BTreeSet<u64> = d.calls.iter().flat_map(|c| [c.addr, c.next]).collect();
    busy.extend(d.tails.iter().map(|t| t.addr));
    busy.insert(start);
    let preds = preds_of(d);
    for inst in mine {
        let Ok(mut b) = bound(d, &pos, start, inst.entry, &inst.ranges, inst.depth) else {
            continue;
        };
        let loops = d.insns.iter().any(|i| {
            b.inside.contains(&i.addr)
                && i.jump
                    .is_some_and(|(t, _)| t <= i.addr && b.inside.contains(&t))
        });
        let calls = d.calls.iter().any(|c| b.inside.contains(&c.addr));
        if !loops && !calls {
            continue;
        }
        // A loop that leaves by its closing jump is left where that jump
        // lands, often an instruction the kernel single-steps. One that
        // calls out (a retry around nanosleep) is left out: its calls,
        // sites of the code around it, tell where its time goes at an
        // emulated pair of probes each, where the instance would add two
        // single-steps a call (kv::Store::read's sleep_for). One that
        // calls nothing (a spin) is a site: nothing else shows its time.
        if calls && b.loop_exit_moved {
            continue;
        }
        emulated_entry(d, &pos, &mut b, inst.depth, false);
        let Some(entry) = open_at(d, &pos, &preds, &mut b, inst.depth, &busy) else {
            continue;
        };
        let by_return = b.exits.iter().any(|x| d.rets.contains(&x.addr));
        let exits: Vec<InstanceExit> = b
            .exits
            .iter()
            .copied()
            .filter(|x| !d.rets.contains(&x.addr))
            .collect();
        if exits.iter().any(|x| busy.contains(&x.addr)) {
            continue;
        }
        out.push(InstanceSite {
            inst: inst.clone(),
            entry,
            entry_adjust: b.entry_adjust,
            exits,
            by_return,
            inside: b.inside,
        });
    }
    out
}

/// Where an instance bounded by `b` opens: at its entry, unless another
/// probe may take that address (`busy`); then at the instruction after
/// it, if only the entry leads there, or the one before it, if it only
/// leads to the entry and nothing else does. `b` follows the move.
fn open_at(
    d: &Decoded,
    pos: &HashMap<u64, usize>,
    preds: &HashMap<u64, Vec<u64>>,
    b: &mut Bounds,
    depth: u32,
    busy: &BTreeSet<u64>,
) -> Option<u64> {
    let entry = b.entry;
    if !busy.contains(&entry) {
        return Some(entry);
    }
    let key = |a: u64| {
        d.depths
            .get(&a)
            .copied()
            .flatten()
            .map(|sp| sp - depth as i32)
    };
    let straight = |i: &crate::disasm::InsnInfo| !i.is_call && i.jump.is_none() && i.falls_through;
    let only_from = |a: u64, p: u64| preds.get(&a).is_some_and(|v| v.as_slice() == [p]);
    let k = pos[&entry];
    let i = &d.insns[k];
    let next = entry + u64::from(i.len);
    let is_exit = |a: u64| b.exits.iter().any(|x| x.addr == a);
    if straight(i)
        && !is_exit(entry)
        && !is_exit(next)
        && b.inside.contains(&next)
        && only_from(next, entry)
        && !busy.contains(&next)
        && pos.get(&next).is_some_and(|&n| d.insns[n].probeable)
    {
        if let Some(adj) = key(next) {
            b.inside.remove(&entry);
            b.entry = next;
            b.entry_adjust = adj;
            return Some(next);
        }
    }
    let p = d.insns.get(k.checked_sub(1)?)?;
    let reached_from_inside = preds
        .get(&p.addr)
        .is_some_and(|v| v.iter().any(|a| b.inside.contains(a)));
    if p.addr + u64::from(p.len) == entry
        && straight(p)
        && p.probeable
        && only_from(entry, p.addr)
        && !busy.contains(&p.addr)
        && !reached_from_inside
    {
        let adj = key(p.addr)?;
        b.inside.insert(p.addr);
        b.entry = p.addr;
        b.entry_adjust = adj;
        return Some(p.addr);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// loop_a of tests/fixtures/inlined_loop.c at -O2: turns()'s loop
    /// closes with `jne` (+0x21), whose fall-through leaves the instance;
    /// `nopl` padding after the `ret` (+0x2b) falls into its code again.
    const LOOP_A: &str = "4885ff7e2b31c031d20f1f8000000000488b0da92b00004883c0014801ca4839c775ed\
                          488915ce2b0000c30f1f44000031d2488915bf2b0000c3";

    fn decoded(hex: &str, at: u64) -> Decoded {
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|k| u8::from_str_radix(&hex[k..k + 2], 16).unwrap())
            .collect();
        let range = crate::disasm::Range {
            addr: at,
            bytes: &bytes,
        };
        crate::disasm::decode_arch(Arch::X86_64, &[range], &crate::disasm::NoImage).unwrap()
    }

    #[test]
    fn a_loops_closing_jump_is_probed_where_it_lands() {
        let d = decoded(LOOP_A, 0x14a0);
        let pos = positions(&d);
        let ranges = [(0x14a0, 0x14c3), (0x14d0, 0x14d2)];
        let mut b = bound(&d, &pos, 0x14a0, 0x14a0, &ranges, 1).unwrap();
        let at: Vec<(u64, Option<u8>)> = b.exits.iter().map(|x| (x.addr, x.cond)).collect();
        // Where the loop's jne falls through, and the `xor` of the path
        // that skips the loop: nothing on the jne, hit every turn.
        assert_eq!(at, [(0x14c3, None), (0x14d0, None)]);
        assert!(b.loop_exit_moved);
        // The entry goes from `test` to the `jle` after it, emulated.
        emulated_entry(&d, &pos, &mut b, 1, true);
        assert_eq!(b.entry, 0x14a3);
    }

    #[test]
    fn a_loops_landing_on_a_loop_of_its_own_leaves_the_instance_out() {
        // The instance [0, 0xa) loops (jne at 8); where it falls out, 0xa,
        // the code around it loops too (jne at 0x10), not through the
        // instance's entry: a probe there would be hit on every turn.
        //   0: xor eax,eax   2: add eax,1   5: cmp eax,8   8: jne 2
        //   a: add ecx,1     d: cmp ecx,9  10: jne a      12: ret
        let code = "31c083c00183f80875f883c10183f90975f8c3";
        let d = decoded(code, 0x1000);
        let pos = positions(&d);
        let why = bound(&d, &pos, 0x1000, 0x1000, &[(0x1000, 0x100a)], 1).unwrap_err();
        assert!(why.contains("closes a loop inside it"), "{why}");
        // Where only the instance leads, the exit moves there.
        let code = "31c083c00183f80875f883c101c3";
        let d = decoded(code, 0x1000);
        let b = bound(&d, &positions(&d), 0x1000, 0x1000, &[(0x1000, 0x100a)], 1).unwrap();
        let at: Vec<u64> = b.exits.iter().map(|x| x.addr).collect();
        assert_eq!(at, [0x100a]);
    }
}
