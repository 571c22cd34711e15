//! The run loop of `tachy latency` and `tachy list`: resolve, plan, attach,
//! wait, snapshot each interval, render, detach.

use std::collections::HashMap;
use std::io::Write;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};

use crate::callsites;
use crate::cli::{ExportSettings, Format, ListSettings, NestedOpts, Scoping, TraceSettings};
use crate::disasm::ProbeCost;
use crate::export::Exporter;
use crate::kernel;
use crate::naming::Namer;
use crate::plan::args::FuncArgs;
use crate::plan::by::ByKey;
use crate::plan::{self, ItemKind, Plan, PlanRequest, Settings, TreeRequest};
use crate::probe::{self, Tracer};
use crate::report::groups::RawGroup;
use crate::report::hlog::HlogWriter;
use crate::report::list as listing;
use crate::report::prom;
use crate::report::records::{self, Record, RecordSite};
use crate::report::tree::{self, human, TreeNode, TreeReport};
use crate::report::{self, Counts, FuncReport, Report};
use crate::resolve::{self, Objects, Scope};
use crate::scope;
use crate::stop;
use crate::symbols::{ElfObject, Function};
use crate::target::{self, Spawned};
use std::path::PathBuf;

/// Watches the maps of a process whose uretprobes stand on the proof that
/// it cannot unwind: an object loaded later that could (a C++ library
/// dlopened) ends tracing, so that no call entered after it gets a
/// uretprobe. Calls entered before it are safe: the frames further out
/// than theirs are in objects that can neither catch an exception nor run
/// cleanup code, so an unwind that reaches them ends as it would without
/// the uretprobe.
struct UnwindWatch {
    pid: u32,
    seen: std::collections::HashSet<PathBuf>,
    next: Instant,
}

