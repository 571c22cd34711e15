//! The plan: pure data saying which probes go where, with the BPF settings.
//! Built from resolved functions and their decoded code; printed by
//! `--dry-run`/`--verbose`; turned into links by `probe`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::rc::Rc;

use anyhow::{bail, Context, Result};

use crate::callsites::{self, Names, Naming, Site, SiteKind};
use crate::disasm::{self, Decoded, EntryCandidate, ProbeCost, ProbePoint, Range, Target};
use crate::symbols::{self, ElfObject, Function, SymSource};

/// Tail-called functions whose returns are followed, per traced function.
const MAX_TAIL_CALLEES: usize = 16;

/// Nodes of a nested tree (TACHY_MAX_NODES in tachy.h).
pub const MAX_NODES: usize = 128;

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
    /// A call site of `tachy nested`: opens a frame for node `id` if node
    /// `parent` is the innermost open frame. `exit_first`: this instruction
    /// is also the return address of another site, closed first.
    /// `ends_with_parent`: only the function's epilogue follows the call,
    /// so the site ends when its parent does (one single-step saved).
    Site {
        id: u32,
        parent: u32,
        tail: bool,
        exit_first: bool,
        ends_with_parent: bool,
    },
    /// The return of site `id`: closes its frame only, keyed by SP plus
    /// `sp_adjust` (the probe may stand a few instructions after the
    /// return address, where the kernel can probe).
    SiteEnd { id: u32, sp_adjust: i32 },
}

/// A function reached through the PLT, and the object defining it.
pub type Imported = (Rc<ElfObject>, Function);

/// How far `tachy nested` drills down, and how it names what it finds.
pub struct Drill<'a> {
    /// Names and source lines of an object's sites.
    pub naming: &'a dyn Fn(&ElfObject) -> Result<Rc<Naming>>,
    /// The function an imported name (a PLT call) resolves to in the
    /// traced process, when one is known.
    pub import: &'a dyn Fn(&str) -> Option<Imported>,
    /// Levels of call sites under a traced function.
    pub depth: u32,
    /// Whether a callee (by raw name) is expanded at any level.
    pub expand: &'a dyn Fn(&str) -> bool,
}

/// A call site in the `tachy nested` tree. Its node id is
/// `funcs.len()` + its index in `Plan::sites`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteNode {
    pub parent: u32,
    pub site: Site,
    /// Levels below the traced function (1: its own call sites).
    pub level: u32,
    /// Whether its callee's sites are in the tree too.
    pub expanded: bool,
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

/// How a traced function's return is observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitMode {
    /// Probes on every `ret` (and tail jump): safe whatever unwinds.
    Rets,
    /// A uretprobe: the function calls nothing, so no exception crosses it.
    UretprobeLeaf,
    /// A uretprobe: its object has no exception or unwinding machinery.
    UretprobeNoUnwind,
    /// A uretprobe because the user asked (`--uretprobe`).
    UretprobeForced,
}

impl ExitMode {
    pub fn describe(self) -> &'static str {
        match self {
            ExitMode::Rets => "probes on each ret (safe if an exception passes)",
            ExitMode::UretprobeLeaf => "uretprobe (a leaf: nothing can unwind through it)",
            ExitMode::UretprobeNoUnwind => {
                "uretprobe (its object has no exception or unwinding code)"
            }
            ExitMode::UretprobeForced => {
                "uretprobe (--uretprobe: an exception through it aborts the process)"
            }
        }
    }
}

/// How a traced function's exit is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitSummary {
    pub mode: ExitMode,
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
    /// Where the symbols came from, as `list` and `--verbose` say it (the
    /// debug file's path, when one was used).
    pub source_text: String,
    /// Where the entry probe stands, its instruction and what a hit costs.
    pub entry_addr: u64,
    pub first_insn: String,
    pub entry_cost: ProbeCost,
    pub exits: ExitSummary,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Count only this thread.
    pub filter_tid: Option<u32>,
    /// Count only calls that took at least this long (`--slower-than`).
    pub min_ns: Option<u64>,
    /// Count only calls that took at most this long (`--faster-than`).
    pub max_ns: Option<u64>,
    pub outermost: bool,
    /// Time returns with uretprobes instead of probes on `ret`s.
    pub uretprobe: bool,
    /// Attach for every process; count in the traced one and its forks.
    pub follow: bool,
    /// Unit the kernel buckets durations in (ns per unit).
    pub unit_ns: u64,
}

