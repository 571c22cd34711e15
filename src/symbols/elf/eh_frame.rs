//! The unwind tables as a map of code: the range of every entry of
//! `.eh_frame` (one per function, and one per part the compiler split off),
//! and the entry holding an address, by the search table of
//! `.eh_frame_hdr` where the object has a usable one.

use object::read::elf::ElfFile64;
use object::Object;

/// An object's loaded bytes, where the search tables are read from.
pub trait LoadedBytes {
    /// The file's bytes of `[vaddr, vaddr + len)` in a loaded segment.
    fn bytes(&self, vaddr: u64, len: u64) -> Option<&[u8]>;
}

/// The code range of every FDE in `.eh_frame`: one per function, and one
/// per part of a function split by the compiler (`.cold`), with or
/// without symbols.
pub fn fde_ranges<'d, R: object::ReadRef<'d>>(
    file: &ElfFile64<'d, object::Endianness, R>,
) -> Vec<(u64, u64)> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    use object::ObjectSection;
    let mut out = Vec::new();
    let Some(sec) = file.section_by_name(".eh_frame") else {
        return out;
    };
    let Some(data) = super::section::section_data(&sec) else {
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
pub struct EhSearch {
    hdr: (u64, u64),
    frame: (u64, u64),
    text: Option<u64>,
}

/// The search table of an object's `.eh_frame_hdr`, if it has a usable
/// one (both sections present, uncompressed, loaded, and the table of
/// fixed-size entries).
pub fn eh_search<'d, R: object::ReadRef<'d>>(
    obj: &impl LoadedBytes,
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
pub fn eh_lookup(obj: &impl LoadedBytes, s: &EhSearch, vaddr: u64) -> Option<Option<(u64, u64)>> {
    eh_lookup_usual(obj, s, vaddr).or_else(|| eh_lookup_general(obj, s, vaddr))
}

/// `eh_lookup` for any layout gimli reads: reads all of `.eh_frame`.
pub fn eh_lookup_general(
    obj: &impl LoadedBytes,
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
pub fn eh_lookup_usual(
    obj: &impl LoadedBytes,
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