impl UnwindWatch {
    fn new(plan: &Plan) -> Option<UnwindWatch> {
        let uses = plan.items.iter().any(|i| {
            matches!(&i.kind, ItemKind::Function(t) if t.exits.mode == plan::ExitMode::UretprobeProcess)
        });
        Some(UnwindWatch {
            pid: plan.pid.filter(|_| uses)?,
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

fn names_line(plan: &Plan) -> String {
    let items: Vec<(&str, Option<&std::path::Path>)> = plan
        .items
        .iter()
        .map(|it| {
            let obj = match &it.kind {
                ItemKind::Function(t) => plan.objects.get(t.object).map(|o| o.display.as_path()),
                _ => None,
            };
            (it.name.as_str(), obj)
        })
        .collect();
    let names = shown_names(&items);
    if names.len() <= 6 {
        names.join(", ")
    } else {
        format!("{} and {} more", names[..5].join(", "), names.len() - 5)
    }
}

/// Names as the header shows them: a name that functions of several
/// objects share says which object each one is in.
fn shown_names(items: &[(&str, Option<&std::path::Path>)]) -> Vec<String> {
    items
        .iter()
        .map(|&(name, obj)| {
            let elsewhere = items.iter().any(|&(n, o)| n == name && o != obj);
            match obj.and_then(|o| o.file_name()) {
                Some(file) if elsewhere => format!("{name} in {}", file.to_string_lossy()),
                _ => name.to_string(),
            }
        })
        .collect()
}

/// Every probe link is a file descriptor (one per probe where uprobe_multi
/// is missing): allow as many as the hard limit lets this process have.
fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// What `tachy latency` and `tachy nested` trace: where names are looked
/// up, and the program to start, if any.
struct Target {
    scope: Scope,
    /// The command's executable (after `--`), found on PATH.
    exe: Option<PathBuf>,
    /// Several processes (`-p A,B`, `--comm`, `--pgrep`), counted each.
    pids: Vec<u32>,
    /// `--cgroup`: the cgroup, and the processes in it now whose maps
    /// names may be looked up in, until one has them.
    cgroup: Option<(scope::Cgroup, Vec<u32>)>,
}

impl Target {
    fn new(s: &TraceSettings) -> Result<Target> {
        if let Some(sc) = &s.scoping {
            return Target::scoped(s, sc);
        }
        if let Some(pid) = s.pid {
            if let Some(tgid) = target::thread_group(pid).filter(|&t| t != pid) {
                bail!("{pid} is a thread of process {tgid}: use -p {tgid} -t {pid}");
            }
            return Ok(Target {
                scope: Scope::Process(target::process_maps(pid)?),
                exe: None,
                pids: Vec::new(),
                cgroup: None,
            });
        }
        let Some(cmd) = s.command.first() else {
            return Ok(Target {
                scope: Scope::Files,
                exe: None,
                pids: Vec::new(),
                cgroup: None,
            });
        };
        let exe = target::which(cmd)?;
        target::check_runnable(&exe)?;
        let image = target::program_image(&exe);
        let libs = target::needed_libraries(&image);
        Ok(Target {
            scope: Scope::Command { exe: image, libs },
            exe: Some(exe),
            pids: Vec::new(),
            cgroup: None,
        })
    }

    /// Several processes, or a cgroup: names are looked up in a process's
    /// maps (or the files named), and probes fire in every process that
    /// maps those files; the BPF side keeps the calls of the processes
    /// asked for.
    fn scoped(s: &TraceSettings, sc: &Scoping) -> Result<Target> {
        let pids = scope::pids(sc)?;
        if let Scoping::Cgroup(path) = sc {
            let cg = scope::cgroup(path)?;
            let files_only = s
                .specs
                .iter()
                .all(|x| x.object.as_deref().is_some_and(|o| o.contains('/')));
            if pids.is_empty() && !files_only {
                bail!(
                    "--cgroup {}: no process runs in it now to look names up in: name the program as PATH:FUNC, which also traces the processes started in it later",
                    path.display()
                );
            }
            return Ok(Target {
                scope: Scope::Files,
                exe: None,
                pids: Vec::new(),
                cgroup: Some((cg, if files_only { Vec::new() } else { pids })),
            });
        }
        // Processes of several programs: the functions are looked up in
        // every program (a name found in two is traced in both).
        let mut maps = Vec::new();
        for p in scope::one_per_program(&pids)? {
            maps.push(target::process_maps(p)?);
        }
        let maps =
            target::ProcessMaps::joined(maps).ok_or_else(|| anyhow!("no process to trace"))?;
        Ok(Target {
            scope: Scope::Process(maps),
            exe: None,
            pids,
            cgroup: None,
        })
    }

    /// What `s` asks to trace, in this target.
    fn request(&self, s: &TraceSettings) -> PlanRequest {
        PlanRequest {
            specs: s.specs.clone(),
            settings: Settings {
                filter_tid: s.tid,
                min_ns: s.min_ns,
                max_ns: s.max_ns,
                outermost: s.outermost,
                uretprobe: s.uretprobe,
                follow: s.follow,
                unit_ns: s.unit.ns(),
                cpu: s.cpu,
                cpu_hist: s.cpu_hist,
                by: s.by.clone(),
                record_min_ns: s.record,
                cgroup: self.cgroup.as_ref().map(|(c, _)| (c.id, c.level)),
                count_procs: s.scoping.is_some(),
            },
            pid: s.pid,
            pids: self.pids.clone(),
            force: s.force,
            filter: s.filter.clone(),
            tree: s.nested.as_ref().map(|n| TreeRequest {
                depth: n.depth,
                expand: n.expand.clone(),
            }),
            verbose: s.verbose,
        }
    }

    fn plan(&mut self, req: &PlanRequest, objects: &mut Objects) -> Result<Plan> {
        Ok(match self.cgroup.as_ref().map(|(_, pids)| pids.clone()) {
            // A cgroup holds several programs: the first process whose maps
            // have the functions names them.
            Some(pids) if !pids.is_empty() => {
                let mut first_err = None;
                let mut found = None;
                for pid in pids {
                    let Ok(maps) = target::process_maps(pid) else {
                        continue;
                    };
                    let scope = Scope::Process(maps);
                    match plan::build(req, &scope, objects) {
                        Ok(plan) => {
                            self.scope = scope;
                            found = Some(plan);
                            break;
                        }
                        Err(e) => {
                            first_err.get_or_insert(e);
                        }
                    }
                }
                match (found, first_err) {
                    (Some(plan), _) => plan,
                    (None, Some(e)) => return Err(e),
                    (None, None) => bail!("--cgroup: its processes have exited"),
                }
            }
            _ => self.plan_in_scope(req, objects)?,
        })
    }

    fn plan_in_scope(&self, req: &PlanRequest, objects: &mut Objects) -> Result<Plan> {
        plan::build(req, &self.scope, objects).map_err(|e| match (&self.scope, &self.exe) {
            (Scope::Command { exe: image, .. }, Some(exe)) if image != exe => anyhow::anyhow!(
                "{e} ({} is a script run by {}: name the program it starts as PATH:FUNC)",
                exe.display(),
                image.display()
            ),
            _ => e,
        })
    }

    /// Whom the header names.
    fn whom(&self, s: &TraceSettings, plan: &Plan, spawned: Option<&Spawned>) -> String {
        if let Some((cg, _)) = &self.cgroup {
            return format!("in cgroup {}", cg.path.display());
        }
        if !self.pids.is_empty() {
            let named: Vec<String> = self
                .pids
                .iter()
                .map(|&p| format!("{p} ({})", scope::comm(p).unwrap_or_default()))
                .collect();
            return format!("in pids {}", named.join(", "));
        }
        match (&s.pid, spawned, &self.scope) {
            (Some(pid), _, Scope::Process(m)) => {
                format!("in pid {pid} ({})", m.exe.display.display())
            }
            (None, Some(sp), _) => format!("in pid {} ({})", sp.pid, s.command.join(" ")),
            _ => {
                let objs: Vec<String> = plan
                    .objects
                    .iter()
                    .map(|o| o.display.display().to_string())
                    .collect();
                if objs.is_empty() {
                    "in every process".to_string()
                } else {
                    format!("in every process that maps {}", objs.join(", "))
                }
            }
        }
    }
}

/// `-t TID` must name a thread that exists (of the process, with `-p`).
fn check_thread(s: &TraceSettings) -> Result<()> {
    let Some(tid) = s.tid else { return Ok(()) };
    match s.pid {
        Some(pid) if !std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {
            bail!("-t {tid}: process {pid} has no thread {tid}")
        }
        None if !std::path::Path::new(&format!("/proc/{tid}")).exists() => {
            bail!("-t {tid}: no thread {tid} is running")
        }
        _ => Ok(()),
    }
}

fn header(s: &TraceSettings, plan: &Plan, whom: &str) -> String {
    let line = tracing_line(s, plan, whom);
    match s.record {
        Some(ns) => format!(
            "{line}\nRecording each call of at least {} as it ends: time of its end, pid, tid, (thread), function, duration{}, arguments{}.",
            human(ns as f64),
            if s.cpu { ", on-CPU/blocked/runnable" } else { "" },
            if s.nested.is_some() { "; below it, its call sites" } else { "" }
        ),
        None => line,
    }
}

fn tracing_line(s: &TraceSettings, plan: &Plan, whom: &str) -> String {
    let n = plan.items.len();
    if s.nested.is_none() {
        return format!(
            "Tracing {n} function{} {whom}: {}. Hit Ctrl-C to end.",
            if n == 1 { "" } else { "s" },
            names_line(plan)
        );
    }
    let levels = plan.sites.iter().map(|x| x.level).max().unwrap_or(0);
    format!(
        "Tracing {} and {} call site{} ({} level{}) {whom}. Hit Ctrl-C to end.",
        names_line(plan),
        plan.sites.len(),
        if plan.sites.len() == 1 { "" } else { "s" },
        levels,
        if levels == 1 { "" } else { "s" },
    )
}

pub fn latency(s: TraceSettings) -> Result<i32> {
    // Never freed: the process ends when this returns, and freeing the
    // symbol indexes and read caches of a large library (tens of thousands
    // of names) costs more than the rest of the exit.
    let mut objects = std::mem::ManuallyDrop::new(Objects::default());
    // From the start: a stop while planning or attaching (which can take
    // seconds) ends tachy at once and says so.
    stop::install();
    let mut target = Target::new(&s)?;
    let request = target.request(&s);
    let mut plan = with_notice("tachy: reading symbols and planning probes...", || {
        target.plan(&request, &mut objects)
    })
    .map_err(|e| exited(&s, e))?;
    if s.dry_run {
        // The plan is what --dry-run was asked for: standard output.
        let mut out = std::io::stdout().lock();
        write!(out, "{}", plan.describe())
            .and_then(|_| out.flush())
            .context("cannot write the plan to standard output")?;
        return Ok(0);
    }
    if s.verbose {
        eprint!("{}", plan.describe());
    }
    check_thread(&s)?;
    if s.record.is_some() {
        probe::record_buffer_size()?;
    }
    // Before anything is attached: a report file that cannot be written
    // must not cost a whole run.
    let mut reports = Reports::open(&s, plan.ids() as usize)?;
    probe::check_environment()?;
    // Also before attaching: a busy port or an unwritable textfile.
    let mut exporter = match &s.export {
        Some(e) => {
            let zeros = vec![Counts::default(); plan.ids() as usize];
            let records = s.record.map(|_| prom::RecordCounts {
                labels: e.labels.clone(),
                ..Default::default()
            });
            let series = metric_series(&plan, e, &zeros, None);
            let initial = prom::render_openmetrics(&series, records.as_ref());
            Some(Exporter::start(
                e.listen,
                e.textfile.as_deref(),
                e.every,
                initial,
            )?)
        }
        None => None,
    };
    if s.uretprobe {
        if plan.items.iter().any(|i| !i.is_go()) {
            eprintln!(
                "tachy: warning: --uretprobe: a C++ exception or Rust panic that unwinds through a traced function will abort the traced process"
            );
        }
        if let Some(go) = plan.items.iter().find(|i| i.is_go()) {
            eprintln!(
                "tachy: --uretprobe is not used for Go functions ({}{}): {}; their returns are probed on each ret",
                go.name,
                match plan.items.iter().filter(|i| i.is_go()).count() {
                    1 => String::new(),
                    n => format!(" and {} more", n - 1),
                },
                crate::plan::NOT_URETPROBE
            );
        }
    }
    if s.nested.is_some() && plan.sites.len() > 300 {
        eprintln!(
            "tachy: warning: {} call sites is many; each traced call pays for every site it passes",
            plan.sites.len()
        );
    }
    let mut spawned = match &target.exe {
        // Machine-read reports on stdout: the command's stdout goes to
        // stderr, so the two never mix.
        Some(exe) => Some(Spawned::start(
            exe,
            &s.command,
            s.output.machine_on_stdout(),
        )?),
        None => None,
    };
    if let Some(sp) = &spawned {
        plan.pid = Some(sp.pid);
    }
    raise_fd_limit();
    if !s.raw
        && plan
            .items
            .iter()
            .any(|i| matches!(i.kind, ItemKind::Function(_)))
    {
        let started = Instant::now();
        use crate::calibrate::Source;
        match crate::calibrate::load_or_measure(s.verbose) {
            Ok((cal, source)) => {
                plan.probe_time = cal.probe_time(&plan);
                if let Source::NotCached(why) = &source {
                    eprintln!(
                        "tachy: cannot cache the probes' own time {why}: each start measures it again (set TACHY_CACHE_DIR to a writable directory)"
                    );
                }
                if s.verbose {
                    eprintln!(
                        "tachy: {} ({} in {} ms)",
                        cal.describe(),
                        match source {
                            Source::Cached => "cached, read",
                            Source::CachedBusy =>
                                "measured within the hour on a busy machine: may be off by a tenth or more",
                            Source::Measured => "measured and cached",
                            Source::Busy =>
                                "measured on a busy machine, cached for an hour: may be off by a tenth or more",
                            Source::NotCached(_) => "measured, not cached",
                        },
                        started.elapsed().as_millis()
                    );
                }
            }
            // Tracing goes on without the correction, as with --raw.
            Err(e) => eprintln!(
                "tachy: cannot measure the probes' own time ({e:#}): durations include it"
            ),
        }
    }
    let mut storage = MaybeUninit::uninit();
    let mut tracer = attach(&mut storage, &plan, s.verbose).map_err(|e| exited(&s, e))?;
    if let Some(pid) = s.pid {
        if !target::process_alive(pid) {
            bail!("process {pid} exited before its probes were attached");
        }
    }
    if let (true, Some(with)) = (s.verbose, tracer.kernel_with) {
        eprintln!("tachy: kernel functions timed with {with}");
    }
    if s.verbose {
        eprintln!(
            "attached {} probes with {} {} link(s)",
            plan.probes.len(),
            tracer.link_count(),
            if tracer.multi {
                "uprobe_multi"
            } else {
                "uprobe"
            }
        );
        eprintln!(
            "tachy: BPF program loaded in {} ms, probes attached in {} ms",
            tracer.load_time.as_millis(),
            tracer.attach_time.as_millis()
        );
        eprintln!(
            "BPF programs loaded: {}",
            tracer.loaded_programs().join(", ")
        );
    }
    stop::tracing();
    let whom = target.whom(&s, &plan, spawned.as_ref());
    reports.header(&header(&s, &plan, &whom))?;
    if let Some(addr) = exporter.as_ref().and_then(|e| e.address()) {
        eprintln!("tachy: serving metrics at http://{addr}/metrics");
    }
    if let Some(sp) = spawned.as_mut() {
        sp.release()?;
    }
    let end = run(
        &plan,
        &s,
        &mut tracer,
        spawned.as_mut(),
        &mut reports,
        exporter.as_mut(),
    )?;
    reports.finish(&plan, &s)?;
    // The report is out. A later stop ends tachy at once: with 0, or the
    // command's status if it has one (128 + the signal if it still runs).
    stop::reported(match (&spawned, end.status) {
        (None, _) => Some(0),
        (Some(_), Some(code)) => Some(code),
        (Some(_), None) if !end.stopped => Some(0),
        (Some(_), None) => None,
    });
    drop(tracer);
    drop(exporter);
    let Some(sp) = spawned.as_mut() else {
        return Ok(0);
    };
    if end.nothing_counted && !s.follow {
        suggest_follow(&s, &plan, &target);
    }
    Ok(match end.status {
        Some(code) => code,
        None if end.stopped => wait_for_command(sp, &s.command),
        // The command runs on untraced, as tachy said; its status is
        // tachy's.
        None if end.unwind_loaded => sp.wait(),
        None => {
            eprintln!(
                "tachy: tracing stopped after -d; {} (pid {}) runs on",
                s.command.join(" "),
                sp.pid
            );
            0
        }
    })
}

/// An error of planning or attaching for `-p PID`, said as what caused
/// it when the process has exited since tracing began.
fn exited(s: &TraceSettings, e: anyhow::Error) -> anyhow::Error {
    match s.pid {
        Some(pid) if !target::process_alive(pid) => {
            anyhow!("process {pid} exited before its probes were attached")
        }
        _ => e,
    }
}

/// Attaches the plan's probes. Attaching thousands of probes takes
/// seconds: after a second without an end, say what is going on and
/// how far it got.
fn attach<'o>(
    storage: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
    plan: &Plan,
    verbose: bool,
) -> Result<Tracer<'o>> {
    let done = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    let total = plan.probes.len();
    let funcs = plan.items.len() + plan.sites.len();
    std::thread::scope(|scope| {
        scope.spawn(|| attach_progress(&done, &finished, total, funcs));
        let tracer = Tracer::attach(storage, plan, verbose, &done);
        finished.store(true, Ordering::SeqCst);
        if let Ok(t) = &tracer {
            for line in t.refused_lines(plan) {
                eprintln!("tachy: left out {line}");
            }
        }
        tracer
    })
}

/// Runs `work`; says `notice` on stderr if it has not ended after a
/// second and stderr is a terminal, so a slow start is not silence for
/// someone waiting (and scripts reading stderr get only errors).
fn with_notice<T>(notice: &str, work: impl FnOnce() -> T) -> T {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return work();
    }
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let until = Instant::now() + Duration::from_secs(1);
            while Instant::now() < until {
                if finished.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if !finished.load(Ordering::SeqCst) {
                eprintln!("{notice}");
            }
        });
        let out = work();
        finished.store(true, Ordering::SeqCst);
        out
    })
}

