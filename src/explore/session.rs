//! Exact timing of the functions picked in the explorer, in this process:
//! the arguments of `tachy nested -p PID FUNC --depth 2 [--expand
//! CALLEE]...` go through the command's own validation, planning, attach
//! and run loop ([`crate::trace::run::RunState`], one turn every 50 ms, a
//! report each second), and each report is the tree `tachy nested --json`
//! prints for the same probes, counted since the probes were attached (or
//! since the last reset). The call sites inside callees not drilled into
//! are planned but held back (their probes kept, not attached, as the
//! overhead budget holds sites back): drilling into a callee attaches its
//! sites while the run goes on ([`Session::attach`]), and every other
//! count goes on. Drilling deeper than the plan grows it
//! ([`Session::grow`]): the callee is planned with `--expand` from the
//! objects already read, its new sites take ids and slots after the
//! others' in the BPF object already loaded (its counters sized with room
//! at load), and the probe prices measured at the start price them. A
//! session runs on a thread of its own, which owns the plan, the BPF
//! object and the links: stopping it detaches every probe.

use std::collections::{BTreeSet, HashMap};
use std::mem::MaybeUninit;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Parser;

use super::func::{self, Step};
use crate::cli::{self, TraceSettings};
use crate::plan::{self, ItemKind, Node, Plan, ProbeKind};
use crate::probe::{self, Live};
use crate::report::budget::LateSite;
use crate::report::groups::{self, Group, Groups};
use crate::report::hist::Hist;
use crate::report::tree::TreeReport;
use crate::report::{json, Counts, Unit};
use crate::resolve::Objects;
use crate::trace::run::{RunLimits, RunState};
use crate::trace::sink::{Sink, Snapshot};
use crate::trace::{latency, nested, target::TraceTarget, ReportOptions};

/// The levels of call sites a session plans (`--depth`): the traced
/// function's own, attached, and its callees', held back until drilled
/// into.
pub const DEPTH: u32 = 2;

/// What to trace: the `tachy nested` command of the same probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub pid: u32,
    /// `PATH:RAW` of the function.
    pub spec: String,
    /// Raw names of the callees broken down too (`--expand`), below
    /// [`DEPTH`].
    pub expand: Vec<String>,
    /// The callees drilled into (a breadcrumb from the traced function):
    /// their call sites are attached from the start, as the traced
    /// function's are; those of the other callees are held back. Not a
    /// part of the command: the plan is the same.
    pub open: Vec<Step>,
    /// `--filter EXPR`: only calls whose arguments match are counted.
    pub filter: Option<String>,
    /// `--slower-than DUR`: only calls this slow are counted and broken
    /// down.
    pub slower_than: Option<String>,
    /// `--by KEY`: the traced function's calls grouped by this key.
    pub by: Option<String>,
}

impl Request {
    /// The arguments of the equivalent `tachy nested` command, after
    /// `tachy nested`.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec!["-p".to_string(), self.pid.to_string(), self.spec.clone()];
        for e in &self.expand {
            a.push("--expand".into());
            a.push(e.clone());
        }
        if let Some(f) = &self.filter {
            a.push("--filter".into());
            a.push(f.clone());
        }
        if let Some(d) = &self.slower_than {
            a.push("--slower-than".into());
            a.push(d.clone());
        }
        if let Some(k) = &self.by {
            a.push("--by".into());
            a.push(k.clone());
        }
        a.extend(["--depth".to_string(), DEPTH.to_string()]);
        a
    }

    /// The equivalent command, as it can be typed.
    pub fn command(&self) -> String {
        let words: Vec<String> = self
            .args()
            .iter()
            .map(
                |w| match w.contains([' ', '(', ')', '<', '>', '*', '&', '|', '!', '=']) {
                    true => format!("'{w}'"),
                    false => w.clone(),
                },
            )
            .collect();
        format!("tachy nested {}", words.join(" "))
    }
}

