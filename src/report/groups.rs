//! `--by`: a function's calls broken down by key. The kernel's groups as
//! read (`RawGroup`), the report's named groups (`Groups`), the `--top`
//! fold, and the text and JSON of them. Naming key values (an address as
//! function at file:line) is the session's job; nothing here reads a
//! process or a file.

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::{json, Map, Value};

use super::counts::{Counts, Unit};
use super::fmt::{ArgValue, RetValue, PERCENTILES};
use super::hist::round_to_precision;

/// One group of one function as the kernel counted it in an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawGroup {
    /// Function id.
    pub id: u32,
    /// The function's "other" group: calls the full group map had no room
    /// for.
    pub other: bool,
    /// With `--by caller`: the process the caller's address belongs to.
    pub tgid: u32,
    /// The key values, in the order of `--by`.
    pub vals: Vec<u64>,
    /// The thread's name (`--by tid`) or the process's (otherwise), when
    /// the group was made.
    pub comm: String,
    /// Count, total and histogram; min and max are not kept.
    pub counts: Counts,
    /// With `--by caller`: the file the caller's address was mapped from
    /// when the kernel made the group, where it could tell.
    pub place: Option<FilePlace>,
}

/// A file and an offset in it, as the kernel saw a mapping: for naming an
/// address of a process that has exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FilePlace {
    /// The device of the file's file system.
    pub major: u32,
    pub minor: u32,
    pub ino: u64,
    pub offset: u64,
}

impl RawGroup {
    /// What tells groups apart.
    pub fn key(&self) -> (u32, bool, u32, Vec<u64>) {
        (self.id, self.other, self.tgid, self.vals.clone())
    }
}

/// Adds `more` into `into`, group by group (interim reads of one interval).
pub fn merge_raw(into: &mut Vec<RawGroup>, more: Vec<RawGroup>) {
    let mut at: HashMap<(u32, bool, u32, Vec<u64>), usize> =
        into.iter().enumerate().map(|(i, g)| (g.key(), i)).collect();
    for g in more {
        match at.get(&g.key()) {
            Some(&i) => {
                into[i].counts.merge(&g.counts);
                into[i].place = into[i].place.or(g.place);
            }
            None => {
                at.insert(g.key(), into.len());
                into.push(g);
            }
        }
    }
}

/// One key's value, named.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyValue {
    /// A call site: the return address, in `object` at `offset` (a file
    /// offset), in `function` (+`function_offset`) at `location`
    /// (`file.c:12`) where the symbols and DWARF say.
    Caller {
        object: String,
        offset: u64,
        function: Option<String>,
        function_offset: u64,
        location: Option<String>,
    },
    Thread {
        tid: u32,
        comm: String,
    },
    Process {
        pid: u32,
        comm: String,
    },
    /// An argument's value at entry, with the key's name as `--by` gives
    /// it (`arg1`, `key`).
    Arg {
        name: String,
        value: ArgValue,
    },
    /// A Go goroutine, by its id.
    Goroutine {
        goid: u64,
    },
    /// The value the calls returned.
    Retval {
        value: RetValue,
    },
    /// The chain of callers (`--by stack`): function names, the nearest
    /// first, out to `main`.
    Stack {
        frames: Vec<String>,
    },
}

impl KeyValue {
    /// The value as a text report shows it.
    pub fn text(&self) -> String {
        match self {
            KeyValue::Caller {
                function: Some(f),
                location: Some(l),
                ..
            } => format!("{f} at {l}"),
            KeyValue::Caller {
                function: Some(f),
                function_offset,
                ..
            } => format!("{f}+{function_offset:#x}"),
            KeyValue::Caller { object, offset, .. } => {
                let base = object.rsplit('/').next().unwrap_or(object);
                format!("{base}+{offset:#x}")
            }
            KeyValue::Thread { tid, comm } => format!("tid {tid} ({comm})"),
            KeyValue::Process { pid, comm } => format!("pid {pid} ({comm})"),
            KeyValue::Arg { name, value } => format!("{name} {}", value.text()),
            KeyValue::Goroutine { goid } => format!("goroutine {goid}"),
            KeyValue::Retval { value } => format!("retval {}", value.text()),
            KeyValue::Stack { frames } => format!("stack {}", frames.join(" < ")),
        }
    }

