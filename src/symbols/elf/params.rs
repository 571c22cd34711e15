//! DWARF parameters of functions: each formal parameter's name, type and
//! where its value lives at the function's first instruction. Compiler
//! clones (`.isra`, `.constprop`, `.part`) have their own subprogram DIE
//! whose parameters point back at the original's (`DW_AT_abstract_origin`)
//! and whose locations describe the clone's own calling convention; this
//! module reads exactly those, and never guesses from the declared
//! signature. Pure: reads the object's (or its debug file's) DWARF once
//! for every address asked about.

use std::collections::HashMap;

use gimli::{AttributeValue, EndianSlice, Operation, RunTimeEndian, UnitOffset};

use super::ElfObject;
use crate::disasm::Arch;

type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// Register names, indexed by their x86 encoding number (the numbering of
/// `tachy.h`: 0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp, 5 rbp, 6 rsi, 7 rdi,
/// 8-15 r8-r15).
pub const REG_NAMES: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];

/// The x86 encoding number of a DWARF x86-64 register number (0 rax, 1 rdx,
/// 2 rcx, 3 rbx, 4 rsi, 5 rdi, 6 rbp, 7 rsp, 8-15 r8-r15); None for the
/// others (vector, x87, segment registers).
pub fn x86_reg(dwarf: u16) -> Option<u8> {
    const MAP: [u8; 8] = [0, 2, 1, 3, 6, 7, 5, 4];
    match dwarf {
        0..=7 => Some(MAP[dwarf as usize]),
        8..=15 => Some(dwarf as u8),
        _ => None,
    }
}

/// What a parameter's type is, as far as a comparison cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// An integer, enum, bool or character of `size` bytes (1, 2, 4, 8).
    Int {
        size: u8,
        signed: bool,
        name: String,
    },
    /// A pointer or reference: compared as an unsigned 64-bit address.
    Pointer { name: String },
    /// A floating-point value (passed in a vector register).
    Float { name: String },
    /// A struct, class or union passed by value.
    Aggregate { name: String },
    /// Anything else (an `__int128`, a type DWARF does not give).
    Other { name: String },
}

impl ParamType {
    /// The type's name as the source spells it (best effort).
    pub fn name(&self) -> &str {
        match self {
            ParamType::Int { name, .. }
            | ParamType::Pointer { name }
            | ParamType::Float { name }
            | ParamType::Aggregate { name }
            | ParamType::Other { name } => name,
        }
    }
}

/// Where a parameter's value is at the function's first instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryLoc {
    /// In a register (x86 encoding number; xN as N on arm64).
    /// `DW_OP_entry_value(reg)` counts
    /// as the register itself: at the entry, the two are the same.
    Reg(u8),
    /// In memory at the entry SP (the return-address slot) plus this many
    /// bytes: an argument passed on the stack.
    Stack(i64),
    /// The same constant in every call (a `.constprop` clone).
    Const(i64),
    /// In the function's own frame, where the prologue stores it (-O0
    /// code): at the entry it is still where the caller put it.
    Frame,
    /// The clone has no location for it: optimized out.
    Absent,
    /// Its location list has no entry that covers the function's entry.
    NotAtEntry,
    /// A location this module does not follow (what it is).
    Unsupported(String),
}

/// One formal parameter of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// None for an unnamed parameter.
    pub name: Option<String>,
    pub ty: ParamType,
    pub at_entry: EntryLoc,
    /// `this` and other parameters the compiler adds.
    pub artificial: bool,
}

/// The parameters of one function, from its own subprogram DIE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncParams {
    /// In declaration order (the clone's own, then any of the original's
    /// it dropped, with `EntryLoc::Absent`).
    pub params: Vec<Param>,
    /// DWARF says the function does not follow the platform's calling
    /// convention (`DW_CC_nocall`: clang's dead-argument elimination).
    pub nocall: bool,
    /// What it returns.
    pub returns: Returns,
}

