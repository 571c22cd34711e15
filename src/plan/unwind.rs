//! Whether anything can unwind through a traced frame: the proof that
//! allows a uretprobe (whose trampoline the unwinder cannot pass), and the
//! one list of functions tachy knows by name (those that never run user
//! code, those that never return, those that throw or unwind).
//!
//! The proof is made per function, from the object's own code: the
//! function and everything it can call within the object (direct calls and
//! tail jumps, followed transitively, bounded) must never reach a throw,
//! and must call out of the object (through the PLT or a GOT slot) only to
//! the quiet functions of [`KNOWN`], and never through a pointer. Landing
//! pads need no check of their own: they run only when an exception
//! reaches the function from below, and a landing pad that resumes or
//! rethrows calls `_Unwind_Resume` or `__cxa_rethrow`, which the walk sees
//! (it decodes every byte of the function and its named parts).
//!
//! Out of scope, by design: an exception thrown from a signal handler
//! (`-fnon-call-exceptions`, or a handler that throws while the function
//! runs) and asynchronous thread cancellation
//! (`PTHREAD_CANCEL_ASYNCHRONOUS`) can unwind from any instruction, and no
//! reading of the code can rule them out; `--uretprobe` users and this
//! proof share that assumption with every uretprobe-based tracer.
//! Deferred cancellation unwinds only from cancellation points, which are
//! never on the quiet list.

use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::rc::Rc;

use anyhow::Result;
use object::Object;

use crate::disasm::{Decoded, Target};
use crate::symbols::elf::index::SymbolIndex;
use crate::symbols::elf::symbol_names;
use crate::symbols::{demangle, ElfObject, Function};

/// Never runs user code (no callbacks), never unwinds and is no
/// thread-cancellation point: while it runs, nothing can unwind through
/// its caller.
const QUIET: u8 = 1;
/// Never returns to its caller: it throws, unwinds or ends the process.
/// Code after a call to it is often a landing pad, reached by the
/// unwinder, not by a return.
const NO_RETURN: u8 = 2;
/// Unwinding machinery (personality routines, cancellation): an object
/// that defines or imports it may be unwound through.
const UNWINDS: u8 = 4;
/// Raises an exception or a panic, or unwinds its caller's frame: a
/// function that can reach it may be unwound through.
const THROWS: u8 = 8;

