//! `--max-overhead`: 0.1 s into the run, then at intervals that double up
//! to a second while the estimates stay calm, what the probes added to the traced
//! threads' time is estimated from the calls counted since the last
//! estimate and each node's calibrated price per call
//! (`crate::calibrate`: what its probes add to the thread that takes
//! them), against the CPU time the traced processes used meanwhile (`/proc/PID/task/*/schedstat`,
//! which includes the time the kernel spends on their breakpoints; with
//! no process to read, the wall time of one thread), or the time the
//! traced calls took where that is more (calls that block). When the estimate
//! crosses the budget, call sites are shed, the deepest first and then by
//! price x rate, until the estimate is back within it. A shed site is
//! sampled where it can be: timed in a share of each second (its probes
//! attached for that slice, detached for the rest; a flag checked in BPF
//! would leave the breakpoint and its cost), its counts scaled by its
//! parent's calls over the run against those while it counted, as `perf` scales a
//! multiplexed counter; a site whose share would be under [`MIN_SHARE`](sampling::MIN_SHARE)
//! is dropped (not timed from then on). While any site is sampled, the
//! overhead is estimated once per [`PERIOD`], over the whole period, and
//! a sampled site's share is at most halved by one estimate. Every other
//! count goes on as before. A traced function's own
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

mod sampling;
use sampling::{period_weight, sample_share, shed_state, PERIOD, SLICE_TAIL};

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
    /// Whether any of the processes is alive (the wall clock: always).
    fn alive(&self) -> bool {
        match self {
            Clock::Procs(pids) => pids
                .iter()
                .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists()),
            Clock::Wall => true,
        }
    }

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
#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Timed,
    /// Timed in the first `share` of each [`PERIOD`]; `on` while its
    /// probes are attached and its calls counted.
    Sampled {
        share: f64,
        on: bool,
    },
    Dropped,
    /// Not attached yet: held back at the start ([`HOLD_OVER`]).
    Held,
}

impl State {
    /// Whether its calls are counted now.
    fn counting(self) -> bool {
        matches!(self, State::Timed | State::Sampled { on: true, .. })
    }

