//! Arbitrary bytes as a stripped object whose symbols and DWARF are
//! elsewhere: a `.gnu_debuglink` debug file (CRC-checked, next to the
//! object or in its `.debug/`), a build-ID debug file, or MiniDebugInfo
//! (`.gnu_debugdata`, xz). The lookup and everything that reads what it
//! finds must never panic.
#![no_main]

mod common;

use std::sync::Once;

use libfuzzer_sys::fuzz_target;
use object::read::elf::ElfFile64;
use object::{Endianness, ReadRef};
use tachy::symbols::elf::debuginfo::{self, DebugData};
use tachy::symbols::elf::lines::LineTable;
use tachy::symbols::{ElfObject, SymSource};

/// The debug file `seed_c_debuglink` names (`seeds/build.sh` makes both),
/// installed next to the input and in its `.debug/`, so the debuglink path
/// is taken, and the fuzzer can mutate the name and CRC around it.
static DEBUG_FILE: &[u8] = include_bytes!("../seeds/hello.debug");

fuzz_target!(|data: &[u8]| {
    static INSTALL: Once = Once::new();
    let dir = common::dir("debuginfo");
    INSTALL.call_once(|| {
        std::fs::create_dir_all(dir.join(".debug")).expect("cannot make .debug/");
        std::fs::write(dir.join("hello.debug"), DEBUG_FILE).expect("cannot write hello.debug");
        std::fs::write(dir.join(".debug/hello.debug"), DEBUG_FILE)
            .expect("cannot write .debug/hello.debug");
    });
    let path = common::write_input("debuginfo", data);

    // The lookup itself, on any 64-bit ELF the object crate parses (either
    // endianness, any machine), not only what ElfObject::open accepts.
    if let Ok(file) = ElfFile64::<Endianness, &[u8]>::parse(data) {
        if let Some(d) = debuginfo::find(&file, &path, &path) {
            inspect(&d);
        }
    }

    // Half the time, open it as tachy opens the objects of a process, through
    // /proc/PID/root (here the same file): debug files are then looked up
    // under that root first.
    let open_path = if data.last().is_some_and(|b| b & 1 == 1) {
        let mut p = std::path::PathBuf::from(format!("/proc/{}/root", std::process::id()));
        p.push(path.strip_prefix("/").unwrap_or(&path));
        p
    } else {
        path.clone()
    };
    let Ok(obj) = ElfObject::open(&path, &open_path) else {
        return;
    };
    if let Some(d) = obj.debug_data() {
        inspect(d);
    }
    let _ = obj.debug_path();
    let _ = obj.dwarf_data().len();
    for s in [
        SymSource::Symtab,
        SymSource::DebugFile,
        SymSource::MiniDebugInfo,
        SymSource::Dynsym,
    ] {
        let _ = obj.describe_source(s);
    }
    let Ok((syms, source)) = obj.function_symbols() else {
        return;
    };
    let _ = obj.describe_source(source);
    // Line tables come from the debug file when the object has no DWARF.
    if let Some(lines) = LineTable::load(obj.dwarf_data()) {
        for s in syms.iter().take(8) {
            let _ = lines.locate(s.addr);
        }
    }
});

fn inspect(d: &DebugData) {
    match d {
        DebugData::File { path, data } => {
            let _ = (path.display().to_string(), data.len());
        }
        DebugData::Mini(v) => {
            let _ = v.len();
        }
    }
}
