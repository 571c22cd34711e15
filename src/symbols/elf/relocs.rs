//! An object's dynamic relocations, read once in one pass through a small
//! buffer: what a slot holds after relative relocation, and which symbol a
//! slot is bound to. A large C++ library has hundreds of thousands of
//! relative relocations (8 MB of `.rela.dyn` in libLLVM); they are left in
//! the file and searched there, not copied into memory.

use std::fs::File;
use std::os::unix::fs::FileExt;

use object::elf;
use object::read::elf::{ElfFile64, Rela, SectionHeader};
use object::{Endianness, ReadRef};

/// `R_X86_64_RELATIVE`: the slot holds the load address plus the addend.
pub const R_X86_64_RELATIVE: u32 = 8;

/// Entries per block of the sparse index of a run of relative relocations:
/// a lookup reads one block (6 KiB) from the file.
const BLOCK: usize = 256;

/// Bytes read per step of the pass over the relocation sections.
const CHUNK: usize = 2730 * 24;

/// One section's relative relocations when they stand together, sorted by
/// slot, as linkers write them (`-z combreloc`): searched in the file.
#[derive(Debug)]
struct Run {
    /// File offset of the first relative relocation.
    offset: u64,
    /// Number of relocations in the run.
    count: usize,
    /// Size of one entry (24 with addends, 16 without).
    entsize: usize,
    /// The slot of every BLOCK-th entry, from the first.
    firsts: Vec<u64>,
}

/// Where the relative relocations are.
#[derive(Debug)]
enum Relative {
    /// None at all.
    None,
    /// In one sorted run, left in the file.
    Run(Run),
    /// Scattered or unsorted: all of them, read, `(slot, value)` sorted by
    /// slot, the last of a slot relocated twice.
    Table(Vec<(u64, u64)>),
}

/// The dynamic relocations of one object.
#[derive(Debug)]
pub struct DynRelocs {
    endian: Endianness,
    relative: Relative,
    /// Relocations against a symbol: `(slot, dynamic symbol index)`, by
    /// slot; equal slots keep their order in the file.
    symbolic: Vec<(u64, u32)>,
}

impl Default for DynRelocs {
    /// An object without dynamic relocations.
    fn default() -> DynRelocs {
        DynRelocs {
            endian: Endianness::Little,
            relative: Relative::None,
            symbolic: Vec::new(),
        }
    }
}

/// One relocation as the pass sees it.
struct Entry {
    slot: u64,
    kind: u32,
    sym: u32,
    addend: i64,
}

fn entry(bytes: &[u8], rela: bool, endian: Endianness) -> Option<Entry> {
    if rela {
        let (r, _) = object::pod::from_bytes::<elf::Rela64<Endianness>>(bytes).ok()?;
        Some(Entry {
            slot: r.r_offset(endian),
            kind: r.r_type(endian, false),
            sym: r.r_sym(endian, false),
            addend: r.r_addend(endian),
        })
    } else {
        let (r, _) = object::pod::from_bytes::<elf::Rel64<Endianness>>(bytes).ok()?;
        Some(Entry {
            slot: r.r_offset.get(endian),
            kind: r.r_type(endian),
            sym: r.r_sym(endian),
            addend: 0,
        })
    }
}

/// Follows whether the relative relocations seen so far form one sorted
/// run.
enum RunState {
    /// None seen yet.
    Before,
    /// In a run (still open: the last entry seen was relative).
    Open(Run, u64),
    /// A run that ended; no relative relocation may follow.
    Closed(Run),
    /// Not one sorted run.
    Broken,
}

impl RunState {
    /// The state after one more relocation, at file `offset`: relative,
    /// writing `slot`, or not (`None`).
    fn step(self, slot: Option<u64>, offset: u64, entsize: usize) -> RunState {
        match (self, slot) {
            (RunState::Before, Some(slot)) => RunState::Open(
                Run {
                    offset,
                    count: 1,
                    entsize,
                    firsts: vec![slot],
                },
                slot,
            ),
            (RunState::Open(mut run, last), Some(slot)) if slot >= last => {
                if run.count % BLOCK == 0 {
                    run.firsts.push(slot);
                }
                run.count += 1;
                RunState::Open(run, slot)
            }
            (RunState::Open(run, _), None) => RunState::Closed(run),
            (RunState::Open(..) | RunState::Closed(_), Some(_)) => RunState::Broken,
            (s, None) => s,
            (RunState::Broken, Some(_)) => RunState::Broken,
        }
    }
}

