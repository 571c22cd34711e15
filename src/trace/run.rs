//! The run loop: waits, reads the counters each interval (and on SIGUSR1,
//! and when a sink asks), and hands finished reports to the sinks until the
//! traced process exits, the time is up or tachy is told to stop. All it
//! keeps between two turns is one [`RunState`], so that another front end
//! can drive the same loop a turn at a time ([`RunState::step`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::assemble::{self, GroupsIn};
use super::budget::Budget;
use super::options::ReportOptions;
use super::records::Recorder;
use super::sink::{Read, Sink, Snapshot};
use crate::naming::Namer;
use crate::plan::by::ByKey;
use crate::plan::{self, ItemKind, Plan};
use crate::probe::{Live, Tracer};
use crate::report::groups::RawGroup;
use crate::report::{self, Callee, Counts};
use crate::scope;
use crate::stop;
use crate::symbols::ElfObject;
use crate::target::{self, Spawned};

/// When tracing ends, besides Ctrl-C and the traced processes' exit.
#[derive(Clone, Debug, Default)]
pub struct RunLimits {
    /// `-i`: a report every interval.
    pub interval: Option<Duration>,
    /// `-d`: tracing ends after this long.
    pub duration: Option<Duration>,
    /// `-p PID`: tracing ends when it exits.
    pub pid: Option<u32>,
    /// `--follow`: forks outlive their parent; tracing goes on while any runs.
    pub follow: bool,
}

/// How the run loop ended.
#[derive(Clone, Debug)]
pub struct RunEnd {
    /// The command's exit code, if it exited.
    pub status: Option<i32>,
    /// Ended by Ctrl-C or SIGTERM.
    pub stopped: bool,
    /// No traced user function completed or left a call.
    pub nothing_counted: bool,
    /// Ended because an object that can unwind was loaded ([`UnwindWatch`]).
    pub unwind_loaded: bool,
}

/// Everything the run loop keeps between two turns.
pub struct RunState<'p> {
    plan: &'p Plan,
    live: &'p Live,
    opts: &'p ReportOptions,
    limits: RunLimits,
    /// When the next report is due (`-i`), and when tracing ends (`-d`).
    next_report: Option<Instant>,
    deadline: Option<Instant>,
    /// Where the counts of the next report began.
    interval_start: Instant,
    /// What was read from the kernel but not yet part of an interval's
    /// report (read for a SIGUSR1 interim report, or for the metrics).
    carry: Vec<Counts>,
    /// Calls entered per process not yet reported, and the processes'
    /// names (read while they run).
    procs: BTreeMap<u32, u64>,
    comms: HashMap<u32, String>,
    /// --by: the groups read so far, and the names of their keys.
    carry_groups: Vec<RawGroup>,
    /// `--by stack`: each function's calls whose records were lost, in
    /// the interval.
    carry_lost: Vec<u64>,
    namer: Namer,
    /// Which of a group's key values is its caller, and when the callers'
    /// processes are looked at again.
    caller_key: Option<usize>,
    next_watch: Instant,
    /// Records lost since the last report.
    lost: u64,
    recorder: Option<Recorder>,
    /// How many groups the kernel keeps per function.
    groups_max: u32,
    unwind_watch: Option<UnwindWatch>,
    /// An interim report was asked for by another front end.
    interim: bool,
    /// `--max-overhead`: the budget kept, if any ([`RunState::set_budget`]).
    budget: Option<Budget>,
    pub end: RunEnd,
}

/// Runs the loop until tracing ends, keeping the probes' overhead within
/// `budget` if there is one.
// The stages of one run, each its own value: a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub fn run(
    plan: &Plan,
    live: &Live,
    opts: &ReportOptions,
    limits: RunLimits,
    tracer: &mut Tracer,
    mut spawned: Option<&mut Spawned>,
    sink: &mut dyn Sink,
    budget: Option<Budget>,
) -> Result<RunEnd> {
    let mut state = RunState::new(plan, live, opts, limits, tracer, spawned.as_deref())?;
    if let Some(b) = budget {
        state.set_budget(b);
    }
    loop {
        state.pause(sink, Duration::from_millis(50))?;
        if state.step(tracer, spawned.as_deref_mut(), sink)? {
            return Ok(state.end);
        }
    }
}

