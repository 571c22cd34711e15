//! The only module that talks to the kernel's BPF interface: loads the BPF
//! program with the plan's settings, attaches its probes, reads and clears
//! the counters. Dropping a `Tracer` detaches everything; the links are file
//! descriptors, so the kernel removes them even if tachy is killed.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{KprobeOpts, Link, MapCore, MapFlags, OpenObject, UprobeMultiOpts, UprobeOpts};

use crate::plan::by::ByKey;
use crate::plan::encode::{self, LinkGroup, Program};
use crate::plan::{Plan, MAX_NODES};
use crate::report::groups::{FilePlace, RawGroup};
use crate::report::hist::NBUCKETS;
use crate::report::{Counts, CpuSplit, Hist};

mod error;

use error::KernelError;
pub use error::{ProcessGone, Refusal};

mod skel {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/tachy.skel.rs"));
}

use skel::{types, TachySkel, TachySkelBuilder};

// SAFETY: tachy_stats is plain old data generated from tachy.h: integers
// only, no padding-sensitive invariants, valid for any bit pattern.
unsafe impl plain::Plain for types::tachy_stats {}
// SAFETY: as tachy_stats: integers only.
unsafe impl plain::Plain for types::tachy_parts {}
// SAFETY: as tachy_stats: two u64s.
unsafe impl plain::Plain for types::tachy_corr {}
// SAFETY: as tachy_stats: integers only (explicit padding fields).
unsafe impl plain::Plain for types::tachy_filter {}

// SAFETY: as tachy_filter: integers only (explicit padding fields).
unsafe impl plain::Plain for types::tachy_by_args {}

/// A term (or a `--by` operand) as the BPF side reads it.
fn term_value(t: &crate::plan::filter::Encoded) -> types::tachy_term {
    types::tachy_term {
        value: t.value,
        off: t.off,
        kind: t.kind,
        reg: t.reg,
        cmp: t.cmp,
        size: t.size,
        flags: t.flags,
        ..Default::default()
    }
}

/// One item's `--filter` as the BPF side reads it.
fn filter_value(r: &crate::plan::filter::Resolved) -> types::tachy_filter {
    let mut v = types::tachy_filter::default();
    let terms = r.encode();
    for (slot, t) in v.terms.iter_mut().zip(&terms) {
        *slot = term_value(t);
    }
    v.nterms = terms.len().min(v.terms.len()) as u32;
    v
}

/// One item's `--by` argument keys as the BPF side reads them (a key
/// that is not an argument is left zero).
fn by_args_value(ops: &[Option<crate::plan::args::Operand>]) -> types::tachy_by_args {
    let mut v = types::tachy_by_args::default();
    for (slot, op) in v.opnd.iter_mut().zip(ops) {
        if let Some(op) = op {
            *slot = term_value(&crate::plan::filter::encode_operand(op));
        }
    }
    v
}
// SAFETY: as tachy_stats: integers only, no padding.
unsafe impl plain::Plain for types::tachy_group_key {}
// SAFETY: as tachy_stats: integers and a byte array.
unsafe impl plain::Plain for types::tachy_group {}
// SAFETY: as tachy_stats: integers and a byte array only.
unsafe impl plain::Plain for types::tachy_record {}

// Array sizes of tachy.h, as the skeleton has them, are those of the Rust
// side: these do not compile otherwise.
const _: fn(&types::tachy_stats) -> &[u64; NBUCKETS] = |s| &s.buckets;
const _: fn(&types::tachy_thread) -> &[u16; MAX_NODES] = |t| &t.pend_of;
const _: fn(&types::tachy_group_key) -> &[u64; crate::plan::by::MAX_KEYS] = |k| &k.val;

/// One record of `--record-slower-than` as the kernel sent it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelRecord {
    /// The kernel's monotonic clock (CLOCK_MONOTONIC) at the call's end.
    pub end_ns: u64,
    pub dur_ns: u64,
    /// With --cpu: the blocked and runnable parts (the rest was on a CPU).
    pub parts: Option<(u64, u64)>,
    /// The six argument registers (SysV order), or a system call's
    /// arguments.
    pub args: [u64; 6],
    pub syscall: bool,
    pub pid: u32,
    pub tid: u32,
    /// The function (item) id.
    pub id: u32,
    pub comm: String,
    /// `tachy nested`: (node id, calls, ns) of each site that ran in the
    /// call, when the call's sites are its own.
    pub sites: Option<Vec<(u32, u32, u64)>>,
    pub more_sites: u32,
}

impl KernelRecord {
    /// Decodes a record of the ring buffer (its unused sites left out).
    fn decode(bytes: &[u8]) -> Option<KernelRecord> {
        let size = std::mem::size_of::<types::tachy_record>();
        let mut full = vec![0u8; size];
        let n = bytes.len().min(size);
        full[..n].copy_from_slice(&bytes[..n]);
        let mut r = types::tachy_record::default();
        plain::copy_from_bytes(&mut r, &full).ok()?;
        let comm: Vec<u8> = r
            .comm
            .iter()
            .map(|&c| c as u8)
            .take_while(|&c| c != 0)
            .collect();
        let nsites = (r.nsites as usize).min(r.sites.len());
        Some(KernelRecord {
            end_ns: r.end_ns,
            dur_ns: r.dur_ns,
            parts: (r.flags.0 & REC_CPU != 0).then_some((r.blocked_ns, r.runq_ns)),
            args: r.args,
            syscall: r.flags.0 & REC_SYSCALL != 0,
            pid: r.pid,
            tid: r.tid,
            id: r.id,
            comm: String::from_utf8_lossy(&comm).into_owned(),
            sites: (r.flags.0 & REC_SITESOK != 0).then(|| {
                r.sites[..nsites]
                    .iter()
                    .map(|s| (s.node, s.cnt, s.ns))
                    .collect()
            }),
            more_sites: r.more_sites,
        })
    }
}

// enum tachy_rec_flag of tachy.h, as the skeleton has it.
const REC_CPU: u32 = types::tachy_rec_flag::TACHY_REC_CPU.0;
const REC_SYSCALL: u32 = types::tachy_rec_flag::TACHY_REC_SYSCALL.0;
const REC_SITESOK: u32 = types::tachy_rec_flag::TACHY_REC_SITESOK.0;

/// Reads the records of `--record-slower-than` from the ring buffer.
pub struct RecordReader {
    // Dropped before the map it reads.
    ring: libbpf_rs::RingBuffer<'static>,
    got: std::rc::Rc<std::cell::RefCell<Vec<KernelRecord>>>,
    _map: libbpf_rs::MapHandle,
}

impl RecordReader {
    /// The records that arrived since the last call, oldest first.
    pub fn read(&mut self) -> Result<Vec<KernelRecord>> {
        self.ring
            .consume()
            .map_err(|e| anyhow!("cannot read the records' ring buffer: {e}"))?;
        Ok(std::mem::take(&mut *self.got.borrow_mut()))
    }
}

