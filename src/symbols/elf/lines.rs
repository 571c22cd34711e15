//! Source locations of addresses from DWARF line tables (addr2line), with
//! the inlined function an address belongs to.

use std::borrow::Cow;
use std::fs::File;
use std::rc::Rc;

use gimli::{EndianRcSlice, RunTimeEndian};
use object::read::ReadCache;
use object::Object;

use super::section::section_data;
use crate::symbols::names::demangle;

type R = EndianRcSlice<RunTimeEndian>;

pub struct LineTable {
    ctx: addr2line::Context<R>,
}

/// Where an instruction comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// `file.cc:88`, file name without its directory.
    pub file_line: String,
    /// The inlined function the instruction belongs to, if it was inlined.
    pub inlined: Option<String>,
}

impl LineTable {
    /// The line tables of `dwarf`, the file that holds an object's DWARF
    /// (see `ElfObject::dwarf_data`); None when it has none.
    pub fn load(dwarf: &ReadCache<File>) -> Option<LineTable> {
        let file = object::File::parse(dwarf).ok()?;
        file.section_by_name(".debug_info")?;
        let load = |id: gimli::SectionId| -> Result<R, gimli::Error> {
            let data: Cow<'_, [u8]> = file
                .section_by_name(id.name())
                .and_then(|s| section_data(&s))
                .unwrap_or(Cow::Borrowed(&[]));
            Ok(EndianRcSlice::new(Rc::from(&*data), RunTimeEndian::Little))
        };
        let dwarf = gimli::Dwarf::load(load).ok()?;
        let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(LineTable { ctx })
    }

    pub fn locate(&self, addr: u64) -> Option<Location> {
        // addr2line looks one byte past the address; no code sits at the
        // very top of the address space anyway.
        if addr >= u64::MAX - 1 {
            return None;
        }
        let mut frames = self.ctx.find_frames(addr).skip_all_loads().ok()?;
        let mut innermost: Option<(Option<String>, Option<String>)> = None;
        let mut depth = 0;
        while let Ok(Some(f)) = frames.next() {
            depth += 1;
            if innermost.is_none() {
                let loc = f.location.as_ref().and_then(|l| {
                    let file = l.file?.rsplit('/').next()?.to_string();
                    Some(format!("{file}:{}", l.line?))
                });
                let func = f
                    .function
                    .as_ref()
                    .and_then(|n| n.raw_name().ok().map(|r| demangle(r.as_ref()).full));
                innermost = Some((loc, func));
            }
        }
        let (loc, func) = innermost?;
        Some(Location {
            file_line: loc?,
            inlined: if depth > 1 { func } else { None },
        })
    }
}
