//! Arbitrary text as what users type and what symbol tables hold: function
//! patterns, raw (mangled) names, durations, `LIB:FUNC` specs and system
//! call globs. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tachy::duration::parse_duration;
use tachy::resolve::FuncSpec;
use tachy::kernel::match_syscalls;
use tachy::symbols::names::demangle::{part_of, split_suffix};
use tachy::symbols::names::glob_match;
use tachy::symbols::{demangle, Pattern};

fuzz_target!(|data: &[u8]| {
    // Two strings: before and after the first NUL byte.
    let (a, b) = match data.iter().position(|&c| c == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let a = String::from_utf8_lossy(a);
    let b = String::from_utf8_lossy(b);
    let (a, b) = (a.as_ref(), b.as_ref());

    for s in [a, b] {
        let names = demangle(s);
        let _ = (split_suffix(s), part_of(s));
        let _ = parse_duration(s);
        if let Ok(spec) = FuncSpec::parse(s) {
            let _ = (spec.is_syscall(), spec.is_kernel());
        }
        let _ = names.lang.as_str();
    }
    let _ = match_syscalls(a);
    let _ = glob_match(a, b);
    let _ = glob_match(b, a);

    if let Ok(pat) = Pattern::parse(a) {
        let _ = pat.as_str();
        let _ = pat.may_match(b);
        // The prefilter never rejects a name that matches.
        assert!(!pat.matches(b, &demangle(b)) || pat.may_match(b));
        let _ = pat.matches(b, &demangle(b));
        let _ = pat.matches(a, &demangle(a));
        // What `tachy list` does with a demangled name it found.
        let shown = demangle(b).full;
        let _ = pat.matches(&shown, &demangle(&shown));
    }
});