/// The ring buffer's size: TACHY_RECORD_BUFFER bytes (a power of two of at
/// least a page; the tests make it small to overflow it), else 1 MiB.
pub fn record_buffer_size() -> Result<u32> {
    const DEFAULT: u32 = 1 << 20;
    let Some(v) = std::env::var_os("TACHY_RECORD_BUFFER") else {
        return Ok(DEFAULT);
    };
    let page = page_size();
    match v.to_str().and_then(|v| v.parse::<u32>().ok()) {
        Some(n) if n.is_power_of_two() && n >= page => Ok(n),
        _ => bail!(
            "TACHY_RECORD_BUFFER={}: not a power of two of at least {page} bytes",
            v.to_string_lossy()
        ),
    }
}

fn page_size() -> u32 {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(n).unwrap_or(4096)
}

pub struct Tracer<'obj> {
    skel: TachySkel<'obj>,
    links: Vec<Link>,
    nfuncs: u32,
    /// --cpu, and --cpu --hist: what `take` reads besides the counters.
    cpu: bool,
    cpu_hist: bool,
    /// Per id: whether it has a `--filter` (its rejected calls are read).
    filtered: Vec<bool>,
    /// --by: groups kept in the kernel (0: none), and the generation the
    /// last `take` read.
    pub groups_max: u32,
    last_gen: u32,
    /// --record-slower-than: the ring buffer and its lost count exist.
    records: bool,
    /// How the probes were attached, for --verbose.
    pub multi: bool,
    pub thread_exit: bool,
    /// How kernel functions were attached: fentry/fexit or kprobes.
    pub kernel_with: Option<&'static str>,
    /// How long loading the BPF program took, and attaching its probes.
    pub load_time: Duration,
    pub attach_time: Duration,
    /// The probes the kernel refused, as (object, file offset): left out,
    /// the others attached (see [`Tracer::refused_lines`]).
    pub refused: Vec<(usize, u64)>,
}

fn silence_libbpf(verbose: bool) {
    let level = if verbose {
        libbpf_rs::PrintLevel::Info
    } else {
        libbpf_rs::PrintLevel::Warn
    };
    let cb: libbpf_rs::PrintCallback = if verbose {
        // libbpf starts most of its messages with "libbpf: " itself.
        |_, msg| match msg.starts_with("libbpf: ") {
            true => eprint!("{msg}"),
            false => eprint!("libbpf: {msg}"),
        }
    } else {
        |_, _| {}
    };
    libbpf_rs::set_print(Some((level, cb)));
}

