//! From function specs and a target to the functions to trace: picks the
//! objects a spec names, looks the pattern up in each, and explains a miss
//! (near names, inlined-only functions) in one line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{bail, Result};

use crate::symbols::elf::dwarf;
use crate::symbols::elf::inlined::{self, Instance};
use crate::symbols::{self, ifunc, ElfObject, Function, Pattern, SymSource};
use crate::target::{self, ObjectRef, ProcessMaps};

/// A function spec: `FUNC`, `LIB:FUNC`, `PATH:FUNC`, `k:FUNC`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncSpec {
    pub object: Option<String>,
    pub pattern: Pattern,
}

impl FuncSpec {
    /// `syscall:NAME` (or `sys:NAME`): a system call, timed enter to exit.
    pub fn is_syscall(&self) -> bool {
        matches!(self.object.as_deref(), Some("syscall" | "sys"))
    }

    /// `k:FUNC` (or `kernel:FUNC`): a kernel function, timed with fentry/fexit
    /// or kprobes.
    pub fn is_kernel(&self) -> bool {
        matches!(self.object.as_deref(), Some("k" | "kernel" | "kprobe"))
    }

    /// Splits at the first `:` that is not part of a C++ `::`.
    pub fn parse(s: &str) -> Result<FuncSpec> {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b':' {
                if b.get(i + 1) == Some(&b':') {
                    i += 2;
                    continue;
                }
                let (obj, pat) = (&s[..i], &s[i + 1..]);
                if obj.is_empty() {
                    bail!("{s:?}: nothing before ':' (expected LIB:FUNC or PATH:FUNC)");
                }
                if pat.trim().is_empty() {
                    bail!("{s:?}: no function after ':'");
                }
                return Ok(FuncSpec {
                    object: Some(obj.to_string()),
                    pattern: Pattern::parse(pat)?,
                });
            }
            i += 1;
        }
        Ok(FuncSpec {
            object: None,
            pattern: Pattern::parse(s)?,
        })
    }
}

/// Where objects come from.
pub enum Scope {
    /// A running process.
    Process(ProcessMaps),
    /// A command about to start: its executable and the libraries it needs.
    Command { exe: PathBuf, libs: Vec<PathBuf> },
    /// No process: specs must name files (PATH:FUNC or LIB:FUNC).
    Files,
}

/// What the specs name: functions of objects, and kernel functions (a bare
/// name that no user function matches but the kernel has).
#[derive(Default)]
pub struct Resolution {
    pub user: Vec<Resolved>,
    /// Bare patterns found only in the kernel, with the functions each
    /// names.
    pub kernel: Vec<(String, Vec<String>)>,
    /// Implementations of IFUNC symbols left out, one line each.
    pub left_out: Vec<String>,
}

impl Resolution {
    /// Adds what other specs name: functions of an object already here join
    /// its list (each once).
    pub fn add(&mut self, other: Resolution) {
        for r in other.user {
            match self.user.iter_mut().find(|m| Rc::ptr_eq(&m.obj, &r.obj)) {
                Some(m) => {
                    for f in r.funcs {
                        if !m.funcs.iter().any(|g| g.addr == f.addr) {
                            m.funcs.push(f);
                        }
                    }
                    for i in r.inlined {
                        if !m.inlined.contains(&i) {
                            m.inlined.push(i);
                        }
                    }
                }
                None => self.user.push(r),
            }
        }
        self.kernel.extend(other.kernel);
    }
}

/// The functions one object contributes.
pub struct Resolved {
    pub obj: Rc<ElfObject>,
    pub source: SymSource,
    pub funcs: Vec<Function>,
    /// The instances DWARF lists of the functions named, inlined into
    /// others (with or without a copy of their own among `funcs`).
    pub inlined: Vec<Instance>,
}

#[derive(Default)]
pub struct Objects {
    open: HashMap<PathBuf, Rc<ElfObject>>,
}

impl Objects {
    pub fn get(&mut self, r: &ObjectRef) -> Result<Rc<ElfObject>> {
        if let Some(o) = self.open.get(&r.open_path) {
            return Ok(o.clone());
        }
        let o = Rc::new(ElfObject::open(&r.display, &r.open_path)?);
        self.open.insert(r.open_path.clone(), o.clone());
        Ok(o)
    }
}

fn file_ref(p: &Path) -> ObjectRef {
    ObjectRef {
        display: p.to_path_buf(),
        open_path: p.to_path_buf(),
    }
}

