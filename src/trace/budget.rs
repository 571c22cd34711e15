//! `--max-overhead`: 0.1 s into the run, then at intervals that double up
//! to a second while the estimates stay calm, what the probes added to the traced
//! threads' time is estimated from the calls counted since the last
//! estimate and each node's calibrated price per call
//! (`crate::calibrate`: what its probes add to the thread that takes
//! them), against the CPU time the traced processes used meanwhile (`/proc/PID/task/*/schedstat`,
//! which includes the time the kernel spends on their breakpoints; with
//! no process to read, the wall time of one thread). When the estimate
//! crosses the budget, call sites are shed, the deepest first and then by
//! price x rate, until the estimate is back within it: their probes are
//! detached (a flag checked in BPF would leave the breakpoint and its
//! cost), every other count goes on as before. A traced function's own
//! entry and exit are never shed; when they alone exceed the budget, that
//! is said once and tracing goes on.
//!
//! It knows nothing of how the run loop reads or reports: the loop hands it
//! each read's counts ([`Budget::add`]) and calls [`Budget::tick`] when it
//! is due ([`Budget::due`]) and [`Budget::step`] each turn.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::plan::{Plan, ProbeKind};
use crate::probe::{ProcessGone, Tracer};
use crate::report::budget::{BudgetNote, LateSite, ShedSite, Why};
use crate::report::Counts;
use crate::usage::UsageError;

/// How soon the overhead is first estimated, and again after an estimate
/// that attached or shed sites (or saw little work while sites are held
/// back), so that a plan too dear for its workload is shed before a short
/// run is over, and a workload of a fraction of a second gets its held-back
/// sites. Each calm estimate doubles the interval, up to [`EVERY`].
const FIRST: Duration = Duration::from_millis(100);
/// How often the overhead is estimated once calm.
const EVERY: Duration = Duration::from_secs(1);
/// A plan of more call sites than this holds them all back at the start,
/// and attaches them as estimates show room: the hundreds of sites of a
/// real function at depth 2 cost many times the work for as long as they
/// are attached, and detaching them takes the kernel a while (sqlite3_step
/// at depth 2, 512 sites: the workload ran 19x its untraced time when
/// they were all attached until the first estimate, 10x with estimates
/// from 0.1 s on and only the deeper sites held back, because an early
/// estimate of little work let 423 of them in at once). Smaller plans
/// start whole, so that a short run still gets every site: 300 is where
/// `tachy nested` without a budget warns that a plan is many sites.
pub const HOLD_OVER: usize = 300;
/// With the budget off, a plan of more call sites than this is refused
/// unless `--all-sites` asks for them all (with a budget, the sites it has
/// room for are timed).
pub const MANY_SITES: usize = 512;
/// At most this many held-back sites are attached at one estimate; the
/// next estimate, due at once, checks them before more go in, so that a
/// wrong guess costs the detaching of a few sites, not of hundreds.
const ADMIT_AT_ONCE: usize = 16;
/// How long the probes that end a shed site stay after its call's probe
/// has gone, so that the calls in flight end as timed.
const ENDS_LINGER: Duration = Duration::from_millis(100);

/// With the budget off (`--max-overhead 0`): a plan of more than
/// [`MANY_SITES`] call sites is a usage error unless `all_sites`.
pub fn check_unbudgeted(plan: &Plan, all_sites: bool) -> Result<()> {
    let n = plan.sites.len();
    if n <= MANY_SITES || all_sites {
        return Ok(());
    }
    Err(UsageError(format!(
        "{n} call sites planned with --max-overhead 0: each traced call would pay for every site it passes; --all-sites times them all, a budget (--max-overhead PCT) those it has room for"
    ))
    .into())
}

/// Where the traced threads' time is read.
enum Clock {
    /// The CPU time of these processes' threads.
    Procs(Vec<u32>),
    /// The wall time: one thread's worth.
    Wall,
}

impl Clock {
    /// Nanoseconds so far (CPU or wall, from `start`).
    fn now_ns(&self, start: Instant, now: Instant) -> Option<u64> {
        match self {
            Clock::Procs(pids) => pids.iter().map(|&p| cpu_ns(p)).sum(),
            Clock::Wall => Some(now.saturating_duration_since(start).as_nanos() as u64),
        }
    }
}

