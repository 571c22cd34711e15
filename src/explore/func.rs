//! The function view: a traced function's source, each line holding a
//! call site annotated with its calls per call of the function, average
//! and share of the function's time, from the reports of a
//! [`super::session`] (the tree `tachy nested --json` prints for the same
//! probes); the function's own line (count, average, p50/p99, self time);
//! a breadcrumb of the callees drilled into. Pure: keys in, screen out.

use std::cell::Cell;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::session::{Attached, Request, Started, Tree};
use crate::callsites::SiteKind;
use crate::plan::{Plan, ProbeKind};
use crate::report::budget::LateSite;
use crate::report::fmt::human;
use crate::report::tree::{per_call, TreeNode};

/// One step of the breadcrumb below the traced function: the call site
/// drilled into, by its call's address and callee's name; under an
/// indirect call, also the callee drilled into (its address in its
/// object, and name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub addr: u64,
    pub name: String,
    pub via: Option<(u64, String)>,
}

/// What a key asks of the run loop, in the function view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FuncAction {
    None,
    /// Break a callee down deeper than the plan's depth: the plan grows
    /// by these probes (planned afresh where it cannot).
    Replan(Request),
    /// Attach the call sites of these slots, held back until now.
    Attach(Vec<u32>),
    /// Counting starts again from zero.
    Reset,
    /// Write the tree as `tachy nested --json` prints it.
    Write,
    /// Back to the profile.
    Leave,
    /// Open the one-line prompt, with this text in it.
    Ask(super::ui::Ask, String),
    /// Trace again with other settings (`b`: another key to group by),
    /// once planning them proved they can be traced.
    Refilter(Request),
}

/// One row of the view: a source line, or a call site on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub line: Option<u32>,
    pub text: String,
    /// The call site's node id.
    pub site: Option<u32>,
    /// The line holds code of an inlined function.
    pub inlined: bool,
    /// A callee seen under the indirect call site of `site` (its address
    /// in its object and name): Enter drills into it.
    pub callee: Option<(u64, String)>,
}

#[derive(Default)]
pub struct FuncView {
    pub request: Option<Request>,
    /// The traced function as the profile named it.
    pub shown: String,
    pub started: Option<Box<Started>>,
    pub tree: Option<Tree>,
    pub path: Vec<Step>,
    pub selected: usize,
    /// The first row shown (kept so that the selection moves, not the
    /// text, until it reaches an edge).
    pub top: Cell<usize>,
    /// What tracing said (errors, notes), last lines.
    pub said: Vec<String>,
    pub ended: bool,
    /// A one-line message (why Enter did nothing, where `w` wrote).
    pub message: Option<String>,
    /// `h`: the histogram of the selected row's node replaces the rows.
    pub show_hist: bool,
    /// The call sites attached after the start, counted from a later
    /// moment than the rest (since the start or the last reset), and
    /// their node ids.
    pub late: Vec<LateSite>,
    pub late_nodes: Vec<u32>,
}

impl FuncView {
    pub fn new(request: Request, shown: String) -> FuncView {
        FuncView {
            request: Some(request),
            shown,
            ..Default::default()
        }
    }

    pub fn say(&mut self, line: String) {
        self.said.push(line);
        let extra = self.said.len().saturating_sub(3);
        self.said.drain(..extra);
    }

    /// Tracing started again with other probes: its counters start at
    /// zero; the breadcrumb stays.
    pub fn started(&mut self, s: Box<Started>) {
        self.started = Some(s);
        self.tree = None;
        self.ended = false;
        self.late.clear();
        self.late_nodes.clear();
    }

    /// Call sites held back are attached: counted from now on, the rest
    /// as before.
    pub fn attached(&mut self, a: Attached) {
        let Some(s) = self.started.as_mut() else {
            return;
        };
        for slot in &a.slots {
            s.held.remove(slot);
        }
        self.message = Some(format!(
            "{} call site{} attached in {} ms, counted from now on; the other counts go on",
            a.late.len(),
            if a.late.len() == 1 { "" } else { "s" },
            a.took.as_millis()
        ));
        self.late.extend(a.late);
        self.late_nodes.extend(a.nodes);
    }