/// The objects a spec may name, as groups searched in order: the first
/// group with a match wins (the executable before its libraries).
fn candidate_groups(spec: &FuncSpec, scope: &Scope) -> Result<Vec<Vec<ObjectRef>>> {
    let Some(obj) = spec.object.as_deref() else {
        return Ok(match scope {
            Scope::Process(m) => vec![
                std::iter::once(&m.exe)
                    .chain(&m.other_exes)
                    .cloned()
                    .collect(),
                m.libs.clone(),
            ],
            Scope::Command { exe, libs } => vec![
                vec![file_ref(exe)],
                libs.iter().map(|l| file_ref(l)).collect(),
            ],
            Scope::Files => bail!(
                "{} names no object nor kernel function: give -p PID, PATH:FUNC, LIB:FUNC or a command after --",
                spec.pattern.quoted()
            ),
        });
    };
    if obj.contains('/') {
        let path = PathBuf::from(obj);
        return Ok(match scope {
            Scope::Process(m) => {
                let canon = std::fs::canonicalize(&path).unwrap_or(path.clone());
                let hit: Vec<ObjectRef> = m
                    .all()
                    .filter(|o| o.display == path || o.display == canon)
                    .cloned()
                    .collect();
                if hit.is_empty() {
                    bail!("process {} does not map {}", m.pid, path.display());
                }
                vec![hit]
            }
            _ => {
                if !path.exists() {
                    bail!("no such file: {}", path.display());
                }
                vec![vec![file_ref(&path)]]
            }
        });
    }
    let hits: Vec<ObjectRef> = match scope {
        Scope::Process(m) => m
            .all()
            .filter(|o| target::lib_matches(obj, &o.display))
            .cloned()
            .collect(),
        Scope::Command { exe, libs } => std::iter::once(exe)
            .chain(libs)
            .filter(|p| target::lib_matches(obj, p))
            .map(|p| file_ref(p))
            .collect(),
        Scope::Files => target::find_library(obj, &[])
            .map(|p| file_ref(&p))
            .into_iter()
            .collect(),
    };
    if hits.is_empty() {
        match scope {
            Scope::Process(m) => bail!("process {} maps no library named {obj:?}", m.pid),
            _ => bail!("no library named {obj:?} found"),
        }
    }
    Ok(vec![hits])
}

/// The kernel functions a bare name matches, if any.
fn kernel_fallback(spec: &FuncSpec) -> Option<Vec<String>> {
    if spec.object.is_some() {
        return None;
    }
    let hits = crate::kernel::kernel_functions(spec.pattern.as_str()).ok()?;
    (!hits.is_empty()).then_some(hits)
}

/// Resolves every spec; fails on the first that matches nothing. A bare
/// name that matches no function of the target's objects (or names none,
/// without a target) is looked up among the kernel's functions (all of
/// them: how many may be traced at once is the caller's to check).
pub fn resolve(specs: &[FuncSpec], scope: &Scope, objects: &mut Objects) -> Result<Resolution> {
    let mut out: Vec<Resolved> = Vec::new();
    let mut kernel: Vec<(String, Vec<String>)> = Vec::new();
    let mut left_out = Vec::new();
    for spec in specs.iter().filter(|s| !s.is_syscall() && !s.is_kernel()) {
        let pat = spec.pattern.clone();
        let groups = match candidate_groups(spec, scope) {
            Ok(g) => g,
            Err(e) => match kernel_fallback(spec) {
                Some(k) if matches!(scope, Scope::Files) => {
                    kernel.push((spec.pattern.as_str().to_string(), k));
                    continue;
                }
                _ => return Err(e),
            },
        };
        let mut found_any = false;
        let mut searched: Vec<Searched> = Vec::new();
        let mut first_err = None;
        for group in &groups {
            let group_start = searched.len();
            for r in group {
                let obj = match objects.get(r) {
                    Ok(o) => o,
                    Err(e) => {
                        // A library that cannot be read does not hide matches
                        // elsewhere; an explicitly named one is an error.
                        if spec.object.is_some() {
                            return Err(e);
                        }
                        first_err.get_or_insert(e);
                        continue;
                    }
                };
                let found = match symbols::find(&obj, &pat) {
                    Ok(f) => f,
                    // An object with no symbols (a stripped executable) hides
                    // no match elsewhere; only one named explicitly is an error.
                    Err(e) if spec.object.is_some() && groups.len() == 1 && group.len() == 1 => {
                        match obj.debug_hint() {
                            Some(hint) => bail!("{e:#}; {hint}"),
                            None => return Err(e),
                        }
                    }
                    Err(e) => {
                        searched.push(Searched {
                            obj: obj.clone(),
                            source: Err(format!("{e:#}")),
                            first_group: std::ptr::eq(group, &groups[0]),
                        });
                        first_err.get_or_insert(e);
                        continue;
                    }
                };
                searched.push(Searched {
                    obj: obj.clone(),
                    source: Ok(found.source),
                    first_group: std::ptr::eq(group, &groups[0]),
                });
                if found.functions.is_empty() {
                    continue;
                }
                // The copies the compiler inlined beside the function's own.
                let instances = instances_of(&obj, &pat);
                let functions =
                    implement_ifuncs(&obj, found.functions, scope, objects, &mut left_out);
                found_any = true;
                match out.iter_mut().find(|r| Rc::ptr_eq(&r.obj, &obj)) {
                    Some(r) => {
                        for f in functions {
                            if !r.funcs.iter().any(|g| g.addr == f.addr) {
                                r.funcs.push(f);
                            }
                        }
                        for i in instances {
                            if !r.inlined.contains(&i) {
                                r.inlined.push(i);
                            }
                        }
                    }
                    None => out.push(Resolved {
                        obj,
                        source: found.source,
                        funcs: functions,
                        inlined: instances,
                    }),
                }
            }
            // A function that exists only inlined: its instances, in the
            // objects of the group whose DWARF has them.
            let only_inlined = !found_any;
            for s in searched[group_start..].iter().filter(|_| only_inlined) {
                let Ok(source) = &s.source else { continue };
                let instances = instances_of(&s.obj, &pat);
                if !instances.is_empty() {
                    found_any = true;
                    out.push(Resolved {
                        obj: s.obj.clone(),
                        source: *source,
                        funcs: Vec::new(),
                        inlined: instances,
                    });
                }
            }
            if found_any {
                break;
            }
        }
        if !found_any {
            // Only when every object could be searched: a function may
            // hide in one that could not.
            if first_err.is_none() {
                if let Some(k) = kernel_fallback(spec) {
                    kernel.push((spec.pattern.as_str().to_string(), k));
                    continue;
                }
            }
            if searched.is_empty() {
                if let Some(e) = first_err {
                    return Err(e);
                }
            }
            bail!("{}", explain_miss(&pat, &searched));
        }
    }
    Ok(Resolution {
        user: out,
        kernel,
        left_out,
    })
}

