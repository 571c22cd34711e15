//! Call sites of a function: every `call` (direct, through the PLT, through
//! a GOT slot, indirect) and tail jump, named and placed at `file:line`.
//! Pure: reads the object, decodes, looks up names.

use crate::disasm::{Decoded, Target};
use crate::symbols::{demangle, ElfObject};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SiteKind {
    /// A direct call to a known function.
    Call,
    /// A call through the PLT or a GOT slot (`-fno-plt`) to an imported function.
    Plt,
    /// A call through a register or computed memory.
    Indirect,
    /// A tail jump: the callee returns for the function.
    Tail,
    /// An inlined instance of a function: its code, timed from its entry
    /// to where control leaves it.
    Inlined,
}

impl SiteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SiteKind::Call => "call",
            SiteKind::Plt => "plt",
            SiteKind::Indirect => "indirect",
            SiteKind::Tail => "tail",
            SiteKind::Inlined => "inlined",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The call or jump instruction.
    pub addr: u64,
    /// The return address (`None` for a tail jump).
    pub ret: Option<u64>,
    pub kind: SiteKind,
    /// The callee's address, when the instruction names it (for drilling down).
    pub callee: Option<u64>,
    /// The callee's raw symbol name, when known (the imported name for a
    /// PLT or GOT call).
    pub callee_raw: Option<String>,
    /// What to show: a demangled name, `name@plt`, or `*indirect`.
    pub name: String,
    /// `file.cc:88`; for code inlined into the function, the line of the
    /// function's own code that holds it, with the inline chain after it
    /// (`demo.cpp:22 (inlined from this_thread_sleep.h:80)`).
    pub location: Option<String>,
}

/// What a call or jump to `t` in `obj` reaches: its kind, the callee's
/// address and raw name when known, and the name to show. Looked up in the
/// object's symbol index and import tables, each built once per object.
fn name_of(obj: &ElfObject, t: Target) -> (SiteKind, Option<u64>, Option<String>, String) {
    let imports = obj.imports();
    match t {
        Target::Direct(a) => {
            if let Some(n) = imports.plt_name(a) {
                return (
                    SiteKind::Plt,
                    Some(a),
                    Some(n.to_string()),
                    format!("{}@plt", demangle(n).full),
                );
            }
            let raw = obj.symbols().ok().and_then(|ix| ix.name_starting_at(a));
            match raw {
                Some(raw) => (SiteKind::Call, Some(a), Some(raw.to_string()), display(raw)),
                // A call into a function's middle (Go's runtime.duffzero
                // and duffcopy are entered there): named by the function
                // that holds it; never expanded.
                None => {
                    let inside = obj.symbols().ok().and_then(|ix| ix.function_containing(a));
                    let name = match inside {
                        Some(f) => format!("{}+{:#x}", f.names.full, a - f.addr),
                        None => format!("{a:#x}"),
                    };
                    (SiteKind::Call, Some(a), None, name)
                }
            }
        }
        Target::Slot(s) => match obj.slot_import(s) {
            Some(n) => (
                SiteKind::Plt,
                None,
                Some(n.to_string()),
                format!("{}@got", demangle(n).full),
            ),
            None => (SiteKind::Indirect, None, None, "*indirect".into()),
        },
        Target::Indirect => (SiteKind::Indirect, None, None, "*indirect".into()),
    }
}

fn display(raw: &str) -> String {
    let n = demangle(raw);
    if n.suffix.is_empty() {
        n.full
    } else {
        format!("{} [clone {}]", n.full, n.suffix)
    }
}

/// The call sites of a function of `obj`, decoded, in address order,
/// placed with the object's DWARF line tables when it has them.
pub fn sites(decoded: &Decoded, obj: &ElfObject) -> Vec<Site> {
    let lines = obj.line_table();
    let locate = |a: u64| lines.and_then(|l| l.locate(a)).map(|loc| loc.in_function());
    let mut out: Vec<Site> = Vec::new();
    for c in &decoded.calls {
        let (kind, callee, callee_raw, name) = name_of(obj, c.target);
        out.push(Site {
            addr: c.addr,
            ret: Some(c.next),
            kind,
            callee,
            callee_raw,
            name,
            location: locate(c.addr),
        });
    }
    for t in &decoded.tails {
        let (_, callee, callee_raw, name) = name_of(obj, t.target);
        out.push(Site {
            addr: t.addr,
            ret: None,
            kind: SiteKind::Tail,
            callee,
            callee_raw,
            name,
            location: locate(t.addr),
        });
    }
    // Call order: the function's body, then its `.cold` parts.
    let body = decoded.first.as_ref().map_or(0, |f| f.addr);
    let end = decoded.body_end;
    out.sort_by_key(|s| (!(s.addr >= body && s.addr < end), s.addr));
    out
}
