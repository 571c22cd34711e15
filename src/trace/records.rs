//! The slow-call records of `--record-slower-than`: read from the kernel's
//! ring buffer as they arrive, named by the plan, handed to the sinks.

use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::Result;

use super::sink::Sink;
use std::collections::HashMap;

use super::stacks::Symbolizer;
use crate::naming::Namer;
use crate::plan::args::FuncArgs;
use crate::plan::by::ByKey;
use crate::plan::Plan;
use crate::probe;
use crate::report::groups::RawGroup;
use crate::report::hist::bucket_of;
use crate::report::records::{self, Record, RecordSite, Stack};
use crate::report::Counts;

/// Prints the records of `--record-slower-than` as they arrive.
pub struct Recorder {
    reader: probe::RecordReader,
    /// Per call site (index in plan.sites): its place in the tree, depth
    /// first, which orders a record's sites.
    rank: Vec<usize>,
    /// `--stack`: unwinds and names the records' stacks.
    stacks: Symbolizer,
    /// `--stack`: the process traced (`-p`, or the command tachy started).
    pid: Option<u32>,
    /// `--by stack`: the calls of each function per chain of callers
    /// since the groups were last taken.
    groups: HashMap<(u32, Vec<String>), Counts>,
}

impl Recorder {
    pub fn new(plan: &Plan, reader: probe::RecordReader, pid: Option<u32>) -> Recorder {
        let mut rank = vec![usize::MAX; plan.sites.len()];
        let mut next = 0;
        let mut stack: Vec<u32> = (0..plan.items.len() as u32).rev().collect();
        while let Some(id) = stack.pop() {
            if let Some(r) = plan.site_index(id).and_then(|i| rank.get_mut(i)) {
                *r = next;
                next += 1;
            }
            stack.extend(plan.children(id).iter().rev());
        }
        let mut stacks = Symbolizer::default();
        if plan.stack.is_some() {
            stacks.watch(pid.into_iter().chain(plan.pids.iter().copied()));
        }
        Recorder {
            reader,
            rank,
            stacks,
            pid,
            groups: HashMap::new(),
        }
    }