/// Prints "Attaching N probes to M functions..." once attaching has taken
/// a second, and how many are attached each second after that.
fn attach_progress(done: &AtomicUsize, finished: &AtomicBool, total: usize, funcs: usize) {
    let start = Instant::now();
    let mut said = false;
    let mut next = start + Duration::from_secs(1);
    while !finished.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() < next || finished.load(Ordering::SeqCst) {
            continue;
        }
        if !said {
            eprintln!(
                "tachy: attaching {total} probe{} to {funcs} function{}...",
                if total == 1 { "" } else { "s" },
                if funcs == 1 { "" } else { "s" },
            );
            said = true;
        } else {
            eprintln!(
                "tachy: {} of {total} probes attached ({} s)",
                done.load(Ordering::SeqCst).min(total),
                start.elapsed().as_secs()
            );
        }
        next += Duration::from_secs(1);
    }
}

/// How the run loop ended.
struct RunEnd {
    /// The command's exit code, if it exited.
    status: Option<i32>,
    /// Ended by Ctrl-C or SIGTERM.
    stopped: bool,
    /// No traced user function completed or left a call.
    nothing_counted: bool,
    /// Ended because an object that can unwind was loaded ([`UnwindWatch`]).
    unwind_loaded: bool,
}

/// Waits, reads the counters each interval (and on SIGUSR1), and hands
/// them to the reports until the traced process exits, the time is up or
/// tachy is told to stop.
fn run(
    plan: &Plan,
    s: &TraceSettings,
    tracer: &mut Tracer,
    mut spawned: Option<&mut Spawned>,
    reports: &mut Reports,
    mut exporter: Option<&mut Exporter>,
) -> Result<RunEnd> {
    let ids = plan.ids() as usize;
    let start = Instant::now();
    let mut next_report = s.interval.map(|i| start + i);
    let deadline = s.duration.map(|d| start + d);
    // Where the counts of the next report began.
    let mut interval_start = start;
    let mut end = RunEnd {
        status: None,
        stopped: false,
        nothing_counted: true,
        unwind_loaded: false,
    };
    // What was read from the kernel but not yet part of an interval's
    // report (read for a SIGUSR1 interim report).
    let mut carry: Vec<Counts> = vec![Counts::default(); ids];
    // Calls entered per process not yet reported, and the processes' names
    // (read while they run).
    let mut procs: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut comms: HashMap<u32, String> = plan
        .pids
        .iter()
        .filter_map(|&p| Some((p, scope::comm(p)?)))
        .collect();
    // `--prometheus`, `--textfile`: everything since tracing began.
    let mut cumulative: Vec<Counts> = vec![Counts::default(); ids];
    // --by: the groups read so far, and the names of their keys.
    let mut carry_groups: Vec<RawGroup> = Vec::new();
    let mut namer = Namer::default();
    // --by with metrics: the groups since tracing began; --record-slower-than
    // with metrics: the records since tracing began.
    let mut metric_groups = (exporter.is_some() && !s.by.is_empty()).then(|| {
        let by = s.by.iter().map(|k| k.name().to_string()).collect();
        prom::GroupTally::new(by, s.top.unwrap_or(prom::DEFAULT_GROUP_SERIES))
    });
    let mut metric_records = match (&s.export, s.record) {
        (Some(e), Some(_)) => Some(prom::RecordCounts {
            labels: e.labels.clone(),
            ..Default::default()
        }),
        _ => None,
    };
    // Records lost since the last report.
    let mut lost = 0u64;
    namer.set_args(&plan.by_args);
    // Where to look for a caller's file once its process has exited.
    let mut known: Vec<std::path::PathBuf> = plan
        .objects
        .iter()
        .flat_map(|o| [o.display.clone(), o.open_path.clone()])
        .collect();
    if let Some(sp) = spawned.as_deref() {
        known.push(sp.exe.clone());
    }
    namer.set_objects(known);
    // Which of a group's key values is its caller.
    let caller_key = s.by.iter().position(|k| *k == ByKey::Caller);
    if let (Some(_), Some(pid)) = (caller_key, plan.pid) {
        namer.watch(pid);
    }
    let mut next_watch = start;
    let mut recorder = tracer
        .record_reader()?
        .map(|reader| Recorder::new(plan, reader));
    let mut unwind_watch = UnwindWatch::new(plan);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(r) = recorder.as_mut() {
            let n = r.print(plan, reports)?;
            if let Some(m) = metric_records.as_mut() {
                m.recorded += n;
            }
        }
        let now = Instant::now();
        end.stopped = stop::requested();
        let mut done = end.stopped;
        if let Some(sp) = spawned.as_deref_mut() {
            if let Some(code) = sp.try_wait() {
                end.status = Some(code);
                done = true;
            }
        } else if let Some(pid) = s.pid {
            if !target::process_alive(pid) {
                done = true;
            }
        } else if !plan.pids.is_empty() && !s.follow && !tracer.followed_alive() {
            // Every one of several processes has exited.
            done = true;
        }
        // Followed forks outlive their parent: go on while any runs.
        if done && s.follow && !end.stopped && tracer.followed_alive() {
            done = false;
        }
        if deadline.is_some_and(|d| now >= d) {
            done = true;
        }
        if let Some(line) = unwind_watch.as_mut().and_then(|w| w.check(plan, now)) {
            eprintln!("{line}");
            unwind_watch = None;
            end.unwind_loaded = true;
            done = true;
        }
        let due = next_report.is_some_and(|t| now >= t);
        let interim = stop::take_interim();
        // A caller's address is named through its process's mappings,
        // read while the process runs: again when a caller is in none of
        // them (a library loaded after they were read).
        if let (Some(k), true) = (caller_key, now >= next_watch) {
            for (pid, vals) in tracer.group_keys() {
                if let Some(&addr) = vals.get(k) {
                    namer.cover(pid, addr);
                }
            }
            next_watch = now + Duration::from_millis(100);
        }
        let export = exporter.as_deref().is_some_and(|e| e.due(now));
        if interim || due || done || export {
            if plan.settings.count_procs {
                for (pid, n) in tracer.take_procs() {
                    *procs.entry(pid).or_default() += n;
                    comms
                        .entry(pid)
                        .or_insert_with(|| scope::comm(pid).unwrap_or_else(|| "?".into()));
                }
            }
            for (i, (c, mut n)) in carry.iter_mut().zip(tracer.take()?).enumerate() {
                n.probe_ns = plan.probe_time.get(i).map_or(0, |p| p.in_ns);
                c.merge(&n);
                if exporter.is_some() {
                    cumulative[i].merge(&n);
                }
            }
            let fresh = tracer.take_groups()?;
            if let Some(tally) = metric_groups.as_mut() {
                let read = fresh
                    .iter()
                    .map(|r| {
                        let keys = (!r.other).then(|| namer.name(&s.by, r));
                        (r.id, keys, r.counts.clone())
                    })
                    .collect();
                tally.add(read);
            }
            report::groups::merge_raw(&mut carry_groups, fresh);
            if recorder.is_some() {
                let n = tracer.take_records_lost()?;
                lost += n;
                if let Some(m) = metric_records.as_mut() {
                    m.lost += n;
                }
            }
        }
        if let (Some(e), Some(settings)) = (exporter.as_deref_mut(), &s.export) {
            if export || done {
                let series = metric_series(plan, settings, &cumulative, metric_groups.as_ref());
                let om = prom::render_openmetrics(&series, metric_records.as_ref());
                e.publish(om, now, done)?;
            }
        }
        let mut groups = GroupsIn {
            raw: &carry_groups,
            namer: &mut namer,
            max: tracer.groups_max,
        };
        if interim && !(due || done) {
            // An interim report: everything since the last report, which
            // the next one still includes.
            let who = contributors(plan, &procs, &comms);
            let span = now.saturating_duration_since(interval_start);
            reports.emit(plan, s, &carry, span, &mut groups, who.as_deref(), false)?;
        }
        if due || done {
            if let Some(r) = recorder.as_mut() {
                // Records that arrived after the read above are printed
                // here and counted in the next metrics.
                let n = r.print(plan, reports)?;
                if let Some(m) = metric_records.as_mut() {
                    m.recorded += n;
                }
                reports.records_lost(std::mem::take(&mut lost))?;
            }
            let counts = std::mem::replace(&mut carry, vec![Counts::default(); ids]);
            end.nothing_counted &= counts[..plan.items.len()]
                .iter()
                .all(|c| c.count == 0 && c.unwound == 0 && c.filtered == 0);
            let who = contributors(plan, &procs, &comms);
            procs.clear();
            let span = now.saturating_duration_since(interval_start);
            interval_start = now;
            reports.emit(plan, s, &counts, span, &mut groups, who.as_deref(), true)?;
            carry_groups.clear();
            if let (Some(t), Some(i)) = (next_report.as_mut(), s.interval) {
                while *t <= now {
                    *t += i;
                }
            }
        }
        if done {
            return Ok(end);
        }
    }
}

