//! Building a plan from a request: what to trace and how
//! ([`PlanRequest`]), resolved in a scope, becomes a finished [`Plan`]
//! that nothing changes afterwards. Options that do not go with what is
//! traced are refused here as usage errors; notes (a function left out,
//! what argN means on a clone) go to stderr once each.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::args::{FuncArgs, Operand, Source};
use super::by::ByKey;
use super::filter::Filter;
use super::{Drill, Expand, Imported, ItemKind, Plan, Settings};
use crate::kernel;
use crate::resolve::FuncSpec;
use crate::resolve::{self, Objects, Scope};
use crate::symbols::elf::inlined::Instance;
use crate::symbols::{self, demangle, ElfObject, Function, Pattern};
use crate::target::ObjectRef;
use crate::usage::UsageError;

/// What to trace and how: everything planning needs to know, decided
/// before it starts.
#[derive(Clone, Debug, Default)]
pub struct PlanRequest {
    /// The functions, system calls and kernel functions asked for.
    pub specs: Vec<FuncSpec>,
    /// What the BPF side is told (the filters on time and thread, the
    /// scope of processes or cgroup, `--by`, records, `--cpu`).
    pub settings: Settings,
    /// The one process the links and counts are limited to (`-p PID`).
    pub pid: Option<u32>,
    /// Several processes, counted each (`-p A,B`, `--comm`, `--pgrep`).
    pub pids: Vec<u32>,
    /// `--force`: a uretprobe even on a function that may throw.
    pub force: bool,
    /// `--filter`: which calls to time, by their arguments.
    pub filter: Option<Filter>,
    /// `tachy nested`: the call sites to time under each function.
    pub tree: Option<TreeRequest>,
    /// Say how long resolving and planning took.
    pub verbose: bool,
}

/// The call sites `tachy nested` times.
#[derive(Clone, Debug, Default)]
pub struct TreeRequest {
    /// Levels of call sites under a traced function.
    pub depth: u32,
    /// Callees expanded at any level, and callees of indirect calls.
    pub expand: Vec<Expand>,
}