    /// The value as a metric's label holds it: a thread or process by its
    /// number (its name goes in a label of its own, see [`KeyValue::comm`]),
    /// an argument or goroutine by its value (the label is named after the
    /// key), a caller as the text report shows it.
    pub fn metric_value(&self) -> String {
        match self {
            KeyValue::Thread { tid, .. } => tid.to_string(),
            KeyValue::Process { pid, .. } => pid.to_string(),
            // The label's name says which argument: the value alone.
            KeyValue::Arg { value, .. } => value.text(),
            KeyValue::Goroutine { goid } => goid.to_string(),
            KeyValue::Retval { value } => value.text(),
            KeyValue::Stack { frames } => frames.join(" < "),
            other => other.text(),
        }
    }

    /// The name of the thread or process the value is, if it is one.
    pub fn comm(&self) -> Option<&str> {
        match self {
            KeyValue::Thread { comm, .. } | KeyValue::Process { comm, .. } => Some(comm),
            _ => None,
        }
    }

    /// The key's name in JSON, and the value.
    fn json(&self) -> (String, Value) {
        match self {
            KeyValue::Caller {
                object,
                offset,
                function,
                function_offset,
                location,
            } => (
                "caller".into(),
                json!({
                    "function": function,
                    "function_offset": function.as_ref().map(|_| function_offset),
                    "location": location,
                    "object": object,
                    "offset": offset,
                }),
            ),
            KeyValue::Thread { tid, comm } => ("tid".into(), json!({ "tid": tid, "comm": comm })),
            KeyValue::Process { pid, comm } => ("pid".into(), json!({ "pid": pid, "comm": comm })),
            KeyValue::Arg { name, value } => {
                let mut v = json!({ "value": value.json() });
                if let ArgValue::Pointer(p) = value {
                    v["hex"] = json!(format!("{p:#x}"));
                }
                // A parameter named like a field of the group's stats
                // does not hide it.
                let key = if STATS_FIELDS.contains(&name.as_str()) {
                    format!("param:{name}")
                } else {
                    name.clone()
                };
                (key, v)
            }
            KeyValue::Goroutine { goid } => ("goroutine".into(), json!({ "goid": goid })),
            KeyValue::Retval { value } => ("retval".into(), value.json_object()),
            KeyValue::Stack { frames } => ("stack".into(), json!(frames)),
        }
    }
}

/// One group of a report: its key values and its calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub keys: Vec<KeyValue>,
    pub counts: Counts,
}

/// A function's calls by key, as reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    /// The keys, as `--by` names them (`caller`, `tid`).
    pub by: Vec<String>,
    /// The groups shown, by total time, largest first.
    pub groups: Vec<Group>,
    /// `--top`: the groups past the first N, added up, and how many.
    pub folded: Option<(usize, Counts)>,
    /// Calls the kernel's group map had no room for, and its size in
    /// groups.
    pub full: Option<(u64, Counts)>,
    /// `--by stack`: calls whose records came faster than they were read
    /// (their stacks, and so their group, unknown; their durations are in
    /// the function's own counts).
    pub lost: u64,
}

impl Groups {
    /// Named groups, merged where their names are equal, sorted by total time (then by name), the
    /// first `top` kept.
    pub fn build(
        by: Vec<String>,
        named: Vec<Group>,
        full: Option<(u64, Counts)>,
        top: Option<usize>,
    ) -> Groups {
        // Groups named alike are one: a call site seen in two processes,
        // or a call the compiler copied (an unrolled loop) at one line.
        let mut groups: Vec<Group> = Vec::with_capacity(named.len());
        let mut at: HashMap<String, usize> = HashMap::new();
        for g in named {
            let name = label(&g.keys);
            match at.get(&name) {
                Some(&i) => groups[i].counts.merge(&g.counts),
                None => {
                    at.insert(name, groups.len());
                    groups.push(g);
                }
            }
        }
        groups.sort_by(|a, b| {
            b.counts
                .total_ns
                .cmp(&a.counts.total_ns)
                .then_with(|| b.counts.count.cmp(&a.counts.count))
                .then_with(|| label(&a.keys).cmp(&label(&b.keys)))
        });
        let folded = match top {
            Some(n) if groups.len() > n => {
                let rest = groups.split_off(n);
                let mut sum = Counts::default();
                for g in &rest {
                    sum.merge(&g.counts);
                }
                Some((rest.len(), sum))
            }
            _ => None,
        };
        Groups {
            by,
            groups,
            folded,
            full: full.filter(|(_, c)| c.count > 0),
            lost: 0,
        }
    }
}