/// Functions known by name, with what is known of them. Only functions
/// that take no callback, run no user code and are no cancellation point
/// may be `QUIET`: not `qsort` (a callback), `printf` (registered
/// conversions, and a cancellation point), `operator new` (throws, runs
/// the new-handler) or `operator delete` (a C++ program may replace it),
/// nor anything that can block in a cancellable way. `malloc` and `free`
/// may be replaced too, but only by C-ABI code, through which nothing may
/// be thrown.
const KNOWN: &[(&str, u8)] = &[
    ("memcpy", QUIET),
    ("memmove", QUIET),
    ("memset", QUIET),
    ("memcmp", QUIET),
    ("bcmp", QUIET),
    ("memchr", QUIET),
    ("memrchr", QUIET),
    ("strlen", QUIET),
    ("strnlen", QUIET),
    ("strcmp", QUIET),
    ("strncmp", QUIET),
    ("strcasecmp", QUIET),
    ("strncasecmp", QUIET),
    ("strcpy", QUIET),
    ("strncpy", QUIET),
    ("stpcpy", QUIET),
    ("strcat", QUIET),
    ("strncat", QUIET),
    ("strchr", QUIET),
    ("strrchr", QUIET),
    ("strstr", QUIET),
    ("strspn", QUIET),
    ("strcspn", QUIET),
    ("strpbrk", QUIET),
    ("strdup", QUIET),
    ("strndup", QUIET),
    ("wcslen", QUIET),
    ("wmemcpy", QUIET),
    ("wmemset", QUIET),
    ("wmemcmp", QUIET),
    ("malloc", QUIET),
    ("calloc", QUIET),
    ("realloc", QUIET),
    ("free", QUIET),
    ("aligned_alloc", QUIET),
    ("posix_memalign", QUIET),
    ("clock_gettime", QUIET),
    ("gettimeofday", QUIET),
    ("time", QUIET),
    ("getpid", QUIET),
    ("gettid", QUIET),
    ("__errno_location", QUIET),
    ("__tls_get_addr", QUIET),
    ("__ctype_b_loc", QUIET),
    ("__ctype_tolower_loc", QUIET),
    ("__ctype_toupper_loc", QUIET),
    ("pthread_self", QUIET),
    ("pthread_mutex_lock", QUIET),
    ("pthread_mutex_trylock", QUIET),
    ("pthread_mutex_unlock", QUIET),
    ("pthread_spin_lock", QUIET),
    ("pthread_spin_unlock", QUIET),
    ("pthread_getspecific", QUIET),
    ("__stack_chk_fail", QUIET | NO_RETURN),
    ("abs", QUIET),
    ("labs", QUIET),
    ("atoi", QUIET),
    ("atol", QUIET),
    ("strtol", QUIET),
    ("strtoul", QUIET),
    ("strtoll", QUIET),
    ("strtoull", QUIET),
    ("strtod", QUIET),
    ("strtof", QUIET),
    ("sqrt", QUIET),
    ("exp", QUIET),
    ("log", QUIET),
    ("pow", QUIET),
    ("sin", QUIET),
    ("cos", QUIET),
    ("fmod", QUIET),
    ("__memcpy_chk", QUIET),
    ("__memset_chk", QUIET),
    ("__memmove_chk", QUIET),
    ("__strcpy_chk", QUIET),
    ("__strcat_chk", QUIET),
    ("_Unwind_Resume", NO_RETURN | UNWINDS | THROWS),
    ("_Unwind_RaiseException", UNWINDS | THROWS),
    ("_Unwind_Resume_or_Rethrow", UNWINDS | THROWS),
    ("_Unwind_ForcedUnwind", UNWINDS | THROWS),
    ("__cxa_throw", NO_RETURN | UNWINDS | THROWS),
    ("__cxa_rethrow", NO_RETURN | UNWINDS | THROWS),
    ("__gxx_personality_v0", UNWINDS),
    ("rust_eh_personality", UNWINDS),
    ("__rust_start_panic", UNWINDS | THROWS),
    ("rust_panic", NO_RETURN | THROWS),
    ("rust_begin_unwind", NO_RETURN | THROWS),
    ("pthread_exit", NO_RETURN | UNWINDS | THROWS),
    ("pthread_cancel", UNWINDS),
    ("__cxa_bad_cast", NO_RETURN | THROWS),
    ("__cxa_bad_typeid", NO_RETURN | THROWS),
    ("__cxa_throw_bad_array_new_length", NO_RETURN | THROWS),
    ("__cxa_call_terminate", NO_RETURN),
    ("__cxa_call_unexpected", NO_RETURN | THROWS),
    ("std::terminate()", NO_RETURN),
    ("abort", NO_RETURN),
    ("exit", NO_RETURN),
    ("_exit", NO_RETURN),
    ("_Exit", NO_RETURN),
    ("quick_exit", NO_RETURN),
    ("__assert_fail", NO_RETURN),
    ("__fortify_fail", NO_RETURN),
    ("__chk_fail", NO_RETURN),
    ("longjmp", NO_RETURN),
    ("siglongjmp", NO_RETURN),
    ("__longjmp_chk", NO_RETURN),
    ("__libc_fatal", NO_RETURN),
    ("err", NO_RETURN),
    ("errx", NO_RETURN),
    ("verr", NO_RETURN),
    ("verrx", NO_RETURN),
];

/// Demangled name prefixes of functions that throw or panic (C++ throw
/// helpers, Rust panics): they never return.
const THROW_PREFIXES: &[&str] = &[
    "std::__throw_",
    "core::panicking::",
    "std::panicking::begin_panic",
    "std::panicking::rust_panic",
    "std::panic::resume_unwind",
    "core::result::unwrap_failed",
    "core::option::expect_failed",
    "core::option::unwrap_failed",
];

fn known(name: &str, what: u8) -> bool {
    KNOWN.iter().any(|&(n, k)| n == name && k & what != 0)
}

/// A raw or shown name without its symbol version (`memcpy@GLIBC_2.14`)
/// or call kind (`memcpy@plt`).
fn bare(name: &str) -> &str {
    name.split('@').next().unwrap_or(name)
}

