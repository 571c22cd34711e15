//! One object's function symbols, read once and indexed: entry points
//! sorted by address, with their `.cold`/`.warm` fragments attached, so that
//! "the function at this address" is a binary search; names stay in the
//! object's string table, where a pattern's identifier is searched once for
//! all symbols before any name is looked at, let alone demangled.

use std::collections::HashMap;

use memchr::memmem::Finder;

use crate::symbols::function::{Fragment, Function};
use crate::symbols::golang::GoInfo;
use crate::symbols::names::demangle::{self, demangle, Names, Part};
use crate::symbols::names::Pattern;
use crate::symbols::table::{name_at, RawSym, SymSource, SymTable, TableSym};

/// A function symbol: its name is the string at `name` in the index's
/// strings.
#[derive(Clone, Copy, Debug)]
struct Sym {
    name: u32,
    addr: u64,
    size: u64,
}

/// The function symbols of one object.
#[derive(Debug)]
pub struct SymbolIndex {
    /// The table they came from.
    pub source: SymSource,
    /// The string table the names are in.
    strings: Box<[u8]>,
    /// Entry points (whole functions and their clones), by address; aliases
    /// at one address keep the symbol table's order.
    funcs: Vec<Sym>,
    /// (name offset, place in `funcs`) of every entry point, by offset: the
    /// symbols whose names hold a string found in `strings`.
    by_name: Vec<(u32, u32)>,
    /// Fragments, by the raw name of the function they belong to.
    fragments: HashMap<Box<str>, Vec<Fragment>>,
    /// A Go binary's Go sections: its Go functions have Go names.
    go: Option<GoInfo>,
    /// The addresses of IFUNC symbols (resolvers), sorted.
    ifuncs: Vec<u64>,
}

impl SymbolIndex {
    pub fn new(table: &SymTable<'_>, source: SymSource) -> SymbolIndex {
        let strings: Box<[u8]> = table.strings.into();
        // Only a name that holds `.cold` or `.warm` may be a fragment's.
        let marked = Marked::find(&strings, &[".cold", ".warm"]);
        let mut funcs = Vec::with_capacity(table.syms.len());
        let mut fragments: HashMap<Box<str>, Vec<Fragment>> = HashMap::new();
        for &TableSym { name, addr, size } in &table.syms {
            let sym = Sym { name, addr, size };
            if !marked.holds(name) {
                funcs.push(sym);
                continue;
            }
            let Some(raw) = name_at(&strings, name) else {
                continue;
            };
            match demangle::part_of(raw) {
                Part::Whole => funcs.push(sym),
                Part::Fragment => {
                    // A fragment belongs to the function whose name is its
                    // stem, clone suffixes included (`f.part.0.cold` belongs
                    // to `f.part.0`).
                    let (owner, _) = raw
                        .rsplit_once(".cold")
                        .or_else(|| raw.rsplit_once(".warm"))
                        .unwrap_or((raw, ""));
                    fragments.entry(owner.into()).or_default().push(Fragment {
                        raw: raw.to_string(),
                        addr,
                        size,
                    });
                }
            }
        }
        let mut ix = SymbolIndex {
            source,
            strings,
            funcs,
            by_name: Vec::new(),
            fragments,
            go: None,
            ifuncs: {
                let mut v = table.ifuncs.clone();
                v.sort_unstable();
                v.dedup();
                v
            },
        };
        ix.sort();
        ix
    }

