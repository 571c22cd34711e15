//! DWARF lookups: where a function that has no symbol of its own was inlined
//! (only consulted when a pattern matches no symbol, so its cost is paid on
//! the error path alone), and where Go's `runtime.g` keeps the fields the
//! BPF side reads.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;

use gimli::{AttributeValue, EndianSlice, RunTimeEndian};
use object::read::ReadCache;
use object::Object;

use super::section::section_data;
use crate::symbols::golang::GLayout;
use crate::symbols::names::{demangle, Lang, Names, Part, Pattern};

pub(super) type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// Where one inlined copy sits.
struct Copy {
    caller: String,
    file: String,
    line: u64,
}

/// Runs `f` on the DWARF in `data`, the file that holds an object's DWARF
/// (see `ElfObject::dwarf_data`); `None` where there is none.
pub fn with_dwarf<T>(
    data: &ReadCache<File>,
    f: impl FnOnce(&gimli::Dwarf<R<'_>>) -> Option<T>,
) -> Option<T> {
    let file = object::File::parse(data).ok()?;
    file.section_by_name(".debug_info")?;
    let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| section_data(&s))
            .unwrap_or(Cow::Borrowed(&[])))
    };
    let sections = gimli::DwarfSections::load(load).ok()?;
    let dwarf = sections.borrow(|s| EndianSlice::new(s, RunTimeEndian::Little));
    f(&dwarf)
}

/// If DWARF says the functions matching `pat` exist only as inlined copies,
/// a sentence saying so and where the first few are.
pub fn inlined_only(data: &ReadCache<File>, pat: &Pattern) -> Option<String> {
    with_dwarf(data, |dwarf| inlined_only_in(dwarf, pat))
}

fn inlined_only_in(dwarf: &gimli::Dwarf<R<'_>>, pat: &Pattern) -> Option<String> {
    // Qualified names of subprogram DIEs, and which are abstract inline
    // instances, by section offset.
    let mut names: HashMap<usize, Names> = HashMap::new();
    let mut abstract_: Vec<(usize, Option<usize>)> = Vec::new();
    let mut calls: Vec<(usize, Copy)> = Vec::new();
    let mut units = dwarf.units();
    let mut budget: u64 = 20_000_000;
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut entries = unit.entries();
        // (depth, scope name or None, enclosing function name)
        let mut scopes: Vec<(isize, Option<String>)> = Vec::new();
        let mut funcs: Vec<(isize, String)> = Vec::new();
        let mut depth: isize = 0;
        while let Ok(Some((delta, e))) = entries.next_dfs() {
            budget = budget.checked_sub(1)?;
            depth += delta;
            while scopes.last().is_some_and(|(d, _)| *d >= depth) {
                scopes.pop();
            }
            while funcs.last().is_some_and(|(d, _)| *d >= depth) {
                funcs.pop();
            }
            let Some(off) = e.offset().to_debug_info_offset(&unit.header).map(|o| o.0) else {
                continue;
            };
            let name = attr_str(dwarf, &unit, e.attr_value(gimli::DW_AT_name).ok().flatten());
            match e.tag() {
                gimli::DW_TAG_namespace
                | gimli::DW_TAG_class_type
                | gimli::DW_TAG_structure_type => {
                    scopes.push((depth, name));
                }
                gimli::DW_TAG_subprogram => {
                    let linkage = attr_str(
                        dwarf,
                        &unit,
                        e.attr_value(gimli::DW_AT_linkage_name).ok().flatten(),
                    );
                    let qualified = name.as_ref().map(|n| {
                        let mut q: Vec<&str> =
                            scopes.iter().filter_map(|(_, s)| s.as_deref()).collect();
                        q.push(n);
                        q.join("::")
                    });
                    let n = match (linkage, qualified) {
                        (Some(l), _) => Some(demangle(&l)),
                        (None, Some(q)) => Some(plain_names(&q)),
                        (None, None) => None,
                    };
                    let spec = ref_offset(
                        &unit,
                        e.attr_value(gimli::DW_AT_specification).ok().flatten(),
                    );
                    if let Some(n) = &n {
                        names.insert(off, n.clone());
                    }
                    let inline = e.attr_value(gimli::DW_AT_inline).ok().flatten();
                    if matches!(inline, Some(AttributeValue::Inline(i)) if i == gimli::DW_INL_inlined || i == gimli::DW_INL_declared_inlined)
                    {
                        abstract_.push((off, spec));
                    }
                    let shown = n
                        .map(|n| n.full)
                        .or_else(|| spec.and_then(|s| names.get(&s)).map(|n| n.full.clone()));
                    if let Some(shown) = shown {
                        funcs.push((depth, shown));
                    }
                }
                gimli::DW_TAG_inlined_subroutine => {
                    let origin = ref_offset(
                        &unit,
                        e.attr_value(gimli::DW_AT_abstract_origin).ok().flatten(),
                    );
                    let line = match e.attr_value(gimli::DW_AT_call_line).ok().flatten() {
                        Some(AttributeValue::Udata(l)) => l,
                        Some(v) => v.udata_value().unwrap_or(0),
                        None => 0,
                    };
                    let file = call_file(
                        dwarf,
                        &unit,
                        e.attr_value(gimli::DW_AT_call_file).ok().flatten(),
                    );
                    if let Some(o) = origin {
                        let caller = funcs
                            .last()
                            .map(|(_, n)| n.clone())
                            .unwrap_or_else(|| "?".into());
                        calls.push((o, Copy { caller, file, line }));
                    }
                }
                _ => {}
            }
        }
    }
    let matched: Vec<(usize, String)> = abstract_
        .iter()
        .filter_map(|(off, spec)| {
            let n = names
                .get(off)
                .or_else(|| spec.and_then(|s| names.get(&s)))?;
            pat.matches(&n.stem, n).then(|| (*off, n.full.clone()))
        })
        .collect();
    if matched.is_empty() {
        return None;
    }
    let copies: Vec<&Copy> = calls
        .iter()
        .filter(|(o, _)| matched.iter().any(|(m, _)| m == o))
        .map(|(_, c)| c)
        .collect();
    let name = &matched[0].1;
    if copies.is_empty() {
        return Some(format!("{name} is declared inline and has no symbol of its own: it was inlined or removed by the compiler"));
    }
    let shown: Vec<String> = copies
        .iter()
        .take(3)
        .map(|c| format!("into {} at {}:{}", c.caller, c.file, c.line))
        .collect();
    let more = if copies.len() > 3 {
        format!(" and {} more", copies.len() - 3)
    } else {
        String::new()
    };
    Some(format!(
        "{name} has no symbol of its own: it exists only inlined, {} time{} ({}{more}); trace its callers instead",
        copies.len(),
        if copies.len() == 1 { "" } else { "s" },
        shown.join(", ")
    ))
}