/// A function's source lines, from its DWARF line table and the file on
/// disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Source {
    /// The file's path, as DWARF names it.
    pub path: String,
    /// The file's text from the function's first line to its last, as
    /// (line number, text); empty when the file cannot be read.
    pub lines: Vec<(u32, String)>,
    /// Lines of the function's own code holding code of an inlined
    /// function, with its name.
    pub inlined: HashMap<u32, String>,
}

/// Planned and attached.
#[derive(Clone)]
pub struct Started {
    pub request: Request,
    pub plan: Plan,
    /// The source of each node whose call sites are in the plan (the
    /// traced function and the expanded callees), by node id.
    pub sources: HashMap<u32, Source>,
    /// The source of each callee broken down under an indirect call
    /// site: by the site's node id and the callee's address in its
    /// object.
    pub via_sources: HashMap<(u32, u64), Source>,
    /// The raw name of the function holding each indirect call site whose
    /// probe reads its callee, by node id: the CALLER of `--expand
    /// CALLER->CALLEE`.
    pub callers: HashMap<u32, String>,
    /// What one call of the traced function costs in probe hits, from
    /// this machine's prices when known (as `--dry-run` prints it).
    pub price: Option<String>,
    /// The call-site slots held back: planned, not attached yet.
    pub held: BTreeSet<u32>,
    /// The keys `b` groups the traced function's calls by, in turn (as
    /// `--by` names them): caller and thread (goroutine in Go), each of
    /// its named integer parameters, its return value when it has one.
    pub by_keys: Vec<String>,
}

/// Call sites held back, attached while the run goes on: counted from
/// then on.
pub struct Attached {
    pub slots: Vec<u32>,
    /// The ids of their nodes, in the order of `late`.
    pub nodes: Vec<u32>,
    /// Their nodes, as a report names sites counted from a later moment
    /// (`late` of `tachy nested --json`'s `overhead`).
    pub late: Vec<LateSite>,
    /// From the request to the probes counting.
    pub took: Duration,
}

impl Attached {
    /// `slots` attached, counting `nodes` (ids, and as a report names
    /// them), asked for at `asked`.
    fn new(nodes: (Vec<u32>, Vec<LateSite>), slots: Vec<u32>, asked: Instant) -> Attached {
        Attached {
            nodes: nodes.0,
            late: nodes.1,
            slots,
            took: asked.elapsed(),
        }
    }
}

/// The report of one interval turned cumulative.
pub struct Tree {
    pub report: TreeReport,
    /// Per node id, p50 and p99 (ns) of its counted calls.
    pub percentiles: Vec<(Option<u64>, Option<u64>)>,
    /// Per node id, the histogram of its counted calls, which `--hist`
    /// prints.
    pub hists: Vec<Hist>,
    /// With `--by`: the traced function's groups, added up over the
    /// same intervals as the counts (as `tachy nested --by` reports them
    /// at its root).
    pub groups: Option<Groups>,
    /// Seconds counted.
    pub seconds: f64,
}

/// What a session says to the explorer.
#[allow(clippy::large_enum_variant)]
pub enum Update {
    Started(Box<Started>),
    Tree(Tree),
    Attached(Attached),
    /// The plan grew by a level: the callee drilled into is broken down,
    /// its call sites attached while the run goes on.
    Grown(Box<Started>, Attached),
    /// The plan could not grow by this request (why): it is to be
    /// planned and attached afresh.
    NotGrown(Request, String),
    /// Planning or attaching failed, or tracing ended with an error.
    Failed(String),
    /// Tracing ended (the process exited).
    Ended,
}

enum Command {
    Reset,
    Stop,
    Attach(Vec<u32>, Instant),
    Grow(Request, Instant),
}

