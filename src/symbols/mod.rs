//! Symbols: which functions of an object a pattern names, with their raw and
//! demangled names, fragments, and near names when nothing matches. Pure:
//! reads files, needs no privilege.
//!
//! Three wings: `elf` (an ELF object and its debug files: symbol tables,
//! DWARF, relocations, unwind tables), `golang` (what a Go binary's own
//! sections say) and `names` (demangling, patterns and their canonical
//! form, globs). `table` (symbol tables as read) and `function` (what a
//! pattern finds) stand below them; `code` (an object as the decoder reads
//! it), `ifunc` and `near` above.

pub mod code;
pub mod elf;
mod function;
pub mod golang;
pub mod ifunc;
pub mod names;
mod near;
pub mod table;
pub mod unwind;

use anyhow::Result;

pub use elf::ElfObject;
pub use function::{ifunc_note, Fragment, Function, IfuncOf};
pub use names::{demangle, quoted, Lang, Names, Part, Pattern};
pub use near::suggest;
pub use table::SymSource;
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