impl<'obj> Tracer<'obj> {
    /// Loads the BPF program configured for `plan` and attaches every probe,
    /// in phases: prepare (which program goes where with which cookie,
    /// decided from the plan alone by `plan::encode`), load (only the
    /// programs the plan uses), attach (uprobes, then system calls and
    /// kernel functions), and last the watch on thread exits. Adds to
    /// `attached` the probes each link placed (read by another thread to
    /// show progress). On any error, whatever was attached is detached
    /// again.
    pub fn attach(
        storage: &'obj mut MaybeUninit<OpenObject>,
        plan: &Plan,
        verbose: bool,
        attached: &AtomicUsize,
    ) -> Result<Tracer<'obj>> {
        silence_libbpf(verbose);
        let groups = encode::link_groups(plan);
        let multi = uprobe_multi_supported();
        let start = Instant::now();
        let skel = load(storage, plan, &groups, multi)?;
        let load_time = start.elapsed();
        let mut t = Tracer {
            skel,
            links: Vec::new(),
            nfuncs: plan.ids(),
            cpu: plan.settings.cpu,
            cpu_hist: plan.settings.cpu_hist,
            filtered: vec![false; plan.ids() as usize],
            groups_max: if plan.settings.by.is_empty() {
                0
            } else {
                groups_max()
            },
            last_gen: 0,
            records: plan.settings.record_min_ns.is_some(),
            multi,
            thread_exit: false,
            kernel_with: None,
            load_time,
            attach_time: Duration::ZERO,
            refused: Vec::new(),
        };
        // The processes counted through the followed set: several -p, or
        // one -p with --follow (and its forks).
        let mut counted = plan.pids.clone();
        if let (true, Some(pid)) = (plan.settings.follow, plan.pid) {
            counted.push(pid);
        }
        if !counted.is_empty() {
            t.count_in(&counted, plan.settings.follow)?;
        }
        t.fill_site_nodes(plan)?;
        t.fill_tail_pairs(plan)?;
        t.fill_probe_time(plan)?;
        t.fill_filters(plan)?;
        t.fill_by_args(plan)?;
        t.fill_groups()?;
        // Before any frame can open: its switches are then all seen.
        if plan.settings.cpu {
            t.attach_scheduler()?;
        }
        t.attach_uprobes(plan, &groups, attached)?;
        if plan.syscalls().next().is_some() {
            t.attach_syscalls(plan)?;
        }
        if plan.kernel_functions().next().is_some() {
            t.attach_kernel_functions(plan, verbose)?;
        }
        // Without it, frames a thread abandons just before it exits are not
        // counted as unwound; timing is unaffected.
        match t.skel.progs.tachy_thread_exit.attach() {
            Ok(l) => {
                t.links.push(l);
                t.thread_exit = true;
            }
            Err(e) if verbose => eprintln!("tachy: thread exits are not watched: {e}"),
            Err(_) => {}
        }
        t.attach_time = start.elapsed() - load_time;
        Ok(t)
    }

    /// One line per probe the kernel refused at attach: where it stood,
    /// in which traced function, and what leaving it out means.
    pub fn refused_lines(&self, plan: &Plan) -> Vec<String> {
        let mut out = Vec::new();
        for &(object, offset) in &self.refused {
            let display = plan.objects[object].display.display();
            let probe = plan
                .probes
                .iter()
                .find(|p| p.object == object && p.offset == offset);
            let vaddr = probe.map_or(offset, |p| p.vaddr);
            let owner = plan.items.iter().find(|i| {
                matches!(&i.kind, crate::plan::ItemKind::Function(t)
                    if t.object == object && vaddr >= t.addr && vaddr - t.addr < t.size.max(1))
            });
            let at = match owner {
                Some(i) => match &i.kind {
                    crate::plan::ItemKind::Function(t) => {
                        format!("{}+{:#x}", i.name, vaddr - t.addr)
                    }
                    _ => format!("{vaddr:#x}"),
                },
                None => format!("{vaddr:#x}"),
            };
            let what = match probe.map(|p| p.kind) {
                Some(crate::plan::ProbeKind::Entry { .. }) => {
                    "its entry probe: the function is not timed"
                }
                Some(
                    crate::plan::ProbeKind::Site { .. } | crate::plan::ProbeKind::SiteEnd { .. },
                ) => "a call site's probe: the site is not timed",
                _ => "an exit probe: calls that leave there are not counted",
            };
            out.push(format!(
                "the kernel refused the probe at {at} (offset {offset:#x} of {display}), {what}"
            ));
        }
        out
    }

    /// --cpu: the scheduler's switches and wakeups, which tell on-CPU,
    /// blocked and runnable time apart for threads with an open frame.
    fn attach_scheduler(&mut self) -> Result<()> {
        for prog in [&self.skel.progs.tachy_wakeup, &self.skel.progs.tachy_switch] {
            let link = prog.attach().map_err(|e| {
                anyhow!("cannot attach to the scheduler's tracepoints for --cpu: {e}")
            })?;
            self.links.push(link);
        }
        Ok(())
    }

    /// Counts in these processes only (through the set --follow uses),
    /// and in their forks with `forks`.
    fn count_in(&mut self, pids: &[u32], forks: bool) -> Result<()> {
        for pid in pids {
            self.skel
                .maps
                .followed
                .update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up the processes to count: {e}"))?;
        }
        if forks {
            let link = self
                .skel
                .progs
                .tachy_fork
                .attach()
                .map_err(|e| anyhow!("cannot watch forks for --follow: {e}"))?;
            self.links.push(link);
        }
        Ok(())
    }

    /// The calls entered per process since the last call, as (tgid,
    /// calls); empty unless the plan counts them.
    pub fn take_procs(&mut self) -> Vec<(u32, u64)> {
        let map = &self.skel.maps.procs;
        let keys: Vec<Vec<u8>> = map.keys().collect();
        let mut out = Vec::new();
        for k in keys {
            let Ok(b) = <[u8; 4]>::try_from(k.as_slice()) else {
                continue;
            };
            // Read and remove in one step: a call entered meanwhile makes
            // a new entry, counted next time.
            if let Ok(Some(v)) = map.lookup_and_delete(&k) {
                if let Ok(n) = <[u8; 8]>::try_from(v.as_slice()) {
                    out.push((u32::from_ne_bytes(b), u64::from_ne_bytes(n)));
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Times the plan's kernel functions with fentry/fexit where the kernel
    /// allows (cheapest: a direct call from the function's ftrace site), else
    /// with a kprobe/kretprobe pair; says in one line why neither works.
    fn attach_kernel_functions(&mut self, plan: &Plan, verbose: bool) -> Result<()> {
        // Why fentry/fexit is not used for any function (not tried, or
        // refused as a whole: no permission, no support).
        let mut fentry_refused = fentry_unavailable().map(str::to_string);
        let (mut fentries, mut kprobes) = (0, 0);
        for (name, id) in plan.kernel_functions() {
            let mut fentry_failed = fentry_refused.clone();
            if fentry_refused.is_none() {
                match self.attach_fentry(plan, name, id) {
                    Ok(()) => {
                        fentries += 1;
                        continue;
                    }
                    Err(e) => {
                        if verbose {
                            eprintln!("tachy: fentry/fexit on {name}: {}", e.text);
                        }
                        // Other errors are this function's own (not in
                        // BTF, not traceable): it alone goes to kprobes.
                        if e.refuses_all {
                            fentry_refused = Some(e.text.clone());
                        }
                        fentry_failed = Some(e.text);
                    }
                }
            }
            if !crate::kernel::kprobes_available() {
                let fentry = fentry_failed.as_deref().unwrap_or("not tried");
                bail!(
                    "kernel function {name} cannot be traced here: fentry/fexit failed ({fentry}) and this kernel has no kprobes (CONFIG_KPROBES is off); a kernel with CONFIG_KPROBES=y, or one that loads fentry programs (CONFIG_DEBUG_INFO_BTF=y and CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS=y), can; system calls are timed here with syscall:NAME"
                );
            }
            // Exit first, as for fentry/fexit.
            for (prog, ret) in [
                (&self.skel.progs.tachy_kexit, true),
                (&self.skel.progs.tachy_kentry, false),
            ] {
                let opts = KprobeOpts {
                    cookie: id as u64,
                    ..Default::default()
                };
                let link = prog.attach_kprobe_with_opts(ret, name, opts).map_err(|e| {
                    anyhow!("cannot attach a kprobe to kernel function {name}: {e}")
                })?;
                self.links.push(link);
            }
            kprobes += 1;
        }
        self.kernel_with = match (fentries, kprobes) {
            (0, 0) => None,
            (_, 0) => Some("fentry/fexit"),
            (0, _) => Some("kprobes"),
            _ => Some("fentry/fexit, and kprobes where fentry failed"),
        };
        Ok(())
    }

    /// Loads an instance of the program whose fentry and fexit programs
    /// are attached to kernel function `name`, counting as function `id`,
    /// on the maps of the first instance. Only the two links are kept: they
    /// hold the programs, which hold the maps.
    fn attach_fentry(&mut self, plan: &Plan, name: &str, id: u32) -> Result<(), FentryError> {
        let mut storage = MaybeUninit::uninit();
        let mut open = TachySkelBuilder::default()
            .open(&mut storage)
            .map_err(|e| FentryError::of(e, "cannot open the BPF program: "))?;
        configure(&mut open, plan, id).map_err(|e| FentryError {
            text: format!("{e:#}"),
            refuses_all: false,
        })?;
        let shared = &self.skel.maps;
        let m = &mut open.maps;
        for (map, from) in [
            (&mut m.kframes, shared.kframes.as_fd()),
            (&mut m.followed, shared.followed.as_fd()),
            (&mut m.threads, shared.threads.as_fd()),
            (&mut m.stats, shared.stats.as_fd()),
            (&mut m.part_hist, shared.part_hist.as_fd()),
            (&mut m.sys_ids, shared.sys_ids.as_fd()),
            (&mut m.sys_start, shared.sys_start.as_fd()),
            // The interval generation the counters are kept under.
            (&mut m.bss, shared.bss.as_fd()),
        ] {
            map.reuse_fd(from)
                .map_err(|e| FentryError::of(e, "cannot share the BPF maps: "))?;
        }
        // Kernel functions make no records (refused with the option).
        skip_record_maps(&mut open).map_err(|e| FentryError {
            text: format!("{e:#}"),
            refuses_all: false,
        })?;
        for mut prog in open.open_object_mut().progs_mut() {
            prog.set_autoload(false);
        }
        for p in [&mut open.progs.tachy_fentry, &mut open.progs.tachy_fexit] {
            p.set_autoload(true);
            p.set_attach_target(0, Some(name.to_string()))
                .map_err(|e| FentryError::of(e, ""))?;
        }
        let skel = open.load().map_err(|e| FentryError::of(e, ""))?;
        // Exit first: a call already under way when the entry attaches
        // then leaves no frame behind. Both or neither are kept.
        let mut links = Vec::with_capacity(2);
        for p in [&skel.progs.tachy_fexit, &skel.progs.tachy_fentry] {
            let link = p.attach_trace().map_err(|e| FentryError::of(e, ""))?;
            links.push(link);
        }
        self.links.extend(links);
        Ok(())
    }

    /// Tells the kernel which node a site probe times under which parent.
    /// Tells the kernel which traced functions can tail-call which.
    fn fill_tail_pairs(&mut self, plan: &Plan) -> Result<()> {
        for key in encode::tail_pairs(plan) {
            self.skel
                .maps
                .tail_pairs
                .update(&key.to_ne_bytes(), &[1u8], MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up the tail calls' map: {e}"))?;
        }
        Ok(())
    }

    fn fill_site_nodes(&mut self, plan: &Plan) -> Result<()> {
        for (key, node) in encode::site_nodes(plan) {
            let (key, node) = (key.to_ne_bytes(), node.to_ne_bytes());
            self.skel
                .maps
                .site_nodes
                .update(&key, &node, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up the call sites: {e}"))?;
        }
        Ok(())
    }

    /// Tells the kernel each item's `--filter` terms.
    fn fill_filters(&mut self, plan: &Plan) -> Result<()> {
        for (id, r) in &plan.arg_filters {
            let v = filter_value(r);
            // SAFETY: tachy_filter is integers only, generated from tachy.h.
            let bytes = unsafe { plain::as_bytes(&v) };
            self.skel
                .maps
                .filters
                .update(&id.to_ne_bytes(), bytes, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up --filter: {e}"))?;
            self.filtered[*id as usize] = true;
        }
        Ok(())
    }

    /// Tells the kernel where each item's `--by` argument keys are read.
    fn fill_by_args(&mut self, plan: &Plan) -> Result<()> {
        for (id, ops) in &plan.by_args {
            let v = by_args_value(ops);
            // SAFETY: tachy_by_args is integers only, generated from tachy.h.
            let bytes = unsafe { plain::as_bytes(&v) };
            self.skel
                .maps
                .by_args
                .update(&id.to_ne_bytes(), bytes, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up the arguments of --by: {e}"))?;
        }
        Ok(())
    }

    /// Tells the kernel the probes' own time to subtract, per id.
    fn fill_probe_time(&mut self, plan: &Plan) -> Result<()> {
        for (id, p) in plan.probe_time.iter().enumerate() {
            let v = types::tachy_corr {
                in_ns: p.in_ns,
                add_ns: p.add_ns,
            };
            // SAFETY: tachy_corr is two u64s generated from tachy.h.
            let bytes = unsafe { plain::as_bytes(&v) };
            self.skel
                .maps
                .corr
                .update(&(id as u32).to_ne_bytes(), bytes, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up the probe-time correction: {e}"))?;
        }
        Ok(())
    }

    /// --by: puts in each function's "other" group of both intervals,
    /// where the kernel counts a call when the map has no room for its own.
    fn fill_groups(&mut self) -> Result<()> {
        if self.groups_max == 0 {
            return Ok(());
        }
        let value = types::tachy_group::default();
        // SAFETY: tachy_group is plain data generated from tachy.h.
        let value = unsafe { plain::as_bytes(&value) };
        for half in 0..2 {
            for id in 0..self.nfuncs {
                let key = types::tachy_group_key {
                    id,
                    r#gen: half,
                    other: 1,
                    ..Default::default()
                };
                // SAFETY: tachy_group_key is plain data generated from tachy.h.
                let key = unsafe { plain::as_bytes(&key) };
                self.skel
                    .maps
                    .groups
                    .update(key, value, MapFlags::ANY)
                    .map_err(|e| anyhow!("cannot set up the groups of --by: {e}"))?;
            }
        }
        Ok(())
    }

    /// --by: reads and clears the groups of the interval the last `take`
    /// ended. A function's "other" group is cleared, never removed, so the
    /// kernel always finds it.
    pub fn take_groups(&mut self) -> Result<Vec<RawGroup>> {
        if self.groups_max == 0 {
            return Ok(Vec::new());
        }
        let gen = (self.last_gen & 1) as u16;
        let map = &self.skel.maps.groups;
        let keys: Vec<Vec<u8>> = map.keys().collect();
        let mut out = Vec::new();
        let zero = types::tachy_group::default();
        // SAFETY: tachy_group is plain data generated from tachy.h.
        let zero = unsafe { plain::as_bytes(&zero) };
        for k in keys {
            let mut key = types::tachy_group_key::default();
            if plain::copy_from_bytes(&mut key, &k).is_err() || key.r#gen != gen {
                continue;
            }
            let Some(raw) = map
                .lookup(&k, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot read the groups of --by: {e}"))?
            else {
                continue;
            };
            let mut g = types::tachy_group::default();
            plain::copy_from_bytes(&mut g, &raw)
                .map_err(|_| anyhow!("BPF groups have an unexpected size"))?;
            let cleared = if key.other != 0 {
                map.update(&k, zero, MapFlags::ANY)
            } else {
                map.delete(&k)
            };
            cleared.map_err(|e| anyhow!("cannot clear the groups of --by: {e}"))?;
            if g.count == 0 {
                continue;
            }
            let comm: Vec<u8> = g
                .comm
                .iter()
                .map(|&c| c as u8)
                .take_while(|&c| c != 0)
                .collect();
            out.push(RawGroup {
                id: key.id,
                other: key.other != 0,
                tgid: key.tgid,
                vals: key.val.to_vec(),
                comm: String::from_utf8_lossy(&comm).into_owned(),
                counts: Counts {
                    count: g.count,
                    total_ns: g.total_ns,
                    hist: Hist::from_buckets(&g.buckets),
                    ..Counts::default()
                },
                // The kernel's dev_t: major in the high 12 bits of 32.
                place: (g.caller_ino != 0).then_some(FilePlace {
                    major: g.caller_dev >> 20,
                    minor: g.caller_dev & 0xf_ffff,
                    ino: g.caller_ino,
                    offset: g.caller_off,
                }),
            });
        }
        Ok(out)
    }

    /// --by caller: the (process, key values) of every group the kernel
    /// holds now (read without clearing anything), so that the processes'
    /// maps can be read while they run.
    pub fn group_keys(&self) -> Vec<(u32, Vec<u64>)> {
        let mut out = Vec::new();
        for k in self.skel.maps.groups.keys() {
            let mut key = types::tachy_group_key::default();
            if plain::copy_from_bytes(&mut key, &k).is_ok() && key.tgid != 0 && key.other == 0 {
                out.push((key.tgid, key.val.to_vec()));
            }
        }
        out
    }

    /// One link per group where the kernel has uprobe_multi, one per probe
    /// otherwise.
    fn attach_uprobes(
        &mut self,
        plan: &Plan,
        groups: &[LinkGroup],
        attached: &AtomicUsize,
    ) -> Result<()> {
        // Following forks, probes fire in every process and the BPF side
        // keeps only the followed ones: a fork is not known in advance.
        let link_pid = match plan.pid {
            Some(pid) if !plan.settings.follow && plan.pids.is_empty() => pid as i32,
            _ => -1,
        };
        // The kernel resolves the path it is given from tachy's root: a
        // path under a process's root is opened inside that root first and
        // handed over as this open file.
        let mut held = Vec::with_capacity(plan.objects.len());
        for object in &plan.objects {
            held.push(match crate::target::in_process_root(&object.open_path) {
                Some(_) => Some(
                    crate::target::open_file(&object.open_path)
                        .with_context(|| format!("cannot open {}", object.display.display()))?,
                ),
                None => None,
            });
        }
        // In the groups' order (`Program::activation_rank`): function
        // entries go live last, in every object.
        for g in groups {
            let (Some(object), Some(held)) = (plan.objects.get(g.object), held.get(g.object))
            else {
                continue;
            };
            let display = object.display.display();
            let fd_path = held
                .as_ref()
                .map(|f| std::path::PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())));
            let path = fd_path.as_deref().unwrap_or(&object.open_path);
            let what = || format!("cannot attach probes to {display}");
            let prog = uprobe_program(&self.skel, g.program)?;
            if self.multi {
                let attach = |sites: &[(u64, u64)]| {
                    let opts = UprobeMultiOpts {
                        retprobe: g.program.is_return(),
                        offsets: sites.iter().map(|s| s.0 as usize).collect(),
                        cookies: sites.iter().map(|s| s.1).collect(),
                        ..Default::default()
                    };
                    prog.attach_uprobe_multi_with_opts(link_pid, path, "", opts)
                        .map_err(KernelError::last)
                };
                let mut refused = Vec::new();
                let links = attach_dropping_refused(&attach, &g.sites, &mut refused)
                    .map_err(attach_error)
                    .with_context(what)?;
                self.links.extend(links);
                attached.fetch_add(g.sites.len() - refused.len(), Ordering::Relaxed);
                self.refused
                    .extend(refused.into_iter().map(|offset| (g.object, offset)));
            } else {
                for &(offset, cookie) in &g.sites {
                    let opts = UprobeOpts {
                        cookie,
                        retprobe: g.program.is_return(),
                        ..Default::default()
                    };
                    let link = prog
                        .attach_uprobe_with_opts(link_pid, path, offset as usize, opts)
                        .map_err(KernelError::last);
                    match link {
                        Ok(link) => {
                            self.links.push(link);
                            attached.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if kernel_refused(&e) => self.refused.push((g.object, offset)),
                        Err(e) => return Err(attach_error(e)).with_context(what),
                    }
                }
            }
        }
        Ok(())
    }

    fn attach_syscalls(&mut self, plan: &Plan) -> Result<()> {
        for (nr, id) in plan.syscalls() {
            let v = id + 1;
            self.skel
                .maps
                .sys_ids
                .update(&nr.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up system call tracing: {e}"))?;
        }
        for prog in [
            &self.skel.progs.tachy_sys_enter,
            &self.skel.progs.tachy_sys_exit,
        ] {
            let link = prog
                .attach()
                .map_err(|e| anyhow!("cannot attach to the raw syscall tracepoints: {e}"))?;
            self.links.push(link);
        }
        Ok(())
    }

    /// Reads the counters of the interval that just ended and clears them.
    /// Probes write one half of the counters while this reads the other, so
    /// no call is lost or counted twice.
    pub fn take(&mut self) -> Result<Vec<Counts>> {
        let gen = {
            let bss = self
                .skel
                .maps
                .bss_data
                .as_deref_mut()
                .context("BPF program has no state section")?;
            let old = bss.generation;
            bss.generation = old.wrapping_add(1);
            old
        };
        self.last_gen = gen;
        // Let probes that read the old generation finish their update.
        std::thread::sleep(Duration::from_millis(2));
        let base = (gen & 1) * self.nfuncs;
        let mut out = Vec::with_capacity(self.nfuncs as usize);
        let map = &self.skel.maps.stats;
        let parts = &self.skel.maps.part_hist;
        for id in 0..self.nfuncs {
            let key = (base + id).to_ne_bytes();
            let per_cpu = map
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot read BPF counters: {e}"))?
                .unwrap_or_default();
            let mut c = Counts::default();
            let mut zero = Vec::with_capacity(per_cpu.len());
            for raw in &per_cpu {
                let mut s = types::tachy_stats::default();
                plain::copy_from_bytes(&mut s, raw)
                    .map_err(|_| anyhow!("BPF counters have an unexpected size"))?;
                c.merge(&Counts {
                    count: s.count,
                    total_ns: s.total_ns,
                    min_ns: s.min_ns,
                    max_ns: s.max_ns,
                    unwound: s.unwound,
                    filtered: s.filtered,
                    overflow: s.overflow,
                    indirect_tail: s.indirect_tail,
                    hist_early: s.hist_early,
                    under: s.under,
                    probe_ns: 0,
                    hist: Hist::from_buckets(&s.buckets),
                    arg_filtered: self
                        .filtered
                        .get(id as usize)
                        .copied()
                        .unwrap_or(false)
                        .then_some(s.argfilt),
                    cpu: self.cpu.then_some(CpuSplit {
                        oncpu_ns: s.oncpu_ns,
                        blocked_ns: s.blocked_ns,
                        runq_ns: s.runq_ns,
                        hist: None,
                    }),
                });
                zero.push(vec![0u8; raw.len()]);
            }
            map.update_percpu(&key, &zero, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot clear BPF counters: {e}"))?;
            if self.cpu_hist {
                let hist = take_parts(parts, &key)?;
                if let Some(split) = c.cpu.as_mut() {
                    split.hist = Some(hist);
                }
            }
            out.push(c);
        }
        Ok(out)
    }

    /// `--record-slower-than`: a reader of the records' ring buffer (None
    /// without the option).
    pub fn record_reader(&self) -> Result<Option<RecordReader>> {
        if !self.records {
            return Ok(None);
        }
        let map = libbpf_rs::MapHandle::try_from(&self.skel.maps.records)
            .map_err(|e| anyhow!("cannot read the records' ring buffer: {e}"))?;
        let got = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let sink = got.clone();
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        builder
            .add(&map, move |bytes: &[u8]| {
                if let Some(r) = KernelRecord::decode(bytes) {
                    sink.borrow_mut().push(r);
                }
                0
            })
            .map_err(|e| anyhow!("cannot read the records' ring buffer: {e}"))?;
        let ring = builder
            .build()
            .map_err(|e| anyhow!("cannot read the records' ring buffer: {e}"))?;
        Ok(Some(RecordReader {
            ring,
            got,
            _map: map,
        }))
    }

    /// Records the ring buffer had no room for since the last call.
    pub fn take_records_lost(&mut self) -> Result<u64> {
        if !self.records {
            return Ok(0);
        }
        let key = 0u32.to_ne_bytes();
        let map = &self.skel.maps.rec_lost;
        let per_cpu = map
            .lookup_percpu(&key, MapFlags::ANY)
            .map_err(|e| anyhow!("cannot read the records lost: {e}"))?
            .unwrap_or_default();
        let mut lost = 0;
        let mut zero = Vec::with_capacity(per_cpu.len());
        for raw in &per_cpu {
            let b = raw.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok());
            lost += b.map_or(0, u64::from_ne_bytes);
            zero.push(vec![0u8; raw.len()]);
        }
        // A record lost between the read and the clear is not counted: the
        // window is a few microseconds, once per report.
        map.update_percpu(&key, &zero, MapFlags::ANY)
            .map_err(|e| anyhow!("cannot clear the records lost: {e}"))?;
        Ok(lost)
    }

    /// With --follow: whether any followed process still runs. Processes
    /// that have exited leave the set.
    pub fn followed_alive(&mut self) -> bool {
        let map = &self.skel.maps.followed;
        let keys: Vec<Vec<u8>> = map.keys().collect();
        let mut alive = false;
        for k in keys {
            let Ok(b) = <[u8; 4]>::try_from(k.as_slice()) else {
                continue;
            };
            if crate::target::process_alive(u32::from_ne_bytes(b)) {
                alive = true;
            } else {
                let _ = map.delete(&k);
            }
        }
        alive
    }

    /// Names of the BPF programs loaded: those the plan uses.
    pub fn loaded_programs(&self) -> Vec<String> {
        self.skel
            .object()
            .progs()
            .filter(|p| p.autoload())
            .map(|p| p.name().to_string_lossy().into_owned())
            .collect()
    }

    pub fn link_count(&self) -> usize {
        self.links.len()
    }
}

/// Reads and clears the --cpu --hist slots of one counter key, summed over
/// CPUs: on-CPU, blocked and runnable.
fn take_parts(map: &libbpf_rs::MapMut<'_>, key: &[u8]) -> Result<[Vec<u64>; 3]> {
    let per_cpu = map
        .lookup_percpu(key, MapFlags::ANY)
        .map_err(|e| anyhow!("cannot read BPF counters: {e}"))?
        .unwrap_or_default();
    let mut out: [Vec<u64>; 3] = Default::default();
    let mut zero = Vec::with_capacity(per_cpu.len());
    for raw in &per_cpu {
        let mut p = types::tachy_parts::default();
        plain::copy_from_bytes(&mut p, raw)
            .map_err(|_| anyhow!("BPF counters have an unexpected size"))?;
        for (sum, slots) in out.iter_mut().zip([&p.oncpu, &p.blocked, &p.runq]) {
            sum.resize(slots.len(), 0);
            for (d, s) in sum.iter_mut().zip(slots) {
                *d += *s;
            }
        }
        zero.push(vec![0u8; raw.len()]);
    }
    map.update_percpu(key, &zero, MapFlags::ANY)
        .map_err(|e| anyhow!("cannot clear BPF counters: {e}"))?;
    for slots in &mut out {
        let used = slots.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
        slots.truncate(used);
    }
    Ok(out)
}

/// The machine's memory in bytes (MemTotal of /proc/meminfo), if known.
fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// Refuses counters (two per timed function or call site and per CPU, each
/// `size` bytes) that would take more than an eighth of the machine's
/// memory `mem`, or 4 GiB when that is not known: the kernel allocates
/// them all at load.
fn counters_fit(ids: u32, cpus: usize, size: usize, mem: Option<u64>) -> Result<()> {
    let need = 2 * u64::from(ids) * cpus as u64 * size as u64;
    let limit = mem.map_or(4 << 30, |m| m / 8);
    if need > limit {
        let mib = |b: u64| b.div_ceil(1 << 20);
        bail!(
            "the counters of {ids} timed functions and call sites would take {} MiB of kernel memory ({cpus} CPUs), more than the {} MiB allowed here: time fewer functions or call sites (a lower --depth)",
            mib(need),
            mib(limit)
        );
    }
    Ok(())
}

/// Opens the BPF program, writes the plan's settings, and loads the
/// programs the plan uses, no other.
fn load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    plan: &Plan,
    groups: &[LinkGroup],
    multi: bool,
) -> Result<TachySkel<'obj>> {
    let mut open = TachySkelBuilder::default()
        .open(storage)
        .map_err(|e| anyhow!("cannot open the BPF program: {e}"))?;
    configure(&mut open, plan, 0)?;
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1);
    // --cpu --hist adds the parts' histograms beside each counter.
    let parts = if plan.settings.cpu_hist {
        std::mem::size_of::<types::tachy_parts>()
    } else {
        0
    };
    counters_fit(
        plan.ids(),
        cpus,
        std::mem::size_of::<types::tachy_stats>() + parts,
        mem_total(),
    )?;
    open.maps
        .stats
        .set_max_entries(2 * plan.ids())
        .map_err(|e| anyhow!("cannot size the BPF counters: {e}"))?;
    if !plan.settings.by.is_empty() {
        // Each function's "other" group of both intervals has its place.
        open.maps
            .groups
            .set_max_entries(groups_max() + 2 * plan.ids())
            .map_err(|e| anyhow!("cannot size the groups of --by: {e}"))?;
    }
    if plan.settings.cpu_hist {
        open.maps
            .part_hist
            .set_max_entries(2 * plan.ids())
            .map_err(|e| anyhow!("cannot size the BPF counters: {e}"))?;
    }
    open.maps
        .corr
        .set_max_entries(plan.ids().max(1))
        .map_err(|e| anyhow!("cannot size the BPF counters: {e}"))?;
    if !plan.by_args.is_empty() {
        open.maps
            .by_args
            .set_max_entries(plan.ids().max(1))
            .map_err(|e| anyhow!("cannot size the arguments of --by: {e}"))?;
    }
    let pairs = encode::tail_pairs(plan).len();
    if pairs > 1 {
        open.maps
            .tail_pairs
            .set_max_entries(pairs as u32)
            .map_err(|e| anyhow!("cannot size the tail calls' map: {e}"))?;
    }
    if !plan.arg_filters.is_empty() {
        open.maps
            .filters
            .set_max_entries(plan.ids().max(1))
            .map_err(|e| anyhow!("cannot size the --filter map: {e}"))?;
    }
    if plan.settings.record_min_ns.is_some() {
        open.maps
            .records
            .set_max_entries(record_buffer_size()?)
            .map_err(|e| anyhow!("cannot size the records' ring buffer: {e}"))?;
    } else {
        skip_record_maps(&mut open)?;
    }
    // The uprobe programs the plan uses, with the attach type of the links
    // they will have (tachy.bpf.c): set before load, since the kernel binds
    // the cookie helper to it then.
    for mut prog in open.open_object_mut().progs_mut() {
        let used = groups.iter().any(|g| prog.name() == g.program.name());
        prog.set_autoload(used);
        if used && multi {
            prog.set_attach_type(libbpf_rs::ProgramAttachType::TraceUprobeMulti);
        }
    }
    let kfuncs = plan.kernel_functions().next().is_some();
    let syscalls = plan.syscalls().next().is_some();
    // tachy_fentry and tachy_fexit are loaded in instances of their own
    // (attach_fentry).
    for (p, on) in [
        (&mut open.progs.tachy_fork, plan.settings.follow),
        (&mut open.progs.tachy_kentry, kfuncs),
        (&mut open.progs.tachy_kexit, kfuncs),
        (&mut open.progs.tachy_sys_enter, syscalls),
        (&mut open.progs.tachy_sys_exit, syscalls),
        (&mut open.progs.tachy_thread_exit, true),
        (&mut open.progs.tachy_switch, plan.settings.cpu),
        (&mut open.progs.tachy_wakeup, plan.settings.cpu),
    ] {
        p.set_autoload(on);
    }
    open.load().map_err(load_error)
}

/// Without --record-slower-than the records' maps are not created: the
/// code that uses them is dead, and the verifier drops it.
fn skip_record_maps(open: &mut skel::OpenTachySkel<'_>) -> Result<()> {
    let m = &mut open.maps;
    for map in [
        &mut m.records,
        &mut m.rec_lost,
        &mut m.rec_buf,
        &mut m.rec_args,
    ] {
        map.set_autocreate(false)
            .map_err(|e| anyhow!("cannot set up the BPF maps: {e}"))?;
    }
    Ok(())
}

/// The loaded program that runs probes of `p`.
fn uprobe_program<'a>(skel: &'a TachySkel<'_>, p: Program) -> Result<libbpf_rs::ProgramMut<'a>> {
    skel.object()
        .progs_mut()
        .find(|prog| prog.name() == p.name())
        .with_context(|| format!("the BPF object has no program {}", p.name()))
}

/// Groups the kernel keeps for --by (besides each function's "other"):
/// `encode::BY_GROUPS`, or TACHY_BY_GROUPS from the environment (a smaller map
/// shows what happens when it fills). Each takes ~7.8 KiB, allocated when
/// the group first counts a call.
fn groups_max() -> u32 {
    std::env::var("TACHY_BY_GROUPS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&n| (1..=1 << 20).contains(&n))
        .unwrap_or(encode::BY_GROUPS)
}

/// Whether the kernel has uprobe_multi links (Linux 6.6, or a kernel they
/// were backported to): its BTF then has their link type. Read from the
/// kernel rather than from its version, which backports make lie.
/// TACHY_NO_UPROBE_MULTI turns them off.
fn uprobe_multi_supported() -> bool {
    if std::env::var_os("TACHY_NO_UPROBE_MULTI").is_some() {
        return false;
    }
    kernel_has_struct("bpf_uprobe_multi_link")
}

/// Whether the running kernel's BTF defines `struct name`.
fn kernel_has_struct(name: &str) -> bool {
    libbpf_rs::btf::Btf::from_vmlinux().is_ok_and(|btf| {
        btf.type_by_name::<libbpf_rs::btf::types::Struct<'_>>(name)
            .is_some()
    })
}

/// Writes the plan's settings into the program's read-only data; `kfunc_id`
/// is the function an fentry/fexit instance counts as.
fn configure(open: &mut skel::OpenTachySkel<'_>, plan: &Plan, kfunc_id: u32) -> Result<()> {
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("BPF program has no settings section")?;
    ro.nfuncs = plan.ids();
    // The BPF side reads 0 as "no filter".
    ro.filter_tid = plan.settings.filter_tid.unwrap_or(0);
    ro.min_ns = plan.settings.min_ns.unwrap_or(0);
    ro.max_ns = plan.settings.max_ns.unwrap_or(0);
    ro.outermost = plan.settings.outermost;
    ro.unit_ns = plan.settings.unit_ns.max(1);
    ro.nested = !plan.sites.is_empty();
    ro.filter_tgid = plan.pid.unwrap_or(0);
    ro.follow = plan.settings.follow || !plan.pids.is_empty();
    if let Some((id, level)) = plan.settings.cgroup {
        ro.filter_cgroup = id;
        ro.cgroup_level = level;
    }
    ro.count_procs = plan.settings.count_procs;
    ro.cpu = plan.settings.cpu;
    ro.cpu_hist = plan.settings.cpu_hist;
    ro.cpu_sys = plan.settings.cpu && plan.syscalls().next().is_some();
    ro.kfunc_id = kfunc_id;
    ro.arg_filter = !plan.arg_filters.is_empty();
    if let Some(l) = plan.go_layout {
        ro.go_stack_lo = l.stack_lo;
        ro.go_stack_hi = l.stack_hi;
    }
    for (slot, key) in ro.by_kind.iter_mut().zip(&plan.settings.by) {
        *slot = by_kind(key);
    }
    ro.by_entry = plan.settings.by.iter().any(|k| k.read_at_entry());
    ro.by_arg = !plan.by_args.is_empty();
    if plan.settings.by.contains(&ByKey::Goroutine) {
        ro.go_goid = plan.go_layout.and_then(|l| l.goid).unwrap_or(0);
    }
    ro.record = plan.settings.record_min_ns.is_some();
    ro.record_min_ns = plan.settings.record_min_ns.unwrap_or(0);
    Ok(())
}

/// A `--by` key's number on the BPF side.
fn by_kind(key: &ByKey) -> types::tachy_by_kind {
    match key {
        ByKey::Caller => types::tachy_by_kind::TACHY_BY_CALLER,
        ByKey::Tid => types::tachy_by_kind::TACHY_BY_TID,
        ByKey::Pid => types::tachy_by_kind::TACHY_BY_PID,
        ByKey::Arg(_) => types::tachy_by_kind::TACHY_BY_ARG,
        ByKey::Goroutine => types::tachy_by_kind::TACHY_BY_GOID,
    }
}

/// Why fentry/fexit is not even tried, if it is not: it needs the kernel's
/// BTF. TACHY_NO_FENTRY=1 forces kprobes (to compare the two).
fn fentry_unavailable() -> Option<&'static str> {
    if std::env::var_os("TACHY_NO_FENTRY").is_some() {
        return Some("disabled by TACHY_NO_FENTRY");
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("the kernel has no BTF, /sys/kernel/btf/vmlinux");
    }
    None
}

/// Why fentry/fexit failed on a kernel function.
struct FentryError {
    text: String,
    /// Refused for every function (no permission, no support), not for
    /// this one alone (not in BTF, not traceable).
    refuses_all: bool,
}

impl FentryError {
    /// The error of the libbpf-rs call that just failed.
    fn of(e: libbpf_rs::Error, context: &str) -> FentryError {
        let e = KernelError::last(e);
        FentryError {
            text: format!("{context}{}", short_errno(e.libbpf())),
            refuses_all: e.refusal() == Refusal::NotSupported,
        }
    }
}

/// A libbpf error as the errno it carries ("Operation not permitted"),
/// without libbpf's context.
fn short_errno(e: &libbpf_rs::Error) -> String {
    let s = e.to_string();
    let s = match s.rsplit_once(": ") {
        Some((_, tail)) if !tail.is_empty() => tail,
        _ => &s,
    };
    match s.split_once(" (os error") {
        Some((msg, _)) => msg.to_string(),
        None => s.to_string(),
    }
}

fn load_error(e: libbpf_rs::Error) -> anyhow::Error {
    // EPERM and EACCES are both PermissionDenied; the verifier refuses a
    // program with EACCES too, so only missing capabilities make the hint.
    if e.kind() == libbpf_rs::ErrorKind::PermissionDenied && !missing_capabilities().is_empty() {
        anyhow!("the kernel refused to load the BPF program ({e}): run tachy as root, or with CAP_BPF and CAP_PERFMON")
    } else {
        anyhow!("the kernel refused to load the BPF program: {e}")
    }
}

/// Whether the kernel refused a probe for the instruction under it rather
/// than for the process or the caller.
fn kernel_refused(e: &KernelError) -> bool {
    e.refusal() == Refusal::Instruction
}

/// Attaches a batch of (file offset, cookie) sites as one link.
type AttachBatch<'a, L> = dyn Fn(&[(u64, u64)]) -> Result<L, KernelError> + 'a;

/// Attaches `sites` as one link; if the kernel refuses one of them, which
/// fails the whole link, attaches each half the same way, so that only the
/// refused sites are left out (their offsets go to `refused`). A batch of
/// n sites with k refused takes about 2k log2(n) attempts. When every site
/// is refused, the refusal is about the link rather than an instruction:
/// it is the error.
fn attach_dropping_refused<L>(
    attach: &AttachBatch<'_, L>,
    sites: &[(u64, u64)],
    refused: &mut Vec<u64>,
) -> Result<Vec<L>, KernelError> {
    let first = match attach(sites) {
        Ok(link) => return Ok(vec![link]),
        Err(e) if kernel_refused(&e) && sites.len() > 1 => e,
        Err(e) => return Err(e),
    };
    let (a, b) = sites.split_at(sites.len() / 2);
    let mut mine = Vec::new();
    let mut links = bisect(attach, a, &mut mine)?;
    links.extend(bisect(attach, b, &mut mine)?);
    if mine.len() == sites.len() {
        return Err(first);
    }
    refused.extend(mine);
    Ok(links)
}

/// One step of [`attach_dropping_refused`].
fn bisect<L>(
    attach: &AttachBatch<'_, L>,
    sites: &[(u64, u64)],
    refused: &mut Vec<u64>,
) -> Result<Vec<L>, KernelError> {
    if sites.is_empty() {
        return Ok(Vec::new());
    }
    match attach(sites) {
        Ok(link) => Ok(vec![link]),
        Err(e) if kernel_refused(&e) => {
            if let [(offset, _)] = sites {
                refused.push(*offset);
                return Ok(Vec::new());
            }
            let (a, b) = sites.split_at(sites.len() / 2);
            let mut links = bisect(attach, a, refused)?;
            links.extend(bisect(attach, b, refused)?);
            Ok(links)
        }
        Err(e) => Err(e),
    }
}

fn attach_error(e: KernelError) -> anyhow::Error {
    match e.refusal() {
        Refusal::ProcessGone => anyhow::Error::new(ProcessGone),
        _ => anyhow!("{e}"),
    }
}

/// Checks, before any BPF work, that this kernel and this user can attach uprobes.
pub fn check_environment() -> Result<()> {
    if !std::path::Path::new("/sys/bus/event_source/devices/uprobe").exists() {
        bail!("this kernel has no uprobes (CONFIG_UPROBE_EVENTS is off): tachy cannot trace user functions here");
    }
    if !std::path::Path::new("/sys/fs/bpf").exists()
        && !std::path::Path::new("/proc/sys/kernel/unprivileged_bpf_disabled").exists()
    {
        bail!("this kernel has no BPF support (CONFIG_BPF_SYSCALL is off)");
    }
    let missing = missing_capabilities();
    if !missing.is_empty() {
        bail!(
            "tracing needs root, or the capabilities CAP_BPF and CAP_PERFMON (missing: {})",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Capabilities needed to load tracing programs and attach uprobes that
/// this process lacks.
pub fn missing_capabilities() -> Vec<&'static str> {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return vec![];
    };
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |c: u32| eff & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) {
        return vec![];
    }
    let mut m = vec![];
    if !has(CAP_BPF) {
        m.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        m.push("CAP_PERFMON");
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch with refused sites attaches all the others in a few
    /// links and names the refused ones; a batch refused whole (every site
    /// refused) is an error, as is any other failure.
    #[test]
    fn refused_sites_are_found_by_halving() {
        let refuse = |bad: Vec<u64>| {
            move |sites: &[(u64, u64)]| -> Result<Vec<u64>, KernelError> {
                if sites.iter().any(|s| bad.contains(&s.0)) {
                    Err(KernelError::of_errno(524))
                } else {
                    Ok(sites.iter().map(|s| s.0).collect())
                }
            }
        };
        let sites: Vec<(u64, u64)> = (0..1000).map(|o| (o * 4, o)).collect();
        let attach = refuse(vec![40, 3000, 3996]);
        let mut refused = Vec::new();
        let links = attach_dropping_refused(&attach, &sites, &mut refused).unwrap();
        assert_eq!(refused, [40, 3000, 3996]);
        let mut attached: Vec<u64> = links.into_iter().flatten().collect();
        attached.sort_unstable();
        assert_eq!(attached.len(), 997);
        assert!(links_len_is_small(&attach, &sites));

        let all = refuse((0..10).map(|o| o * 4).collect());
        let mut refused = Vec::new();
        assert!(attach_dropping_refused(&all, &sites[..10], &mut refused).is_err());
        assert!(refused.is_empty());

        let gone = |_: &[(u64, u64)]| -> Result<(), KernelError> {
            Err(KernelError::of_errno(libc::ESRCH))
        };
        assert!(attach_dropping_refused(&gone, &sites, &mut refused).is_err());
    }

    /// Halving keeps the links few: about two per refused site per level.
    fn links_len_is_small(attach: &AttachBatch<'_, Vec<u64>>, sites: &[(u64, u64)]) -> bool {
        let mut refused = Vec::new();
        let links = attach_dropping_refused(attach, sites, &mut refused).unwrap();
        links.len() <= 2 * refused.len() * 10
    }

    /// Every probe kind has its program in the BPF object, a uprobe (its
    /// attach type is chosen at load).
    #[test]
    fn every_probe_kind_has_its_program() {
        let mut storage = MaybeUninit::uninit();
        let open = TachySkelBuilder::default().open(&mut storage).unwrap();
        for p in Program::ALL {
            let prog = open
                .open_object()
                .progs()
                .find(|prog| prog.name() == p.name())
                .unwrap_or_else(|| panic!("no program {}", p.name()));
            assert_eq!(
                prog.prog_type(),
                libbpf_rs::ProgramType::Kprobe,
                "{}",
                p.name()
            );
        }
    }

    /// This kernel has uprobe_multi links (DESIGN.md: 6.18), found in its
    /// BTF; a type it does not have is not found.
    #[test]
    fn kernel_btf_tells_uprobe_multi() {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            eprintln!("skipped: kernel_btf_tells_uprobe_multi: the kernel has no BTF");
            return;
        }
        assert!(kernel_has_struct("bpf_uprobe_multi_link"));
        assert!(!kernel_has_struct("tachy_no_such_struct"));
    }

    /// The sizes tachy.h states, in the comments that justify its limits.
    #[test]
    fn per_thread_state_is_as_tachy_h_says() {
        assert_eq!(std::mem::size_of::<types::tachy_thread>(), 33856);
    }

    #[test]
    fn counters_fit_an_eighth_of_memory() {
        let size = std::mem::size_of::<types::tachy_stats>();
        assert_eq!(size, 7920);
        // sqlite3_step at --depth 2 (513 nodes) on 2 CPUs of 24 GiB: 16 MiB.
        assert!(counters_fit(513, 2, size, Some(24 << 30)).is_ok());
        // The same on 64 CPUs and 2 GiB: 496 MiB, more than 256 MiB.
        let e = counters_fit(513, 64, size, Some(2 << 30)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the counters of 513 timed functions and call sites would take 496 MiB of kernel \
             memory (64 CPUs), more than the 256 MiB allowed here: time fewer functions or call \
             sites (a lower --depth)"
        );
        // Memory unknown: 4 GiB.
        assert!(counters_fit(4096, 64, size, None).is_ok());
        assert!(counters_fit(4096, 128, size, None).is_err());
    }
}