/// A function's return type, as far as reading its value cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Returns {
    /// Nothing (no `DW_AT_type` on the subprogram).
    #[default]
    Void,
    /// A value of this type; `bool` and enums are told apart.
    Value(ParamType),
    /// A `bool` (or `_Bool`) of this many bytes.
    Bool { size: u8 },
    /// An enum of this width and sign, with its enumerators' values and
    /// names.
    Enum {
        size: u8,
        signed: bool,
        name: String,
        values: Vec<(i64, String)>,
    },
}

impl FuncParams {
    pub fn get(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name.as_deref() == Some(name))
    }

    /// The parameters' names, in order, for messages.
    pub fn names(&self) -> Vec<&str> {
        self.params
            .iter()
            .filter_map(|p| p.name.as_deref())
            .collect()
    }
}

/// The parameters of the functions starting at `addrs`, from the DWARF of
/// `obj` (or its separate debug file). None when the object has no DWARF;
/// an address missing from the map has no subprogram DIE.
pub fn params_at(obj: &ElfObject, addrs: &[u64]) -> Option<HashMap<u64, FuncParams>> {
    super::dwarf::with_dwarf(obj.dwarf_data(), |dwarf| Some(scan(dwarf, addrs, obj.arch)))
}

/// One pass over every unit: the subprogram DIEs whose entry is one of
/// `addrs`, in code of `arch` (which numbers the registers).
pub fn scan(dwarf: &gimli::Dwarf<R<'_>>, addrs: &[u64], arch: Arch) -> HashMap<u64, FuncParams> {
    let mut out = HashMap::new();
    let mut units = dwarf.units();
    // Hostile DWARF must not keep start-up busy for ever.
    let mut budget: u64 = 50_000_000;
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut found: Vec<(u64, UnitOffset)> = Vec::new();
        let mut entries = unit.entries();
        while let Ok(Some((_, e))) = entries.next_dfs() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                return out;
            }
            if e.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let Some(entry) = entry_pc(dwarf, &unit, e) else {
                continue;
            };
            if addrs.contains(&entry) && !out.contains_key(&entry) {
                found.push((entry, e.offset()));
            }
        }
        for (entry, off) in found {
            if let Some(p) = read_params(dwarf, &unit, off, entry, arch) {
                out.insert(entry, p);
            }
        }
        if out.len() == addrs.len() {
            break;
        }
    }
    out
}

/// Where a concrete subprogram starts: its low_pc, or the start of its
/// first range.
fn entry_pc(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    e: &gimli::DebuggingInformationEntry<'_, '_, R<'_>>,
) -> Option<u64> {
    if let Some(v) = attr(e, gimli::DW_AT_low_pc) {
        return dwarf.attr_address(unit, v).ok().flatten();
    }
    attr(e, gimli::DW_AT_ranges)?;
    let mut ranges = dwarf.die_ranges(unit, e).ok()?;
    ranges.next().ok().flatten().map(|r| r.begin)
}

/// A DIE's attribute, looked for on the DIE, then along its
/// abstract_origin and specification chain (bounded).
fn attr_chain<'u>(
    unit: &'u gimli::Unit<R<'u>>,
    off: UnitOffset,
    at: gimli::DwAt,
) -> Option<AttributeValue<R<'u>>> {
    let mut off = off;
    for _ in 0..8 {
        let e = unit.entry(off).ok()?;
        if let Some(v) = attr(&e, at) {
            return Some(v);
        }
        off = origin(unit, &e)?;
    }
    None
}

/// The DIE this one completes (abstract origin, else specification), in
/// the same unit.
fn origin(
    unit: &gimli::Unit<R<'_>>,
    e: &gimli::DebuggingInformationEntry<'_, '_, R<'_>>,
) -> Option<UnitOffset> {
    let v =
        attr(e, gimli::DW_AT_abstract_origin).or_else(|| attr(e, gimli::DW_AT_specification))?;
    unit_ref(unit, v)
}

