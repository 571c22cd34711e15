//! Arbitrary bytes as an ELF object: symbols, patterns, code, DWARF lines
//! and inlining, decoding, call sites and probe plans must never panic.
#![no_main]

mod common;

use std::rc::Rc;

use libfuzzer_sys::fuzz_target;
use object::ReadRef;
use tachy::callsites;
use tachy::plan::{self, Drill, Plan};
use tachy::symbols::elf::dwarf;
use tachy::symbols::{self, ElfObject, Pattern};

/// Patterns looked up in every object (the seeds define these names).
const PATTERNS: &[&str] = &["main", "ns::*", "*", "work", "ns::S::get(int) const"];
/// Patterns looked up in DWARF as inlined-only functions (`ns::twice` and
/// `sq` of the seeds are), fewer: each walks all of the DWARF.
const INLINED: &[&str] = &["ns::twice", "sq"];
/// Functions decoded per pattern, and planned per input: bounds the time
/// one input takes.
const MAX_FUNCS: usize = 8;
const MAX_PLANNED: usize = 3;

fuzz_target!(|data: &[u8]| {
    let path = common::write_input("elf_symbols", data);
    let Ok(obj) = ElfObject::open(&path, &path) else {
        return;
    };
    let obj = Rc::new(obj);

    // Addresses to probe the lookups with: fixed edges, two the fuzzer
    // picks (the last 16 bytes of the input), and the symbols' own.
    let mut addrs: Vec<u64> = vec![0, 1, 0x1000, u64::MAX - 1, u64::MAX];
    addrs.extend(common::tail_u64s(data, 2));
    if let Ok((syms, _)) = obj.function_symbols() {
        for s in syms.iter().take(16) {
            let end = s.addr.wrapping_add(s.size);
            addrs.extend([s.addr, s.addr.wrapping_add(1), end.wrapping_sub(1), end]);
        }
    }

    let _ = plan::unwind::object_unwinds(&obj);
    let _ = obj.debug_data().is_some();
    let _ = obj.debug_path();
    let _ = obj.dwarf_data().len();
    for &a in &addrs {
        if let Ok(index) = obj.symbols() {
            let _ = index.function_containing(a);
            let _ = index.function_starting_at(a);
        }
        let _ = obj.vaddr_to_offset(a);
        for n in [0, 1, 15, 4096, u64::MAX] {
            let _ = obj.code(a, n);
        }
    }

    if let Some(l) = obj.line_table() {
        for &a in &addrs {
            let _ = l.locate(a);
        }
    }

    for p in INLINED {
        let pat = Pattern::parse(p).expect("the fixed patterns parse");
        let _ = dwarf::inlined_only(obj.dwarf_data(), &pat);
    }

    let mut planned: Vec<(symbols::Function, symbols::SymSource)> = Vec::new();
    for p in PATTERNS {
        let pat = Pattern::parse(p).expect("the fixed patterns parse");
        let _ = symbols::suggest(&obj, &pat, 5);
        let Ok(found) = symbols::find(&obj, &pat) else {
            continue;
        };
        let _ = obj.describe_source(found.source);
        for f in found.functions.iter().take(MAX_FUNCS) {
            let _ = f.display_name();
            let Ok(decoded) = plan::decode_function(&obj, f) else {
                continue;
            };
            for site in callsites::sites(&decoded, &obj) {
                let _ = plan::unwind::never_returns(&site.name);
            }
            if planned.len() < MAX_PLANNED && !planned.iter().any(|(g, _)| g.addr == f.addr) {
                planned.push((f.clone(), found.source));
            }
        }
    }

    // Probe plans, as `tachy list`/`nested --dry-run` make them: entries,
    // exits, tail callees, and two levels of call sites.
    let drill = Drill {
        import: &|_| Vec::new(),
        depth: 2,
        expand: &|_| false,
        through: &|_, _| Vec::new(),
    };
    for uretprobe in [false, true] {
        let mut plan = Plan::default();
        plan.settings.uretprobe = uretprobe;
        for (f, source) in &planned {
            if let Ok(id) = plan.add_function(&obj, f, *source) {
                if !uretprobe {
                    let _ = plan.add_sites(&obj, f, id, &drill);
                }
            }
        }
        plan.finish();
        let _ = plan.describe();
        let _ = plan.ids();
    }
});
