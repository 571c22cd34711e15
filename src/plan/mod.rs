//! The plan: pure data saying which probes go where, with the BPF settings.
//! Built from resolved functions and their decoded code (`function`,
//! `sites`, with `unwind` deciding where a uretprobe is safe); printed by
//! `--dry-run`/`--verbose` (`describe`); encoded for the BPF side
//! (`encode`) and turned into links by `probe`.
//! Nothing here attaches probes or loads BPF; `args` reads the kernel's
//! tracefs for the arguments of system calls.

mod abi;
pub mod args;
mod build;
pub mod by;
mod describe;
pub mod encode;
pub mod filter;
mod function;
mod golang;
mod grow;
pub mod inlined;
mod nodes;
mod sites;
pub mod stack;
pub mod unwind;

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};

use crate::disasm::{self, Decoded, JumpOperand, ProbeCost, Range};
use crate::symbols::golang::GLayout;
use crate::symbols::{ElfObject, Function, SymSource};
pub use crate::target::ObjectRef;

pub use build::{build, PlanRequest, TreeRequest};
pub use encode::{MAX_NODES, TAIL_CONDITIONAL, TAIL_INDIRECT};
pub use function::{choose_entry, ExitMode, ExitSummary, Unprobeable};
pub use golang::NOT_URETPROBE;
pub use nodes::Node;
pub use sites::{Drill, Expand, Imported, SiteNode, Via};

/// What one pass through an indirect jump checked at run time costs, in
/// microseconds: the kernel single-steps an indirect `jmp` under a probe.
/// Measured with the `ijump` test fixture (50 passes per call, with and
/// without the check): 4.3-4.7 us per pass on a 2-core x86-64 VM with
/// kernel 6.18, 6.8 us when the machine was busiest.
pub const CHECKED_JUMP_US: u32 = 5;

/// One probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeKind {
    /// Function entry. `id` indexes `Plan::items`. `tailing`: the entry
    /// instruction is itself a direct tail jump.
    Entry {
        id: u32,
        sp_adjust: i32,
        tailing: bool,
    },
    /// A `ret` of a traced function or of a function it tail-calls, or an
    /// instruction that sees one coming (an early exit: a jump into its
    /// epilogue), where SP plus `sp_adjust` is SP at the `ret`, taken only
    /// when the x86 condition `cond` holds.
    Exit { sp_adjust: i32, cond: Option<u8> },
    /// A tail jump: cookie of TACHY_TAIL_* bits.
    Tail { cookie: u64 },
    /// An indirect jump whose target is checked at run time: inside the
    /// function it goes on, outside it is a tail jump to unknown code.
    /// Cookie: `encode::jump_cookie`.
    Jump { cookie: u64 },
    /// A uretprobe on a function's entry.
    Uret,
    /// A call site of `tachy nested`, one probe per address (`slot`): it
    /// opens a frame for the node that `Plan::sites` gives this slot under
    /// the innermost open frame, if any (a function expanded under two
    /// parents has a node under each). `exit_first`: this instruction is
    /// also the return address of the previous slot's site, closed first.
    /// `ends_with_parent`: only the function's epilogue follows the call,
    /// so the site ends when its parent does (one single-step saved).
    /// `go`: the site is in Go code, timed in the goroutine's frames.
    /// `inlined`: the site is an inlined instance, whose frame is keyed
    /// by SP plus `sp_adjust` and ends with its parent's if still open.
    Site {
        slot: u32,
        tail: bool,
        exit_first: bool,
        ends_with_parent: bool,
        go: bool,
        sp_adjust: i32,
        inlined: bool,
        /// An indirect call: where it reads its callee, counted per
        /// callee address (`callees` map).
        reads: Option<JumpOperand>,
    },
    /// The return of the site of `slot`: closes its frame only, keyed by SP
    /// plus `sp_adjust` (the probe may stand a few instructions after the
    /// return address, where the kernel can probe), taken only when the x86
    /// condition `cond` holds (the way out of an inlined instance).
    SiteEnd {
        slot: u32,
        sp_adjust: i32,
        cond: Option<u8>,
        go: bool,
    },
    /// A probe of a Go function (`id`), whose frames are kept per
    /// goroutine; SP plus `sp_adjust` is SP at the function's entry.
    Go {
        id: u32,
        kind: GoProbe,
        sp_adjust: i32,
    },
}

/// What a probe of Go code marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GoProbe {
    /// The function's entry.
    Entry,
    /// One of its `ret`s.
    Ret,
    /// Its prologue's call to `runtime.morestack`: the function starts
    /// again from its entry once the stack has grown, in the same call.
    Morestack,
    /// `runtime.goexit1`: the goroutine ends; its open frames were left by
    /// `runtime.Goexit` or a panic.
    Goexit,
}