/// Everything `probe` needs to attach.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// (display path, path handed to the kernel)
    pub objects: Vec<(PathBuf, PathBuf)>,
    pub funcs: Vec<TracedFunc>,
    /// `tachy nested` only: call sites, ids after the functions'.
    pub sites: Vec<SiteNode>,
    pub probes: Vec<Probe>,
    /// The process the links and counts are limited to; `None` for every
    /// process.
    pub pid: Option<u32>,
    pub settings: Settings,
    /// Per object: whether anything can unwind through its code.
    pub unwinding: std::collections::HashMap<usize, bool>,
    /// System calls timed enter to exit, as (number, id).
    pub syscalls: Vec<(u32, u32)>,
    /// Kernel functions, as (name, id): timed with fentry/fexit, or kprobes.
    pub kprobes: Vec<(String, u32)>,
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
        let known_callee = |a: u64| {
            symbols::function_at(obj, a)
                .ok()
                .flatten()
                .is_some_and(|g| g.addr == a)
        };
        let Some(entry) = choose_entry(&decoded, &known_callee) else {
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
            mode: ExitMode::Rets,
            rets: 0,
            tail_callees: Vec::new(),
            unknown_tails: 0,
        };
        let mut seen: BTreeSet<u64> = BTreeSet::from([f.addr]);
        let mut work = vec![decoded];
        let mut own = true;
        let uret = if self.settings.uretprobe {
            Some(ExitMode::UretprobeForced)
        } else if entry.sp_offset == 0 && work[0].calls.is_empty() && work[0].tails.is_empty() {
            Some(ExitMode::UretprobeLeaf)
        } else if entry.sp_offset == 0
            && !self.unwinds(object, obj)
            && runs_only_quiet_code(obj, &work[0])
        {
            Some(ExitMode::UretprobeNoUnwind)
        } else {
            None
        };
        if let Some(mode) = uret {
            // A uretprobe is far cheaper than a probe on `ret` (the kernel
            // single-steps `ret`), and safe where no unwinder can meet its
            // trampoline. It must stand where SP is at the return address:
            // on the entry probe when that is so, sharing its trap.
            let at = if entry.sp_offset == 0 {
                entry.addr
            } else {
                f.addr
            };
            self.push(obj, object, at, ProbeKind::Uret)?;
            exits.rets = work.pop().map_or(0, |d| d.rets.len());
            exits.mode = mode;
            self.funcs.push(TracedFunc {
                name: f.display_name(),
                raw_name: f.raw.clone(),
                object,
                addr: f.addr,
                size: f.size,
                fragments: f.fragments.len(),
                source,
                source_text: obj.describe_source(source),
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
            source_text: obj.describe_source(source),
            entry_addr: entry.addr,
            first_insn: entry.text,
            entry_cost: entry.cost,
            exits,
        });
        Ok(id)
    }

    /// Number of counter slots: functions, then sites.
    pub fn ids(&self) -> u32 {
        (self.funcs.len() + self.sites.len()) as u32
    }

    /// Adds a system call, timed from its entry to its exit in the kernel.
    pub fn add_syscall(&mut self, name: &str, nr: u32) -> u32 {
        if let Some(&(_, id)) = self.syscalls.iter().find(|(n, _)| *n == nr) {
            return id;
        }
        let id = self.add_kernel_item(format!("syscall:{name}"), name, nr as u64);
        self.syscalls.push((nr, id));
        id
    }

    /// Adds a kernel function, timed by fentry/fexit or a kprobe pair.
    pub fn add_kernel_function(&mut self, name: &str) -> u32 {
        if let Some((_, id)) = self.kprobes.iter().find(|(n, _)| n == name) {
            return *id;
        }
        let id = self.add_kernel_item(format!("k:{name}"), name, 0);
        self.kprobes.push((name.to_string(), id));
        id
    }

    /// A counter slot for something the kernel times, shown as `name`.
    fn add_kernel_item(&mut self, name: String, raw: &str, addr: u64) -> u32 {
        let kernel = std::path::Path::new("kernel");
        let object = match self.objects.iter().position(|o| o.0 == kernel) {
            Some(i) => i,
            None => {
                self.objects.push((kernel.into(), PathBuf::new()));
                self.objects.len() - 1
            }
        };
        let id = self.funcs.len() as u32;
        self.funcs.push(TracedFunc {
            name,
            raw_name: raw.to_string(),
            object,
            addr,
            size: 0,
            fragments: 0,
            source: SymSource::Symtab,
            source_text: String::new(),
            entry_addr: 0,
            first_insn: String::new(),
            entry_cost: ProbeCost::Emulated,
            exits: ExitSummary {
                mode: ExitMode::Rets,
                rets: 0,
                tail_callees: Vec::new(),
                unknown_tails: 0,
            },
        });
        id
    }

    /// Adds the call sites of traced function `root` (already added) and,
    /// to `depth` levels or where `expand` says, those of their callees.
    pub fn add_sites(
        &mut self,
        obj: &Rc<ElfObject>,
        f: &Function,
        root: u32,
        drill: &Drill<'_>,
    ) -> Result<()> {
        let decoded = decode_function(obj, f)?;
        let mut path = vec![(self.object_index(obj), f.addr)];
        self.add_sites_of(obj, &decoded, root, 1, drill, &mut path)
    }

    fn add_sites_of(
        &mut self,
        obj: &Rc<ElfObject>,
        decoded: &Decoded,
        parent: u32,
        level: u32,
        drill: &Drill<'_>,
        path: &mut Vec<(usize, u64)>,
    ) -> Result<()> {
        let object = self.object_index(obj);
        let naming = (drill.naming)(obj)?;
        // Siblings get consecutive ids, in address order, before any is
        // expanded: a site whose call is its previous sibling's return
        // address closes id - 1 first.
        let sites: Vec<Site> = callsites::sites(decoded, &naming.names, naming.lines.as_ref())
            .into_iter()
            // A tail jump to unknown code ends the traced call where it
            // jumps (see add_function): nothing to time after it.
            .filter(|site| !(site.kind == SiteKind::Tail && site.callee.is_none()))
            .collect();
        if self.funcs.len() + self.sites.len() + sites.len() > MAX_NODES {
            bail!("the call tree has more than {MAX_NODES} nodes: lower --depth or name fewer functions with --expand");
        }
        let first = (self.funcs.len() + self.sites.len()) as u32;
        // The previous site ends where this one's call stands.
        let mut merge_prev = false;
        for (k, site) in sites.iter().enumerate() {
            let id = first + k as u32;
            let tail = site.kind == SiteKind::Tail;
            let exit_first = std::mem::take(&mut merge_prev);
            let mut ends_with_parent = false;
            if let Some(ret) = site.ret {
                // A call that cannot return (`_Unwind_Resume`, `abort`) is
                // often followed by a landing pad: nothing ends there.
                if !callsites::never_returns(site) {
                    let next_call = sites.get(k + 1).filter(|n| n.ret.is_some()).map(|n| n.addr);
                    match site_end(decoded, ret, next_call) {
                        SiteEnd::NextCall => merge_prev = true,
                        SiteEnd::WithParent => ends_with_parent = true,
                        SiteEnd::At(p) => self.push(
                            obj,
                            object,
                            p.addr,
                            ProbeKind::SiteEnd {
                                id,
                                sp_adjust: p.sp_adjust,
                            },
                        )?,
                        SiteEnd::Nowhere => {}
                    }
                }
            }
            self.push(
                obj,
                object,
                site.addr,
                ProbeKind::Site {
                    id,
                    parent,
                    tail,
                    exit_first,
                    ends_with_parent,
                },
            )?;
            self.sites.push(SiteNode {
                parent,
                site: site.clone(),
                level,
                expanded: false,
            });
        }
        for (k, site) in sites.iter().enumerate() {
            let id = first + k as u32;
            let wanted =
                level < drill.depth || site.callee_raw.as_deref().is_some_and(drill.expand);
            if !wanted {
                continue;
            }
            // The callee: a function of this object, or, through the PLT,
            // the one the traced process's libraries define.
            let (gobj, g): (Rc<ElfObject>, Function) =
                match (site.kind, site.callee, &site.callee_raw) {
                    (SiteKind::Call | SiteKind::Tail, Some(a), _) => {
                        let Some(g) = symbols::function_at(obj, a)?.filter(|g| g.addr == a) else {
                            continue;
                        };
                        let g = symbols::find(obj, &symbols::Pattern::parse(&g.raw)?)?
                            .functions
                            .into_iter()
                            .find(|x| x.addr == a)
                            .unwrap_or(g);
                        (obj.clone(), g)
                    }
                    (SiteKind::Plt, _, Some(raw)) => match (drill.import)(raw) {
                        Some(hit) => hit,
                        None => continue,
                    },
                    _ => continue,
                };
            let key = (self.object_index(&gobj), g.addr);
            if path.contains(&key) {
                continue;
            }
            let Ok(gd) = decode_function(&gobj, &g) else {
                continue;
            };
            self.sites[id as usize - self.funcs.len()].expanded = true;
            path.push(key);
            self.add_sites_of(&gobj, &gd, id, level + 1, drill, path)?;
            path.pop();
        }
        Ok(())
    }

    /// Whether an exception, a Rust panic or a thread cancellation may
    /// unwind through code of this object: it has an exception table, or
    /// defines or imports what throws, unwinds or cancels.
    fn unwinds(&mut self, object: usize, obj: &ElfObject) -> bool {
        if let Some(&u) = self.unwinding.get(&object) {
            return u;
        }
        let u = obj.has_unwinding().unwrap_or(true);
        self.unwinding.insert(object, u);
        u
    }

    /// Sorts and removes duplicate probes: a `ret` shared by two traced
    /// functions (one tail-calls the other) is probed once.
    pub fn finish(&mut self) {
        self.probes
            .sort_by_key(|p| (p.object, kind_rank(p.kind), p.offset));
        self.probes
            .dedup_by_key(|p| (p.object, kind_rank(p.kind), p.offset));
        // A direct tail jump of a traced function that is also a site: the
        // site probe marks the frame as left, as the tail probe would.
        let tail_sites: BTreeSet<(usize, u64)> = self
            .probes
            .iter()
            .filter(|p| matches!(p.kind, ProbeKind::Site { tail: true, .. }))
            .map(|p| (p.object, p.offset))
            .collect();
        self.probes.retain(|p| {
            !(matches!(p.kind, ProbeKind::Tail { cookie } if cookie & TAIL_INDIRECT == 0)
                && tail_sites.contains(&(p.object, p.offset)))
        });
    }

    /// A human-readable listing of the plan (`--dry-run`).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} function(s), {} probe(s), pid filter {}",
            self.funcs.len(),
            self.probes.len(),
            self.pid.map_or("none".to_string(), |p| p.to_string())
        );
        for (i, f) in self.funcs.iter().enumerate() {
            let id = i as u32;
            if let Some(&(nr, _)) = self.syscalls.iter().find(|x| x.1 == id) {
                let _ = writeln!(
                    s,
                    "  [{i}] {}: system call {nr}, timed by the sys_enter and sys_exit tracepoints",
                    f.name
                );
                continue;
            }
            if self.kprobes.iter().any(|x| x.1 == id) {
                let _ = writeln!(
                    s,
                    "  [{i}] {}: kernel function, timed by fentry/fexit, else a kprobe and kretprobe",
                    f.name
                );
                continue;
            }
            let _ = writeln!(
                s,
                "  [{i}] {} in {} at {:#x} (symbols from {})",
                f.name,
                self.objects[f.object].0.display(),
                f.addr,
                f.source_text
            );
        }
        for p in &self.probes {
            let kind = match p.kind {
                ProbeKind::Entry { id, sp_adjust, .. } => format!("entry [{id}] sp{sp_adjust:+}"),
                ProbeKind::Uret => "uretprobe".to_string(),
                ProbeKind::SiteEnd { id, sp_adjust } => {
                    format!("site end [{id}] sp{sp_adjust:+}")
                }
                ProbeKind::Site {
                    id,
                    parent,
                    tail,
                    exit_first,
                    ends_with_parent,
                } => format!(
                    "site [{id}] in [{parent}]{}{}{}",
                    if tail { " tail" } else { "" },
                    if exit_first { " +exit" } else { "" },
                    if ends_with_parent {
                        " ends with parent"
                    } else {
                        ""
                    }
                ),
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

/// Where a call site's return is observed: at the cheapest probe point of
/// the straight-line code after the call (the kernel emulates `push`,
/// `nop`, branches and calls, and single-steps the rest). That may be the
/// next site's call, which then ends this site before it opens its own, if
/// SP there is SP at the return.
fn site_end(d: &Decoded, ret: u64, next_call: Option<u64>) -> SiteEnd {
    let usable = |p: &&ProbePoint| !p.is_call || (Some(p.addr) == next_call && p.sp_adjust == 0);
    let points = d.probe_points_from(ret);
    if let Some(p) = points
        .iter()
        .filter(usable)
        .find(|p| p.cost == ProbeCost::Emulated)
    {
        return if p.is_call {
            SiteEnd::NextCall
        } else {
            SiteEnd::At(*p)
        };
    }
    if d.only_epilogue_from(ret) {
        return SiteEnd::WithParent;
    }
    match points.iter().find(usable) {
        Some(p) if p.is_call => SiteEnd::NextCall,
        Some(p) => SiteEnd::At(*p),
        None => SiteEnd::Nowhere,
    }
}

/// Where a call site ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SiteEnd {
    /// A probe of its own here.
    At(ProbePoint),
    /// The next site's call ends it before opening its own.
    NextCall,
    /// Only the function's epilogue follows: it ends when the function does.
    WithParent,
    /// Nowhere (it never returns, or nothing there can be probed).
    Nowhere,
}

/// Library functions that never run user code (no callbacks), never unwind
/// and are no thread-cancellation points: while one runs, nothing can
/// unwind through its caller.
const QUIET_IMPORTS: &[&str] = &[
    "memcpy",
    "memmove",
    "memset",
    "memcmp",
    "memchr",
    "strlen",
    "strnlen",
    "strcmp",
    "strncmp",
    "strcpy",
    "strncpy",
    "strcat",
    "strncat",
    "strchr",
    "strrchr",
    "strstr",
    "strdup",
    "strndup",
    "malloc",
    "calloc",
    "realloc",
    "free",
    "aligned_alloc",
    "posix_memalign",
    "clock_gettime",
    "gettimeofday",
    "time",
    "getpid",
    "gettid",
    "__errno_location",
    "__stack_chk_fail",
    "abs",
    "labs",
    "atoi",
    "atol",
    "strtol",
    "strtoul",
    "strtoll",
    "strtoull",
    "strtod",
    "__memcpy_chk",
    "__memset_chk",
    "__memmove_chk",
    "__strcpy_chk",
    "__strcat_chk",
];

/// Whether everything a function can run while on the stack is code of its
/// own object (which has no unwinding machinery) or a quiet library
/// function: no call through a pointer, no other import. An exception
/// thrown by a callback (a C library function calling back into C++)
/// would otherwise unwind through it.
fn runs_only_quiet_code(obj: &ElfObject, d: &Decoded) -> bool {
    const MAX_FUNCS: usize = 64;
    let Ok(names) = Names::load(obj) else {
        return false;
    };
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    let mut work: Vec<Decoded> = vec![d.clone()];
    while let Some(d) = work.pop() {
        let targets = d
            .calls
            .iter()
            .map(|c| c.target)
            .chain(d.tails.iter().map(|t| t.target));
        for t in targets {
            let addr = match t {
                Target::Indirect => return false,
                Target::Slot(slot) => match names.slot_name(slot) {
                    Some(n) if QUIET_IMPORTS.contains(&n) => continue,
                    _ => return false,
                },
                Target::Direct(a) => a,
            };
            if let Some(n) = names.plt_name(addr) {
                if QUIET_IMPORTS.contains(&n) {
                    continue;
                }
                return false;
            }
            if !seen.insert(addr) {
                continue;
            }
            if seen.len() > MAX_FUNCS {
                return false;
            }
            let Ok(Some(g)) = symbols::function_at(obj, addr) else {
                return false;
            };
            if g.addr != addr {
                return false;
            }
            match decode_function(obj, &g) {
                Ok(gd) => work.push(gd),
                Err(_) => return false,
            }
        }
    }
    true
}

/// The entry probe's place: the first instruction, unless a later one of
/// the straight-line start is cheaper (emulated rather than single-stepped)
/// or the first cannot be probed. A later one must run exactly once per
/// call: no branch may reach it, and the stack offset up to it is known.
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

/// Entry probes of distinct functions never share an address, and all
/// exits at one address are the same probe, so the kind alone orders them.
fn kind_rank(k: ProbeKind) -> (u8, u64) {
    match k {
        ProbeKind::Entry { .. } => (0, 0),
        ProbeKind::Exit => (1, 0),
        ProbeKind::Tail { cookie } => (2, cookie),
        ProbeKind::Uret => (3, 0),
        ProbeKind::Site { id, .. } => (4, id as u64),
        ProbeKind::SiteEnd { id, .. } => (5, id as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disasm::decode;

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
            let _ = site_end(&d, *b, None);
        }
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

    #[test]
    fn probe_point_skips_lock_prefixed_return_addresses() {
        // call 0x2000; lock addq $1,0x10(%rip); push %rax; ret
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00, 0xf0, 0x48, 0x83, 0x05, 0x10, 0x00, 0x00, 0x00, 0x01,
            0x50, 0xc3,
        ];
        let d = decode(&[Range {
            addr: 0x1000,
            bytes: &code,
        }])
        .unwrap();
        let at = |a| match site_end(&d, a, None) {
            SiteEnd::At(p) => Some((p.addr, p.sp_adjust)),
            _ => None,
        };
        assert_eq!(at(0x1005), Some((0x100e, 0)));
        assert_eq!(at(0x100e), Some((0x100e, 0)));
        // Only the `ret` follows: the site ends with the function.
        assert_eq!(site_end(&d, 0x100f, None), SiteEnd::WithParent);
    }
}