/// An attribute's value, where the entry has it and it reads.
fn attr<'a>(
    e: &gimli::DebuggingInformationEntry<'_, '_, R<'a>>,
    at: gimli::DwAt,
) -> Option<AttributeValue<R<'a>>> {
    e.attr_value(at).ok().flatten()
}

fn unit_ref(unit: &gimli::Unit<R<'_>>, v: AttributeValue<R<'_>>) -> Option<UnitOffset> {
    match v {
        AttributeValue::UnitRef(o) => Some(o),
        AttributeValue::DebugInfoRef(o) => o.to_unit_offset(&unit.header),
        _ => None,
    }
}

fn string(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    v: AttributeValue<R<'_>>,
) -> Option<String> {
    let s = dwarf.attr_string(unit, v).ok()?;
    Some(String::from_utf8_lossy(s.slice()).into_owned())
}

/// The children of a DIE with tag `tag` (formal parameters of a
/// subprogram, enumerators of an enumeration type), in order.
fn children(unit: &gimli::Unit<R<'_>>, off: UnitOffset, tag: gimli::DwTag) -> Vec<UnitOffset> {
    let mut out = Vec::new();
    let Ok(mut tree) = unit.entries_tree(Some(off)) else {
        return out;
    };
    let Ok(root) = tree.root() else {
        return out;
    };
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        if child.entry().tag() == tag {
            out.push(child.entry().offset());
        }
    }
    out
}

fn read_params(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    off: UnitOffset,
    entry: u64,
    arch: Arch,
) -> Option<FuncParams> {
    let die = unit.entry(off).ok()?;
    let nocall = matches!(
        attr_chain(unit, off, gimli::DW_AT_calling_convention),
        Some(AttributeValue::CallingConvention(cc)) if cc == gimli::DW_CC_nocall
    );
    let frame_cfa = frame_base_is_cfa(unit, &die);
    let mut params = Vec::new();
    let mut origins_seen = Vec::new();
    // Go gives a function no DW_AT_type: its results are formal
    // parameters marked DW_AT_variable_parameter (`~r0`, or as named).
    let go = is_go_unit(unit);
    let mut go_results = Vec::new();
    for p in children(unit, off, gimli::DW_TAG_formal_parameter) {
        let Ok(pe) = unit.entry(p) else {
            continue;
        };
        if go
            && matches!(
                attr(&pe, gimli::DW_AT_variable_parameter),
                Some(AttributeValue::Flag(true))
            )
        {
            go_results.push(p);
            continue;
        }
        if let Some(o) = origin(unit, &pe) {
            origins_seen.push(o);
        }
        let name = attr_chain(unit, p, gimli::DW_AT_name).and_then(|v| string(dwarf, unit, v));
        let ty = attr_chain(unit, p, gimli::DW_AT_type)
            .and_then(|v| unit_ref(unit, v))
            .map(|t| classify(dwarf, unit, t))
            .unwrap_or(ParamType::Other { name: "?".into() });
        let artificial = matches!(
            attr_chain(unit, p, gimli::DW_AT_artificial),
            Some(AttributeValue::Flag(true))
        );
        let at_entry = match attr(&pe, gimli::DW_AT_location) {
            None => match attr(&pe, gimli::DW_AT_const_value) {
                Some(v) => match v.sdata_value().or(v.udata_value().map(|u| u as i64)) {
                    Some(c) => EntryLoc::Const(c),
                    None => {
                        EntryLoc::Unsupported("a constant DWARF does not give as an integer".into())
                    }
                },
                None => EntryLoc::Absent,
            },
            Some(v) => location_at(dwarf, unit, v, entry, frame_cfa, arch),
        };
        params.push(Param {
            name,
            ty,
            at_entry,
            artificial,
        });
    }
    // Parameters of the original the clone dropped without a DIE of its own.
    if let Some(orig) = origin(unit, &die) {
        let orig_params = children(unit, orig, gimli::DW_TAG_formal_parameter);
        if !orig_params.is_empty() && !origins_seen.is_empty() {
            for op in orig_params {
                if origins_seen.contains(&op) {
                    continue;
                }
                let name =
                    attr_chain(unit, op, gimli::DW_AT_name).and_then(|v| string(dwarf, unit, v));
                if name.is_none() {
                    continue;
                }
                let ty = attr_chain(unit, op, gimli::DW_AT_type)
                    .and_then(|v| unit_ref(unit, v))
                    .map(|t| classify(dwarf, unit, t))
                    .unwrap_or(ParamType::Other { name: "?".into() });
                params.push(Param {
                    name,
                    ty,
                    at_entry: EntryLoc::Absent,
                    artificial: false,
                });
            }
        }
    }
    let returns = if go {
        // The first result: what Go's first integer result register holds
        // when it is an integer, a bool or a pointer.
        match go_results.first() {
            None => Returns::Void,
            Some(&r) => attr_chain(unit, r, gimli::DW_AT_type)
                .and_then(|v| type_elsewhere(dwarf, unit, v))
                .unwrap_or(Returns::Value(ParamType::Other { name: "?".into() })),
        }
    } else {
        match attr_chain(unit, off, gimli::DW_AT_type).and_then(|v| unit_ref(unit, v)) {
            None => Returns::Void,
            Some(t) => returns(dwarf, unit, t),
        }
    };
    Some(FuncParams {
        params,
        nocall,
        returns,
    })
}