impl DynRelocs {
    /// Reads the dynamic relocations of `file` (whose bytes `raw` reads
    /// without caching): the sections of type REL or RELA linked to the
    /// dynamic symbol table, in section order.
    pub fn read<'d, R: ReadRef<'d>>(file: &ElfFile64<'d, Endianness, R>, raw: &File) -> DynRelocs {
        let endian = file.endian();
        let dynsym = file.elf_dynamic_symbol_table().section();
        let mut symbolic = Vec::new();
        let mut state = RunState::Before;
        let mut buf = vec![0u8; CHUNK];
        for section in file.elf_section_table().iter() {
            if section.link(endian) != dynsym {
                continue;
            }
            let (rela, entsize) = match section.sh_type(endian) {
                elf::SHT_RELA => (true, 24usize),
                elf::SHT_REL => (false, 16usize),
                _ => continue,
            };
            let Some((start, size)) = section.file_range(endian) else {
                continue;
            };
            let count = (size / entsize as u64) as usize;
            // A run ends with its section.
            if let RunState::Open(run, _) = state {
                state = RunState::Closed(run);
            }
            let per_chunk = CHUNK / entsize;
            let mut i = 0usize;
            while i < count {
                let n = per_chunk.min(count - i);
                let at = start + (i * entsize) as u64;
                if raw.read_exact_at(&mut buf[..n * entsize], at).is_err() {
                    // What cannot be read is not known: nothing is searched
                    // in this section's part that was not read.
                    state = RunState::Broken;
                    break;
                }
                for k in 0..n {
                    let Some(e) = entry(&buf[k * entsize..(k + 1) * entsize], rela, endian) else {
                        continue;
                    };
                    if e.sym != 0 {
                        symbolic.push((e.slot, e.sym));
                    }
                    let relative = e.kind == R_X86_64_RELATIVE && e.sym == 0;
                    let offset = start + ((i + k) * entsize) as u64;
                    state = state.step(relative.then_some(e.slot), offset, entsize);
                }
                i += n;
            }
        }
        symbolic.sort_by_key(|s| s.0);
        let relative = match state {
            RunState::Before => Relative::None,
            RunState::Open(run, _) | RunState::Closed(run) => Relative::Run(run),
            RunState::Broken => Relative::Table(read_all_relative(file)),
        };
        DynRelocs {
            endian,
            relative,
            symbolic,
        }
    }

    /// The dynamic relocations of `file`, read whole through its own
    /// reader (when the file cannot be read apart from it).
    pub fn from_all<'d, R: ReadRef<'d>>(file: &ElfFile64<'d, Endianness, R>) -> DynRelocs {
        use object::{Object, RelocationTarget};
        let mut symbolic: Vec<(u64, u32)> = file
            .dynamic_relocations()
            .into_iter()
            .flatten()
            .filter_map(|(off, r)| match r.target() {
                RelocationTarget::Symbol(i) => Some((off, i.0 as u32)),
                _ => None,
            })
            .collect();
        symbolic.sort_by_key(|s| s.0);
        DynRelocs {
            endian: file.endian(),
            relative: Relative::Table(read_all_relative(file)),
            symbolic,
        }
    }

    /// What the slot at `addr` holds after relative relocation, if a
    /// relative relocation writes it (the last one, if several do). A run
    /// left in the file is read through `raw`.
    pub fn relative_at(&self, addr: u64, raw: Option<&File>) -> Option<u64> {
        match &self.relative {
            Relative::None => None,
            Relative::Table(t) => t.binary_search_by_key(&addr, |r| r.0).ok().map(|i| t[i].1),
            Relative::Run(run) => {
                // The last block starting at or before `addr` holds the
                // last relocation of that slot, if any.
                let b = run.firsts.partition_point(|&s| s <= addr).checked_sub(1)?;
                let first = b * BLOCK;
                let n = BLOCK.min(run.count - first);
                let mut buf = vec![0u8; n * run.entsize];
                raw?.read_exact_at(&mut buf, run.offset + (first * run.entsize) as u64)
                    .ok()?;
                let rela = run.entsize == 24;
                let entries: Vec<Entry> = buf
                    .chunks_exact(run.entsize)
                    .filter_map(|c| entry(c, rela, self.endian))
                    .collect();
                let i = entries.partition_point(|e| e.slot <= addr).checked_sub(1)?;
                (entries[i].slot == addr).then_some(entries[i].addend as u64)
            }
        }
    }

