//! Symbols: which functions of an object a pattern names, with their raw and
//! demangled names, fragments, and near names when nothing matches. Pure:
//! reads files, needs no privilege.

pub mod code;
pub mod debuginfo;
pub mod demangle;
pub mod dwarf;
pub mod elf;
pub mod golang;
pub mod imports;
pub mod index;
pub mod lines;
mod near;
pub mod params;
pub mod pattern;
pub mod relocs;

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

/// Finds the functions `pat` names in `obj`, in its symbol index (built on
/// first use). Raw names that cannot match are skipped before they are
/// demangled: demangling every symbol of a large C++ library costs about a
/// second.
pub fn find(obj: &ElfObject, pat: &Pattern) -> Result<Found> {
    let index = obj.symbols()?;
    Ok(Found {
        source: index.source,
        functions: index.find(pat),
    })
}
