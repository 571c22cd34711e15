//! Report assembly: the plan's names put to the counts the kernel kept,
//! as the flat report of `tachy latency`, the histograms of `--hlog`, the
//! series of the metrics, the groups of `--by` and the processes that
//! contributed. Pure: nothing here reads the kernel or writes.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use super::options::ReportOptions;
use crate::naming::Namer;
use crate::plan::{self, Plan};
use crate::report::groups::RawGroup;
use crate::report::prom;
use crate::report::{self, Counts, FuncReport, Report};

/// The report of the traced functions' `counts`, gathered over `span`.
pub fn flat_report(plan: &Plan, o: &ReportOptions, counts: &[Counts], span: Duration) -> Report {
    Report {
        time: SystemTime::now(),
        span: Some(span),
        unit: o.unit,
        timestamp: o.timestamp,
        all: o.all,
        funcs: plan
            .items
            .iter()
            .zip(counts)
            .map(|(f, counts)| FuncReport {
                name: f.name.clone(),
                raw_name: f.raw_name.clone(),
                object: plan.object_of(f).to_path_buf(),
                go: f.is_go(),
                counts: counts.clone(),
                groups: None,
            })
            .collect(),
    }
}

/// The histograms of `--hlog`: every traced function's, and with `tachy
/// nested` every call site's, named by its path from the traced function
/// (`f;g [a.c:12];h [b.c:40]`, the frames of the folded stacks) in the
/// object of that function.
pub fn hlog_report(plan: &Plan, o: &ReportOptions, counts: &[Counts], span: Duration) -> Report {
    let mut report = flat_report(plan, o, counts, span);
    if o.tree.is_none() {
        return report;
    }
    let clean = |name: &str| name.replace([';', '\n'], ",");
    let frame = |x: &plan::SiteNode| match &x.site.location {
        Some(l) => clean(&format!("{} [{l}]", x.site.name)),
        None => clean(&x.site.name),
    };
    // A site's path is its parent's and one more frame; parents come
    // before their sites in the plan. The root is a traced function.
    let mut paths: HashMap<u32, String> = HashMap::with_capacity(plan.sites.len());
    for (id, x) in plan.site_ids() {
        let up = match plan.node(x.parent) {
            Some(plan::Node::Item(f)) => Some(clean(&f.name)),
            _ => paths.get(&x.parent).cloned(),
        };
        let Some(base) = up else { continue };
        let path = format!("{base};{}", frame(x));
        paths.insert(id, path.clone());
        let (Some(f), Some(c)) = (
            plan.items.get(plan.root_of(id) as usize),
            counts.get(id as usize),
        ) else {
            continue;
        };
        report.funcs.push(FuncReport {
            raw_name: path.clone(),
            name: path,
            object: plan.object_of(f).to_path_buf(),
            go: f.is_go(),
            counts: c.clone(),
            groups: None,
        });
    }
    report
}

/// The series of `--prometheus` and `--textfile`: one per traced function,
/// one per call site of `tachy nested` and those of the `--by` groups,
/// labelled with names as the reports show them and the user's labels
/// (`user`).
pub fn metric_series(
    plan: &Plan,
    user: &[(String, String)],
    counts: &[Counts],
    groups: Option<&prom::GroupTally>,
) -> Vec<prom::Series> {
    let name_of = |id: u32| plan.node(id).map(|n| n.name().to_string());
    let series = |kind, mut labels: Vec<(String, String)>, c: &Counts| {
        labels.extend(user.iter().cloned());
        prom::Series {
            kind,
            labels,
            hist: c.hist.clone(),
            count: c.count,
            total_ns: c.total_ns,
            unwound: c.unwound,
            filtered: c.filtered,
            arg_filtered: c.arg_filtered,
        }
    };
    let mut out: Vec<prom::Series> = Vec::with_capacity(counts.len());
    let function_labels = |id: u32| match plan.items.get(id as usize) {
        Some(f) => vec![
            ("function".into(), f.name.clone()),
            ("object".into(), plan.object_of(f).display().to_string()),
        ],
        None => vec![("function".into(), format!("#{id}"))],
    };
    for (id, c) in (0..plan.items.len() as u32).zip(counts) {
        out.push(series(prom::SeriesKind::Function, function_labels(id), c));
    }
    for ((id, x), c) in plan.site_ids().zip(counts.iter().skip(plan.items.len())) {
        let location = match &x.site.location {
            Some(l) => l.clone(),
            None => format!("{:#x}", x.site.addr),
        };
        let labels = vec![
            (
                "function".into(),
                name_of(plan.root_of(id)).unwrap_or_default(),
            ),
            ("caller".into(), name_of(x.parent).unwrap_or_default()),
            ("site".into(), x.site.name.clone()),
            ("location".into(), location),
        ];
        out.push(series(prom::SeriesKind::Site, labels, c));
    }
    for mut g in groups
        .map(|g| g.series(function_labels))
        .unwrap_or_default()
    {
        g.labels.extend(user.iter().cloned());
        out.push(g);
    }
    // Two series may not share their labels: the same function name in one
    // object twice, or one line calling the same function twice. The
    // second gets `(2)` after its last own label.
    let own = |s: &prom::Series| s.labels.len() - user.len();
    for i in 1..out.len() {
        let mut n = 1;
        while out[..i].iter().any(|o| o.labels == out[i].labels) {
            n += 1;
            let k = own(&out[i]) - 1;
            let base = out[i].labels[k]
                .1
                .trim_end_matches(&format!(" ({})", n - 1))
                .to_string();
            out[i].labels[k].1 = format!("{base} ({n})");
        }
    }
    out
}

