//! Symbols: which functions of an object a pattern names, with their raw and
//! demangled names, fragments, and near names when nothing matches. Pure:
//! reads files, needs no privilege.

pub mod code;
pub mod debuginfo;
pub mod demangle;
pub mod dwarf;
pub mod elf;
pub mod lines;
mod near;
pub mod pattern;

use std::collections::BTreeMap;

use anyhow::Result;

pub use demangle::{demangle, Names, Part};
pub use elf::{ElfObject, SymSource};
pub use near::suggest;
pub use pattern::Pattern;

/// Largest debug section tachy decompresses: a header claiming more is
/// hostile input, not debug information.
const MAX_SECTION: u64 = 1 << 30;

/// Most bytes one compressed byte can stand for: deflate expands at most
/// 1032-fold; zstd, through run-length blocks, about 32768-fold.
fn max_expansion(format: object::CompressionFormat) -> u64 {
    match format {
        object::CompressionFormat::None => 1,
        object::CompressionFormat::Zlib => 1032,
        _ => 32768,
    }
}

/// A section's bytes, decompressed if need be, within MAX_SECTION and what
/// its compressed bytes can expand to: a header claiming more is refused
/// before anything is allocated.
pub fn section_data<'d, S: object::ObjectSection<'d>>(s: &S) -> Option<std::borrow::Cow<'d, [u8]>> {
    let c = s.compressed_data().ok()?;
    let most = (c.data.len() as u64)
        .saturating_mul(max_expansion(c.format))
        .saturating_add(64);
    if c.uncompressed_size > MAX_SECTION || c.uncompressed_size > most {
        return None;
    }
    c.decompress().ok()
}

/// A `.cold`/`.warm` part of a function: its code, never an entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fragment {
    pub raw: String,
    pub addr: u64,
    pub size: u64,
}

/// A function a pattern matched in one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub raw: String,
    pub names: Names,
    pub addr: u64,
    pub size: u64,
    pub fragments: Vec<Fragment>,
}

impl Function {
    /// The name shown to users: demangled with parameters, plus any clone suffix.
    pub fn display_name(&self) -> String {
        if self.names.suffix.is_empty() {
            self.names.full.clone()
        } else {
            format!("{} [clone {}]", self.names.full, self.names.suffix)
        }
    }
}

/// The result of looking a pattern up in one object.
#[derive(Debug)]
pub struct Found {
    pub source: SymSource,
    pub functions: Vec<Function>,
}

/// Finds the functions `pat` names in `obj`. Raw names are filtered on a
/// literal part of the pattern before any is demangled: demangling every
/// symbol of a large C++ library costs about a second.
pub fn find(obj: &ElfObject, pat: &Pattern) -> Result<Found> {
    let (syms, source) = obj.function_symbols()?;
    let mut whole: BTreeMap<u64, Function> = BTreeMap::new();
    let mut fragments: Vec<(String, Fragment)> = Vec::new();
    for s in &syms {
        if !pat.may_match(s.name) {
            continue;
        }
        let names = demangle(s.name);
        match names.part {
            Part::Fragment => fragments.push((
                names.stem.clone(),
                Fragment {
                    raw: s.name.to_string(),
                    addr: s.addr,
                    size: s.size,
                },
            )),
            Part::Whole => {
                if pat.matches(s.name, &names) {
                    // Aliases share an address: keep the first name.
                    whole.entry(s.addr).or_insert_with(|| Function {
                        raw: s.name.to_string(),
                        names,
                        addr: s.addr,
                        size: s.size,
                        fragments: Vec::new(),
                    });
                }
            }
        }
    }
    // A fragment belongs to the function whose name is its stem, clone
    // suffixes included (`f.part.0.cold` belongs to `f.part.0`).
    for (_, frag) in fragments {
        let (owner, _) = frag
            .raw
            .rsplit_once(".cold")
            .or_else(|| frag.raw.rsplit_once(".warm"))
            .unwrap_or((&frag.raw, ""));
        for f in whole.values_mut() {
            if f.raw == owner {
                f.fragments.push(frag.clone());
            }
        }
    }
    Ok(Found {
        source,
        functions: whole.into_values().collect(),
    })
}

/// The function symbol that contains `addr`, if any (fragments excluded).
pub fn function_at(obj: &ElfObject, addr: u64) -> Result<Option<Function>> {
    let (syms, _) = obj.function_symbols()?;
    let hit = syms
        .iter()
        .filter(|s| s.addr <= addr && addr - s.addr < s.size)
        .find(|s| demangle::part_of(s.name) == Part::Whole)
        .map(|s| (s, demangle(s.name)));
    Ok(hit.map(|(s, names)| Function {
        raw: s.name.to_string(),
        names,
        addr: s.addr,
        size: s.size,
        fragments: Vec::new(),
    }))
}
