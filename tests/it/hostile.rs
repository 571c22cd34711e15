//! Hostile input: truncated and corrupted ELF files, DWARF whose references
//! form cycles, a file truncated while it is being read, a symbol table of
//! a million entries, names of 64 KiB. Each gives a clear error or a
//! correct result in bounded time, never a panic (and never a SIGBUS,
//! which would end this test process).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object::write::{Object, StandardSection, Symbol, SymbolSection};
use object::{Architecture, BinaryFormat, Endianness, SymbolFlags, SymbolKind, SymbolScope};
use tachy::symbols::{self, ElfObject, Pattern};

fn scratch(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Everything tachy does to an object before attaching, none of which may
/// panic whatever the bytes.
fn exercise(path: &Path) {
    let Ok(obj) = ElfObject::open(path, path) else {
        return;
    };
    let _ = obj.function_symbols();
    for p in ["main", "shop::*", "shop::Store::lookup(int)"] {
        let pat = Pattern::parse(p).unwrap();
        if let Ok(found) = symbols::find(&obj, &pat) {
            for f in &found.functions {
                if let Ok(d) = tachy::plan::decode_function(&obj, f) {
                    let _ = tachy::plan::choose_entry(&d, &|_| true);
                    let _ = tachy::callsites::sites(&d, &obj);
                }
            }
        }
        let _ = symbols::suggest(&obj, &pat, 5);
        let _ = symbols::elf::dwarf::inlined_only(obj.dwarf_data(), &pat);
    }
}

#[test]
fn truncated_elf_files_never_panic() {
    let src = std::fs::read(common::build("cpp_o2")).unwrap();
    let path = scratch("truncated");
    let step = (src.len() / 61).max(1);
    for len in (0..src.len()).step_by(step).chain([1, 4, 16, 63, 64, 65]) {
        std::fs::write(&path, &src[..len]).unwrap();
        exercise(&path);
    }
}

#[test]
fn corrupted_elf_files_never_panic() {
    let src = std::fs::read(common::build("cpp_o2")).unwrap();
    let path = scratch("corrupted");
    // A fixed sequence of pseudo-random byte changes, heavier in the headers.
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..100 {
        let mut bytes = src.clone();
        for _ in 0..(1 + round % 16) {
            let at = if next() % 2 == 0 {
                next() as usize % 4096
            } else {
                next() as usize % bytes.len()
            };
            bytes[at] = next() as u8;
        }
        std::fs::write(&path, &bytes).unwrap();
        exercise(&path);
    }
}

#[test]
fn file_truncated_while_read_gives_errors_not_a_crash() {
    let path = scratch("shrinking");
    std::fs::copy(common::build("cpp_o2"), &path).unwrap();
    let obj = ElfObject::open(&path, &path).unwrap();
    // Rewritten in place after tachy opened it: the rest now reads short.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(100)
        .unwrap();
    let err = obj.function_symbols().unwrap_err();
    assert!(format!("{err:#}").contains("malformed"), "{err:#}");
    assert!(obj.code(0x1000, 16).is_none());
}

/// An object with `n` functions named `f0`…, plus one with a 64 KiB name.
fn many_symbols(n: usize) -> Vec<u8> {
    let mut o = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let text = o.section_id(StandardSection::Text);
    let code = vec![0xc3u8; n + 1]; // one `ret` per function
    o.append_section_data(text, &code, 16);
    let mut add = |name: Vec<u8>, value: u64| {
        o.add_symbol(Symbol {
            name,
            value,
            size: 1,
            kind: SymbolKind::Text,
            scope: SymbolScope::Linkage,
            weak: false,
            section: SymbolSection::Section(text),
            flags: SymbolFlags::None,
        });
    };
    for i in 0..n {
        add(format!("f{i}").into_bytes(), i as u64);
    }
    add(vec![b'x'; 64 * 1024], n as u64);
    o.write().unwrap()
}

#[test]
fn a_million_symbols_and_a_64k_name_resolve_in_bounded_time() {
    let path = scratch("million.o");
    std::fs::write(&path, many_symbols(1_000_000)).unwrap();
    let obj = ElfObject::open(&path, &path).unwrap();
    let start = Instant::now();
    let (syms, _) = obj.function_symbols().unwrap();
    assert_eq!(syms.len(), 1_000_001);
    let found = symbols::find(&obj, &Pattern::parse("f999999").unwrap()).unwrap();
    assert_eq!(found.functions.len(), 1);
    assert_eq!(found.functions[0].addr, 999_999);
    let long = "x".repeat(64 * 1024);
    assert!(syms.iter().any(|s| s.name == long));
    // A 64 KiB pattern is refused with a clear error; a glob still matches.
    let err = Pattern::parse(&long).unwrap_err().to_string();
    assert_eq!(err, "function pattern is longer than 4096 bytes");
    let found = symbols::find(&obj, &Pattern::parse("xxxx*").unwrap()).unwrap();
    assert_eq!(found.functions.len(), 1);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    // No match among a million: near names, bounded too.
    let near = symbols::suggest(&obj, &Pattern::parse("f99999x").unwrap(), 5);
    assert_eq!(near.len(), 5, "{near:?}");
}

/// Found by fuzzing: addresses at the ends of the address space.
#[test]
fn extreme_addresses_are_answered_not_panicked_on() {
    let exe = common::build("cpp_o2");
    let obj = ElfObject::open(&exe, &exe).unwrap();
    let lines =
        symbols::elf::lines::LineTable::load(obj.dwarf_data()).expect("the fixture has DWARF");
    for a in [0, 1, u64::MAX, u64::MAX - 1, 1 << 63] {
        let _ = lines.locate(a);
        let _ = obj.vaddr_to_offset(a);
        let _ = obj.code(a, 16);
        let _ = obj.code(a, u64::MAX);
        if let Ok(index) = obj.symbols() {
            let _ = index.function_containing(a);
            let _ = index.function_starting_at(a);
        }
    }
}

/// Every input the fuzzers ever crashed on stays a test.
#[test]
fn fuzz_regressions_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut n = 0;
    for target in ["elf_symbols", "debuginfo"] {
        let Ok(rd) = std::fs::read_dir(dir.join(target)) else {
            continue;
        };
        for e in rd.flatten() {
            let path = scratch(&format!("regression-{n}"));
            std::fs::copy(e.path(), &path).unwrap();
            exercise(&path);
            n += 1;
        }
    }
    if let Ok(rd) = std::fs::read_dir(dir.join("decode")) {
        for e in rd.flatten() {
            let bytes = std::fs::read(e.path()).unwrap();
            if let Ok(d) = tachy::disasm::decode(&[tachy::disasm::Range {
                addr: 0x1000,
                bytes: &bytes,
            }]) {
                let _ = tachy::plan::choose_entry(&d, &|_| true);
                for b in &d.boundaries {
                    let _ = d.probe_points_from(*b);
                    let _ = d.only_epilogue_from(*b);
                }
            }
            n += 1;
        }
    }
    assert!(n > 0, "no regression inputs under {}", dir.display());
}

