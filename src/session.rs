//! The run loop of `tachy latency` and `tachy list`: resolve, plan, attach,
//! wait, snapshot each interval, render, detach.

use std::io::Write;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};

use crate::cli::{FuncSpec, LatencySettings, ListArgs};
use crate::disasm::ProbeCost;
use crate::plan::{Plan, Settings};
use crate::probe::{self, Tracer};
use crate::report::{self, FuncReport, Report};
use crate::resolve::{self, Objects, Scope};
use crate::target::{self, Spawned};

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNALS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    // A second Ctrl-C or SIGTERM ends tachy at once; the kernel detaches
    // its probes when the process goes.
    if SIGNALS.fetch_add(1, Ordering::SeqCst) >= 1 {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    // SAFETY: the handler only touches atomics and calls _exit.
    unsafe {
        let h = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGINT, h);
        libc::signal(libc::SIGTERM, h);
    }
}

fn build_plan(s: &LatencySettings, scope: &Scope, objects: &mut Objects) -> Result<Plan> {
    let resolved = resolve::resolve(&s.specs, scope, objects)?;
    let mut plan = Plan {
        pid: -1,
        settings: Settings {
            filter_tid: s.tid,
            min_ns: s.min_ns,
            max_ns: s.max_ns,
            outermost: s.outermost,
            uretprobe: s.uretprobe,
            unit_ns: s.unit.ns(),
        },
        ..Default::default()
    };
    for r in &resolved {
        for f in &r.funcs {
            plan.add_function(&r.obj, f, r.source)?;
        }
    }
    plan.finish();
    Ok(plan)
}

fn names_line(plan: &Plan) -> String {
    let names: Vec<&str> = plan.funcs.iter().map(|f| f.name.as_str()).collect();
    if names.len() <= 6 {
        names.join(", ")
    } else {
        format!("{} and {} more", names[..5].join(", "), names.len() - 5)
    }
}

pub fn latency(s: LatencySettings) -> Result<i32> {
    let mut objects = Objects::default();
    let (scope, exe_for_cmd) = if let Some(pid) = s.pid {
        (Scope::Process(target::process_maps(pid)?), None)
    } else if let Some(cmd) = s.command.first() {
        let exe = target::which(cmd)?;
        let libs = target::needed_libraries(&exe);
        (
            Scope::Command {
                exe: exe.clone(),
                libs,
            },
            Some(exe),
        )
    } else {
        (Scope::Files, None)
    };
    let mut plan = build_plan(&s, &scope, &mut objects)?;
    if s.dry_run || s.verbose {
        eprint!("{}", plan.describe());
        if s.dry_run {
            return Ok(0);
        }
    }
    probe::check_environment()?;
    if s.uretprobe {
        eprintln!(
            "tachy: warning: --uretprobe: a C++ exception or Rust panic that unwinds through a traced function will abort the traced process"
        );
    }
    install_signal_handlers();

    let mut spawned = match &exe_for_cmd {
        Some(exe) => Some(Spawned::start(exe, &s.command)?),
        None => None,
    };
    plan.pid = match (&s.pid, &spawned) {
        (Some(p), _) => *p as i32,
        (None, Some(sp)) => sp.pid as i32,
        _ => -1,
    };
    let mut storage = MaybeUninit::uninit();
    let mut tracer = Tracer::attach(&mut storage, &plan, s.verbose)?;
    if let Some(pid) = s.pid {
        if !target::process_alive(pid) {
            bail!("process {pid} exited while probes were being attached");
        }
    }
    let whom = match (&s.pid, &spawned, &scope) {
        (Some(pid), _, Scope::Process(m)) => format!("in pid {pid} ({})", m.exe.display.display()),
        (None, Some(sp), _) => format!("in pid {} ({})", sp.pid, s.command.join(" ")),
        _ => {
            let objs: Vec<String> = plan
                .objects
                .iter()
                .map(|o| o.0.display().to_string())
                .collect();
            format!("in every process that maps {}", objs.join(", "))
        }
    };
    let n = plan.funcs.len();
    let header = format!(
        "Tracing {n} function{} {whom}: {}. Hit Ctrl-C to end.",
        if n == 1 { "" } else { "s" },
        names_line(&plan)
    );
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
    }
    {
        let mut out = std::io::stdout().lock();
        if s.json {
            eprintln!("{header}");
        } else {
            writeln!(out, "{header}")?;
            out.flush()?;
        }
    }
    if let Some(sp) = spawned.as_mut() {
        sp.release()?;
    }

    let start = Instant::now();
    let mut next_report = s.interval.map(|i| start + i);
    let deadline = s.duration.map(|d| start + d);
    let mut status = 0;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = Instant::now();
        let mut done = STOP.load(Ordering::SeqCst);
        if let Some(sp) = spawned.as_mut() {
            if let Some(code) = sp.try_wait() {
                status = code;
                done = true;
            }
        } else if let Some(pid) = s.pid {
            if !target::process_alive(pid) {
                done = true;
            }
        }
        if deadline.is_some_and(|d| now >= d) {
            done = true;
        }
        let due = next_report.is_some_and(|t| now >= t);
        if due || done {
            emit(&mut tracer, &plan, &s)?;
            if let (Some(t), Some(i)) = (next_report.as_mut(), s.interval) {
                while *t <= now {
                    *t += i;
                }
            }
        }
        if done {
            break;
        }
    }
    drop(tracer);
    if let Some(sp) = spawned.as_mut() {
        if STOP.load(Ordering::SeqCst) {
            status = sp.wait();
        }
    }
    Ok(status)
}

