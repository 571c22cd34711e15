//! What `tachy nested` adds to the flow of `tachy latency`: the tree of
//! call sites under each traced function, its report and its header line.

use std::time::SystemTime;

use super::options::{ReportOptions, TreeOptions};
use crate::plan::{self, Plan};
use crate::report::tree::{TreeNode, TreeReport};
use crate::report::Counts;

/// The "Tracing ..." line of `tachy nested`: the functions, and how many
/// call sites under them at how many levels.
pub fn tracing_line(plan: &Plan, names: &str, whom: &str) -> String {
    let levels = plan.sites.iter().map(|x| x.level).max().unwrap_or(0);
    format!(
        "Tracing {} and {} call site{} ({} level{}) {whom}. Hit Ctrl-C to end.",
        names,
        plan.sites.len(),
        if plan.sites.len() == 1 { "" } else { "s" },
        levels,
        if levels == 1 { "" } else { "s" },
    )
}

/// Many call sites make every traced call slower: said before tracing.
pub fn warn_many_sites(plan: &Plan) {
    if plan.sites.len() > 300 {
        eprintln!(
            "tachy: warning: {} call sites is many; each traced call pays for every site it passes",
            plan.sites.len()
        );
    }
}

/// The tree of `tachy nested` from `counts`, one root per traced function.
pub fn tree_report(
    plan: &Plan,
    o: &ReportOptions,
    t: &TreeOptions,
    counts: &[Counts],
) -> TreeReport {
    TreeReport {
        time: SystemTime::now(),
        timestamp: o.timestamp,
        unit: o.unit,
        filter: t.filter.clone(),
        callees_before: t.callees_before.clone(),
        all_sites: t.all_sites,
        roots: (0..plan.items.len() as u32)
            .map(|id| tree_node(plan, counts, id, t.hist))
            .collect(),
    }
}

/// The tree under node `id`.
fn tree_node(plan: &Plan, counts: &[Counts], id: u32, hist: bool) -> TreeNode {
    let c = &counts[id as usize];
    // A site is Go code when its traced function is.
    let go = plan
        .items
        .get(plan.root_of(id) as usize)
        .is_some_and(|f| f.is_go());
    let kids = plan
        .children(id)
        .iter()
        .map(|&k| tree_node(plan, counts, k, hist))
        .collect();
    // An indirect call whose probe reads its callee: the callees seen.
    let callees = match plan.site(id) {
        Some(x) if plan.reads_callee(x.slot) => {
            let mut list = c.callees.clone();
            list.sort_by(|a, b| (b.count, &a.name).cmp(&(a.count, &b.name)));
            Some(list)
        }
        _ => None,
    };
    let (name, site, kind) = match plan.node(id) {
        Some(plan::Node::Site(x)) => (
            x.site.name.clone(),
            x.site.location.clone(),
            x.site.kind.as_str(),
        ),
        Some(plan::Node::Item(f)) => (f.name.clone(), None, "function"),
        None => (format!("#{id}"), None, "function"),
    };
    TreeNode {
        name,
        site,
        kind,
        count: c.count,
        total_ns: c.total_ns,
        unwound: c.unwound,
        filtered: c.filtered,
        arg_filtered: c.arg_filtered,
        hist: (hist && kind != "function").then(|| c.hist.clone()),
        hist_early: c.hist_early,
        cpu: c.cpu.clone(),
        probe_ns: c.probe_ns,
        probe_add_ns: c.probe_add_ns,
        under: c.under,
        go,
        callees,
        via: plan
            .site(id)
            .and_then(|x| x.via.as_ref())
            .map(|v| v.name.clone()),
        estimated: c.estimated,
        children: kids,
    }
}
