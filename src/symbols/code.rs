//! An object as the decoder sees it: its data after relative relocation
//! (jump tables of position-independent code), its code beyond a symbol's
//! bounds, and where its functions start.

use object::read::elf::ElfFile64;
use object::{Object, ObjectSymbol};

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

/// Where the functions of an object start: every function symbol, and
/// every symbol of the dynamic table too (a stripped object's full table is
/// gone, and its exports still start functions). Sorted and unique.
pub(super) fn read_starts(obj: &ElfObject) -> Vec<u64> {
    let mut v: Vec<u64> = match obj.symbols() {
        Ok(index) => index.starts().collect(),
        Err(_) => Vec::new(),
    };
    if let Ok(file) = obj.parse() {
        add_dynamic_starts(&file, &mut v);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// The code range of every FDE in `.eh_frame`: one per function, and one
/// per part of a function split by the compiler (`.cold`), with or
/// without symbols.
pub(super) fn fde_ranges<'d, R: object::ReadRef<'d>>(
    file: &ElfFile64<'d, object::Endianness, R>,
) -> Vec<(u64, u64)> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    use object::ObjectSection;
    let mut out = Vec::new();
    let Some(sec) = file.section_by_name(".eh_frame") else {
        return out;
    };
    let Some(data) = super::section_data(&sec) else {
        return out;
    };
    let eh = EhFrame::new(&data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(sec.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut entries = eh.entries(&bases);
    // A malformed entry ends the walk: what was read so far stands.
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                let start = fde.initial_address();
                if let Some(end) = start.checked_add(fde.len()).filter(|&e| e > start) {
                    out.push((start, end));
                }
            }
        }
    }
    out
}

/// Where an object's unwind tables lie, when `.eh_frame_hdr` holds a
/// sorted search table: then the entry for an address is found by binary
/// search, without reading every entry of `.eh_frame` (5 MB in a large
/// C++ library).
#[derive(Clone, Copy, Debug)]
pub(super) struct EhSearch {
    hdr: (u64, u64),
    frame: (u64, u64),
    text: Option<u64>,
}

/// The search table of an object's `.eh_frame_hdr`, if it has a usable
/// one (both sections present, uncompressed, loaded, and the table of
/// fixed-size entries).
pub(super) fn eh_search<'d, R: object::ReadRef<'d>>(
    obj: &ElfObject,
    file: &ElfFile64<'d, object::Endianness, R>,
) -> Option<EhSearch> {
    use object::ObjectSection;
    let range = |name: &str| {
        let s = file.section_by_name(name)?;
        let plain = s.compressed_file_range().ok()?.format == object::CompressionFormat::None;
        (plain && s.size() > 0).then(|| (s.address(), s.size()))
    };
    let search = EhSearch {
        hdr: range(".eh_frame_hdr")?,
        frame: range(".eh_frame")?,
        text: file.section_by_name(".text").map(|t| t.address()),
    };
    // The table is usable if one lookup can be made.
    eh_lookup(obj, &search, search.frame.0).map(|_| search)
}

/// The code range of the unwind entry holding `vaddr`, by the search
/// table: `Some(None)` where no entry holds it, `None` where the table
/// cannot be read.
pub(super) fn eh_lookup(obj: &ElfObject, s: &EhSearch, vaddr: u64) -> Option<Option<(u64, u64)>> {
    eh_lookup_usual(obj, s, vaddr).or_else(|| eh_lookup_general(obj, s, vaddr))
}

/// `eh_lookup` for any layout gimli reads: reads all of `.eh_frame`.
pub(super) fn eh_lookup_general(
    obj: &ElfObject,
    s: &EhSearch,
    vaddr: u64,
) -> Option<Option<(u64, u64)>> {
    use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
    let hdr_data = obj.bytes(s.hdr.0, s.hdr.1)?;
    let frame_data = obj.bytes(s.frame.0, s.frame.1)?;
    let mut bases = BaseAddresses::default()
        .set_eh_frame_hdr(s.hdr.0)
        .set_eh_frame(s.frame.0);
    if let Some(t) = s.text {
        bases = bases.set_text(t);
    }
    let hdr = EhFrameHdr::new(hdr_data, LittleEndian)
        .parse(&bases, 8)
        .ok()?;
    let table = hdr.table()?;
    let frame = EhFrame::new(frame_data, LittleEndian);
    match table.fde_for_address(&frame, &bases, vaddr, EhFrame::cie_from_offset) {
        Ok(fde) => {
            let start = fde.initial_address();
            Some(
                start
                    .checked_add(fde.len())
                    .filter(|&e| e > start)
                    .map(|e| (start, e)),
            )
        }
        Err(gimli::Error::NoUnwindInfoForAddress) => Some(None),
        Err(_) => None,
    }
}

/// `eh_lookup` for the layout GNU and LLVM linkers write: a version 1
/// header whose table holds pairs of 4-byte offsets from the header, and
/// entries whose start is a 4-byte offset from itself. Reads the table and
/// 16 bytes of the one entry, where the general lookup reads all of
/// `.eh_frame`. `None` where the layout is another: the general lookup
/// decides.
pub(super) fn eh_lookup_usual(
    obj: &ElfObject,
    s: &EhSearch,
    vaddr: u64,
) -> Option<Option<(u64, u64)>> {
    // version; .eh_frame pointer pc-relative sdata4; count udata4; table
    // entries relative to the header, sdata4
    const USUAL: [u8; 4] = [1, 0x1b, 0x03, 0x3b];
    let word = |b: &[u8], at: usize| -> Option<[u8; 4]> { b.get(at..at + 4)?.try_into().ok() };
    let head = obj.bytes(s.hdr.0, 12)?;
    if head.get(..4)? != USUAL {
        return None;
    }
    let count = u32::from_le_bytes(word(head, 8)?) as usize;
    let table = obj.bytes(s.hdr.0 + 12, (count as u64).checked_mul(8)?)?;
    let rel = |at: usize| -> Option<u64> {
        let off = i32::from_le_bytes(word(table, at)?);
        s.hdr.0.checked_add_signed(off.into())
    };
    // The entries are sorted by start: the last one starting at or below
    // `vaddr` is the only one that can hold it.
    let (mut lo, mut hi) = (0usize, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if rel(mid * 8)? <= vaddr {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if lo == 0 {
        return Some(None);
    }
    let start = rel((lo - 1) * 8)?;
    let fde = rel((lo - 1) * 8 + 4)?;
    let rec = obj.bytes(fde, 16)?;
    let length = u32::from_le_bytes(word(rec, 0)?);
    let cie = u32::from_le_bytes(word(rec, 4)?);
    // A 64-bit length, or a CIE where an FDE should be: not the usual.
    if length == u32::MAX || length < 12 || cie == 0 {
        return None;
    }
    let begin = (fde + 8).checked_add_signed(i32::from_le_bytes(word(rec, 8)?).into())?;
    if begin != start {
        // The entry's start is encoded otherwise.
        return None;
    }
    let range = u32::from_le_bytes(word(rec, 12)?) as u64;
    let end = start.checked_add(range)?;
    Some((vaddr < end && end > start).then_some((start, end)))
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

fn add_dynamic_starts<'d, R: object::ReadRef<'d>>(
    file: &ElfFile64<'d, object::Endianness, R>,
    set: &mut Vec<u64>,
) {
    for s in file.dynamic_symbols() {
        if s.kind() == object::SymbolKind::Text && s.address() != 0 {
            set.push(s.address());
        }
    }
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