/// Whether the unit is Go code (DW_AT_language DW_LANG_Go).
fn is_go_unit(unit: &gimli::Unit<R<'_>>) -> bool {
    let mut entries = unit.entries();
    let Ok(Some((_, root))) = entries.next_dfs() else {
        return false;
    };
    matches!(attr(root, gimli::DW_AT_language), Some(AttributeValue::Language(l)) if l == gimli::DW_LANG_Go)
}

/// What the type DIE `v` refers to returns as, in this unit or, as Go's
/// types are, in another unit of .debug_info.
fn type_elsewhere(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    v: AttributeValue<R<'_>>,
) -> Option<Returns> {
    if let Some(t) = unit_ref(unit, v) {
        return Some(returns(dwarf, unit, t));
    }
    let AttributeValue::DebugInfoRef(target) = v else {
        return None;
    };
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Some(off) = target.to_unit_offset(&header) else {
            continue;
        };
        let other = dwarf.unit(header).ok()?;
        return Some(returns(dwarf, &other, off));
    }
    None
}

/// What a return type DIE is: a `bool` or an enum (with its enumerators)
/// told apart from the other integers, through typedefs and qualifiers.
fn returns(dwarf: &gimli::Dwarf<R<'_>>, unit: &gimli::Unit<R<'_>>, off: UnitOffset) -> Returns {
    let ty = classify(dwarf, unit, off);
    let mut at = off;
    for _ in 0..16 {
        let Ok(e) = unit.entry(at) else { break };
        match e.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_atomic_type => {
                match attr(&e, gimli::DW_AT_type).and_then(|v| unit_ref(unit, v)) {
                    Some(n) => at = n,
                    None => break,
                }
            }
            gimli::DW_TAG_base_type => {
                let boolean = matches!(
                    attr(&e, gimli::DW_AT_encoding),
                    Some(AttributeValue::Encoding(gimli::DW_ATE_boolean))
                );
                if let (true, ParamType::Int { size, .. }) = (boolean, &ty) {
                    return Returns::Bool { size: *size };
                }
                break;
            }
            gimli::DW_TAG_enumeration_type => {
                let ParamType::Int { size, signed, name } = ty else {
                    break;
                };
                return Returns::Enum {
                    size,
                    signed,
                    name,
                    values: enumerators(dwarf, unit, at),
                };
            }
            _ => break,
        }
    }
    Returns::Value(ty)
}