/// Prints the records of `--record-slower-than` as they arrive.
struct Recorder {
    reader: probe::RecordReader,
    /// Per call site (index in plan.sites): its place in the tree, depth
    /// first, which orders a record's sites.
    rank: Vec<usize>,
}

impl Recorder {
    fn new(plan: &Plan, reader: probe::RecordReader) -> Recorder {
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
        Recorder { reader, rank }
    }

    /// Prints the records that arrived; returns how many.
    fn print(&mut self, plan: &Plan, reports: &mut Reports) -> Result<u64> {
        let got = self.reader.read()?;
        if got.is_empty() {
            return Ok(0);
        }
        let offset = realtime_offset();
        let records: Vec<Record> = got.iter().map(|k| self.record(plan, k, offset)).collect();
        reports.records(&records)?;
        Ok(records.len() as u64)
    }

    fn record(&self, plan: &Plan, k: &probe::KernelRecord, offset: i128) -> Record {
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
            sites,
            more_sites: k.more_sites,
        }
    }
}

/// A record's arguments as its function's plan says to show them (the
/// first three registers for an item the plan says nothing of).
fn record_args(plan: &Plan, k: &probe::KernelRecord) -> Vec<records::Arg> {
    use plan::args::{Fetch, RecordArg, Shown};
    use records::ArgValue;
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

/// A process that entered a traced function during a report's interval.
struct Contributor {
    pid: u32,
    comm: String,
    /// Calls entered (of the traced functions, not their call sites).
    calls: u64,
}

/// The processes a report names, when the trace is scoped to several.
fn contributors(
    plan: &Plan,
    procs: &std::collections::BTreeMap<u32, u64>,
    comms: &HashMap<u32, String>,
) -> Option<Vec<Contributor>> {
    plan.settings.count_procs.then(|| {
        procs
            .iter()
            .map(|(&pid, &calls)| Contributor {
                pid,
                comm: comms.get(&pid).cloned().unwrap_or_else(|| "?".into()),
                calls,
            })
            .collect()
    })
}

/// The line of a text report that names the processes that contributed.
/// Their calls are counted at entry, so they also hold the calls a
/// function's `count` leaves out (left by exception, filtered out, still
/// running when the report was taken): the line says so, since a `--by
/// pid` table above it counts calls timed, and the two differ by those.
fn contributors_line(who: &[Contributor]) -> String {
    if who.is_empty() {
        return "processes: none entered a traced function".to_string();
    }
    let list: Vec<String> = who
        .iter()
        .map(|c| format!("{} ({}) {}", c.pid, c.comm, c.calls))
        .collect();
    format!(
        "processes, by calls entered (timed or not: also those left by exception, filtered out or still running, which count leaves out): {}",
        list.join(", ")
    )
}

/// A JSON report line with a `processes` array added.
fn with_contributors(line: &[u8], who: &[Contributor]) -> Vec<u8> {
    let Ok(serde_json::Value::Object(mut v)) = serde_json::from_slice(line) else {
        return line.to_vec();
    };
    let list: Vec<serde_json::Value> = who
        .iter()
        .map(|c| serde_json::json!({"pid": c.pid, "comm": c.comm, "calls": c.calls}))
        .collect();
    v.insert("processes".into(), serde_json::Value::Array(list));
    let mut out = serde_json::to_vec(&v).unwrap_or_else(|_| line.to_vec());
    out.push(b'\n');
    out
}

/// After Ctrl-C the command runs on until it exits (it usually got the
/// same Ctrl-C): say that tachy waits for it, then wait. Said once the
/// signals of the same stop are over, so that the next Ctrl-C is one the
/// user typed after reading it.
fn wait_for_command(sp: &mut Spawned, command: &[String]) -> i32 {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200)
        || stop::since_first().is_some_and(|t| t < stop::WINDOW)
    {
        if let Some(code) = sp.try_wait() {
            return code;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "tachy: waiting for {} (pid {}) to exit; Ctrl-C again to stop waiting",
        command.join(" "),
        sp.pid
    );
    sp.wait()
}

/// Programs that run another program rather than being it.
const WRAPPERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "busybox", "env", "nice", "nohup", "timeout",
    "time", "sudo", "su", "setsid", "stdbuf", "taskset", "chrt", "ionice", "xargs", "make",
    "strace", "valgrind",
];