pub struct Session {
    commands: Sender<Command>,
    pub updates: Receiver<Update>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Session {
    /// Plans and attaches `req` on a thread of its own, which then reports
    /// once a second.
    pub fn start(req: Request) -> Session {
        let (commands, cmd_rx) = mpsc::channel();
        let (tx, updates) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            if let Err(e) = run(&req, &tx, &cmd_rx) {
                let _ = tx.send(Update::Failed(format!("{e:#}")));
            }
            let _ = done_tx.send(());
        });
        Session {
            commands,
            updates,
            done,
            thread: Some(thread),
        }
    }

    /// Counting starts again from zero.
    pub fn reset(&self) {
        let _ = self.commands.send(Command::Reset);
    }

    /// Attaches the probes of call-site slots held back, while the run
    /// goes on: the other counts go on.
    pub fn attach(&self, slots: Vec<u32>) {
        let _ = self.commands.send(Command::Attach(slots, Instant::now()));
    }

    /// Breaks a callee down a level deeper than the plan (`req` is the
    /// request with it expanded, the breadcrumb ending at it): the plan
    /// grows by its call sites, attached while the run goes on, and every
    /// other count goes on ([`Update::Grown`]); where it cannot,
    /// [`Update::NotGrown`] says so.
    pub fn grow(&self, req: Request) {
        let _ = self.commands.send(Command::Grow(req, Instant::now()));
    }

    /// Stops tracing: its probes are detached when this returns, unless
    /// planning or attaching has not ended within two seconds (the kernel
    /// detaches them when this process ends: the links are descriptors).
    pub fn stop(mut self) {
        let _ = self.commands.send(Command::Stop);
        match self.done.recv_timeout(Duration::from_secs(2)) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The settings `tachy nested` makes of the request's arguments; an error
/// says what `tachy nested` would of them, on one line.
fn settings(req: &Request) -> Result<TraceSettings> {
    let mut argv = vec!["tachy".to_string(), "nested".to_string()];
    argv.extend(req.args());
    let cli = cli::Cli::try_parse_from(&argv).map_err(|e| {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        anyhow::anyhow!("{}", first.trim_start_matches("error: "))
    })?;
    match cli.cmd {
        cli::Command::Nested(a) => a.validate(),
        _ => anyhow::bail!("not a nested command"),
    }
}

/// Plans `req` as `tachy nested` would, attaching nothing: what would keep
/// it from being traced (a filter naming no parameter, a bad duration).
pub fn check(req: &Request) -> Result<()> {
    plan_of(req, &mut Objects::default()).map(|_| ())
}

fn plan_of(req: &Request, objects: &mut Objects) -> Result<(TraceSettings, Plan)> {
    let s = settings(req)?;
    let mut target = TraceTarget::new(&s)?;
    let request = target.request(&s);
    let plan = target.plan(&request, objects)?;
    plan.check_host_arch()?;
    Ok((s, plan))
}

fn run(req: &Request, tx: &Sender<Update>, commands: &Receiver<Command>) -> Result<()> {
    let mut objects = Objects::default();
    let (s, mut plan) = plan_of(req, &mut objects)?;
    probe::check_environment()?;
    let opts = ReportOptions::new(&s);
    let mut sources = sources(&plan, &mut objects);
    let (mut via_sources, mut callers) = (HashMap::new(), HashMap::new());
    indirect_views(&plan, &mut objects, &mut via_sources, &mut callers);
    let by_keys = by_keys(&plan, &mut objects);
    latency::raise_fd_limit();
    // Measured once (and cached): the price of a probe is the machine's,
    // not the plan's, so a plan grown later is priced by the same.
    let calibration = latency::calibration(&plan, false);
    let probe_time = calibration
        .as_ref()
        .map_or(Vec::new(), |c| c.probe_time(&plan));
    let mut live = Live::new(&plan, None, probe_time);
    live.held_back = held_back(&plan, &req.open);
    live.room = Some(room(&plan));
    // Measured by now, if they were not cached.
    let prices = crate::calibrate::cached_prices();
    let price = plan.call_price(0, prices.as_ref());
    let mut storage = MaybeUninit::uninit();
    let mut tracer = latency::attach(&mut storage, &plan, &live, false)?;
    // What the view is told, but for the plan and sources, given apart.
    let mut started = Started {
        request: req.clone(),
        plan: Plan::default(),
        sources: HashMap::new(),
        via_sources: HashMap::new(),
        callers: HashMap::new(),
        price,
        held: live.held_back.clone(),
        by_keys,
    };
    let _ = tx.send(Update::Started(Box::new(Started {
        plan: plan.clone(),
        sources: sources.clone(),
        via_sources: via_sources.clone(),
        callers: callers.clone(),
        ..started.clone()
    })));
    let mut held = live.held_back.clone();
    let limits = RunLimits {
        interval: Some(Duration::from_secs(1)),
        duration: None,
        pid: Some(req.pid),
        follow: false,
    };
    let mut sink = Cumulative {
        tx: tx.clone(),
        counts: vec![Counts::default(); plan.ids() as usize],
        groups: Vec::new(),
        full: None,
        lost: 0,
        since: Instant::now(),
    };
    loop {
        // The run loop keeps the plan it was started on: it starts again
        // (on the same probes and counters) when the plan grows.
        let mut state = RunState::new(&plan, &live, &opts, limits.clone(), &mut tracer, None)?;
        let (next, asked) = loop {
            match commands.recv_timeout(Duration::from_millis(50)) {
                Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
                Ok(Command::Reset) => sink.reset(),
                Ok(Command::Attach(slots, asked)) => {
                    let from_s = sink.since.elapsed().as_secs_f64();
                    match attach_held(&plan, &mut tracer, &mut held, &slots) {
                        Ok(slots) => {
                            let nodes = late_sites(&plan, &slots, from_s);
                            let _ = tx.send(Update::Attached(Attached::new(nodes, slots, asked)));
                        }
                        Err(e) => {
                            let _ = tx.send(Update::Failed(format!("{e:#}")));
                        }
                    }
                }
                Ok(Command::Grow(next, asked)) => break (next, asked),
                Err(RecvTimeoutError::Timeout) => {}
            }
            if state.step(&mut tracer, None, &mut sink)? {
                let _ = tx.send(Update::Ended);
                return Ok(());
            }
        };
        drop(state);
        let wider = match grown_plan(&plan, &next, &mut objects) {
            Ok(w) => w,
            Err(why) => {
                let _ = tx.send(Update::NotGrown(next, why));
                continue;
            }
        };
        let probe_time = calibration
            .as_ref()
            .map_or(Vec::new(), |c| c.probe_time(&wider));
        let first_slot = plan.slots.len() as u32;
        if let Err(e) = tracer.grow(&wider, first_slot, &probe_time) {
            let _ = tx.send(Update::NotGrown(next, format!("{e:#}")));
            continue;
        }
        let from_s = sink.since.elapsed().as_secs_f64();
        let old_ids = plan.ids();
        plan = wider;
        live.probe_time = probe_time;
        sink.counts.resize(plan.ids() as usize, Counts::default());
        held.extend(first_slot..plan.slots.len() as u32);
        let attached = attach_grown(&plan, &mut tracer, &mut held, &next.open, old_ids);
        for (id, src) in new_sources(&plan, &sources, &mut objects) {
            sources.insert(id, src);
        }
        indirect_views(&plan, &mut objects, &mut via_sources, &mut callers);
        started.request = next;
        started.held = held.clone();
        match attached {
            Ok(slots) => {
                let nodes = grown_late(&plan, &held, &slots, old_ids, from_s);
                let now = Started {
                    plan: plan.clone(),
                    sources: sources.clone(),
                    via_sources: via_sources.clone(),
                    callers: callers.clone(),
                    ..started.clone()
                };
                let a = Attached::new(nodes, slots, asked);
                let _ = tx.send(Update::Grown(Box::new(now), a));
            }
            Err(e) => {
                let _ = tx.send(Update::Failed(format!("{e:#}")));
            }
        }
    }
}

/// The ids a session's counters have room for: the plan's, and as many
/// again (at least 256) for the levels drilled into later.
fn room(plan: &Plan) -> u32 {
    plan.ids() + plan.ids().max(256)
}

/// `plan` grown by what `next` plans beyond it ([`Plan::grown`]), planned
/// with the objects already read; why not, when it cannot be.
fn grown_plan(plan: &Plan, next: &Request, objects: &mut Objects) -> Result<Plan, String> {
    let (_, wider) = plan_of(next, objects).map_err(|e| format!("{e:#}"))?;
    plan.grown(&wider)
}

/// Attaches what a grown plan adds, while the run goes on: the held slots
/// (`held`, the new ones among them) that the breadcrumb `open` leads
/// under, as the held-back sites of a drill-down; and the new nodes (ids
/// from `old_ids` on) of slots already attached are timed too. Returns
/// the slots attached.
fn attach_grown(
    plan: &Plan,
    tracer: &mut probe::Tracer,
    held: &mut BTreeSet<u32>,
    open: &[Step],
    old_ids: u32,
) -> Result<Vec<u32>> {
    let keep = held_back(plan, open);
    let wanted: Vec<u32> = held.difference(&keep).copied().collect();
    let slots = attach_held(plan, tracer, held, &wanted)?;
    let shared: BTreeSet<u32> = plan
        .site_ids()
        .filter(|&(id, x)| id >= old_ids && !held.contains(&x.slot))
        .map(|(_, x)| x.slot)
        .collect();
    for slot in shared {
        tracer.time_site(plan, slot)?;
    }
    Ok(slots)
}

/// The nodes a grown plan counts from `from_s` seconds on: those of the
/// slots just attached, and the new ones (ids from `old_ids` on) of slots
/// attached before; their ids, and as a report names them.
fn grown_late(
    plan: &Plan,
    held: &BTreeSet<u32>,
    slots: &[u32],
    old_ids: u32,
    from_s: f64,
) -> (Vec<u32>, Vec<LateSite>) {
    let (mut nodes, mut late) = late_sites(plan, slots, from_s);
    for (id, x) in plan.site_ids() {
        if id >= old_ids && !held.contains(&x.slot) && !nodes.contains(&id) {
            nodes.push(id);
            late.push(late_site(x, from_s));
        }
    }
    (nodes, late)
}

/// The call-site slots held back at the start: those of sites under a
/// callee (below the traced function) that is not on the breadcrumb
/// `open`. A slot whose call also ends the site before it
/// (`exit_first`) is held only with that site.
pub fn held_back(plan: &Plan, open: &[Step]) -> BTreeSet<u32> {
    let opened: BTreeSet<u32> = (0..=open.len())
        .filter_map(|n| func::node_at(plan, &open[..n]))
        .collect();
    let mut timed = BTreeSet::new();
    let mut all = BTreeSet::new();
    for (_, x) in plan.site_ids() {
        all.insert(x.slot);
        if x.level <= 1 || opened.contains(&x.parent) {
            timed.insert(x.slot);
        }
    }
    let mut held: BTreeSet<u32> = all.difference(&timed).copied().collect();
    for slot in ends_previous(plan) {
        if slot > 0 && !held.contains(&(slot - 1)) {
            held.remove(&slot);
        }
    }
    held
}

/// The slots whose call probe also ends the previous slot's site
/// (`exit_first`).
fn ends_previous(plan: &Plan) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for p in &plan.probes {
        if let ProbeKind::Site {
            slot, exit_first, ..
        } = p.kind
        {
            if exit_first {
                out.insert(slot);
            }
        }
    }
    out
}