    /// The plan grew by the callee drilled into: its call sites are
    /// attached, counted from now on, the rest as before.
    pub fn grown(&mut self, s: Box<Started>, a: Attached) {
        self.started = Some(s);
        self.attached(a);
    }

    /// Counting starts again from zero, for every site alike.
    pub fn reset(&mut self) {
        self.tree = None;
        self.late.clear();
        self.late_nodes.clear();
        self.message = Some("counters reset".into());
    }

    /// The probes attached now: the plan's, but for those of the call
    /// sites held back.
    pub fn probes_in_place(&self) -> Option<(usize, usize)> {
        let s = self.started.as_ref()?;
        let held = s
            .plan
            .probes
            .iter()
            .filter(|p| match p.kind {
                ProbeKind::Site { slot, .. } | ProbeKind::SiteEnd { slot, .. } => {
                    s.held.contains(&slot)
                }
                _ => false,
            })
            .count();
        Some((s.plan.probes.len() - held, held))
    }

    /// The node shown, by id in the plan: the traced function, or the call
    /// site the breadcrumb ends at.
    pub fn current(&self) -> Option<u32> {
        let plan = &self.started.as_ref()?.plan;
        node_at(plan, &self.path)
    }

    /// The callee drilled into under the indirect call the breadcrumb
    /// ends at: its address in its object.
    pub fn current_via(&self) -> Option<u64> {
        self.path.last()?.via.as_ref().map(|v| v.0)
    }

    pub fn rows(&self) -> Vec<Row> {
        let (Some(s), Some(id)) = (self.started.as_ref(), self.current()) else {
            return Vec::new();
        };
        rows(s, id, self.current_via(), self.tree.as_ref())
    }

    pub fn update(&mut self, key: super::ui::Key) -> FuncAction {
        use super::ui::Key;
        self.message = None;
        if let Some(at) = super::ui::moved(key, self.selected, self.rows().len()) {
            self.selected = at;
            return FuncAction::None;
        }
        let req = self.request.as_ref();
        match key {
            Key::Char('r') => return FuncAction::Reset,
            Key::Char('w') => return FuncAction::Write,
            Key::Char('f') => {
                let now = req.and_then(|r| r.filter.clone()).unwrap_or_default();
                return FuncAction::Ask(super::ui::Ask::Filter, now);
            }
            Key::Char('s') => {
                let now = req.and_then(|r| r.slower_than.clone()).unwrap_or_default();
                return FuncAction::Ask(super::ui::Ask::Slower, now);
            }
            Key::Char('h') => self.show_hist = !self.show_hist,
            Key::Char('b') => return self.next_by(),
            Key::Esc if self.show_hist => self.show_hist = false,
            Key::Esc if req.is_some_and(|r| r.by.is_some()) => return self.regroup(None),
            Key::Esc => {
                if self.path.pop().is_none() {
                    return FuncAction::Leave;
                }
                self.selected = 0;
                self.top.set(0);
            }
            Key::Enter => return self.drill(),
            _ => {}
        }
        FuncAction::None
    }

    /// `b`: the traced function's calls grouped by the next key of
    /// [`Started::by_keys`] (caller, tid, each named parameter, retval),
    /// after the last by none.
    fn next_by(&mut self) -> FuncAction {
        let Some(keys) = self.started.as_ref().map(|s| &s.by_keys) else {
            self.message = Some("waiting for the probes to be attached".into());
            return FuncAction::None;
        };
        let now = self.request.as_ref().and_then(|r| r.by.as_ref());
        let next = match now.and_then(|k| keys.iter().position(|x| x == k)) {
            Some(i) => keys.get(i + 1),
            None if now.is_some() => None,
            None => keys.first(),
        };
        self.regroup(next.cloned())
    }

    /// Traced again, grouped by `key` (or not grouped).
    fn regroup(&mut self, key: Option<String>) -> FuncAction {
        let Some(mut req) = self.request.clone() else {
            return FuncAction::None;
        };
        req.by = key;
        // Planned again: the callees of the breadcrumb are attached.
        req.open = self.path.clone();
        FuncAction::Refilter(req)
    }

