//! User stacks: unwinds a copy of a thread's stack with the unwind tables
//! (`.eh_frame`) of the objects the process maps, falling back to frame
//! pointers where an address has none, and names each frame with tachy's
//! symbol index and DWARF (the innermost inlined function too), as `--by
//! caller` names callers. Also decides whether an object keeps frame
//! pointers, so that a stack can be walked by them in the kernel. Used by
//! the explorer's profile and by `--stack`. Reads the process's maps and
//! objects; attaches nothing.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use crate::symbols::elf::lines::Location;
use crate::symbols::ElfObject;
use crate::target::{self, Mapping};

/// A copy of a thread's user stack and the registers an unwinder starts
/// from.
pub struct UserStack<'a> {
    /// The first frame's address: the interrupted instruction, or (`ret`)
    /// a return address.
    pub ip: u64,
    pub ret: bool,
    pub sp: u64,
    pub bp: u64,
    /// The address `bytes` were copied from.
    pub base: u64,
    pub bytes: &'a [u8],
}

/// Frames unwound at most per stack.
pub const MAX_FRAMES: usize = 96;

/// A frame as a row of the profile knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The object's path as the process maps it.
    pub object: PathBuf,
    /// The symbol's raw name (what tracing attaches to); empty when no
    /// symbol holds the address.
    pub raw: String,
    /// The function's demangled name (or `object+0xoffset`).
    pub name: String,
    /// The innermost function DWARF says was inlined at the address, if any.
    pub inlined: Option<String>,
}

/// How to find the caller's frame from a frame at one address (x86-64):
/// CFA = register + offset, the return address and the saved rbp at CFA +
/// their offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule {
    /// 7: rsp, 6: rbp (DWARF numbers).
    cfa_reg: u16,
    cfa_off: i64,
    ra_off: i64,
    bp_off: Option<i64>,
}

/// An object of the process, with what unwinding reads of it.
struct Object {
    elf: ElfObject,
    eh: Option<EhTables>,
    rules: RefCell<HashMap<u64, Option<Rule>>>,
}

struct EhTables {
    frame: Vec<u8>,
    frame_addr: u64,
    hdr: Option<(Vec<u8>, u64)>,
    text: u64,
}

impl EhTables {
    fn load(elf: &ElfObject) -> Option<EhTables> {
        use object::{Object as _, ObjectSection};
        let file = elf.parse().ok()?;
        let sec = |name: &str| {
            let s = file.section_by_name(name)?;
            let data = crate::symbols::elf::section_data(&s)?.into_owned();
            Some((data, s.address()))
        };
        let (frame, frame_addr) = sec(".eh_frame")?;
        Some(EhTables {
            frame,
            frame_addr,
            hdr: sec(".eh_frame_hdr"),
            text: file.section_by_name(".text").map_or(0, |t| t.address()),
        })
    }

    /// The unwind rule at `vaddr`, if the tables have one this unwinder
    /// can follow.
    fn rule(&self, vaddr: u64) -> Option<Rule> {
        use gimli::{
            BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext,
            UnwindSection, X86_64,
        };
        let eh = EhFrame::new(&self.frame, LittleEndian);
        let mut bases = BaseAddresses::default()
            .set_eh_frame(self.frame_addr)
            .set_text(self.text);
        let mut ctx = UnwindContext::new();
        let row = match &self.hdr {
            Some((hdr, addr)) => {
                bases = bases.set_eh_frame_hdr(*addr);
                let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()?;
                match parsed.table() {
                    Some(t) => t
                        .unwind_info_for_address(
                            &eh,
                            &bases,
                            &mut ctx,
                            vaddr,
                            EhFrame::cie_from_offset,
                        )
                        .ok()?
                        .clone(),
                    None => eh
                        .unwind_info_for_address(&bases, &mut ctx, vaddr, EhFrame::cie_from_offset)
                        .ok()?
                        .clone(),
                }
            }
            None => eh
                .unwind_info_for_address(&bases, &mut ctx, vaddr, EhFrame::cie_from_offset)
                .ok()?
                .clone(),
        };
        let (cfa_reg, cfa_off) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset }
                if *register == X86_64::RSP || *register == X86_64::RBP =>
            {
                (register.0, *offset)
            }
            _ => return None,
        };
        let ra_off = match row.register(X86_64::RA) {
            RegisterRule::Offset(o) => o,
            _ => return None,
        };
        let bp_off = match row.register(X86_64::RBP) {
            RegisterRule::Offset(o) => Some(o),
            _ => None,
        };
        Some(Rule {
            cfa_reg,
            cfa_off,
            ra_off,
            bp_off,
        })
    }
}

