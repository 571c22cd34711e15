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
    /// For inlined code, where it was inlined: the line of the function's
    /// own code that holds it (its outermost inline call), then the lines
    /// of the inline calls nested in that one, down to the call of the
    /// function it belongs to. Empty when not inlined, or where DWARF has
    /// no call lines.
    pub inlined_at: Vec<String>,
}

impl Location {
    /// `file.cc:88`, or for inlined code the line of the function's own
    /// code that holds it with the inline chain after it, outermost first:
    /// `demo.cpp:22 (inlined from this_thread_sleep.h:80)`, `a.cc:9
    /// (inlined from vector.h:1198 > new_allocator.h:151)`. Where DWARF
    /// has no call lines: `vector.h:1198 (inlined from push_back)`.
    pub fn in_function(&self) -> String {
        match (self.inlined_at.split_first(), &self.inlined) {
            (Some((outer, via)), _) => {
                let chain: Vec<&str> = via
                    .iter()
                    .map(String::as_str)
                    .chain([self.file_line.as_str()])
                    .collect();
                format!("{outer} (inlined from {})", chain.join(" > "))
            }
            (None, Some(f)) => format!("{} (inlined from {f})", self.file_line),
            (None, None) => self.file_line.clone(),
        }
    }
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

    /// The line of the function's own code that holds `addr` (its
    /// outermost frame), as the file's full path and the line number, and
    /// the function inlined there that the instruction belongs to, if any:
    /// what a source view of the function annotates.
    pub fn own_line(&self, addr: u64) -> Option<(String, u32, Option<String>)> {
        if addr >= u64::MAX - 1 {
            return None;
        }
        let mut frames = self.ctx.find_frames(addr).skip_all_loads().ok()?;
        let mut inner: Option<String> = None;
        let mut outer = None;
        let mut n = 0;
        while let Ok(Some(f)) = frames.next() {
            if n == 0 {
                inner = f
                    .function
                    .as_ref()
                    .and_then(|n| n.raw_name().ok().map(|r| demangle(r.as_ref()).full));
            }
            n += 1;
            outer = f
                .location
                .as_ref()
                .and_then(|l| Some((l.file?.to_string(), l.line?)));
        }
        let (file, line) = outer?;
        Some((file, line, inner.filter(|_| n > 1)))
    }

    pub fn locate(&self, addr: u64) -> Option<Location> {
        // addr2line looks one byte past the address; no code sits at the
        // very top of the address space anyway.
        if addr >= u64::MAX - 1 {
            return None;
        }
        let mut frames = self.ctx.find_frames(addr).skip_all_loads().ok()?;
        // Innermost frame first: the instruction's own line, then for each
        // inlined frame the line of its call in the frame around it, the
        // last in the function that holds the code.
        let mut innermost: Option<(Option<String>, Option<String>)> = None;
        let mut calls: Vec<Option<String>> = Vec::new();
        while let Ok(Some(f)) = frames.next() {
            let loc = f.location.as_ref().and_then(|l| {
                let file = l.file?.rsplit('/').next()?.to_string();
                Some(format!("{file}:{}", l.line?))
            });
            if innermost.is_none() {
                let func = f
                    .function
                    .as_ref()
                    .and_then(|n| n.raw_name().ok().map(|r| demangle(r.as_ref()).full));
                innermost = Some((loc, func));
            } else {
                calls.push(loc);
            }
        }
        let (loc, func) = innermost?;
        let inlined = if calls.is_empty() { None } else { func };
        // A chain with a call of unknown line is not shown at all.
        let inlined_at = calls.into_iter().rev().collect::<Option<Vec<_>>>();
        Some(Location {
            file_line: loc?,
            inlined,
            inlined_at: inlined_at.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Location;

    fn at(file_line: &str, inlined: Option<&str>, inlined_at: &[&str]) -> String {
        Location {
            file_line: file_line.into(),
            inlined: inlined.map(Into::into),
            inlined_at: inlined_at.iter().map(|s| s.to_string()).collect(),
        }
        .in_function()
    }

    /// Inlined code is placed in the function's own code first, then
    /// along its inline chain.
    #[test]
    fn inlined_code_is_placed_at_the_functions_own_line() {
        assert_eq!(at("demo.cpp:23", None, &[]), "demo.cpp:23");
        assert_eq!(
            at(
                "this_thread_sleep.h:80",
                Some("std::this_thread::sleep_for"),
                &["demo.cpp:22"]
            ),
            "demo.cpp:22 (inlined from this_thread_sleep.h:80)"
        );
        assert_eq!(
            at(
                "new_allocator.h:151",
                Some("allocate"),
                &["a.cc:9", "stl_vector.h:1198"]
            ),
            "a.cc:9 (inlined from stl_vector.h:1198 > new_allocator.h:151)"
        );
        // No call line in DWARF: the code's own line and the function.
        assert_eq!(
            at("vector.h:1198", Some("push_back"), &[]),
            "vector.h:1198 (inlined from push_back)"
        );
    }
}
