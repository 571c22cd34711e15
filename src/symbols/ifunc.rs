//! IFUNC symbols (`memset`, `strlen`, ... in glibc): the symbol's address
//! is its resolver's, which the loader runs once to pick the function
//! callers then reach. This module finds that function: read from the
//! process where one runs (through the slot of the object's own
//! R_X86_64_IRELATIVE relocation whose addend is the resolver), else every
//! function the resolver's code can return (the functions its rip-relative
//! `lea`s load). Pure: the process is read through a closure.

use super::code::ObjectImage;
use super::{ElfObject, Function, IfuncOf};
use crate::disasm::{self, Range, Target};

/// What an IFUNC symbol stands for.
#[derive(Debug, PartialEq, Eq)]
pub enum Implementations {
    /// The function the process's relocated slot holds.
    Resolved(Function),
    /// The functions the resolver may return, and lines saying which were
    /// left out (one that enters another's entry would be counted twice).
    Candidates(Vec<Function>, Vec<String>),
    /// Nothing found: the resolver is what the symbol names.
    Unknown,
}

/// The implementations of the IFUNC symbol `f` of `obj`. `read_slot`, for
/// a running process, reads the 8-byte slot at an address of `obj` as the
/// process holds it, and returns the address of `obj` it points to.
pub fn implementations(
    obj: &ElfObject,
    f: &Function,
    read_slot: Option<&dyn Fn(u64) -> Option<u64>>,
) -> Implementations {
    let Ok(index) = obj.symbols() else {
        return Implementations::Unknown;
    };
    let label = |mut g: Function, resolved: bool, candidates: usize| {
        g.ifunc = Some(IfuncOf {
            name: f.display_name(),
            resolver: f.addr,
            resolved,
            candidates,
        });
        g
    };
    if let Some(read) = read_slot {
        let resolved = irelative_slots(obj, f.addr)
            .into_iter()
            .filter_map(read)
            .filter(|&a| a != f.addr)
            .find_map(|a| index.function_starting_at(a));
        if let Some(g) = resolved {
            return Implementations::Resolved(label(g, true, 1));
        }
    }
    let cands = candidates(obj, f);
    if cands.is_empty() {
        return Implementations::Unknown;
    }
    // Entered from another candidate, a call would open two frames: the
    // one that enters is left out, its calls counted where they arrive.
    let entered = entering(obj, &cands);
    let notes = entered
        .iter()
        .map(|&(a, b)| {
            format!(
                "{} of {}: it enters {}, whose entry counts the calls that reach it",
                cands[a].display_name(),
                f.display_name(),
                cands[b].display_name()
            )
        })
        .collect();
    let n = cands.len();
    let kept = cands
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !entered.iter().any(|&(a, _)| a == *i))
        .map(|(_, g)| label(g, false, n))
        .collect();
    Implementations::Candidates(kept, notes)
}

/// The function at `addr` of `obj`, as the one IFUNC `f` resolved to in a
/// process: `None` if no function starts there.
pub fn resolved_to(obj: &ElfObject, f: &Function, addr: u64) -> Option<Function> {
    let mut g = obj.symbols().ok()?.function_starting_at(addr)?;
    g.ifunc = Some(IfuncOf {
        name: f.display_name(),
        resolver: f.addr,
        resolved: true,
        candidates: 1,
    });
    Some(g)
}

/// The slots of the IRELATIVE relocations whose resolver is at `resolver`.
fn irelative_slots(obj: &ElfObject, resolver: u64) -> Vec<u64> {
    let Ok(file) = obj.parse() else {
        return Vec::new();
    };
    super::elf::relocs::read_irelative(&file)
        .into_iter()
        .filter(|&(_, r)| r == resolver)
        .map(|(slot, _)| slot)
        .collect()
}

/// The functions the resolver `f` can return: those its rip-relative
/// `lea`s load the address of, each once, in the order its code names
/// them. IFUNC symbols (other resolvers) are not among them.
pub fn candidates(obj: &ElfObject, f: &Function) -> Vec<Function> {
    let Ok(index) = obj.symbols() else {
        return Vec::new();
    };
    // The resolvers' address idioms are read for x86-64 only.
    if obj.arch != disasm::Arch::X86_64 {
        return Vec::new();
    }
    let Some(code) = obj.code(f.addr, f.size) else {
        return Vec::new();
    };
    let mut out: Vec<Function> = Vec::new();
    for t in disasm::rip_lea_targets(code, f.addr) {
        if t == f.addr || index.is_ifunc(t) || out.iter().any(|g| g.addr == t) {
            continue;
        }
        if let Some(g) = index.function_starting_at(t) {
            out.push(g);
        }
    }
    out
}

/// The pairs (a, b) of `cands` where a's code enters b's entry: it jumps
/// there, or its body ends where b starts and runs on into it. Traced
/// both, such a call would open two frames.
fn entering(obj: &ElfObject, cands: &[Function]) -> Vec<(usize, usize)> {
    let image = ObjectImage::new(obj);
    let mut out = Vec::new();
    for (a, g) in cands.iter().enumerate() {
        let Some(bytes) = obj.code(g.addr, g.size) else {
            continue;
        };
        let Ok(d) = disasm::decode_arch(
            obj.arch,
            &[Range {
                addr: g.addr,
                bytes,
            }],
            &image,
        ) else {
            continue;
        };
        let last_falls = d
            .insns
            .iter()
            .rfind(|i| i.addr < d.body_end)
            .is_some_and(|i| i.falls_through);
        for (b, h) in cands.iter().enumerate() {
            if a == b {
                continue;
            }
            let jumps = d
                .tails
                .iter()
                .any(|t| matches!(t.target, Target::Direct(x) if x == h.addr));
            if jumps || (last_falls && d.body_end == h.addr) {
                out.push((a, b));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn libc() -> Option<ElfObject> {
        let p = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        ElfObject::open(p, p).ok()
    }

    /// glibc's memset, strlen and memcpy are IFUNCs whose resolvers pick
    /// among functions named in the debug symbols: the candidates are
    /// functions, never the resolver, and none enters another's entry.
    #[test]
    fn libc_resolvers_name_their_candidates() {
        let Some(obj) = libc() else { return };
        let index = obj.symbols().unwrap();
        for name in ["memset", "strlen", "memcpy"] {
            let pat = super::super::Pattern::parse(name).unwrap();
            let f = index.find(&pat).into_iter().next().unwrap();
            assert!(index.is_ifunc(f.addr), "{name}");
            let cands = candidates(&obj, &f);
            assert!(cands.len() >= 2, "{name}: {cands:?}");
            assert!(
                cands
                    .iter()
                    .all(|g| g.addr != f.addr && g.raw.contains(name)
                        || name == "memcpy" && g.raw.contains("memmove")),
                "{name}: {cands:?}"
            );
            assert_eq!(entering(&obj, &cands), [], "{name}");
        }
    }
}