/// One process's objects, unwind rules and frame names, read once each.
pub struct Stacks {
    pid: u32,
    maps: Vec<Mapping>,
    objects: HashMap<PathBuf, Option<Rc<Object>>>,
    /// Frames named so far, by address and whether it is a return address.
    names: HashMap<(u64, bool), Frame>,
    /// Where the kernel's vDSO is mapped (no file to read symbols from).
    vdso: Option<(u64, u64)>,
}

/// The address range of the `[vdso]` mapping of process `pid`.
fn vdso_range(pid: u32) -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    Some((
        u64::from_str_radix(start, 16).ok()?,
        u64::from_str_radix(end, 16).ok()?,
    ))
}

impl Stacks {
    pub fn new(pid: u32) -> Stacks {
        Stacks {
            pid,
            maps: target::exec_mappings(pid).unwrap_or_default(),
            objects: HashMap::new(),
            names: HashMap::new(),
            vdso: vdso_range(pid),
        }
    }

    /// Reads the process's maps again while it runs: a stack read after it
    /// has exited is named by the last maps read.
    pub fn refresh(&mut self) {
        if let (true, Ok(m)) = (
            target::process_alive(self.pid),
            target::exec_mappings(self.pid),
        ) {
            if !m.is_empty() {
                self.maps = m;
                self.vdso = vdso_range(self.pid).or(self.vdso);
            }
        }
    }

    /// The mapping holding `addr`, the maps read again on a miss while the
    /// process runs (it loaded a library).
    fn mapping(&mut self, addr: u64) -> Option<Mapping> {
        let find = |maps: &[Mapping]| {
            maps.iter()
                .find(|m| addr >= m.start && addr < m.end)
                .cloned()
        };
        if let Some(m) = find(&self.maps) {
            return Some(m);
        }
        if target::process_alive(self.pid) {
            if let Ok(m) = target::exec_mappings(self.pid) {
                self.maps = m;
            }
        }
        find(&self.maps)
    }

    /// The object mapped at `addr` and the address's vaddr in it.
    fn object_at(&mut self, addr: u64) -> Option<(Rc<Object>, u64, PathBuf)> {
        let m = self.mapping(addr)?;
        let obj = self
            .objects
            .entry(m.object.display.clone())
            .or_insert_with(|| {
                let elf = ElfObject::open(&m.object.display, &m.object.open_path)
                    .or_else(|_| ElfObject::open(&m.object.display, &m.object.display))
                    .ok()?;
                let eh = EhTables::load(&elf);
                Some(Rc::new(Object {
                    elf,
                    eh,
                    rules: RefCell::new(HashMap::new()),
                }))
            })
            .clone()?;
        let vaddr = obj.elf.offset_to_vaddr(addr - m.start + m.offset)?;
        Some((obj, vaddr, m.object.display))
    }

    fn rule_at(&mut self, addr: u64) -> Option<Rule> {
        let (obj, vaddr, _) = self.object_at(addr)?;
        let eh = obj.eh.as_ref()?;
        let rule = *obj
            .rules
            .borrow_mut()
            .entry(vaddr)
            .or_insert_with(|| eh.rule(vaddr));
        rule
    }

    /// The stack's addresses, innermost first: the first frame's (`e.ip`),
    /// then return addresses.
    pub fn unwind(&mut self, e: &UserStack<'_>) -> Vec<u64> {
        let end = e.base + e.bytes.len() as u64;
        let read = |addr: u64| -> Option<u64> {
            if addr < e.base || addr.checked_add(8)? > end {
                return None;
            }
            let at = (addr - e.base) as usize;
            Some(u64::from_ne_bytes(e.bytes[at..at + 8].try_into().ok()?))
        };
        let (mut ip, mut sp, mut bp) = (e.ip, e.sp, e.bp);
        let mut out = vec![ip];
        while out.len() < MAX_FRAMES {
            // A return address's call is the byte before it.
            let at = if out.len() == 1 && !e.ret {
                ip
            } else {
                ip.wrapping_sub(1)
            };
            let (cfa, ra, next_bp) = match self.rule_at(at) {
                Some(r) => {
                    let base = if r.cfa_reg == 7 { sp } else { bp };
                    let cfa = base.wrapping_add_signed(r.cfa_off);
                    let Some(ra) = read(cfa.wrapping_add_signed(r.ra_off)) else {
                        break;
                    };
                    let next_bp = match r.bp_off {
                        Some(o) => read(cfa.wrapping_add_signed(o)).unwrap_or(bp),
                        None => bp,
                    };
                    (cfa, ra, next_bp)
                }
                // No table: the frame-pointer chain, if it stays on the stack.
                None => {
                    if bp < sp {
                        break;
                    }
                    let (Some(ra), Some(next_bp)) = (read(bp + 8), read(bp)) else {
                        break;
                    };
                    (bp + 16, ra, next_bp)
                }
            };
            if ra == 0 || cfa <= sp {
                break;
            }
            ip = ra;
            sp = cfa;
            bp = next_bp;
            out.push(ip);
        }
        out
    }

