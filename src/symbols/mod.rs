//! Symbols: which functions of an object a pattern names, with their raw and
//! demangled names, fragments, and near names when nothing matches. Pure:
//! reads files, needs no privilege.

pub mod code;
pub mod debuginfo;
pub mod demangle;
pub mod dwarf;
pub mod elf;
pub mod golang;
pub mod ifunc;
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
pub use pattern::{quoted, Pattern};

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
    /// The IFUNC symbol this function implements, when it was named
    /// through one (see [`ifunc`]).
    pub ifunc: Option<IfuncOf>,
}

/// The IFUNC symbol a function implements, and how tachy knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfuncOf {
    /// The IFUNC symbol's name (`memset`) and address (its resolver's).
    pub name: String,
    pub resolver: u64,
    /// How many functions its resolver can return.
    pub candidates: usize,
    /// Read from the process (the one it uses), or one of the functions
    /// its resolver can return.
    pub resolved: bool,
}

impl IfuncOf {
    /// What `tachy list` says of an implementation of the IFUNC symbol.
    pub fn describe(&self) -> String {
        let what = format!(
            "{} is an IFUNC symbol: {:#x} is its resolver, which the loader runs to pick what callers reach",
            self.name, self.resolver
        );
        if self.resolved {
            format!("{what}; the process uses this function")
        } else {
            format!(
                "{what}; this is one of the {} functions it can return",
                self.candidates
            )
        }
    }
}

impl Function {
    /// The name shown to users: demangled with parameters, plus any clone
    /// suffix; for the implementation of an IFUNC symbol, that symbol's
    /// name first (`memset (resolved to __memset_avx2_unaligned_erms)`).
    pub fn display_name(&self) -> String {
        let own = if self.names.suffix.is_empty() {
            self.names.full.clone()
        } else {
            format!("{} [clone {}]", self.names.full, self.names.suffix)
        };
        match &self.ifunc {
            Some(i) if i.resolved => format!("{} (resolved to {own})", i.name),
            Some(i) => format!("{} (may resolve to {own})", i.name),
            None => own,
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
