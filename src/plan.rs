//! The plan: pure data saying which probes go where, with the BPF settings.
//! Built from resolved functions and their decoded code; printed by
//! `--dry-run`/`--verbose`; turned into links by `probe`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::disasm::{self, Decoded, EntryCandidate, ProbeCost, Range, Target};
use crate::symbols::{self, ElfObject, Function, SymSource};

/// Tail-called functions whose returns are followed, per traced function.
const MAX_TAIL_CALLEES: usize = 16;

/// One probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeKind {
    /// Function entry. `id` indexes `Plan::funcs`. `tailing`: the entry
    /// instruction is itself a direct tail jump.
    Entry {
        id: u32,
        sp_adjust: i32,
        tailing: bool,
    },
    /// A `ret` of a traced function or of a function it tail-calls.
    Exit,
    /// A tail jump: cookie of TACHY_TAIL_* bits.
    Tail { cookie: u64 },
    /// A uretprobe on a function's entry (`--uretprobe` only).
    Uret,
}

/// Cookie bits of a tail probe (mirror of TACHY_TAIL_* in tachy.h).
pub const TAIL_CONDITIONAL: u64 = 0x10;
pub const TAIL_INDIRECT: u64 = 0x20;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Probe {
    /// Index into `Plan::objects`.
    pub object: usize,
    pub vaddr: u64,
    pub offset: u64,
    pub kind: ProbeKind,
}

/// How a traced function's exit is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitSummary {
    pub rets: usize,
    /// Direct tail callees whose returns end this function's frame.
    pub tail_callees: Vec<String>,
    /// Tail jumps to an unknown callee: timed up to the jump.
    pub unknown_tails: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedFunc {
    pub name: String,
    pub raw_name: String,
    /// Index into `Plan::objects`.
    pub object: usize,
    pub addr: u64,
    pub size: u64,
    pub fragments: usize,
    pub source: SymSource,
    /// Where the entry probe stands, its instruction and what a hit costs.
    pub entry_addr: u64,
    pub first_insn: String,
    pub entry_cost: ProbeCost,
    pub exits: ExitSummary,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub filter_tid: u32,
    pub min_ns: u64,
    pub max_ns: u64,
    pub outermost: bool,
    /// Time returns with uretprobes instead of probes on `ret`s.
    pub uretprobe: bool,
    /// Unit the kernel buckets durations in (ns per unit).
    pub unit_ns: u64,
}

/// Everything `probe` needs to attach.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// (display path, path handed to the kernel)
    pub objects: Vec<(PathBuf, PathBuf)>,
    pub funcs: Vec<TracedFunc>,
    pub probes: Vec<Probe>,
    /// Process filter for the links; -1 for every process.
    pub pid: i32,
    pub settings: Settings,
}

/// Decodes a function with its fragments.
pub fn decode_function(obj: &ElfObject, f: &Function) -> Result<Decoded> {
    let mut ranges = Vec::with_capacity(1 + f.fragments.len());
    let body = obj.code(f.addr, f.size).with_context(|| {
        format!(
            "code of {} is not in {}",
            f.display_name(),
            obj.display.display()
        )
    })?;
    ranges.push(Range {
        addr: f.addr,
        bytes: body,
    });
    for frag in &f.fragments {
        if let Some(bytes) = obj.code(frag.addr, frag.size) {
            ranges.push(Range {
                addr: frag.addr,
                bytes,
            });
        }
    }
    disasm::decode(&ranges).with_context(|| format!("cannot decode {}", f.display_name()))
}

impl Plan {
    fn object_index(&mut self, obj: &ElfObject) -> usize {
        let key = (obj.display.clone(), obj.open_path.clone());
        if let Some(i) = self.objects.iter().position(|o| *o == key) {
            return i;
        }
        self.objects.push(key);
        self.objects.len() - 1
    }

    fn push(&mut self, obj: &ElfObject, object: usize, vaddr: u64, kind: ProbeKind) -> Result<()> {
        let offset = obj.vaddr_to_offset(vaddr).with_context(|| {
            format!(
                "address {vaddr:#x} is not in an executable segment of {}",
                obj.display.display()
            )
        })?;
        self.probes.push(Probe {
            object,
            vaddr,
            offset,
            kind,
        });
        Ok(())
    }