/// The probes' own time in one timed call (mirror of tachy_corr).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeTime {
    /// Inside the call's own interval: subtracted from its duration.
    pub in_ns: u64,
    /// Inside its caller's interval: subtracted from the caller's.
    pub add_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Probe {
    /// Index into `Plan::objects`.
    pub object: usize,
    pub vaddr: u64,
    pub offset: u64,
    pub kind: ProbeKind,
    /// What the kernel does with the instruction under it.
    pub cost: ProbeCost,
}

/// What the kernel does on a hit of a probe, which is what the hit costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hit {
    /// The instruction under the probe is emulated.
    Emulated,
    /// It is single-stepped out of line.
    SingleStepped,
    /// A uretprobe's return, through the kernel's trampoline.
    Uretprobe,
}

impl Hit {
    pub fn describe(self) -> &'static str {
        match self {
            Hit::Emulated => "emulated",
            Hit::SingleStepped => "single-stepped",
            Hit::Uretprobe => "uretprobe",
        }
    }
}

impl Probe {
    /// What a hit of it costs.
    pub fn hit(&self) -> Hit {
        match (self.kind, self.cost) {
            (ProbeKind::Uret, _) => Hit::Uretprobe,
            (_, ProbeCost::Emulated) => Hit::Emulated,
            (_, ProbeCost::SingleStepped) => Hit::SingleStepped,
        }
    }
}

/// What one hit costs the thread that takes it, by kind (ns), as measured
/// on this machine (`crate::calibrate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitPrices {
    pub emulated_ns: u64,
    pub stepped_ns: u64,
    pub uret_ns: u64,
}

impl HitPrices {
    pub fn of(&self, hit: Hit) -> u64 {
        match hit {
            Hit::Emulated => self.emulated_ns,
            Hit::SingleStepped => self.stepped_ns,
            Hit::Uretprobe => self.uret_ns,
        }
    }
}

/// A function of an object, as traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedFunc {
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
    pub entry_insn: String,
    pub entry_cost: ProbeCost,
    pub exits: ExitSummary,
    /// An inlined instance: where it is, and its ways out.
    pub inlined: Option<Box<inlined::InlinedOf>>,
}

/// What one counter slot times. (One per traced item, made once: the size
/// of the function variant costs nothing worth a box.)
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum ItemKind {
    /// A function of an object, timed by uprobes.
    Function(TracedFunc),
    /// A system call, timed from its entry to its exit in the kernel.
    Syscall { nr: u32 },
    /// A kernel function, timed by fentry/fexit or a kprobe pair.
    KernelFunction,
}

/// Something timed, with the names it is shown and known by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// As shown: demangled, `syscall:NAME` or `k:NAME`.
    pub name: String,
    /// As the object or the kernel names it.
    pub raw_name: String,
    pub kind: ItemKind,
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
    /// Split each call into on-CPU, blocked and runnable time (`--cpu`).
    pub cpu: bool,
    /// And a histogram of each part (`--cpu --hist`).
    pub cpu_hist: bool,
    /// `--by`: group each function's calls by these keys (none: no groups).
    pub by: Vec<by::ByKey>,
    /// Record each call at least this long (`--record-slower-than`).
    pub record_min_ns: Option<u64>,
    /// `--stack`: each record carries its call's user stack.
    pub stack: bool,
    /// `--cgroup`: count only in this cgroup v2 and those below it, as
    /// (id, level).
    pub cgroup: Option<(u64, u32)>,
    /// Count the calls entered per process, for reports that say which
    /// processes contributed.
    pub count_procs: bool,
    /// Something reads the return value at the exit (`--filter ret`,
    /// `--by retval`, records): an early exit stands only where the
    /// return register already holds it.
    pub read_ret: bool,
}

impl Settings {
    /// Whether the kernel sends records: `--record-slower-than`, or `--by
    /// stack`, which groups every call by the stack in its record.
    pub fn records(&self) -> bool {
        self.record_min_ns.is_some() || self.by.contains(&by::ByKey::Stack)
    }
}

impl Item {
    /// Whether the item is Go code (frames kept per goroutine).
    pub fn is_go(&self) -> bool {
        matches!(&self.kind, ItemKind::Function(t) if t.exits.mode == ExitMode::Go)
    }
}