pub(super) fn plain_names(q: &str) -> Names {
    Names {
        stem: String::new(),
        suffix: String::new(),
        full: q.to_string(),
        base: q.to_string(),
        lang: Lang::C,
        part: Part::Whole,
    }
}

pub(super) fn attr_str(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    v: Option<AttributeValue<R<'_>>>,
) -> Option<String> {
    let v = v?;
    let s = dwarf.attr_string(unit, v).ok()?;
    Some(String::from_utf8_lossy(s.slice()).into_owned())
}

pub(super) fn ref_offset(
    unit: &gimli::Unit<R<'_>>,
    v: Option<AttributeValue<R<'_>>>,
) -> Option<usize> {
    match v? {
        AttributeValue::UnitRef(o) => o.to_debug_info_offset(&unit.header).map(|o| o.0),
        AttributeValue::DebugInfoRef(o) => Some(o.0),
        _ => None,
    }
}

/// The file an inlined instance's `DW_AT_call_file` (`value`) names, as
/// its base name; empty where it names none.
pub(super) fn call_file<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    unit: &gimli::Unit<R<'a>>,
    value: Option<AttributeValue<R<'a>>>,
) -> String {
    match value {
        Some(AttributeValue::FileIndex(i)) => file_name(dwarf, unit, i),
        Some(v) => v
            .udata_value()
            .map(|i| file_name(dwarf, unit, i))
            .unwrap_or_default(),
        None => String::new(),
    }
}

pub(super) fn file_name(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    index: u64,
) -> String {
    let Some(lp) = &unit.line_program else {
        return String::new();
    };
    let Some(f) = lp.header().file(index) else {
        return String::new();
    };
    attr_str(dwarf, unit, Some(f.path_name()))
        .map(|p| p.rsplit('/').next().unwrap_or(&p).to_string())
        .unwrap_or_default()
}

/// Where Go's `runtime.g` keeps `stack.lo`, `stack.hi` and `goid`, as the
/// DWARF of a Go binary describes them (in the unit of package `runtime`),
/// if it has DWARF that places the stack bounds at least.
pub fn go_g_layout(data: &ReadCache<File>) -> Option<GLayout> {
    with_dwarf(data, go_g_layout_in)
}

fn go_g_layout_in(dwarf: &gimli::Dwarf<R<'_>>) -> Option<GLayout> {
    let mut units = dwarf.units();
    let mut budget: u64 = 5_000_000;
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut entries = unit.entries();
        let Ok(Some((_, root))) = entries.next_dfs() else {
            continue;
        };
        if attr_str(dwarf, &unit, root.attr_value(gimli::DW_AT_name).ok()?).as_deref()
            != Some("runtime")
        {
            continue;
        }
        // Members of the structures runtime.g and runtime.stack, by name.
        let (mut stack, mut lo, mut hi, mut goid) = (None, None, None, None);
        let mut within: Option<(isize, String)> = None;
        let mut depth: isize = 0;
        while let Ok(Some((delta, e))) = entries.next_dfs() {
            budget = budget.checked_sub(1)?;
            depth += delta;
            if within.as_ref().is_some_and(|(d, _)| depth <= *d) {
                within = None;
            }
            let name = || attr_str(dwarf, &unit, e.attr_value(gimli::DW_AT_name).ok()?);
            if e.tag() == gimli::DW_TAG_structure_type {
                within = name()
                    .filter(|n| n == "runtime.g" || n == "runtime.stack")
                    .map(|n| (depth, n));
                continue;
            }
            let Some((_, owner)) = &within else { continue };
            if e.tag() != gimli::DW_TAG_member {
                continue;
            }
            let at = e
                .attr_value(gimli::DW_AT_data_member_location)
                .ok()
                .flatten()
                .and_then(|v| v.udata_value())
                .and_then(|v| u32::try_from(v).ok());
            match (owner.as_str(), name().as_deref()) {
                ("runtime.g", Some("stack")) => stack = at,
                ("runtime.g", Some("goid")) => goid = at,
                ("runtime.stack", Some("lo")) => lo = at,
                ("runtime.stack", Some("hi")) => hi = at,
                _ => {}
            }
            if stack.is_some() && lo.is_some() && hi.is_some() && goid.is_some() {
                break;
            }
        }
        // The linker may emit more than one unit for package runtime;
        // the types are in one of them.
        let (Some(s), Some(l), Some(h)) = (stack, lo, hi) else {
            continue;
        };
        return Some(GLayout {
            stack_lo: s.checked_add(l)?,
            stack_hi: s.checked_add(h)?,
            goid,
            from_dwarf: true,
        });
    }
    None
}