    /// Adds a function: an entry probe, and exit probes on its `ret`s, its
    /// tail jumps, and the `ret`s of the functions it tail-calls.
    pub fn add_function(
        &mut self,
        obj: &ElfObject,
        f: &Function,
        source: SymSource,
    ) -> Result<u32> {
        let object = self.object_index(obj);
        if let Some(i) = self
            .funcs
            .iter()
            .position(|t| t.object == object && t.addr == f.addr)
        {
            return Ok(i as u32);
        }
        let id = self.funcs.len() as u32;
        let decoded = decode_function(obj, f)?;
        let Some(entry) = choose_entry(&decoded) else {
            bail!(
                "{} starts with `{}`, which the kernel cannot probe, and no later instruction runs exactly once per call",
                f.display_name(),
                decoded.first.as_ref().map_or("?", |i| i.text.as_str())
            );
        };
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

        let mut exits = ExitSummary {
            rets: 0,
            tail_callees: Vec::new(),
            unknown_tails: 0,
        };
        let mut seen: BTreeSet<u64> = BTreeSet::from([f.addr]);
        let mut work = vec![decoded];
        let mut own = true;
        if self.settings.uretprobe {
            // The kernel follows the return address itself, tail calls included.
            self.push(obj, object, f.addr, ProbeKind::Uret)?;
            exits.rets = work.pop().map_or(0, |d| d.rets.len());
            self.funcs.push(TracedFunc {
                name: f.display_name(),
                raw_name: f.raw.clone(),
                object,
                addr: f.addr,
                size: f.size,
                fragments: f.fragments.len(),
                source,
                entry_addr: entry.addr,
                first_insn: entry.text,
                entry_cost: entry.cost,
                exits,
            });
            return Ok(id);
        }
        while let Some(d) = work.pop() {
            for &r in &d.rets {
                self.push(obj, object, r, ProbeKind::Exit)?;
            }
            if own {
                exits.rets = d.rets.len();
            }
            for t in &d.tails {
                let cond = t.cond.map_or(0, |c| TAIL_CONDITIONAL | c as u64);
                let callee = match t.target {
                    Target::Direct(a) if seen.len() <= MAX_TAIL_CALLEES => {
                        symbols::function_at(obj, a)?.filter(|g| g.addr == a)
                    }
                    _ => None,
                };
                match callee {
                    Some(g) => {
                        if !(own && tailing && t.addr == entry.addr) {
                            self.push(obj, object, t.addr, ProbeKind::Tail { cookie: cond })?;
                        }
                        if seen.insert(g.addr) {
                            if own {
                                exits.tail_callees.push(g.display_name());
                            }
                            let gf = symbols::find(obj, &symbols::Pattern::parse(&g.raw)?)?
                                .functions
                                .into_iter()
                                .find(|x| x.addr == g.addr)
                                .unwrap_or(g);
                            work.push(decode_function(obj, &gf)?);
                        }
                    }
                    None => {
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
                    }
                }
            }
            own = false;
        }
        self.funcs.push(TracedFunc {
            name: f.display_name(),
            raw_name: f.raw.clone(),
            object,
            addr: f.addr,
            size: f.size,
            fragments: f.fragments.len(),
            source,
            entry_addr: entry.addr,
            first_insn: entry.text,
            entry_cost: entry.cost,
            exits,
        });
        Ok(id)
    }

    /// Sorts and removes duplicate probes: a `ret` shared by two traced
    /// functions (one tail-calls the other) is probed once.
    pub fn finish(&mut self) {
        self.probes
            .sort_by_key(|p| (p.object, kind_rank(p.kind), p.offset));
        self.probes
            .dedup_by_key(|p| (p.object, kind_rank(p.kind), p.offset));
    }

    /// A human-readable listing of the plan (`--dry-run`).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} function(s), {} probe(s), pid filter {}",
            self.funcs.len(),
            self.probes.len(),
            self.pid
        );
        for (i, f) in self.funcs.iter().enumerate() {
            let _ = writeln!(
                s,
                "  [{i}] {} in {} at {:#x} (symbols from {})",
                f.name,
                self.objects[f.object].0.display(),
                f.addr,
                f.source.describe()
            );
        }
        for p in &self.probes {
            let kind = match p.kind {
                ProbeKind::Entry { id, sp_adjust, .. } => format!("entry [{id}] sp{sp_adjust:+}"),
                ProbeKind::Uret => "uretprobe".to_string(),
                ProbeKind::Exit => "exit".to_string(),
                ProbeKind::Tail { cookie } if cookie & TAIL_INDIRECT != 0 => {
                    "tail (unknown callee)".to_string()
                }
                ProbeKind::Tail { .. } => "tail".to_string(),
            };
            let _ = writeln!(
                s,
                "  {:<24} {} +{:#x} ({:#x})",
                kind,
                self.objects[p.object].0.display(),
                p.offset,
                p.vaddr
            );
        }
        s
    }
}

/// The entry probe's place: the first instruction, unless a later one of
/// the straight-line start is cheaper (emulated rather than single-stepped)
/// or the first cannot be probed. A later one must run exactly once per
/// call: no branch may reach it, and the stack offset up to it is known.
pub fn choose_entry(d: &Decoded) -> Option<EntryCandidate> {
    // A later tail jump would need its entry and tail probes to run in order.
    let is_tail = |a: u64| d.tails.iter().any(|t| t.addr == a);
    let usable = |(i, c): &(usize, &EntryCandidate)| {
        c.probeable && (*i == 0 || (!c.branch_target && !is_tail(c.addr)))
    };
    let cands: Vec<(usize, &EntryCandidate)> =
        d.prologue.iter().enumerate().filter(usable).collect();
    cands
        .iter()
        .find(|(_, c)| c.cost == ProbeCost::Emulated)
        .or_else(|| cands.first())
        .map(|(_, c)| (*c).clone())
}

/// Entry probes of distinct functions never share an address, and all
/// exits at one address are the same probe, so the kind alone orders them.
fn kind_rank(k: ProbeKind) -> (u8, u64) {
    match k {
        ProbeKind::Entry { .. } => (0, 0),
        ProbeKind::Exit => (1, 0),
        ProbeKind::Tail { cookie } => (2, cookie),
        ProbeKind::Uret => (3, 0),
    }
}