/// The (value, name) of each enumerator of an enumeration type DIE.
fn enumerators(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    off: UnitOffset,
) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for o in children(unit, off, gimli::DW_TAG_enumerator) {
        let Ok(e) = unit.entry(o) else { continue };
        if out.len() >= 4096 {
            break;
        }
        let name = attr(&e, gimli::DW_AT_name).and_then(|v| string(dwarf, unit, v));
        let value = attr(&e, gimli::DW_AT_const_value)
            .and_then(|v| v.sdata_value().or(v.udata_value().map(|u| u as i64)));
        if let (Some(n), Some(v)) = (name, value) {
            out.push((v, n));
        }
    }
    out
}

/// Whether the subprogram's frame base is `DW_OP_call_frame_cfa` (what GCC
/// and clang emit on x86-64): `DW_OP_fbreg N` is then CFA + N, and the CFA
/// at the entry is SP + 8.
fn frame_base_is_cfa(
    unit: &gimli::Unit<R<'_>>,
    die: &gimli::DebuggingInformationEntry<'_, '_, R<'_>>,
) -> bool {
    let Ok(Some(AttributeValue::Exprloc(e))) = die.attr_value(gimli::DW_AT_frame_base) else {
        return false;
    };
    let mut ops = e.operations(unit.encoding());
    matches!(ops.next(), Ok(Some(Operation::CallFrameCFA))) && matches!(ops.next(), Ok(None))
}

/// Where the location `v` puts the value at address `pc`.
fn location_at(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    v: AttributeValue<R<'_>>,
    pc: u64,
    frame_cfa: bool,
    arch: Arch,
) -> EntryLoc {
    if let AttributeValue::Exprloc(e) = v {
        return match expression(unit, e, frame_cfa, arch) {
            // One location for the whole function, in its own frame: valid
            // only once the prologue stored the value there.
            EntryLoc::Stack(off) if off < 8 => EntryLoc::Frame,
            EntryLoc::Unsupported(s) if s == "frame" => EntryLoc::Frame,
            l => l,
        };
    }
    let Ok(Some(mut list)) = dwarf.attr_locations(unit, v) else {
        return EntryLoc::Unsupported(
            "a location DWARF gives in a form tachy does not read".into(),
        );
    };
    let mut n = 0;
    while let Ok(Some(entry)) = list.next() {
        n += 1;
        if n > 100_000 {
            break;
        }
        if entry.range.begin <= pc && pc < entry.range.end {
            return expression(unit, entry.data, frame_cfa, arch);
        }
    }
    EntryLoc::NotAtEntry
}

