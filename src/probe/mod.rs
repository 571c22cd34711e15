//! The only module that talks to the kernel's BPF interface: loads the BPF
//! program with the plan's settings, attaches its probes, reads and clears
//! the counters. Dropping a `Tracer` detaches everything; the links are file
//! descriptors, so the kernel removes them even if tachy is killed.
//!
//! By concern: `load` (the plan's settings, the maps sized and filled,
//! which programs load and with which attach type), `uprobes` (attaching
//! the plan's uprobes, leaving out those the kernel refuses), `kernel`
//! (kernel functions), `read` (counters, groups, records) and `error` (the
//! kernel's refusals, told apart by errno).

use std::mem::MaybeUninit;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use libbpf_rs::skel::Skel;
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::plan::encode;
use crate::plan::{Plan, ProbeTime, MAX_NODES};
use crate::report::hist::NBUCKETS;

mod error;
mod kernel;
mod load;
mod read;
mod sites;
mod uprobes;

pub use error::{ProcessGone, Refusal};
pub use read::{record_buffer_size, KernelRecord, KernelStack, RecordReader};

use load::{groups_max, load, uprobe_multi_supported};

mod skel {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/tachy.skel.rs"));
}

use skel::{types, TachySkel};

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

// SAFETY: as tachy_stats: integers only, no padding.
unsafe impl plain::Plain for types::tachy_group_key {}

// SAFETY: as tachy_stats: integers and a byte array.
unsafe impl plain::Plain for types::tachy_group {}
// SAFETY: plain integers and arrays of them, as tachy.h defines them.
unsafe impl plain::Plain for types::tachy_callee_key {}
// SAFETY: arrays of integers and an integer, as tachy.h defines them.
unsafe impl plain::Plain for types::tachy_callees {}

// SAFETY: as tachy_stats: integers and a byte array only.
unsafe impl plain::Plain for types::tachy_record {}

// Array sizes of tachy.h, as the skeleton has them, are those of the Rust
// side: these do not compile otherwise.
const _: fn(&types::tachy_stats) -> &[u64; NBUCKETS] = |s| &s.buckets;
const _: fn(&types::tachy_thread) -> &[u16; MAX_NODES] = |t| &t.pend_of;
const _: fn(&types::tachy_group_key) -> &[u64; crate::plan::by::MAX_KEYS] = |k| &k.val;

/// What an attach needs beside the finished plan, known only once the run
/// starts: which process the command tachy started became, and the probes'
/// own time as measured on this machine. The plan is never changed to
/// carry them.
#[derive(Clone, Debug, Default)]
pub struct Live {
    /// The process the links and counts are limited to: the plan's own
    /// (`-p PID`), or the command tachy started; `None` for every process.
    pub pid: Option<u32>,
    /// Per id: the probes' own time the kernel subtracts (empty: none, as
    /// with `--raw`). See `crate::calibrate`.
    pub probe_time: Vec<ProbeTime>,
    /// Call-site slots whose probes are not attached at the start: the
    /// overhead budget attaches them when an estimate shows room
    /// (`Tracer::resume_site`).
    pub held_back: std::collections::BTreeSet<u32>,
    /// The ids the counters have room for, when the plan may grow while
    /// attached ([`Tracer::grow`]: the explorer's drill-downs); the call
    /// sites' programs are then loaded even where the plan has none yet.
    /// `None`: the plan's own ids.
    pub room: Option<u32>,
}

impl Live {
    /// A run of `plan` in the process it names, or in `spawned`, the
    /// command tachy started for it; `probe_time` as [`Live::probe_time`].
    pub fn new(plan: &Plan, spawned: Option<u32>, probe_time: Vec<ProbeTime>) -> Live {
        Live {
            pid: spawned.or(plan.pid),
            probe_time,
            held_back: Default::default(),
            room: None,
        }
    }
}