/// Attaches the held slots among `slots`, the last first (a site's end
/// can be the next slot's call, which then goes in before it), each as the
/// overhead budget attaches a site held back; returns those attached.
fn attach_held(
    plan: &Plan,
    tracer: &mut probe::Tracer,
    held: &mut BTreeSet<u32>,
    slots: &[u32],
) -> Result<Vec<u32>> {
    let ends = ends_previous(plan);
    let mut todo: Vec<u32> = slots.iter().copied().filter(|s| held.contains(s)).collect();
    todo.sort_unstable();
    for &slot in todo.iter().rev() {
        let next = slot + 1;
        if ends.contains(&next) && held.contains(&next) {
            tracer.attach_site_calls(plan, next)?;
        }
        tracer.resume_site(plan, slot)?;
        held.remove(&slot);
    }
    Ok(todo)
}

/// The nodes timed at `slots`, counted from `from_s` seconds on: their
/// ids, and as a report names them.
fn late_sites(plan: &Plan, slots: &[u32], from_s: f64) -> (Vec<u32>, Vec<LateSite>) {
    plan.site_ids()
        .filter(|(_, x)| slots.contains(&x.slot))
        .map(|(id, x)| (id, late_site(x, from_s)))
        .unzip()
}

/// Site `x`, counted from `from_s` seconds on, as a report names it.
fn late_site(x: &plan::SiteNode, from_s: f64) -> LateSite {
    LateSite {
        name: x.site.name.clone(),
        site: x.site.location.clone(),
        level: x.level,
        from_s: Some(from_s),
    }
}