/// Everything `probe` needs to attach.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The objects probes stand in.
    pub objects: Vec<ObjectRef>,
    /// What was left out because the kernel refuses to probe it, one line
    /// each: a function with no place for its entry probe, a call site on
    /// an instruction the kernel refuses.
    pub left_out: Vec<String>,
    /// What is timed, by id: functions, system calls, kernel functions.
    pub items: Vec<Item>,
    /// `tachy nested` only: call sites, ids after the items'.
    pub sites: Vec<SiteNode>,
    /// `tachy nested` only: the probed site addresses, (object, vaddr),
    /// indexed by slot. A function's sites have consecutive slots.
    pub slots: Vec<(usize, u64)>,
    /// `tachy nested` only: per slot with a probe of its own where the
    /// call returns, what a hit there costs.
    pub slot_ends: std::collections::BTreeMap<u32, ProbeCost>,
    pub probes: Vec<Probe>,
    /// `ret`s observed by early exits, kept to put their own probe back
    /// where an early exit shares its address with another probe.
    pub early: Vec<EarlyGroup>,
    /// Per traced function (item id), the kinds of hit its ways out cost
    /// (one of them per call).
    pub exit_hits: std::collections::BTreeMap<u32, BTreeSet<Hit>>,
    /// Go: where `runtime.g` keeps its stack bounds and `goid`, from the
    /// DWARF of the Go binary planned, or its Go version's layout; `None`
    /// when the plan has no Go function.
    pub go_layout: Option<GLayout>,
    /// The process the request names (`-p PID`), which the links and
    /// counts are limited to; `None` for every process, or for a command
    /// not yet started (its process is `probe::Live::pid`).
    pub pid: Option<u32>,
    /// Several processes (`-p A,B`, `--comm`, `--pgrep`): probes fire in
    /// every process and count in these only (and, with `--follow`, their
    /// forks).
    pub pids: Vec<u32>,
    pub settings: Settings,
    /// `--filter`, resolved per item id (a function's own registers).
    pub arg_filters: std::collections::BTreeMap<u32, filter::Resolved>,
    /// `--by argN`/`--by NAME`: per item id, each key's operand where the
    /// key reads an argument (None for the other keys), in the order of
    /// `settings.by`.
    pub by_args: std::collections::BTreeMap<u32, Vec<Option<args::Operand>>>,
    /// `--stack`: how the records' stacks are taken.
    pub stack: Option<stack::StackHow>,
    /// How each item's return value reads, per item id, where something
    /// reads it (`--filter ret`, `--by retval`, records).
    pub returns: std::collections::BTreeMap<u32, args::RetShape>,
    /// `--record-slower-than`: what each item's records print of its
    /// arguments, per item id.
    pub record_args: std::collections::BTreeMap<u32, Vec<args::RecordArg>>,
    /// Per item id of a function timed by a uretprobe: where its tail jumps
    /// can lead (see `encode::tail_pairs`).
    pub tail_reach: std::collections::BTreeMap<u32, TailReach>,
    /// The item id of each traced function, by (object, address): looked
    /// up once per function added, so it is an index, not a scan.
    pub(super) function_ids: std::collections::HashMap<(usize, u64), u32>,
    /// No object of the traced process can raise or catch an unwind
    /// (`unwind::process_cannot_unwind`): a uretprobe is safe on any
    /// function whose entry probe stands where SP holds the return address.
    pub process_cannot_unwind: bool,
    /// `tachy nested`: site nodes broken down into an implementation of
    /// the IFUNC symbol they call, and which (as `--dry-run` says).
    pub ifunc_callees: Vec<(u32, String)>,
    /// The first object of another architecture than this tachy's, with
    /// its architecture: such a plan can be printed, not attached.
    pub foreign: Option<(std::path::PathBuf, disasm::Arch)>,
    /// Each node's sites and each site's root, set by `finish`.
    tree: nodes::Tree,
}

/// The functions a traced function can reach by tail jumps, directly or
/// through the functions it tail-calls (bounded), in its own object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TailReach {
    /// Their addresses.
    pub addrs: BTreeSet<u64>,
    /// Some tail jump goes where the plan cannot tell.
    pub unknown: bool,
}

/// A probe on a `ret`.
pub const RET_EXIT: ProbeKind = ProbeKind::Exit {
    sp_adjust: 0,
    cond: None,
};

