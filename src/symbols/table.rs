//! Function symbol tables as read, whatever read them (an ELF symbol
//! table, Go's function table): names left in the string table they came
//! from, and where the table came from.

/// Where an object's function symbols came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymSource {
    /// The full symbol table.
    Symtab,
    /// The symbol table of a separate debug file (build ID or debuglink).
    DebugFile,
    /// The symbol table in `.gnu_debugdata` (MiniDebugInfo).
    MiniDebugInfo,
    /// Only the dynamic symbol table: exported functions only.
    Dynsym,
    /// Go's function table, which stripped Go binaries keep.
    Gopclntab,
}

impl SymSource {
    pub fn describe(self) -> &'static str {
        match self {
            SymSource::Symtab => ".symtab",
            SymSource::DebugFile => "a separate debug file",
            SymSource::MiniDebugInfo => ".gnu_debugdata (MiniDebugInfo)",
            SymSource::Dynsym => ".dynsym (exported functions only)",
            SymSource::Gopclntab => ".gopclntab (Go's function table)",
        }
    }
}

/// A function symbol as the object stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawSym<'a> {
    pub name: &'a str,
    pub addr: u64,
    pub size: u64,
}

/// A function symbol of a [`SymTable`]: its name is the string at `name`
/// in the table's strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSym {
    pub name: u32,
    pub addr: u64,
    pub size: u64,
}

/// Function symbols with their names left in the string table they came
/// from (NUL-terminated strings, some sharing a tail): no name is looked
/// at until one is asked for.
#[derive(Clone, Debug, Default)]
pub struct SymTable<'a> {
    pub strings: &'a [u8],
    pub syms: Vec<TableSym>,
    /// The addresses of the STT_GNU_IFUNC symbols among them: a resolver
    /// the loader runs once, whose result is the function callers reach.
    pub ifuncs: Vec<u64>,
}

impl<'a> SymTable<'a> {
    /// The symbols with their names; those whose name is not UTF-8 are
    /// left out.
    pub fn iter(&self) -> impl Iterator<Item = RawSym<'a>> + '_ {
        self.syms.iter().filter_map(|s| {
            Some(RawSym {
                name: name_at(self.strings, s.name)?,
                addr: s.addr,
                size: s.size,
            })
        })
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// The string at `off` in a table of NUL-terminated strings, if it is
/// there, ends, is not empty and is UTF-8.
pub fn name_at(strings: &[u8], off: u32) -> Option<&str> {
    let tail = strings.get(off as usize..)?;
    let end = memchr::memchr(0, tail)?;
    std::str::from_utf8(&tail[..end])
        .ok()
        .filter(|n| !n.is_empty())
}
