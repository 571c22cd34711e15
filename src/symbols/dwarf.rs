//! DWARF lookups: where a function that has no symbol of its own was inlined.

use super::{ElfObject, Pattern};

/// If DWARF says functions matching `pat` exist only as inlined copies,
/// a sentence saying so and where they are.
pub fn inlined_only(_obj: &ElfObject, _pat: &Pattern) -> Option<String> {
    None
}
