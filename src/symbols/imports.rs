//! The names of an object's imported functions at the addresses its code
//! calls them through: PLT stubs and GOT slots (`-fno-plt`), read from the
//! dynamic relocations and the `.plt`, `.plt.sec` and `.plt.got` sections.

use std::collections::HashMap;

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};
use object::{Object, ObjectSection};

use super::elf::ElfObject;

/// Imported functions by PLT stub (by GOT slot: `ElfObject::slot_import`).
#[derive(Debug, Default)]
pub struct Imports {
    plt: HashMap<u64, String>,
}

impl Imports {
    /// Reads an object's imports; an object that cannot be parsed has none.
    pub fn load(obj: &ElfObject) -> Imports {
        let Ok(file) = obj.parse() else {
            return Imports::default();
        };
        // A PLT stub is an indirect jump through a GOT slot, with maybe an
        // `endbr64` before it; the stub starts at whichever comes first.
        let mut plt = HashMap::new();
        for sec in file.sections() {
            let name = sec.name().unwrap_or("");
            if !matches!(name, ".plt" | ".plt.sec" | ".plt.got") {
                continue;
            }
            let Ok(data) = sec.data() else { continue };
            let mut dec = Decoder::with_ip(64, data, sec.address(), DecoderOptions::NONE);
            let mut prev: Option<Instruction> = None;
            let mut insn = Instruction::default();
            while dec.can_decode() {
                dec.decode_out(&mut insn);
                if insn.mnemonic() == Mnemonic::Jmp
                    && insn.op0_kind() == OpKind::Memory
                    && insn.is_ip_rel_memory_operand()
                {
                    if let Some(n) = obj.slot_import(insn.ip_rel_memory_address()) {
                        let start = match prev {
                            Some(p)
                                if p.mnemonic() == Mnemonic::Endbr64
                                    && p.next_ip() == insn.ip() =>
                            {
                                p.ip()
                            }
                            _ => insn.ip(),
                        };
                        plt.insert(start, n.to_string());
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
