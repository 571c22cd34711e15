//! A section's bytes, decompressed within bounds: debug sections of
//! hostile objects may claim any size.

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