/// The command ran, the functions are in another program, and nothing was
/// counted: the command most likely started that program as a new
/// process (or exec'd it), which the probes do not follow by default.
fn suggest_follow(s: &TraceSettings, plan: &Plan, target: &Target) {
    let Scope::Command { exe: image, libs } = &target.scope else {
        return;
    };
    let Some(first) = plan.objects.first().map(|o| &o.display) else {
        return;
    };
    let name = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let wrapper = WRAPPERS.contains(&name(image).as_str())
        || target
            .exe
            .as_deref()
            .is_some_and(|e| WRAPPERS.contains(&name(e).as_str()));
    // The command's program and its libraries, as files.
    let own: Vec<PathBuf> = std::iter::once(image)
        .chain(libs)
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let elsewhere = plan.objects.iter().all(|o| {
        let p = std::fs::canonicalize(&o.display).unwrap_or_else(|_| o.display.clone());
        !own.contains(&p)
    });
    if elsewhere {
        eprintln!(
            "tachy: nothing was counted: {} is {}; if it starts {} as a new process or by exec, \
             trace with --follow",
            s.command[0],
            if wrapper {
                "a shell or wrapper".to_string()
            } else {
                format!("not {}", first.display())
            },
            first.display()
        );
    }
}

/// Where reports go: standard output or the file of `-o`/`--svg`, opened
/// before any probe is attached.
struct Reports {
    format: Format,
    file: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
    /// `--hlog`: the interval log, and when its next interval began.
    hlog: Option<(
        PathBuf,
        HlogWriter<std::io::BufWriter<std::fs::File>>,
        SystemTime,
    )>,
    /// `--svg`: the counts of the whole run, drawn when tracing ends.
    whole: Vec<Counts>,
}