/// A group's key values as one text label.
pub fn label(keys: &[KeyValue]) -> String {
    keys.iter()
        .map(KeyValue::text)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The section's title: "called from:" for callers alone.
fn title(by: &[String]) -> String {
    if by.len() == 1 && by[0] == "caller" {
        "called from:".to_string()
    } else {
        format!("by {}:", by.join(", "))
    }
}

/// A percentile of a group in display units, at the precision of its
/// bucket.
fn percentile(c: &Counts, q: f64) -> Option<u64> {
    c.hist
        .percentiles(&[q])
        .into_iter()
        .next()
        .flatten()
        .map(|(lo, hi)| round_to_precision(lo, hi))
}

/// The text section: a title, then one line per group with count, avg,
/// p50 and p99, then the folded and the unkept calls.
pub fn render_text(g: &Groups, unit: Unit, w: &mut impl Write) -> io::Result<()> {
    let u = unit.word();
    let mut lines: Vec<(String, &Counts)> = g
        .groups
        .iter()
        .map(|x| (format!("  {}", label(&x.keys)), &x.counts))
        .collect();
    if let Some((n, c)) = &g.folded {
        lines.push((
            format!("  other ({n} group{})", if *n == 1 { "" } else { "s" }),
            c,
        ));
    }
    if let Some((cap, c)) = &g.full {
        lines.push((
            format!("  not grouped: the map of {cap} groups was full"),
            c,
        ));
    }
    // Lost records: a count, their durations only in the function's own.
    let lost = Counts {
        count: g.lost,
        ..Counts::default()
    };
    if g.lost > 0 {
        lines.push((
            "  not grouped: their records came faster than tachy read them".into(),
            &lost,
        ));
    }
    writeln!(w, "\n{}", title(&g.by))?;
    if lines.is_empty() {
        return writeln!(w, "  (no calls)");
    }
    let width = lines
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    let cell = |c: &Counts, f: &dyn Fn(&Counts) -> Option<u64>| {
        f(c).map_or_else(|| "-".to_string(), |v| v.to_string())
    };
    let rows: Vec<[String; 4]> = lines
        .iter()
        .map(|(_, c)| {
            let timed = !std::ptr::eq(*c, &lost);
            [
                c.count.to_string(),
                cell(c, &|c| {
                    c.total_ns
                        .checked_div(c.count)
                        .filter(|_| timed)
                        .map(|a| a / unit.ns())
                }),
                cell(c, &|c| percentile(c, 50.0)),
                cell(c, &|c| percentile(c, 99.0)),
            ]
        })
        .collect();
    let wid = |i: usize| rows.iter().map(|r| r[i].len()).max().unwrap_or(0);
    let (w0, w1, w2, w3) = (wid(0), wid(1), wid(2), wid(3));
    for ((l, _), r) in lines.iter().zip(&rows) {
        let pad = width - l.chars().count();
        writeln!(
            w,
            "{l}{:pad$}   count {:>w0$}   avg {:>w1$} {u}   p50 {:>w2$} {u}   p99 {:>w3$} {u}",
            "", r[0], r[1], r[2], r[3]
        )?;
    }
    Ok(())
}

/// The fields `stats_json` gives a group.
const STATS_FIELDS: [&str; 4] = ["count", "total_ns", "avg_ns", "percentiles_ns"];

/// Count, total, avg and percentiles of a group in JSON.
fn stats_json(c: &Counts, unit: Unit) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("count".into(), json!(c.count));
    m.insert("total_ns".into(), json!(c.total_ns));
    m.insert("avg_ns".into(), json!(c.total_ns.checked_div(c.count)));
    let mut pct = Map::new();
    let qs: Vec<f64> = PERCENTILES.iter().map(|p| p.0).collect();
    for ((_, name), p) in PERCENTILES.iter().zip(c.hist.percentiles(&qs)) {
        let v = p.map(|(lo, hi)| (lo + (hi - lo) / 2).saturating_mul(unit.ns()));
        pct.insert(name.to_string(), json!(v));
    }
    m.insert("percentiles_ns".into(), Value::Object(pct));
    m
}