pub struct Tracer<'obj> {
    skel: TachySkel<'obj>,
    /// The process the links and counts are limited to ([`Live::pid`]).
    pid: Option<u32>,
    links: Vec<Link>,
    /// The ids the counters have room for (the stride of their two
    /// halves), and the plan's, which are read.
    nfuncs: u32,
    ids: u32,
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
    /// The records lost per function id, as last read.
    rec_lost_seen: Vec<u64>,
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
    /// The pid uprobe links are limited to (-1: every process), and the
    /// objects opened inside a process's root, held to attach again.
    link_pid: i32,
    held: Vec<Option<std::fs::File>>,
    /// Per call site (slot): its probes' links, apart from `links`.
    sites: std::collections::BTreeMap<u32, sites::SiteLinks>,
    /// Closes the links of the sites detached during the run.
    reaper: sites::Reaper,
    /// Calls entered per process, as last read (`take_procs`).
    procs_seen: std::collections::HashMap<u32, u64>,
    /// Calls through indirect call sites per (node, tgid, callee address;
    /// None: the others), as last read (`take_callees`).
    callees_seen: std::collections::HashMap<(u32, u32, Option<u64>), u64>,
}

impl Drop for Tracer<'_> {
    /// Closes every link side by side (see `sites::Reaper`): each waits
    /// for the kernel's RCU grace periods, tens of milliseconds here, and
    /// the 1,024 links of a nested plan of 512 sites took 50 s to close
    /// one after another.
    fn drop(&mut self) {
        let mut all = std::mem::take(&mut self.links);
        for (_, site) in std::mem::take(&mut self.sites) {
            all.extend(site.links.into_iter().flat_map(|(_, l)| l));
        }
        self.reaper.close(all);
    }
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
        live: &Live,
        verbose: bool,
        attached: &AtomicUsize,
    ) -> Result<Tracer<'obj>> {
        silence_libbpf(verbose);
        let groups = encode::link_groups(plan);
        let multi = uprobe_multi_supported();
        let start = Instant::now();
        let (skel, nfuncs) = load(storage, plan, live, &groups, multi)?;
        let load_time = start.elapsed();
        let mut t = Tracer {
            skel,
            pid: live.pid,
            links: Vec::new(),
            nfuncs,
            ids: plan.ids(),
            cpu: plan.settings.cpu,
            cpu_hist: plan.settings.cpu_hist,
            filtered: vec![false; plan.ids() as usize],
            groups_max: if plan.settings.by.is_empty() {
                0
            } else {
                groups_max()
            },
            last_gen: 0,
            records: plan.settings.records(),
            rec_lost_seen: vec![0; plan.ids().max(1) as usize],
            multi,
            thread_exit: false,
            kernel_with: None,
            load_time,
            attach_time: Duration::ZERO,
            refused: Vec::new(),
            link_pid: -1,
            held: Vec::new(),
            sites: Default::default(),
            reaper: Default::default(),
            procs_seen: Default::default(),
            callees_seen: Default::default(),
        };
        // The processes counted through the followed set: several -p, or
        // one -p with --follow (and its forks).
        let mut counted = plan.pids.clone();
        if let (true, Some(pid)) = (plan.settings.follow, live.pid) {
            counted.push(pid);
        }
        if !counted.is_empty() {
            t.count_in(&counted, plan.settings.follow)?;
        }
        t.fill_site_nodes(plan)?;
        for &slot in &live.held_back {
            t.stop_site(plan, slot);
        }
        t.fill_tail_pairs(plan)?;
        t.fill_probe_time(&live.probe_time)?;
        t.fill_filters(plan)?;
        t.fill_by_args(plan)?;
        t.fill_groups()?;
        // Before any frame can open: its switches are then all seen.
        if plan.settings.cpu {
            t.attach_scheduler()?;
        }
        t.attach_uprobes(plan, &groups, attached, &live.held_back)?;
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
            + self
                .sites
                .values()
                .flat_map(|s| &s.links)
                .map(|(_, l)| l.len())
                .sum::<usize>()
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

    /// The sizes tachy.h states, in the comments that justify its limits.
    #[test]
    fn per_thread_state_is_as_tachy_h_says() {
        assert_eq!(std::mem::size_of::<types::tachy_thread>(), 34888);
    }
}