fn emit(tracer: &mut Tracer<'_>, plan: &Plan, s: &LatencySettings) -> Result<()> {
    let counts = tracer.take()?;
    let report = Report {
        time: SystemTime::now(),
        unit: s.unit,
        timestamp: s.timestamp,
        funcs: plan
            .funcs
            .iter()
            .zip(counts)
            .map(|(f, counts)| FuncReport {
                name: f.name.clone(),
                raw_name: f.raw_name.clone(),
                object: plan.objects[f.object].0.clone(),
                counts,
            })
            .collect(),
    };
    let mut out = std::io::stdout().lock();
    if s.json {
        report::json::render(&report, &mut out)?;
    } else {
        writeln!(out)?;
        report::text::render(&report, &mut out)?;
    }
    out.flush().context("cannot write the report")?;
    Ok(())
}

pub fn list(a: ListArgs) -> Result<i32> {
    let (spec, scope) = match (a.args.as_slice(), a.pid) {
        ([path, pat], None) => (
            FuncSpec {
                object: Some(path.clone()),
                pattern: pat.clone(),
            },
            Scope::Files,
        ),
        ([_, _], Some(_)) => bail!("give either -p PID or a PATH, not both"),
        ([one], Some(pid)) => (
            FuncSpec::parse(one)?,
            Scope::Process(target::process_maps(pid)?),
        ),
        ([one], None) => {
            let spec = FuncSpec::parse(one)?;
            if spec.object.is_none() {
                bail!("{one:?} names no object: give -p PID, a PATH, or PATH:PATTERN");
            }
            (spec, Scope::Files)
        }
        _ => bail!("expected [PATH] PATTERN"),
    };
    let spec = match (&scope, &spec.object) {
        (Scope::Files, Some(o)) if !o.contains('/') && std::path::Path::new(o).is_file() => {
            FuncSpec {
                object: Some(format!("./{o}")),
                pattern: spec.pattern,
            }
        }
        _ => spec,
    };
    let mut objects = Objects::default();
    let resolved = resolve::resolve(std::slice::from_ref(&spec), &scope, &mut objects)?;
    let mut out = std::io::stdout().lock();
    for r in &resolved {
        writeln!(
            out,
            "{} (symbols from {}):",
            r.obj.display.display(),
            r.source.describe()
        )?;
        for f in &r.funcs {
            let mut p = Plan::default();
            let line = match p.add_function(&r.obj, f, r.source) {
                Ok(_) => {
                    let t = &p.funcs[0];
                    let cost = match t.entry_cost {
                        ProbeCost::Emulated => "emulated",
                        ProbeCost::SingleStepped => "single-stepped",
                    };
                    let mut exits = format!("{} ret", t.exits.rets);
                    for c in &t.exits.tail_callees {
                        exits.push_str(&format!(", tail call to {c}"));
                    }
                    if t.exits.unknown_tails > 0 {
                        exits.push_str(&format!(
                            ", {} tail jump(s) to unknown code (timed up to the jump)",
                            t.exits.unknown_tails
                        ));
                    }
                    let frags = if t.fragments > 0 {
                        format!("  fragments {}", t.fragments)
                    } else {
                        String::new()
                    };
                    let at = if t.entry_addr == t.addr {
                        String::new()
                    } else {
                        format!(" at +{:#x}", t.entry_addr - t.addr)
                    };
                    format!(
                        "    address {:#x}  size {}{frags}  entry{at} `{}` ({cost})  exits: {exits}",
                        t.addr, t.size, t.first_insn
                    )
                }
                Err(e) => format!(
                    "    address {:#x}  size {}  cannot be traced: {e:#}",
                    f.addr, f.size
                ),
            };
            writeln!(out, "  {}  ({})", f.display_name(), f.names.lang.as_str())?;
            writeln!(out, "{line}")?;
        }
    }
    Ok(0)
}