/// The JSON fields of a function's groups: `by`, `groups` (each with its
/// key values under the key's name, and its stats), `groups_other`
/// (`--top`'s fold) and `groups_not_kept` (the full map's).
pub fn json_fields(g: &Groups, unit: Unit, into: &mut Value) {
    let groups: Vec<Value> = g
        .groups
        .iter()
        .map(|x| {
            let mut m = stats_json(&x.counts, unit);
            for k in &x.keys {
                let (name, v) = k.json();
                m.insert(name, v);
            }
            Value::Object(m)
        })
        .collect();
    into["by"] = json!(g.by);
    into["groups"] = Value::Array(groups);
    into["groups_other"] = match &g.folded {
        Some((n, c)) => {
            let mut m = stats_json(c, unit);
            m.insert("groups".into(), json!(n));
            Value::Object(m)
        }
        None => Value::Null,
    };
    into["groups_lost"] = json!(g.lost);
    into["groups_not_kept"] = match &g.full {
        Some((cap, c)) => {
            let mut m = stats_json(c, unit);
            m.insert("map_groups".into(), json!(cap));
            Value::Object(m)
        }
        None => Value::Null,
    };
}

/// `--by stack --folded`: each function's chains of callers as folded
/// stacks, the outermost caller first and the function last, weighted by
/// calls (`main;route_b;step_b;slow 24`): what inferno and flamegraph.pl
/// draw.
pub fn render_folded(report: &super::Report, w: &mut impl Write) -> io::Result<()> {
    for f in &report.funcs {
        let Some(g) = &f.groups else {
            continue;
        };
        for grp in &g.groups {
            let Some(KeyValue::Stack { frames }) = grp.keys.first() else {
                continue;
            };
            let mut chain: Vec<&str> = frames.iter().rev().map(String::as_str).collect();
            chain.push(&f.name);
            writeln!(w, "{} {}", chain.join(";"), grp.counts.count)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(n: u64, ns: u64) -> Counts {
        let mut c = Counts {
            count: n,
            total_ns: n * ns,
            ..Counts::default()
        };
        c.hist.buckets[super::super::hist::bucket_of(ns)] += n;
        c
    }

    fn tid(t: u32) -> Vec<KeyValue> {
        vec![KeyValue::Thread {
            tid: t,
            comm: format!("w{t}"),
        }]
    }

    #[test]
    fn top_folds_the_smallest_by_total() {
        let named = vec![
            Group {
                keys: tid(1),
                counts: calls(10, 100),
            },
            Group {
                keys: tid(2),
                counts: calls(5, 1000),
            },
            Group {
                keys: tid(3),
                counts: calls(100, 1),
            },
            Group {
                keys: tid(2),
                counts: calls(5, 1000),
            },
        ];
        let g = Groups::build(vec!["tid".into()], named, None, Some(1));
        assert_eq!(g.groups.len(), 1);
        assert_eq!(g.groups[0].keys, tid(2));
        assert_eq!(g.groups[0].counts.count, 10);
        let (n, c) = g.folded.as_ref().unwrap();
        assert_eq!((*n, c.count, c.total_ns), (2, 110, 1100));
    }

    #[test]
    fn raw_groups_merge_by_key() {
        let g = |vals: Vec<u64>, n| RawGroup {
            id: 0,
            vals,
            counts: calls(n, 10),
            ..RawGroup::default()
        };
        let mut all = vec![g(vec![1, 0], 2)];
        merge_raw(&mut all, vec![g(vec![1, 0], 3), g(vec![2, 0], 1)]);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].counts.count, 5);
    }
}