/// The value one location expression describes, at the function's entry.
fn expression(
    unit: &gimli::Unit<R<'_>>,
    e: gimli::Expression<R<'_>>,
    frame_cfa: bool,
    arch: Arch,
) -> EntryLoc {
    let mut ops = Vec::new();
    let mut it = e.operations(unit.encoding());
    while let Ok(Some(op)) = it.next() {
        ops.push(op);
        if ops.len() > 16 {
            break;
        }
    }
    let reg = |r: gimli::Register| match (arch, x86_reg(r.0)) {
        // AAPCS64's DWARF numbers x0-x30 as 0-30; the BPF side reads x0-x15.
        (Arch::Arm64, _) if r.0 < 16 => EntryLoc::Reg(r.0 as u8),
        (Arch::Arm64, _) => EntryLoc::Unsupported(format!(
            "DWARF register {} (x16 and above, SP and vector registers are not read)",
            r.0
        )),
        (Arch::X86_64, Some(x)) => EntryLoc::Reg(x),
        (Arch::X86_64, None) => {
            EntryLoc::Unsupported(format!("DWARF register {} (not an integer register)", r.0))
        }
    };
    if arch == Arch::Arm64 {
        // Memory at SP or the frame: arm64's stack arguments (past x7)
        // are not read; a frame slot is the prologue's.
        match ops.as_slice() {
            [Operation::FrameOffset { .. }] => return EntryLoc::Unsupported("frame".into()),
            [Operation::RegisterOffset { register, .. }] if register.0 == 29 => {
                return EntryLoc::Unsupported("frame".into())
            }
            [Operation::RegisterOffset { register, .. }] if register.0 == 31 => {
                return EntryLoc::Unsupported("a stack slot (arguments past x7)".into())
            }
            [Operation::RegisterOffset { .. }] => {
                return EntryLoc::Unsupported("a computed location (a DWARF expression)".into())
            }
            _ => {}
        }
    }
    match ops.as_slice() {
        [Operation::Register { register }] => reg(*register),
        // The value the register had at the entry: the register, there.
        [Operation::EntryValue { expression }, Operation::StackValue] => {
            let mut inner = gimli::Expression(*expression).operations(unit.encoding());
            match (inner.next(), inner.next()) {
                (Ok(Some(Operation::Register { register })), Ok(None)) => reg(register),
                _ => EntryLoc::Unsupported("an entry value of an expression".into()),
            }
        }
        [Operation::FrameOffset { offset }] if frame_cfa => {
            // CFA = SP at entry + 8 (the return address).
            EntryLoc::Stack(offset + 8)
        }
        [Operation::FrameOffset { .. }] => EntryLoc::Unsupported("frame".into()),
        [Operation::RegisterOffset {
            register, offset, ..
        }] if register.0 == 7 => EntryLoc::Stack(*offset),
        [Operation::RegisterOffset { register, .. }] if register.0 == 6 => {
            EntryLoc::Unsupported("frame".into())
        }
        [Operation::UnsignedConstant { value }, Operation::StackValue] => {
            EntryLoc::Const(*value as i64)
        }
        [Operation::SignedConstant { value }, Operation::StackValue] => EntryLoc::Const(*value),
        // The caller's value of a parameter the clone no longer receives.
        [Operation::ParameterRef { .. }, Operation::StackValue] => EntryLoc::Absent,
        [Operation::ImplicitValue { .. }] => {
            EntryLoc::Unsupported("an implicit value (DW_OP_implicit_value)".into())
        }
        [Operation::ImplicitPointer { .. }, ..] => EntryLoc::Unsupported(
            "a pointer to a value the clone receives in pieces (DW_OP_implicit_pointer)".into(),
        ),
        [.., Operation::Piece { .. }] => {
            EntryLoc::Unsupported("a value split over several places (DW_OP_piece)".into())
        }
        [] => EntryLoc::Absent,
        _ => EntryLoc::Unsupported("a computed location (a DWARF expression)".into()),
    }
}

