//! Call sites of a function: every `call` (direct, through the PLT, through
//! a GOT slot, indirect) and tail jump, named and placed at `file:line`.
//! Pure: reads the object, decodes, looks up names.

use std::collections::HashMap;

use anyhow::Result;
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};
use object::{Object, ObjectSection, RelocationTarget};

use crate::disasm::{Decoded, Target};
use crate::symbols::demangle::part_of;
use crate::symbols::elf::symbol_names;
use crate::symbols::lines::LineTable;
use crate::symbols::{demangle, ElfObject, Part};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SiteKind {
    /// A direct call to a known function.
    Call,
    /// A call through the PLT or a GOT slot (`-fno-plt`) to an imported function.
    Plt,
    /// A call through a register or computed memory.
    Indirect,
    /// A tail jump: the callee returns for the function.
    Tail,
}

impl SiteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SiteKind::Call => "call",
            SiteKind::Plt => "plt",
            SiteKind::Indirect => "indirect",
            SiteKind::Tail => "tail",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The call or jump instruction.
    pub addr: u64,
    /// The return address (`None` for a tail jump).
    pub ret: Option<u64>,
    pub kind: SiteKind,
    /// The callee's address, when the instruction names it (for drilling down).
    pub callee: Option<u64>,
    /// The callee's raw symbol name, when known (the imported name for a
    /// PLT or GOT call).
    pub callee_raw: Option<String>,
    /// What to show: a demangled name, `name@plt`, or `*indirect`.
    pub name: String,
    /// `file.cc:88`, with ` (inlined from f)` for code inlined into the function.
    pub location: Option<String>,
}

/// What names the sites of one object.
pub struct Naming {
    pub names: Names,
    pub lines: Option<LineTable>,
}

/// Names of an object's code addresses: function symbols, PLT stubs and GOT
/// slots of imported functions.
pub struct Names {
    syms: Vec<(u64, u64, String)>,
    plt: HashMap<u64, String>,
    slots: HashMap<u64, String>,
}

impl Names {
    pub fn load(obj: &ElfObject) -> Result<Names> {
        let (raw, _) = obj.function_symbols()?;
        let mut syms: Vec<(u64, u64, String)> = raw
            .iter()
            .filter(|s| part_of(s.name) == Part::Whole)
            .map(|s| (s.addr, s.size, s.name.to_string()))
            .collect();
        syms.sort();
        let file = obj.parse()?;
        let mut slots = HashMap::new();
        if let Some(relocs) = file.dynamic_relocations() {
            let dynnames = symbol_names(&file, true);
            for (off, r) in relocs {
                if let RelocationTarget::Symbol(i) = r.target() {
                    if let Some(name) = dynnames.get(i.0).filter(|n| !n.is_empty()) {
                        slots.insert(off, name.to_string());
                    }
                }
            }
        }
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
                    if let Some(n) = slots.get(&insn.ip_rel_memory_address()) {
                        let start = match prev {
                            Some(p)
                                if p.mnemonic() == Mnemonic::Endbr64
                                    && p.next_ip() == insn.ip() =>
                            {
                                p.ip()
                            }
                            _ => insn.ip(),
                        };
                        plt.insert(start, n.clone());
                    }
                }
                prev = Some(insn);
            }
        }
        Ok(Names { syms, plt, slots })
    }

    /// The imported function a PLT stub at `addr` jumps to.
    pub fn plt_name(&self, addr: u64) -> Option<&str> {
        self.plt.get(&addr).map(String::as_str)
    }

    /// The imported function a GOT slot holds.
    pub fn slot_name(&self, slot: u64) -> Option<&str> {
        self.slots.get(&slot).map(String::as_str)
    }

    /// The function symbol starting at `addr`.
    pub fn function_at(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|s| s.0 < addr);
        self.syms
            .get(i)
            .filter(|s| s.0 == addr)
            .map(|s| s.2.as_str())
    }

    fn name_of(&self, t: Target) -> (SiteKind, Option<u64>, Option<String>, String) {
        match t {
            Target::Direct(a) => {
                if let Some(n) = self.plt.get(&a) {
                    return (
                        SiteKind::Plt,
                        Some(a),
                        Some(n.clone()),
                        format!("{}@plt", demangle(n).full),
                    );
                }
                match self.function_at(a) {
                    Some(raw) => (SiteKind::Call, Some(a), Some(raw.to_string()), display(raw)),
                    None => (SiteKind::Call, Some(a), None, format!("{a:#x}")),
                }
            }
            Target::Slot(s) => match self.slots.get(&s) {
                Some(n) => (
                    SiteKind::Plt,
                    None,
                    Some(n.clone()),
                    format!("{}@got", demangle(n).full),
                ),
                None => (SiteKind::Indirect, None, None, "*indirect".into()),
            },
            Target::Indirect => (SiteKind::Indirect, None, None, "*indirect".into()),
        }
    }
}

fn display(raw: &str) -> String {
    let n = demangle(raw);
    if n.suffix.is_empty() {
        n.full
    } else {
        format!("{} [clone {}]", n.full, n.suffix)
    }
}

/// The call sites of a decoded function, in address order.
pub fn sites(decoded: &Decoded, names: &Names, lines: Option<&LineTable>) -> Vec<Site> {
    let locate = |a: u64| {
        lines
            .and_then(|l| l.locate(a))
            .map(|loc| match loc.inlined {
                Some(f) => format!("{} (inlined from {f})", loc.file_line),
                None => loc.file_line,
            })
    };
    let mut out: Vec<Site> = Vec::new();
    for c in &decoded.calls {
        let (kind, callee, callee_raw, name) = names.name_of(c.target);
        out.push(Site {
            addr: c.addr,
            ret: Some(c.next),
            kind,
            callee,
            callee_raw,
            name,
            location: locate(c.addr),
        });
    }
    for t in &decoded.tails {
        let (_, callee, callee_raw, name) = names.name_of(t.target);
        out.push(Site {
            addr: t.addr,
            ret: None,
            kind: SiteKind::Tail,
            callee,
            callee_raw,
            name,
            location: locate(t.addr),
        });
    }
    // Call order: the function's body, then its `.cold` parts.
    let body = decoded.first.as_ref().map_or(0, |f| f.addr);
    let end = decoded.body_end;
    out.sort_by_key(|s| (!(s.addr >= body && s.addr < end), s.addr));
    out
}
