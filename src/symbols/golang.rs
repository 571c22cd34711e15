//! Go binaries: telling one apart, the Go version that built it (from
//! `.go.buildinfo`), its function table (`.gopclntab`, which `-ldflags=-s -w`
//! keeps), and Go names as Go prints them (`main.Map[...]` for the
//! instances of a generic function). Pure: parses bytes, needs no privilege.

use anyhow::{bail, Result};

use super::names::demangle::split_suffix;
use super::table::{name_at, SymTable, TableSym};

/// What an object's Go sections say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GoInfo {
    /// `go1.19.8`, from `.go.buildinfo`; `None` when it cannot be read.
    pub version: Option<String>,
    /// Entry addresses of the functions the runtime knows (Go code and Go
    /// assembly, never cgo's C functions), sorted; empty when `.gopclntab`
    /// is absent or not understood.
    pub entries: Vec<u64>,
    /// Why `.gopclntab` could not be read, if it could not.
    pub pclntab_error: Option<String>,
}

impl GoInfo {
    /// Whether the function at `addr` is Go code.
    pub fn is_go_function(&self, addr: u64, raw: &str) -> bool {
        if self.entries.is_empty() {
            // Without the runtime's table: Go names have a package path,
            // C names at most a compiler suffix (`f.cold`).
            let (stem, _) = split_suffix(raw);
            return stem.contains('.') && !raw.starts_with(['_', '.']);
        }
        self.entries.binary_search(&addr).is_ok()
    }

    /// `(major, minor)` of the Go version, if known.
    pub fn version_number(&self) -> Option<(u32, u32)> {
        parse_version(self.version.as_deref()?)
    }

    /// Whether goroutine frames can be keyed as tachy keys them: since Go
    /// 1.17 on amd64, R14 holds the current goroutine (`g`) in Go code.
    /// An unknown version counts as recent when the function table has a
    /// format of Go 1.18 or later.
    pub fn g_in_r14(&self) -> Result<(), String> {
        match self.version_number() {
            Some(v) if v >= (1, 17) => Ok(()),
            Some(_) => Err(format!(
                "it was built by {}; tachy traces Go 1.17 and later (the register ABI, with the goroutine in R14)",
                self.version.as_deref().unwrap_or("an old Go")
            )),
            None => Err(
                "the Go version that built it cannot be read from .go.buildinfo; tachy traces Go 1.17 and later"
                    .to_string(),
            ),
        }
    }
}

/// Where `runtime.g` keeps the fields the BPF side reads (amd64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GLayout {
    /// Offsets of `stack.lo` and `stack.hi`.
    pub stack_lo: u32,
    pub stack_hi: u32,
    /// Offset of `goid`; `None` when neither DWARF nor the Go version says.
    pub goid: Option<u32>,
    /// Read from the binary's DWARF, rather than known for its Go version.
    pub from_dwarf: bool,
}

impl GLayout {
    /// `runtime.g: stack.hi at +8, goid at +152, from DWARF`, or where the
    /// layout of `version` was assumed.
    pub fn describe(&self, version: Option<&str>) -> String {
        let goid = match self.goid {
            Some(o) => format!("goid at +{o}"),
            None => "goid unknown".to_string(),
        };
        let whence = if self.from_dwarf {
            "from DWARF".to_string()
        } else {
            format!(
                "as {} lays it out (no DWARF)",
                version.unwrap_or("an unknown Go version")
            )
        };
        format!(
            "runtime.g: stack.hi at +{}, {goid}, {whence}",
            self.stack_hi
        )
    }
}

impl GoInfo {
    /// `runtime.g` as the Go version that built the binary lays it out on
    /// amd64, for a binary without DWARF. `stack` has been first since Go
    /// 1.0. `goid` followed 152 bytes of fields from Go 1.17 to 1.22; Go
    /// 1.23 added `syscallbp` before it (160). Later versions are not
    /// assumed.
    pub fn known_layout(&self) -> GLayout {
        let goid = match self.version_number() {
            Some(v) if ((1, 17)..=(1, 22)).contains(&v) => Some(152),
            Some(v) if ((1, 23)..=(1, 24)).contains(&v) => Some(160),
            _ => None,
        };
        GLayout {
            stack_lo: 0,
            stack_hi: 8,
            goid,
            from_dwarf: false,
        }
    }
}

/// `go1.19.8` → (1, 19); `devel go1.22-abc` → (1, 22).
pub fn parse_version(v: &str) -> Option<(u32, u32)> {
    let at = v.find("go1.")?;
    let rest = &v[at + 4..];
    let minor: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((1, minor.parse().ok()?))
}

const BUILDINFO_MAGIC: &[u8] = b"\xff Go buildinf:";

