//! `tachy latency` (and `tachy nested`, whose own parts are in
//! `nested.rs`): the target, the plan, the outputs, the attach, the run
//! loop, the last report, and the traced command's end, in that order.

use std::io::Write;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::budget::Budget;
use super::nested;
use super::options::ReportOptions;
use super::run::{self, RunLimits};
use super::sink::{self, MetricsOutput, Sink};
use super::target::{
    check_thread, exited_while_attaching, exited_while_planning, gone, suggest_follow,
    wait_for_command, TraceTarget,
};
use crate::cli::{Mode, TraceSettings};
use crate::plan::{ItemKind, Plan};
use crate::probe::{self, Live, Tracer};
use crate::report::fmt::human;
use crate::resolve::Objects;
use crate::stop;
use crate::target::{self, Spawned};

/// `tachy latency` and `tachy nested`: plan, attach, run, report.
//
// The command's flow top to bottom, each stage a call or a short block
// whose order matters (what must fail before probes are attached, what is
// said when): split further, the order would be spread over functions.
pub fn latency(s: TraceSettings) -> Result<i32> {
    // Never freed: the process ends when this returns, and freeing the
    // symbol indexes and read caches of a large library (tens of thousands
    // of names) costs more than the rest of the exit.
    let mut objects = std::mem::ManuallyDrop::new(Objects::default());
    // From the start: a stop while planning or attaching (which can take
    // seconds) ends tachy at once and says so.
    stop::install();
    let mut target = TraceTarget::new(&s)?;
    let request = target.request(&s);
    let plan = with_notice("tachy: reading symbols and planning probes...", || {
        target.plan(&request, &mut objects)
    })
    .map_err(|e| exited_while_planning(&s, e))?;
    if s.dry_run {
        // The plan is what --dry-run was asked for: standard output.
        let mut out = std::io::stdout().lock();
        // Prices of this machine: none for code of another one.
        let prices = plan
            .foreign
            .is_none()
            .then(crate::calibrate::cached_prices)
            .flatten();
        write!(out, "{}", plan.describe_priced(prices.as_ref()))
            .and_then(|_| out.flush())
            .context("cannot write the plan to standard output")?;
        return Ok(0);
    }
    if s.verbose {
        eprint!("{}", plan.describe());
    }
    plan.check_host_arch()?;
    check_thread(&s)?;
    if s.record.is_some() {
        probe::record_buffer_size(None)?;
    }
    let opts = ReportOptions::new(&s);
    // Before anything is attached: a report file that cannot be written
    // must not cost a whole run.
    let mut sinks = sink::open(
        s.output.format,
        s.output.path.as_ref(),
        s.hlog.as_ref(),
        &opts,
        plan.ids() as usize,
    )?;
    probe::check_environment()?;
    // Also before attaching: a busy port or an unwritable textfile.
    let metrics = match &s.export {
        Some(e) => Some(MetricsOutput::start(&plan, e, &opts, s.record.is_some())?),
        None => None,
    };
    let address = metrics.as_ref().and_then(|m| m.address());
    if let Some(m) = metrics {
        sinks.0.push(Box::new(m));
    }
    warn_uretprobes(&s, &plan);
    // With a budget, the budget says what it does with many sites.
    if let (Some(n), None) = (s.mode.nested(), s.max_overhead) {
        super::budget::check_unbudgeted(&plan, n.all_sites)?;
        nested::warn_many_sites(&plan);
    }
    let mut spawned = match &target.exe {
        // Machine-read reports on stdout: the command's stdout goes to
        // stderr, so the two never mix.
        Some(exe) => Some(Spawned::start(
            exe,
            s.traced.command(),
            s.output.machine_on_stdout(),
        )?),
        None => None,
    };
    raise_fd_limit();
    let cal = match (s.raw, s.max_overhead) {
        (true, None) => None,
        _ => calibration(&plan, s.verbose),
    };
    let mut live = Live::new(
        &plan,
        spawned.as_ref().map(|sp| sp.pid),
        match (s.raw, &cal) {
            (false, Some(c)) => c.probe_time(&plan),
            _ => Vec::new(),
        },
    );
    // A budget (which needs the prices) attaches the sites of a large
    // plan as it sees room for them.
    if s.max_overhead.is_some() && cal.is_some() {
        live.held_back = Budget::held_at_start(&plan);
    }
    let mut storage = MaybeUninit::uninit();
    let mut tracer =
        attach(&mut storage, &plan, &live, s.verbose).map_err(|e| exited_while_attaching(&s, e))?;
    // Attached without an error to tell by, the process may still have
    // exited meanwhile: it is looked at.
    if let Some(pid) = s.traced.pid() {
        if !target::process_alive(pid) {
            return Err(gone(pid));
        }
    }
    if s.verbose {
        say_attached(&plan, &tracer);
    }
    stop::tracing();
    let whom = target.whom(&s, &plan, spawned.as_ref());
    sinks.header(&header(&s, &plan, &whom))?;
    if let Some(addr) = address {
        eprintln!("tachy: serving metrics at http://{addr}/metrics");
    }
    if let Some(sp) = spawned.as_mut() {
        sp.release()?;
    }
    let limits = RunLimits {
        interval: s.interval,
        duration: s.duration,
        pid: s.traced.pid(),
        follow: s.follow,
    };
    let budget = budget(&s, &plan, &live, cal.as_ref());
    let end = run::run(
        &plan,
        &live,
        &opts,
        limits,
        &mut tracer,
        spawned.as_mut(),
        &mut sinks,
        budget,
    )?;
    sinks.finish(&plan, &opts)?;
    // The report is out. A later stop ends tachy at once: with 0, or the
    // command's status if it has one (128 + the signal if it still runs).
    stop::reported(match (&spawned, end.status) {
        (None, _) => Some(0),
        (Some(_), Some(code)) => Some(code),
        (Some(_), None) if !end.stopped => Some(0),
        (Some(_), None) => None,
    });
    drop(tracer);
    drop(sinks);
    let Some(sp) = spawned.as_mut() else {
        return Ok(0);
    };
    if end.nothing_counted && !s.follow {
        suggest_follow(&s, &plan, &target);
    }
    Ok(match end.status {
        Some(code) => code,
        None if end.stopped => wait_for_command(sp, s.traced.command()),
        // The command runs on untraced, as tachy said; its status is
        // tachy's.
        None if end.unwind_loaded => sp.wait(),
        None => {
            eprintln!(
                "tachy: tracing stopped after -d; {} (pid {}) runs on",
                s.traced.command().join(" "),
                sp.pid
            );
            0
        }
    })
}