impl Reports {
    fn open(s: &TraceSettings, ids: usize) -> Result<Reports> {
        let file = match &s.output.path {
            Some(p) => {
                let f = std::fs::File::create(p)
                    .with_context(|| format!("cannot write {}", p.display()))?;
                Some((p.clone(), std::io::BufWriter::new(f)))
            }
            None => None,
        };
        let hlog = match &s.hlog {
            Some(p) => {
                let f = std::fs::File::create(p)
                    .with_context(|| format!("cannot write {}", p.display()))?;
                let now = SystemTime::now();
                let w = HlogWriter::new(std::io::BufWriter::new(f), now, s.unit)
                    .with_context(|| format!("cannot write {}", p.display()))?;
                Some((p.clone(), w, now))
            }
            None => None,
        };
        Ok(Reports {
            format: s.output.format,
            file,
            hlog,
            whole: vec![Counts::default(); ids],
        })
    }

    /// The "Tracing ..." line: with the text report when that goes to
    /// standard output, on standard error otherwise.
    fn header(&mut self, line: &str) -> Result<()> {
        // The first interval begins now that the probes are attached.
        if let Some((_, _, since)) = &mut self.hlog {
            *since = SystemTime::now();
        }
        if self.format == Format::Text && self.file.is_none() {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")
                .and_then(|_| out.flush())
                .context("cannot write the report to standard output")?;
        } else {
            eprintln!("{line}");
        }
        Ok(())
    }

    /// Prints slow-call records where the reports go (standard output
    /// beside an SVG file), one line (or JSON object) each.
    fn records(&mut self, records: &[Record]) -> Result<()> {
        let json = self.format == Format::Json;
        let draw = |w: &mut dyn Write| -> std::io::Result<()> {
            let mut w = w;
            for r in records {
                if json {
                    records::render_json(r, &mut w)?;
                } else {
                    records::render_text(r, &mut w)?;
                }
            }
            Ok(())
        };
        self.write(draw)
    }

    /// Says how many records the ring buffer had no room for (JSON: always,
    /// before each report).
    fn records_lost(&mut self, lost: u64) -> Result<()> {
        let json = self.format == Format::Json;
        self.write(|w: &mut dyn Write| {
            let mut w = w;
            if json {
                records::render_lost_json(lost, &mut w)
            } else {
                records::render_lost_text(lost, &mut w)
            }
        })
    }

    /// Writes with `draw` to the reports' file, or standard output.
    fn write(&mut self, draw: impl Fn(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        match &mut self.file {
            Some((path, f)) if self.format != Format::Svg => {
                draw(f)
                    .and_then(|_| f.flush())
                    .with_context(|| format!("cannot write the records to {}", path.display()))?;
            }
            _ => {
                let mut out = std::io::stdout().lock();
                draw(&mut out)
                    .and_then(|_| out.flush())
                    .context("cannot write the records to standard output")?;
            }
        }
        Ok(())
    }

    /// Renders one report of `counts`, gathered over `span`. `interval`
    /// is false for a SIGUSR1 interim report, whose counts the next report
    /// includes again.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        plan: &Plan,
        s: &TraceSettings,
        counts: &[Counts],
        span: Duration,
        groups: &mut GroupsIn<'_>,
        who: Option<&[Contributor]>,
        interval: bool,
    ) -> Result<()> {
        if let (true, Some((path, log, since))) = (interval, &mut self.hlog) {
            let report = hlog_report(plan, s, counts, span);
            log.write(&report, *since)
                .with_context(|| format!("cannot write {}", path.display()))?;
            *since = report.time;
        }
        if self.format == Format::Svg {
            if interval {
                for (w, c) in self.whole.iter_mut().zip(counts) {
                    w.merge(c);
                }
            }
            return Ok(());
        }
        let format = self.format;
        let flat = s.nested.is_none().then(|| {
            let mut report = flat_report(plan, s, counts, span);
            add_groups(&mut report, s, groups);
            report
        });
        let draw = |w: &mut dyn Write| -> std::io::Result<()> {
            if let (Some(who), Format::Json) = (who, format) {
                // The report, then the processes added to its object.
                let mut line = Vec::new();
                draw_report(plan, s, counts, flat.as_ref(), format, &mut line)?;
                return w.write_all(&with_contributors(&line, who));
            }
            draw_report(plan, s, counts, flat.as_ref(), format, w)?;
            match (who, format) {
                (Some(who), Format::Text) => writeln!(w, "{}", contributors_line(who)),
                _ => Ok(()),
            }
        };
        let file = self
            .file
            .as_mut()
            .map(|(p, f)| (p.as_path(), f as &mut dyn Write));
        report::draw_to(file, draw)
    }

    /// Draws the flame graph of the whole run, for `--svg`.
    fn finish(&mut self, plan: &Plan, s: &TraceSettings) -> Result<()> {
        let (Format::Svg, Some((path, f)), Some(n)) = (self.format, &mut self.file, &s.nested)
        else {
            return Ok(());
        };
        let report = tree_report(plan, s, n, &self.whole);
        tree::render_svg(&report, f)
            .and_then(|_| f.flush())
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("tachy: flame graph written to {}", path.display());
        Ok(())
    }
}

/// --by: the groups of an interval as the kernel counted them, how to
/// name their keys, and how many the kernel keeps.
struct GroupsIn<'a> {
    raw: &'a [RawGroup],
    namer: &'a mut Namer,
    max: u32,
}

/// --by: each function's groups, named, sorted and folded by --top.
fn add_groups(report: &mut Report, s: &TraceSettings, g: &mut GroupsIn<'_>) {
    if s.by.is_empty() {
        return;
    }
    let by: Vec<String> = s.by.iter().map(|k| k.name().to_string()).collect();
    for (id, f) in report.funcs.iter_mut().enumerate() {
        let mut named = Vec::new();
        let mut full: Option<(u64, Counts)> = None;
        for r in g.raw.iter().filter(|r| r.id as usize == id) {
            if r.other {
                full.get_or_insert_with(|| (g.max.into(), Counts::default()))
                    .1
                    .merge(&r.counts);
            } else {
                named.push(report::groups::Group {
                    keys: g.namer.name(&s.by, r),
                    counts: r.counts.clone(),
                });
            }
        }
        f.groups = Some(report::groups::Groups::build(
            by.clone(),
            named,
            full,
            s.top,
        ));
    }
}