    /// `b`: the traced function's groups as `tachy nested --by KEY
    /// --json` has them at its root, one line each: count, average and
    /// p99 (the midpoint of its bucket, as the JSON's `percentiles_ns`),
    /// under a title and a header.
    pub fn group_lines(&self) -> Vec<String> {
        let key = self
            .request
            .as_ref()
            .and_then(|r| r.by.clone())
            .unwrap_or_default();
        let root = self.breadcrumb();
        let root = root.split(" > ").next().unwrap_or_default();
        let mut out = vec![format!(
            "calls of {root} by {key}  (b: next key, Esc: none)"
        )];
        let Some((g, unit)) = self
            .tree
            .as_ref()
            .and_then(|t| Some((t.groups.as_ref()?, t.report.unit)))
        else {
            out.push("waiting for the first report".into());
            return out;
        };
        out.push(format!(
            "{:>8} {:>9} {:>9}  {}",
            "COUNT",
            "AVG",
            "P99",
            key.to_uppercase()
        ));
        let mut rows: Vec<(String, &crate::report::Counts)> = g
            .groups
            .iter()
            .map(|x| (crate::report::groups::label(&x.keys), &x.counts))
            .collect();
        if let Some((n, c)) = &g.folded {
            rows.push((format!("other ({n} groups)"), c));
        }
        if let Some((cap, c)) = &g.full {
            rows.push((format!("not grouped: the map of {cap} groups was full"), c));
        }
        if rows.is_empty() {
            out.push("no call counted yet".into());
        }
        for (name, c) in rows {
            let avg = c.total_ns.checked_div(c.count);
            let p99 = c
                .hist
                .percentiles(&[99.0])
                .into_iter()
                .next()
                .flatten()
                .map(|(lo, hi)| (lo + (hi - lo) / 2).saturating_mul(unit.ns()));
            let h = |v: Option<u64>| v.map_or("-".to_string(), |v| human(v as f64));
            out.push(format!(
                "{:>8} {:>9} {:>9}  {name}",
                c.count,
                h(avg),
                h(p99)
            ));
        }
        if g.lost > 0 {
            out.push(format!(
                "{:>8} {:>9} {:>9}  not grouped: their records came faster than tachy read them",
                g.lost, "-", "-"
            ));
        }
        out
    }

    /// Enter on a call line: its callee's view, traced first if its call
    /// sites are not yet.
    fn drill(&mut self) -> FuncAction {
        let (Some(s), Some(req)) = (self.started.as_ref(), self.request.as_ref()) else {
            return FuncAction::None;
        };
        let Some(row) = self.rows().get(self.selected).cloned() else {
            return FuncAction::None;
        };
        let Some(x) = row.site.and_then(|id| s.plan.site(id)) else {
            self.message = Some("no call on this line".into());
            return FuncAction::None;
        };
        if let (Some(callee), Some(id)) = (row.callee.clone(), row.site) {
            return self.drill_via(id, callee);
        }
        let (Some(raw), false) = (x.site.callee_raw.clone(), x.site.kind == SiteKind::Indirect)
        else {
            // An indirect call whose probe reads its callee: those seen.
            let seen = self
                .tree
                .as_ref()
                .zip(row.site)
                .and_then(|(t, id)| tree_node(&s.plan, t, id)?.callees.clone())
                .filter(|l| !l.is_empty());
            self.message = Some(match seen {
                Some(l) => format!(
                    "{}: callees seen: {} (Enter on one's line drills into it)",
                    x.site.name,
                    crate::report::tree::callee_words(&l)
                ),
                None => format!("{}: the callee is not known", x.site.name),
            });
            return FuncAction::None;
        };
        let expanded = x.expanded;
        let id = row.site;
        self.path.push(Step {
            addr: x.site.addr,
            name: x.site.name.clone(),
            via: None,
        });
        self.selected = 0;
        self.top.set(0);
        if expanded {
            // Planned: its sites held back are attached, if any are.
            let slots = held_slots(s, id.map_or(&[][..], |id| s.plan.children(id)));
            return self.attach(slots);
        }
        let mut next = req.clone();
        if !next.expand.contains(&raw) {
            next.expand.push(raw);
        }
        next.open = self.path.clone();
        self.request = Some(next.clone());
        self.message = Some("a level deeper: planning and attaching its call sites...".into());
        FuncAction::Replan(next)
    }