    /// The dynamic symbol indices bound to the slot at `addr`, in file
    /// order.
    pub fn symbols_at(&self, addr: u64) -> impl Iterator<Item = u32> + '_ {
        let from = self.symbolic.partition_point(|s| s.0 < addr);
        self.symbolic[from..]
            .iter()
            .take_while(move |s| s.0 == addr)
            .map(|s| s.1)
    }

    /// Every relocation against a symbol: `(slot, dynamic symbol index)`.
    pub fn symbolic(&self) -> &[(u64, u32)] {
        &self.symbolic
    }
}

/// The relocations of the PLT's GOT slots (`.rela.plt`), `(slot, dynamic
/// symbol index)` in table order, when that table is the last of the
/// object's dynamic relocation tables: then no other relocates a slot after
/// it, and its last relocation of a slot is the one that stands. Reads a
/// few KiB where the whole pass (`DynRelocs::read`) reads every relative
/// relocation too. `None` where the PLT table is missing or not last.
pub fn plt_symbols<'d, R: ReadRef<'d>>(
    file: &ElfFile64<'d, Endianness, R>,
) -> Option<Vec<(u64, u32)>> {
    let endian = file.endian();
    let dynsym = file.elf_dynamic_symbol_table().section();
    let last = file.elf_section_table().iter().rfind(|s| {
        s.link(endian) == dynsym && matches!(s.sh_type(endian), elf::SHT_RELA | elf::SHT_REL)
    })?;
    let name = file.elf_section_table().section_name(endian, last).ok()?;
    let rela = match name {
        b".rela.plt" => true,
        b".rel.plt" => false,
        _ => return None,
    };
    let size = if rela { 24 } else { 16 };
    let data = last.data(endian, file.data()).ok()?;
    Some(
        data.chunks_exact(size)
            .filter_map(|b| entry(b, rela, endian))
            .filter(|e| e.sym != 0)
            .map(|e| (e.slot, e.sym))
            .collect(),
    )
}

/// `R_X86_64_IRELATIVE`: the slot holds what the resolver at the load
/// address plus the addend returns.
pub const R_X86_64_IRELATIVE: u32 = 37;

/// Every IRELATIVE relocation of an object, as `(slot, resolver)`.
pub fn read_irelative<'d, R: ReadRef<'d>>(file: &ElfFile64<'d, Endianness, R>) -> Vec<(u64, u64)> {
    use object::{Object, RelocationFlags};
    let Some(relocs) = file.dynamic_relocations() else {
        return Vec::new();
    };
    relocs
        .filter(|(_, r)| {
            matches!(r.flags(), RelocationFlags::Elf { r_type } if r_type == R_X86_64_IRELATIVE)
        })
        .map(|(off, r)| (off, r.addend() as u64))
        .collect()
}

