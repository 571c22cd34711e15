//! Names the key values of `--by` groups: a caller's return address as the
//! function and `file:line` of its call site (else function+offset, else
//! object+offset), a thread or process with the name the kernel gave it.
//! An address is found in its process's executable mappings, read while
//! the process runs (`watch`) and kept, so the last report of a process
//! that has exited still names its callers.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::rc::Rc;

use crate::plan::args::{Operand, RetKind, RetShape};
use crate::plan::by::ByKey;
use crate::report::fmt::{ArgValue, RetValue};
use crate::report::groups::{FilePlace, KeyValue, RawGroup};
use crate::report::Callee;
use crate::symbols::ElfObject;
use crate::target::{self, Mapping, ObjectRef};

#[derive(Default)]
pub struct Namer {
    /// Executable mappings by process, as last read.
    maps: HashMap<u32, Vec<Mapping>>,
    /// Objects by the path users know, opened once (None: unreadable).
    objects: HashMap<PathBuf, Option<Rc<ElfObject>>>,
    /// Callers named so far, by process and address.
    callers: HashMap<(u32, u64), KeyValue>,
    /// Callees of indirect calls named so far, by process and address.
    callees: HashMap<(u32, u64), Callee>,
    /// Objects a caller may be in besides those of the maps read: the
    /// traced objects and the executables searched.
    known: Vec<PathBuf>,
    /// (major, minor, inode) -> the path of that file, where found.
    files: HashMap<(u32, u32, u64), Option<PathBuf>>,
    /// `--by argN`/`NAME`: each function's operands (`Plan::by_args`),
    /// whose types say how a value reads.
    args: BTreeMap<u32, Vec<Option<Operand>>>,
    /// `--by retval`: how each function's return value reads
    /// (`Plan::returns`).
    returns: BTreeMap<u32, RetShape>,
    /// `--by stack`: the chains of callers grouped, by their key value.
    stacks: Vec<Vec<String>>,
    stack_ids: HashMap<Vec<String>, u64>,
}