/// Whether a call site's callee, as shown (`name`, `name@plt`,
/// `name@got`), is known never to return.
pub fn never_returns(shown: &str) -> bool {
    let name = bare(shown);
    known(name, NO_RETURN) || THROW_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether a function, by its raw name and its demangled one, throws,
/// panics or unwinds its caller.
fn throws(raw: &str, shown: &str) -> bool {
    known(bare(raw), THROWS)
        || known(bare(shown), THROWS)
        || THROW_PREFIXES.iter().any(|p| shown.starts_with(p))
}

/// Whether an imported function never runs user code nor unwinds.
fn is_quiet(name: &str) -> bool {
    known(bare(name), QUIET)
}

/// Whether exceptions, panics or thread cancellation may unwind through
/// this object's code: it has an exception table (`.gcc_except_table`),
/// or defines or imports a function that throws, unwinds or cancels.
pub fn object_unwinds(obj: &ElfObject) -> Result<bool> {
    let file = obj.parse()?;
    if file.section_by_name(".gcc_except_table").is_some() {
        return Ok(true);
    }
    let named = |n: &&str| known(bare(n), UNWINDS | THROWS);
    Ok(symbol_names(&file, false).iter().any(named) || symbol_names(&file, true).iter().any(named))
}

/// Functions whose import (or, for the C++ and Rust runtimes, whose
/// definition) lets an object raise an exception or panic, or run cleanup
/// code during an unwind.
const RAISES: &[&str] = &[
    "__cxa_throw",
    "__cxa_rethrow",
    "_Unwind_RaiseException",
    "_Unwind_Resume_or_Rethrow",
    "_Unwind_Resume",
    "_Unwind_ForcedUnwind",
    "__gxx_personality_v0",
    "__gcc_personality_v0",
    "rust_eh_personality",
    "__rust_start_panic",
];

/// Of [`RAISES`], those whose definition alone is a runtime that raises
/// (libstdc++, Rust's std): the unwinder itself (libgcc_s) defines the
/// others and runs only when code that imports them calls it.
const RAISES_DEFINED: &[&str] = &[
    "__cxa_throw",
    "__cxa_rethrow",
    "__gxx_personality_v0",
    "rust_eh_personality",
    "__rust_start_panic",
];

/// Whether `path` is glibc's C library or dynamic loader, whose unwinding
/// is only the forced unwind of `pthread_exit` and cancellation.
fn is_glibc(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("ld-linux"))
}

/// What in an object could make a uretprobe of the process it is mapped in
/// change the course of an unwind, or `None`. A uretprobe replaces the
/// return address with a trampoline no unwinder can pass: it sees the end
/// of the stack there. That aborts a C++ throw or Rust panic that a frame
/// further out would catch, and skips the cleanup code of the frames
/// further out during a forced unwind. So an object is a hazard if it can
/// raise (imports the unwinder's raise or resume entry points, or defines
/// the C++ or Rust runtime), or has code an unwind runs (exception tables,
/// a personality routine). glibc's forced unwind (`pthread_exit`,
/// cancellation) is no hazard where nothing else is: at the trampoline its
/// stop function sees the end of the unwind data and jumps to the thread's
/// innermost cancellation buffer, as it would have once past the frames in
/// between, which have no cleanup code to run.
pub fn object_hazard(obj: &ElfObject) -> Option<String> {
    use object::{ObjectSymbol, ObjectSymbolTable};
    if is_glibc(&obj.display) {
        return None;
    }
    let Ok(file) = obj.parse() else {
        return Some("cannot be read".into());
    };
    if file.section_by_name(".gcc_except_table").is_some() {
        return Some("has exception tables".into());
    }
    let tables = [file.symbol_table(), file.dynamic_symbol_table()];
    for table in tables.into_iter().flatten() {
        for sym in table.symbols() {
            let Ok(name) = sym.name() else { continue };
            let name = bare(name);
            if !RAISES.contains(&name) {
                continue;
            }
            if sym.is_undefined() {
                return Some(format!("imports {name}"));
            }
            if RAISES_DEFINED.contains(&name) {
                return Some(format!("defines {name}"));
            }
        }
    }
    None
}