/// The plan of `req` in `scope`: resolved, checked, finished.
//
// One pass from names to probes, each stage a block: kernel items, the
// checks of options against them, functions, the options that read
// arguments, the call sites. Split further it would hand half-built plans
// between functions.
pub fn build(req: &PlanRequest, scope: &Scope, objects: &mut Objects) -> Result<Plan> {
    let s = &req.settings;
    let start = Instant::now();
    let resolved = resolve::resolve(&req.specs, scope, objects)?;
    let resolve_time = start.elapsed();
    let mut plan = Plan::new(s.clone());
    plan.pid = req.pid;
    plan.pids = req.pids.clone();
    plan.process_cannot_unwind =
        !s.uretprobe && !s.follow && process_cannot_unwind(req, scope, objects);
    for spec in req.specs.iter().filter(|x| x.is_syscall()) {
        for (name, nr) in kernel::match_syscalls(spec.pattern.as_str())? {
            plan.add_syscall(name, nr);
        }
    }
    for spec in req.specs.iter().filter(|x| x.is_kernel()) {
        let names = kernel::match_kernel_functions(spec.pattern.as_str())?;
        kernel::check_count(spec.pattern.as_str(), &names)?;
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
    // Options that do not go with what is traced are usage errors.
    let refuse = |msg: String| -> Result<Plan> { Err(UsageError(msg).into()) };
    if let (Some(_), Some((name, _))) = (s.record_min_ns, plan.kernel_functions().next()) {
        return refuse(format!("--record-slower-than records user functions and system calls; kernel functions (k:{name}) are not recorded"));
    }
    if s.cpu && plan.kernel_functions().next().is_some() {
        return refuse("--cpu splits the time of user functions and system calls; kernel functions (k:NAME) are not split".into());
    }
    // Only kernel items are planned so far.
    if req.tree.is_some() && !plan.items.is_empty() {
        return refuse(format!(
            "tachy nested times the call sites of user functions; {} is timed by the kernel: use tachy latency",
            plan.items[0].name
        ));
    }
    if s.uretprobe && !req.force {
        refuse_throwing_uretprobes(&resolved)?;
    }
    let mut roots = Vec::new();
    let many = resolved.user.iter().map(|r| r.funcs.len()).sum::<usize>() > 1;
    for r in &resolved.user {
        for f in &r.funcs {
            let id = match plan.add_function(&r.obj, f, r.source) {
                Ok(id) => id,
                // Among many functions, one the kernel will not probe is
                // left out; named alone, it is the error.
                Err(e) if many && e.downcast_ref::<super::Unprobeable>().is_some() => {
                    plan.left_out.push(format!("{e:#}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            roots.push((r, f, id));
        }
    }
    let inlined_roots = add_instances(&mut plan, req, &resolved)?;
    if let Some(go) = plan.items.iter().find(|i| i.is_go()) {
        if req.tree.is_some() && (s.min_ns.is_some() || s.max_ns.is_some()) {
            return refuse(format!(
                "tachy nested does not apply --slower-than/--faster-than to the call sites of Go functions yet ({}): each site call is counted when it returns; use tachy latency with the filter",
                go.name
            ));
        }
        if s.cpu {
            return refuse(format!(
                "--cpu splits time per thread, and a goroutine moves between threads: Go functions ({}) are not split yet",
                go.name
            ));
        }
        if req.tree.is_some() && s.record_min_ns.is_some() {
            return refuse(format!(
                "tachy nested does not record Go functions yet ({}): use tachy latency --record-slower-than",
                go.name
            ));
        }
    }
    if s.stack || s.by.contains(&ByKey::Stack) {
        // Go's arm64 frames keep the return address where tachy's walk
        // (which reads it above the saved frame pointer) has not been
        // checked.
        if let Some((_, f, _)) = roots.iter().find(|(r, f, _)| {
            r.obj.arch == crate::disasm::Arch::Arm64
                && f.names.lang == crate::symbols::demangle::Lang::Go
        }) {
            return refuse(format!(
                "the stacks of Go functions are not walked on arm64 yet ({})",
                f.display_name()
            ));
        }
        let mut objs: Vec<&crate::symbols::ElfObject> = Vec::new();
        for (r, _, _) in &roots {
            if !objs.iter().any(|o| std::ptr::eq(*o, &*r.obj)) {
                objs.push(&r.obj);
            }
        }
        plan.stack = Some(super::stack::StackHow::decide(objs));
    }
    // What each item knows of its arguments, read once for the features
    // that read them.
    let by_arg =
        s.by.iter()
            .any(|k| matches!(k, ByKey::Arg(_) | ByKey::Retval));
    let args = if req.filter.is_some() || s.record_min_ns.is_some() || by_arg {
        TracedArgs::read(&plan, &roots)
    } else {
        TracedArgs::default()
    };
    let filter_ret = req.filter.as_ref().is_some_and(Filter::reads_ret);
    if filter_ret || s.by.contains(&ByKey::Retval) {
        let what = if filter_ret {
            "--filter ret"
        } else {
            "--by retval"
        };
        refuse_unknown_returns(&plan, what)?;
    }
    if let Some(f) = &req.filter {
        add_filters(&mut plan, f, &args)?;
    }
    if s.read_ret {
        for (id, a) in &args.syscalls {
            plan.returns.insert(*id, a.returns()?);
        }
        for (_, _, id, a) in &args.functions {
            if let Ok(r) = a.returns() {
                plan.returns.insert(*id, r);
            }
        }
    }
    if s.record_min_ns.is_some() {
        add_record_args(&mut plan, &args);
    }
    if !s.by.is_empty() {
        let named = |want: fn(&super::Item) -> bool| {
            plan.items.iter().find(|i| want(i)).map(|i| i.name.as_str())
        };
        let traced = super::by::Traced {
            syscall: named(|i| matches!(i.kind, ItemKind::Syscall { .. })),
            kernel: named(|i| matches!(i.kind, ItemKind::KernelFunction)),
            go: named(|i| i.is_go()),
            native: named(|i| matches!(i.kind, ItemKind::Function(_)) && !i.is_go()),
            goid_known: plan.go_layout.is_some_and(|l| l.goid.is_some()),
        };
        super::by::check(&s.by, traced)?;
        add_by_args(&mut plan, &s.by, &args)?;
    }
    if let Some(n) = &req.tree {
        let expand = &n.expand;
        let matches_expand = |raw: &str| {
            let names = demangle(raw);
            expand
                .iter()
                .filter(|e| e.through.is_none())
                .any(|e| e.callee.matches(raw, &names))
        };
        let objects = RefCell::new(objects);
        // Per --expand CALLER->CALLEE: whether an indirect call of a CALLER
        // was met, and a CALLEE found for it.
        let seen: RefCell<Vec<(bool, bool)>> = RefCell::new(vec![(false, false); expand.len()]);
        let through = |obj: &Rc<ElfObject>, start: u64| {
            let (mut objects, mut seen) = (objects.borrow_mut(), seen.borrow_mut());
            indirect_callees(scope, &mut objects, expand, &mut seen, obj, start)
        };
        // A name imported at many sites (a library calling its own exported
        // functions through its PLT) is looked up in the libraries once.
        let imported: RefCell<HashMap<String, Vec<Imported>>> = RefCell::default();
        let import = |raw: &str| {
            if let Some(hit) = imported.borrow().get(raw) {
                return hit.clone();
            }
            let hit = import_target(scope, &mut objects.borrow_mut(), raw);
            imported.borrow_mut().insert(raw.to_string(), hit.clone());
            hit
        };
        let drill = Drill {
            import: &import,
            depth: n.depth,
            expand: &matches_expand,
            through: &through,
        };
        for (r, f, id) in roots {
            plan.add_sites(&r.obj, f, id, &drill)?;
        }
        for (r, inst, id) in inlined_roots {
            plan.add_instance_sites(&r.obj, inst, id, &drill)?;
        }
        plan.check_tree_size(n.depth)?;
        for (e, (caller, callee)) in expand.iter().zip(seen.into_inner()) {
            let Some(t) = &e.through else { continue };
            let why = match (caller, callee) {
                (false, _) => format!(
                    "no traced function, nor callee broken down, matching {} makes an indirect call whose callee its probe reads",
                    t.quoted()
                ),
                (true, false) => format!(
                    "no function of the process matches {}",
                    e.callee.quoted()
                ),
                (true, true) => continue,
            };
            plan.left_out
                .push(format!("--expand {:?}: {why}", e.text()));
        }
    }
    plan.finish();
    plan.left_out
        .splice(0..0, resolved.left_out.iter().cloned());
    for line in &plan.left_out {
        eprintln!("tachy: left out {line}");
    }
    if req.verbose {
        eprintln!(
            "tachy: resolved in {} ms, planned in {} ms",
            resolve_time.as_millis(),
            (start.elapsed() - resolve_time).as_millis()
        );
    }
    Ok(plan)
}

/// Adds the inlined instances of what `req` names, each an item timed from
/// its entry to where control leaves it; those that cannot be are left out
/// with a line naming them, as are all under options that read what an
/// instance does not have (a return value) or that planning cannot locate
/// yet in one (its parameters). Returns those added, with their ids.
fn add_instances<'r>(
    plan: &mut Plan,
    req: &PlanRequest,
    resolved: &'r resolve::Resolution,
) -> Result<Vec<(&'r resolve::Resolved, &'r Instance, u32)>> {
    let mut added = Vec::new();
    let unread = if req.filter.is_some() {
        Some("--filter does not read the parameters of inlined instances")
    } else if req.settings.read_ret {
        Some("an inlined instance has no return value of its own to read")
    } else {
        None
    };
    for r in &resolved.user {
        for inst in &r.inlined {
            if let Some(why) = unread {
                plan.left_out.push(format!(
                    "{} inlined at {} ({:#x}): {why}",
                    inst.name, inst.call, inst.entry
                ));
                continue;
            }
            match plan.add_inlined(&r.obj, inst, r.source, req.tree.is_some())? {
                Ok(id) => added.push((r, inst, id)),
                Err(line) => plan.left_out.push(line),
            }
        }
    }
    if plan.items.is_empty() {
        if let Some(line) = plan.left_out.first() {
            return Err(UsageError(format!("nothing to trace: {line}")).into());
        }
    }
    Ok(added)
}

/// Whether no object of the one process traced (`-p PID`, or the command
/// started, by its executable's DT_NEEDED closure) can raise or catch an
/// unwind (`super::unwind::process_cannot_unwind`). Only for a process whose
/// maps the run loop watches: never with `--follow`,
/// whose probes fire in every process, nor with `LD_PRELOAD`, which loads
/// objects the closure does not name.
fn process_cannot_unwind(req: &PlanRequest, scope: &Scope, objects: &mut Objects) -> bool {
    let refs: Vec<ObjectRef> = match scope {
        Scope::Process(m) if !req.settings.count_procs && req.pid.is_some() => {
            m.all().cloned().collect()
        }
        Scope::Command { exe, libs }
            if !std::env::var_os("LD_PRELOAD").is_some_and(|v| !v.is_empty()) =>
        {
            std::iter::once(exe)
                .chain(libs)
                .map(|p| ObjectRef {
                    display: p.clone(),
                    open_path: p.clone(),
                })
                .collect()
        }
        _ => return false,
    };
    let mut objs = Vec::with_capacity(refs.len());
    for r in &refs {
        match objects.get(r) {
            Ok(o) => objs.push(o),
            Err(_) => return false,
        }
    }
    super::unwind::process_cannot_unwind(objs.iter().map(|o| &**o)).is_ok()
}

/// `--uretprobe` without `--force` on a function that calls code that
/// throws is refused: the exception would abort the traced process.
fn refuse_throwing_uretprobes(resolved: &resolve::Resolution) -> Result<()> {
    for r in &resolved.user {
        for f in &r.funcs {
            if f.names.lang == crate::symbols::demangle::Lang::Go {
                continue;
            }
            if let Some(why) = super::unwind::may_throw(&r.obj, f) {
                return Err(UsageError(format!(
                    "--uretprobe: {} may throw ({why}), and an exception through a uretprobe aborts the process: add --force to use one anyway",
                    f.display_name()
                ))
                .into());
            }
        }
    }
    Ok(())
}

/// Refuses `what` (`--filter ret`, `--by retval`) where a traced function
/// may leave where its return value is not known: by a tail jump to code
/// tachy does not follow, or a jump checked at run time. A uretprobe sees
/// every return.
fn refuse_unknown_returns(plan: &Plan, what: &str) -> Result<()> {
    for item in &plan.items {
        match &item.kind {
            ItemKind::KernelFunction => {
                return Err(UsageError(format!(
                    "{what}: the return values of kernel functions ({}) are not read",
                    item.name
                ))
                .into())
            }
            ItemKind::Function(t) if t.exits.value_unknown > 0 => {
                return Err(UsageError(format!(
                    "{what}: {} may leave by a jump to code tachy cannot follow ({} such ways out), where its return value is not known: --uretprobe times it to its return",
                    item.name, t.exits.value_unknown
                ))
                .into())
            }
            _ => {}
        }
    }
    Ok(())
}

/// Resolves `--filter` for every traced item: each function's operands
/// where its own DWARF (or the ABI) puts them, each system call's in the
/// syscall registers. What cannot be resolved is a usage error; notes
/// (what argN means on a clone) go to stderr once each.
fn add_filters(plan: &mut Plan, f: &Filter, args: &TracedArgs) -> Result<()> {
    let bad = |e: anyhow::Error| -> anyhow::Error { UsageError(format!("{e:#}")).into() };
    let mut resolved = Vec::new();
    for item in &plan.items {
        match &item.kind {
            ItemKind::Syscall { .. } => {}
            ItemKind::KernelFunction => {
                return Err(bad(anyhow!(
                    "--filter reads the arguments of user functions and system calls; {} is a kernel function",
                    item.name
                )))
            }
            // Go's return value is read at its exits; its arguments, in
            // Go's own registers, are not read.
            ItemKind::Function(_) if item.is_go() && !f.reads_only_ret() => {
                return Err(bad(anyhow!(
                    "--filter does not read the arguments of Go functions yet ({}): only ret",
                    item.name
                )))
            }
            ItemKind::Function(_) => {}
        }
    }
    for (id, a) in &args.syscalls {
        resolved.push((*id, f.resolve(a).map_err(bad)?));
    }
    for &(r, func, id, ref a) in &args.functions {
        let res = f.resolve(a).map_err(bad)?;
        keep_registers(plan, &r.obj, func, id, res.registers())?;
        resolved.push((id, res));
    }
    let mut noted = std::collections::BTreeSet::new();
    for (id, r) in resolved {
        for n in &r.notes {
            if noted.insert(n.clone()) {
                eprintln!("tachy: note: {n}");
            }
        }
        plan.arg_filters.insert(id, r);
    }
    Ok(())
}

/// What each traced item knows of its arguments, read once for
/// `--filter`, records and `--by`: a system call's from the kernel's
/// tracing, a function's as they are at its first instruction (one DWARF
/// pass per object).
#[derive(Default)]
struct TracedArgs<'r> {
    /// (id, arguments) of each system call.
    syscalls: Vec<(u32, FuncArgs)>,
    /// (object, function, id, arguments) of each traced function.
    functions: Vec<(&'r resolve::Resolved, &'r Function, u32, FuncArgs)>,
}

impl<'r> TracedArgs<'r> {
    fn read(plan: &Plan, roots: &[(&'r resolve::Resolved, &'r Function, u32)]) -> Self {
        let syscalls = plan
            .items
            .iter()
            .enumerate()
            .filter(|(_, item)| matches!(item.kind, ItemKind::Syscall { .. }))
            .map(|(i, item)| (i as u32, FuncArgs::for_syscall(&item.name)))
            .collect();
        // (function, its id), per object.
        type Traced<'a> = Vec<(&'a Function, u32)>;
        let mut by_object: Vec<(&resolve::Resolved, Traced)> = Vec::new();
        for (r, func, id) in roots {
            match by_object.iter_mut().find(|(o, _)| std::ptr::eq(*o, *r)) {
                Some((_, v)) => v.push((func, *id)),
                None => by_object.push((r, vec![(func, *id)])),
            }
        }
        let mut functions = Vec::new();
        for (r, funcs) in by_object {
            let pairs: Vec<(&Function, u64)> = funcs.iter().map(|(f, _)| (*f, f.addr)).collect();
            let args = FuncArgs::for_functions(&r.obj, &pairs);
            for (a, (func, id)) in args.into_iter().zip(funcs) {
                functions.push((r, func, id, a));
            }
        }
        TracedArgs {
            syscalls,
            functions,
        }
    }
}

/// Where function `id`'s entry probe stands now (an earlier feature may
/// have moved it back to the first instruction).
fn entry_now(plan: &Plan, id: u32, func: &Function) -> u64 {
    match &plan.items[id as usize].kind {
        ItemKind::Function(t) => t.entry_addr,
        _ => func.addr,
    }
}

/// An entry probe of function `id` placed after an instruction that
/// overwrites one of `regs` (a bit per x86 register number) moves back to
/// the function's first instruction, where the arguments are as the caller
/// left them. An error: the first instruction cannot be probed, and the
/// entry probe stays where it was.
fn keep_registers(
    plan: &mut Plan,
    obj: &ElfObject,
    func: &Function,
    id: u32,
    regs: u16,
) -> Result<()> {
    if regs & written_before(obj, func, entry_now(plan, id, func)) != 0 {
        plan.entry_at_start(obj, func, id)?;
    }
    Ok(())
}

/// Registers (bit per x86 number) that instructions of `func` before its
/// entry probe at `entry` may write.
fn written_before(obj: &ElfObject, func: &Function, entry: u64) -> u16 {
    match obj.code(func.addr, entry.saturating_sub(func.addr)) {
        Some(code) if entry > func.addr => {
            crate::disasm::written_registers(obj.arch, code, func.addr)
        }
        _ => 0,
    }
}

/// What each traced function's slow-call records print of its arguments
/// (`--record-slower-than`): DWARF parameters where known. A parameter
/// whose register is overwritten before a cheaper entry probe moves that
/// probe back to the first instruction, as `--filter` does; where the
/// first instruction cannot be probed, the value is shown as unavailable.
fn add_record_args(plan: &mut Plan, args: &TracedArgs) {
    for (id, a) in &args.syscalls {
        plan.record_args.insert(*id, a.record_args());
    }
    for &(r, func, id, ref a) in &args.functions {
        let mut list = a.record_args();
        let regs = list
            .iter()
            .filter_map(|x| x.register(false))
            .fold(0u16, |m, reg| m | 1 << (reg & 15));
        if keep_registers(plan, &r.obj, func, id, regs).is_err() {
            // The entry probe stayed where it was.
            let written = written_before(&r.obj, func, entry_now(plan, id, func));
            let hit = |x: &super::args::RecordArg| {
                x.register(false)
                    .is_some_and(|reg| written & (1 << reg) != 0)
            };
            for x in list.iter_mut().filter(|x| hit(x)) {
                x.fetch =
                    super::args::Fetch::Unavailable("overwritten before the entry probe".into());
            }
        }
        plan.record_args.insert(id, list);
    }
}

/// Resolves the argument keys of `--by` (`argN`, parameter names) for
/// every traced item as `--filter` resolves its operands: each function's
/// where its own DWARF (or the ABI) puts them, each system call's in the
/// syscall registers. An entry probe placed after an instruction that
/// overwrites a key's register moves back to the first instruction. What
/// cannot be resolved is a usage error; notes (what argN means on a clone)
/// go to stderr once each.
fn add_by_args(plan: &mut Plan, by: &[ByKey], args: &TracedArgs) -> Result<()> {
    if !by
        .iter()
        .any(|k| matches!(k, ByKey::Arg(_) | ByKey::Retval))
    {
        return Ok(());
    }
    let operands = |a: &FuncArgs| -> Result<Vec<Option<Operand>>> {
        by.iter()
            .map(|k| match k {
                ByKey::Arg(r) => a
                    .resolve(r)
                    .map(Some)
                    .map_err(|e| UsageError(format!("--by {k}: {e:#}")).into()),
                ByKey::Retval => a
                    .ret_operand()
                    .map(Some)
                    .map_err(|e| UsageError(format!("--by {k}: {e:#}")).into()),
                _ => Ok(None),
            })
            .collect()
    };
    let mut resolved = Vec::new();
    for (id, a) in &args.syscalls {
        resolved.push((*id, operands(a)?));
    }
    for &(r, func, id, ref a) in &args.functions {
        let ops = operands(a)?;
        let regs = ops
            .iter()
            .flatten()
            .filter_map(|o| match o.source {
                Source::Reg(r) => Some(1u16 << (r & 15)),
                _ => None,
            })
            .fold(0, |a, b| a | b);
        keep_registers(plan, &r.obj, func, id, regs)?;
        resolved.push((id, ops));
    }
    let mut noted = std::collections::BTreeSet::new();
    for (id, ops) in resolved {
        for n in ops.iter().flatten().filter_map(|o| o.note.as_ref()) {
            if noted.insert(n.clone()) {
                eprintln!("tachy: note: {n}");
            }
        }
        plan.by_args.insert(id, ops);
    }
    Ok(())
}

/// The function a PLT call to `raw` reaches in the traced process: the
/// first library (in load order) that defines it.
/// The function an imported name reaches in the traced process's
/// libraries: for an IFUNC symbol, what `latency` times for it (the
/// implementation the process uses, else every one its resolver can
/// return), never the resolver, which runs once at relocation.
/// The functions `--expand CALLER->CALLEE` breaks down under the indirect
/// calls of the function of `obj` that starts at `start`: for each CALLER
/// naming it, those CALLEE names in `obj`, else in the first other object
/// of the process that has some.
fn indirect_callees(
    scope: &Scope,
    objects: &mut Objects,
    expand: &[Expand],
    seen: &mut [(bool, bool)],
    obj: &Rc<ElfObject>,
    start: u64,
) -> Vec<Imported> {
    let Some(caller) = obj
        .symbols()
        .ok()
        .and_then(|s| s.function_starting_at(start))
    else {
        return Vec::new();
    };
    let mut out: Vec<Imported> = Vec::new();
    for (e, seen) in expand.iter().zip(seen) {
        let Some(t) = &e.through else { continue };
        if !t.matches(&caller.raw, &caller.names) {
            continue;
        }
        seen.0 = true;
        let mut found = symbols::find(obj, &e.callee).map_or(Vec::new(), |f| f.functions);
        let mut object = obj.clone();
        if found.is_empty() {
            let others: Vec<ObjectRef> = match scope {
                Scope::Process(m) => m.all().cloned().collect(),
                Scope::Command { exe, libs } => std::iter::once(exe)
                    .chain(libs)
                    .map(|p| ObjectRef {
                        display: p.clone(),
                        open_path: p.clone(),
                    })
                    .collect(),
                Scope::Files => Vec::new(),
            };
            for o in others {
                let Ok(other) = objects.get(&o) else { continue };
                if Rc::ptr_eq(&other, obj) {
                    continue;
                }
                found = symbols::find(&other, &e.callee).map_or(Vec::new(), |f| f.functions);
                if !found.is_empty() {
                    object = other;
                    break;
                }
            }
        }
        seen.1 |= !found.is_empty();
        for f in found {
            if !out
                .iter()
                .any(|(o, g)| Rc::ptr_eq(o, &object) && g.addr == f.addr)
            {
                out.push((object.clone(), f));
            }
        }
    }
    out
}

fn import_target(scope: &Scope, objects: &mut Objects, raw: &str) -> Vec<Imported> {
    let Some((obj, f)) = import_symbol(scope, objects, raw) else {
        return Vec::new();
    };
    // Whatever latency would leave out of the candidates, its lines are
    // about timing them as functions of their own, not as a site's callee.
    let mut notes = Vec::new();
    resolve::implement_ifuncs(&obj, vec![f], scope, objects, &mut notes)
        .into_iter()
        .map(|g| (obj.clone(), g))
        .collect()
}

fn import_symbol(
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