/// The early exits that stand for one `ret` (see
/// [`crate::disasm::Decoded::early_exits`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarlyGroup {
    pub object: usize,
    /// The `ret` and its file offset.
    pub ret: u64,
    pub ret_offset: u64,
    pub ret_cost: ProbeCost,
    /// The traced function whose exit summary counts it.
    pub item: Option<u32>,
    /// The probes standing for it.
    pub probes: Vec<Probe>,
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
    let image = crate::symbols::code::ObjectImage::new(obj);
    disasm::decode_arch(obj.arch, &ranges, &image)
        .with_context(|| format!("cannot decode {}", f.display_name()))
}

impl Plan {
    /// An empty plan with these settings, for every process.
    pub fn new(settings: Settings) -> Plan {
        Plan {
            settings,
            ..Plan::default()
        }
    }

    /// Refuses a plan with probes in code of another architecture than
    /// this tachy's: listing and planning read any supported object, but
    /// only the kernel of the code's own architecture can probe it.
    pub fn check_host_arch(&self) -> Result<()> {
        match &self.foreign {
            Some((path, arch)) => anyhow::bail!(
                "cannot attach to {}: it is {} code and this tachy runs on {} (list and --dry-run work; run an {} build of tachy where the code runs)",
                path.display(),
                arch.name(),
                disasm::Arch::host().name(),
                arch.name()
            ),
            None => Ok(()),
        }
    }

    fn object_index(&mut self, obj: &ElfObject) -> usize {
        if let Some(i) = self
            .objects
            .iter()
            .position(|o| o.display == obj.display && o.open_path == obj.open_path)
        {
            return i;
        }
        if obj.arch != disasm::Arch::host() && self.foreign.is_none() {
            self.foreign = Some((obj.display.clone(), obj.arch));
        }
        self.objects.push(ObjectRef {
            display: obj.display.clone(),
            open_path: obj.open_path.clone(),
        });
        self.objects.len() - 1
    }

    pub(crate) fn push(
        &mut self,
        obj: &ElfObject,
        object: usize,
        vaddr: u64,
        kind: ProbeKind,
    ) -> Result<()> {
        let p = self.probe(obj, object, vaddr, kind)?;
        self.probes.push(p);
        Ok(())
    }

    fn probe(&self, obj: &ElfObject, object: usize, vaddr: u64, kind: ProbeKind) -> Result<Probe> {
        let offset = obj.vaddr_to_offset(vaddr).with_context(|| {
            format!(
                "address {vaddr:#x} is not in an executable segment of {}",
                obj.display.display()
            )
        })?;
        // The longest x86 instruction is 15 bytes; code may end sooner.
        let code = (1..=15u64).rev().find_map(|n| obj.code(vaddr, n));
        let cost = code.map_or(ProbeCost::SingleStepped, |c| {
            disasm::probe_cost_at(obj.arch, c, vaddr)
        });
        Ok(Probe {
            object,
            vaddr,
            offset,
            kind,
            cost,
        })
    }

    /// Number of counter slots: items, then sites.
    pub fn ids(&self) -> u32 {
        (self.items.len() + self.sites.len()) as u32
    }

    /// The object an item belongs to, as users know it ("kernel" for
    /// system calls and kernel functions).
    pub fn object_of(&self, item: &Item) -> &Path {
        match &item.kind {
            ItemKind::Function(t) => &self.objects[t.object].display,
            ItemKind::Syscall { .. } | ItemKind::KernelFunction => Path::new("kernel"),
        }
    }

    /// The planned system calls, as (number, id).
    pub fn syscalls(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(id, it)| match it.kind {
                ItemKind::Syscall { nr } => Some((nr, id as u32)),
                _ => None,
            })
    }

    /// The planned kernel functions, as (name, id).
    pub fn kernel_functions(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(id, it)| match it.kind {
                ItemKind::KernelFunction => Some((it.raw_name.as_str(), id as u32)),
                _ => None,
            })
    }

    /// Adds a system call, timed from its entry to its exit in the kernel.
    pub fn add_syscall(&mut self, name: &str, nr: u32) -> u32 {
        if let Some((_, id)) = self.syscalls().find(|&(n, _)| n == nr) {
            return id;
        }
        self.add_item(format!("syscall:{name}"), name, ItemKind::Syscall { nr })
    }

    /// Adds a kernel function, timed by fentry/fexit or a kprobe pair.
    pub fn add_kernel_function(&mut self, name: &str) -> u32 {
        if let Some((_, id)) = self.kernel_functions().find(|&(n, _)| n == name) {
            return id;
        }
        self.add_item(format!("k:{name}"), name, ItemKind::KernelFunction)
    }

    fn add_item(&mut self, name: String, raw_name: &str, kind: ItemKind) -> u32 {
        self.items.push(Item {
            name,
            raw_name: raw_name.to_string(),
            kind,
        });
        (self.items.len() - 1) as u32
    }

    /// Sorts and removes duplicate probes: a `ret` shared by two traced
    /// functions (one tail-calls the other) is probed once. Indexes the
    /// tree of nodes ([`Plan::children`], [`Plan::root_of`]).
    pub fn finish(&mut self) {
        self.tree = nodes::Tree::new(self.items.len(), &self.sites);
        self.restore_shared_rets();
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
}