/// The inlined instances DWARF lists of what `pat` names in `obj`. A glob
/// names what has a symbol: instances are looked up for a name (`work`,
/// `ns::Cache::get`), and lists of every function stay what they were.
fn instances_of(obj: &ElfObject, pat: &Pattern) -> Vec<Instance> {
    if pat.as_str().contains(['*', '?']) {
        return Vec::new();
    }
    inlined::instances(obj.dwarf_data(), pat)
}

/// `funcs` with each IFUNC symbol replaced by what callers reach: in a
/// running process, the function its relocated slot holds (the object's
/// own IRELATIVE slot, else another object's GOT slot for the symbol);
/// otherwise every function its resolver can return. Each address once.
pub(crate) fn implement_ifuncs(
    obj: &ElfObject,
    funcs: Vec<Function>,
    scope: &Scope,
    objects: &mut Objects,
    left_out: &mut Vec<String>,
) -> Vec<Function> {
    let Ok(index) = obj.symbols() else {
        return funcs;
    };
    if !funcs.iter().any(|f| index.is_ifunc(f.addr)) {
        return funcs;
    }
    let process = match scope {
        Scope::Process(m) => target::ProcessMemory::open(m.pid).and_then(|mem| {
            let bias = mem.bias(&obj.display, |off| obj.offset_to_vaddr(off))?;
            Some((m, mem, bias))
        }),
        _ => None,
    };
    let read = process.as_ref().map(|(_, mem, bias)| {
        move |slot: u64| {
            mem.read_u64(slot.wrapping_add(*bias))
                .map(|v| v.wrapping_sub(*bias))
        }
    });
    let read = read.as_ref().map(|r| r as &dyn Fn(u64) -> Option<u64>);
    let mut importers: Option<Vec<Imports>> = None;
    let mut out: Vec<Function> = Vec::with_capacity(funcs.len());
    let mut seen = std::collections::HashSet::new();
    for f in funcs {
        let impls = if index.is_ifunc(f.addr) {
            match ifunc::implementations(obj, &f, read) {
                ifunc::Implementations::Resolved(g) => vec![g],
                ifunc::Implementations::Candidates(gs, notes) => {
                    let bound = process.as_ref().and_then(|(m, mem, bias)| {
                        let imps =
                            importers.get_or_insert_with(|| imports_of(obj, m, objects, mem));
                        bound_by_importers(&f, imps, mem, *bias)
                    });
                    match bound.and_then(|a| ifunc::resolved_to(obj, &f, a)) {
                        Some(g) => vec![g],
                        None => {
                            left_out.extend(notes);
                            gs
                        }
                    }
                }
                ifunc::Implementations::Unknown => vec![f],
            }
        } else {
            vec![f]
        };
        for g in impls {
            if seen.insert(g.addr) {
                out.push(g);
            }
        }
    }
    out
}

/// Another object of a process, with where it was loaded and the GOT
/// slots of the functions it imports, by name.
struct Imports {
    bias: u64,
    slots: HashMap<String, Vec<u64>>,
}

