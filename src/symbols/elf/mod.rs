//! One ELF object, read on demand: its symbols, its code bytes, and the one
//! function that turns a virtual address into a file offset.
//!
//! Objects are read with pread through a cache (object's `ReadCache`), not
//! mapped: a file truncated or rewritten while tachy reads it then gives a
//! read error, never a SIGBUS, and only the parts used are held in memory.

use std::cell::{Cell, OnceCell};
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub mod debuginfo;
pub mod dwarf;
mod eh_frame;
pub mod imports;
pub mod index;
pub mod inlined;
pub mod lines;
pub mod params;
pub mod relocs;
mod section;

pub use section::section_data;

use super::golang::{self, GLayout, GoInfo};
use super::table::{SymSource, SymTable, TableSym};
use crate::disasm::Arch;
use debuginfo::DebugData;
use eh_frame::{EhSearch, LoadedBytes};
use imports::Imports;
use index::SymbolIndex;
use lines::LineTable;
use object::elf;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::read::ReadCache;
#[cfg(test)]
use object::ObjectSection;
use object::ReadRef;
use object::{Endianness, Object, ObjectSymbol};
use relocs::DynRelocs;

#[derive(Clone, Copy, Debug)]
struct Load {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
    exec: bool,
}

/// A mapped ELF object.
pub struct ElfObject {
    /// The instruction set of its code (its ELF machine).
    pub arch: Arch,
    /// The path users know it by (as in /proc/PID/maps).
    pub display: PathBuf,
    /// The path tachy opened, and the kernel attaches probes to.
    pub open_path: PathBuf,
    data: ReadCache<File>,
    loads: Vec<Load>,
    /// Separate debug information, looked up once, when first needed.
    debug: OnceCell<Option<DebugData>>,
    /// The function symbols, indexed once, when first needed (the error
    /// of an object that has none).
    index: OnceCell<std::result::Result<SymbolIndex, String>>,
    /// Imported functions by PLT stub and GOT slot, read once.
    imports: OnceCell<Imports>,
    /// DWARF line tables, read once.
    lines: OnceCell<Option<LineTable>>,
    /// Whether anything can unwind through this object's code, decided once
    /// (by `plan::unwind`, which knows the functions that unwind).
    unwinds: OnceCell<bool>,
    /// Times the symbol tables were read: once per object, whatever the
    /// number of lookups.
    table_reads: Cell<usize>,
    /// Code ranges of the unwind tables' entries, read once, when first
    /// needed.
    parts: OnceCell<Vec<(u64, u64)>>,
    /// The search table of `.eh_frame_hdr`, if usable: then `parts` is
    /// not read.
    eh_search: OnceCell<Option<EhSearch>>,
    /// The same file, opened again on first use, to read without the
    /// cache what is read once and dropped (the pass over the dynamic
    /// relocations) or in small pieces on demand. Opened lazily so that
    /// objects only searched for names hold one descriptor; `None` if the
    /// path no longer names the file opened first.
    raw: OnceCell<Option<File>>,
    /// Device and inode of the file opened first.
    id: (u64, u64),
    /// The dynamic relocations, indexed once, when first needed.
    relocs: OnceCell<DynRelocs>,
    /// The values of the relative relocations, sorted and unique.
    pointers: OnceCell<Vec<u64>>,
    /// Where functions start (every symbol of either table), sorted.
    starts: OnceCell<Vec<u64>>,
    /// What the Go sections say, if this is a Go binary (read once).
    go: OnceCell<Option<GoInfo>>,
    /// Where runtime.g keeps what the BPF side reads, per DWARF (read
    /// once).
    go_layout: OnceCell<Option<GLayout>>,
    /// What the planner keeps of this object's code from one traced
    /// function to the next (`plan::unwind` keeps each callee it decoded),
    /// created on first use. The type is the planner's; this module only
    /// holds it, so that it lives as long as the object.
    memo: OnceCell<Box<dyn std::any::Any>>,
    /// Every inlined instance DWARF lists, read once, when first needed.
    inlined: OnceCell<Vec<inlined::Instance>>,
    /// Where a debug file was looked for (see `debug_hint`), said once:
    /// every function planned from `.dynsym` repeats it.
    debug_hint: OnceCell<Option<String>>,
}

impl std::fmt::Debug for ElfObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfObject")
            .field("display", &self.display)
            .finish()
    }
}