/// --by: the groups of an interval as the kernel counted them, how to
/// name their keys, and how many the kernel keeps.
pub struct GroupsIn<'a> {
    pub raw: &'a [RawGroup],
    /// `--by stack`: each function's calls whose records (and so stacks)
    /// the ring buffer had no room for, by function id.
    pub lost: &'a [u64],
    pub namer: &'a mut Namer,
    pub max: u32,
}

/// --by: each function's groups, named, sorted and folded by --top.
pub fn add_groups(report: &mut Report, o: &ReportOptions, g: &mut GroupsIn<'_>) {
    if o.by.is_empty() {
        return;
    }
    let by = o.by_names();
    for (id, f) in report.funcs.iter_mut().enumerate() {
        let mut named = Vec::new();
        let mut full: Option<(u64, Counts)> = None;
        for r in g.raw.iter().filter(|r| r.id as usize == id) {
            if r.other {
                full.get_or_insert_with(|| (g.max.into(), Counts::default()))
                    .1
                    .merge(&r.counts);
            } else {
                named.push(report::groups::Group {
                    keys: g.namer.name(&o.by, r),
                    counts: r.counts.clone(),
                });
            }
        }
        let mut groups = report::groups::Groups::build(by.clone(), named, full, o.top);
        groups.lost = g.lost.get(id).copied().unwrap_or(0);
        f.groups = Some(groups);
    }
}

/// A process that entered a traced function during a report's interval.
pub struct Contributor {
    pub pid: u32,
    pub comm: String,
    /// Calls entered (of the traced functions, not their call sites).
    pub calls: u64,
}

/// The processes a report names, when the trace is scoped to several.
pub fn contributors(
    plan: &Plan,
    procs: &BTreeMap<u32, u64>,
    comms: &HashMap<u32, String>,
) -> Option<Vec<Contributor>> {
    plan.settings.count_procs.then(|| {
        procs
            .iter()
            .map(|(&pid, &calls)| Contributor {
                pid,
                comm: comms.get(&pid).cloned().unwrap_or_else(|| "?".into()),
                calls,
            })
            .collect()
    })
}

/// The line of a text report that names the processes that contributed.
/// Their calls are counted at entry, so they also hold the calls a
/// function's `count` leaves out (left by exception, filtered out, still
/// running when the report was taken): the line says so, since a `--by
/// pid` table above it counts calls timed, and the two differ by those.
pub fn contributors_line(who: &[Contributor]) -> String {
    if who.is_empty() {
        return "processes: none entered a traced function".to_string();
    }
    let list: Vec<String> = who
        .iter()
        .map(|c| format!("{} ({}) {}", c.pid, c.comm, c.calls))
        .collect();
    format!(
        "processes, by calls entered (timed or not: also those left by exception, filtered out or still running, which count leaves out): {}",
        list.join(", ")
    )
}

/// A report's JSON object with a `processes` array added.
pub fn with_contributors(mut v: serde_json::Value, who: &[Contributor]) -> serde_json::Value {
    if let serde_json::Value::Object(o) = &mut v {
        let list: Vec<serde_json::Value> = who
            .iter()
            .map(|c| serde_json::json!({"pid": c.pid, "comm": c.comm, "calls": c.calls}))
            .collect();
        o.insert("processes".into(), serde_json::Value::Array(list));
    }
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_processes_line_says_it_counts_calls_entered() {
        let who = [
            super::Contributor {
                pid: 4242,
                comm: "kvd".into(),
                calls: 812,
            },
            super::Contributor {
                pid: 4250,
                comm: "kvd".into(),
                calls: 1,
            },
        ];
        assert_eq!(
            super::contributors_line(&who),
            "processes, by calls entered (timed or not: also those left by exception, filtered out or still running, which count leaves out): 4242 (kvd) 812, 4250 (kvd) 1"
        );
    }
}