/// The version string of a `.go.buildinfo` section. Go 1.18 and later
/// store it inline (flag bit 2): a uvarint length and the bytes, at offset
/// 32. Before, the header holds a pointer to a string header, which
/// `read_ptr` (a virtual address to `ptr_size` bytes) follows.
pub fn buildinfo_version(
    data: &[u8],
    read: &dyn Fn(u64, u64) -> Option<Vec<u8>>,
) -> Option<String> {
    if data.len() < 32 || !data.starts_with(BUILDINFO_MAGIC) {
        return None;
    }
    let ptr_size = data[14] as usize;
    let flags = data[15];
    if flags & 2 != 0 {
        let (len, used) = uvarint(data.get(32..)?)?;
        let start = 32 + used;
        let bytes = data.get(start..start.checked_add(usize::try_from(len).ok()?)?)?;
        return String::from_utf8(bytes.to_vec()).ok();
    }
    if ptr_size != 8 || flags & 1 != 0 {
        // 4-byte pointers or big-endian: not an x86-64 binary.
        return None;
    }
    let p = u64::from_le_bytes(data.get(16..24)?.try_into().ok()?);
    let header = read(p, 16)?;
    let sptr = u64::from_le_bytes(header.get(0..8)?.try_into().ok()?);
    let slen = u64::from_le_bytes(header.get(8..16)?.try_into().ok()?);
    if slen > 256 {
        return None;
    }
    String::from_utf8(read(sptr, slen)?).ok()
}

fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &x) in b.iter().enumerate().take(10) {
        v |= u64::from(x & 0x7f) << (7 * i);
        if x & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The formats of `.gopclntab`, by the magic number that starts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// Go 1.2 to 1.15.
    Go12,
    /// Go 1.16 and 1.17.
    Go116,
    /// Go 1.18 and 1.19 (0xfffffff0) and Go 1.20 and later (0xfffffff1):
    /// entries are 32-bit offsets from the start of the text.
    Go118,
}

fn format_of(magic: u32) -> Option<Format> {
    match magic {
        0xfffffffb => Some(Format::Go12),
        0xfffffffa => Some(Format::Go116),
        0xfffffff0 | 0xfffffff1 => Some(Format::Go118),
        _ => None,
    }
}

/// Most functions a table may claim: far more than any real binary has.
const MAX_FUNCS: u64 = 1 << 24;