impl<'p> RunState<'p> {
    /// The state of a run that starts now, on attached probes.
    pub fn new(
        plan: &'p Plan,
        live: &'p Live,
        opts: &'p ReportOptions,
        limits: RunLimits,
        tracer: &mut Tracer,
        spawned: Option<&Spawned>,
    ) -> Result<RunState<'p>> {
        let start = Instant::now();
        let ids = plan.ids() as usize;
        let mut namer = Namer::default();
        namer.set_args(&plan.by_args);
        namer.set_returns(&plan.returns);
        // Where to look for a caller's file once its process has exited.
        let mut known: Vec<PathBuf> = plan
            .objects
            .iter()
            .flat_map(|o| [o.display.clone(), o.open_path.clone()])
            .collect();
        if let Some(sp) = spawned {
            known.push(sp.exe.clone());
        }
        namer.set_objects(known);
        let caller_key = opts.by.iter().position(|k| *k == ByKey::Caller);
        if let (Some(_), Some(pid)) = (caller_key, live.pid) {
            namer.watch(pid);
        }
        Ok(RunState {
            plan,
            live,
            opts,
            next_report: limits.interval.map(|i| start + i),
            deadline: limits.duration.map(|d| start + d),
            limits,
            interval_start: start,
            carry: vec![Counts::default(); ids],
            procs: BTreeMap::new(),
            comms: plan
                .pids
                .iter()
                .filter_map(|&p| Some((p, scope::comm(p)?)))
                .collect(),
            carry_groups: Vec::new(),
            carry_lost: Vec::new(),
            namer,
            caller_key,
            next_watch: start,
            lost: 0,
            recorder: tracer
                .record_reader()?
                .map(|reader| Recorder::new(plan, reader, live.pid)),
            groups_max: tracer.groups_max,
            unwind_watch: UnwindWatch::new(plan, live),
            interim: false,
            budget: None,
            end: RunEnd {
                status: None,
                stopped: false,
                nothing_counted: true,
                unwind_loaded: false,
            },
        })
    }

    /// Keeps the probes' overhead within `budget` from now on: call sites
    /// are detached when it is crossed, and those held back attached when
    /// there is room (see `super::budget`).
    pub fn set_budget(&mut self, budget: Budget) {
        self.budget = Some(budget);
    }

    /// Asks for an interim report on the next turn: everything since the
    /// last report, which the next one still includes (as SIGUSR1 does).
    pub fn request_interim(&mut self) {
        self.interim = true;
    }

    /// Waits `d` between two turns; records are printed as they fill
    /// their buffer meanwhile.
    pub fn pause(&mut self, sink: &mut dyn Sink, d: Duration) -> Result<()> {
        match self.recorder.as_mut() {
            Some(r) => r.wait(self.plan, sink, Instant::now() + d),
            None => {
                std::thread::sleep(d);
                Ok(())
            }
        }
    }

    /// One turn: prints the records that arrived, reads the counters when
    /// a report or a sink wants them, reports when one is due. True when
    /// tracing is over (`end` says why).
    pub fn step(
        &mut self,
        tracer: &mut Tracer,
        spawned: Option<&mut Spawned>,
        sink: &mut dyn Sink,
    ) -> Result<bool> {
        let plan = self.plan;
        if let Some(r) = self.recorder.as_mut() {
            r.print(plan, sink)?;
        }
        let now = Instant::now();
        let done = self.over(now, tracer, spawned);
        let due = self.next_report.is_some_and(|t| now >= t);
        let interim = stop::take_interim() || std::mem::take(&mut self.interim);
        self.watch_callers(now, tracer);
        let export = sink.due(now);
        let budget = self.budget.as_ref().is_some_and(|b| b.due(now));
        if interim || due || done || export || budget {
            self.read(tracer, sink)?;
        }
        if let Some(b) = self.budget.as_mut() {
            if budget && !done {
                b.tick(plan, now, tracer)?;
            }
            // Sampled sites went on: what ran meanwhile is read apart.
            if b.step(plan, now, tracer) {
                self.read(tracer, sink)?;
            }
        }
        sink.tick(plan, now, done)?;
        if interim && !(due || done) {
            self.report(now, sink, false)?;
        }
        if due || done {
            if let Some(r) = self.recorder.as_mut() {
                // Records that arrived after the read above are printed
                // here and counted in the next metrics.
                r.print(plan, sink)?;
                let lost = std::mem::take(&mut self.lost);
                if plan.settings.record_min_ns.is_some() {
                    sink.records_lost(lost)?;
                } else if lost > 0 {
                    // --by stack alone: its groups miss those calls.
                    eprintln!(
                        "tachy: {lost} call{} not in the --by stack groups: their records came faster than tachy could read them",
                        if lost == 1 { "" } else { "s" }
                    );
                }
            }
            self.report(now, sink, true)?;
            if let (Some(t), Some(i)) = (self.next_report.as_mut(), self.limits.interval) {
                while *t <= now {
                    *t += i;
                }
            }
        }
        Ok(done)
    }

    /// Whether tracing ends now: stopped, the traced processes gone, the
    /// time up, or an object loaded that could unwind through a uretprobe.
    fn over(&mut self, now: Instant, tracer: &mut Tracer, spawned: Option<&mut Spawned>) -> bool {
        let plan = self.plan;
        let follow = self.limits.follow;
        self.end.stopped = stop::requested();
        let mut done = self.end.stopped;
        if let Some(sp) = spawned {
            if let Some(code) = sp.try_wait() {
                self.end.status = Some(code);
                done = true;
            }
        } else if let Some(pid) = self.limits.pid {
            if !target::process_alive(pid) {
                done = true;
            }
        } else if !plan.pids.is_empty() && !follow && !tracer.followed_alive() {
            // Every one of several processes has exited.
            done = true;
        }
        // Followed forks outlive their parent: go on while any runs.
        if done && follow && !self.end.stopped && tracer.followed_alive() {
            done = false;
        }
        if self.deadline.is_some_and(|d| now >= d) {
            done = true;
        }
        if let Some(line) = self.unwind_watch.as_mut().and_then(|w| w.check(plan, now)) {
            eprintln!("{line}");
            self.unwind_watch = None;
            self.end.unwind_loaded = true;
            done = true;
        }
        done
    }

    /// A caller's address is named through its process's mappings, read
    /// while the process runs: again when a caller is in none of them (a
    /// library loaded after they were read).
    fn watch_callers(&mut self, now: Instant, tracer: &Tracer) {
        let (Some(k), true) = (self.caller_key, now >= self.next_watch) else {
            return;
        };
        for (pid, vals) in tracer.group_keys() {
            if let Some(&addr) = vals.get(k) {
                self.namer.cover(pid, addr);
            }
        }
        self.next_watch = now + Duration::from_millis(100);
    }

    /// The function an indirect call at `ip` of site `node` entered at
    /// `addr` in process `pid`: found in the process's mappings, else
    /// (the process is gone) in the call's own object, at the same
    /// distance from the call.
    fn name_callee(&mut self, node: u32, pid: u32, ip: u64, addr: u64) -> Callee {
        let c = self.namer.callee(pid, addr);
        if c.addr.is_some() {
            return c;
        }
        let plan = self.plan;
        let at = plan
            .site(node)
            .and_then(|x| plan.slots.get(x.slot as usize))
            .and_then(|&(o, site)| Some((plan.objects.get(o)?, site)));
        let Some((obj, site)) = at else {
            return c;
        };
        let vaddr = site.wrapping_add(addr.wrapping_sub(ip));
        self.namer.callee_in(obj, vaddr).unwrap_or(c)
    }

    /// Reads the counters, the groups and the records lost, and hands
    /// what is new to the sinks.
    fn read(&mut self, tracer: &mut Tracer, sink: &mut dyn Sink) -> Result<()> {
        let plan = self.plan;
        if plan.settings.count_procs {
            for (pid, n) in tracer.take_procs() {
                *self.procs.entry(pid).or_default() += n;
                self.comms
                    .entry(pid)
                    .or_insert_with(|| scope::comm(pid).unwrap_or_else(|| "?".into()));
            }
        }
        let mut fresh: Vec<Counts> = tracer.take()?;
        // Indirect call sites: their callees, named in their process.
        for (node, pid, ip, addr, n) in tracer.take_callees() {
            let callee = match addr {
                Some(a) => self.name_callee(node, pid, ip, a),
                None => Callee {
                    name: "other".into(),
                    ..Default::default()
                },
            };
            if let Some(c) = fresh.get_mut(node as usize) {
                Callee::add_to(&mut c.callees, &Callee { count: n, ..callee });
            }
        }
        if let Some(b) = self.budget.as_mut() {
            b.add(&fresh);
        }
        for (i, (c, n)) in self.carry.iter_mut().zip(fresh.iter_mut()).enumerate() {
            let pt = self.live.probe_time.get(i);
            n.probe_ns = pt.map_or(0, |p| p.in_ns);
            n.probe_add_ns = pt.map_or(0, |p| p.add_ns);
            c.merge(n);
        }
        let mut fresh_groups = tracer.take_groups()?;
        if let Some(r) = self.recorder.as_mut() {
            // --by stack: the records that came so far are in the groups.
            r.print(plan, sink)?;
            fresh_groups.extend(r.take_groups(&mut self.namer));
        }
        let groups = match sink.counts_groups() {
            true => fresh_groups
                .iter()
                .map(|r| {
                    let keys = (!r.other).then(|| self.namer.name(&self.opts.by, r));
                    (r.id, keys, r.counts.clone())
                })
                .collect(),
            false => Vec::new(),
        };
        report::groups::merge_raw(&mut self.carry_groups, fresh_groups);
        let by_id = match self.recorder {
            Some(_) => tracer.take_records_lost()?,
            None => Vec::new(),
        };
        let lost = by_id.iter().sum();
        self.lost += lost;
        if plan.settings.by.contains(&ByKey::Stack) {
            // --by stack: a lost record is a call its function's groups miss.
            self.carry_lost
                .resize(by_id.len().max(self.carry_lost.len()), 0);
            for (c, n) in self.carry_lost.iter_mut().zip(&by_id) {
                *c += n;
            }
        }
        sink.read(&Read {
            counts: &fresh,
            groups,
            lost,
        });
        Ok(())
    }

    /// Hands the report of what was read since the last one to the sinks;
    /// an interval report (`interval`) starts the next.
    fn report(&mut self, now: Instant, sink: &mut dyn Sink, interval: bool) -> Result<()> {
        let plan = self.plan;
        let ids = plan.ids() as usize;
        let who = assemble::contributors(plan, &self.procs, &self.comms);
        let span = now.saturating_duration_since(self.interval_start);
        let mut counts = match interval {
            true => std::mem::replace(&mut self.carry, vec![Counts::default(); ids]),
            false => self.carry.clone(),
        };
        // Sites sampled by the budget: their counts scaled to the span.
        if let Some(b) = self.budget.as_mut() {
            b.scale(plan, &mut counts, interval);
        }
        if interval {
            self.end.nothing_counted &= counts[..plan.items.len()]
                .iter()
                .all(|c| c.count == 0 && c.unwound == 0 && c.filtered == 0);
            self.procs.clear();
            self.interval_start = now;
        }
        // Nested with --by: the flat report carries the traced functions'
        // groups, which the tree's report shows at its roots.
        let flat = match (&self.opts.tree, self.opts.format) {
            (None, crate::cli::Format::Svg) => None,
            (Some(_), _) if self.opts.by.is_empty() => None,
            _ => {
                let mut report = assemble::flat_report(plan, self.opts, &counts, span);
                let mut groups = GroupsIn {
                    raw: &self.carry_groups,
                    lost: &self.carry_lost,
                    namer: &mut self.namer,
                    max: self.groups_max,
                };
                assemble::add_groups(&mut report, self.opts, &mut groups);
                Some(report)
            }
        };
        let budget = self.budget.as_ref().map(Budget::note);
        sink.report(&Snapshot {
            plan,
            budget: budget.as_ref(),
            opts: self.opts,
            counts: &counts,
            span,
            flat: flat.as_ref(),
            who: who.as_deref(),
            interval,
        })?;
        if interval {
            self.carry_groups.clear();
            self.carry_lost.clear();
        }
        Ok(())
    }
}