impl Plan {
    /// An early exit must be the only probe at its address: the kernel runs
    /// the programs of one address in an order it does not promise, and a
    /// site's end or a function's entry there must come before the exit.
    /// Where one shares an address with another kind of probe, its `ret` is
    /// probed instead.
    fn restore_shared_rets(&mut self) {
        if self.early.is_empty() {
            return;
        }
        let others: BTreeSet<(usize, u64)> = self
            .probes
            .iter()
            .filter(|p| !matches!(p.kind, ProbeKind::Exit { .. }))
            .map(|p| (p.object, p.offset))
            .collect();
        let groups = std::mem::take(&mut self.early);
        for g in groups {
            if !g
                .probes
                .iter()
                .any(|p| others.contains(&(p.object, p.offset)))
            {
                self.early.push(g);
                continue;
            }
            self.probes.retain(|p| !g.probes.contains(p));
            self.probes.push(Probe {
                object: g.object,
                vaddr: g.ret,
                offset: g.ret_offset,
                kind: ProbeKind::Exit {
                    sp_adjust: 0,
                    cond: None,
                },
                cost: g.ret_cost,
            });
            if let Some(ItemKind::Function(t)) = g
                .item
                .and_then(|i| self.items.get_mut(i as usize))
                .map(|i| &mut i.kind)
            {
                t.exits.early_rets = t.exits.early_rets.saturating_sub(1);
            }
            if let Some(i) = g.item {
                let hit = self.probes.last().map_or(Hit::SingleStepped, Probe::hit);
                self.exit_hits.entry(i).or_default().insert(hit);
            }
        }
    }
}

/// Entry probes of distinct functions never share an address, and exits at
/// one address differ only by their cookie, so the kind orders them.
fn kind_rank(k: ProbeKind) -> (u8, u64) {
    match k {
        ProbeKind::Entry { .. } => (0, 0),
        ProbeKind::Exit { sp_adjust, cond } => (
            1,
            u64::from(sp_adjust as u32) << 8 | cond.map_or(0xff, u64::from),
        ),
        ProbeKind::Tail { cookie } => (2, cookie),
        ProbeKind::Uret => (3, 0),
        ProbeKind::Site { slot, .. } => (4, slot as u64),
        ProbeKind::SiteEnd { slot, .. } => (5, slot as u64),
        ProbeKind::Jump { cookie } => (6, cookie),
        ProbeKind::Go { kind, .. } => (7, kind as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(offset: u64, kind: ProbeKind) -> Probe {
        Probe {
            object: 0,
            vaddr: offset,
            offset,
            kind,
            cost: ProbeCost::Emulated,
        }
    }

    /// An early exit that shares its address with a site's end gives way to
    /// a probe on its `ret`; one alone at its address stays.
    #[test]
    fn early_exits_sharing_an_address_give_way_to_their_ret() {
        let early = |at, cond| {
            probe(
                at,
                ProbeKind::Exit {
                    sp_adjust: 16,
                    cond,
                },
            )
        };
        let group = |ret, probes: Vec<Probe>| EarlyGroup {
            object: 0,
            ret,
            ret_offset: ret,
            ret_cost: ProbeCost::Emulated,
            item: None,
            probes,
        };
        let mut plan = Plan {
            probes: vec![
                early(0x10, Some(4)),
                early(0x20, None),
                probe(
                    0x20,
                    ProbeKind::SiteEnd {
                        slot: 0,
                        sp_adjust: 0,
                        cond: None,
                        go: false,
                    },
                ),
                early(0x50, None),
            ],
            early: vec![
                group(0x40, vec![early(0x10, Some(4)), early(0x20, None)]),
                group(0x60, vec![early(0x50, None)]),
            ],
            ..Plan::default()
        };
        plan.finish();
        let exits: Vec<(u64, ProbeKind)> = plan
            .probes
            .iter()
            .filter(|p| matches!(p.kind, ProbeKind::Exit { .. }))
            .map(|p| (p.offset, p.kind))
            .collect();
        assert_eq!(exits, [(0x40, RET_EXIT), (0x50, early(0x50, None).kind)]);
        assert_eq!(plan.early.len(), 1);
    }
}