/// The callee at `vaddr` of `obj` (known to users as `r`): the function
/// starting there, else `function+0x10`, else `object+0x10`.
fn callee_at(obj: &ElfObject, r: &ObjectRef, vaddr: u64) -> Callee {
    let base = r.display.file_name().map_or_else(
        || r.display.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut c = Callee {
        name: format!("{base}+{vaddr:#x}"),
        object: Some(r.display.display().to_string()),
        addr: Some(vaddr),
        ..Default::default()
    };
    match obj
        .symbols()
        .ok()
        .and_then(|s| s.function_containing(vaddr))
    {
        Some(f) if f.addr == vaddr => {
            c.name = f.display_name();
            c.raw = Some(f.raw);
        }
        Some(f) => c.name = format!("{}+{:#x}", f.display_name(), vaddr - f.addr),
        None => {}
    }
    c
}

/// The return register's 64 bits `raw` as `shape` reads them (the whole
/// register, signed, where no shape is known).
pub fn ret_value(shape: Option<&RetShape>, raw: u64) -> RetValue {
    let Some(shape) = shape else {
        return RetValue::Int(ArgValue::Signed(raw as i64));
    };
    let int = ArgValue::int(raw, shape.size, shape.signed);
    let as_i64 = match int {
        ArgValue::Signed(v) => v,
        ArgValue::Unsigned(v) | ArgValue::Pointer(v) | ArgValue::Register(v) => v as i64,
    };
    match &shape.kind {
        RetKind::Int | RetKind::Whole => RetValue::Int(int),
        RetKind::Pointer => RetValue::Int(ArgValue::Pointer(raw)),
        RetKind::Bool => RetValue::Bool(as_i64 != 0),
        RetKind::Enum(values) => RetValue::Enum {
            value: as_i64,
            name: values
                .iter()
                .find(|(v, _)| *v == as_i64)
                .map(|(_, n)| n.clone()),
        },
        RetKind::Errno => RetValue::Errno(as_i64),
    }
}

impl Namer {
    /// The operands of `--by` argument keys, per function id, as planned.
    /// Objects to look for a caller's file in once its process is gone.
    pub fn set_objects(&mut self, paths: Vec<PathBuf>) {
        self.known = paths;
    }

    pub fn set_args(&mut self, args: &BTreeMap<u32, Vec<Option<Operand>>>) {
        self.args = args.clone();
    }

    /// How each function's return value reads, per function id.
    pub fn set_returns(&mut self, returns: &BTreeMap<u32, RetShape>) {
        self.returns = returns.clone();
    }

    /// Reads the mappings of process `pid` unless they are known already.
    pub fn watch(&mut self, pid: u32) {
        if !self.maps.contains_key(&pid) {
            self.reread(pid);
        }
    }

    /// Reads process `pid`'s maps again while it runs when they do not
    /// hold `addr` (a library it loaded after they were read).
    pub fn cover(&mut self, pid: u32, addr: u64) {
        let held = self
            .maps
            .get(&pid)
            .is_some_and(|maps| maps.iter().any(|m| addr >= m.start && addr < m.end));
        if !held && target::process_alive(pid) {
            self.reread(pid);
        }
    }

    fn reread(&mut self, pid: u32) {
        if let Ok(m) = target::exec_mappings(pid) {
            self.maps.insert(pid, m);
        }
    }

    /// The mapping of process `pid` that holds `addr`; the mappings are
    /// read again on a miss while the process runs (it loaded a library).
    fn mapping(&mut self, pid: u32, addr: u64) -> Option<Mapping> {
        let find = |maps: &HashMap<u32, Vec<Mapping>>| {
            maps.get(&pid)?
                .iter()
                .find(|m| addr >= m.start && addr < m.end)
                .cloned()
        };
        if let Some(m) = find(&self.maps) {
            return Some(m);
        }
        if target::process_alive(pid) {
            self.reread(pid);
        }
        find(&self.maps)
    }

    /// The object, opened through the process while it runs, else by the
    /// path it was mapped from.
    fn object(&mut self, r: &ObjectRef) -> Option<Rc<ElfObject>> {
        self.objects
            .entry(r.display.clone())
            .or_insert_with(|| {
                ElfObject::open(&r.display, &r.open_path)
                    .or_else(|_| ElfObject::open(&r.display, &r.display))
                    .ok()
                    .map(Rc::new)
            })
            .clone()
    }

    /// The call site that return address `addr` of process `pid` comes
    /// back to.
    /// `place`: where the kernel saw the address mapped (for a process
    /// that has exited since).
    pub fn caller(&mut self, pid: u32, addr: u64, place: Option<FilePlace>) -> KeyValue {
        if let Some(v) = self.callers.get(&(pid, addr)) {
            return v.clone();
        }
        let v = self.name_caller(pid, addr, place);
        self.callers.insert((pid, addr), v.clone());
        v
    }

    /// The path of the file at `place`: one of the maps read or of the
    /// objects known, with its device and inode.
    fn file_at(&mut self, place: FilePlace) -> Option<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let id = (place.major, place.minor, place.ino);
        if let Some(p) = self.files.get(&id) {
            return p.clone();
        }
        let mut paths: Vec<PathBuf> = self.known.clone();
        for maps in self.maps.values() {
            for m in maps {
                paths.push(m.object.display.clone());
            }
        }
        let found = paths.into_iter().find(|p| {
            std::fs::metadata(p).is_ok_and(|md| {
                let dev = md.dev();
                md.ino() == place.ino
                    && libc::major(dev) as u32 == place.major
                    && libc::minor(dev) as u32 == place.minor
            })
        });
        self.files.insert(id, found.clone());
        found
    }

    fn name_caller(&mut self, pid: u32, addr: u64, place: Option<FilePlace>) -> KeyValue {
        let unknown = KeyValue::Caller {
            object: "[unknown]".into(),
            offset: addr,
            function: None,
            function_offset: 0,
            location: None,
        };
        let (object, offset) = match self.mapping(pid, addr) {
            Some(m) => (m.object, addr - m.start + m.offset),
            None => match place.and_then(|p| Some((self.file_at(p)?, p.offset))) {
                Some((path, offset)) => (
                    ObjectRef {
                        display: path.clone(),
                        open_path: path,
                    },
                    offset,
                ),
                None => return unknown,
            },
        };
        let mut v = KeyValue::Caller {
            object: object.display.display().to_string(),
            offset,
            function: None,
            function_offset: 0,
            location: None,
        };
        let Some(obj) = self.object(&object) else {
            return v;
        };
        let Some(vaddr) = obj.offset_to_vaddr(offset) else {
            return v;
        };
        // The call instruction ends where the return address is: look up
        // the byte before it (a call to a function that never returns may
        // be the last instruction of its function).
        let call = vaddr.saturating_sub(1);
        let func = obj.symbols().ok().and_then(|s| s.function_containing(call));
        let loc = obj.line_table().and_then(|t| t.locate(call));
        if let KeyValue::Caller {
            function,
            function_offset,
            location,
            ..
        } = &mut v
        {
            if let Some(f) = &func {
                *function = Some(f.display_name());
                *function_offset = vaddr - f.addr;
            }
            if let Some(l) = loc {
                // The call site's line belongs to the function inlined
                // there, if one was.
                if let (Some(inl), Some(f)) = (l.inlined, function.as_mut()) {
                    *f = format!("{inl} (inlined in {f})");
                }
                *location = Some(l.file_line);
            }
        }
        v
    }

    /// The function an indirect call of process `pid` entered at `addr`:
    /// its name, raw name and object, and its address there (a count of
    /// 0, for the caller to fill in).
    pub fn callee(&mut self, pid: u32, addr: u64) -> Callee {
        if let Some(c) = self.callees.get(&(pid, addr)) {
            return c.clone();
        }
        let c = self.name_callee(pid, addr);
        self.callees.insert((pid, addr), c.clone());
        c
    }

    fn name_callee(&mut self, pid: u32, addr: u64) -> Callee {
        let unknown = Callee {
            name: format!("{addr:#x}"),
            ..Default::default()
        };
        let Some(m) = self.mapping(pid, addr) else {
            return unknown;
        };
        let offset = addr - m.start + m.offset;
        let Some(obj) = self.object(&m.object) else {
            let base = m.object.display.file_name().map_or_else(
                || m.object.display.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            return Callee {
                name: format!("{base}+{offset:#x}"),
                object: Some(m.object.display.display().to_string()),
                ..Default::default()
            };
        };
        match obj.offset_to_vaddr(offset) {
            Some(vaddr) => callee_at(&obj, &m.object, vaddr),
            None => unknown,
        }
    }

    /// The callee at `vaddr` of object `r` (a callee of an indirect call in
    /// the same object, once its process is gone), when a function holds it.
    pub fn callee_in(&mut self, r: &ObjectRef, vaddr: u64) -> Option<Callee> {
        let obj = self.object(r)?;
        obj.symbols().ok()?.function_containing(vaddr)?;
        Some(callee_at(&obj, r, vaddr))
    }

    /// `--by stack`: the key value of a chain of callers (function names,
    /// the nearest first).
    pub fn stack_key(&mut self, frames: Vec<String>) -> u64 {
        if let Some(&k) = self.stack_ids.get(&frames) {
            return k;
        }
        let k = self.stacks.len() as u64;
        self.stacks.push(frames.clone());
        self.stack_ids.insert(frames, k);
        k
    }

    /// The named key values of a group of the kernel.
    pub fn name(&mut self, by: &[ByKey], g: &RawGroup) -> Vec<KeyValue> {
        by.iter()
            .zip(&g.vals)
            .enumerate()
            .map(|(slot, (k, &v))| match k {
                ByKey::Caller => self.caller(g.tgid, v, g.place),
                ByKey::Tid => KeyValue::Thread {
                    tid: v as u32,
                    comm: g.comm.clone(),
                },
                ByKey::Pid => KeyValue::Process {
                    pid: v as u32,
                    comm: g.comm.clone(),
                },
                ByKey::Arg(a) => {
                    let op = self
                        .args
                        .get(&g.id)
                        .and_then(|ops| ops.get(slot))
                        .and_then(Option::as_ref);
                    KeyValue::Arg {
                        name: a.to_string(),
                        value: match op {
                            Some(op) if op.pointer => ArgValue::Pointer(v),
                            Some(op) => ArgValue::int(v, op.size, op.signed),
                            None => ArgValue::int(v, 8, true),
                        },
                    }
                }
                ByKey::Goroutine => KeyValue::Goroutine { goid: v },
                ByKey::Retval => KeyValue::Retval {
                    value: ret_value(self.returns.get(&g.id), v),
                },
                ByKey::Stack => KeyValue::Stack {
                    frames: self.stacks.get(v as usize).cloned().unwrap_or_default(),
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[inline(never)]
    fn marker() -> u64 {
        std::hint::black_box(7)
    }

    /// A caller of a process tachy never read the maps of (it exited) is
    /// named from the file and offset the kernel saw, found among the
    /// objects tachy knows by device and inode.
    #[test]
    fn callers_are_named_from_their_file_place() {
        let exe = std::env::current_exe().unwrap();
        let me = std::process::id();
        let addr = (marker as fn() -> u64) as usize as u64 + 4;
        let m = target::exec_mappings(me)
            .unwrap()
            .into_iter()
            .find(|m| addr >= m.start && addr < m.end)
            .expect("the test's own code is mapped");
        let md = std::fs::metadata(&exe).unwrap();
        let place = FilePlace {
            major: libc::major(md.dev()),
            minor: libc::minor(md.dev()),
            ino: md.ino(),
            offset: addr - m.start + m.offset,
        };
        let mut n = Namer::default();
        n.set_objects(vec![exe.clone()]);
        // Process 0 has no maps to read.
        match n.caller(0, 0x1234, Some(place)) {
            KeyValue::Caller {
                object, function, ..
            } => {
                assert_eq!(object, exe.display().to_string());
                let f = function.unwrap_or_default();
                assert!(f.contains("marker"), "{f}");
            }
            other => panic!("{other:?}"),
        }
        // Without a place, or with one of a file tachy does not know.
        let mut n = Namer::default();
        match n.caller(0, 0x1234, None) {
            KeyValue::Caller { object, .. } => assert_eq!(object, "[unknown]"),
            other => panic!("{other:?}"),
        }
        let elsewhere = FilePlace { ino: 1, ..place };
        match n.caller(0, 0x5678, Some(elsewhere)) {
            KeyValue::Caller { object, .. } => assert_eq!(object, "[unknown]"),
            other => panic!("{other:?}"),
        }
    }
}
