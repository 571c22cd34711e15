//! The `tachy nested` report: a tree of call sites under each traced
//! function, with counts, averages, self time and shares; rendered as text,
//! JSON, folded stacks or a flame graph.

use std::io::{self, Write};
use std::time::SystemTime;

use serde_json::{json, Value};

use super::counts::{Callee, CpuSplit, Unit, CPU_PARTS};
use super::fmt::{
    clock, compact, cpu_json, human, print_log2_hist, probe_time_note, probe_time_note_of,
    render_split_hist,
};
use super::hist::Hist;

/// `--cpu` on a line of the tree: each part's share of the node's time.
fn shares(split: &CpuSplit) -> String {
    let parts = split.parts();
    let sum: u64 = parts.iter().sum();
    let words: Vec<String> = CPU_PARTS
        .iter()
        .zip(parts)
        .map(|((name, _), ns)| format!("{name} {:.1}%", pct(ns, sum)))
        .collect();
    format!("[{}]", words.join(", "))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeNode {
    pub name: String,
    /// `file:line` of a call site; None for a traced function.
    pub site: Option<String>,
    /// `function`, `call`, `plt`, `indirect` or `tail`.
    pub kind: &'static str,
    pub count: u64,
    pub total_ns: u64,
    pub unwound: u64,
    /// Calls of a traced function outside the duration filter.
    pub filtered: u64,
    /// `--filter`: calls of a traced function its expression rejected at
    /// their entry (None: no filter).
    pub arg_filtered: Option<u64>,
    pub hist: Option<Hist>,
    /// Calls in `hist` bucketed before the duration filter had decided on
    /// their traced call: the histogram may hold some filtered-out calls.
    pub hist_early: u64,
    /// `--cpu`: where `total_ns` went (no part histograms here).
    pub cpu: Option<CpuSplit>,
    /// The probes' own time subtracted from each call (0: none), and the
    /// calls shorter than that.
    pub probe_ns: u64,
    pub under: u64,
    /// The probes' own time each call leaves in its parent's reading (and
    /// subtracted from it), in ns.
    pub probe_add_ns: u64,
    /// Go code: what a C++ exception leaves is left by a panic here, and a
    /// site left by one is counted, never timed.
    pub go: bool,
    /// An indirect call site whose probe reads its callee: the calls made
    /// through it per callee, the most called first (None: not read).
    pub callees: Option<Vec<Callee>>,
    /// A site of a callee broken down under an indirect call (its parent):
    /// the callee's name. It counts the calls through that call to it.
    pub via: Option<String>,
    /// `--max-overhead` sampled the site: its counts, times and callees
    /// are scaled up from the share of the time it was timed.
    pub estimated: bool,
    pub children: Vec<TreeNode>,
}

impl TreeNode {
    /// Calls made: for a site, those left by exception or panic too; for a
    /// traced function, completed calls only.
    pub fn calls(&self) -> u64 {
        if self.kind == "function" {
            self.count
        } else {
            self.count + self.unwound
        }
    }

    /// Calls in `total_ns`: a C or C++ site's left by exception are timed
    /// up to when tachy saw them leave; a Go site's left by panic are not.
    pub fn timed_calls(&self) -> u64 {
        if self.go {
            self.count
        } else {
            self.calls()
        }
    }

    /// What a call that did not return was left by.
    fn left_by(&self) -> &'static str {
        if self.go {
            "left by panic"
        } else {
            "left by exception"
        }
    }

    /// Whether it, or anything under it, was called: sites that never ran
    /// are left out of the text report unless `all_sites`.
    pub fn ran(&self) -> bool {
        self.calls() > 0 || self.children.iter().any(TreeNode::ran)
    }

    /// It and every node under it.
    fn size(&self) -> u64 {
        1 + self.children.iter().map(TreeNode::size).sum::<u64>()
    }

    /// Own time: total less the children's, never negative.
    /// The probe time the call sites under this node leave in its
    /// readings (and the kernel subtracts from them), in ns, and the calls
    /// of those sites.
    pub fn site_probe_time(&self) -> (u64, u64) {
        self.children.iter().fold((0, 0), |(ns, n), c| {
            let (kns, kn) = c.site_probe_time();
            let calls = c.calls();
            (ns + calls * c.probe_add_ns + kns, n + calls + kn)
        })
    }

    pub fn self_ns(&self) -> u64 {
        let kids: u64 = self.children.iter().map(|c| c.total_ns).sum();
        self.total_ns.saturating_sub(kids)
    }

    /// `--cpu`: the split of the own time, each part less the children's.
    pub fn self_cpu(&self) -> Option<CpuSplit> {
        let own = self.cpu.as_ref()?;
        let mut parts = own.parts();
        for c in &self.children {
            if let Some(k) = &c.cpu {
                for (p, kp) in parts.iter_mut().zip(k.parts()) {
                    *p = p.saturating_sub(kp);
                }
            }
        }
        Some(CpuSplit {
            oncpu_ns: parts[0],
            blocked_ns: parts[1],
            runq_ns: parts[2],
            hist: None,
        })
    }

    /// The text report's label: `file:line  name`, long C++ names shortened.
    fn label(&self) -> String {
        self.label_with(Some(50), 60)
    }

    /// The label in at most `width` characters where shorter forms allow:
    /// the inline chain of its location is shortened, then left out (the
    /// line in the function stays), then the name is shortened further;
    /// what is still too long is cut.
    fn label_within(&self, width: usize) -> String {
        let forms = [(Some(50), 60), (Some(24), 60), (None, 60), (None, 30)];
        let mut label = String::new();
        for (chain, name) in forms {
            label = self.label_with(chain, name);
            if label.chars().count() <= width {
                return label;
            }
        }
        fit(&label, width)
    }

    /// The label with the inline chain in about `chain` characters (None:
    /// only `(inlined)`) and the name in about `name`.
    fn label_with(&self, chain: Option<usize>, name: usize) -> String {
        let tail = if self.kind == "tail" { " (tail)" } else { "" };
        let name = compact(&self.name, name);
        match &self.site {
            Some(s) => {
                let s = match (s.split_once(" (inlined from "), chain) {
                    (Some((at, f)), Some(max)) => format!(
                        "{at} (inlined from {})",
                        short_chain(f.strip_suffix(')').unwrap_or(f), max)
                    ),
                    (Some((at, _)), None) => format!("{at} (inlined)"),
                    (None, _) => s.clone(),
                };
                format!("{s}  {name}{tail}")
            }
            None => format!("{name}{tail}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeReport {
    pub time: SystemTime,
    pub timestamp: bool,
    pub unit: Unit,
    /// Says which root calls were kept, e.g. "slower than 1ms".
    pub filter: Option<String>,
    /// The options that drop a traced call's site counts when it ends
    /// (`--slower-than`, a `--filter` on the return value), which the
    /// callees of indirect sites are counted before: at the call, over
    /// every call made. None where the callees count only calls kept.
    pub callees_before: Option<String>,
    /// Show sites that never ran in the text report (`--all-sites`).
    pub all_sites: bool,
    pub roots: Vec<TreeNode>,
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

pub fn render_text(r: &TreeReport, w: &mut impl Write) -> io::Result<()> {
    if r.timestamp {
        writeln!(w, "{}", clock(r.time))?;
    }
    for (i, root) in r.roots.iter().enumerate() {
        if i > 0 {
            writeln!(w)?;
        }
        let width = label_width(root, 0, r.all_sites).clamp(30, 90);
        let mut head = format!("{}  calls {}", root.name, root.count);
        if root.filtered > 0 {
            let what = r.filter.as_deref().unwrap_or("in the duration filter");
            head.push_str(&format!(
                " (of {}; {} not {what})",
                root.count + root.filtered,
                root.filtered
            ));
        }
        if let Some(a) = root.arg_filtered {
            head.push_str(&format!("; {a} filtered out by --filter"));
        }
        if root.count > 0 {
            head.push_str(&format!(
                "  avg {}  total {}",
                human(root.total_ns as f64 / root.count as f64),
                human(root.total_ns as f64)
            ));
        }
        if root.unwound > 0 {
            head.push_str(&format!("  {}: {}", root.left_by(), root.unwound));
        }
        if let (Some(split), true) = (&root.cpu, root.count > 0) {
            head.push_str(&format!("  {}", shares(split)));
        }
        writeln!(w, "{head}")?;
        let l = Layout {
            root_total: root.total_ns,
            width,
            unit: r.unit,
            filtered: r.filter.is_some(),
            all_sites: r.all_sites,
            callees_before: r.callees_before.as_deref(),
        };
        let hidden = render_children(root, 1, &l, w)?;
        if hidden > 0 {
            let what = if hidden == 1 {
                "1 call site that never ran is hidden".to_string()
            } else {
                format!("{hidden} call sites that never ran are hidden")
            };
            writeln!(w, "  ({what}: --all-sites shows them)")?;
        }
        if let Some(hist) = root.cpu.as_ref().and_then(|c| c.hist.as_ref()) {
            writeln!(w, "  {}, each part per call:", root.name)?;
            part_tables(hist, r.unit, "    ", w)?;
        }
        for note in probe_time_notes(root) {
            writeln!(w, "  {note}")?;
        }
    }
    Ok(())
}

/// What the probes took from each call of a traced function: its own
/// probes and those of the call sites inside it. Where that is more than
/// the call's corrected time, a second line says the reading is mostly
/// the probes': a hit in real code (cold caches, a single-step in a large
/// process) costs up to about twice what the calibration measures on
/// tachy's own code, so the average may read high by up to as much as was
/// subtracted.
fn probe_time_notes(root: &TreeNode) -> Vec<String> {
    let (sites_ns, site_calls) = root.site_probe_time();
    let calls = root.count + root.unwound;
    if site_calls == 0 || calls == 0 || root.probe_ns == 0 {
        return probe_time_note(root.probe_ns, root.under)
            .into_iter()
            .collect();
    }
    let in_sites = sites_ns / calls;
    let total = root.probe_ns + in_sites;
    let parts = format!(
        " (its own probes ~{:.2} us, {} call-site calls ~{:.2} us)",
        root.probe_ns as f64 / 1000.0,
        per_call(site_calls as f64 / calls as f64),
        in_sites as f64 / 1000.0
    );
    let mut out: Vec<String> = probe_time_note_of(total, &parts, root.under)
        .into_iter()
        .collect();
    let avg = root.total_ns as f64 / root.count.max(1) as f64;
    if root.count > 0 && total as f64 > avg {
        out.push(format!(
            "the probes' own time is {:.0}% of each call's raw reading: a probe hit in real code can cost up to about twice its price measured here, so the average may read up to ~{} high (fewer call sites read closer: --depth 1, --max-overhead)",
            100.0 * total as f64 / (total as f64 + avg),
            human(total as f64)
        ));
    }
    out
}

/// `--cpu --hist`: the log2 table of each part per call, indented.
fn part_tables(
    hist: &[Vec<u64>; 3],
    unit: Unit,
    indent: &str,
    w: &mut impl Write,
) -> io::Result<()> {
    let mut buf = Vec::new();
    render_split_hist(hist, unit, &mut buf)?;
    for l in String::from_utf8_lossy(&buf).lines().skip(1) {
        if l.is_empty() {
            writeln!(w)?;
        } else {
            writeln!(w, "{indent}{l}")?;
        }
    }
    Ok(())
}

/// Calls of a site per call of its parent: two decimals, more when those
/// would show a site that ran as 0.00 (two significant digits).
pub fn per_call(v: f64) -> String {
    if v == 0.0 || v >= 0.005 {
        return format!("{v:.2}");
    }
    let decimals = ((-v.log10()).ceil() as usize + 1).min(12);
    format!("{v:.decimals$}")
}

/// What a site's location says it was inlined from, in about `max`
/// characters: a chain of lines (`vector.h:1198 > new_allocator.h:151`)
/// keeps its first and last, else its last; a function name is shortened
/// as names are.
fn short_chain(chain: &str, max: usize) -> String {
    if chain.chars().count() <= max {
        return chain.to_string();
    }
    let parts: Vec<&str> = chain.split(" > ").collect();
    match parts.as_slice() {
        [first, _, .., last] if first.chars().count() + last.chars().count() + 7 <= max => {
            format!("{first} > … > {last}")
        }
        [_, .., last] => format!("… > {last}"),
        _ => compact(chain, max),
    }
}

/// `label` in at most `width` characters: cut, with `…` at the cut, so
/// that the columns after it stay aligned.
fn fit(label: &str, width: usize) -> String {
    if label.chars().count() <= width {
        return label.to_string();
    }
    let mut out: String = label.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The widest label of the nodes shown.
fn label_width(n: &TreeNode, depth: usize, all_sites: bool) -> usize {
    let own = if depth == 0 {
        0
    } else {
        depth * 2 + n.label().chars().count()
    };
    n.children
        .iter()
        .filter(|c| all_sites || c.ran())
        .map(|c| label_width(c, depth + 1, all_sites))
        .max()
        .unwrap_or(0)
        .max(own)
}

/// Where the children of a node are drawn, and how.
struct Layout<'a> {
    root_total: u64,
    width: usize,
    unit: Unit,
    /// A duration filter chose the root calls.
    filtered: bool,
    /// Show the sites that never ran too.
    all_sites: bool,
    /// What the callees of indirect sites are counted before (see
    /// [`TreeReport::callees_before`]).
    callees_before: Option<&'a str>,
}

/// Draws the children of `parent`, and returns how many nodes were left
/// out because they never ran.
fn render_children(
    parent: &TreeNode,
    depth: usize,
    l: &Layout,
    w: &mut impl Write,
) -> io::Result<u64> {
    let Layout {
        root_total,
        width,
        unit,
        filtered,
        all_sites,
        callees_before,
    } = *l;
    if parent.children.is_empty() {
        return Ok(0);
    }
    let (shown, idle): (Vec<&TreeNode>, Vec<&TreeNode>) =
        parent.children.iter().partition(|c| all_sites || c.ran());
    let mut hidden: u64 = idle.iter().map(|c| c.size()).sum();
    // With none of its sites shown, its self time is its total: no line.
    if shown.is_empty() {
        return Ok(hidden);
    }
    let indent = "  ".repeat(depth);
    let pcount = parent.calls() as f64;
    let ptimed = parent.timed_calls() as f64;
    let pad = width.saturating_sub(indent.len());
    let s = parent.self_ns();
    // A parent that never ran (its sites shown by --all-sites) has no self.
    if ptimed > 0.0 {
        let mut line = format!(
            "{indent}{:<pad$}  {:>15}  avg {:>9}  {:>5.1}%",
            "self",
            "",
            human(s as f64 / ptimed),
            pct(s, root_total)
        );
        if let Some(split) = parent.self_cpu() {
            line.push_str(&format!("  {}", shares(&split)));
        }
        writeln!(w, "{line}")?;
    }
    let mut via = None;
    for c in shown {
        // The sites of each callee under an indirect call, after its name.
        if c.via.is_some() && c.via != via {
            via = c.via.clone();
            writeln!(w, "{indent}in {}:", via.as_deref().unwrap_or_default())?;
        }
        // A callee's site under an indirect call: per call of that callee
        // (unless a filter counted the site's calls and not the callee's).
        let per = match (&c.via, &parent.callees, callees_before) {
            (Some(v), Some(list), None) => {
                list.iter().find(|x| &x.name == v).map(|x| x.count as f64)
            }
            _ => None,
        };
        let pcount = per.unwrap_or(pcount);
        let rate = if pcount > 0.0 {
            c.calls() as f64 / pcount
        } else {
            0.0
        };
        let tilde = if c.estimated { "~" } else { "" };
        let per_call = format!("{tilde}{} per call", per_call(rate));
        let avg = if c.timed_calls() > 0 {
            human(c.total_ns as f64 / c.timed_calls() as f64)
        } else {
            "-".into()
        };
        let mut line = format!(
            "{indent}{:<pad$}  {per_call:>15}  avg {avg:>9}  {:>5.1}%",
            c.label_within(pad),
            pct(c.total_ns, root_total)
        );
        if let (Some(split), true) = (&c.cpu, c.calls() > 0) {
            line.push_str(&format!("  {}", shares(split)));
        }
        if c.unwound > 0 {
            line.push_str(&format!("  ({} {})", c.unwound, c.left_by()));
        }
        writeln!(w, "{line}")?;
        if let Some(list) = c.callees.as_ref().filter(|l| !l.is_empty()) {
            let counts = if c.estimated {
                callee_words_with(list, "~")
            } else {
                callee_words(list)
            };
            match callees_before {
                Some(f) => writeln!(w, "{indent}  -> callees (all calls, before {f}): {counts}")?,
                None => writeln!(w, "{indent}  -> callees: {counts}")?,
            }
        }
        if let Some(h) = &c.hist {
            let mut buf = Vec::new();
            print_log2_hist(&h.log2_slots(), unit.word(), &mut buf)?;
            for l in String::from_utf8_lossy(&buf).lines() {
                writeln!(w, "{indent}    {l}")?;
            }
            if c.hist_early > 0 && filtered {
                writeln!(
                    w,
                    "{indent}    ({} of these were counted before the filter decided: over 512 site calls or sites in one call)",
                    c.hist_early
                )?;
            }
        }
        if let Some(hist) = c.cpu.as_ref().and_then(|s| s.hist.as_ref()) {
            if c.calls() > 0 {
                part_tables(hist, unit, &format!("{indent}    "), w)?;
            }
        }
        hidden += render_children(c, depth + 1, l, w)?;
    }
    Ok(hidden)
}

/// `foo 80, bar 20`: each callee and its calls.
pub fn callee_words(list: &[Callee]) -> String {
    callee_words_with(list, "")
}

/// As [`callee_words`], each count after `mark` (`~` for an estimate).
fn callee_words_with(list: &[Callee], mark: &str) -> String {
    list.iter()
        .map(|c| format!("{} {mark}{}", c.name, c.count))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Node `n` as JSON; `before`: what its callees are counted before (see
/// [`TreeReport::callees_before`]).
fn node_json(n: &TreeNode, before: Option<&str>) -> Value {
    let mut v = json!({
        "name": n.name,
        "site": n.site,
        "kind": n.kind,
        "count": n.count,
        "total_ns": n.total_ns,
        "self_ns": n.self_ns(),
        "unwound": n.unwound,
        "children": n.children.iter().map(|c| node_json(c, before)).collect::<Vec<_>>(),
    });
    if n.estimated {
        v["estimated"] = json!(true);
    }
    if n.go && n.kind == "function" {
        v["go"] = json!(true);
    }
    if n.kind == "function" {
        v["filtered"] = json!(n.filtered);
        if let Some(a) = n.arg_filtered {
            v["filtered_by_args"] = json!(a);
        }
    }
    if let (Some(split), Some(own)) = (&n.cpu, n.self_cpu()) {
        v["cpu"] = cpu_json(split);
        v["self_cpu"] = cpu_json(&own);
    }
    if n.probe_ns > 0 {
        v["probe_ns_per_call"] = json!(n.probe_ns);
        v["shorter_than_probe_time"] = json!(n.under);
        // A traced function's calls also hold its sites' probe time.
        let (sites_ns, site_calls) = n.site_probe_time();
        let calls = n.count + n.unwound;
        if n.kind == "function" && site_calls > 0 && calls > 0 {
            v["site_probe_ns_per_call"] = json!(sites_ns / calls);
        }
    }
    if let Some(via) = &n.via {
        v["via"] = json!(via);
    }
    if let Some(list) = &n.callees {
        if let Some(f) = before {
            v["callees_before_filter"] = json!(f);
        }
        v["callees"] = list
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "object": c.object,
                    "addr": c.addr.map(|a| format!("{a:#x}")),
                    "count": c.count,
                })
            })
            .collect();
    }
    if let Some(h) = &n.hist {
        v["log2_buckets"] = json!(h.log2_slots());
        v["hist_early"] = json!(n.hist_early);
    }
    v
}

pub fn render_json(r: &TreeReport, w: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut *w, &json_value(r))?;
    writeln!(w)
}

/// The report as one JSON object.
pub fn json_value(r: &TreeReport) -> serde_json::Value {
    let ts = r
        .time
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let before = r.callees_before.as_deref();
    let roots: Vec<Value> = r.roots.iter().map(|n| node_json(n, before)).collect();
    json!({ "time": ts, "roots": roots })
}

/// Folded stacks (`root;site;site weight`), weighted by self nanoseconds.
pub fn folded_lines(r: &TreeReport) -> Vec<String> {
    fn frame(n: &TreeNode) -> String {
        let name = match &n.site {
            Some(s) => format!("{} [{s}]", n.name),
            None => n.name.clone(),
        };
        name.replace([';', '\n'], ",")
    }
    fn walk(n: &TreeNode, stack: &mut Vec<String>, out: &mut Vec<String>) {
        stack.push(frame(n));
        let s = n.self_ns();
        if s > 0 {
            out.push(format!("{} {s}", stack.join(";")));
        }
        for c in &n.children {
            walk(c, stack, out);
        }
        stack.pop();
    }
    let mut out = Vec::new();
    for root in &r.roots {
        walk(root, &mut Vec::new(), &mut out);
    }
    out
}

pub fn render_folded(r: &TreeReport, w: &mut impl Write) -> io::Result<()> {
    for l in folded_lines(r) {
        writeln!(w, "{l}")?;
    }
    Ok(())
}

/// A flame graph (SVG) of the folded stacks, drawn by inferno.
pub fn render_svg(r: &TreeReport, w: &mut impl Write) -> io::Result<()> {
    let lines = folded_lines(r);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "tachy nested".to_string();
    opts.count_name = "ns".to_string();
    if lines.is_empty() {
        // inferno refuses empty input; an empty report is still a report.
        return writeln!(w, "<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>");
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
        .map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// A node with these counts and nothing else.
    pub(crate) fn node(
        name: &str,
        site: Option<&str>,
        kind: &'static str,
        count: u64,
        total_ns: u64,
        children: Vec<TreeNode>,
    ) -> TreeNode {
        TreeNode {
            name: name.into(),
            site: site.map(Into::into),
            kind,
            count,
            total_ns,
            unwound: 0,
            filtered: 0,
            arg_filtered: None,
            hist: None,
            hist_early: 0,
            cpu: None,
            probe_ns: 0,
            under: 0,
            probe_add_ns: 0,
            go: false,
            callees: None,
            via: None,
            estimated: false,
            children,
        }
    }

    fn sample() -> TreeReport {
        let load = node(
            "db::Page::load(int)",
            Some("table.cc:91"),
            "call",
            1310,
            1_152_800_000,
            vec![node(
                "pread64@plt",
                Some("page.cc:17"),
                "plt",
                1310,
                1_150_442_000,
                vec![],
            )],
        );
        let mut root = node(
            "db::Table::scan(db::Range const&)",
            None,
            "function",
            312,
            1_219_920_000,
            vec![
                node(
                    "db::Index::seek(long)",
                    Some("table.cc:88"),
                    "call",
                    312,
                    12_573_600,
                    vec![],
                ),
                load,
                node(
                    "db::Row::decode()",
                    Some("table.cc:95"),
                    "tail",
                    312,
                    53_664_000,
                    vec![],
                ),
            ],
        );
        root.filtered = 688;
        root.arg_filtered = Some(112);
        root.children[0].unwound = 2;
        TreeReport {
            time: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            timestamp: false,
            unit: Unit::Usec,
            filter: Some("slower than 1.00 ms".into()),
            callees_before: None,
            all_sites: false,
            roots: vec![root],
        }
    }

    use crate::report::golden::check;

    #[test]
    fn golden_text() {
        let mut out = Vec::new();
        render_text(&sample(), &mut out).unwrap();
        check("tree.txt", &out);
    }

    #[test]
    fn golden_json() {
        let mut out = Vec::new();
        render_json(&sample(), &mut out).unwrap();
        check("tree.json", &out);
    }

    fn split(on: u64, blocked: u64, runq: u64, hist: Option<[Vec<u64>; 3]>) -> Option<CpuSplit> {
        Some(CpuSplit {
            oncpu_ns: on,
            blocked_ns: blocked,
            runq_ns: runq,
            hist,
        })
    }

    /// Checks `r` rendered as text and as JSON against `NAME.txt` and
    /// `NAME.json`.
    fn check_text_and_json(r: &TreeReport, name: &str) {
        let mut out = Vec::new();
        render_text(r, &mut out).unwrap();
        check(&format!("{name}.txt"), &out);
        let mut out = Vec::new();
        render_json(r, &mut out).unwrap();
        check(&format!("{name}.json"), &out);
    }

    /// `--cpu`: each node's split, and the self line's as the node's less
    /// its children's.
    #[test]
    fn golden_cpu() {
        let split = |on, blocked, runq| split(on, blocked, runq, None);
        let mut r = sample();
        let root = &mut r.roots[0];
        root.cpu = split(55_682_400, 1_150_000_000, 14_237_600);
        root.children[0].cpu = split(12_000_000, 0, 573_600);
        root.children[1].cpu = split(2_800_000, 1_148_000_000, 2_000_000);
        root.children[1].children[0].cpu = split(1_000_000, 1_148_000_000, 1_442_000);
        root.children[2].cpu = split(40_000_000, 2_000_000, 11_664_000);
        check_text_and_json(&r, "tree_cpu");
        let root = &r.roots[0];
        let own = root.self_cpu().unwrap();
        assert_eq!(own.parts().iter().sum::<u64>(), root.self_ns());
    }

    /// `--cpu --hist`: each part's log2 histogram under its site, in text
    /// and JSON (log2 slots of the display unit, as `Hist::log2_slots`).
    #[test]
    fn golden_cpu_hist() {
        let split = |on, blocked, runq, hist| split(on, blocked, runq, Some(hist));
        let mut r = sample();
        let root = &mut r.roots[0];
        // 312 calls: on-CPU 128-511 us, blocked mostly 4-8 ms, a few
        // waiting for a CPU 8-63 us.
        root.cpu = split(
            55_682_400,
            1_150_000_000,
            14_237_600,
            [
                [vec![0; 7], vec![12, 300]].concat(),
                [vec![0; 11], vec![2, 310]].concat(),
                vec![290, 0, 0, 4, 10, 8],
            ],
        );
        // db::Page::load: 1310 calls, each blocked 1-2 ms.
        root.children[1].cpu = split(
            2_800_000,
            1_148_000_000,
            2_000_000,
            [
                vec![1300, 10],
                [vec![0; 10], vec![1310]].concat(),
                vec![1305, 0, 5],
            ],
        );
        check_text_and_json(&r, "tree_cpu_hist");
    }

    #[test]
    fn golden_folded() {
        let mut out = Vec::new();
        render_folded(&sample(), &mut out).unwrap();
        check("tree.folded", &out);
    }

    /// With --hist, a site whose histogram took calls before the filter
    /// decided says how many; without a filter there is nothing to say.
    #[test]
    fn early_bucketed_calls_are_noted_under_a_filter() {
        let mut r = sample();
        let seek = &mut r.roots[0].children[0];
        let mut h = Hist::default();
        h.buckets[100] = 312;
        seek.hist = Some(h);
        seek.hist_early = 40;
        let note = "      (40 of these were counted before the filter decided: over 512 site calls or sites in one call)";
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().filter(|l| *l == note).count(), 1, "{text}");
        r.filter = None;
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("counted before"), "{text}");
        let mut out = Vec::new();
        render_json(&r, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["roots"][0]["children"][0]["hist_early"], 40, "{v}");
    }

    /// A function whose sites partly never ran: one under a site that ran,
    /// one with sites of its own (3 nodes), and a leaf.
    fn idle_sample() -> TreeReport {
        let idle = |name: &str, line: u32, kids| {
            node(name, Some(&format!("wide.c:{line}")), "call", 0, 0, kids)
        };
        let mid = node(
            "mid0",
            Some("wide.c:20"),
            "call",
            100,
            40_000_000,
            vec![
                node("tick", Some("wide.c:11"), "call", 100, 1_000_000, vec![]),
                idle("tick", 13, vec![]),
            ],
        );
        let root = node(
            "wide",
            None,
            "function",
            100,
            50_000_000,
            vec![
                mid,
                idle(
                    "rare0",
                    31,
                    vec![idle("tick", 25, vec![]), idle("tick", 26, vec![])],
                ),
                node("tick", Some("wide.c:33"), "call", 50, 500_000, vec![]),
                idle(
                    "rare1_with_a_much_longer_name_than_any_site_that_ran",
                    34,
                    vec![],
                ),
            ],
        );
        TreeReport {
            time: UNIX_EPOCH,
            timestamp: false,
            unit: Unit::Usec,
            filter: None,
            callees_before: None,
            all_sites: false,
            roots: vec![root],
        }
    }

    /// A tree of one indirect site with two callees: 100 calls of the
    /// function, 70 of them through the site (the slow ones).
    fn indirect_sample() -> TreeReport {
        let callee = |name: &str, count| Callee {
            name: name.into(),
            object: Some("/bin/app".into()),
            addr: Some(0x1140),
            count,
            ..Default::default()
        };
        let mut site = node(
            "*indirect",
            Some("app.c:77"),
            "indirect",
            70,
            7_000_000,
            vec![],
        );
        site.callees = Some(vec![callee("slow_b", 70), callee("fast_a", 30)]);
        let root = node("dispatch", None, "function", 70, 8_000_000, vec![site]);
        TreeReport {
            time: UNIX_EPOCH,
            timestamp: false,
            unit: Unit::Usec,
            filter: Some("slower than 1.00 ms".into()),
            callees_before: Some("--slower-than".into()),
            all_sites: false,
            roots: vec![root],
        }
    }

    /// The text and JSON of `r`.
    fn text_and_json(r: &TreeReport) -> (String, Value) {
        let mut out = Vec::new();
        render_text(r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        (text, json_value(r))
    }

    /// Under a filter that drops a traced call's site counts at its end,
    /// the callees, counted at each call, say that they count every call
    /// made through the site (text), and which options they were counted
    /// before (JSON); without one, they say nothing more.
    #[test]
    fn callees_counted_before_the_filter_say_so() {
        let mut r = indirect_sample();
        let (text, v) = text_and_json(&r);
        let line = text.lines().find(|l| l.contains("-> callees")).unwrap();
        assert_eq!(
            line.trim(),
            "-> callees (all calls, before --slower-than): slow_b 70, fast_a 30",
            "{text}"
        );
        let site = &v["roots"][0]["children"][0];
        assert_eq!(site["callees_before_filter"], "--slower-than", "{v}");
        assert_eq!(site["callees"][0]["count"], 70, "{v}");
        assert!(site.get("estimated").is_none(), "{v}");
        r.callees_before = None;
        let (text, v) = text_and_json(&r);
        assert!(
            text.lines()
                .any(|l| l.trim() == "-> callees: slow_b 70, fast_a 30"),
            "{text}"
        );
        assert!(
            v["roots"][0]["children"][0]
                .get("callees_before_filter")
                .is_none(),
            "{v}"
        );
    }

    /// A site sampled by --max-overhead: its calls per call of its
    /// parent and its callees' counts are marked as estimates (`~`) in
    /// text, and the node is `"estimated": true` in JSON.
    #[test]
    fn estimated_site_marks_its_callees_too() {
        let mut r = indirect_sample();
        r.callees_before = None;
        r.roots[0].children[0].estimated = true;
        let (text, v) = text_and_json(&r);
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("app.c:77  *indirect") && l.contains(" ~1.00 per call ")),
            "{text}"
        );
        assert!(
            lines.contains(&"-> callees: slow_b ~70, fast_a ~30"),
            "{text}"
        );
        let site = &v["roots"][0]["children"][0];
        assert_eq!(site["estimated"], true, "{v}");
        assert!(v["roots"][0].get("estimated").is_none(), "{v}");
        // Both: the filter's words, then the estimates.
        r.callees_before = Some("--filter".into());
        let (text, _) = text_and_json(&r);
        assert!(
            text.lines()
                .any(|l| l.trim()
                    == "-> callees (all calls, before --filter): slow_b ~70, fast_a ~30"),
            "{text}"
        );
    }

    /// The root's probe time is its own probes' and its sites': 100 calls
    /// with 3 site calls each at 1.5 us and 2 deeper at 0.5 us, 0.7 us of
    /// its own: 6.2 us a call. Read at 4 us on average, the probes are
    /// more than the reading: a second line says so.
    #[test]
    fn root_probe_time_counts_every_site_call() {
        let mut deep = node("leaf", Some("x.c:9"), "call", 200, 20_000, vec![]);
        deep.probe_add_ns = 500;
        let mut site = node("work", Some("x.c:3"), "call", 300, 150_000, vec![deep]);
        site.probe_add_ns = 1_500;
        let mut root = node("f", None, "function", 100, 400_000, vec![site]);
        root.probe_ns = 700;
        assert_eq!(root.site_probe_time(), (550_000, 500));
        assert_eq!(
            probe_time_notes(&root),
            [
                "probe time subtracted from each call: ~6.20 us (its own probes ~0.70 us, 5.00 call-site calls ~5.50 us)",
                "the probes' own time is 61% of each call's raw reading: a probe hit in real code can cost up to about twice its price measured here, so the average may read up to ~6.2 us high (fewer call sites read closer: --depth 1, --max-overhead)",
            ]
        );
        let v = node_json(&root, None);
        assert_eq!(v["site_probe_ns_per_call"], 5_500);
        // Read at 40 us, one line; without sites, the plain note.
        root.total_ns = 4_000_000;
        assert_eq!(probe_time_notes(&root).len(), 1);
        root.children.clear();
        assert_eq!(
            probe_time_notes(&root),
            ["probe time subtracted from each call: ~0.70 us"]
        );
    }

    /// Sites that never ran are hidden and counted, with what is under
    /// them; --all-sites shows them; JSON always has them.
    #[test]
    fn golden_text_hides_sites_that_never_ran() {
        let mut r = idle_sample();
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        check("tree_idle.txt", &out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("  (5 call sites that never ran are hidden: --all-sites shows them)"),
            "{text}"
        );
        assert!(!text.contains("rare"), "{text}");
        r.all_sites = true;
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        check("tree_idle_all.txt", &out);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("hidden"), "{text}");
        assert_eq!(text.matches("rare").count(), 2, "{text}");
        assert_eq!(text.lines().count(), 11, "{text}");
        r.all_sites = false;
        let mut out = Vec::new();
        render_json(&r, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let kids = v["roots"][0]["children"].as_array().unwrap();
        assert_eq!(kids.len(), 4, "{v}");
        assert_eq!(kids[1]["children"].as_array().unwrap().len(), 2, "{v}");
    }

    /// A function never called: its sites are hidden too, and said so.
    #[test]
    fn a_function_never_called_hides_its_sites() {
        let mut r = idle_sample();
        r.roots[0] = node("wide", None, "function", 0, 0, vec![]);
        r.roots[0].children = idle_sample().roots[0]
            .children
            .iter()
            .map(|c| TreeNode {
                count: 0,
                total_ns: 0,
                children: vec![],
                ..c.clone()
            })
            .collect();
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "wide  calls 0\n  (4 call sites that never ran are hidden: --all-sites shows them)\n"
        );
    }

    #[test]
    fn self_and_children_add_up_to_the_parent() {
        let r = sample();
        let root = &r.roots[0];
        let kids: u64 = root.children.iter().map(|c| c.total_ns).sum();
        assert_eq!(root.self_ns() + kids, root.total_ns);
        let folded: u64 = folded_lines(&r)
            .iter()
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(folded, root.total_ns);
    }

    #[test]
    fn svg_is_a_flame_graph_of_the_tree() {
        let mut out = Vec::new();
        render_svg(&sample(), &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.contains("<svg"), "{svg}");
        assert!(svg.contains("db::Page::load"), "{svg}");
    }

    /// A site in code inlined through several headers is shown at the
    /// traced function's line, with the first and last line of its inline
    /// chain.
    #[test]
    fn a_long_inline_chain_keeps_its_ends() {
        let n = node(
            "operator new(unsigned long)",
            Some("query.cc:40 (inlined from stl_vector.h:1198 > vector.tcc:117 > alloc_traits.h:537 > new_allocator.h:151)"),
            "plt",
            1,
            1,
            vec![],
        );
        assert_eq!(
            n.label(),
            "query.cc:40 (inlined from stl_vector.h:1198 > … > new_allocator.h:151)  operator new(unsigned long)"
        );
        let n = node(
            "nanosleep@plt",
            Some("demo.cpp:22 (inlined from this_thread_sleep.h:80)"),
            "plt",
            1,
            1,
            vec![],
        );
        assert_eq!(
            n.label(),
            "demo.cpp:22 (inlined from this_thread_sleep.h:80)  nanosleep@plt"
        );
    }

    /// Labels too long for the column are cut: every site's columns stay
    /// where the others' are, and no line grows past the column's width.
    #[test]
    fn long_labels_keep_columns_aligned() {
        let mut r = sample();
        let long = node(
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_construct<char const*>(char const*, char const*, std::forward_iterator_tag)",
            Some("table.cc:88 (inlined from basic_string.h:3541 > basic_string.h:1928 > basic_string.h:2171 > basic_string.tcc:225)"),
            "call",
            312,
            1_000_000,
            vec![],
        );
        r.roots[0].children.push(long);
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        // The column of " per call ", in characters.
        let at: Vec<usize> = text
            .lines()
            .filter_map(|l| Some(l[..l.find(" per call ")?].chars().count()))
            .collect();
        assert!(at.len() >= 4, "{text}");
        assert!(at.windows(2).all(|w| w[0] == w[1]), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 160), "{text}");
        // The line in the traced function stays whole; the inline chain
        // gives way before the callee's name does.
        assert!(
            text.contains(
                "\n  table.cc:88 (inlined)  std::__cxx11::basic_string<…>::_M_construct<…>(…)  "
            ),
            "{text}"
        );
    }

    /// A site that ran 3 times in 10000 calls is not "0.00 per call".
    #[test]
    fn rare_sites_show_their_rate() {
        assert_eq!(per_call(1.0), "1.00");
        assert_eq!(per_call(4.2), "4.20");
        assert_eq!(per_call(0.0), "0.00");
        assert_eq!(per_call(0.005), "0.01");
        assert_eq!(per_call(0.0003), "0.00030");
        assert_eq!(per_call(0.004), "0.0040");
        assert_eq!(per_call(1e-7), "0.00000010");
        let mut r = sample();
        r.roots[0].children[0].count = 1;
        r.roots[0].children[0].unwound = 0;
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("0.0032 per call"), "{text}");
    }
}