/// Adds up each interval's counts (and with `--by`, the traced function's
/// groups) and sends the tree of the sum.
struct Cumulative {
    tx: Sender<Update>,
    counts: Vec<Counts>,
    /// `--by`: the traced function's named groups, the calls its group
    /// map had no room for, and (`--by stack`) the calls not grouped.
    groups: Vec<Group>,
    full: Option<(u64, Counts)>,
    lost: u64,
    since: Instant,
}

impl Cumulative {
    fn reset(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = Counts::default());
        self.groups.clear();
        self.full = None;
        self.lost = 0;
        self.since = Instant::now();
    }

    /// Adds an interval's groups of the traced function (the report's
    /// first) to the sum, and gives the sum as a report has it: groups
    /// named alike are one, as [`Groups::build`] makes them of the raw
    /// groups of a single interval.
    fn add_groups(&mut self, snap: &Snapshot<'_>) -> Option<Groups> {
        let fresh = snap.flat?.funcs.first()?.groups.as_ref()?;
        let mut at: HashMap<String, usize> = self
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| (groups::label(&g.keys), i))
            .collect();
        // A --top fold is not asked for: every group is in `groups`.
        for g in &fresh.groups {
            match at.get(&groups::label(&g.keys)) {
                Some(&i) => self.groups[i].counts.merge(&g.counts),
                None => {
                    at.insert(groups::label(&g.keys), self.groups.len());
                    self.groups.push(g.clone());
                }
            }
        }
        if let Some((cap, c)) = &fresh.full {
            self.full
                .get_or_insert_with(|| (*cap, Counts::default()))
                .1
                .merge(c);
        }
        self.lost += fresh.lost;
        let mut sum = Groups::build(
            fresh.by.clone(),
            self.groups.clone(),
            self.full.clone(),
            snap.opts.top,
        );
        sum.lost = self.lost;
        Some(sum)
    }
}