    /// Attach the call sites of `slots` (held back), if there are any.
    fn attach(&mut self, slots: Vec<u32>) -> FuncAction {
        if slots.is_empty() {
            return FuncAction::None;
        }
        self.message = Some("attaching its call sites...".into());
        FuncAction::Attach(slots)
    }

    /// Enter on a callee seen under indirect call site `id`: the view of
    /// that callee, its sites under the call attached if they are planned
    /// (held back), else the plan grown by `--expand CALLER->CALLEE`.
    fn drill_via(&mut self, id: u32, (addr, name): (u64, String)) -> FuncAction {
        let (Some(s), Some(req)) = (self.started.as_ref(), self.request.as_ref()) else {
            return FuncAction::None;
        };
        let Some(x) = s.plan.site(id) else {
            return FuncAction::None;
        };
        let kids: Vec<u32> = s
            .plan
            .children(id)
            .iter()
            .copied()
            .filter(|&c| {
                s.plan
                    .site(c)
                    .is_some_and(|k| k.via.as_ref().is_some_and(|v| v.addr == addr))
            })
            .collect();
        let raw = self
            .tree
            .as_ref()
            .and_then(|t| tree_node(&s.plan, t, id)?.callees.clone())
            .and_then(|l| l.into_iter().find(|c| c.addr == Some(addr))?.raw);
        let expand = match (s.callers.get(&id), raw) {
            (Some(caller), Some(raw)) => Some(format!("{caller}->{raw}")),
            _ => None,
        };
        if kids.is_empty() && expand.is_none() {
            self.message = Some(format!("{name}: not a function's start, not broken down"));
            return FuncAction::None;
        }
        let step = Step {
            addr: x.site.addr,
            name: x.site.name.clone(),
            via: Some((addr, name)),
        };
        let mut next = req.clone();
        self.path.push(step);
        self.selected = 0;
        self.top.set(0);
        if !kids.is_empty() {
            let slots = held_slots(s, &kids);
            return self.attach(slots);
        }
        let e = expand.unwrap_or_default();
        if !next.expand.contains(&e) {
            next.expand.push(e);
        }
        next.open = self.path.clone();
        self.request = Some(next.clone());
        self.message = Some("a level deeper: planning and attaching its call sites...".into());
        FuncAction::Replan(next)
    }

    /// The node the selected row shows: its call site, else the node shown.
    pub fn selected_node(&self) -> Option<u32> {
        let row = self.rows().get(self.selected).and_then(|r| r.site);
        row.or_else(|| self.current())
    }

    /// `h`: the `--hist` table of the selected node's counted calls, as
    /// `tachy nested --hist` prints a call site's (from its first row that
    /// counts a call), under a title line.
    pub fn hist_lines(&self) -> Vec<String> {
        let (Some(s), Some(id)) = (self.started.as_ref(), self.selected_node()) else {
            return vec!["nothing traced yet".into()];
        };
        let name = s
            .plan
            .node(id)
            .map_or("?".to_string(), |n| n.name().to_string());
        let Some(t) = self.tree.as_ref() else {
            return vec![format!("histogram of {name}: waiting for the first report")];
        };
        let mut buf = Vec::new();
        let slots = t
            .hists
            .get(id as usize)
            .map_or(Vec::new(), |h| h.log2_slots());
        let unit = t.report.unit;
        let _ = crate::report::fmt::print_log2_hist(&slots, unit.word(), &mut buf);
        let calls = tree_node(&s.plan, t, id).map_or(0, |n| n.timed_calls());
        let mut out = vec![format!(
            "histogram of {name}: {calls} calls timed  (h or Esc: back)"
        )];
        if buf.is_empty() {
            out.push("no call timed yet".into());
        }
        // The table's rows below the first that counts a call are left
        // out: on a screen of 24 lines, the rows that hold calls fit.
        let empty = slots.iter().take_while(|&&n| n == 0).count();
        let text = String::from_utf8_lossy(&buf);
        let mut lines = text.lines().map(String::from);
        out.extend(lines.next());
        out.extend(lines.skip(empty));
        out
    }