impl ElfObject {
    /// Maps and checks an object: a 64-bit little-endian x86-64 or AArch64
    /// ELF file.
    pub fn open(display: &Path, open_path: &Path) -> Result<ElfObject> {
        let file = crate::target::open_file(open_path)
            .with_context(|| format!("cannot open {}", display.display()))?;
        let meta = file
            .metadata()
            .with_context(|| format!("cannot stat {}", display.display()))?;
        if !meta.is_file() {
            bail!("{} is not a regular file", display.display());
        }
        let id = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        let data = ReadCache::new(file);
        let ident = data.read_bytes_at(0, 20).unwrap_or(&[]);
        if ident.len() < 4 || &ident[..4] != b"\x7fELF" {
            bail!("{} is not an ELF file", display.display());
        }
        if ident.len() < 20 || ident[4] != elf::ELFCLASS64 {
            bail!(
                "{} is a 32-bit ELF file; tachy traces 64-bit x86-64 and aarch64 code",
                display.display()
            );
        }
        let header = elf::FileHeader64::<Endianness>::parse(&data)
            .with_context(|| format!("{} is a malformed ELF file", display.display()))?;
        let endian = header
            .endian()
            .with_context(|| format!("{} is a malformed ELF file", display.display()))?;
        let machine = header.e_machine(endian);
        let arch = match machine {
            elf::EM_X86_64 => Arch::X86_64,
            elf::EM_AARCH64 if endian == Endianness::Little => Arch::Arm64,
            _ => bail!(
                "{} is an ELF file for {}; tachy decodes x86-64 and aarch64 code only",
                display.display(),
                machine_name(machine)
            ),
        };
        let phdrs = header
            .program_headers(endian, &data)
            .with_context(|| format!("{} has malformed program headers", display.display()))?;
        let loads = phdrs
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_LOAD)
            .map(|p| Load {
                vaddr: p.p_vaddr(endian),
                memsz: p.p_memsz(endian),
                offset: p.p_offset(endian),
                filesz: p.p_filesz(endian),
                exec: p.p_flags(endian) & elf::PF_X != 0,
            })
            .collect();
        Ok(ElfObject {
            arch,
            display: display.to_path_buf(),
            open_path: open_path.to_path_buf(),
            data,
            loads,
            debug: OnceCell::new(),
            index: OnceCell::new(),
            imports: OnceCell::new(),
            lines: OnceCell::new(),
            unwinds: OnceCell::new(),
            table_reads: Cell::new(0),
            parts: OnceCell::new(),
            eh_search: OnceCell::new(),
            raw: OnceCell::new(),
            id,
            relocs: OnceCell::new(),
            pointers: OnceCell::new(),
            starts: OnceCell::new(),
            go: OnceCell::new(),
            go_layout: OnceCell::new(),
            memo: OnceCell::new(),
            inlined: OnceCell::new(),
            debug_hint: OnceCell::new(),
        })
    }

    pub fn parse(&self) -> Result<ElfFile64<'_, Endianness, &ReadCache<File>>> {
        ElfFile64::parse(&self.data)
            .with_context(|| format!("{} is a malformed ELF file", self.display.display()))
    }

    /// Up to `max` code bytes from `vaddr` on, within its executable segment.
    pub fn code_from(&self, vaddr: u64, max: u64) -> Option<&[u8]> {
        let l = self
            .loads
            .iter()
            .find(|l| l.exec && vaddr >= l.vaddr && vaddr - l.vaddr < l.filesz.min(l.memsz))?;
        let left = l.filesz.min(l.memsz) - (vaddr - l.vaddr);
        self.code(vaddr, left.min(max))
    }

    /// The file's bytes of `[vaddr, vaddr + len)` in any loaded segment
    /// (data too), as the object holds them before relocation.
    pub fn bytes(&self, vaddr: u64, len: u64) -> Option<&[u8]> {
        let l = self.loads.iter().find(|l| {
            vaddr >= l.vaddr
                && (vaddr - l.vaddr)
                    .checked_add(len)
                    .is_some_and(|e| e <= l.filesz.min(l.memsz))
        })?;
        self.data
            .read_bytes_at((vaddr - l.vaddr).checked_add(l.offset)?, len)
            .ok()
    }

    /// The bounds `[start, end)` of the piece of code holding `vaddr` per
    /// the unwind tables (`.eh_frame`): a function, or a part of one such
    /// as a `.cold` part. Stripped objects keep these tables.
    pub fn code_part_at(&self, vaddr: u64) -> Option<(u64, u64)> {
        let search = self.eh_search.get_or_init(|| {
            self.parse()
                .ok()
                .and_then(|f| eh_frame::eh_search(self, &f))
        });
        if let Some(hit) = search.and_then(|s| eh_frame::eh_lookup(self, &s, vaddr)) {
            return hit;
        }
        let parts = self.parts.get_or_init(|| {
            let mut v = self
                .parse()
                .map(|f| eh_frame::fde_ranges(&f))
                .unwrap_or_default();
            v.sort_unstable();
            v
        });
        let i = parts.partition_point(|p| p.0 <= vaddr);
        let p = *parts.get(i.checked_sub(1)?)?;
        (vaddr < p.1).then_some(p)
    }

    /// The file offset of an address in an executable segment. This is the
    /// offset the kernel's uprobe API takes.
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| l.exec && vaddr >= l.vaddr && vaddr - l.vaddr < l.filesz.min(l.memsz))
            .and_then(|l| (vaddr - l.vaddr).checked_add(l.offset))
    }

    /// The address of a file offset in an executable segment: the inverse
    /// of `vaddr_to_offset`, for addresses read in a running process.
    pub fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| l.exec && offset >= l.offset && offset - l.offset < l.filesz.min(l.memsz))
            .and_then(|l| (offset - l.offset).checked_add(l.vaddr))
    }

    /// The code bytes of `[vaddr, vaddr + len)`, if all are in the file.
    pub fn code(&self, vaddr: u64, len: u64) -> Option<&[u8]> {
        let start = self.vaddr_to_offset(vaddr)?;
        let last = self.vaddr_to_offset(vaddr.checked_add(len)?.checked_sub(1)?)?;
        // Both ends in one segment, contiguous in the file.
        if last.checked_sub(start)?.checked_add(1)? != len {
            return None;
        }
        self.data.read_bytes_at(start, len).ok()
    }

    /// Separate debug information for this object, if it has any.
    pub fn debug_data(&self) -> Option<&DebugData> {
        self.debug
            .get_or_init(|| {
                let file = self.parse().ok()?;
                debuginfo::find(&file, &self.display, &self.open_path)
            })
            .as_ref()
    }

    /// Where symbols of `source` come from, for messages; for a Go binary,
    /// with the Go version that built it.
    pub fn describe_source(&self, source: SymSource) -> String {
        let from = self.describe_symbols(source);
        match self.go() {
            Some(go) => format!(
                "{from}; Go {}",
                go.version.as_deref().unwrap_or("of unknown version")
            ),
            None => from,
        }
    }

    fn describe_symbols(&self, source: SymSource) -> String {
        match (source, self.debug_path()) {
            (SymSource::DebugFile, Some(p)) => format!("the debug file {}", p.display()),
            (SymSource::Dynsym, _) => match self.debug_hint() {
                Some(hint) => format!("{}; {hint}", source.describe()),
                None => source.describe().to_string(),
            },
            _ => source.describe().to_string(),
        }
    }

    /// Where a debug file was looked for, if the object names one and none
    /// was found.
    pub fn debug_hint(&self) -> Option<String> {
        self.debug_hint
            .get_or_init(|| {
                if self.debug_data().is_some() {
                    return None;
                }
                let file = self.parse().ok()?;
                debuginfo::missing_hint(&file, &self.display, &self.open_path)
            })
            .clone()
    }

    /// The path of the separate debug file in use, if any.
    pub fn debug_path(&self) -> Option<&Path> {
        match self.debug_data()? {
            DebugData::File { path, .. } => Some(path),
            DebugData::Mini(_) => None,
        }
    }

    /// The file that holds this object's DWARF: itself, or its debug file.
    pub fn dwarf_data(&self) -> &ReadCache<File> {
        let own_has = self
            .parse()
            .map(|f| f.section_by_name(".debug_info").is_some())
            .unwrap_or(false);
        if own_has {
            return &self.data;
        }
        match self.debug_data() {
            Some(DebugData::File { data, .. }) => data,
            _ => &self.data,
        }
    }

    /// The function symbols, indexed by address (read on first use).
    pub fn symbols(&self) -> Result<&SymbolIndex> {
        self.index
            .get_or_init(|| {
                let (syms, source) = self.function_symbols().map_err(|e| format!("{e:#}"))?;
                Ok(SymbolIndex::new(&syms, source).with_go(self.go().cloned()))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Imported functions by PLT stub and GOT slot (read on first use).
    pub fn imports(&self) -> &Imports {
        self.imports.get_or_init(|| match self.parse() {
            Ok(file) => Imports::load(&file, &|slot| self.slot_import(slot).map(str::to_string)),
            // An object that cannot be parsed imports nothing.
            Err(_) => Imports::default(),
        })
    }

    /// The DWARF line tables, if the object or its debug file has DWARF
    /// (read on first use).
    pub fn line_table(&self) -> Option<&LineTable> {
        self.lines
            .get_or_init(|| LineTable::load(self.dwarf_data()))
            .as_ref()
    }

    /// Whether anything can unwind through this object's code: `decide`
    /// answers on first use, and the answer is kept.
    pub fn unwinds(&self, decide: impl FnOnce(&ElfObject) -> bool) -> bool {
        *self.unwinds.get_or_init(|| decide(self))
    }

    /// Every inlined instance of a function in this object, by entry
    /// address (read from DWARF on first use).
    pub fn all_inlined(&self) -> &[inlined::Instance] {
        self.inlined
            .get_or_init(|| inlined::all_instances(self.dwarf_data()))
    }

    /// The planner's memo of this object (see the field), made on first
    /// use; `None` if it was first asked for as another type.
    pub fn memo<T: std::any::Any + Default>(&self) -> Option<&T> {
        self.memo.get_or_init(|| Box::<T>::default()).downcast_ref()
    }

    /// The dynamic relocations (indexed on first use).
    pub fn dyn_relocs(&self) -> &DynRelocs {
        self.relocs.get_or_init(|| match self.parse() {
            Ok(f) => match self.raw_file() {
                Some(raw) => DynRelocs::read(&f, raw),
                None => DynRelocs::from_all(&f),
            },
            Err(_) => DynRelocs::default(),
        })
    }

    /// The file opened again for reads without the cache, if the path
    /// still names the same file.
    fn raw_file(&self) -> Option<&File> {
        self.raw
            .get_or_init(|| {
                use std::os::unix::fs::MetadataExt;
                let f = crate::target::open_file(&self.open_path).ok()?;
                let m = f.metadata().ok()?;
                ((m.dev(), m.ino()) == self.id).then_some(f)
            })
            .as_ref()
    }

    /// The imported function the GOT slot at `vaddr` holds: the symbol its
    /// dynamic relocation names (the last with a name, if several do).
    pub fn slot_import(&self, vaddr: u64) -> Option<&str> {
        use object::read::elf::Sym;
        let mut symbols = self.dyn_relocs().symbols_at(vaddr).peekable();
        symbols.peek()?;
        let file = self.parse().ok()?;
        let endian = file.endian();
        let table = file.elf_dynamic_symbol_table();
        symbols
            .filter_map(|i| {
                let sym = table.symbol(object::SymbolIndex(i as usize)).ok()?;
                let name = sym.name(endian, table.strings()).ok()?;
                std::str::from_utf8(name).ok().filter(|n| !n.is_empty())
            })
            .last()
    }

    /// What the slot at `vaddr` holds after relative relocation, if a
    /// relative relocation writes it.
    pub fn relocated_slot(&self, vaddr: u64) -> Option<u64> {
        let relocs = self.dyn_relocs();
        relocs.relative_at(vaddr, self.raw_file())
    }

    /// The values the relative relocations store, sorted and unique (read
    /// on first use: every relative relocation).
    pub fn relocated_pointers(&self) -> &[u64] {
        self.pointers.get_or_init(|| {
            let relative = self
                .parse()
                .map(|f| relocs::read_all_relative(&f))
                .unwrap_or_default();
            let mut v: Vec<u64> = relative.iter().map(|r| r.1).collect();
            v.sort_unstable();
            v.dedup();
            v
        })
    }

    /// The addresses where a symbol of either table starts a function,
    /// sorted (read on first use).
    pub fn function_starts(&self) -> &[u64] {
        self.starts.get_or_init(|| read_starts(self))
    }

    /// Times the symbol tables were read (see `symbols`).
    pub fn symbol_table_reads(&self) -> usize {
        self.table_reads.get()
    }

    /// What the Go sections say, if this is a Go binary: one with a
    /// `.go.buildinfo` or `.gopclntab` section, or a `runtime.main`
    /// function (read on first use).
    pub fn go(&self) -> Option<&GoInfo> {
        self.go.get_or_init(|| self.read_go()).as_ref()
    }

    /// Where `runtime.g` keeps its stack bounds and `goid` in this Go
    /// binary: from its DWARF (read on first use) where it has DWARF that
    /// says, else as its Go version lays it out; `None` if it is not Go.
    pub fn go_layout(&self) -> Option<GLayout> {
        let dwarf = *self
            .go_layout
            .get_or_init(|| dwarf::go_g_layout(self.dwarf_data()));
        dwarf.or_else(|| Some(self.go()?.known_layout()))
    }

    fn read_go(&self) -> Option<GoInfo> {
        let file = self.parse().ok()?;
        let buildinfo = file.section_by_name(".go.buildinfo");
        let pclntab = file.section_by_name(".gopclntab");
        if buildinfo.is_none()
            && pclntab.is_none()
            && !has_function(&collect_functions(&file, false), "runtime.main")
        {
            return None;
        }
        let read = |vaddr: u64, len: u64| self.bytes(vaddr, len).map(<[u8]>::to_vec);
        let version = buildinfo
            .and_then(|s| object::ObjectSection::data(&s).ok())
            .and_then(|d| golang::buildinfo_version(d, &read));
        let (entries, pclntab_error) = match self.pclntab_functions(&file) {
            Some(Ok(fs)) => {
                let mut v: Vec<u64> = fs.syms.iter().map(|f| f.addr).collect();
                v.sort_unstable();
                (v, None)
            }
            Some(Err(e)) => (Vec::new(), Some(format!("{e:#}"))),
            None => (Vec::new(), None),
        };
        Some(GoInfo {
            version,
            entries,
            pclntab_error,
        })
    }

    /// The functions of `.gopclntab`, if the object has one.
    fn pclntab_functions<'a>(
        &self,
        file: &ElfFile64<'a, Endianness, &'a ReadCache<File>>,
    ) -> Option<Result<SymTable<'a>>> {
        let sec = file.section_by_name(".gopclntab")?;
        let text = file
            .section_by_name(".text")
            .map_or(0, |t| object::ObjectSection::address(&t));
        Some(
            object::ObjectSection::data(&sec)
                .with_context(|| format!("cannot read .gopclntab of {}", self.display.display()))
                .and_then(|d| golang::pclntab_functions(d, text)),
        )
    }

    /// Function symbols: the full table when the object has one, else the
    /// dynamic one. Reads the tables each time: use `symbols` for lookups.
    pub fn function_symbols(&self) -> Result<(SymTable<'_>, SymSource)> {
        self.table_reads.set(self.table_reads.get() + 1);
        let file = self.parse()?;
        let full = collect_functions(&file, false);
        if !full.is_empty() {
            return Ok((full, SymSource::Symtab));
        }
        // A stripped Go binary keeps the runtime's function table.
        if let Some(go) = self.pclntab_functions(&file) {
            let funcs = go.with_context(|| {
                format!(
                    "{} is a stripped Go binary whose function table cannot be read",
                    self.display.display()
                )
            })?;
            if !funcs.is_empty() {
                return Ok((funcs, SymSource::Gopclntab));
            }
        }
        let from_debug = match self.debug_data() {
            Some(DebugData::File { data, .. }) => ElfFile64::<Endianness, _>::parse(data)
                .ok()
                .map(|f| (collect_functions(&f, false), SymSource::DebugFile)),
            Some(DebugData::Mini(bytes)) => ElfFile64::<Endianness, _>::parse(&bytes[..])
                .ok()
                .map(|f| (collect_functions(&f, false), SymSource::MiniDebugInfo)),
            None => None,
        };
        if let Some((syms, src)) = from_debug.filter(|(s, _)| !s.is_empty()) {
            return Ok((syms, src));
        }
        let dynamic = collect_functions(&file, true);
        if dynamic.is_empty() {
            bail!(
                "{} has no function symbols (stripped, and exports nothing)",
                self.display.display()
            );
        }
        Ok((dynamic, SymSource::Dynsym))
    }
}