impl Sink for Cumulative {
    fn report(&mut self, snap: &Snapshot<'_>) -> Result<()> {
        let Some(t) = &snap.opts.tree else {
            return Ok(());
        };
        if !snap.interval {
            return Ok(());
        }
        for (c, n) in self.counts.iter_mut().zip(snap.counts) {
            c.merge(n);
        }
        let report = nested::tree_report(snap.plan, snap.opts, t, &self.counts);
        let percentiles = self
            .counts
            .iter()
            .map(|c| percentiles(c, snap.opts.unit))
            .collect();
        let hists = self.counts.iter().map(|c| c.hist.clone()).collect();
        let groups = self.add_groups(snap);
        let _ = self.tx.send(Update::Tree(Tree {
            report,
            percentiles,
            hists,
            groups,
            seconds: self.since.elapsed().as_secs_f64(),
        }));
        Ok(())
    }
}

/// p50 and p99 of `c` in ns: as `tachy latency --json` says them for a
/// traced function; for a call site, whose exact extremes the kernel does
/// not keep, the midpoint of the bucket (as `--hist` buckets it).
fn percentiles(c: &Counts, unit: Unit) -> (Option<u64>, Option<u64>) {
    if c.max_ns > 0 {
        let p = json::percentiles_ns(c, unit);
        return (p.first().copied().flatten(), p.get(2).copied().flatten());
    }
    let p = c.hist.percentiles(&[50.0, 99.0]);
    let mid = |b: Option<&Option<(u64, u64)>>| {
        b.copied()
            .flatten()
            .map(|(lo, hi)| (lo + (hi - lo) / 2).saturating_mul(unit.ns()))
    };
    (mid(p.first()), mid(p.get(1)))
}

