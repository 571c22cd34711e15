//! An object as the decoder sees it: its data after relative relocation
//! (jump tables of position-independent code), its code beyond a symbol's
//! bounds, and where its functions start; and the functions no symbol
//! names.

use anyhow::Result;

use super::{ElfObject, Function};
use crate::disasm::Image;

/// Bytes of code handed to the decoder per instruction asked for.
const CODE_WINDOW: u64 = 64;

/// One object as the decoder reads it. The object's relocations and
/// function starts are read once per object (see `ElfObject`), so an image
/// costs nothing to make per function decoded.
pub struct ObjectImage<'a> {
    obj: &'a ElfObject,
}

impl<'a> ObjectImage<'a> {
    pub fn new(obj: &'a ElfObject) -> ObjectImage<'a> {
        ObjectImage { obj }
    }
}

/// A function that no symbol names, starting at `addr`: the unwind tables
/// have an entry starting there, and no symbol covers it (a static function
/// of an object stripped to its dynamic symbols). Named by its address.
pub fn unnamed_function_at(obj: &ElfObject, addr: u64) -> Result<Option<Function>> {
    let Some((start, end)) = obj.code_part_at(addr).filter(|p| p.0 == addr) else {
        return Ok(None);
    };
    if obj.symbols()?.function_containing(addr).is_some() {
        return Ok(None);
    }
    let raw = format!("{start:#x}");
    let mut names = super::demangle(&raw);
    names.full = format!("the function at {start:#x} (no symbol)");
    Ok(Some(Function {
        names,
        raw,
        addr: start,
        size: end - start,
        fragments: Vec::new(),
        ifunc: None,
    }))
}

impl Image for ObjectImage<'_> {
    fn pointer(&self, addr: u64) -> Option<u64> {
        if let Some(v) = self.obj.relocated_slot(addr) {
            return Some(v);
        }
        let b = self.obj.bytes(addr, 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn read_i32(&self, addr: u64) -> Option<i32> {
        let b = self.obj.bytes(addr, 4)?;
        Some(i32::from_le_bytes(b.try_into().ok()?))
    }

    fn code(&self, addr: u64) -> Option<&[u8]> {
        self.obj.code_from(addr, CODE_WINDOW)
    }

    fn is_function_start(&self, addr: u64) -> bool {
        self.obj.function_starts().binary_search(&addr).is_ok()
    }

    fn part_bounds(&self, addr: u64) -> Option<(u64, u64)> {
        self.obj.code_part_at(addr)
    }

    fn relocated_pointers(&self) -> &[u64] {
        self.obj.relocated_pointers()
    }
}
