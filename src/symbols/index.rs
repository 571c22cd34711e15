//! One object's function symbols, read once and indexed: entry points
//! sorted by address, with their `.cold`/`.warm` fragments attached, so that
//! "the function at this address" is a binary search and a pattern is
//! matched against raw names before any is demangled.

use std::collections::HashMap;

use super::demangle::{self, demangle, Names, Part};
use super::elf::RawSym;
use super::golang::GoInfo;
use super::{Fragment, Function, Pattern, SymSource};

/// A function symbol, owned.
#[derive(Clone, Debug)]
struct Sym {
    name: Box<str>,
    addr: u64,
    size: u64,
}

/// The function symbols of one object.
#[derive(Debug)]
pub struct SymbolIndex {
    /// The table they came from.
    pub source: SymSource,
    /// Entry points (whole functions and their clones), by address; aliases
    /// at one address keep the symbol table's order.
    funcs: Vec<Sym>,
    /// Fragments, by the raw name of the function they belong to.
    fragments: HashMap<Box<str>, Vec<Fragment>>,
    /// A Go binary's Go sections: its Go functions have Go names.
    go: Option<GoInfo>,
}

impl SymbolIndex {
    pub fn new(syms: &[RawSym<'_>], source: SymSource) -> SymbolIndex {
        let mut funcs = Vec::with_capacity(syms.len());
        let mut fragments: HashMap<Box<str>, Vec<Fragment>> = HashMap::new();
        for s in syms {
            match demangle::part_of(s.name) {
                Part::Whole => funcs.push(Sym {
                    name: s.name.into(),
                    addr: s.addr,
                    size: s.size,
                }),
                Part::Fragment => {
                    // A fragment belongs to the function whose name is its
                    // stem, clone suffixes included (`f.part.0.cold` belongs
                    // to `f.part.0`).
                    let (owner, _) = s
                        .name
                        .rsplit_once(".cold")
                        .or_else(|| s.name.rsplit_once(".warm"))
                        .unwrap_or((s.name, ""));
                    fragments.entry(owner.into()).or_default().push(Fragment {
                        raw: s.name.to_string(),
                        addr: s.addr,
                        size: s.size,
                    });
                }
            }
        }
        // Stable: aliases keep their table order.
        funcs.sort_by_key(|s| s.addr);
        SymbolIndex {
            source,
            funcs,
            fragments,
            go: None,
        }
    }

    /// The index of a Go binary: its Go functions (those the runtime's
    /// table lists) are named as Go names them, and never split into
    /// fragments by a suffix.
    pub fn with_go(mut self, go: Option<GoInfo>) -> SymbolIndex {
        let Some(info) = &go else { return self };
        // A Go method named `cold` is no `.cold` part.
        for frags in self.fragments.values_mut() {
            frags.retain(|f| {
                let go_func = info.is_go_function(f.addr, &f.raw);
                if go_func {
                    self.funcs.push(Sym {
                        name: f.raw.as_str().into(),
                        addr: f.addr,
                        size: f.size,
                    });
                }
                !go_func
            });
        }
        self.fragments.retain(|_, v| !v.is_empty());
        self.funcs.sort_by_key(|s| s.addr);
        self.go = go;
        self
    }

    /// What the object's Go sections say, for a Go binary.
    pub fn go(&self) -> Option<&GoInfo> {
        self.go.as_ref()
    }

    fn names(&self, s: &Sym) -> Names {
        match &self.go {
            Some(go) if go.is_go_function(s.addr, &s.name) => demangle::go_names(&s.name),
            _ => demangle(&s.name),
        }
    }

    /// The start of every symbol: entry points and fragments.
    pub fn starts(&self) -> impl Iterator<Item = u64> + '_ {
        self.funcs
            .iter()
            .map(|s| s.addr)
            .chain(self.fragments.values().flatten().map(|f| f.addr))
    }

    /// Number of entry points.
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    fn function(&self, s: &Sym) -> Function {
        Function {
            raw: s.name.to_string(),
            names: self.names(s),
            addr: s.addr,
            size: s.size,
            fragments: self.fragments.get(&s.name).cloned().unwrap_or_default(),
        }
    }

