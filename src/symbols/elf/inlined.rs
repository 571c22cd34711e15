//! The inlined instances of a function, from DWARF: every
//! `DW_TAG_inlined_subroutine` whose abstract origin a pattern names, with
//! where it starts (its `DW_AT_entry_pc`, else its low PC or its first
//! range), the address ranges DWARF gives its code, how deep it sits among
//! inlined instances, and the line it was inlined at. Reading only: which
//! of them can be timed, and how, is the plan's to decide.

use std::collections::HashMap;
use std::fs::File;

use gimli::AttributeValue;
use object::read::ReadCache;

use super::dwarf::{attr_str, call_file, plain_names, ref_offset, with_dwarf, R};
use crate::symbols::names::{demangle, Names, Pattern};

/// DIEs read at most, as the other DWARF walks bound theirs.
const MAX_DIES: u64 = 20_000_000;

/// One inlined copy of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// The inlined function's name, as demangled.
    pub name: String,
    /// Where its code starts running.
    pub entry: u64,
    /// Its code, as `[start, end)` ranges (empty ones dropped), by address.
    pub ranges: Vec<(u64, u64)>,
    /// 1 for an instance inlined straight into a function, 2 for one
    /// inlined into an inlined instance, and so on.
    pub depth: u32,
    /// The line it was inlined at: `file.c:42`.
    pub call: String,
}

/// The inlined instances of the functions `pat` names, by entry address;
/// empty where the object has no DWARF.
pub fn instances(data: &ReadCache<File>, pat: &Pattern) -> Vec<Instance> {
    with_dwarf(data, |dwarf| {
        Some(instances_in(dwarf, &|n: &Names| pat.matches(&n.stem, n)))
    })
    .unwrap_or_default()
}

/// Every inlined instance of the object, whatever its function, by entry
/// address; empty where the object has no DWARF.
pub fn all_instances(data: &ReadCache<File>) -> Vec<Instance> {
    with_dwarf(data, |dwarf| Some(instances_in(dwarf, &|_: &Names| true))).unwrap_or_default()
}

/// An inlined instance as read, before its origin is named.
struct Raw {
    origin: usize,
    entry: Option<u64>,
    ranges: Vec<(u64, u64)>,
    depth: u32,
    call: String,
}

fn instances_in(dwarf: &gimli::Dwarf<R<'_>>, wanted: &dyn Fn(&Names) -> bool) -> Vec<Instance> {
    // Names of subprogram DIEs by section offset, and the instances; an
    // origin may come after its instances (or in another unit), so they
    // are matched at the end.
    let mut names: HashMap<usize, Names> = HashMap::new();
    let mut specs: HashMap<usize, usize> = HashMap::new();
    let mut raws: Vec<Raw> = Vec::new();
    let mut budget = MAX_DIES;
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut entries = unit.entries();
        let mut depth: isize = 0;
        // Depths of the open inlined instances and scopes.
        let mut open: Vec<isize> = Vec::new();
        let mut scopes: Vec<(isize, Option<String>)> = Vec::new();
        while let Ok(Some((delta, e))) = entries.next_dfs() {
            let Some(left) = budget.checked_sub(1) else {
                return Vec::new();
            };
            budget = left;
            depth += delta;
            while open.last().is_some_and(|d| *d >= depth) {
                open.pop();
            }
            while scopes.last().is_some_and(|(d, _)| *d >= depth) {
                scopes.pop();
            }
            let Some(off) = e.offset().to_debug_info_offset(&unit.header).map(|o| o.0) else {
                continue;
            };
            let attr = |at| e.attr_value(at).ok().flatten();
            match e.tag() {
                gimli::DW_TAG_namespace
                | gimli::DW_TAG_class_type
                | gimli::DW_TAG_structure_type => {
                    scopes.push((depth, attr_str(dwarf, &unit, attr(gimli::DW_AT_name))));
                }
                gimli::DW_TAG_subprogram => {
                    let linkage = attr_str(dwarf, &unit, attr(gimli::DW_AT_linkage_name));
                    let name = attr_str(dwarf, &unit, attr(gimli::DW_AT_name));
                    let n = match (linkage, name) {
                        (Some(l), _) => Some(demangle(&l)),
                        (None, Some(n)) => {
                            let mut q: Vec<&str> =
                                scopes.iter().filter_map(|(_, s)| s.as_deref()).collect();
                            q.push(&n);
                            Some(plain_names(&q.join("::")))
                        }
                        (None, None) => None,
                    };
                    if let Some(n) = n {
                        names.insert(off, n);
                    }
                    if let Some(s) = ref_offset(&unit, attr(gimli::DW_AT_specification)) {
                        specs.insert(off, s);
                    }
                }
                gimli::DW_TAG_inlined_subroutine => {
                    open.push(depth);
                    let Some(origin) = ref_offset(&unit, attr(gimli::DW_AT_abstract_origin)) else {
                        continue;
                    };
                    let mut ranges: Vec<(u64, u64)> = Vec::new();
                    if let Ok(mut it) = dwarf.die_ranges(&unit, e) {
                        while let Ok(Some(r)) = it.next() {
                            if r.end > r.begin {
                                ranges.push((r.begin, r.end));
                            }
                        }
                    }
                    ranges.sort_unstable();
                    let entry = match attr(gimli::DW_AT_entry_pc) {
                        Some(AttributeValue::Addr(a)) => Some(a),
                        Some(v @ AttributeValue::DebugAddrIndex(_)) => {
                            dwarf.attr_address(&unit, v).ok().flatten()
                        }
                        _ => None,
                    };
                    let line = attr(gimli::DW_AT_call_line)
                        .and_then(|v| v.udata_value())
                        .unwrap_or(0);
                    let file = call_file(dwarf, &unit, attr(gimli::DW_AT_call_file));
                    raws.push(Raw {
                        origin,
                        entry,
                        ranges,
                        depth: open.len() as u32,
                        call: format!("{file}:{line}"),
                    });
                }
                _ => {}
            }
        }
    }
    let named = |off: usize| {
        names
            .get(&off)
            .or_else(|| specs.get(&off).and_then(|s| names.get(s)))
    };
    let mut out: Vec<Instance> = raws
        .into_iter()
        .filter_map(|r| {
            let n = named(r.origin)?;
            if !wanted(n) {
                return None;
            }
            let entry = r.entry.or_else(|| r.ranges.first().map(|x| x.0))?;
            Some(Instance {
                name: n.full.clone(),
                entry,
                ranges: r.ranges,
                depth: r.depth,
                call: r.call,
            })
        })
        .collect();
    out.sort_by(|a, b| (a.entry, &a.name).cmp(&(b.entry, &b.name)));
    out.dedup_by(|a, b| (a.entry, &a.name) == (b.entry, &b.name));
    out
}