    /// An index of symbols given with their names (tests, tools).
    pub fn of_names(syms: &[RawSym<'_>], source: SymSource) -> SymbolIndex {
        let mut strings = vec![0u8];
        let mut table = Vec::with_capacity(syms.len());
        for s in syms {
            let Ok(name) = u32::try_from(strings.len()) else {
                break;
            };
            strings.extend_from_slice(s.name.as_bytes());
            strings.push(0);
            table.push(TableSym {
                name,
                addr: s.addr,
                size: s.size,
            });
        }
        SymbolIndex::new(
            &SymTable {
                strings: &strings,
                syms: table,
                ifuncs: Vec::new(),
            },
            source,
        )
    }

    /// Sorts the entry points by address (stably: aliases keep their
    /// table order) and indexes their names.
    fn sort(&mut self) {
        self.funcs.sort_by_key(|s| s.addr);
        self.by_name = (0u32..)
            .zip(&self.funcs)
            .map(|(i, s)| (s.name, i))
            .collect();
        self.by_name.sort_unstable();
    }

    /// The index of a Go binary: its Go functions (those the runtime's
    /// table lists) are named as Go names them, and never split into
    /// fragments by a suffix.
    pub fn with_go(mut self, go: Option<GoInfo>) -> SymbolIndex {
        let Some(info) = &go else { return self };
        // A Go method named `cold` is no `.cold` part.
        let mut moved = Vec::new();
        for frags in self.fragments.values_mut() {
            frags.retain(|f| {
                let go_func = info.is_go_function(f.addr, &f.raw);
                if go_func {
                    moved.push((f.raw.clone(), f.addr, f.size));
                }
                !go_func
            });
        }
        for (raw, addr, size) in moved {
            // The fragment's name is in the table: find where.
            if let Some(name) = self.offset_of(&raw) {
                self.funcs.push(Sym { name, addr, size });
            }
        }
        self.fragments.retain(|_, v| !v.is_empty());
        self.sort();
        self.go = go;
        self
    }

    /// Where the string table holds `name` whole.
    fn offset_of(&self, name: &str) -> Option<u32> {
        let mut whole = Vec::with_capacity(name.len() + 2);
        whole.push(0);
        whole.extend_from_slice(name.as_bytes());
        whole.push(0);
        if self.strings.starts_with(&whole[1..]) {
            return Some(0);
        }
        let at = memchr::memmem::find(&self.strings, &whole)?;
        u32::try_from(at + 1).ok()
    }

    /// What the object's Go sections say, for a Go binary.
    pub fn go(&self) -> Option<&GoInfo> {
        self.go.as_ref()
    }

    /// Whether the symbol at `addr` is an IFUNC: the address is its
    /// resolver's, run once by the loader, not the code callers reach.
    pub fn is_ifunc(&self, addr: u64) -> bool {
        self.ifuncs.binary_search(&addr).is_ok()
    }

    /// The raw name of `s` ("" where it is not UTF-8).
    fn raw(&self, s: &Sym) -> &str {
        name_at(&self.strings, s.name).unwrap_or("")
    }

    fn names(&self, s: &Sym) -> Names {
        let raw = self.raw(s);
        match &self.go {
            Some(go) if go.is_go_function(s.addr, raw) => demangle::go_names(raw),
            _ => demangle(raw),
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
        let raw = self.raw(s);
        Function {
            raw: raw.to_string(),
            names: self.names(s),
            addr: s.addr,
            size: s.size,
            fragments: self.fragments.get(raw).cloned().unwrap_or_default(),
            ifunc: None,
        }
    }

    /// The first symbol (in table order) of those starting at `addr` whose
    /// name can be read.
    fn starting_at(&self, addr: u64) -> Option<&Sym> {
        let i = self.funcs.partition_point(|s| s.addr < addr);
        self.funcs[i..]
            .iter()
            .take_while(|s| s.addr == addr)
            .find(|s| !self.raw(s).is_empty())
    }

    /// The raw name of the function that starts at `addr`.
    pub fn name_starting_at(&self, addr: u64) -> Option<&str> {
        self.starting_at(addr).map(|s| self.raw(s))
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
            .find(|s| addr - s.addr < s.size && !self.raw(s).is_empty())
            .map(|s| self.function(s))
    }

    /// The functions `pat` names, by address, aliases once (the first
    /// matching name). Only the symbols whose raw names hold the pattern's
    /// longest identifier (or its whole text) are looked at, and of those
    /// only the ones that may match are demangled.
    pub fn find(&self, pat: &Pattern) -> Vec<Function> {
        let candidates: Vec<u32> = match pat.needle() {
            Some(needle) => {
                let text = Finder::new(pat.as_str().as_bytes());
                let mut c = self.holding(needle);
                c.extend(self.holding(&text));
                c.sort_unstable();
                c.dedup();
                c
            }
            None => (0u32..).zip(&self.funcs).map(|(i, _)| i).collect(),
        };
        let mut out: Vec<Function> = Vec::new();
        for i in candidates {
            let s = &self.funcs[i as usize];
            let raw = self.raw(s);
            if raw.is_empty() || !pat.may_match(raw) {
                continue;
            }
            if out.last().is_some_and(|f| f.addr == s.addr) {
                continue;
            }
            let names = self.names(s);
            if pat.matches(raw, &names) {
                out.push(Function {
                    names,
                    ..self.function(s)
                });
            }
        }
        out
    }

    /// The places in `funcs` of the entry points whose names hold what
    /// `finder` looks for (unsorted, some twice).
    fn holding(&self, finder: &Finder<'_>) -> Vec<u32> {
        let mut out = Vec::new();
        let strings = &self.strings[..];
        if finder.needle().is_empty() {
            return out;
        }
        for (start, last) in StringsHolding::new(strings, finder) {
            let from = self.by_name.partition_point(|&(o, _)| (o as usize) < start);
            out.extend(
                self.by_name[from..]
                    .iter()
                    .take_while(|&&(o, _)| o as usize <= last)
                    .map(|&(_, i)| i),
            );
        }
        out
    }
}

/// For each string of a table that holds a needle: where the string
/// starts and where its last occurrence of the needle starts. A name that
/// starts in that range holds the needle (names may start inside another
/// name's string, sharing its tail).
struct StringsHolding<'a, 'f> {
    strings: &'a [u8],
    finder: &'f Finder<'f>,
    at: usize,
}

impl<'a, 'f> StringsHolding<'a, 'f> {
    fn new(strings: &'a [u8], finder: &'f Finder<'f>) -> Self {
        StringsHolding {
            strings,
            finder,
            at: 0,
        }
    }
}

impl Iterator for StringsHolding<'_, '_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let hit = self.at + self.finder.find(self.strings.get(self.at..)?)?;
        let start = memchr::memrchr(0, &self.strings[..hit]).map_or(0, |z| z + 1);
        let end = memchr::memchr(0, &self.strings[hit..]).map_or(self.strings.len(), |z| hit + z);
        let last = memchr::memmem::rfind(&self.strings[hit..end], self.finder.needle())
            .map_or(hit, |r| hit + r);
        self.at = end;
        Some((start, last))
    }
}