/// DWARF for a function `work` at [lo, lo + size) whose references go
/// round in circles: `work` is its own abstract origin and the
/// specification of an inline function `ns::twice`, which is its own
/// specification and whose abstract origin is `sq`, whose abstract origin
/// is `ns::twice`; an inlined copy of `ns::twice` in `work` contains a copy
/// that is its own origin. Lines: `lo` is cycle.cpp:10, the rest line 11.
/// Returns (section name, contents).
fn cyclic_dwarf(lo: u64, size: u64) -> Vec<(String, Vec<u8>)> {
    use gimli::write::{
        Address, AttributeValue as A, DwarfUnit, EndianVec, LineProgram, LineString, Sections,
    };
    let encoding = gimli::Encoding {
        format: gimli::Format::Dwarf32,
        version: 4,
        address_size: 8,
    };
    let mut dw = DwarfUnit::new(encoding);
    let name = |s: &str| LineString::String(s.as_bytes().to_vec());
    let mut lp = LineProgram::new(
        encoding,
        gimli::LineEncoding::default(),
        name("/src"),
        name("cycle.cpp"),
        None,
    );
    let dir = lp.default_directory();
    let file = lp.add_file(name("cycle.cpp"), dir, None);
    lp.begin_sequence(Some(Address::Constant(lo)));
    for (addr, line) in [(0, 10), (1, 11)] {
        lp.row().address_offset = addr;
        lp.row().file = file;
        lp.row().line = line;
        lp.generate_row();
    }
    lp.end_sequence(size);
    dw.unit.line_program = lp;

    let u = &mut dw.unit;
    let root = u.root();
    let at = |a| A::Address(Address::Constant(a));
    u.get_mut(root)
        .set(gimli::DW_AT_name, A::String(b"cycle.cpp".to_vec()));
    u.get_mut(root).set(gimli::DW_AT_low_pc, at(lo));
    u.get_mut(root).set(gimli::DW_AT_high_pc, A::Udata(size));
    let ns = u.add(root, gimli::DW_TAG_namespace);
    u.get_mut(ns)
        .set(gimli::DW_AT_name, A::String(b"ns".to_vec()));
    let twice = u.add(ns, gimli::DW_TAG_subprogram);
    let sq = u.add(root, gimli::DW_TAG_subprogram);
    let work = u.add(root, gimli::DW_TAG_subprogram);
    for (die, n) in [(twice, "twice"), (sq, "sq"), (work, "work")] {
        u.get_mut(die)
            .set(gimli::DW_AT_name, A::String(n.as_bytes().to_vec()));
    }
    for die in [twice, sq] {
        u.get_mut(die)
            .set(gimli::DW_AT_inline, A::Inline(gimli::DW_INL_inlined));
    }
    u.get_mut(twice)
        .set(gimli::DW_AT_specification, A::UnitRef(twice));
    u.get_mut(twice)
        .set(gimli::DW_AT_abstract_origin, A::UnitRef(sq));
    u.get_mut(sq)
        .set(gimli::DW_AT_abstract_origin, A::UnitRef(twice));
    u.get_mut(work)
        .set(gimli::DW_AT_abstract_origin, A::UnitRef(work));
    u.get_mut(work)
        .set(gimli::DW_AT_specification, A::UnitRef(twice));
    u.get_mut(work).set(gimli::DW_AT_low_pc, at(lo));
    u.get_mut(work).set(gimli::DW_AT_high_pc, A::Udata(size));
    let copy = u.add(work, gimli::DW_TAG_inlined_subroutine);
    let inner = u.add(copy, gimli::DW_TAG_inlined_subroutine);
    for (die, origin) in [(copy, twice), (inner, inner)] {
        let e = u.get_mut(die);
        e.set(gimli::DW_AT_abstract_origin, A::UnitRef(origin));
        e.set(gimli::DW_AT_low_pc, at(lo + 1));
        e.set(gimli::DW_AT_high_pc, A::Udata(size - 2));
        e.set(gimli::DW_AT_call_file, A::FileIndex(Some(file)));
        e.set(gimli::DW_AT_call_line, A::Udata(11));
    }
    let mut sections = Sections::new(EndianVec::new(gimli::LittleEndian));
    dw.write(&mut sections).unwrap();
    let mut out = Vec::new();
    sections
        .for_each(|id, data| -> Result<(), ()> {
            if !data.slice().is_empty() {
                out.push((id.name().to_string(), data.slice().to_vec()));
            }
            Ok(())
        })
        .unwrap();
    out
}

