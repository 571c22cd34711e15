//! The run loop of `tachy latency` and `tachy list`: resolve, plan, attach,
//! wait, snapshot each interval, render, detach.

use std::io::Write;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};

use crate::callsites;
use crate::callsites::Naming;
use crate::cli::{FuncSpec, LatencySettings, ListArgs, NestedOpts, TreeFormat};
use crate::disasm::ProbeCost;
use crate::kernel;
use crate::plan::{self, Drill, ItemKind, Plan, Settings};
use crate::probe::{self, Tracer};
use crate::report::tree::{self, human, TreeNode, TreeReport};
use crate::report::{self, Counts, FuncReport, Report};
use crate::resolve::{self, Objects, Scope};
use crate::symbols::lines::LineTable;
use crate::symbols::{self, demangle, ElfObject, Function, Pattern};
use crate::target::ObjectRef;
use crate::target::{self, Spawned};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNALS: AtomicU32 = AtomicU32::new(0);
static INTERIM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_usr1(_: libc::c_int) {
    INTERIM.store(true, Ordering::SeqCst);
}

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
        let u = on_usr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGUSR1, u);
    }
}

fn build_plan(s: &LatencySettings, scope: &Scope, objects: &mut Objects) -> Result<Plan> {
    let resolved = resolve::resolve(&s.specs, scope, objects)?;
    let mut plan = Plan::new(Settings {
        filter_tid: s.tid,
        min_ns: s.min_ns,
        max_ns: s.max_ns,
        outermost: s.outermost,
        uretprobe: s.uretprobe,
        follow: s.follow,
        unit_ns: s.unit.ns(),
    });
    plan.pid = s.pid;
    for spec in s.specs.iter().filter(|x| x.is_syscall()) {
        for (name, nr) in kernel::match_syscalls(&spec.pattern)? {
            plan.add_syscall(name, nr);
        }
    }
    for spec in s.specs.iter().filter(|x| x.is_kernel()) {
        let names = kernel::match_kernel_functions(&spec.pattern)?;
        kernel::check_count(&spec.pattern, &names)?;
        for name in &names {
            plan.add_kernel_function(name);
        }
    }
    for (pattern, names) in &resolved.kernel {
        kernel::check_count(pattern, names)?;
        if !matches!(scope, Scope::Files) {
            eprintln!(
                "tachy: no function of the traced program matches {pattern:?}: timing {}",
                if names.len() == 1 {
                    format!("the kernel function k:{}", names[0])
                } else {
                    format!("{} kernel functions", names.len())
                }
            );
        }
        for name in names {
            plan.add_kernel_function(name);
        }
    }
    // Only kernel items are planned so far.
    if s.nested.is_some() && !plan.items.is_empty() {
        bail!(
            "tachy nested times the call sites of user functions; {} is timed by the kernel: use tachy latency",
            plan.items[0].name
        );
    }
    let mut roots = Vec::new();
    for r in &resolved.user {
        for f in &r.funcs {
            let id = plan.add_function(&r.obj, f, r.source)?;
            roots.push((r, f, id));
        }
    }
    if let Some(n) = &s.nested {
        let expand: Vec<Pattern> = n
            .expand
            .iter()
            .map(|e| Pattern::parse(e))
            .collect::<Result<_>>()?;
        let matches_expand = |raw: &str| {
            let names = demangle(raw);
            expand.iter().any(|p| p.matches(raw, &names))
        };
        let namings: RefCell<HashMap<PathBuf, Rc<Naming>>> = RefCell::default();
        let naming = |obj: &ElfObject| -> Result<Rc<Naming>> {
            if let Some(n) = namings.borrow().get(&obj.open_path) {
                return Ok(n.clone());
            }
            let n = Rc::new(Naming {
                names: callsites::Names::load(obj)?,
                lines: LineTable::load(obj),
            });
            namings
                .borrow_mut()
                .insert(obj.open_path.clone(), n.clone());
            Ok(n)
        };
        let objects = RefCell::new(objects);
        let import = |raw: &str| import_target(scope, &mut objects.borrow_mut(), raw);
        let drill = Drill {
            naming: &naming,
            import: &import,
            depth: n.depth,
            expand: &matches_expand,
        };
        for (r, f, id) in roots {
            plan.add_sites(&r.obj, f, id, &drill)?;
        }
    }
    plan.finish();
    Ok(plan)
}

/// The function a PLT call to `raw` reaches in the traced process: the
/// first library (in load order) that defines it.
fn import_target(
    scope: &Scope,
    objects: &mut Objects,
    raw: &str,
) -> Option<(Rc<ElfObject>, Function)> {
    let libs: Vec<ObjectRef> = match scope {
        Scope::Process(m) => m.libs.clone(),
        Scope::Command { libs, .. } => libs
            .iter()
            .map(|p| ObjectRef {
                display: p.clone(),
                open_path: p.clone(),
            })
            .collect(),
        Scope::Files => return None,
    };
    let pat = Pattern::parse(raw).ok()?;
    for lib in libs {
        let Ok(obj) = objects.get(&lib) else { continue };
        let Ok(found) = symbols::find(&obj, &pat) else {
            continue;
        };
        if let Some(f) = found
            .functions
            .into_iter()
            .find(|f| f.raw == raw || f.names.stem == raw)
        {
            return Some((obj, f));
        }
    }
    None
}