    /// Waits until `until`, printing records as the kernel wakes the
    /// reader to drain a filling buffer.
    pub fn wait(&mut self, plan: &Plan, sink: &mut dyn Sink, until: Instant) -> Result<()> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            if self.reader.wait(left)? {
                self.print(plan, sink)?;
            }
        }
    }

    /// Prints the records that arrived; returns how many.
    pub fn print(&mut self, plan: &Plan, sink: &mut dyn Sink) -> Result<u64> {
        if plan.stack.is_some() {
            // Their maps, while they run, name the stacks that arrive after
            // they exit.
            self.stacks
                .watch(self.pid.into_iter().chain(plan.pids.iter().copied()));
        }
        let got = self.reader.read()?;
        if plan.settings.by.contains(&ByKey::Stack) {
            for k in &got {
                self.group(plan, k);
            }
        }
        // With --by stack every call comes; those as slow as asked print.
        let Some(min) = plan.settings.record_min_ns else {
            return Ok(0);
        };
        let offset = realtime_offset();
        let records: Vec<Record> = got
            .iter()
            .filter(|k| k.dur_ns >= min)
            .map(|k| self.record(plan, k, offset))
            .collect();
        if records.is_empty() {
            return Ok(0);
        }
        sink.records(&records)?;
        Ok(records.len() as u64)
    }

    /// `--by stack`: counts a call in its function's group of its chain
    /// of callers, unless --slower-than/--faster-than leave it out (as the
    /// kernel leaves it out of other keys' groups).
    fn group(&mut self, plan: &Plan, k: &probe::KernelRecord) {
        let s = &plan.settings;
        let d = k.dur_ns;
        if s.min_ns.is_some_and(|m| d < m) || s.max_ns.is_some_and(|m| d > m) {
            return;
        }
        let Some(stack) = &k.stack else {
            return;
        };
        let chain: Vec<String> = self
            .stacks
            .frames(k.pid, stack)
            .into_iter()
            .map(|f| match f.inlined {
                true => format!("{} [inlined]", f.function),
                false => f.function,
            })
            .collect();
        let c = self.groups.entry((k.id, chain)).or_default();
        c.count += 1;
        c.total_ns += d;
        c.hist.buckets[bucket_of(d / s.unit_ns.max(1))] += 1;
    }

    /// `--by stack`: the groups counted since the last call, their chains
    /// named by `namer`.
    pub fn take_groups(&mut self, namer: &mut Namer) -> Vec<RawGroup> {
        let mut out: Vec<RawGroup> = self
            .groups
            .drain()
            .map(|((id, chain), counts)| RawGroup {
                id,
                vals: vec![namer.stack_key(chain)],
                counts,
                ..RawGroup::default()
            })
            .collect();
        out.sort_by_key(|g| (g.id, g.vals.clone()));
        out
    }

    fn record(&mut self, plan: &Plan, k: &probe::KernelRecord, offset: i128) -> Record {
        let wall = u64::try_from(i128::from(k.end_ns) + offset).unwrap_or(0);
        let sites = k.sites.as_ref().map(|list| {
            let mut v: Vec<(usize, RecordSite)> = list
                .iter()
                .filter_map(|&(node, count, ns)| {
                    let x = plan.site(node)?;
                    Some((
                        *self.rank.get(plan.site_index(node)?)?,
                        RecordSite {
                            name: x.site.name.clone(),
                            location: x.site.location.clone(),
                            level: x.level,
                            count,
                            ns,
                        },
                    ))
                })
                .collect();
            v.sort_by_key(|e| e.0);
            v.into_iter().map(|e| e.1).collect()
        });
        Record {
            time: UNIX_EPOCH + Duration::from_nanos(wall),
            pid: k.pid,
            tid: k.tid,
            comm: k.comm.clone(),
            function: plan
                .items
                .get(k.id as usize)
                .map_or_else(|| format!("#{}", k.id), |i| i.name.clone()),
            duration_ns: k.dur_ns,
            cpu: k
                .parts
                .map(|(blocked, runq)| [k.dur_ns.saturating_sub(blocked + runq), blocked, runq]),
            args: record_args(plan, k),
            // A function that returns nothing (or a value tachy does not
            // read) has no shape.
            ret: k.ret.and_then(|raw| {
                let shape = plan.returns.get(&k.id)?;
                Some(crate::naming::ret_value(Some(shape), raw))
            }),
            sites,
            more_sites: k.more_sites,
            stack: match (&k.stack, plan.stack) {
                (Some(s), Some(how)) if plan.settings.stack => Some(Stack {
                    method: how.name(),
                    frames: self.stacks.frames(k.pid, s),
                }),
                _ => None,
            },
        }
    }
}

/// A record's arguments as its function's plan says to show them (the
/// first three registers for an item the plan says nothing of).
fn record_args(plan: &Plan, k: &probe::KernelRecord) -> Vec<records::Arg> {
    use crate::plan::args::{Fetch, RecordArg, Shown};
    use crate::report::fmt::ArgValue;
    let fallback;
    let list = match plan.record_args.get(&k.id) {
        Some(l) => l,
        None => {
            fallback = FuncArgs::for_syscall("").record_args();
            &fallback
        }
    };
    let value = |a: &RecordArg| {
        let v = match a.fetch {
            Fetch::Saved(i) => *k.args.get(i as usize)?,
            Fetch::Const(c) => c as u64,
            Fetch::Unavailable(_) => return None,
        };
        Some(match a.shown {
            Shown::Int { size, signed } => ArgValue::int(v, size, signed),
            Shown::Pointer => ArgValue::Pointer(v),
            Shown::Register => ArgValue::Register(v),
        })
    };
    list.iter()
        .map(|a| records::Arg {
            name: a.name.clone(),
            value: value(a),
        })
        .collect()
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC (the clock of the kernel's
/// bpf_ktime_get_ns) in ns, from the closest of three reads of the pair.
/// Read again for each batch of records, so a step of the wall clock
/// (NTP, an administrator) is followed.
fn realtime_offset() -> i128 {
    let read = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes only into the timespec we pass.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    let mut best = (i128::MAX, 0);
    for _ in 0..3 {
        let r1 = read(libc::CLOCK_REALTIME);
        let m = read(libc::CLOCK_MONOTONIC);
        let r2 = read(libc::CLOCK_REALTIME);
        if r2 - r1 < best.0 {
            best = (r2 - r1, (r1 + r2) / 2 - m);
        }
    }
    best.1
}