/// Watches the maps of a process whose uretprobes stand on the proof that
/// it cannot unwind: an object loaded later that could (a C++ library
/// dlopened) ends tracing, so that no call entered after it gets a
/// uretprobe. Calls entered before it are safe: the frames further out
/// than theirs are in objects that can neither catch an exception nor run
/// cleanup code, so an unwind that reaches them ends as it would without
/// the uretprobe.
struct UnwindWatch {
    pid: u32,
    seen: HashSet<PathBuf>,
    next: Instant,
}

impl UnwindWatch {
    fn new(plan: &Plan, live: &Live) -> Option<UnwindWatch> {
        let uses = plan.items.iter().any(|i| {
            matches!(&i.kind, ItemKind::Function(t) if t.exits.mode == plan::ExitMode::UretprobeProcess)
        });
        Some(UnwindWatch {
            pid: live.pid.filter(|_| uses)?,
            seen: Default::default(),
            next: Instant::now(),
        })
    }

    /// Every 50 ms: the first object newly mapped that could unwind through
    /// a uretprobe, as the line that says so.
    fn check(&mut self, plan: &Plan, now: Instant) -> Option<String> {
        if now < self.next {
            return None;
        }
        self.next = now + Duration::from_millis(50);
        let maps = target::process_maps(self.pid).ok()?;
        // A command tachy started runs tachy's image until it execs.
        let own = std::env::current_exe().ok();
        if own.is_some_and(|e| e == maps.exe.display) {
            return None;
        }
        for o in maps.all() {
            if !self.seen.insert(o.display.clone()) {
                continue;
            }
            let hazard = match ElfObject::open(&o.display, &o.open_path) {
                Ok(obj) => plan::unwind::object_hazard(&obj),
                Err(_) => Some("cannot be read".into()),
            };
            if let Some(what) = hazard {
                let n = plan
                    .items
                    .iter()
                    .filter(|i| matches!(&i.kind, ItemKind::Function(t) if t.exits.mode == plan::ExitMode::UretprobeProcess))
                    .count();
                return Some(format!(
                    "tachy: process {} loaded {}, which {what}: an exception could now unwind through the uretprobe{} of {n} function{} and abort it; tracing stopped",
                    self.pid,
                    o.display.display(),
                    if n == 1 { "" } else { "s" },
                    if n == 1 { "" } else { "s" },
                ));
            }
        }
        None
    }
}