    /// The share of each period it is timed in (None: dropped or held).
    fn share(self) -> Option<f64> {
        match self {
            State::Timed => Some(1.0),
            State::Sampled { share, .. } => Some(share),
            State::Dropped | State::Held => None,
        }
    }
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
    /// When the window of the next estimate began.
    since: Instant,
    /// The period whose start began that window, when it did so while
    /// sites were sampled: an estimate then covers a whole period.
    window_period: Option<u64>,
    /// Per node id: calls counted since the last tick.
    calls: Vec<u64>,
    /// Per traced function: the time its calls that ended since the last
    /// tick took, and how many they were.
    took_ns: Vec<(u64, u64)>,
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
    /// Per call-site node (index into `Plan::sites`), since the last
    /// report: the calls of its parent while it was timed or sampled
    /// (enabled), and those while it was counted (running).
    window: Vec<(u64, u64)>,
    /// As `window`, since the last estimate.
    seen: Vec<(u64, u64)>,
    /// Sampled slots attached since the last read: what was counted
    /// meanwhile ran while their probes went in, not while they counted.
    arming: BTreeSet<u32>,
    /// Per call-site node: its parent's node id, and its slot.
    parent: Vec<usize>,
    slot_of: Vec<u32>,
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
/// first, then the dearest, and the rest of the last level taken (each is
/// sampled at the share the budget leaves them all, rather than a few
/// dropped); slots that cost nothing now are kept.
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
    let mut last_level = None;
    for x in c {
        if got >= need_ns && last_level != Some(x.level) {
            break;
        }
        got += x.cost_ns;
        out.push(x.slot);
        last_level = Some(x.level);
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
            since: now,
            window_period: None,
            clock,
            price,
            start: now,
            next: now + FIRST,
            interval: FIRST,
            calls: vec![0; plan.ids() as usize],
            took_ns: vec![(0, 0); plan.items.len()],
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
            window: vec![(0, 0); plan.sites.len()],
            arming: BTreeSet::new(),
            seen: vec![(0, 0); plan.sites.len()],
            parent: plan.sites.iter().map(|n| n.parent as usize).collect(),
            slot_of: plan.sites.iter().map(|n| n.slot).collect(),
            note: BudgetNote {
                max_pct,
                ..Default::default()
            },
            verbose: false,
        }
    }

    /// Whether the counters are to be read now: the overhead is to be
    /// estimated, or sampled sites go on or off (what was counted before
    /// is then told apart from what is counted after).
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next || !self.flips(now).is_empty()
    }

    /// The counts of one read.
    pub fn add(&mut self, fresh: &[Counts]) {
        let calls = |c: &Counts| c.count + c.unwound + c.filtered;
        for (n, c) in self.calls.iter_mut().zip(fresh) {
            *n += calls(c);
        }
        for (t, c) in self.took_ns.iter_mut().zip(fresh) {
            t.0 += c.total_ns;
            t.1 += c.count;
        }
        // Each site's state was the same since the last read: reads come
        // before every change.
        for (i, (w, e)) in self.window.iter_mut().zip(&mut self.seen).enumerate() {
            let Some(st) = self.state.get(&self.slot_of[i]) else {
                continue;
            };
            if st.share().is_some() {
                let n = fresh.get(self.parent[i]).map_or(0, calls);
                w.0 += n;
                e.0 += n;
                if st.counting() && !self.arming.contains(&self.slot_of[i]) {
                    w.1 += n;
                    e.1 += n;
                }
            }
        }
        self.arming.clear();
    }

    /// Each turn: detaches the end probes of sites shed a moment ago, and
    /// attaches or detaches the sampled sites whose slice begins or ends.
    /// True when sites were attached: the counters are to be read again
    /// at once, so that what ran while their probes went in is told apart.
    pub fn step(&mut self, plan: &Plan, now: Instant, tracer: &mut Tracer) -> bool {
        self.ends_due.retain(|&(at, slot)| {
            let due = now >= at;
            if due {
                tracer.detach_site_ends(slot);
            }
            !due
        });
        self.toggle(plan, now, tracer);
        !self.arming.is_empty()
    }

    /// Estimates the overhead since the last estimate and sheds call sites
    /// when it is over the budget; sets when the next estimate is due.
    pub fn tick(&mut self, plan: &Plan, now: Instant, tracer: &mut Tracer) -> Result<()> {
        // Due for sampled sites only.
        if now < self.next {
            return Ok(());
        }
        if self.any_sampled() {
            let k = self.period_of(now);
            // A window that began mid-period (the sites were shed into
            // sampling then, or the loop ran late) is left unjudged.
            match self.window_period == Some(k.wrapping_sub(1)) {
                true => {
                    self.estimate(plan, now, tracer)?;
                }
                false => self.restart(plan, now),
            }
            self.window_period = Some(k);
            self.next = self.start + PERIOD * (k as u32 + 1);
            // Everything sampled was dropped: estimates as before.
            if !self.any_sampled() {
                self.interval = FIRST;
                self.next = now + FIRST;
            }
            return Ok(());
        }
        let calm = self.estimate(plan, now, tracer)?;
        if self.any_sampled() {
            // Sites went into sampling mid-period: the next window starts
            // with the next period.
            self.window_period = None;
            self.next = self.start + PERIOD * (self.period_of(now) as u32 + 1);
            return Ok(());
        }
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

    /// Starts the window of the next estimate now, what was counted
    /// since the last one left unjudged.
    fn restart(&mut self, plan: &Plan, now: Instant) {
        self.calls = vec![0; plan.ids() as usize];
        self.seen = vec![(0, 0); plan.sites.len()];
        let total = self.clock.now_ns(self.start, now);
        self.last_ns = total.or(self.last_ns);
        self.since = now;
    }

    /// Whether held-back sites wait for room.
    fn any_held(&self) -> bool {
        !self.admit_failed && self.state.values().any(|s| *s == State::Held)
    }

    /// The estimate of [`Budget::tick`], and what it saw.
    fn estimate(&mut self, plan: &Plan, now: Instant, tracer: &mut Tracer) -> Result<Calm> {
        let calls = std::mem::replace(&mut self.calls, vec![0; plan.ids() as usize]);
        let total = self.clock.now_ns(self.start, now);
        let cpu = match (total, self.last_ns) {
            (Some(t), Some(l)) => t.saturating_sub(l) as f64,
            _ => 0.0,
        };
        // A traced call that blocks (a sleep, a read) takes its thread's
        // time off the CPU: what the probes add to it is measured against
        // the time it took. The longest-running traced function stands
        // for the threads' time in traced calls (one traced function may
        // call another). A call is counted when it ends, all of it: it
        // stands for the window's length at most.
        let window_ns = now.saturating_duration_since(self.since).as_nanos() as u64;
        let took = std::mem::replace(&mut self.took_ns, vec![(0, 0); plan.items.len()]);
        let in_calls = took
            .iter()
            .map(|&(ns, n)| ns.min(n.saturating_mul(window_ns)))
            .max()
            .unwrap_or(0) as f64;
        // The first window the threads' CPU time is read in only sets the
        // reading the next ones start from: nothing of it is judged.
        let baseline = self.last_ns.is_none() && total.is_some();
        let used = match baseline {
            true => cpu,
            false => cpu.max(in_calls),
        };
        self.last_ns = total.or(self.last_ns);
        self.since = now;
        let seen = std::mem::replace(&mut self.seen, vec![(0, 0); plan.sites.len()]);
        let items = plan.items.len();
        // A sampled site's calls were counted in its slice of the period
        // the window is: what they cost, and the linger of its ends after
        // the slice, hit at the rate of the slice.
        let per_period = |id: usize| -> f64 {
            let Some(i) = id.checked_sub(items) else {
                return 1.0;
            };
            match self.state.get(&self.slot_of[i]).copied() {
                Some(State::Sampled { share, .. }) => period_weight(share, seen[i]),
                _ => 1.0,
            }
        };
        let cost = |id: usize| {
            calls[id] as f64 * self.price.get(id).copied().unwrap_or(0) as f64 * per_period(id)
        };
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
        let busy = calls[..items].iter().any(|&n| n > 0) && used >= window_ns as f64 / 10.0;
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
        // Against the work their own probes leave, not the work left by
        // every probe: when the sites' estimate exceeds the time used,
        // that work is a guessed floor (a fiftieth of the time), and a
        // function whose own probes were within the budget was said to be
        // over it.
        let p = overhead_pct(bare, used);
        if p > self.max_pct && self.note.bare_over.is_none() {
            eprintln!(
                "tachy: the traced function's own probes cost ~{p:.1}% of its threads' time, over --max-overhead {}%: they are never shed, tracing goes on",
                self.max_pct
            );
            self.note.bare_over = Some(p);
        }
        let candidates: Vec<Candidate> = self
            .nodes
            .iter()
            .filter(|(s, _)| self.state.get(s).is_some_and(|st| st.share().is_some()))
            .map(|(&slot, ids)| Candidate {
                slot,
                level: ids.iter().map(|&i| plan.sites[i].level).max().unwrap_or(0),
                cost_ns: ids.iter().map(|&i| cost(items + i)).sum(),
            })
            .collect();
        // Shed to a fifth under the budget: on a busy machine a hit costs
        // more than its calibrated price (an estimate of 82% was 105% by
        // the target's own clock, load 7.5 on 2 cores), and one period's
        // estimate is off the next one's by a tenth.
        let need = probes - allowed * 0.8;
        let shed = choose(candidates.clone(), need);
        let cost_shed: f64 = candidates
            .iter()
            .filter(|c| shed.contains(&c.slot))
            .map(|c| c.cost_ns)
            .sum();
        // What the sites shed may still cost: each keeps that part of its
        // share, or is dropped under the least.
        let keep = match cost_shed > 0.0 {
            true => ((cost_shed - need) / cost_shed).clamp(0.0, 1.0),
            false => 0.0,
        };
        // A sampled site costs more than its share: its ends linger after
        // each slice, and the slice ends at the run loop's next turn.
        let shed: Vec<(u32, Option<f64>)> = shed
            .into_iter()
            .map(|slot| {
                // A sampled site keeps half its share at least: one
                // period's estimate can read several times the next one's
                // (the traced threads get less of a busy machine's CPU in
                // one, and the work left is a small difference), and a
                // share once given up never comes back.
                let (was, keep) = match self.state.get(&slot).copied() {
                    Some(State::Sampled { share, .. }) => (share + SLICE_TAIL, keep.max(0.5)),
                    _ => (1.0, keep),
                };
                (slot, sample_share(was * keep - SLICE_TAIL))
            })
            .collect();
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

    /// Sheds `slots`: each sampled at the share given (it goes on or off
    /// with its slice at the next turn) or dropped (None); and the slots
    /// under them that time nothing while they do not are sampled or
    /// dropped with them.
    fn shed(
        &mut self,
        plan: &Plan,
        tracer: &mut Tracer,
        slots: &[(u32, Option<f64>)],
        why: Why,
        now: Instant,
    ) -> Result<()> {
        if slots.is_empty() {
            return Ok(());
        }
        let mut shed: Vec<(u32, Why, Option<f64>)> =
            slots.iter().map(|&(s, share)| (s, why, share)).collect();
        for &(s, share) in slots {
            self.set_shed(s, share);
        }
        // A slot all of whose nodes are under shed sites times nothing
        // while they do not: dropped with them, or sampled at the largest
        // share of theirs.
        loop {
            let items = plan.items.len();
            let parent_share = |i: usize| -> Option<Option<f64>> {
                let parent = plan.sites[i].parent as usize;
                let p = plan.sites.get(parent.checked_sub(items)?)?;
                match self.state.get(&p.slot).copied() {
                    Some(State::Dropped) => Some(None),
                    Some(State::Sampled { share, .. }) => Some(Some(share)),
                    _ => None,
                }
            };
            let orphans: Vec<(u32, Option<f64>)> = self
                .nodes
                .iter()
                .filter(|(s, _)| self.state.get(s).is_some_and(|st| st.share().is_some()))
                .filter_map(|(&s, ids)| {
                    let shares: Option<Vec<Option<f64>>> =
                        ids.iter().map(|&i| parent_share(i)).collect();
                    let most = shares?.into_iter().flatten().reduce(f64::max);
                    let was = self.state.get(&s).and_then(|st| st.share()).unwrap_or(1.0);
                    match most {
                        Some(m) if m >= was => None,
                        _ => Some((s, most)),
                    }
                })
                .collect();
            if orphans.is_empty() {
                break;
            }
            for (s, share) in orphans {
                self.set_shed(s, share);
                shed.push((s, Why::WithParent, share));
            }
        }
        let at_s = now.saturating_duration_since(self.start).as_secs_f64();
        // Dropped, each stops counting first; detaching takes longer. A
        // sampled one goes off at the next turn if its slice is over.
        let dropped: Vec<u32> = shed.iter().filter(|s| s.2.is_none()).map(|s| s.0).collect();
        for &slot in &dropped {
            tracer.stop_site(plan, slot);
        }
        for &slot in &dropped {
            self.detach(tracer, slot, now);
        }
        for &(slot, why, sampled) in &shed {
            for &i in self.nodes.get(&slot).into_iter().flatten() {
                let n = &plan.sites[i];
                self.note.shed.push(ShedSite {
                    name: n.site.name.clone(),
                    site: n.site.location.clone(),
                    level: n.level,
                    at_s,
                    why,
                    sampled,
                });
            }
        }
        Ok(())
    }

    /// Sheds `slot` to be sampled at `share` (None: dropped).
    fn set_shed(&mut self, slot: u32, share: Option<f64>) {
        let was = self.state.get(&slot).copied();
        self.state.insert(slot, shed_state(was, share));
    }

    /// Detaches the probes of `slot`, which no longer counts: its call at
    /// once (unless it also ends the site before it, which counts), its
    /// ends once the calls in flight have ended.
    fn detach(&mut self, tracer: &mut Tracer, slot: u32, now: Instant) {
        let counting = |s: u32| self.state.get(&s).is_some_and(|st| st.counting());
        // Its call still ends the previous site while that is timed.
        let keep_call = self.ends_previous.contains(&slot) && slot > 0 && counting(slot - 1);
        if !keep_call {
            tracer.detach_site_calls(slot);
        }
        // The next slot's call was kept only to end this one.
        if self.ends_previous.contains(&(slot + 1)) && !counting(slot + 1) {
            tracer.detach_site_calls(slot + 1);
        }
        self.ends_due.push((now + ENDS_LINGER, slot));
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
                    .is_some_and(|p| self.state.get(&p.slot).is_some_and(|s| s.counting()))
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
        self.attach_probes(plan, tracer, slot)?;
        tracer.time_site(plan, slot)
    }

    /// Attaches the probes of site `slot`, and the call of the next slot
    /// when that ends this one and is not counting (it goes first).
    fn attach_probes(&mut self, plan: &Plan, tracer: &mut Tracer, slot: u32) -> Result<()> {
        if self.ends_previous.contains(&(slot + 1))
            && !self.state.get(&(slot + 1)).is_some_and(|s| s.counting())
        {
            tracer.attach_site_calls(plan, slot + 1)?;
        }
        tracer.attach_site_probes(plan, slot)
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
    fn the_deepest_go_first_then_the_dearest_until_enough_then_their_level() {
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
        // The rest of level 2 goes with the dearest.
        assert_eq!(choose(all.clone(), 200.0), vec![2, 1]);
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