/// The keys `b` groups the traced function's calls by, in turn: caller
/// and tid (a Go function's: goroutine), then its named integer and
/// pointer parameters as its DWARF names them (those a slow-call record
/// prints), then retval when its return value can be read.
fn by_keys(plan: &Plan, objects: &mut Objects) -> Vec<String> {
    let Some(ItemKind::Function(t)) = plan.items.first().map(|i| &i.kind) else {
        return vec!["tid".into()];
    };
    if plan.items.first().is_some_and(|i| i.is_go()) {
        return vec!["goroutine".into()];
    }
    let mut keys = vec!["caller".to_string(), "tid".to_string()];
    let Some(obj) = plan.objects.get(t.object).and_then(|o| objects.get(o).ok()) else {
        return keys;
    };
    let Some(f) = obj
        .symbols()
        .ok()
        .and_then(|s| s.function_containing(t.addr))
    else {
        return keys;
    };
    let Some(args) = plan::args::FuncArgs::for_functions(&obj, &[(&f, f.addr)]).pop() else {
        return keys;
    };
    keys.extend(
        args.record_args()
            .into_iter()
            .filter(|a| {
                plan::args::ArgRef::parse(&a.name)
                    .is_ok_and(|r| matches!(r, plan::args::ArgRef::Name(_)))
            })
            .map(|a| a.name),
    );
    if args.returns().is_ok() {
        keys.push("retval".into());
    }
    keys
}

/// The source of each node with call sites in the plan.
fn sources(plan: &Plan, objects: &mut Objects) -> HashMap<u32, Source> {
    let mut out = HashMap::new();
    let ids = (0..plan.items.len() as u32).chain(
        plan.site_ids()
            .filter(|(_, x)| x.expanded)
            .map(|(id, _)| id),
    );
    for id in ids {
        if let Some(src) = source_of(plan, id, objects) {
            out.insert(id, src);
        }
    }
    out
}

/// The sources of the nodes with call sites in `plan` that `known` has
/// not.
fn new_sources(
    plan: &Plan,
    known: &HashMap<u32, Source>,
    objects: &mut Objects,
) -> Vec<(u32, Source)> {
    plan.site_ids()
        .filter(|(id, x)| x.expanded && !known.contains_key(id))
        .map(|(id, _)| id)
        .collect::<Vec<_>>()
        .into_iter()
        .filter_map(|id| Some((id, source_of(plan, id, objects)?)))
        .collect()
}