/// The CPU time of process `pid`'s threads alive now, in nanoseconds
/// (`/proc/PID/task/TID/schedstat`: on-CPU ns first).
fn cpu_ns(pid: u32) -> Option<u64> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sum = 0u64;
    for t in dir.flatten() {
        let path = t.path().join("schedstat");
        if let Some(ns) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        {
            sum += ns;
        }
    }
    Some(sum)
}

/// Whether a call site is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Timed,
    Dropped,
    /// Not attached yet: held back at the start ([`HOLD_OVER`]).
    Held,
}

/// The budget of one run, and what it shed.
pub struct Budget {
    max_pct: f64,
    /// Per node id: what one call adds to its thread (ns).
    price: Vec<u64>,
    clock: Clock,
    start: Instant,
    next: Instant,
    /// From one estimate to the next: [`FIRST`], doubled up to [`EVERY`].
    interval: Duration,
    last_ns: Option<u64>,
    /// Per node id: calls counted since the last tick.
    calls: Vec<u64>,
    /// Over the run: the probes' estimated time, and the threads' time.
    run_probes: f64,
    run_used: f64,
    /// Per slot: its nodes (indexes into `Plan::sites`) and its state.
    nodes: BTreeMap<u32, Vec<usize>>,
    state: BTreeMap<u32, State>,
    /// Slots whose call probe also ends the previous slot's site.
    ends_previous: BTreeSet<u32>,
    /// Slots whose end probes go at the time given.
    ends_due: Vec<(Instant, u32)>,
    note: BudgetNote,
    /// The sites of the slots held back, as the note names them.
    held: BTreeMap<u32, Vec<LateSite>>,
    /// Attaching a held-back site failed: no more are.
    admit_failed: bool,
    /// `-v`: each estimate is said.
    pub verbose: bool,
}

/// What an estimate saw, for when the next is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Calm {
    /// Work within the budget, and nothing changed: the next can wait
    /// longer.
    Yes,
    /// Little or no work: it says little of the room.
    Idle,
    /// Sites were shed or attached: the next checks them soon.
    Changed,
}

/// A slot to shed, by what it costs now: the deepest first, then the
/// dearest.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Candidate {
    slot: u32,
    level: u32,
    cost_ns: f64,
}

/// The slots to shed for at least `need_ns` of probe time: the deepest
/// first, then the dearest; slots that cost nothing now are kept.
fn choose(mut c: Vec<Candidate>, need_ns: f64) -> Vec<u32> {
    c.retain(|x| x.cost_ns > 0.0);
    c.sort_by(|a, b| {
        b.level
            .cmp(&a.level)
            .then(b.cost_ns.total_cmp(&a.cost_ns))
            .then(a.slot.cmp(&b.slot))
    });
    let mut got = 0.0;
    let mut out = Vec::new();
    for x in c {
        if got >= need_ns {
            break;
        }
        got += x.cost_ns;
        out.push(x.slot);
    }
    out
}

/// The probes' share of the threads' own time, in percent: `probes` of
/// the `used` time was theirs.
fn overhead_pct(probes: f64, used: f64) -> f64 {
    // An estimate above the time used is an overhead of many times the
    // work: the work is then taken as a fiftieth of the time.
    let work = (used - probes).max(used / 50.0).max(1.0);
    probes * 100.0 / work
}

impl Budget {
    /// The call-site slots of `plan` that a budget holds back at the
    /// start: with more than [`HOLD_OVER`] sites, all of them.
    pub fn held_at_start(plan: &Plan) -> BTreeSet<u32> {
        match plan.sites.len() > HOLD_OVER {
            true => plan.sites.iter().map(|n| n.slot).collect(),
            false => BTreeSet::new(),
        }
    }