/// The functions of a `.gopclntab` section: name, entry and size (up to the
/// next function's entry). `text` is the address of `.text`, used where the
/// table leaves its own text address to a relocation (a PIE).
pub fn pclntab_functions(tab: &[u8], text: u64) -> Result<SymTable<'_>> {
    if tab.len() < 16 {
        bail!(".gopclntab is too short ({} bytes)", tab.len());
    }
    let magic = u32::from_le_bytes([tab[0], tab[1], tab[2], tab[3]]);
    let Some(format) = format_of(magic) else {
        bail!(
            ".gopclntab starts with magic {magic:#010x}, a format tachy does not read \
             (it reads those of Go 1.2 to 1.22: 0xfffffffb, 0xfffffffa, 0xfffffff0, 0xfffffff1)"
        );
    };
    if tab[4] != 0 || tab[5] != 0 || tab[7] != 8 {
        bail!(
            ".gopclntab is not a 64-bit little-endian table (pointer size {})",
            tab[7]
        );
    }
    let word = |i: usize| -> Result<u64> {
        let at = 8 + 8 * i;
        tab.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .ok_or_else(|| anyhow::anyhow!(".gopclntab header is truncated"))
    };
    let u32_at = |at: u64| -> Result<u32> {
        let at = usize::try_from(at)?;
        tab.get(at..at.saturating_add(4))
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| anyhow::anyhow!(".gopclntab is truncated at offset {at:#x}"))
    };
    let u64_at = |at: u64| -> Result<u64> {
        let at = usize::try_from(at)?;
        tab.get(at..at.saturating_add(8))
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .ok_or_else(|| anyhow::anyhow!(".gopclntab is truncated at offset {at:#x}"))
    };
    let nfunc = word(0)?;
    if nfunc > MAX_FUNCS {
        bail!(".gopclntab claims {nfunc} functions");
    }
    // Per format: where the function table starts, the size of its
    // entries, where names are counted from, and how an entry becomes an
    // address.
    let (functab, names, text_start) = match format {
        Format::Go12 => (8 + 8, 0u64, 0u64),
        Format::Go116 => (word(6)?, word(2)?, 0),
        Format::Go118 => {
            let t = word(2)?;
            (word(7)?, word(3)?, if t != 0 { t } else { text })
        }
    };
    let entry_size: u64 = if format == Format::Go118 { 8 } else { 16 };
    // The last entry holds only the end of the last function.
    let entry_at = |i: u64| -> Result<(u64, u64)> {
        let at = functab + i * entry_size;
        if i == nfunc {
            return Ok(if format == Format::Go118 {
                (text_start + u64::from(u32_at(at)?), 0)
            } else {
                (u64_at(at)?, 0)
            });
        }
        Ok(if format == Format::Go118 {
            (
                text_start + u64::from(u32_at(at)?),
                u64::from(u32_at(at + 4)?),
            )
        } else {
            (u64_at(at)?, u64_at(at + 8)?)
        })
    };
    // The func structure's name offset follows its entry (a 32-bit offset
    // since Go 1.18, a pointer-sized address before).
    let name_field = if format == Format::Go118 { 4 } else { 8 };
    // Function offsets count from the function table since Go 1.16, from
    // the table's start before.
    let func_base = if format == Format::Go12 { 0 } else { functab };
    let mut out = Vec::with_capacity(nfunc as usize);
    let mut next = entry_at(0)?;
    for i in 0..nfunc {
        let (entry, funcoff) = next;
        next = entry_at(i + 1)?;
        let end = next.0;
        let nameoff = u32_at(func_base + funcoff + name_field)? as i32;
        if nameoff < 0 || end <= entry {
            continue;
        }
        let Ok(name) = u32::try_from(names + nameoff as u64) else {
            continue;
        };
        if name_at(tab, name).is_none() {
            continue;
        }
        out.push(TableSym {
            name,
            addr: entry,
            size: end - entry,
        });
    }
    Ok(SymTable {
        strings: tab,
        syms: out,
        ifuncs: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goid_is_placed_for_the_go_versions_whose_layout_is_known() {
        let at = |v: &str| {
            GoInfo {
                version: Some(v.to_string()),
                ..GoInfo::default()
            }
            .known_layout()
        };
        let l = at("go1.19.8");
        assert_eq!((l.stack_lo, l.stack_hi, l.goid), (0, 8, Some(152)));
        assert!(!l.from_dwarf);
        assert_eq!(at("go1.17").goid, Some(152));
        assert_eq!(at("go1.22.3").goid, Some(152));
        assert_eq!(at("go1.23.0").goid, Some(160));
        assert_eq!(at("go1.26.1").goid, None);
        assert_eq!(at("go1.26.1").stack_hi, 8);
        assert_eq!(
            at("go1.26.1").describe(Some("go1.26.1")),
            "runtime.g: stack.hi at +8, goid unknown, as go1.26.1 lays it out (no DWARF)"
        );
        let dwarf = GLayout {
            from_dwarf: true,
            ..l
        };
        assert_eq!(
            dwarf.describe(Some("go1.19.8")),
            "runtime.g: stack.hi at +8, goid at +152, from DWARF"
        );
    }

    #[test]
    fn reads_versions() {
        assert_eq!(parse_version("go1.19.8"), Some((1, 19)));
        assert_eq!(parse_version("devel go1.22-abc"), Some((1, 22)));
        assert_eq!(parse_version("go2"), None);
        let mut b = BUILDINFO_MAGIC.to_vec();
        b.extend([8, 2]);
        b.resize(32, 0);
        b.push(8);
        b.extend(b"go1.19.8");
        assert_eq!(
            buildinfo_version(&b, &|_, _| None).as_deref(),
            Some("go1.19.8")
        );
        assert_eq!(buildinfo_version(&b[..20], &|_, _| None), None);
    }

    /// A Go 1.18 table of two functions, built by hand.
    fn table(magic: u32) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend(magic.to_le_bytes());
        t.extend([0, 0, 1, 8]);
        let hdr = 8 + 8 * 8;
        let names = hdr as u64;
        let name_bytes = b"main.a\0main.(*T).b\0";
        let functab = names + name_bytes.len() as u64;
        // nfunc, nfiles, textStart, funcname, cu, filetab, pctab, pcln
        for w in [2u64, 0, 0x401000, names, 0, 0, 0, functab] {
            t.extend(w.to_le_bytes());
        }
        t.extend(name_bytes);
        // entries: (entryoff, funcoff) x2, then the end.
        let funcs: u32 = 2 * 8 + 4;
        for (e, f) in [(0x100u32, funcs), (0x180, funcs + 8)] {
            t.extend(e.to_le_bytes());
            t.extend(f.to_le_bytes());
        }
        t.extend(0x1c0u32.to_le_bytes());
        // _func: entryoff, nameoff
        for (e, n) in [(0x100u32, 0u32), (0x180, 7)] {
            t.extend(e.to_le_bytes());
            t.extend(n.to_le_bytes());
        }
        t
    }

    #[test]
    fn reads_a_go_1_18_function_table() {
        let t = table(0xfffffff0);
        let f = pclntab_functions(&t, 0).unwrap();
        let got: Vec<(&str, u64, u64)> = f.iter().map(|s| (s.name, s.addr, s.size)).collect();
        assert_eq!(
            got,
            [("main.a", 0x401100, 0x80), ("main.(*T).b", 0x401180, 0x40)]
        );
        assert_eq!(pclntab_functions(&table(0xfffffff1), 0).unwrap().len(), 2);
    }

    #[test]
    fn says_when_a_table_is_not_understood() {
        let err = pclntab_functions(&table(0xfffffff5), 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("magic 0xfffffff5"), "{err}");
        let mut t = table(0xfffffff0);
        t.truncate(100);
        assert!(pclntab_functions(&t, 0).is_err());
        assert!(pclntab_functions(&t[..8], 0).is_err());
    }
}
