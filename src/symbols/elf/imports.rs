//! The names of an object's imported functions at the addresses its code
//! calls them through: PLT stubs and GOT slots (`-fno-plt`), read from the
//! dynamic relocations and the `.plt`, `.plt.sec` and `.plt.got` sections.

use std::collections::HashMap;

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};
use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSection, ReadRef};

/// Imported functions by PLT stub (by GOT slot: `ElfObject::slot_import`).
#[derive(Debug, Default)]
pub struct Imports {
    plt: HashMap<u64, String>,
}

impl Imports {
    /// Reads the imports of an object, `file`; `slot_import` names the
    /// function a GOT slot holds, by the pass over every dynamic relocation
    /// (see `ElfObject::slot_import`).
    pub fn load<'d, R: ReadRef<'d>>(
        file: &ElfFile64<'d, Endianness, R>,
        slot_import: &dyn Fn(u64) -> Option<String>,
    ) -> Imports {
        Imports::read(file, slot_import, true)
    }

    /// `load`, naming every slot by the pass over all relocations unless
    /// `plt_table` allows the PLT's own table.
    fn read<'d, R: ReadRef<'d>>(
        file: &ElfFile64<'d, Endianness, R>,
        slot_import: &dyn Fn(u64) -> Option<String>,
        plt_table: bool,
    ) -> Imports {
        // The slots of `.plt` and `.plt.sec` stubs are named by the PLT's
        // own small relocation table (a slot it leaves alone, such as the
        // first stub's, names nothing); those of `.plt.got`, and all where
        // that table is not the last, by the pass over every relocation.
        let table = plt_table
            .then(|| super::relocs::plt_symbols(file))
            .flatten();
        let plt_slots: Option<HashMap<u64, &str>> = table.map(|v| {
            v.into_iter()
                .filter_map(|(slot, sym)| Some((slot, dynamic_name(file, sym)?)))
                .collect()
        });
        let import = |section: &str, slot: u64| -> Option<String> {
            match &plt_slots {
                Some(slots) if section != ".plt.got" => slots.get(&slot).map(|n| n.to_string()),
                _ => slot_import(slot),
            }
        };
        // A PLT stub is an indirect jump through a GOT slot, with maybe an
        // `endbr64` before it; the stub starts at whichever comes first.
        let mut plt = HashMap::new();
        let arm64 = file.architecture() == object::Architecture::Aarch64;
        for sec in file.sections() {
            let name = sec.name().unwrap_or("");
            if !matches!(name, ".plt" | ".plt.sec" | ".plt.got") {
                continue;
            }
            let Ok(data) = sec.data() else { continue };
            if arm64 {
                // AArch64 stubs are 16 bytes, after a 32-byte header.
                for k in (0..data.len()).step_by(4) {
                    let at = sec.address() + k as u64;
                    let slot = crate::disasm::arm64::plt_slot(&data[k..], at);
                    if let Some(n) = slot.and_then(|s| import(name, s)) {
                        plt.insert(at, n);
                    }
                }
                continue;
            }
            let mut dec = Decoder::with_ip(64, data, sec.address(), DecoderOptions::NONE);
            let mut prev: Option<Instruction> = None;
            let mut insn = Instruction::default();
            while dec.can_decode() {
                dec.decode_out(&mut insn);
                if insn.mnemonic() == Mnemonic::Jmp
                    && insn.op0_kind() == OpKind::Memory
                    && insn.is_ip_rel_memory_operand()
                {
                    if let Some(n) = import(name, insn.ip_rel_memory_address()) {
                        let start = match prev {
                            Some(p)
                                if p.mnemonic() == Mnemonic::Endbr64
                                    && p.next_ip() == insn.ip() =>
                            {
                                p.ip()
                            }
                            _ => insn.ip(),
                        };
                        plt.insert(start, n);
                    }
                }
                prev = Some(insn);
            }
        }
        Imports { plt }
    }

    /// The imported function a PLT stub at `addr` jumps to.
    pub fn plt_name(&self, addr: u64) -> Option<&str> {
        self.plt.get(&addr).map(String::as_str)
    }
}

/// The name of dynamic symbol `index`, if it has one.
fn dynamic_name<'a, R: object::ReadRef<'a>>(
    file: &object::read::elf::ElfFile64<'a, object::Endianness, R>,
    index: u32,
) -> Option<&'a str> {
    use object::read::elf::Sym;
    let table = file.elf_dynamic_symbol_table();
    let sym = table.symbol(object::SymbolIndex(index as usize)).ok()?;
    let name = sym.name(file.endian(), table.strings()).ok()?;
    std::str::from_utf8(name).ok().filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::ElfObject;

    #[test]
    fn plt_table_names_every_stub_as_the_pass_over_all_relocations() {
        let mut objects = vec![std::env::current_exe().unwrap()];
        for p in [
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1",
        ] {
            if std::path::Path::new(p).exists() {
                objects.push(p.into());
            }
        }
        for path in objects {
            let obj = ElfObject::open(&path, &path).unwrap();
            let file = obj.parse().unwrap();
            let slot_import = |slot| obj.slot_import(slot).map(str::to_string);
            let quick = Imports::read(&file, &slot_import, true);
            assert!(!quick.plt.is_empty(), "{}", path.display());
            assert_eq!(
                quick.plt,
                Imports::read(&file, &slot_import, false).plt,
                "{}",
                path.display()
            );
        }
    }
}