/// One report in `format`, as the renderers draw it.
fn draw_report(
    plan: &Plan,
    s: &TraceSettings,
    counts: &[Counts],
    flat: Option<&Report>,
    format: Format,
    mut w: &mut dyn Write,
) -> std::io::Result<()> {
    match &s.nested {
        Some(n) => {
            let report = tree_report(plan, s, n, counts);
            match format {
                Format::Json => tree::render_json(&report, &mut w),
                Format::Folded => tree::render_folded(&report, &mut w),
                _ => {
                    writeln!(w)?;
                    tree::render_text(&report, &mut w)
                }
            }
        }
        None => {
            let Some(report) = flat else {
                return Ok(());
            };
            if format == Format::Json {
                report::json::render(report, &mut w)
            } else {
                writeln!(w)?;
                report::text::render(report, &mut w)
            }
        }
    }
}

/// The report of the traced functions' `counts`, gathered over `span`.
fn flat_report(plan: &Plan, s: &TraceSettings, counts: &[Counts], span: Duration) -> Report {
    Report {
        time: SystemTime::now(),
        span: Some(span),
        unit: s.unit,
        timestamp: s.timestamp,
        all: s.all,
        funcs: plan
            .items
            .iter()
            .zip(counts)
            .map(|(f, counts)| FuncReport {
                name: f.name.clone(),
                raw_name: f.raw_name.clone(),
                object: plan.object_of(f).to_path_buf(),
                go: f.is_go(),
                counts: counts.clone(),
                groups: None,
            })
            .collect(),
    }
}

/// The histograms of `--hlog`: every traced function's, and with `tachy
/// nested` every call site's, named by its path from the traced function
/// (`f;g [a.c:12];h [b.c:40]`, the frames of the folded stacks) in the
/// object of that function.
fn hlog_report(plan: &Plan, s: &TraceSettings, counts: &[Counts], span: Duration) -> Report {
    let mut report = flat_report(plan, s, counts, span);
    if s.nested.is_none() {
        return report;
    }
    let clean = |name: &str| name.replace([';', '\n'], ",");
    let frame = |x: &plan::SiteNode| match &x.site.location {
        Some(l) => clean(&format!("{} [{l}]", x.site.name)),
        None => clean(&x.site.name),
    };
    // A site's path is its parent's and one more frame; parents come
    // before their sites in the plan. The root is a traced function.
    let mut paths: HashMap<u32, String> = HashMap::with_capacity(plan.sites.len());
    for (id, x) in plan.site_ids() {
        let up = match plan.node(x.parent) {
            Some(plan::Node::Item(f)) => Some(clean(&f.name)),
            _ => paths.get(&x.parent).cloned(),
        };
        let Some(base) = up else { continue };
        let path = format!("{base};{}", frame(x));
        paths.insert(id, path.clone());
        let (Some(f), Some(c)) = (
            plan.items.get(plan.root_of(id) as usize),
            counts.get(id as usize),
        ) else {
            continue;
        };
        report.funcs.push(FuncReport {
            raw_name: path.clone(),
            name: path,
            object: plan.object_of(f).to_path_buf(),
            go: f.is_go(),
            counts: c.clone(),
            groups: None,
        });
    }
    report
}

/// The series of `--prometheus` and `--textfile`: one per traced function,
/// one per call site of `tachy nested` and those of the `--by` groups,
/// labelled with names as the reports show them and the user's labels.
fn metric_series(
    plan: &Plan,
    e: &ExportSettings,
    counts: &[Counts],
    groups: Option<&prom::GroupTally>,
) -> Vec<prom::Series> {
    let name_of = |id: u32| plan.node(id).map(|n| n.name().to_string());
    let series = |kind, mut labels: Vec<(String, String)>, c: &Counts| {
        labels.extend(e.labels.iter().cloned());
        prom::Series {
            kind,
            labels,
            hist: c.hist.clone(),
            count: c.count,
            total_ns: c.total_ns,
            unwound: c.unwound,
            filtered: c.filtered,
            arg_filtered: c.arg_filtered,
        }
    };
    let mut out: Vec<prom::Series> = Vec::with_capacity(counts.len());
    let function_labels = |id: u32| match plan.items.get(id as usize) {
        Some(f) => vec![
            ("function".into(), f.name.clone()),
            ("object".into(), plan.object_of(f).display().to_string()),
        ],
        None => vec![("function".into(), format!("#{id}"))],
    };
    for (id, c) in (0..plan.items.len() as u32).zip(counts) {
        out.push(series(prom::SeriesKind::Function, function_labels(id), c));
    }
    for ((id, x), c) in plan.site_ids().zip(counts.iter().skip(plan.items.len())) {
        let location = match &x.site.location {
            Some(l) => l.clone(),
            None => format!("{:#x}", x.site.addr),
        };
        let labels = vec![
            (
                "function".into(),
                name_of(plan.root_of(id)).unwrap_or_default(),
            ),
            ("caller".into(), name_of(x.parent).unwrap_or_default()),
            ("site".into(), x.site.name.clone()),
            ("location".into(), location),
        ];
        out.push(series(prom::SeriesKind::Site, labels, c));
    }
    for mut g in groups
        .map(|g| g.series(function_labels))
        .unwrap_or_default()
    {
        g.labels.extend(e.labels.iter().cloned());
        out.push(g);
    }
    // Two series may not share their labels: the same function name in one
    // object twice, or one line calling the same function twice. The
    // second gets `(2)` after its last own label.
    let own = |s: &prom::Series| s.labels.len() - e.labels.len();
    for i in 1..out.len() {
        let mut n = 1;
        while out[..i].iter().any(|o| o.labels == out[i].labels) {
            n += 1;
            let k = own(&out[i]) - 1;
            let base = out[i].labels[k]
                .1
                .trim_end_matches(&format!(" ({})", n - 1))
                .to_string();
            out[i].labels[k].1 = format!("{base} ({n})");
        }
    }
    out
}

/// The tree under node `id`.
fn tree_node(plan: &Plan, counts: &[Counts], id: u32, hist: bool) -> TreeNode {
    let c = &counts[id as usize];
    // A site is Go code when its traced function is.
    let go = plan
        .items
        .get(plan.root_of(id) as usize)
        .is_some_and(|f| f.is_go());
    let kids = plan
        .children(id)
        .iter()
        .map(|&k| tree_node(plan, counts, k, hist))
        .collect();
    let (name, site, kind) = match plan.node(id) {
        Some(plan::Node::Site(x)) => (
            x.site.name.clone(),
            x.site.location.clone(),
            x.site.kind.as_str(),
        ),
        Some(plan::Node::Item(f)) => (f.name.clone(), None, "function"),
        None => (format!("#{id}"), None, "function"),
    };
    TreeNode {
        name,
        site,
        kind,
        count: c.count,
        total_ns: c.total_ns,
        unwound: c.unwound,
        filtered: c.filtered,
        arg_filtered: c.arg_filtered,
        hist: (hist && kind != "function").then(|| c.hist.clone()),
        hist_early: c.hist_early,
        cpu: c.cpu.clone(),
        probe_ns: c.probe_ns,
        under: c.under,
        go,
        children: kids,
    }
}