/// Why no unwind that a uretprobe would change can happen in a process
/// that maps exactly `objects` (see [`object_hazard`]), as `--dry-run`
/// says it; or the first object that could, with what it has.
pub fn process_cannot_unwind<'a>(
    objects: impl IntoIterator<Item = &'a ElfObject>,
) -> Result<(), String> {
    let mut forced = None;
    let mut callback = None;
    for obj in objects {
        if let Some(what) = object_hazard(obj) {
            return Err(format!("{} {what}", obj.display.display()));
        }
        if is_glibc(&obj.display) {
            continue;
        }
        let imported = |names: &[&'static str]| {
            imports_one_of(obj, names).map(|n| (n, obj.display.display().to_string()))
        };
        forced = forced.or_else(|| imported(FORCED_UNWINDS));
        callback = callback.or_else(|| imported(CALLBACKS_UNDER_CLEANUP));
    }
    match (forced, callback) {
        (Some((f, fo)), Some((c, co))) => Err(format!(
            "{fo} imports {f} and {co} imports {c}, whose callback libc runs under cleanup code"
        )),
        _ => Ok(()),
    }
}

/// The first of `names` that the object imports (or, statically linked,
/// defines: a static executable holds libc's code).
fn imports_one_of(obj: &ElfObject, names: &[&'static str]) -> Option<&'static str> {
    use object::{ObjectSymbol, ObjectSymbolTable};
    let file = obj.parse().ok()?;
    let tables = [file.dynamic_symbol_table(), file.symbol_table()];
    for table in tables.into_iter().flatten() {
        for sym in table.symbols() {
            let Ok(name) = sym.name() else { continue };
            if let Some(n) = names.iter().find(|n| **n == bare(name)) {
                return Some(n);
            }
        }
    }
    None
}

/// Functions that start a forced unwind of the calling thread, or of
/// another (deferred cancellation).
const FORCED_UNWINDS: &[&str] = &["pthread_exit", "pthread_cancel", "thrd_exit"];

/// libc functions that call user code inside a frame with cleanup code
/// for cancellation (undoing `pthread_once`'s state, unlocking a stream or
/// the list of loaded objects): a forced unwind from that code would skip
/// the cleanup at a uretprobe further in.
const CALLBACKS_UNDER_CLEANUP: &[&str] = &[
    "pthread_once",
    "call_once",
    "fopencookie",
    "register_printf_function",
    "register_printf_specifier",
    "register_printf_modifier",
    "register_printf_type",
    "dl_iterate_phdr",
];

/// What `--dry-run` says of a uretprobe chosen by [`process_cannot_unwind`].
pub const PROCESS_CANNOT_UNWIND: &str = "process cannot unwind: no C++ runtime, no Rust unwinding, no exception tables outside libc; pthread_exit ends at the uretprobe as at its frame";

/// Functions of the object a proof follows before it gives up.
pub const MAX_FOLLOWED: usize = 128;

/// What stops the proof that nothing can unwind through a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hazard {
    /// A call or tail jump to a function that throws, panics or unwinds
    /// (its name as shown).
    Throws(String),
    /// A call or tail jump out of the object to a function not known to
    /// be quiet (`name@plt`, `name@got`).
    Import(String),
    /// A call through a register or computed memory.
    IndirectCall,
    /// A tail jump through a register or computed memory.
    IndirectJump,
    /// A call or jump to code that no symbol or unwind table entry starts.
    UnknownCode(u64),
    /// A callee whose code cannot be read or decoded (its name).
    Undecodable(String),
    /// More than [`MAX_FOLLOWED`] functions can be reached.
    TooMany,
}

/// A hazard and where it is: the instruction, and the function holding it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obstacle {
    pub hazard: Hazard,
    pub addr: u64,
    /// The function holding the instruction: its name when it is a callee
    /// (none for the traced function), and where its parts are: its body
    /// (label "") and its named split parts (".cold"), as (label, start,
    /// end).
    pub within: Option<String>,
    pub parts: Vec<(String, u64, u64)>,
}