/// The stretches of a string table in which a name holds one of some
/// marks: (start of a string, last start of a mark in it), by start.
struct Marked(Vec<(usize, usize)>);

impl Marked {
    fn find(strings: &[u8], marks: &[&str]) -> Marked {
        let mut v = Vec::new();
        for m in marks {
            let f = Finder::new(m.as_bytes());
            v.extend(StringsHolding::new(strings, &f));
        }
        v.sort_unstable();
        Marked(v)
    }

    /// Whether the name at `off` holds a mark.
    fn holds(&self, off: u32) -> bool {
        let off = off as usize;
        let i = self.0.partition_point(|&(start, _)| start <= off);
        // A string may hold both marks: two stretches with one start.
        self.0[..i]
            .iter()
            .rev()
            .take_while(|&&(start, _)| start == self.0[i - 1].0)
            .any(|&(_, last)| off <= last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::elf::TableSym;

    fn sym(name: &str, addr: u64, size: u64) -> RawSym<'_> {
        RawSym { name, addr, size }
    }

    fn index() -> SymbolIndex {
        SymbolIndex::of_names(
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
    fn names_sharing_a_string_are_each_found() {
        // One string holds several names (a linker merges tails): `xwork`,
        // `work`; `f.cold.x` and its tail `cold.x`, which holds no `.cold`.
        let strings = b"\0xwork\0_Z1fv.cold\0g.cold.x\0";
        let at = |n: &[u8]| {
            strings
                .windows(n.len())
                .position(|w| w == n)
                .map(|p| p as u32)
                .unwrap()
        };
        let t = |name, addr| TableSym {
            name,
            addr,
            size: 0x10,
        };
        let table = SymTable {
            strings,
            syms: vec![
                t(at(b"xwork"), 0x100),
                t(at(b"work\0"), 0x200),
                t(at(b"_Z1fv.cold"), 0x300),
                t(at(b"1fv.cold"), 0x400),
                t(at(b"g.cold.x"), 0x500),
                t(at(b"cold.x"), 0x600),
                t(at(b"_Z1fv.cold") + 1, 0x700),
            ],
            ifuncs: Vec::new(),
        };
        let ix = SymbolIndex::new(&table, SymSource::Symtab);
        let found = |p: &str| -> Vec<String> {
            ix.find(&Pattern::parse(p).unwrap())
                .into_iter()
                .map(|f| f.raw)
                .collect()
        };
        assert_eq!(found("work"), ["work"]);
        assert_eq!(found("*work"), ["xwork", "work"]);
        assert_eq!(found("cold.x"), ["cold.x"]);
        // Fragments: the names that hold `.cold` as a suffix, wherever they
        // start in their string; `g.cold.x` ends in no suffix.
        let starts: Vec<u64> = ix.funcs.iter().map(|s| s.addr).collect();
        assert_eq!(starts, [0x100, 0x200, 0x500, 0x600]);
        let frags: usize = ix.fragments.values().map(Vec::len).sum();
        assert_eq!(frags, 3);
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