    /// The first symbol (in table order) of those starting at `addr`.
    fn starting_at(&self, addr: u64) -> Option<&Sym> {
        let i = self.funcs.partition_point(|s| s.addr < addr);
        self.funcs.get(i).filter(|s| s.addr == addr)
    }

    /// The raw name of the function that starts at `addr`.
    pub fn name_starting_at(&self, addr: u64) -> Option<&str> {
        self.starting_at(addr).map(|s| &*s.name)
    }

    /// The function that starts at `addr`, with its fragments.
    pub fn function_starting_at(&self, addr: u64) -> Option<Function> {
        self.starting_at(addr).map(|s| self.function(s))
    }

    /// The function whose code holds `addr` (fragments excluded): the one
    /// that starts last at or before it, if it is long enough.
    pub fn function_containing(&self, addr: u64) -> Option<Function> {
        let end = self.funcs.partition_point(|s| s.addr <= addr);
        let start = self.funcs[..end].last()?.addr;
        let first = self.funcs[..end].partition_point(|s| s.addr < start);
        self.funcs[first..end]
            .iter()
            .find(|s| addr - s.addr < s.size)
            .map(|s| self.function(s))
    }

    /// The functions `pat` names, by address, aliases once (the first
    /// matching name). Raw names that cannot match are skipped before
    /// they are demangled.
    pub fn find(&self, pat: &Pattern) -> Vec<Function> {
        let mut out: Vec<Function> = Vec::new();
        for s in &self.funcs {
            if !pat.may_match(&s.name) {
                continue;
            }
            if out.last().is_some_and(|f| f.addr == s.addr) {
                continue;
            }
            let names = self.names(s);
            if pat.matches(&s.name, &names) {
                out.push(Function {
                    names,
                    ..self.function(s)
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, addr: u64, size: u64) -> RawSym<'_> {
        RawSym { name, addr, size }
    }

    fn index() -> SymbolIndex {
        SymbolIndex::new(
            &[
                sym("_ZN4shop6lookupEi", 0x2000, 0x40),
                sym("work", 0x1000, 0x100),
                sym("_ZN4shop6lookupEi.cold", 0x9000, 0x10),
                sym("work_alias", 0x1000, 0x100),
                sym("_ZN4shop6lookupEi.isra.0", 0x3000, 0x20),
                sym("_ZN4shop6lookupEi.isra.0.cold", 0x9100, 0x8),
            ],
            SymSource::Symtab,
        )
    }

    #[test]
    fn lookups_by_address() {
        let ix = index();
        assert_eq!(ix.len(), 4);
        assert_eq!(ix.name_starting_at(0x1000), Some("work"));
        assert_eq!(ix.name_starting_at(0x1001), None);
        let f = ix.function_containing(0x10ff).unwrap();
        assert_eq!((f.raw.as_str(), f.addr), ("work", 0x1000));
        assert!(ix.function_containing(0x1100).is_none());
        assert!(ix.function_containing(0xfff).is_none());
        assert!(ix.function_containing(0x9000).is_none());
        let f = ix.function_starting_at(0x2000).unwrap();
        assert_eq!(f.fragments.len(), 1);
        assert_eq!(f.fragments[0].raw, "_ZN4shop6lookupEi.cold");
        let f = ix.function_starting_at(0x3000).unwrap();
        assert_eq!(f.fragments[0].addr, 0x9100);
    }

    #[test]
    fn find_matches_demangled_names_with_fragments() {
        let ix = index();
        let found = ix.find(&Pattern::parse("shop::lookup").unwrap());
        let got: Vec<(u64, usize)> = found.iter().map(|f| (f.addr, f.fragments.len())).collect();
        assert_eq!(got, [(0x2000, 1), (0x3000, 1)]);
        // Aliases: one function, the first name.
        let found = ix.find(&Pattern::parse("work*").unwrap());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].raw, "work");
    }
}