/// `--verbose`: how the probes were attached.
fn say_attached(plan: &Plan, tracer: &Tracer) {
    if let Some(with) = tracer.kernel_with {
        eprintln!("tachy: kernel functions timed with {with}");
    }
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

/// `--max-overhead`: the budget of the run, each node priced by what its
/// probes add per call (`cal`), the traced threads those of the traced
/// processes. Without a calibration there is nothing to estimate with.
fn budget(
    s: &TraceSettings,
    plan: &Plan,
    live: &Live,
    cal: Option<&crate::calibrate::Calibration>,
) -> Option<Budget> {
    let pct = s.max_overhead?;
    let Some(cal) = cal else {
        eprintln!("tachy: --max-overhead {pct}: the probes' prices are not known here, the overhead is not kept within it");
        return None;
    };
    let price = cal.probe_time(plan).iter().map(|p| p.add_ns).collect();
    let mut pids = plan.pids.clone();
    pids.extend(live.pid);
    pids.sort_unstable();
    pids.dedup();
    let mut b = Budget::new(plan, pct, price, pids, &live.held_back);
    b.verbose = s.verbose;
    Some(b)
}

/// The probes' own time, which the kernel subtracts from each traced call
/// (`crate::calibrate`): measured once and cached. Without a measure,
/// durations include it, as with `--raw`.
pub(crate) fn calibration(plan: &Plan, verbose: bool) -> Option<crate::calibrate::Calibration> {
    if !plan
        .items
        .iter()
        .any(|i| matches!(i.kind, ItemKind::Function(_)))
    {
        return None;
    }
    let started = Instant::now();
    use crate::calibrate::Source;
    match crate::calibrate::load_or_measure(verbose) {
        Ok((cal, source)) => {
            if let Source::NotCached(why) = &source {
                eprintln!(
                    "tachy: cannot cache the probes' own time {why}: each start measures it again (set TACHY_CACHE_DIR to a writable directory)"
                );
            }
            if verbose {
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
            Some(cal)
        }
        // Tracing goes on without the correction, as with --raw.
        Err(e) => {
            eprintln!("tachy: cannot measure the probes' own time ({e:#}): durations include it");
            None
        }
    }
}

/// What `--uretprobe` risks, and the Go functions it is not used for.
fn warn_uretprobes(s: &TraceSettings, plan: &Plan) {
    if !s.uretprobe {
        return;
    }
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

/// The header: the "Tracing ..." line, and what records print.
fn header(s: &TraceSettings, plan: &Plan, whom: &str) -> String {
    let line = match s.mode {
        Mode::Nested(_) => nested::tracing_line(plan, &names_line(plan), whom),
        Mode::Latency => {
            let n = plan.items.len();
            format!(
                "Tracing {n} function{} {whom}: {}. Hit Ctrl-C to end.",
                if n == 1 { "" } else { "s" },
                names_line(plan)
            )
        }
    };
    match s.record {
        Some(ns) => format!(
            "{line}\nRecording each call of at least {} as it ends: time of its end, pid, tid, (thread), function, duration{}, arguments{}{}.",
            human(ns as f64),
            if s.cpu { ", on-CPU/blocked/runnable" } else { "" },
            if s.mode.is_nested() { "; below it, its call sites" } else { "" },
            match plan.stack {
                Some(how) if s.stack =>
                    format!("; below it, its callers (user stack by {})", how.name()),
                _ => String::new(),
            }
        ),
        None => match plan.stack {
            Some(how) => format!(
                "{line}\nGrouping calls by their callers out to main (user stack by {}).",
                how.name()
            ),
            None => line,
        },
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
pub(crate) fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Attaches the plan's probes. Attaching thousands of probes takes
/// seconds: after a second without an end, say what is going on and
/// how far it got.
pub(crate) fn attach<'o>(
    storage: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
    plan: &Plan,
    live: &Live,
    verbose: bool,
) -> Result<Tracer<'o>> {
    let done = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    let total = plan.probes.len();
    let funcs = plan.items.len() + plan.sites.len();
    std::thread::scope(|scope| {
        scope.spawn(|| attach_progress(&done, &finished, total, funcs));
        let tracer = Tracer::attach(storage, plan, live, verbose, &done);
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

#[cfg(test)]
mod tests {
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