/// What a type DIE is, through typedefs and qualifiers (bounded).
fn classify(dwarf: &gimli::Dwarf<R<'_>>, unit: &gimli::Unit<R<'_>>, off: UnitOffset) -> ParamType {
    let mut off = off;
    let mut shown: Option<String> = None;
    let mut quals: Vec<&str> = Vec::new();
    for _ in 0..16 {
        let Ok(e) = unit.entry(off) else {
            break;
        };
        let name = attr(&e, gimli::DW_AT_name).and_then(|v| string(dwarf, unit, v));
        let size = attr(&e, gimli::DW_AT_byte_size).and_then(|v| v.udata_value());
        let next = attr(&e, gimli::DW_AT_type).and_then(|v| unit_ref(unit, v));
        let label = |base: &str| -> String {
            let mut s = shown.clone().unwrap_or_else(|| base.to_string());
            for q in quals.iter().rev() {
                s = format!("{q} {s}");
            }
            s
        };
        match e.tag() {
            gimli::DW_TAG_typedef => {
                if shown.is_none() {
                    shown = name;
                }
                match next {
                    Some(n) => off = n,
                    None => break,
                }
            }
            gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => {
                if shown.is_none() {
                    quals.push(match e.tag() {
                        gimli::DW_TAG_const_type => "const",
                        gimli::DW_TAG_volatile_type => "volatile",
                        gimli::DW_TAG_restrict_type => "restrict",
                        _ => "_Atomic",
                    });
                }
                match next {
                    Some(n) => off = n,
                    // `const void`: only behind a pointer, never a value.
                    None => break,
                }
            }
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type
            | gimli::DW_TAG_ptr_to_member_type => {
                let base = match e.tag() {
                    gimli::DW_TAG_reference_type => "reference",
                    gimli::DW_TAG_rvalue_reference_type => "rvalue reference",
                    gimli::DW_TAG_ptr_to_member_type => "pointer to member",
                    _ => "pointer",
                };
                if e.tag() == gimli::DW_TAG_ptr_to_member_type || size.is_some_and(|s| s != 8) {
                    return ParamType::Other { name: label(base) };
                }
                let pointee = next
                    .and_then(|n| unit.entry(n).ok())
                    .and_then(|p| attr(&p, gimli::DW_AT_name))
                    .and_then(|v| string(dwarf, unit, v));
                let base = match (pointee, e.tag()) {
                    (Some(p), gimli::DW_TAG_reference_type) => format!("{p}&"),
                    (Some(p), gimli::DW_TAG_rvalue_reference_type) => format!("{p}&&"),
                    (Some(p), _) => format!("{p}*"),
                    (None, _) => base.to_string(),
                };
                return ParamType::Pointer { name: label(&base) };
            }
            gimli::DW_TAG_base_type => {
                let n = label(name.as_deref().unwrap_or("?"));
                let enc = attr(&e, gimli::DW_AT_encoding);
                let Some(AttributeValue::Encoding(enc)) = enc else {
                    return ParamType::Other { name: n };
                };
                let size = size.unwrap_or(0);
                return match enc {
                    gimli::DW_ATE_float
                    | gimli::DW_ATE_complex_float
                    | gimli::DW_ATE_decimal_float => ParamType::Float { name: n },
                    gimli::DW_ATE_signed | gimli::DW_ATE_signed_char
                        if matches!(size, 1 | 2 | 4 | 8) =>
                    {
                        ParamType::Int {
                            size: size as u8,
                            signed: true,
                            name: n,
                        }
                    }
                    gimli::DW_ATE_unsigned
                    | gimli::DW_ATE_unsigned_char
                    | gimli::DW_ATE_boolean
                    | gimli::DW_ATE_UTF
                        if matches!(size, 1 | 2 | 4 | 8) =>
                    {
                        ParamType::Int {
                            size: size as u8,
                            signed: false,
                            name: n,
                        }
                    }
                    _ => ParamType::Other { name: n },
                };
            }
            gimli::DW_TAG_enumeration_type => {
                let n = label(&format!(
                    "enum {}",
                    name.as_deref().unwrap_or("(anonymous)")
                ));
                // The underlying type, where DWARF gives it, decides the sign.
                let signed = match next.map(|t| classify(dwarf, unit, t)) {
                    Some(ParamType::Int { signed, .. }) => signed,
                    _ => false,
                };
                return match size {
                    Some(s @ (1 | 2 | 4 | 8)) => ParamType::Int {
                        size: s as u8,
                        signed,
                        name: n,
                    },
                    _ => ParamType::Other { name: n },
                };
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
                let kind = match e.tag() {
                    gimli::DW_TAG_structure_type => "struct",
                    gimli::DW_TAG_class_type => "class",
                    _ => "union",
                };
                let n = label(&format!(
                    "{kind} {}",
                    name.as_deref().unwrap_or("(anonymous)")
                ));
                return ParamType::Aggregate { name: n };
            }
            gimli::DW_TAG_array_type => {
                return ParamType::Other {
                    name: label("array"),
                }
            }
            _ => {
                return ParamType::Other {
                    name: label(name.as_deref().unwrap_or("?")),
                }
            }
        }
    }
    ParamType::Other {
        name: shown.unwrap_or_else(|| "?".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dwarf_registers_map_to_x86_numbers() {
        let names: Vec<&str> = (0..16)
            .map(|d| REG_NAMES[x86_reg(d).unwrap() as usize])
            .collect();
        assert_eq!(
            names,
            [
                "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                "r12", "r13", "r14", "r15"
            ]
        );
        assert_eq!(x86_reg(17), None);
    }
}