/// The imports of every object process `m` maps but `obj`.
fn imports_of(
    obj: &ElfObject,
    m: &ProcessMaps,
    objects: &mut Objects,
    mem: &target::ProcessMemory,
) -> Vec<Imports> {
    let mut out = Vec::new();
    for r in m.all().filter(|r| r.display != obj.display) {
        let Ok(o) = objects.get(r) else { continue };
        let Some(bias) = mem.bias(&o.display, |off| o.offset_to_vaddr(off)) else {
            continue;
        };
        let mut slots: HashMap<String, Vec<u64>> = HashMap::new();
        for &(slot, _) in o.dyn_relocs().symbolic() {
            if let Some(name) = o.slot_import(slot) {
                slots.entry(name.to_string()).or_default().push(slot);
            }
        }
        out.push(Imports { bias, slots });
    }
    out
}

/// Where another object's GOT slot for IFUNC `f` points, as an address of
/// `f`'s object (loaded at `bias`): what calls through that object reach.
/// A lazily bound slot not yet used points into its own object's PLT and
/// is passed over.
fn bound_by_importers(
    f: &Function,
    imports: &[Imports],
    mem: &target::ProcessMemory,
    bias: u64,
) -> Option<u64> {
    // The IFUNC may have matched through a local alias (`__GI_memset`).
    let names = [
        f.raw.as_str(),
        f.raw.trim_start_matches("__GI_"),
        f.raw.trim_start_matches("__libc_"),
    ];
    imports.iter().find_map(|imp| {
        names
            .iter()
            .filter_map(|n| imp.slots.get(*n))
            .flatten()
            .filter_map(|&slot| mem.read_u64(slot.wrapping_add(imp.bias)))
            .map(|v| v.wrapping_sub(bias))
            .find(|&a| a != f.addr)
    })
}

/// An object a pattern was looked up in, and where its symbols came from
/// (or why it had none).
struct Searched {
    obj: Rc<ElfObject>,
    source: std::result::Result<SymSource, String>,
    /// The executable, or the object the spec names: its missing symbols
    /// are worth a hint.
    first_group: bool,
}

/// How many objects a miss message names one by one.
const NAMED: usize = 6;

impl Searched {
    /// `PATH (symbols from SOURCE)`, `PATH (no function symbols: …)`.
    fn describe(&self) -> String {
        let path = self.obj.display.display();
        let hint = || {
            self.obj
                .debug_hint()
                .filter(|_| self.first_group)
                .map(|h| format!("; {h}"))
                .unwrap_or_default()
        };
        match &self.source {
            Ok(SymSource::Dynsym) => format!(
                "{path} (symbols from {}{})",
                SymSource::Dynsym.describe(),
                hint()
            ),
            Ok(s) => format!("{path} (symbols from {})", self.obj.describe_source(*s)),
            // It opened as ELF: it has no function symbols at all.
            Err(_) if self.obj.parse().is_ok() => format!(
                "{path} (no function symbols: stripped, and exports none{})",
                hint()
            ),
            Err(e) => format!("{path} ({})", e.replace(&path.to_string(), "").trim()),
        }
    }
}

/// Why nothing matched: the first line names the pattern (and where a
/// function that exists only inlined was inlined), then come the near
/// names and the objects searched, one a line.
fn explain_miss(pat: &Pattern, searched: &[Searched]) -> String {
    let mut msg = format!("no function matches {}", pat.quoted());
    if searched.is_empty() {
        return msg;
    }
    let with_symbols: Vec<&Rc<ElfObject>> = searched
        .iter()
        .filter(|s| s.source.is_ok())
        .map(|s| &s.obj)
        .collect();
    let inlined = with_symbols
        .iter()
        .find_map(|obj| dwarf::inlined_only(obj.dwarf_data(), pat));
    match inlined {
        Some(inl) => msg.push_str(&format!("; {inl}")),
        None => {
            let mut near: Vec<String> = Vec::new();
            for obj in with_symbols.iter().take(8) {
                for n in symbols::suggest(obj, pat, 5) {
                    if !near.contains(&n) && near.len() < 5 {
                        near.push(n);
                    }
                }
                if near.len() >= 5 {
                    break;
                }
            }
            if !near.is_empty() {
                msg.push_str("\nnear names:");
                for n in &near {
                    msg.push_str(&format!("\n  {n}"));
                }
            }
        }
    }
    // Name them all, or leave out at least two.
    let shown = if searched.len() > NAMED + 1 {
        NAMED
    } else {
        searched.len()
    };
    msg.push_str("\nsearched:");
    for s in searched.iter().take(shown) {
        msg.push_str(&format!("\n  {}", s.describe()));
    }
    if searched.len() > shown {
        msg.push_str(&format!("\n  {} other objects", searched.len() - shown));
    }
    msg
}