/// DWARF whose references form cycles: every lookup ends, in bounded time,
/// with the answer the symbols and line table give. The fixture `plain`
/// with its own DWARF replaced (objcopy) by cyclic DWARF for `slow_sum`.
#[test]
fn dwarf_with_reference_cycles() {
    let exe = common::build("plain");
    let (lo, size) = {
        let obj = ElfObject::open(&exe, &exe).unwrap();
        let (syms, _) = obj.function_symbols().unwrap();
        let f = syms.iter().find(|s| s.name == "slow_sum").unwrap();
        (f.addr, f.size)
    };
    let path = scratch("cycles");
    let mut cmd = std::process::Command::new("objcopy");
    cmd.arg("--strip-debug");
    for (name, data) in cyclic_dwarf(lo, size) {
        let file = scratch(&format!("cycles{name}"));
        std::fs::write(&file, data).unwrap();
        cmd.arg("--add-section")
            .arg(format!("{name}={}", file.display()));
    }
    let st = cmd.arg(&exe).arg(&path).status().expect("objcopy runs");
    assert!(st.success());

    let run = |args: &[&str]| {
        let start = Instant::now();
        let out = std::process::Command::new(common::tachy())
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{args:?}: {:?}",
            start.elapsed()
        );
        (out.status.code(), stdout, stderr)
    };
    let p = path.to_str().unwrap();

    // The call sites are found and placed by the line table.
    let (code, out, err) = run(&["list", "--sites", p, "slow_sum"]);
    assert_eq!(code, Some(0), "{err}");
    let site = out
        .lines()
        .find(|l| l.trim_start().starts_with("0x") && l.contains("nanosleep"))
        .unwrap_or_else(|| panic!("no nanosleep site:\n{out}"));
    assert!(site.contains("cycle.cpp:11"), "{site}");

    // An inline-only function in the cycle is listed by its inlined
    // instance, not looped on; one with no instance is explained.
    let (code, out, err) = run(&["list", p, "ns::twice"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("  ns::twice [inlined"), "{out}");
    let why = "sq is declared inline and has no symbol of its own: it was inlined or removed by the compiler";
    let (code, _, err) = run(&["list", p, "sq"]);
    assert_eq!(code, Some(1), "{err}");
    // The reason on the first line, then the objects searched.
    let first = err.lines().next().unwrap_or_default();
    assert!(first.ends_with(why), "{err}");
    assert!(err.contains("\nsearched:\n  "), "{err}");

    let (code, out, err) = run(&["nested", "--dry-run", &format!("{p}:slow_sum")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("site <0> [1] in [0]"), "{out}");
}

/// Found by fuzzing (a slow unit): a 101-byte zlib section claiming 512
/// MiB made tachy allocate and zero that much, three times. A claim beyond
/// what the compressed bytes can expand to is refused before allocating;
/// honest compressed sections of the same file still load.
#[test]
fn compressed_claims_beyond_the_deflate_ratio_are_refused() {
    use object::{Object, ObjectSection};
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions/elf_symbols/compressed_claim_beyond_ratio");
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let lie = file.section_by_name(".debug_loclists").unwrap();
    assert_eq!(
        lie.compressed_data().unwrap().uncompressed_size,
        536_871_034
    );
    assert!(symbols::elf::section_data(&lie).is_none());
    let info = file.section_by_name(".debug_info").unwrap();
    assert_eq!(symbols::elf::section_data(&info).unwrap().len(), 1009);
}
