//! Reading what the kernel counted: the counters of each interval (read,
//! then cleared), the groups of `--by`, the processes counted, and the
//! records of `--record-slower-than` from their ring buffer.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::skel::types;
use super::Tracer;
use crate::report::groups::{FilePlace, RawGroup};
use crate::report::{Counts, CpuSplit, Hist};

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
    /// The return register at the exit, where the exit knows it.
    pub ret: Option<u64>,
    pub pid: u32,
    pub tid: u32,
    /// The function (item) id.
    pub id: u32,
    pub comm: String,
    /// `tachy nested`: (node id, calls, ns) of each site that ran in the
    /// call, when the call's sites are its own.
    pub sites: Option<Vec<(u32, u32, u64)>>,
    pub more_sites: u32,
    /// `--stack`: the call's user stack as the kernel took it.
    pub stack: Option<KernelStack>,
}

/// A recorded call's user stack as the kernel took it (tachy.h, enum
/// tachy_stack_how).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelStack {
    /// Return addresses, the caller's first.
    Frames(Vec<u64>),
    /// The caller's return address, SP after the return and frame pointer,
    /// and the stack's bytes from `base` up.
    Copy {
        ip: u64,
        sp: u64,
        bp: u64,
        base: u64,
        bytes: Vec<u8>,
    },
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
        let at = std::mem::offset_of!(types::tachy_record, stack);
        let len = (r.stack_len as usize).min(bytes.len().saturating_sub(at));
        let raw = &full[at..at + len];
        let stack = if r.stack_how == types::tachy_stack_how::TACHY_STACK_FP {
            Some(KernelStack::Frames(
                raw.chunks_exact(8)
                    .filter_map(|c| Some(u64::from_ne_bytes(c.try_into().ok()?)))
                    .collect(),
            ))
        } else if r.stack_how == types::tachy_stack_how::TACHY_STACK_COPY {
            Some(KernelStack::Copy {
                ip: r.stack_ip,
                sp: r.stack_sp,
                bp: r.stack_bp,
                base: r.stack_base,
                bytes: raw.to_vec(),
            })
        } else {
            None
        };
        Some(KernelRecord {
            end_ns: r.end_ns,
            dur_ns: r.dur_ns,
            parts: (r.flags.0 & REC_CPU != 0).then_some((r.blocked_ns, r.runq_ns)),
            args: r.args,
            syscall: r.flags.0 & REC_SYSCALL != 0,
            ret: (r.flags.0 & REC_RET != 0).then_some(r.ret),
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
            stack,
        })
    }
}

// enum tachy_rec_flag of tachy.h, as the skeleton has it.
const REC_CPU: u32 = types::tachy_rec_flag::TACHY_REC_CPU.0;
const REC_SYSCALL: u32 = types::tachy_rec_flag::TACHY_REC_SYSCALL.0;
const REC_SITESOK: u32 = types::tachy_rec_flag::TACHY_REC_SITESOK.0;
const REC_RET: u32 = types::tachy_rec_flag::TACHY_REC_RET.0;

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

    /// Waits up to `timeout` for the kernel to wake the reader (the
    /// buffer filling up), reading what is there when it does; true when
    /// records arrived.
    pub fn wait(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.ring
            .poll(timeout)
            .map_err(|e| anyhow!("cannot read the records' ring buffer: {e}"))?;
        Ok(!self.got.borrow().is_empty())
    }
}

/// The ring buffer's size: TACHY_RECORD_BUFFER bytes (a power of two of at
/// least a page; the tests make it small to overflow it), else 1 MiB, or
/// 16 MiB when records carry stack copies (12 KiB each).
pub fn record_buffer_size(stack: Option<crate::plan::stack::StackHow>) -> Result<u32> {
    let default: u32 = match stack {
        Some(crate::plan::stack::StackHow::Copy) => 16 << 20,
        _ => 1 << 20,
    };
    let Some(v) = std::env::var_os("TACHY_RECORD_BUFFER") else {
        return Ok(default);
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

impl<'obj> Tracer<'obj> {
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
            // The kernel's counts only grow: what is new is the difference
            // from the last read. (Removing an entry as it is read lost the
            // calls a probe added between the copy and the removal, through
            // the pointer it had looked up: 39 of 40 in a clean CI run.)
            let Ok(Some(v)) = map.lookup(&k, MapFlags::ANY) else {
                continue;
            };
            let Ok(n) = <[u8; 8]>::try_from(v.as_slice()) else {
                continue;
            };
            let (tgid, n) = (u32::from_ne_bytes(b), u64::from_ne_bytes(n));
            let last = self.procs_seen.insert(tgid, n).unwrap_or(0);
            // An entry the LRU map evicted and made again starts from 1.
            let new = if n >= last { n - last } else { n };
            if new > 0 {
                out.push((tgid, new));
            }
        }
        out.sort_unstable();
        out
    }

    /// The calls made through indirect call sites since the last call, per
    /// callee, as (node, tgid, the call's address, callee address, calls);
    /// the callee's address is None for calls to callees beyond the ones
    /// the kernel counts apart.
    pub fn take_callees(&mut self) -> Vec<(u32, u32, u64, Option<u64>, u64)> {
        let map = &self.skel.maps.callees;
        let keys: Vec<Vec<u8>> = map.keys().collect();
        let mut out = Vec::new();
        for k in keys {
            let mut key = types::tachy_callee_key::default();
            let mut v = types::tachy_callees::default();
            let Ok(Some(raw)) = map.lookup(&k, MapFlags::ANY) else {
                continue;
            };
            if plain::copy_from_bytes(&mut key, &k).is_err()
                || plain::copy_from_bytes(&mut v, &raw).is_err()
            {
                continue;
            }
            // The kernel's counts only grow: what is new is the difference
            // from the last read (as take_procs).
            let each = v.addr.iter().zip(&v.count).map(|(&a, &n)| (Some(a), n));
            for (addr, n) in each.chain([(None, v.other)]) {
                if addr == Some(0) || n == 0 {
                    continue;
                }
                let last = self
                    .callees_seen
                    .insert((key.node, key.tgid, addr), n)
                    .unwrap_or(0);
                if n > last {
                    out.push((key.node, key.tgid, v.ip, addr, n - last));
                }
            }
        }
        out.sort_unstable();
        out
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
        let mut out = Vec::with_capacity(self.ids as usize);
        let map = &self.skel.maps.stats;
        let parts = &self.skel.maps.part_hist;
        for id in 0..self.ids {
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
                    probe_add_ns: 0,
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
                    callees: Vec::new(),
                    estimated: false,
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

    /// Records the ring buffer had no room for since the last call, by
    /// function id. The kernel's counts only grow: the difference from
    /// the last read is exact, whenever a record is lost.
    pub fn take_records_lost(&mut self) -> Result<Vec<u64>> {
        if !self.records {
            return Ok(Vec::new());
        }
        let map = &self.skel.maps.rec_lost;
        let ids = self.rec_lost_seen.len() as u32;
        let mut out = Vec::with_capacity(ids as usize);
        for id in 0..ids {
            let per_cpu = map
                .lookup_percpu(&id.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| anyhow!("cannot read the records lost: {e}"))?
                .unwrap_or_default();
            let total: u64 = per_cpu
                .iter()
                .filter_map(|raw| raw.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()))
                .map(u64::from_ne_bytes)
                .sum();
            let seen = &mut self.rec_lost_seen[id as usize];
            out.push(total.saturating_sub(*seen));
            *seen = total;
        }
        Ok(out)
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