    /// The breadcrumb: the traced function, then each callee drilled into.
    pub fn breadcrumb(&self) -> String {
        let root = match self.started.as_ref().and_then(|s| s.plan.items.first()) {
            Some(i) => i.name.clone(),
            None => self.shown.clone(),
        };
        std::iter::once(root)
            .chain(self.path.iter().map(|s| match &s.via {
                Some((_, callee)) => format!("{} -> {callee}", s.name),
                None => s.name.clone(),
            }))
            .collect::<Vec<_>>()
            .join(" > ")
    }

    /// The current node's line: calls, average, p50/p99, self time.
    pub fn own_line(&self) -> String {
        let (Some(s), Some(id)) = (self.started.as_ref(), self.current()) else {
            return "planning and attaching probes...".into();
        };
        let name = match s.plan.node(id) {
            Some(n) => n.name().to_string(),
            None => "?".into(),
        };
        let Some(t) = self.tree.as_ref() else {
            return format!("{name}  waiting for the first report");
        };
        let Some(n) = tree_node(&s.plan, t, id) else {
            return name;
        };
        if let Some((addr, callee)) = self.path.last().and_then(|p| p.via.clone()) {
            // The call's times are of all its callees: only the count is
            // this one's.
            let mine = n
                .callees
                .iter()
                .flatten()
                .find(|c| c.addr == Some(addr))
                .map_or(0, |c| c.count)
                // A callee is counted at its call, the call's count when its
                // traced call ends: the calls in flight are in one only.
                .min(n.calls());
            return format!("{callee}  calls {mine} of {} through {name}", n.calls());
        }
        let calls = n.calls();
        let mut line = format!("{name}  calls {calls}");
        let timed = n.timed_calls();
        if timed > 0 {
            let (p50, p99) = t.percentiles.get(id as usize).copied().unwrap_or_default();
            let p = |v: Option<u64>| v.map_or("-".to_string(), |v| human(v as f64));
            line.push_str(&format!(
                "  avg {}  p50 {}  p99 {}  self {}",
                human(n.total_ns as f64 / timed as f64),
                p(p50),
                p(p99),
                human(n.self_ns() as f64 / timed as f64)
            ));
        }
        line
    }

    pub fn draw(&self, target: &str, f: &mut Frame, area: Rect) {
        let [head, body, said, foot] = Layout::vertical([
            Constraint::Length(4),
            Constraint::Min(1),
            Constraint::Length(self.said.len().min(3) as u16 + u16::from(self.ended)),
            Constraint::Length(1),
        ])
        .areas(area);
        let bold = Style::new().add_modifier(Modifier::BOLD);
        let probes = match (&self.started, self.probes_in_place()) {
            (Some(s), Some((n, held))) => format!(
                "{n} probes in place{}{}",
                match held {
                    0 => String::new(),
                    h => format!(", {h} held"),
                },
                s.price
                    .as_ref()
                    .map_or(String::new(), |p| format!("; per call {p}"))
            ),
            _ => "planning and attaching probes...".into(),
        };
        let counted = match &self.tree {
            Some(t) => format!("counted {:.0} s", t.seconds),
            None => String::new(),
        };
        let command = self.request.as_ref().map_or(String::new(), |r| r.command());
        f.render_widget(
            Paragraph::new(vec![
                Line::from(Span::styled(
                    format!("tachy explore  {target}  {}", self.breadcrumb()),
                    bold,
                )),
                Line::from(format!("{command}  {counted}")),
                Line::from(probes),
                Line::from(Span::styled(format!(" {}", self.own_line()), bold)),
            ]),
            head,
        );
        let grouped = self.request.as_ref().is_some_and(|r| r.by.is_some());
        if self.show_hist {
            let lines: Vec<Line> = self.hist_lines().into_iter().map(Line::from).collect();
            f.render_widget(Paragraph::new(lines), body);
        } else if grouped {
            let mut lines: Vec<Line> = self.group_lines().into_iter().map(Line::from).collect();
            if let Some(l) = lines.get_mut(1) {
                *l = l
                    .clone()
                    .style(Style::new().add_modifier(Modifier::REVERSED));
            }
            f.render_widget(Paragraph::new(lines), body);
        } else {
            self.draw_rows(f, body);
        }
        let mut lines: Vec<Line> = self.said.iter().map(|s| Line::from(s.as_str())).collect();
        if self.ended {
            lines.push(Line::from("tracing ended"));
        }
        f.render_widget(Paragraph::new(lines), said);
        let help = self.message.clone().unwrap_or_else(|| {
            "Enter:drill Esc:up f:filter s:slower h:hist b:by >:pick r:reset w:json q:quit".into()
        });
        f.render_widget(Paragraph::new(help), foot);
    }