    /// Names the frame at `addr`; `ret`: a return address (named by its
    /// call, the byte before).
    pub fn name(&mut self, addr: u64, ret: bool) -> Frame {
        if let Some(f) = self.names.get(&(addr, ret)) {
            return f.clone();
        }
        let f = self.name_uncached(if ret { addr.saturating_sub(1) } else { addr });
        self.names.insert((addr, ret), f.clone());
        f
    }

    /// The source line of the frame at `addr` (`ret`: a return address,
    /// located by its call), with the function inlined there, if any.
    pub fn locate(&mut self, addr: u64, ret: bool) -> Option<Location> {
        let addr = if ret { addr.saturating_sub(1) } else { addr };
        let (obj, vaddr, _) = self.object_at(addr)?;
        obj.elf.line_table()?.locate(vaddr)
    }

    fn name_uncached(&mut self, addr: u64) -> Frame {
        let Some((obj, vaddr, display)) = self.object_at(addr) else {
            let place = match self.vdso {
                Some((start, end)) if addr >= start && addr < end => "[vdso]",
                _ => "[unknown]",
            };
            return Frame {
                object: PathBuf::from(place),
                raw: String::new(),
                name: place.into(),
                inlined: None,
            };
        };
        let func = obj
            .elf
            .symbols()
            .ok()
            .and_then(|s| s.function_containing(vaddr));
        let inlined = obj
            .elf
            .line_table()
            .and_then(|t| t.locate(vaddr))
            .and_then(|l| l.inlined);
        let base = display.file_name().map_or_else(
            || display.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        match func {
            Some(f) => Frame {
                object: display,
                name: f.display_name(),
                raw: f.raw,
                inlined,
            },
            None => Frame {
                object: display,
                raw: String::new(),
                name: format!("{base}+{vaddr:#x}"),
                inlined,
            },
        }
    }
}

/// Functions of the C runtime's start files, built without frame pointers
/// whatever the program's own flags: the stack walk never passes through
/// them (they call `main` through libc, or run before it).
const START_FILES: &[&str] = &[
    "_start",
    "_init",
    "_fini",
    "deregister_tm_clones",
    "register_tm_clones",
    "__do_global_dtors_aux",
    "frame_dummy",
];

/// Whether every function of `elf` can be trusted to keep a frame pointer,
/// so that a stack through it can be walked by the rbp chain: Go code
/// always does (since Go 1.7, on amd64); other code where the unwind
/// table of every function (but the start files') that has one computes
/// its frame's address from rbp at some point of its body, as
/// `-fno-omit-frame-pointer` makes it. An object with no unwind table is not trusted.
pub fn keeps_frame_pointers(elf: &ElfObject) -> bool {
    use gimli::{BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, UnwindSection, X86_64};
    use object::{Object as _, ObjectSection};
    if elf.go().is_some() {
        return true;
    }
    let Ok(file) = elf.parse() else {
        return false;
    };
    let Some(sec) = file.section_by_name(".eh_frame") else {
        return false;
    };
    let Some(data) = crate::symbols::elf::section_data(&sec) else {
        return false;
    };
    let symbols = elf.symbols().ok();
    let eh = EhFrame::new(&data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(sec.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut entries = eh.entries(&bases);
    let mut ctx = gimli::UnwindContext::new();
    let mut seen = 0;
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
            return false;
        };
        // Only functions are judged: PLT stubs jump on without a frame,
        // and never appear in a walk.
        let start = fde.initial_address();
        let Some(f) = symbols
            .and_then(|s| s.function_containing(start))
            .filter(|f| f.addr == start)
        else {
            continue;
        };
        if START_FILES.contains(&f.raw.as_str()) {
            continue;
        }
        let Ok(mut rows) = fde.rows(&eh, &bases, &mut ctx) else {
            return false;
        };
        let mut uses_rbp = false;
        while let Ok(Some(row)) = rows.next_row() {
            if matches!(row.cfa(), CfaRule::RegisterAndOffset { register, .. } if *register == X86_64::RBP)
            {
                uses_rbp = true;
                break;
            }
        }
        if !uses_rbp {
            return false;
        }
        seen += 1;
    }
    seen > 0
}