impl fmt::Display for Obstacle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.hazard {
            Hazard::Throws(n) | Hazard::Import(n) => write!(f, "calls {n}")?,
            Hazard::IndirectCall => write!(f, "indirect call")?,
            Hazard::IndirectJump => write!(f, "indirect tail jump")?,
            Hazard::UnknownCode(a) => write!(f, "calls code without a symbol at {a:#x},")?,
            Hazard::Undecodable(n) => write!(f, "calls {n}, which cannot be decoded,")?,
            Hazard::TooMany => {
                return write!(
                    f,
                    "calls more than {MAX_FOLLOWED} functions (not all followed)"
                )
            }
        }
        match self
            .parts
            .iter()
            .find(|(_, start, end)| (*start..*end).contains(&self.addr))
        {
            Some((label, start, _)) => write!(f, " at {label}+{:#x}", self.addr - start)?,
            None => write!(f, " at {:#x}", self.addr)?,
        }
        if let Some(name) = &self.within {
            write!(f, " in {name}")?;
        }
        Ok(())
    }
}

/// A function's body and named split parts, as (label, start, end): the
/// body's label is empty, a part's is its compiler suffix (".cold").
fn parts_of(f: &Function) -> Vec<(String, u64, u64)> {
    let mut parts = vec![(String::new(), f.addr, f.addr.saturating_add(f.size))];
    for frag in &f.fragments {
        let (_, suffix) = crate::symbols::demangle::split_suffix(&frag.raw);
        parts.push((
            suffix.to_string(),
            frag.addr,
            frag.addr.saturating_add(frag.size),
        ));
    }
    parts
}

/// A call or tail jump, as the proof reads it.
#[derive(Clone, Debug)]
enum Step {
    /// Out of the object: the callee as shown (`name@plt`, `name@got`).
    Import {
        shown: String,
        throws: bool,
        quiet: bool,
    },
    /// To code of the object, at this address.
    Local(u64),
    IndirectCall,
    IndirectJump,
}

/// A function of the object as the proof reads it: its name, its parts,
/// and its calls and tail jumps in address order.
#[derive(Debug)]
struct Node {
    name: Option<String>,
    parts: Vec<(String, u64, u64)>,
    steps: Vec<(u64, Step)>,
}

/// What a call to an address of the object reaches.
#[derive(Debug)]
enum Callee {
    /// No symbol or unwind table entry starts there.
    Unknown,
    /// A function that throws, panics or unwinds (its name).
    Throws(String),
    /// A function whose code cannot be read or decoded (its name).
    Undecodable(String),
    Code(Rc<Node>),
}

/// The callees of one object, each decoded once, however many traced
/// functions reach it: the proof of every traced function walks the same
/// call graph, and decoding is most of its cost.
#[derive(Default)]
struct CallGraph {
    callees: RefCell<HashMap<u64, Rc<Callee>>>,
    got: OnceCell<Option<(u64, u64)>>,
}

impl CallGraph {
    fn callee(&self, obj: &ElfObject, index: &SymbolIndex, addr: u64) -> Rc<Callee> {
        if let Some(c) = self.callees.borrow().get(&addr) {
            return c.clone();
        }
        let callee = Rc::new(self.read_callee(obj, index, addr));
        self.callees.borrow_mut().insert(addr, callee.clone());
        callee
    }

    fn read_callee(&self, obj: &ElfObject, index: &SymbolIndex, addr: u64) -> Callee {
        let callee = match index.function_starting_at(addr) {
            Some(g) => g,
            None => match crate::symbols::code::unnamed_function_at(obj, addr) {
                Ok(Some(g)) => g,
                _ => return Callee::Unknown,
            },
        };
        let name = callee.display_name();
        if throws(&callee.raw, &callee.names.full) {
            return Callee::Throws(name);
        }
        match super::decode_function(obj, &callee) {
            Ok(cd) => Callee::Code(Rc::new(Node {
                steps: self.steps(obj, &cd),
                name: Some(name),
                parts: parts_of(&callee),
            })),
            Err(_) => Callee::Undecodable(name),
        }
    }