    fn draw_rows(&self, f: &mut Frame, area: Rect) {
        let rows = self.rows();
        let height = area.height.saturating_sub(1) as usize;
        let sel = self.selected.min(rows.len().saturating_sub(1));
        let mut top = self.top.get();
        if sel < top {
            top = sel;
        } else if height > 0 && sel >= top + height {
            top = sel + 1 - height;
        }
        self.top.set(top);
        let s = self.started.as_deref();
        let id = self.current();
        let parent = match (s, id, &self.tree) {
            (Some(s), Some(id), Some(t)) => tree_node(&s.plan, t, id),
            _ => None,
        };
        let mut lines = vec![Line::from(Span::styled(
            format!(
                "{:<2}{:>5} {:>8} {:>9} {:>6}  {}",
                "",
                "LINE",
                "CALLS/C",
                "AVG",
                "SHARE",
                match (s, id) {
                    (Some(s), Some(id)) => source_of(s, id, self.current_via())
                        .map_or("CALL SITE".to_string(), |x| x.path.clone()),
                    _ => String::new(),
                }
            ),
            Style::new().add_modifier(Modifier::REVERSED),
        ))];
        // Under a callee of an indirect call: per call of that callee
        // (unless a filter counted the sites' calls and not the callee's).
        let filtered = self
            .tree
            .as_ref()
            .is_some_and(|t| t.report.callees_before.is_some());
        let per = self.current_via().filter(|_| !filtered).and_then(|addr| {
            let c = parent?
                .callees
                .as_ref()?
                .iter()
                .find(|c| c.addr == Some(addr))?;
            Some(c.count)
        });
        for (i, r) in rows.iter().enumerate().skip(top).take(height) {
            let nums = match (r.site, s, parent) {
                (Some(site), Some(s), Some(p)) if r.callee.is_some() => {
                    callee_numbers(&s.plan, p, site, r.callee.as_ref().map(|c| c.0), per)
                }
                (Some(site), Some(s), Some(p)) => site_numbers(&s.plan, p, site, per),
                _ => (String::new(), String::new(), String::new()),
            };
            // A site attached later than the others: its counts start then.
            let late = r
                .site
                .and_then(|id| self.late_nodes.iter().position(|&n| n == id))
                .and_then(|k| self.late.get(k)?.from_s)
                .map_or(String::new(), |from| format!("  [from {from:.0} s]"));
            let text = format!(
                "{}{:>5}{} {:>8} {:>9} {:>6}  {}{late}",
                if i == sel { "> " } else { "  " },
                r.line.map_or(String::new(), |l| l.to_string()),
                if r.inlined { "i" } else { " " },
                nums.0,
                nums.1,
                nums.2,
                r.text
            );
            let style = match (i == sel, r.site.is_some()) {
                (true, _) => Style::new().add_modifier(Modifier::REVERSED),
                (false, true) => Style::new().add_modifier(Modifier::BOLD),
                _ => Style::new(),
            };
            lines.push(Line::from(Span::styled(text, style)));
        }
        f.render_widget(Paragraph::new(lines), area);
    }
}