impl LoadedBytes for ElfObject {
    fn bytes(&self, vaddr: u64, len: u64) -> Option<&[u8]> {
        ElfObject::bytes(self, vaddr, len)
    }
}

/// The names of a symbol table's entries, by index ("" where unreadable),
/// from its string table read in one piece.
pub fn symbol_names<'a, R: ReadRef<'a>>(
    file: &ElfFile64<'a, Endianness, R>,
    dynamic: bool,
) -> Vec<&'a str> {
    use object::read::elf::{SectionHeader, Sym};
    let endian = file.endian();
    let table = if dynamic {
        file.elf_dynamic_symbol_table()
    } else {
        file.elf_symbol_table()
    };
    let strings = file
        .elf_section_table()
        .section(table.string_section())
        .and_then(|sec| sec.data(endian, file.data()))
        .unwrap_or(&[]);
    table
        .symbols()
        .iter()
        .map(|s| {
            strings
                .get(s.st_name(endian) as usize..)
                .and_then(|t| t.iter().position(|&b| b == 0).map(|e| &t[..e]))
                .and_then(|b| std::str::from_utf8(b).ok())
                .unwrap_or("")
        })
        .collect()
}

/// Whether a table has a function of this name: its string table is
/// searched first, most often in vain.
fn has_function(table: &SymTable<'_>, name: &str) -> bool {
    let mut whole = name.as_bytes().to_vec();
    whole.push(0);
    memchr::memmem::find(table.strings, &whole).is_some() && table.iter().any(|s| s.name == name)
}

