//! Loading: the plan's settings written into the program, the maps sized
//! for it and filled, and only the programs it uses loaded, with the attach
//! type of the links they will have.

use std::mem::MaybeUninit;

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};

use super::read::record_buffer_size;
use super::skel::{self, types, TachySkel, TachySkelBuilder};
use super::{missing_capabilities, Live, Tracer};
use crate::plan::by::ByKey;
use crate::plan::encode::{self, LinkGroup, Program};
use crate::plan::{Plan, ProbeTime};

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

/// The ids the counters are sized for: the plan's, or, when it may grow
/// while attached ([`super::Live::room`]), the room asked for (at most
/// `MAX_NODES`) where the machine's memory allows it.
fn counter_ids(plan: &Plan, room: Option<u32>, cpus: usize, size: usize) -> Result<u32> {
    let ids = plan.ids();
    if let Some(r) = room.map(|r| r.clamp(ids, crate::plan::MAX_NODES as u32)) {
        if counters_fit(r, cpus, size, mem_total()).is_ok() {
            return Ok(r);
        }
    }
    counters_fit(ids, cpus, size, mem_total())?;
    Ok(ids)
}

/// Opens the BPF program, writes the plan's settings, and loads the
/// programs the plan uses, no other (with room to grow, the call sites'
/// programs too); returns it with the ids its counters are sized for.
pub(super) fn load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    plan: &Plan,
    live: &Live,
    groups: &[LinkGroup],
    multi: bool,
) -> Result<(TachySkel<'obj>, u32)> {
    let mut open = TachySkelBuilder::default()
        .open(storage)
        .map_err(|e| anyhow!("cannot open the BPF program: {e}"))?;
    configure(&mut open, plan, live.pid, 0)?;
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1);
    // --cpu --hist adds the parts' histograms beside each counter.
    let parts = if plan.settings.cpu_hist {
        std::mem::size_of::<types::tachy_parts>()
    } else {
        0
    };
    let ids = counter_ids(
        plan,
        live.room,
        cpus,
        std::mem::size_of::<types::tachy_stats>() + parts,
    )?;
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.nfuncs = ids;
    }
    open.maps
        .stats
        .set_max_entries(2 * ids)
        .map_err(|e| anyhow!("cannot size the BPF counters: {e}"))?;
    if !plan.settings.by.is_empty() {
        // Each function's "other" group of both intervals has its place.
        open.maps
            .groups
            .set_max_entries(groups_max() + 2 * ids)
            .map_err(|e| anyhow!("cannot size the groups of --by: {e}"))?;
    }
    if plan.settings.cpu_hist {
        open.maps
            .part_hist
            .set_max_entries(2 * ids)
            .map_err(|e| anyhow!("cannot size the BPF counters: {e}"))?;
    }
    open.maps
        .corr
        .set_max_entries(ids.max(1))
        .map_err(|e| anyhow!("cannot size the BPF counters: {e}"))?;
    if !plan.by_args.is_empty() {
        open.maps
            .by_args
            .set_max_entries(ids.max(1))
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
            .set_max_entries(ids.max(1))
            .map_err(|e| anyhow!("cannot size the --filter map: {e}"))?;
    }
    if plan.settings.records() {
        open.maps
            .records
            .set_max_entries(record_buffer_size(plan.stack)?)
            .map_err(|e| anyhow!("cannot size the records' ring buffer: {e}"))?;
        open.maps
            .rec_lost
            .set_max_entries(ids.max(1))
            .map_err(|e| anyhow!("cannot size the records' ring buffer: {e}"))?;
    } else {
        skip_record_maps(&mut open)?;
    }
    // The uprobe programs the plan uses, with the attach type of the links
    // they will have (tachy.bpf.c): set before load, since the kernel binds
    // the cookie helper to it then.
    let go = plan.items.iter().any(|i| i.is_go());
    let growing = |p: Program| {
        live.room.is_some()
            && match p {
                Program::Site | Program::SiteEnd => !go,
                Program::GoSite | Program::GoSiteEnd => go,
                _ => false,
            }
    };
    for mut prog in open.open_object_mut().progs_mut() {
        let used = groups.iter().any(|g| prog.name() == g.program.name())
            || Program::ALL
                .iter()
                .any(|&p| growing(p) && prog.name() == p.name());
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
    let skel = open.load().map_err(load_error)?;
    Ok((skel, ids))
}

/// Without --record-slower-than the records' maps are not created: the
/// code that uses them is dead, and the verifier drops it.
pub(super) fn skip_record_maps(open: &mut skel::OpenTachySkel<'_>) -> Result<()> {
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

/// Groups the kernel keeps for --by (besides each function's "other"):
/// `encode::BY_GROUPS`, or TACHY_BY_GROUPS from the environment (a smaller map
/// shows what happens when it fills). Each takes ~7.8 KiB, allocated when
/// the group first counts a call.
pub(super) fn groups_max() -> u32 {
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
pub(super) fn uprobe_multi_supported() -> bool {
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

/// Writes the plan's settings into the program's read-only data; `pid` is
/// the process counted ([`super::Live::pid`]), `kfunc_id` the function an
/// fentry/fexit instance counts as.
pub(super) fn configure(
    open: &mut skel::OpenTachySkel<'_>,
    plan: &Plan,
    pid: Option<u32>,
    kfunc_id: u32,
) -> Result<()> {
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
    ro.filter_tgid = pid.unwrap_or(0);
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
    ro.record = plan.settings.records();
    // --by stack groups every call from its record.
    ro.record_min_ns = match plan.settings.by.contains(&ByKey::Stack) {
        true => 0,
        false => plan.settings.record_min_ns.unwrap_or(0),
    };
    ro.stack_how = match plan.stack {
        None => types::tachy_stack_how::TACHY_STACK_NONE,
        Some(crate::plan::stack::StackHow::FramePointers) => types::tachy_stack_how::TACHY_STACK_FP,
        Some(crate::plan::stack::StackHow::Copy) => types::tachy_stack_how::TACHY_STACK_COPY,
    };
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
        ByKey::Retval => types::tachy_by_kind::TACHY_BY_RETVAL,
        // Grouped in user space, from the records.
        ByKey::Stack => types::tachy_by_kind::TACHY_BY_NONE,
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

impl<'obj> Tracer<'obj> {
    /// Tells the kernel which traced functions can tail-call which.
    pub(super) fn fill_tail_pairs(&mut self, plan: &Plan) -> Result<()> {
        for key in encode::tail_pairs(plan) {
            self.skel
                .maps
                .tail_pairs
                .update(&key.to_ne_bytes(), &[1u8], MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up the tail calls' map: {e}"))?;
        }
        Ok(())
    }

    /// Tells the kernel which node a site probe times under which parent.
    pub(super) fn fill_site_nodes(&mut self, plan: &Plan) -> Result<()> {
        for (key, node) in encode::site_nodes(plan) {
            self.skel
                .maps
                .site_nodes
                .update(&key.to_ne_bytes(), &node, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot set up the call sites: {e}"))?;
        }
        Ok(())
    }

    /// Tells the kernel each item's `--filter` terms.
    pub(super) fn fill_filters(&mut self, plan: &Plan) -> Result<()> {
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
    pub(super) fn fill_by_args(&mut self, plan: &Plan) -> Result<()> {
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
    pub(super) fn fill_probe_time(&mut self, probe_time: &[ProbeTime]) -> Result<()> {
        for (id, p) in probe_time.iter().enumerate() {
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
    pub(super) fn fill_groups(&mut self) -> Result<()> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::encode::Program;

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
}