/// A site's calls per call of its parent (or of `per` calls: those of
/// the callee shown under an indirect call), average and share of the
/// parent's time, as the text of `tachy nested` writes them.
fn site_numbers(
    plan: &Plan,
    parent: &TreeNode,
    site: u32,
    per: Option<u64>,
) -> (String, String, String) {
    let Some(c) = child_of(plan, parent, site) else {
        return Default::default();
    };
    let pcount = per.unwrap_or(parent.calls());
    let rate = if pcount > 0 {
        c.calls() as f64 / pcount as f64
    } else {
        0.0
    };
    let avg = match c.timed_calls() {
        0 => "-".into(),
        n => human(c.total_ns as f64 / n as f64),
    };
    let share = match parent.total_ns {
        0 => "-".into(),
        t => format!("{:.1}%", c.total_ns as f64 * 100.0 / t as f64),
    };
    (per_call(rate), avg, share)
}

/// The slots of the call sites `ids` that are held back.
fn held_slots(s: &Started, ids: &[u32]) -> Vec<u32> {
    ids.iter()
        .filter_map(|&c| s.plan.site(c).map(|x| x.slot))
        .filter(|slot| s.held.contains(slot))
        .collect()
}

/// A callee's line under indirect call site `site`: its calls through the
/// site per call of the parent (or of `per` calls, as [`site_numbers`]).
fn callee_numbers(
    plan: &Plan,
    parent: &TreeNode,
    site: u32,
    addr: Option<u64>,
    per: Option<u64>,
) -> (String, String, String) {
    let Some(c) = child_of(plan, parent, site) else {
        return Default::default();
    };
    let n = c
        .callees
        .iter()
        .flatten()
        .find(|x| x.addr == addr)
        .map_or(0, |x| x.count);
    let rate = match per.unwrap_or(parent.calls()) {
        0 => 0.0,
        p => n as f64 / p as f64,
    };
    (per_call(rate), String::new(), String::new())
}

/// The source of node `id`'s view: of the callee at `via` under it when
/// it is an indirect call.
fn source_of(s: &Started, id: u32, via: Option<u64>) -> Option<&super::session::Source> {
    match via {
        Some(a) => s.via_sources.get(&(id, a)),
        None => s.sources.get(&id),
    }
}

/// The child of `parent` (a node of the report) that is site `id`.
fn child_of<'a>(plan: &Plan, parent: &'a TreeNode, id: u32) -> Option<&'a TreeNode> {
    let up = plan.site(id)?.parent;
    let k = plan.children(up).iter().position(|&c| c == id)?;
    parent.children.get(k)
}

/// The node of the plan the breadcrumb `path` leads to from the first
/// traced function.
pub fn node_at(plan: &Plan, path: &[Step]) -> Option<u32> {
    if plan.items.is_empty() {
        return None;
    }
    let mut id = 0u32;
    for step in path {
        id = *plan.children(id).iter().find(|&&c| {
            plan.site(c)
                .is_some_and(|x| x.site.addr == step.addr && x.site.name == step.name)
        })?;
    }
    Some(id)
}

/// The report's node of plan node `id`.
pub fn tree_node<'a>(plan: &Plan, t: &'a Tree, id: u32) -> Option<&'a TreeNode> {
    let mut chain = vec![id];
    let mut at = id;
    while let Some(x) = plan.site(at) {
        at = x.parent;
        chain.push(at);
    }
    let mut node = t.report.roots.get(*chain.last()? as usize)?;
    for w in chain.windows(2).rev() {
        let (child, parent) = (w[0], w[1]);
        let k = plan.children(parent).iter().position(|&c| c == child)?;
        node = node.children.get(k)?;
    }
    Some(node)
}

/// The file:line a call site's location starts with, as (file, line).
fn site_line(location: &str) -> Option<(&str, u32)> {
    let first = location.split(' ').next()?;
    let (file, line) = first.rsplit_once(':')?;
    Some((file, line.parse().ok()?))
}