fn tree_report(plan: &Plan, s: &TraceSettings, n: &NestedOpts, counts: &[Counts]) -> TreeReport {
    let filter = match (s.min_ns, s.max_ns) {
        (None, None) => None,
        (Some(lo), None) => Some(format!("slower than {}", human(lo as f64))),
        (None, Some(hi)) => Some(format!("faster than {}", human(hi as f64))),
        (Some(lo), Some(hi)) => Some(format!(
            "between {} and {}",
            human(lo as f64),
            human(hi as f64)
        )),
    };
    TreeReport {
        time: SystemTime::now(),
        timestamp: s.timestamp,
        unit: s.unit,
        filter,
        all_sites: n.all_sites,
        roots: (0..plan.items.len() as u32)
            .map(|id| tree_node(plan, counts, id, n.hist))
            .collect(),
    }
}

pub fn list(a: ListSettings) -> Result<i32> {
    let scope = match a.pid {
        Some(pid) => Scope::Process(target::process_maps(pid)?),
        // A bare name: a kernel function, if the kernel has one.
        None => Scope::Files,
    };
    let mut out = std::io::stdout().lock();
    let mut calls: Vec<(String, u32)> = Vec::new();
    for spec in a.specs.iter().filter(|s| s.is_syscall()) {
        for (name, nr) in kernel::match_syscalls(spec.pattern.as_str())? {
            if !calls.iter().any(|(_, n)| *n == nr) {
                calls.push((name.to_string(), nr));
            }
        }
    }
    if !calls.is_empty() {
        listing::render_syscalls(&calls, &mut out)?;
    }
    if a.specs.iter().all(|s| s.is_syscall()) {
        return Ok(0);
    }
    // Never freed, as in `latency`.
    let mut objects = std::mem::ManuallyDrop::new(Objects::default());
    // Each pattern on its own: what matched is listed, then what did not
    // is said, and the exit status is 1.
    let mut resolved = resolve::Resolution::default();
    let mut misses: Vec<anyhow::Error> = Vec::new();
    for spec in a.specs.iter().filter(|s| !s.is_syscall()) {
        let one = if spec.is_kernel() {
            // Listing is not tracing: no limit on how many.
            kernel::match_kernel_functions(spec.pattern.as_str()).map(|names| {
                let mut r = resolve::Resolution::default();
                r.kernel.push((spec.pattern.as_str().to_string(), names));
                r
            })
        } else {
            resolve::resolve(std::slice::from_ref(spec), &scope, &mut objects)
        };
        match one {
            Ok(r) => resolved.add(r),
            Err(e) if a.specs.len() > 1 => misses.push(e),
            Err(e) => return Err(e),
        }
    }
    let kernel: Vec<String> = resolved.kernel.into_iter().flat_map(|(_, n)| n).collect();
    listing::render_kernel(&kernel, &mut out)?;
    for r in &resolved.user {
        listing::render_object(&r.obj.display, &r.obj.describe_source(r.source), &mut out)?;
        for f in &r.funcs {
            let sites = match a.sites {
                true => {
                    let decoded = plan::decode_function(&r.obj, f)?;
                    Some(
                        callsites::sites(&decoded, &r.obj)
                            .into_iter()
                            .map(|st| listing::ListedSite {
                                addr: st.addr,
                                kind: st.kind.as_str().to_string(),
                                location: st.location,
                                name: st.name,
                            })
                            .collect(),
                    )
                }
                false => None,
            };
            let listed = listing::ListedFunc {
                name: f.display_name(),
                lang: f.names.lang.as_str().to_string(),
                addr: f.addr,
                size: f.size,
                probes: probing(r, f),
                sites,
                ifunc: f.ifunc.as_ref().map(|i| i.describe()),
            };
            listing::render_func(&listed, &mut out)?;
        }
    }
    if misses.is_empty() {
        return Ok(0);
    }
    out.flush()
        .context("cannot write the list to standard output")?;
    for e in &misses {
        eprintln!("tachy: {e:#}");
    }
    Ok(1)
}

/// How `tachy latency` would probe `f`, planned alone.
fn probing(r: &resolve::Resolved, f: &Function) -> std::result::Result<listing::Probing, String> {
    let mut p = Plan::default();
    let id = p
        .add_function(&r.obj, f, r.source)
        .map_err(|e| format!("{e:#}"))?;
    p.finish();
    let ItemKind::Function(t) = &p.items[id as usize].kind else {
        return Err("not a function of the object".into());
    };
    Ok(listing::Probing {
        fragments: t.fragments,
        entry_offset: t.entry_addr - t.addr,
        entry_insn: t.entry_insn.clone(),
        entry_emulated: t.entry_cost == ProbeCost::Emulated,
        returns: t.exits.describe(),
        rets: t.exits.rets,
        early_rets: t.exits.early_rets,
        early_points: t.exits.early_points,
        early_stepped: t.exits.early_stepped,
        tail_callees: t.exits.tail_callees.clone(),
        unknown_tails: t.exits.unknown_tails,
        internal_jumps: t.exits.internal_jumps,
        checked_jumps: t.exits.checked_jumps,
        unchecked_jumps: t.exits.unchecked_jumps,
        unnamed_fragments: t.exits.unnamed_fragments,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_processes_line_says_it_counts_calls_entered() {
        let who = [
            super::Contributor {
                pid: 4242,
                comm: "kvd".into(),
                calls: 812,
            },
            super::Contributor {
                pid: 4250,
                comm: "kvd".into(),
                calls: 1,
            },
        ];
        assert_eq!(
            super::contributors_line(&who),
            "processes, by calls entered (timed or not: also those left by exception, filtered out or still running, which count leaves out): 4242 (kvd) 812, 4250 (kvd) 1"
        );
    }

    use super::*;
    use std::path::Path;

    #[test]
    fn a_name_in_two_objects_says_which_is_which() {
        let a = Some(Path::new("/usr/lib/liba.so.1"));
        let b = Some(Path::new("/opt/x/libb.so"));
        assert_eq!(
            shown_names(&[("f", a), ("g", a), ("f", b), ("syscall:read", None)]),
            vec!["f in liba.so.1", "g", "f in libb.so", "syscall:read"]
        );
        // Two instances in one object keep their name.
        assert_eq!(shown_names(&[("t", a), ("t", a)]), vec!["t", "t"]);
    }
}