/// The function symbols of one table, their names left in its string
/// table (read in one piece: through a read cache, reading each name apart
/// would cost a read per symbol).
fn collect_functions<'a, R: ReadRef<'a>>(
    file: &ElfFile64<'a, Endianness, R>,
    dynamic: bool,
) -> SymTable<'a> {
    use object::read::elf::{SectionHeader, Sym};
    let endian = file.endian();
    let table = if dynamic {
        file.elf_dynamic_symbol_table()
    } else {
        file.elf_symbol_table()
    };
    if table.is_empty() {
        return SymTable::default();
    }
    let Ok(strsec) = file.elf_section_table().section(table.string_section()) else {
        return SymTable::default();
    };
    let Ok(strings) = strsec.data(endian, file.data()) else {
        return SymTable::default();
    };
    let mut ifuncs = Vec::new();
    let mut syms: Vec<(bool, TableSym)> = table
        .symbols()
        .iter()
        .filter_map(|s| {
            let kind = s.st_type();
            if kind != elf::STT_FUNC && kind != elf::STT_GNU_IFUNC {
                return None;
            }
            if kind == elf::STT_GNU_IFUNC && s.st_shndx(endian) != elf::SHN_UNDEF {
                ifuncs.push(s.st_value(endian));
            }
            let size = s.st_size(endian);
            if s.st_shndx(endian) == elf::SHN_UNDEF || size == 0 {
                return None;
            }
            // An empty or absent name: its first byte is no character.
            let name = s.st_name(endian);
            strings.get(name as usize).filter(|&&b| b != 0)?;
            let local = s.st_bind() == elf::STB_LOCAL;
            Some((
                local,
                TableSym {
                    name,
                    addr: s.st_value(endian),
                    size,
                },
            ))
        })
        .collect();
    // A table lists its local symbols first; where a local alias and an
    // exported name start at one address (glibc's `__libc_start_main_alias_2`
    // and `__libc_start_main`), the exported name is the one a user knows:
    // put globals ahead, keeping each group's order (the index sorts stably).
    syms.sort_by_key(|&(local, _)| local);
    let syms = syms.into_iter().map(|(_, s)| s).collect();
    SymTable {
        strings,
        syms,
        ifuncs,
    }
}