/// What the view of a callee under an indirect call needs that `plan`
/// adds: the source of each callee broken down under such a call, and the
/// raw name of the function holding each such call.
fn indirect_views(
    plan: &Plan,
    objects: &mut Objects,
    via_sources: &mut HashMap<(u32, u64), Source>,
    callers: &mut HashMap<u32, String>,
) {
    for (id, x) in plan.site_ids() {
        if let Some(v) = &x.via {
            if let std::collections::hash_map::Entry::Vacant(e) =
                via_sources.entry((x.parent, v.addr))
            {
                let at = plan.slots.get(x.slot as usize).copied();
                if let Some(src) = at.and_then(|at| source_at(plan, at, objects)) {
                    e.insert(src);
                }
            }
        }
        if callers.contains_key(&id) || !plan.reads_callee(x.slot) {
            continue;
        }
        let caller = plan.slots.get(x.slot as usize).and_then(|&(o, addr)| {
            let obj = objects.get(plan.objects.get(o)?).ok()?;
            let f = obj.symbols().ok()?.function_containing(addr)?;
            Some(f.raw)
        });
        if let Some(raw) = caller {
            callers.insert(id, raw);
        }
    }
}

/// Where node `id`'s function is: its object and an address in it.
fn function_of(plan: &Plan, id: u32) -> Option<(usize, u64)> {
    if let Some(Node::Item(i)) = plan.node(id) {
        return match &i.kind {
            ItemKind::Function(t) => Some((t.object, t.addr)),
            _ => None,
        };
    }
    // A callee: where its first call site is probed.
    let first = plan.children(id).first()?;
    let slot = plan.site(*first)?.slot;
    plan.slots.get(slot as usize).copied()
}

fn source_of(plan: &Plan, id: u32, objects: &mut Objects) -> Option<Source> {
    source_at(plan, function_of(plan, id)?, objects)
}

/// The source of the function holding `addr` of object `object`.
fn source_at(plan: &Plan, (object, addr): (usize, u64), objects: &mut Objects) -> Option<Source> {
    let obj = objects.get(plan.objects.get(object)?).ok()?;
    let f = obj.symbols().ok()?.function_containing(addr)?;
    let decoded = plan::decode_function(&obj, &f).ok()?;
    let table = obj.line_table()?;
    let mut at: HashMap<String, (u32, u32, usize)> = HashMap::new();
    let mut inlined = HashMap::new();
    let mut own = Vec::new();
    for insn in &decoded.insns {
        let Some((file, line, inl)) = table.own_line(insn.addr) else {
            continue;
        };
        let e = at.entry(file.clone()).or_insert((line, line, 0));
        e.0 = e.0.min(line);
        e.1 = e.1.max(line);
        e.2 += 1;
        own.push((file, line, inl));
    }
    // The function's file: the one most of its code comes from.
    let (path, &(first, last, _)) = at.iter().max_by_key(|(_, v)| v.2)?;
    for (file, line, inl) in own {
        if let (true, Some(name)) = (&file == path, inl) {
            inlined.entry(line).or_insert(name);
        }
    }
    // The line that opens the function is above its first instruction's.
    let first = first.saturating_sub(1).max(1);
    let text = read_source(path, plan.pid);
    let lines = match text {
        Some(t) => t
            .lines()
            .enumerate()
            .map(|(i, l)| (i as u32 + 1, l.replace('\t', "    ")))
            .filter(|(n, _)| (first..=last).contains(n))
            .collect(),
        None => Vec::new(),
    };
    Some(Source {
        path: path.clone(),
        lines,
        inlined,
    })
}

/// The text of a source file: as the traced process sees its file system
/// (a container's), else as this one does.
fn read_source(path: &str, pid: Option<u32>) -> Option<String> {
    let in_root = pid.map(|p| format!("/proc/{p}/root{path}"));
    if let Some(t) = in_root.and_then(|p| std::fs::read_to_string(p).ok()) {
        return Some(t);
    }
    std::fs::read_to_string(path).ok()
}