    /// The calls and tail jumps of decoded code, in address order.
    fn steps(&self, obj: &ElfObject, d: &Decoded) -> Vec<(u64, Step)> {
        let imports = obj.imports();
        let bounds = *self.got.get_or_init(|| got_bounds(obj));
        let mut targets: Vec<(u64, Target)> = d
            .calls
            .iter()
            .map(|c| (c.addr, c.target))
            .chain(d.tails.iter().map(|t| (t.addr, t.target)))
            .collect();
        targets.sort_by_key(|t| t.0);
        let import = |raw: &str, how: &str| {
            let shown = format!("{}@{how}", demangle(bare(raw)).full);
            Step::Import {
                throws: throws(raw, &shown),
                quiet: is_quiet(raw),
                shown,
            }
        };
        targets
            .into_iter()
            .map(|(at, target)| {
                let step = match target {
                    Target::Direct(a) => match imports.plt_name(a) {
                        Some(raw) => import(raw, "plt"),
                        None => Step::Local(a),
                    },
                    Target::Slot(slot) if obj.slot_import(slot).is_some() => {
                        import(obj.slot_import(slot).unwrap_or_default(), "got")
                    }
                    Target::Slot(slot) if local_got(obj, bounds, slot).is_some() => {
                        Step::Local(local_got(obj, bounds, slot).unwrap_or(0))
                    }
                    _ if d.calls.iter().any(|c| c.addr == at) => Step::IndirectCall,
                    _ => Step::IndirectJump,
                };
                (at, step)
            })
            .collect()
    }
}

/// Where `.got` is, if the object has one.
fn got_bounds(obj: &ElfObject) -> Option<(u64, u64)> {
    use object::ObjectSection;
    obj.parse().ok().and_then(|f| {
        f.section_by_name(".got")
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
    })
}

/// The function of its own object that an object calls through a `.got`
/// slot no import names (Rust does so for the code of other crates
/// linked in, as does `-fno-plt`). Such a slot is written once, by the
/// loader's relative relocation, and is read-only after it (RELRO); a
/// pointer anywhere else may change at run time and is not followed.
fn local_got(obj: &ElfObject, bounds: Option<(u64, u64)>, slot: u64) -> Option<u64> {
    use crate::disasm::Image;
    let (lo, hi) = bounds?;
    if !(lo..hi).contains(&slot) {
        return None;
    }
    crate::symbols::code::ObjectImage::new(obj)
        .pointer(slot)
        .filter(|&a| a != 0)
}

/// Proves that no exception, panic or unwind can cross `f`'s frame while
/// it runs, from its decoded code `d` and the code of its object it can
/// reach; else names an obstacle: the nearest call that can throw, if
/// any, else the first other obstacle (the traced function's own code
/// first, then its callees, nearest first).
pub(super) fn prove_quiet(obj: &ElfObject, f: &Function, d: &Decoded) -> Result<(), Obstacle> {
    let fail = |hazard| Obstacle {
        hazard,
        addr: f.addr,
        within: None,
        parts: parts_of(f),
    };
    let index = obj
        .symbols()
        .map_err(|_| fail(Hazard::Undecodable(f.display_name())))?;
    let own_graph = CallGraph::default();
    let graph = obj.memo::<CallGraph>().unwrap_or(&own_graph);
    let mut other: Option<Obstacle> = None;
    let mut seen: BTreeSet<u64> = BTreeSet::from([f.addr]);
    let root = Rc::new(Node {
        name: None,
        parts: parts_of(f),
        steps: graph.steps(obj, d),
    });
    let mut work = VecDeque::from([root]);
    while let Some(node) = work.pop_front() {
        for (at, step) in &node.steps {
            let obstacle = |hazard| Obstacle {
                hazard,
                addr: *at,
                within: node.name.clone(),
                parts: node.parts.clone(),
            };
            let mut note = |hazard| {
                other.get_or_insert_with(|| obstacle(hazard));
            };
            let addr = match step {
                Step::Import {
                    shown,
                    throws,
                    quiet,
                } => {
                    if *throws {
                        return Err(obstacle(Hazard::Throws(shown.clone())));
                    }
                    if !quiet {
                        note(Hazard::Import(shown.clone()));
                    }
                    continue;
                }
                Step::IndirectCall => {
                    note(Hazard::IndirectCall);
                    continue;
                }
                Step::IndirectJump => {
                    note(Hazard::IndirectJump);
                    continue;
                }
                Step::Local(a) => *a,
            };
            if !seen.insert(addr) {
                continue;
            }
            if seen.len() > MAX_FOLLOWED {
                note(Hazard::TooMany);
                continue;
            }
            match &*graph.callee(obj, index, addr) {
                Callee::Unknown => note(Hazard::UnknownCode(addr)),
                Callee::Throws(name) => return Err(obstacle(Hazard::Throws(name.clone()))),
                Callee::Undecodable(name) => note(Hazard::Undecodable(name.clone())),
                Callee::Code(n) => work.push_back(n.clone()),
            }
        }
    }
    match other {
        Some(o) => Err(o),
        None => Ok(()),
    }
}