fn machine_name(m: u16) -> String {
    match m {
        elf::EM_AARCH64 => "aarch64".into(),
        elf::EM_386 => "i386".into(),
        elf::EM_RISCV => "riscv".into(),
        elf::EM_PPC64 => "ppc64".into(),
        elf::EM_S390 => "s390".into(),
        elf::EM_ARM => "arm".into(),
        other => format!("machine type {other}"),
    }
}

/// Where the functions of an object start: every function symbol, and
/// every symbol of the dynamic table too (a stripped object's full table is
/// gone, and its exports still start functions). Sorted and unique.
fn read_starts(obj: &ElfObject) -> Vec<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwind_search_table_agrees_with_every_entry() {
        // The binary searches of `.eh_frame_hdr` answer as the walk of every
        // entry of `.eh_frame` does, at each entry's first, last and next
        // byte, on the test binary and on a large C++ library.
        let mut objects = vec![std::env::current_exe().unwrap()];
        let cxx = std::path::PathBuf::from("/usr/lib/x86_64-linux-gnu/libstdc++.so.6");
        if cxx.exists() {
            objects.push(cxx);
        }
        for path in objects {
            let obj = ElfObject::open(&path, &path).unwrap();
            let file = obj.parse().unwrap();
            let search = super::eh_frame::eh_search(&obj, &file).expect("search table");
            let mut all = super::eh_frame::fde_ranges(&file);
            all.sort_unstable();
            assert!(all.len() > 100);
            let walk = |a: u64| {
                let i = all.partition_point(|p| p.0 <= a);
                i.checked_sub(1).map(|i| all[i]).filter(|p| a < p.1)
            };
            for &(start, end) in &all {
                for a in [start, end - 1, end] {
                    use super::eh_frame::{eh_lookup_general, eh_lookup_usual};
                    let hit = eh_lookup_general(&obj, &search, a);
                    assert_eq!(hit, Some(walk(a)), "{} at {a:#x}", path.display());
                    // Both objects have the layout the short lookup reads.
                    let hit = eh_lookup_usual(&obj, &search, a);
                    assert_eq!(hit, Some(walk(a)), "{} at {a:#x}", path.display());
                }
            }
        }
    }

    #[test]
    fn vaddr_to_offset_agrees_with_section_headers_on_every_symbol() {
        // A second, section-based computation over every function of the
        // test binary itself.
        let exe = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&exe, &exe).unwrap();
        let file = obj.parse().unwrap();
        let (syms, _) = obj.function_symbols().unwrap();
        assert!(syms.len() > 100);
        let mut checked = 0;
        for s in syms.iter() {
            let Some(sec) = file
                .sections()
                .find(|sec| sec.address() <= s.addr && s.addr < sec.address() + sec.size())
            else {
                continue;
            };
            let Some((sec_off, _)) = sec.file_range() else {
                continue;
            };
            let expected = s.addr - sec.address() + sec_off;
            assert_eq!(obj.vaddr_to_offset(s.addr), Some(expected), "{}", s.name);
            checked += 1;
        }
        assert!(checked > 100);
    }

    #[test]
    fn an_exported_name_wins_over_a_local_alias_at_its_address() {
        // glibc's debug file names `__libc_start_main` twice at one address:
        // a local `__libc_start_main_alias_2` (listed first, as locals are)
        // and the exported name. Frames and sites take the exported one.
        use object::write::{Object as Out, Symbol, SymbolSection};
        use object::{Architecture, BinaryFormat, SymbolFlags, SymbolScope};
        let mut out = Out::new(
            BinaryFormat::Elf,
            Architecture::X86_64,
            object::Endianness::Little,
        );
        let text = out.section_id(object::write::StandardSection::Text);
        out.append_section_data(text, &[0xc3; 32], 16);
        for (name, scope, value) in [
            ("start_alias_2", SymbolScope::Compilation, 0),
            ("start", SymbolScope::Dynamic, 0),
            ("other_local", SymbolScope::Compilation, 16),
        ] {
            out.add_symbol(Symbol {
                name: name.as_bytes().to_vec(),
                value,
                size: 16,
                kind: object::SymbolKind::Text,
                scope,
                weak: false,
                section: SymbolSection::Section(text),
                flags: SymbolFlags::None,
            });
        }
        let tmp = std::env::temp_dir().join(format!("tachy-alias-{}.o", std::process::id()));
        std::fs::write(&tmp, out.write().unwrap()).unwrap();
        let obj = ElfObject::open(&tmp, &tmp).unwrap();
        let index = obj.symbols().unwrap();
        std::fs::remove_file(&tmp).unwrap();
        assert_eq!(index.name_starting_at(0), Some("start"));
        assert_eq!(index.name_starting_at(16), Some("other_local"));
    }

    #[test]
    fn rejects_non_elf() {
        let p = Path::new("/proc/self/status");
        let tmp = std::env::temp_dir().join(format!("tachy-notelf-{}", std::process::id()));
        std::fs::write(&tmp, b"hello world, not an elf").unwrap();
        let err = ElfObject::open(p, &tmp).unwrap_err().to_string();
        std::fs::remove_file(&tmp).unwrap();
        assert_eq!(err, "/proc/self/status is not an ELF file");
    }
}
