//! Name matching on real objects: what a pattern finds in the system's
//! libstdc++ against nm, and the raw-name prefilter (`Pattern::may_match`)
//! against the full match on every function symbol of real objects, and
//! the symbol index's search against a look at every symbol. Pure:
//! no probes, no root.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tachy::symbols::{self, demangle, ElfObject, Pattern};

/// A system library by file name, if this machine has it.
fn system_library(name: &str) -> Option<PathBuf> {
    ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// `std::*` finds every function of the std namespace that nm shows, and
/// no other (one per address: aliases are listed once).
#[test]
fn std_glob_finds_every_std_function() {
    let Some(path) = system_library("libstdc++.so.6") else {
        common::skip("no libstdc++.so.6");
        return;
    };
    let obj = ElfObject::open(&path, &path).unwrap();
    let found = symbols::find(&obj, &Pattern::parse("std::*").unwrap()).unwrap();
    let got: BTreeSet<u64> = found.functions.iter().map(|f| f.addr).collect();
    // nm's own reading of the raw names: the std namespace is `St` or one
    // of its abbreviations (`Ss`, `Si`, `Sa`, …) first in a name (scoped
    // `N…`, const `NK…`, or a local name's scope `Z…`).
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&path)
        .output()
        .expect("nm");
    let in_std = |name: &str| {
        let Some(rest) = name.strip_prefix("_Z") else {
            return false;
        };
        let rest = rest.strip_prefix('Z').unwrap_or(rest);
        let rest = match rest.strip_prefix('N') {
            Some(r) => r.trim_start_matches(['K', 'V', 'R', 'O']),
            None => rest,
        };
        let b = rest.as_bytes();
        b.len() >= 2 && b[0] == b'S' && b"tabsiod".contains(&b[1])
    };
    let want: BTreeSet<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            // ADDRESS KIND NAME
            let mut it = l.splitn(3, ' ');
            let (addr, kind, name) = (it.next()?, it.next()?, it.next()?);
            (matches!(kind, "T" | "W" | "i") && in_std(name.split('@').next()?))
                .then(|| u64::from_str_radix(addr, 16).ok())
                .flatten()
        })
        .collect();
    assert!(want.len() > 1000, "{}", want.len());
    let missing: Vec<_> = want.difference(&got).take(5).collect();
    let extra: Vec<_> = got.difference(&want).take(5).collect();
    assert_eq!(got, want, "missing {missing:x?}, extra {extra:x?}");
}

/// Patterns looked up in every object by the prefilter property test.
const PATTERNS: &[&str] = &[
    "*",
    "std::*",
    "std::terminate*",
    "std::vector*",
    "std::string::*",
    "std::basic_string*",
    "std::__cxx11::*",
    "std::istream::get",
    "std::ostream::operator<<(int)",
    "std::map<*",
    "operator new",
    "operator delete*",
    "*::operator<<",
    "*operator()*",
    "__cxa_*",
    "malloc",
    "llvm::APInt::udiv",
    "llvm::*::get*",
    "llvm::SmallVector*::push_back",
    "core::fmt::*",
    "*closure*",
    "<*",
    "Db::get",
    "rust_names::store::Lookup::find",
    "rust_names::store::Wrapper::peek",
    "shop::*",
    "Store::lookup(int)",
    "*::~*",
    "*[abi:cxx11]*",
];

/// Patterns a user might write for one symbol, from its demangled names.
fn own_patterns(n: &symbols::Names) -> Vec<String> {
    let mut out = vec![n.base.clone(), n.full.clone()];
    let parts: Vec<&str> = n.base.rsplitn(3, "::").collect();
    if parts.len() >= 2 {
        out.push(format!("{}::{}", parts[1], parts[0]));
        out.push(format!("{}::*", parts[1]));
    }
    if let Some(c) = n.base.char_indices().nth(5) {
        out.push(format!("{}*", &n.base[..c.0]));
    }
    out
}

/// Every function symbol of `path`: for each pattern, the prefilter accepts
/// every symbol the full match accepts.
fn check_prefilter(path: &Path) -> (usize, usize) {
    let obj = ElfObject::open(path, path).unwrap();
    let (syms, _) = obj.function_symbols().unwrap();
    let fixed: Vec<Pattern> = PATTERNS
        .iter()
        .map(|p| Pattern::parse(p).unwrap())
        .collect();
    let mut matched = 0;
    for s in syms.iter() {
        let names = demangle(s.name);
        for p in &fixed {
            if p.matches(s.name, &names) {
                matched += 1;
                assert!(
                    p.may_match(s.name),
                    "{:?} matches {} but may_match says no",
                    p.as_str(),
                    s.name
                );
            }
        }
        for text in own_patterns(&names) {
            let Ok(p) = Pattern::parse(&text) else {
                continue;
            };
            if p.matches(s.name, &names) {
                matched += 1;
                assert!(
                    p.may_match(s.name),
                    "{text:?} matches {} but may_match says no",
                    s.name
                );
            }
        }
    }
    // The index looks only at the names that hold a pattern's identifier:
    // it finds what a look at every entry point finds, the first matching
    // name of each address.
    let mut whole: Vec<_> = syms
        .iter()
        .filter(|s| demangle(s.name).part == symbols::Part::Whole)
        .collect();
    whole.sort_by_key(|s| s.addr);
    let index = obj.symbols().unwrap();
    for p in &fixed {
        let mut want: Vec<(u64, &str)> = Vec::new();
        for s in &whole {
            if want.last().is_some_and(|w| w.0 == s.addr) {
                continue;
            }
            if p.matches(s.name, &demangle(s.name)) {
                want.push((s.addr, s.name));
            }
        }
        let found = index.find(p);
        let got: Vec<(u64, &str)> = found.iter().map(|f| (f.addr, f.raw.as_str())).collect();
        assert_eq!(got, want, "{:?} in {}", p.as_str(), path.display());
    }
    (syms.len(), matched)
}

#[test]
fn prefilter_never_rejects_a_match() {
    let mut objects: Vec<PathBuf> = [
        "rust_names",
        "rust_names_v0",
        "rust_app",
        "rust_app_v0",
        "cpp_o2",
    ]
    .iter()
    .map(|f| common::build(f))
    .collect();
    objects.extend(
        ["libstdc++.so.6", "libc.so.6", "libLLVM-14.so.1"]
            .iter()
            .filter_map(|l| system_library(l)),
    );
    for path in &objects {
        let start = Instant::now();
        let (n, matched) = check_prefilter(path);
        eprintln!(
            "{}: {n} symbols, {matched} matches, {:?}",
            path.display(),
            start.elapsed()
        );
        assert!(n > 0 && matched > 0);
    }
}