/// A call site of the node shown, and the line it is on.
struct Placed {
    id: u32,
    /// The file and line of the function's own code that holds it.
    at: Option<(String, u32)>,
    name: String,
    inlined: bool,
}

/// The rows of node `id`'s view (under an indirect call, of the callee
/// at `via`): its source lines, each call site under the line that holds
/// it (the first on the line itself); without the source, its call sites
/// grouped by line. Under an indirect call site, a line for each callee
/// it called (as `tree` has them).
fn rows(s: &Started, id: u32, via: Option<u64>, tree: Option<&Tree>) -> Vec<Row> {
    let mut out = Vec::new();
    for r in site_rows(s, id, via) {
        let callees = match (r.site, tree) {
            (Some(site), Some(t)) if r.callee.is_none() => tree_node(&s.plan, t, site)
                .and_then(|n| n.callees.clone())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let site = r.site;
        out.push(r);
        // Counted at every call, before the filter drops the fast ones.
        let before = tree
            .and_then(|t| t.report.callees_before.as_deref())
            .map_or(String::new(), |f| format!("  (all calls, before {f})"));
        for c in callees {
            let Some(addr) = c.addr else { continue };
            out.push(Row {
                line: None,
                text: format!("    -> {}{before}", c.name),
                site,
                inlined: false,
                callee: Some((addr, c.name)),
            });
        }
    }
    out
}

fn site_rows(s: &Started, id: u32, via: Option<u64>) -> Vec<Row> {
    let plan = &s.plan;
    let sites: Vec<Placed> = plan
        .children(id)
        .iter()
        .filter_map(|&c| {
            let x = plan.site(c)?;
            if via.is_some() && x.via.as_ref().map(|v| v.addr) != via {
                return None;
            }
            let loc = x.site.location.as_deref();
            Some(Placed {
                id: c,
                at: loc.and_then(site_line).map(|(f, l)| (f.to_string(), l)),
                name: x.site.name.clone(),
                inlined: loc.is_some_and(|l| l.contains("(inlined")),
            })
        })
        .collect();
    let mut out = Vec::new();
    let mut placed = vec![false; sites.len()];
    if let Some(src) = source_of(s, id, via).filter(|x| !x.lines.is_empty()) {
        let base = src.path.rsplit('/').next().unwrap_or(&src.path);
        for (n, text) in &src.lines {
            let inlined = src.inlined.contains_key(n);
            let here: Vec<usize> = sites
                .iter()
                .enumerate()
                .filter(|(_, x)| x.at.as_ref().is_some_and(|(f, l)| f == base && l == n))
                .map(|(k, _)| k)
                .collect();
            match here.split_first() {
                None => out.push(Row {
                    line: Some(*n),
                    text: text.clone(),
                    site: None,
                    inlined,
                    callee: None,
                }),
                Some((&first, more)) => {
                    let mut text = text.clone();
                    if !more.is_empty() || sites[first].inlined {
                        text = format!("{text}  [{}]", sites[first].name);
                    }
                    out.push(Row {
                        line: Some(*n),
                        text,
                        site: Some(sites[first].id),
                        inlined: inlined || sites[first].inlined,
                        callee: None,
                    });
                    for &k in more {
                        out.push(Row {
                            line: None,
                            text: format!("  + {}", sites[k].name),
                            site: Some(sites[k].id),
                            inlined: sites[k].inlined,
                            callee: None,
                        });
                    }
                    for k in here {
                        placed[k] = true;
                    }
                }
            }
        }
    }
    for (k, x) in sites.iter().enumerate() {
        if placed[k] {
            continue;
        }
        let loc = plan
            .site(x.id)
            .and_then(|n| n.site.location.clone())
            .unwrap_or_else(|| "?".into());
        out.push(Row {
            line: None,
            text: format!("{loc}  {}", x.name),
            site: Some(x.id),
            inlined: x.inlined,
            callee: None,
        });
    }
    out
}