    /// The budget `max_pct` of a run of `plan`, with `price` per node id
    /// (ns one call adds), the traced threads those of `pids` (none: the
    /// wall time of one thread), the slots `held` not attached yet.
    pub fn new(
        plan: &Plan,
        max_pct: f64,
        price: Vec<u64>,
        pids: Vec<u32>,
        held: &BTreeSet<u32>,
    ) -> Budget {
        let now = Instant::now();
        let clock = match pids.is_empty() {
            true => Clock::Wall,
            false => Clock::Procs(pids),
        };
        let mut nodes: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, n) in plan.sites.iter().enumerate() {
            nodes.entry(n.slot).or_default().push(i);
        }
        let ends_previous = plan
            .probes
            .iter()
            .filter_map(|p| match p.kind {
                ProbeKind::Site {
                    slot,
                    exit_first: true,
                    ..
                } => Some(slot),
                _ => None,
            })
            .collect();
        let held_sites = held
            .iter()
            .map(|&slot| {
                let sites = nodes.get(&slot).into_iter().flatten().map(|&i| {
                    let n = &plan.sites[i];
                    LateSite {
                        name: n.site.name.clone(),
                        site: n.site.location.clone(),
                        level: n.level,
                        from_s: None,
                    }
                });
                (slot, sites.collect())
            })
            .collect();
        Budget {
            max_pct,
            last_ns: clock.now_ns(now, now),
            clock,
            price,
            start: now,
            next: now + FIRST,
            interval: FIRST,
            calls: vec![0; plan.ids() as usize],
            run_probes: 0.0,
            run_used: 0.0,
            state: nodes
                .keys()
                .map(|&s| match held.contains(&s) {
                    true => (s, State::Held),
                    false => (s, State::Timed),
                })
                .collect(),
            nodes,
            held: held_sites,
            admit_failed: false,
            ends_previous,
            ends_due: Vec::new(),
            note: BudgetNote {
                max_pct,
                ..Default::default()
            },
            verbose: false,
        }
    }

    /// Whether the overhead is to be estimated now.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// The counts of one read.
    pub fn add(&mut self, fresh: &[Counts]) {
        for (n, c) in self.calls.iter_mut().zip(fresh) {
            *n += c.count + c.unwound + c.filtered;
        }
    }

    /// Each turn: detaches the end probes of sites shed a moment ago.
    pub fn step(&mut self, now: Instant, tracer: &mut Tracer) {
        self.ends_due.retain(|&(at, slot)| {
            let due = now >= at;
            if due {
                tracer.detach_site_ends(slot);
            }
            !due
        });
    }

    /// Estimates the overhead since the last estimate and sheds call sites
    /// when it is over the budget; sets when the next estimate is due.
    pub fn tick(&mut self, plan: &Plan, now: Instant, tracer: &mut Tracer) -> Result<()> {
        let calm = self.estimate(plan, now, tracer)?;
        self.interval = match calm {
            Calm::Yes => (self.interval * 2).min(EVERY),
            // With nothing held back, an idle target has no sites to
            // wait for: the estimates slow down as when calm.
            Calm::Idle if !self.any_held() => (self.interval * 2).min(EVERY),
            Calm::Idle | Calm::Changed => FIRST,
        };
        self.next = now + self.interval;
        Ok(())
    }

    /// Whether held-back sites wait for room.
    fn any_held(&self) -> bool {
        !self.admit_failed && self.state.values().any(|s| *s == State::Held)
    }

    /// The estimate of [`Budget::tick`], and what it saw.
    fn estimate(&mut self, plan: &Plan, now: Instant, tracer: &mut Tracer) -> Result<Calm> {
        let calls = std::mem::replace(&mut self.calls, vec![0; plan.ids() as usize]);
        let total = self.clock.now_ns(self.start, now);
        let used = match (total, self.last_ns) {
            (Some(t), Some(l)) => t.saturating_sub(l) as f64,
            _ => 0.0,
        };
        self.last_ns = total.or(self.last_ns);
        let cost = |id: usize| calls[id] as f64 * self.price.get(id).copied().unwrap_or(0) as f64;
        let probes: f64 = (0..calls.len()).map(cost).sum();
        if used <= 0.0 {
            return Ok(Calm::Idle);
        }
        self.run_probes += probes;
        self.run_used += used;
        let pct = overhead_pct(probes, used);
        if self.verbose {
            eprintln!(
                "tachy: overhead at {:.1} s: probes ~{:.1} ms of {:.1} ms the traced threads used (~{pct:.1}%)",
                now.saturating_duration_since(self.start).as_secs_f64(),
                probes / 1e6,
                used / 1e6
            );
        }
        let work = (used - probes).max(used / 50.0);
        let allowed = self.max_pct / 100.0 * work;
        let items = plan.items.len();
        // Calm: the traced functions ran, their threads were busy for a
        // tenth of the interval at least, and nothing changed.
        let busy =
            calls[..items].iter().any(|&n| n > 0) && used >= self.interval.as_nanos() as f64 / 10.0;
        if pct <= self.max_pct {
            // An estimate of little work says little of the room.
            let admitted = match busy {
                true => self.admit(plan, tracer, &calls, allowed - probes, now)?,
                false => 0,
            };
            return Ok(match (busy, admitted) {
                (false, _) => Calm::Idle,
                (true, 0) => Calm::Yes,
                (true, _) => Calm::Changed,
            });
        }
        let bare: f64 = (0..items).map(cost).sum();
        if bare > allowed && self.note.bare_over.is_none() {
            let p = overhead_pct(bare, used);
            eprintln!(
                "tachy: the traced function's own probes cost ~{p:.1}% of its threads' time, over --max-overhead {}%: they are never shed, tracing goes on",
                self.max_pct
            );
            self.note.bare_over = Some(p);
        }
        let candidates = self
            .nodes
            .iter()
            .filter(|(s, _)| self.state.get(s) == Some(&State::Timed))
            .map(|(&slot, ids)| Candidate {
                slot,
                level: ids.iter().map(|&i| plan.sites[i].level).max().unwrap_or(0),
                cost_ns: ids.iter().map(|&i| cost(items + i)).sum(),
            })
            .collect();
        let shed = choose(candidates, probes - allowed);
        let t = Instant::now();
        self.shed(plan, tracer, &shed, Why::Estimate(pct), now)?;
        if self.verbose {
            eprintln!(
                "tachy: {} call sites shed in {} ms",
                shed.len(),
                t.elapsed().as_millis()
            );
        }
        Ok(Calm::Changed)
    }

    /// Sheds `slots`, and the slots under them that time nothing without
    /// them.
    fn shed(
        &mut self,
        plan: &Plan,
        tracer: &mut Tracer,
        slots: &[u32],
        why: Why,
        now: Instant,
    ) -> Result<()> {
        if slots.is_empty() {
            return Ok(());
        }
        let mut shed: Vec<(u32, Why)> = slots.iter().map(|&s| (s, why)).collect();
        for &s in slots {
            self.state.insert(s, State::Dropped);
        }
        // A slot all of whose nodes are under dropped sites times nothing.
        loop {
            let orphans: Vec<u32> =
                self.nodes
                    .iter()
                    .filter(|(s, _)| self.state.get(s) == Some(&State::Timed))
                    .filter(|(_, ids)| {
                        ids.iter().all(|&i| {
                            let parent = plan.sites[i].parent as usize;
                            parent >= plan.items.len()
                                && plan.sites.get(parent - plan.items.len()).is_some_and(|p| {
                                    self.state.get(&p.slot) == Some(&State::Dropped)
                                })
                        })
                    })
                    .map(|(&s, _)| s)
                    .collect();
            if orphans.is_empty() {
                break;
            }
            for s in orphans {
                self.state.insert(s, State::Dropped);
                shed.push((s, Why::WithParent));
            }
        }
        let at_s = now.saturating_duration_since(self.start).as_secs_f64();
        // Every one stops counting first; detaching takes longer.
        for &(slot, _) in &shed {
            tracer.stop_site(plan, slot);
        }
        for &(slot, why) in &shed {
            // Its call still ends the previous site while that is timed.
            let keep_call = self.ends_previous.contains(&slot)
                && slot > 0
                && self.state.get(&(slot - 1)) == Some(&State::Timed);
            if !keep_call {
                tracer.detach_site_calls(slot);
            }
            // The next slot's call was kept only to end this one.
            if self.ends_previous.contains(&(slot + 1))
                && self.state.get(&(slot + 1)) != Some(&State::Timed)
            {
                tracer.detach_site_calls(slot + 1);
            }
            self.ends_due.push((now + ENDS_LINGER, slot));
            for &i in self.nodes.get(&slot).into_iter().flatten() {
                let n = &plan.sites[i];
                self.note.shed.push(ShedSite {
                    name: n.site.name.clone(),
                    site: n.site.location.clone(),
                    level: n.level,
                    at_s,
                    why,
                    sampled: None,
                });
            }
        }
        Ok(())
    }

    /// Attaches the held-back sites that the estimate has room for
    /// (`room_ns` of probe time over the last interval), the shallowest
    /// and then the cheapest first, at most [`ADMIT_AT_ONCE`], each priced
    /// at one hit per call of the node above it in that interval (a site
    /// whose parent was not timed, or not called, waits). A site in a loop
    /// costs more than that: the next estimate, due at once, sheds it.
    /// Returns how many were attached.
    fn admit(
        &mut self,
        plan: &Plan,
        tracer: &mut Tracer,
        calls: &[u64],
        room_ns: f64,
        now: Instant,
    ) -> Result<usize> {
        let items = plan.items.len();
        let timed = |parent: u32| {
            (parent as usize) < items
                || plan
                    .sites
                    .get(parent as usize - items)
                    .is_some_and(|p| self.state.get(&p.slot) == Some(&State::Timed))
        };
        if self.admit_failed {
            return Ok(0);
        }
        let mut c: Vec<Candidate> = self
            .nodes
            .iter()
            .filter(|(s, _)| self.state.get(s) == Some(&State::Held))
            .filter_map(|(&slot, ids)| {
                let (mut hits, mut cost_ns) = (0u64, 0.0);
                for &i in ids.iter().filter(|&&i| timed(plan.sites[i].parent)) {
                    let h = calls
                        .get(plan.sites[i].parent as usize)
                        .copied()
                        .unwrap_or(0);
                    hits += h;
                    cost_ns += h as f64 * self.price.get(items + i).copied().unwrap_or(0) as f64;
                }
                (hits > 0).then(|| Candidate {
                    slot,
                    level: ids.iter().map(|&i| plan.sites[i].level).min().unwrap_or(0),
                    cost_ns,
                })
            })
            .collect();
        c.sort_by(|a, b| {
            a.level
                .cmp(&b.level)
                .then(a.cost_ns.total_cmp(&b.cost_ns))
                .then(a.slot.cmp(&b.slot))
        });
        let mut spent = 0.0;
        let mut admitted = 0;
        let from_s = now.saturating_duration_since(self.start).as_secs_f64();
        for x in c {
            if admitted == ADMIT_AT_ONCE {
                break;
            }
            if spent + x.cost_ns > room_ns {
                continue;
            }
            spent += x.cost_ns;
            let slot = x.slot;
            if let Err(e) = self.attach_late(plan, tracer, slot) {
                // Held back they stay, and the run goes on: said unless
                // the process has just exited.
                if e.downcast_ref::<ProcessGone>().is_none() {
                    eprintln!("tachy: call sites held back stay untimed: {e:#}");
                }
                self.admit_failed = true;
                break;
            }
            self.state.insert(slot, State::Timed);
            admitted += 1;
            for mut l in self.held.remove(&slot).into_iter().flatten() {
                l.from_s = Some(from_s);
                self.note.late.push(l);
            }
        }
        if self.verbose && admitted > 0 {
            eprintln!("tachy: {admitted} call sites held back are timed from now on");
        }
        Ok(admitted)
    }

    /// Attaches the probes of held-back site `slot` and times it.
    fn attach_late(&mut self, plan: &Plan, tracer: &mut Tracer, slot: u32) -> Result<()> {
        // Its end is (also) the next slot's call: that goes first.
        if self.ends_previous.contains(&(slot + 1))
            && self.state.get(&(slot + 1)) != Some(&State::Timed)
        {
            tracer.attach_site_calls(plan, slot + 1)?;
        }
        tracer.resume_site(plan, slot)
    }

    /// What the reports say of the budget now.
    pub fn note(&self) -> BudgetNote {
        let mut n = self.note.clone();
        n.late.extend(self.held.values().flatten().cloned());
        n.estimated_pct =
            (self.run_used > 0.0).then(|| overhead_pct(self.run_probes, self.run_used));
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deepest_go_first_then_the_dearest_until_enough() {
        let c = |slot, level, cost_ns| Candidate {
            slot,
            level,
            cost_ns,
        };
        let all = vec![
            c(0, 1, 500.0),
            c(1, 2, 10.0),
            c(2, 2, 300.0),
            c(3, 1, 50.0),
            c(4, 2, 0.0),
        ];
        assert_eq!(choose(all.clone(), 200.0), vec![2]);
        assert_eq!(choose(all.clone(), 305.0), vec![2, 1]);
        // Free sites are never shed, even when the rest is not enough.
        assert_eq!(choose(all.clone(), 5000.0), vec![2, 1, 0, 3]);
        assert_eq!(choose(all, 0.0), Vec::<u32>::new());
    }

    #[test]
    fn overhead_is_the_probes_over_the_work_left() {
        assert!((overhead_pct(10.0, 110.0) - 10.0).abs() < 1e-9);
        // Probes as much as the time used: the work is a fiftieth of it.
        assert!((overhead_pct(100.0, 100.0) - 5000.0).abs() < 1e-9);
        assert_eq!(overhead_pct(0.0, 100.0), 0.0);
    }
}