/// What proves that `f` may throw (or unwind its caller): the nearest
/// call that does, as `list` says it (`calls __cxa_throw@plt at +0x2a`);
/// `None` when no such call is found (which proves nothing either way).
pub fn may_throw(obj: &ElfObject, f: &Function) -> Option<String> {
    let d = super::decode_function(obj, f).ok()?;
    match prove_quiet(obj, f, &d) {
        Err(o) if matches!(o.hazard, Hazard::Throws(_)) => Some(o.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn obstacles_say_what_and_where() {
        let at = |hazard, addr, within: Option<&str>| {
            Obstacle {
                hazard,
                addr,
                within: within.map(str::to_string),
                parts: vec![
                    (String::new(), 0x1000, 0x1080),
                    (".cold".into(), 0x900, 0x920),
                ],
            }
            .to_string()
        };
        assert_eq!(
            at(Hazard::Import("qsort@plt".into()), 0x1030, None),
            "calls qsort@plt at +0x30"
        );
        assert_eq!(
            at(Hazard::IndirectCall, 0x101c, Some("db::f(int)")),
            "indirect call at +0x1c in db::f(int)"
        );
        assert_eq!(
            at(Hazard::Throws("__cxa_throw@plt".into()), 0x904, None),
            "calls __cxa_throw@plt at .cold+0x4"
        );
        assert_eq!(
            at(Hazard::IndirectJump, 0x2000, None),
            "indirect tail jump at 0x2000"
        );
    }

    /// glibc and the unwinder library cannot unwind through a uretprobe by
    /// themselves; the C++ runtime and a Rust program (this test) can.
    #[test]
    fn objects_that_can_unwind_are_told_apart() {
        let open = |p: &str| {
            let p = std::path::Path::new(p);
            ElfObject::open(p, p).ok()
        };
        let libc = open("/lib/x86_64-linux-gnu/libc.so.6");
        if let Some(o) = &libc {
            assert_eq!(object_hazard(o), None);
        }
        if let Some(o) = open("/lib/x86_64-linux-gnu/libgcc_s.so.1") {
            assert_eq!(object_hazard(&o), None);
        }
        if let Some(o) = open("/usr/lib/x86_64-linux-gnu/libstdc++.so.6") {
            assert_eq!(object_hazard(&o).as_deref(), Some("has exception tables"));
            assert!(process_cannot_unwind(libc.iter().chain([&o])).is_err());
        }
        let exe = std::env::current_exe().unwrap();
        let me = ElfObject::open(&exe, &exe).unwrap();
        assert!(object_hazard(&me).is_some());
        assert!(process_cannot_unwind(libc.iter()).is_ok());
    }

    #[test]
    fn one_list_answers_each_question() {
        assert!(never_returns("__cxa_throw@plt"));
        assert!(never_returns("std::__throw_out_of_range(char const*)@plt"));
        assert!(never_returns("std::terminate()"));
        assert!(!never_returns("memcpy@plt"));
        assert!(is_quiet("memcpy") && is_quiet("__stack_chk_fail"));
        assert!(!is_quiet("qsort") && !is_quiet("__cxa_throw"));
        assert!(known("_Unwind_RaiseException", UNWINDS));
        assert!(throws(
            "_ZSt20__throw_out_of_rangePKc",
            "std::__throw_out_of_range(char const*)"
        ));
        assert!(throws("__cxa_throw@plt", "__cxa_throw@plt"));
        assert!(throws(
            "_ZN4core9panicking5panic17h0123456789abcdefE",
            "core::panicking::panic"
        ));
        assert!(!throws("abort", "abort") && !throws("memcpy@GLIBC_2.14", "memcpy"));
        assert!(is_quiet("memcpy@GLIBC_2.14"));
        assert!(!known("abort", UNWINDS));
    }
}