fn names_line(plan: &Plan) -> String {
    let names: Vec<&str> = plan.items.iter().map(|f| f.name.as_str()).collect();
    if names.len() <= 6 {
        names.join(", ")
    } else {
        format!("{} and {} more", names[..5].join(", "), names.len() - 5)
    }
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

pub fn latency(s: LatencySettings) -> Result<i32> {
    let mut objects = Objects::default();
    let (scope, exe_for_cmd) = if let Some(pid) = s.pid {
        (Scope::Process(target::process_maps(pid)?), None)
    } else if let Some(cmd) = s.command.first() {
        let exe = target::which(cmd)?;
        let image = target::program_image(&exe);
        let libs = target::needed_libraries(&image);
        (Scope::Command { exe: image, libs }, Some(exe))
    } else {
        (Scope::Files, None)
    };
    let mut plan =
        build_plan(&s, &scope, &mut objects).map_err(|e| match (&scope, &exe_for_cmd) {
            (Scope::Command { exe: image, .. }, Some(exe)) if image != exe => anyhow::anyhow!(
                "{e} ({} is a script run by {}: name the program it starts as PATH:FUNC)",
                exe.display(),
                image.display()
            ),
            _ => e,
        })?;
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
    if let Some(sp) = &spawned {
        plan.pid = Some(sp.pid);
    }
    raise_fd_limit();
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
                .map(|o| o.display.display().to_string())
                .collect();
            if objs.is_empty() {
                "in every process".to_string()
            } else {
                format!("in every process that maps {}", objs.join(", "))
            }
        }
    };
    let n = plan.items.len();
    let header = match &s.nested {
        None => format!(
            "Tracing {n} function{} {whom}: {}. Hit Ctrl-C to end.",
            if n == 1 { "" } else { "s" },
            names_line(&plan)
        ),
        Some(_) => {
            let levels = plan.sites.iter().map(|x| x.level).max().unwrap_or(0);
            format!(
                "Tracing {} and {} call site{} ({} level{}) {whom}. Hit Ctrl-C to end.",
                names_line(&plan),
                plan.sites.len(),
                if plan.sites.len() == 1 { "" } else { "s" },
                levels,
                if levels == 1 { "" } else { "s" },
            )
        }
    };
    if s.nested.is_some() && plan.sites.len() > 300 {
        eprintln!(
            "tachy: warning: {} call sites is many; each traced call pays for every site it passes",
            plan.sites.len()
        );
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
    // What was read from the kernel but not yet part of an interval's
    // report (read for a SIGUSR1 interim report).
    let mut carry: Vec<Counts> = vec![Counts::default(); plan.ids() as usize];
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
        // Followed forks outlive their parent: go on while any runs.
        if done && s.follow && !STOP.load(Ordering::SeqCst) && tracer.followed_alive() {
            done = false;
        }
        if deadline.is_some_and(|d| now >= d) {
            done = true;
        }
        let due = next_report.is_some_and(|t| now >= t);
        if INTERIM.swap(false, Ordering::SeqCst) && !(due || done) {
            // An interim report: everything since the last report, which
            // the next one still includes.
            for (c, n) in carry.iter_mut().zip(tracer.take()?) {
                c.merge(&n);
            }
            emit(&plan, &s, carry.clone())?;
        }
        if due || done {
            for (c, n) in carry.iter_mut().zip(tracer.take()?) {
                c.merge(&n);
            }
            let counts =
                std::mem::replace(&mut carry, vec![Counts::default(); plan.ids() as usize]);
            emit(&plan, &s, counts)?;
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

fn emit(plan: &Plan, s: &LatencySettings, counts: Vec<Counts>) -> Result<()> {
    if let Some(n) = &s.nested {
        return emit_tree(plan, s, n, counts);
    }
    let report = Report {
        time: SystemTime::now(),
        unit: s.unit,
        timestamp: s.timestamp,
        funcs: plan
            .items
            .iter()
            .zip(counts)
            .map(|(f, counts)| FuncReport {
                name: f.name.clone(),
                raw_name: f.raw_name.clone(),
                object: plan.object_of(f).to_path_buf(),
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

fn tree_node(plan: &Plan, counts: &[Counts], id: u32, hist: bool) -> TreeNode {
    let nf = plan.items.len();
    let c = &counts[id as usize];
    let children = plan
        .sites
        .iter()
        .enumerate()
        .filter(|(_, x)| x.parent == id)
        .map(|(i, _)| tree_node(plan, counts, (nf + i) as u32, hist))
        .collect();
    let (name, site, kind) = if (id as usize) < nf {
        (plan.items[id as usize].name.clone(), None, "function")
    } else {
        let x = &plan.sites[id as usize - nf].site;
        (x.name.clone(), x.location.clone(), x.kind.as_str())
    };
    TreeNode {
        name,
        site,
        kind,
        count: c.count,
        total_ns: c.total_ns,
        unwound: c.unwound,
        filtered: c.filtered,
        hist: (hist && kind != "function").then(|| c.hist.clone()),
        hist_early: c.hist_early,
        children,
    }
}

fn emit_tree(plan: &Plan, s: &LatencySettings, n: &NestedOpts, counts: Vec<Counts>) -> Result<()> {
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
    let report = TreeReport {
        time: SystemTime::now(),
        timestamp: s.timestamp,
        unit: s.unit,
        filter,
        roots: (0..plan.items.len() as u32)
            .map(|id| tree_node(plan, &counts, id, n.hist))
            .collect(),
    };
    let mut out = std::io::stdout().lock();
    match &n.format {
        TreeFormat::Text => {
            writeln!(out)?;
            tree::render_text(&report, &mut out)?;
        }
        TreeFormat::Json => tree::render_json(&report, &mut out)?,
        TreeFormat::Folded => tree::render_folded(&report, &mut out)?,
        TreeFormat::Svg(path) => {
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot write {}", path.display()))?,
            );
            tree::render_svg(&report, &mut f)
                .with_context(|| format!("cannot write {}", path.display()))?;
            f.flush()
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("tachy: flame graph written to {}", path.display());
        }
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
        // A bare name: a kernel function, if the kernel has one.
        ([one], None) => (FuncSpec::parse(one)?, Scope::Files),
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
    let mut out = std::io::stdout().lock();
    if spec.is_syscall() {
        writeln!(out, "system calls (timed from sys_enter to sys_exit):")?;
        for (name, nr) in kernel::match_syscalls(&spec.pattern)? {
            writeln!(out, "  syscall:{name}  number {nr}")?;
        }
        return Ok(0);
    }
    let mut objects = Objects::default();
    let mut resolved = resolve::resolve(std::slice::from_ref(&spec), &scope, &mut objects)?;
    if spec.is_kernel() {
        // Listing is not tracing: no limit on how many.
        let names = kernel::match_kernel_functions(&spec.pattern)?;
        resolved.kernel.push((spec.pattern.clone(), names));
    }
    if !resolved.kernel.is_empty() {
        writeln!(out, "kernel (functions from /proc/kallsyms):")?;
        for name in resolved.kernel.iter().flat_map(|(_, n)| n) {
            writeln!(
                out,
                "  k:{name}  timed by fentry/fexit where the kernel allows, else a kprobe and kretprobe"
            )?;
        }
    }
    for r in &resolved.user {
        writeln!(
            out,
            "{} (symbols from {}):",
            r.obj.display.display(),
            r.obj.describe_source(r.source)
        )?;
        let site_names = if a.sites {
            Some((callsites::Names::load(&r.obj)?, LineTable::load(&r.obj)))
        } else {
            None
        };
        for f in &r.funcs {
            let mut p = Plan::default();
            let added = p
                .add_function(&r.obj, f, r.source)
                .map(|id| &p.items[id as usize].kind);
            let line = match added {
                Ok(kind) => {
                    let ItemKind::Function(t) = kind else {
                        continue;
                    };
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
                    if t.exits.internal_jumps > 0 {
                        exits.push_str(&format!(
                            "; {} indirect jump(s) stay inside (not probed)",
                            t.exits.internal_jumps
                        ));
                    }
                    let mut frags = if t.fragments > 0 {
                        format!("  fragments {}", t.fragments)
                    } else {
                        String::new()
                    };
                    if t.exits.unnamed_fragments > 0 {
                        frags.push_str(&format!(
                            "  {} part(s) without a symbol",
                            t.exits.unnamed_fragments
                        ));
                    }
                    let at = if t.entry_addr == t.addr {
                        String::new()
                    } else {
                        format!(" at +{:#x}", t.entry_addr - t.addr)
                    };
                    format!(
                        "    address {:#x}  size {}{frags}  entry{at} `{}` ({cost})  return: {}  exits: {exits}",
                        t.addr,
                        t.size,
                        t.entry_insn,
                        t.exits.mode.describe()
                    )
                }
                Err(e) => format!(
                    "    address {:#x}  size {}  cannot be traced: {e:#}",
                    f.addr, f.size
                ),
            };
            writeln!(out, "  {}  ({})", f.display_name(), f.names.lang.as_str())?;
            writeln!(out, "{line}")?;
            if let Some((names, lines)) = &site_names {
                let decoded = plan::decode_function(&r.obj, f)?;
                let sites = callsites::sites(&decoded, names, lines.as_ref());
                writeln!(
                    out,
                    "    {} call site{}:",
                    sites.len(),
                    if sites.len() == 1 { "" } else { "s" }
                )?;
                for st in sites {
                    writeln!(
                        out,
                        "      {:#x}  {:<8}  {}  {}",
                        st.addr,
                        st.kind.as_str(),
                        st.location.as_deref().unwrap_or("?"),
                        st.name
                    )?;
                }
            }
        }
    }
    Ok(0)
}