/// Every relative relocation of an object, `(slot, value)` sorted by slot;
/// where a slot is relocated twice, the last one stands (as the loader
/// applies them in order).
pub fn read_all_relative<'d, R: ReadRef<'d>>(
    file: &ElfFile64<'d, Endianness, R>,
) -> Vec<(u64, u64)> {
    use object::{Object, RelocationFlags, RelocationTarget};
    let mut out = Vec::new();
    if let Some(relocs) = file.dynamic_relocations() {
        for (off, r) in relocs {
            let relative = matches!(
                r.flags(),
                RelocationFlags::Elf { r_type } if r_type == R_X86_64_RELATIVE
            ) && matches!(r.target(), RelocationTarget::Absolute);
            if relative {
                out.push((off, r.addend() as u64));
            }
        }
    }
    // Linkers emit them sorted already; stable, so that the last of equal
    // slots stays last.
    if !out.windows(2).all(|w| w[0].0 <= w[1].0) {
        out.sort_by_key(|r| r.0);
    }
    let mut dedup: Vec<(u64, u64)> = Vec::with_capacity(out.len());
    for r in out {
        match dedup.last_mut() {
            Some(last) if last.0 == r.0 => *last = r,
            _ => dedup.push(r),
        }
    }
    dedup
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::ElfObject;
    use object::{Object, RelocationTarget};
    use std::path::PathBuf;

    fn objects() -> Vec<PathBuf> {
        let mut v = vec![std::env::current_exe().unwrap()];
        for p in [
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1",
        ] {
            if std::path::Path::new(p).exists() {
                v.push(p.into());
            }
        }
        v
    }

    #[test]
    fn relative_slots_agree_with_every_relocation_read() {
        // Searching the file answers as the table of every relative
        // relocation does: at each slot (every 7th in a large object), the
        // byte after it, and the byte before it.
        for path in objects() {
            let obj = ElfObject::open(&path, &path).unwrap();
            let file = obj.parse().unwrap();
            let all = read_all_relative(&file);
            assert!(!all.is_empty(), "{}", path.display());
            let step = if all.len() > 50_000 { 7 } else { 1 };
            for (slot, value) in all.iter().step_by(step) {
                assert_eq!(
                    obj.relocated_slot(*slot),
                    Some(*value),
                    "{}",
                    path.display()
                );
                for near in [slot + 1, slot - 1] {
                    let want = all
                        .binary_search_by_key(&near, |r| r.0)
                        .ok()
                        .map(|i| all[i].1);
                    assert_eq!(obj.relocated_slot(near), want, "{}", path.display());
                }
            }
        }
    }

    #[test]
    fn slot_imports_agree_with_every_symbol_relocation() {
        use crate::symbols::elf::symbol_names;
        for path in objects() {
            let obj = ElfObject::open(&path, &path).unwrap();
            let file = obj.parse().unwrap();
            let names = symbol_names(&file, true);
            let mut want = std::collections::HashMap::new();
            for (off, r) in file.dynamic_relocations().into_iter().flatten() {
                if let RelocationTarget::Symbol(i) = r.target() {
                    if let Some(n) = names.get(i.0).filter(|n| !n.is_empty()) {
                        want.insert(off, *n);
                    }
                }
            }
            assert!(!want.is_empty(), "{}", path.display());
            for (slot, name) in &want {
                assert_eq!(obj.slot_import(*slot), Some(*name), "{}", path.display());
                if !want.contains_key(&(slot + 1)) {
                    assert_eq!(obj.slot_import(slot + 1), None);
                }
            }
        }
    }

    #[test]
    fn plt_table_names_its_slots_as_the_pass_over_all_does() {
        use crate::symbols::elf::symbol_names;
        let mut read = 0;
        for path in objects() {
            let obj = ElfObject::open(&path, &path).unwrap();
            let file = obj.parse().unwrap();
            let names = symbol_names(&file, true);
            let Some(plt) = plt_symbols(&file) else {
                continue;
            };
            read += 1;
            assert!(!plt.is_empty(), "{}", path.display());
            for (slot, sym) in plt {
                let name = names[sym as usize];
                assert_eq!(obj.slot_import(slot), Some(name), "{}", path.display());
            }
        }
        // libstdc++ and the test binary have their PLT table last.
        assert!(read >= 2);
    }

    #[test]
    fn one_sorted_run_or_the_whole_table() {
        let run = |steps: &[Option<u64>]| {
            let mut st = RunState::Before;
            for (i, s) in steps.iter().enumerate() {
                st = st.step(*s, 24 * i as u64, 24);
            }
            match st {
                RunState::Open(r, _) | RunState::Closed(r) => Some((r.offset, r.count)),
                _ => None,
            }
        };
        // Sorted, slots repeated, others after: a run from the first.
        assert_eq!(
            run(&[None, Some(8), Some(8), Some(16), None, None]),
            Some((24, 3))
        );
        // Out of order, or a second run: read whole.
        assert_eq!(run(&[Some(16), Some(8)]), None);
        assert_eq!(run(&[Some(8), None, Some(16)]), None);
        // The sparse index holds the first slot of every block.
        let mut st = RunState::Before;
        for i in 0..(2 * BLOCK as u64 + 1) {
            st = st.step(Some(i * 8), i * 24, 24);
        }
        let RunState::Open(r, _) = st else {
            panic!("one run")
        };
        assert_eq!(r.firsts, [0, BLOCK as u64 * 8, 2 * BLOCK as u64 * 8]);
    }
}
