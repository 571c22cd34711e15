//! The explorer's screens as a pure model: state, `update(key)` that says
//! what the run loop must do, and `draw(frame)`. Nothing here reads the
//! terminal or the kernel, so screens are tested with ratatui's
//! `TestBackend` (golden text with the numbers masked).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Row as TableRow, Table, TableState};
use ratatui::Frame;

use super::func::{FuncAction, FuncView};
use super::profile::{Profile, Row, Sort};
use super::session::Request;
use crate::report::fmt::human;

/// A key, as the model knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Tab,
    Backspace,
    Char(char),
    /// Ctrl-C.
    Interrupt,
}

/// Where a movement key takes the selection among `n` rows; `None` for
/// other keys.
pub fn moved(key: Key, selected: usize, n: usize) -> Option<usize> {
    let last = n.saturating_sub(1);
    Some(match key {
        Key::Up | Key::Char('k') => selected.saturating_sub(1),
        Key::Down | Key::Char('j') => (selected + 1).min(last),
        Key::PageUp => selected.saturating_sub(10),
        Key::PageDown => (selected + 10).min(last),
        Key::Home => 0,
        Key::End => last,
        _ => return None,
    })
}

/// Matches `>` lists at most.
const PICK_ROWS: usize = 200;

/// What the run loop must do after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Time this function exactly, with its call sites.
    Trace(Request),
    /// Break a callee drilled into down deeper than the plan's depth: the
    /// session's plan grows (traced afresh where it cannot).
    Replan(Request),
    /// Attach these call-site slots held back (a callee drilled into):
    /// the other counts go on.
    Attach(Vec<u32>),
    /// Counting starts again from zero.
    Reset,
    /// Write the current tree as `tachy nested --json` prints it.
    Write,
    /// Stop timing and go back to the profile.
    Untrace,
    /// Trace again with another filter, once planning it proved it can
    /// be traced ([`Model::refiltered`]); else the filter stays as it was.
    Refilter(Request),
    /// `>`: the prompt needs the symbol index ([`Model::index`]).
    Index,
}

/// What the one-line prompt asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// `f`: an argument filter, in the `--filter` language.
    Filter,
    /// `s`: a duration, as `--slower-than` takes it.
    Slower,
    /// `>`: a function of the process, by fuzzy search.
    Pick,
}

impl Ask {
    fn label(self) -> &'static str {
        match self {
            Ask::Filter => "filter (as --filter; empty: none)> ",
            Ask::Slower => "slower than (as --slower-than; empty: all)> ",
            Ask::Pick => "function> ",
        }
    }
}

/// The one-line prompt at the foot of the screen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    pub ask: Ask,
    pub text: String,
    /// `>`: the selected match.
    pub selected: usize,
}

/// A function of the symbol index that `>` can pick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pickable {
    /// Its demangled name.
    pub name: String,
    /// `PATH:RAW`, as tracing takes it.
    pub spec: String,
    /// The object's file name.
    pub object: String,
}

/// How well `query` matches `name` as a fuzzy search does: every character
/// of the query in order (case-insensitive), better when they follow each
/// other, start a word, and the name is short; `None` when they are not
/// all there.
pub fn fuzzy_score(query: &str, name: &str) -> Option<i64> {
    let mut score = 0i64;
    let mut last: Option<usize> = None;
    let chars: Vec<char> = name.chars().collect();
    let mut at = 0;
    for q in query.chars().filter(|c| !c.is_whitespace()) {
        let q = q.to_ascii_lowercase();
        let found = (at..chars.len()).find(|&i| chars[i].to_ascii_lowercase() == q)?;
        score += 1;
        if last.is_some_and(|l| l + 1 == found) {
            score += 8;
        }
        if found == 0 || !chars[found - 1].is_alphanumeric() {
            score += 4;
        }
        last = Some(found);
        at = found + 1;
    }
    Some(score * 100 - chars.len() as i64)
}

/// The best matches of `query` in `index`, best first, at most `max`.
pub fn fuzzy_matches<'a>(query: &str, index: &'a [Pickable], max: usize) -> Vec<&'a Pickable> {
    let mut scored: Vec<(i64, &Pickable)> = index
        .iter()
        .filter_map(|p| fuzzy_score(query, &p.name).map(|s| (s, p)))
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    scored.into_iter().take(max).map(|(_, p)| p).collect()
}

/// Which screen is shown.
pub enum View {
    Profile,
    Func(Box<FuncView>),
}

pub struct Model {
    /// `pid 4242 (server)`.
    pub target: String,
    /// The process explored.
    pub pid: u32,
    pub profile: Profile,
    pub sort: Sort,
    /// The selected row, by position in the sorted rows.
    pub selected: usize,
    pub view: View,
    /// Seconds profiled so far.
    pub seconds: f64,
    /// Stack events the kernel had no room for.
    pub lost: u64,
    /// A one-line message (why Enter did nothing).
    pub message: Option<String>,
    /// The one-line prompt, while it is open.
    pub prompt: Option<Prompt>,
    /// The functions `>` picks from (loaded on the first `>`).
    pub index: Vec<Pickable>,
}

impl Model {
    pub fn new(target: String, profile: Profile) -> Model {
        Model {
            target,
            pid: 0,
            profile,
            sort: Sort::Total,
            selected: 0,
            view: View::Profile,
            seconds: 0.0,
            lost: 0,
            message: None,
            prompt: None,
            index: Vec::new(),
        }
    }

    fn rows(&self) -> Vec<&Row> {
        self.profile.rows(self.sort)
    }

    pub fn update(&mut self, key: Key) -> Action {
        self.message = None;
        if self.prompt.is_some() {
            return self.update_prompt(key);
        }
        match (&mut self.view, key) {
            (_, Key::Interrupt | Key::Char('q')) => Action::Quit,
            (_, Key::Char('>')) => {
                self.ask(Ask::Pick, String::new());
                Action::Index
            }
            (View::Func(v), key) => match v.update(key) {
                FuncAction::None => Action::None,
                FuncAction::Replan(r) => Action::Replan(r),
                FuncAction::Attach(slots) => Action::Attach(slots),
                FuncAction::Reset => Action::Reset,
                FuncAction::Write => Action::Write,
                FuncAction::Refilter(r) => Action::Refilter(r),
                FuncAction::Ask(ask, text) => {
                    self.ask(ask, text);
                    Action::None
                }
                FuncAction::Leave => {
                    self.view = View::Profile;
                    Action::Untrace
                }
            },
            (View::Profile, key) => self.update_profile(key),
        }
    }

    fn ask(&mut self, ask: Ask, text: String) {
        self.prompt = Some(Prompt {
            ask,
            text,
            selected: 0,
        });
    }

    /// A key while the prompt is open: text is typed, Enter submits it,
    /// Esc closes it with nothing changed.
    fn update_prompt(&mut self, key: Key) -> Action {
        let Some(p) = self.prompt.as_mut() else {
            return Action::None;
        };
        match key {
            Key::Interrupt => return Action::Quit,
            Key::Esc => self.prompt = None,
            Key::Backspace => {
                p.text.pop();
                p.selected = 0;
            }
            Key::Char(c) => {
                p.text.push(c);
                p.selected = 0;
            }
            Key::Up | Key::Down | Key::PageUp | Key::PageDown | Key::Home | Key::End => {
                let n = fuzzy_matches(&p.text, &self.index, PICK_ROWS).len();
                p.selected = moved(key, p.selected, n).unwrap_or(p.selected);
            }
            Key::Enter => {
                let p = self.prompt.take().unwrap_or(Prompt {
                    ask: Ask::Pick,
                    text: String::new(),
                    selected: 0,
                });
                return self.submit(p);
            }
            Key::Tab => {}
        }
        Action::None
    }

    /// The prompt's text, submitted.
    fn submit(&mut self, p: Prompt) -> Action {
        let text = p.text.trim().to_string();
        if p.ask == Ask::Pick {
            let Some(f) = fuzzy_matches(&text, &self.index, PICK_ROWS)
                .get(p.selected)
                .copied()
                .cloned()
            else {
                self.message = Some(format!("no function matches {text:?}"));
                return Action::None;
            };
            return self.trace(f.spec, f.name);
        }
        let View::Func(v) = &mut self.view else {
            return Action::None;
        };
        let Some(mut req) = v.request.clone() else {
            return Action::None;
        };
        // Planned again: the callees of the breadcrumb are attached.
        req.open = v.path.clone();
        let value = (!text.is_empty()).then(|| text.clone());
        let bad = match (p.ask, &value) {
            (Ask::Filter, Some(t)) => crate::plan::filter::Filter::parse(t).err(),
            (Ask::Slower, Some(t)) => crate::duration::parse_duration(t).err(),
            _ => None,
        };
        if let Some(e) = bad {
            v.message = Some(format!("{e:#}"));
            return Action::None;
        }
        match p.ask {
            Ask::Filter => req.filter = value,
            _ => req.slower_than = value,
        }
        if Some(&req) == v.request.as_ref() {
            return Action::None;
        }
        Action::Refilter(req)
    }

    /// The run loop planned `req` (a new filter): it is traced from now on.
    pub fn refiltered(&mut self, req: Request) {
        if let View::Func(v) = &mut self.view {
            let what = match (&req.filter, &req.slower_than, &req.by) {
                (None, None, None) => "no filter".to_string(),
                (f, d, b) => [
                    f.as_ref().map(|f| format!("filter {f}")),
                    d.as_ref().map(|d| format!("slower than {d}")),
                    b.as_ref().map(|b| format!("by {b}")),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", "),
            };
            v.request = Some(req);
            // Nothing is shown of the old probes' counts until the new
            // ones are attached.
            v.started = None;
            v.tree = None;
            v.message = Some(format!("{what}: counters restarted"));
        }
    }

    /// The run loop could not plan a filter: the old one stays.
    pub fn refused(&mut self, why: String) {
        match &mut self.view {
            View::Func(v) => v.message = Some(why),
            View::Profile => self.message = Some(why),
        }
    }

    fn update_profile(&mut self, key: Key) -> Action {
        if let Some(at) = moved(key, self.selected, self.rows().len()) {
            self.selected = at;
            return Action::None;
        }
        match key {
            Key::Tab | Key::Char('s') => {
                self.sort = self.sort.next();
                self.selected = 0;
            }
            Key::Enter => {
                let Some(row) = self.rows().get(self.selected).copied().cloned() else {
                    return Action::None;
                };
                let Some(spec) = row.spec else {
                    self.message = Some(format!("{}: no symbol to trace", row.shown));
                    return Action::None;
                };
                let shown = if row.key.inlined {
                    // The function it was inlined in is what runs.
                    let host = spec.rsplit(':').next().unwrap_or(&spec).to_string();
                    format!("{host} (where {} is inlined)", row.key.name)
                } else {
                    row.shown
                };
                return self.trace(spec, shown);
            }
            _ => {}
        }
        Action::None
    }

    /// Opens the function view of `spec`, which the run loop traces.
    pub fn trace(&mut self, spec: String, shown: String) -> Action {
        let req = Request {
            pid: self.pid,
            spec,
            expand: Vec::new(),
            open: Vec::new(),
            filter: None,
            slower_than: None,
            by: None,
        };
        self.view = View::Func(Box::new(FuncView::new(req.clone(), shown)));
        Action::Trace(req)
    }

    pub fn draw(&self, f: &mut Frame) {
        let [head, body, foot] = Layout::vertical([
            Constraint::Length(2),
            Constraint::Min(1),
            Constraint::Length(1),
        ])
        .areas(f.area());
        match &self.view {
            View::Profile => self.draw_profile(f, head, body, foot),
            View::Func(v) => v.draw(&self.target, f, f.area()),
        }
        if let Some(p) = &self.prompt {
            self.draw_prompt(p, f, foot);
        }
    }

    /// The prompt on the last line; `>`'s matches above it.
    fn draw_prompt(&self, p: &Prompt, f: &mut Frame, foot: Rect) {
        f.render_widget(Clear, foot);
        let text = format!("{}{}_", p.ask.label(), p.text);
        f.render_widget(
            Paragraph::new(Span::styled(
                text,
                Style::new().add_modifier(Modifier::BOLD),
            )),
            foot,
        );
        if p.ask != Ask::Pick {
            return;
        }
        let matches = fuzzy_matches(&p.text, &self.index, PICK_ROWS);
        let height = (matches.len() as u16 + 1).min(foot.y);
        let area = Rect::new(foot.x, foot.y - height, foot.width, height);
        f.render_widget(Clear, area);
        let mut lines = vec![Line::from(Span::styled(
            format!(
                "{} of {} functions match; Up/Down pick, Enter trace, Esc cancel",
                matches.len(),
                self.index.len()
            ),
            Style::new().add_modifier(Modifier::REVERSED),
        ))];
        let first = p.selected.saturating_sub(height.saturating_sub(2) as usize);
        for (i, m) in matches.iter().enumerate().skip(first) {
            let mark = if i == p.selected { "> " } else { "  " };
            let style = match i == p.selected {
                true => Style::new().add_modifier(Modifier::BOLD),
                false => Style::new(),
            };
            lines.push(Line::from(Span::styled(
                format!("{mark}{}  {}", m.name, m.object),
                style,
            )));
        }
        f.render_widget(Paragraph::new(lines), area);
    }

    fn draw_profile(&self, f: &mut Frame, head: Rect, body: Rect, foot: Rect) {
        let p = &self.profile;
        let title = format!(
            "tachy explore  {}  {:.1} s: {} samples, {} blocked",
            self.target,
            self.seconds,
            p.samples,
            human(p.off_ns as f64)
        );
        let mut second = format!("where time goes, by {} time", self.sort.name());
        if self.lost > 0 {
            second.push_str(&format!("  ({} stacks lost)", self.lost));
        }
        f.render_widget(
            Paragraph::new(vec![
                Line::from(Span::styled(
                    title,
                    Style::new().add_modifier(Modifier::BOLD),
                )),
                Line::from(second),
            ]),
            head,
        );
        let rows = self.rows();
        let pct = |x: f64| format!("{:5.1}%", x * 100.0);
        let table_rows: Vec<TableRow> = rows
            .iter()
            .map(|r| {
                let object = r
                    .key
                    .object
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                TableRow::new(vec![
                    pct(p.total_share(r)),
                    pct(p.on_share(r)),
                    pct(p.self_share(r)),
                    pct(p.off_share(r)),
                    format!("{}  {object}", r.shown),
                ])
            })
            .collect();
        let mark = |s: Sort, name: &'static str| -> String {
            if s == self.sort {
                format!("{name}*")
            } else {
                name.to_string()
            }
        };
        let header = TableRow::new(vec![
            mark(Sort::Total, " TOTAL"),
            mark(Sort::OnCpu, "   CPU"),
            mark(Sort::SelfCpu, "  SELF"),
            mark(Sort::OffCpu, " BLOCK"),
            "FUNCTION  OBJECT".to_string(),
        ])
        .style(Style::new().add_modifier(Modifier::REVERSED));
        let table = Table::new(
            table_rows,
            [
                Constraint::Length(7),
                Constraint::Length(7),
                Constraint::Length(7),
                Constraint::Length(7),
                Constraint::Min(10),
            ],
        )
        .header(header)
        .row_highlight_style(Style::new().add_modifier(Modifier::BOLD))
        .highlight_symbol("> ");
        let mut state = TableState::default();
        if !rows.is_empty() {
            state.select(Some(self.selected.min(rows.len() - 1)));
        }
        f.render_stateful_widget(table, body, &mut state);
        let help = self
            .message
            .clone()
            .unwrap_or_else(|| "Enter trace  s sort  Up/Down move  q quit".to_string());
        f.render_widget(Paragraph::new(help), foot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::stacks::Frame as StackFrame;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use std::path::PathBuf;

    fn frame(name: &str) -> StackFrame {
        StackFrame {
            object: PathBuf::from("/bin/app"),
            raw: name.into(),
            name: name.into(),
            inlined: None,
        }
    }

    fn model() -> Model {
        let mut p = Profile::new(10_000_000);
        for _ in 0..3 {
            p.add(&[frame("spin"), frame("worker"), frame("main")], None);
        }
        p.add(
            &[frame("nanosleep"), frame("block"), frame("main")],
            Some(50_000_000),
        );
        let mut m = Model::new("pid 42 (app)".into(), p);
        m.seconds = 1.0;
        m
    }

    /// The screen as text, digits masked.
    fn screen(m: &Model, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| m.draw(f)).unwrap();
        let buf = t.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..h {
            let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
            out.push_str(line.trim_end());
            out.push('\n');
        }
        // Digits of numbers, not of names (p50, p99).
        let mut prev = ' ';
        out.chars()
            .map(|c| {
                let masked = if c.is_ascii_digit() && !prev.is_ascii_alphabetic() {
                    '9'
                } else {
                    c
                };
                prev = if c.is_ascii_digit() { prev } else { c };
                masked
            })
            .collect()
    }

    #[test]
    fn profile_screen_at_80x24() {
        let s = screen(&model(), 80, 24);
        crate::golden::check("src/explore/golden", "profile_80x24.txt", s.as_bytes());
    }

    #[test]
    fn profile_screen_at_200x50() {
        let s = screen(&model(), 200, 50);
        crate::golden::check("src/explore/golden", "profile_200x50.txt", s.as_bytes());
    }

    #[test]
    fn keys_move_sort_and_trace() {
        let mut m = model();
        assert_eq!(m.rows()[0].shown, "main");
        assert_eq!(m.update(Key::Down), Action::None);
        assert_eq!(m.update(Key::Char('s')), Action::None);
        assert_eq!(m.sort, Sort::OnCpu);
        assert_eq!(m.selected, 0);
        // Of equal shares (spin, worker, main), the nearest the top of the
        // stack first.
        assert_eq!(
            m.update(Key::Enter),
            Action::Trace(Request {
                pid: 0,
                spec: "/bin/app:spin".into(),
                expand: Vec::new(),
                open: Vec::new(),
                filter: None,
                slower_than: None,
                by: None,
            })
        );
        assert_eq!(m.update(Key::Down), Action::None);
        assert_eq!(m.update(Key::Esc), Action::Untrace);
        assert!(matches!(m.view, View::Profile));
        assert_eq!(m.update(Key::Char('q')), Action::Quit);
    }

    /// A function view of `step` (calls 40) with call sites on its lines
    /// 3 and 4 and one placed nowhere, `mid` expanded.
    fn func_model() -> Model {
        use crate::callsites::{Site, SiteKind};
        use crate::explore::session::{Source, Started, Tree};
        use crate::plan::{Item, ItemKind, Plan, SiteNode};
        use crate::report::tree::TreeReport;
        let site = |addr: u64, name: &str, line: Option<u32>, parent: u32, expanded| SiteNode {
            level: if parent == 0 { 1 } else { 2 },
            parent,
            slot: addr as u32,
            site: Site {
                addr,
                ret: Some(addr + 5),
                kind: SiteKind::Call,
                callee: Some(0x100),
                callee_raw: Some(name.into()),
                name: name.into(),
                location: line.map(|l| format!("app.c:{l}")),
            },
            expanded,
            via: None,
        };
        let mut plan = Plan::default();
        plan.items = vec![Item {
            name: "step".into(),
            raw_name: "step".into(),
            kind: ItemKind::Syscall { nr: 0 },
        }];
        plan.sites = vec![
            site(1, "mid", Some(3), 0, true),
            site(2, "leaf", Some(4), 0, false),
            site(3, "leaf", None, 0, false),
            site(4, "leaf", Some(9), 1, false),
        ];
        plan.finish();
        let node = |name: &str, count, total_ns, children| {
            crate::report::tree::tests::node(name, None, "call", count, total_ns, children)
        };
        let mut root = node(
            "step",
            40,
            40_000,
            vec![
                node("mid", 40, 20_000, vec![node("leaf", 80, 8_000, vec![])]),
                node("leaf", 120, 6_000, vec![]),
                node("leaf", 0, 0, vec![]),
            ],
        );
        root.kind = "function";
        let lines = [
            "void step(void)",
            "{",
            "    mid();",
            "    leaf(); leaf();",
            "}",
        ];
        let mut m = model();
        m.update(Key::Enter);
        let View::Func(v) = &mut m.view else {
            panic!("not tracing")
        };
        v.started(Box::new(Started {
            request: v.request.clone().unwrap(),
            plan,
            sources: [(
                0,
                Source {
                    path: "/src/app.c".into(),
                    lines: (1..).zip(lines.iter().map(|l| l.to_string())).collect(),
                    inlined: [(4, "helper".to_string())].into(),
                },
            )]
            .into(),
            via_sources: Default::default(),
            callers: Default::default(),
            price: Some("~2.0 us (entry emulated, exit emulated)".into()),
            held: [4].into(),
            by_keys: vec!["caller".into(), "tid".into(), "retval".into()],
        }));
        v.tree = Some(Tree {
            report: TreeReport {
                time: std::time::SystemTime::UNIX_EPOCH,
                timestamp: false,
                unit: crate::report::Unit::Nsec,
                filter: None,
                callees_before: None,
                all_sites: false,
                roots: vec![root],
            },
            percentiles: vec![(Some(900), Some(2_900)); 5],
            hists: Vec::new(),
            groups: None,
            seconds: 3.0,
        });
        m
    }

    #[test]
    fn function_screen_at_80x24() {
        let m = func_model();
        let s = screen(&m, 80, 24);
        assert!(s.contains("step  calls 99  avg 9.9 us"), "{s}");
        crate::golden::check("src/explore/golden", "function_80x24.txt", s.as_bytes());
    }

    #[test]
    fn function_screen_at_200x50() {
        let s = screen(&func_model(), 200, 50);
        crate::golden::check("src/explore/golden", "function_200x50.txt", s.as_bytes());
    }

    fn type_text(m: &mut Model, text: &str) -> Action {
        text.chars().for_each(|c| {
            m.update(Key::Char(c));
        });
        m.update(Key::Enter)
    }

    #[test]
    fn f_and_s_prompt_for_filters_a_bad_one_changes_nothing() {
        let mut m = func_model();
        assert_eq!(m.update(Key::Char('f')), Action::None);
        assert_eq!(m.prompt.as_ref().map(|p| p.ask), Some(Ask::Filter));
        assert_eq!(type_text(&mut m, "arg0 <> 1"), Action::None);
        assert!(m.prompt.is_none());
        let View::Func(v) = &m.view else { panic!() };
        assert!(v.message.as_ref().is_some_and(|e| e.contains("arg0 <> 1")));
        let old = v.request.clone().unwrap();
        m.update(Key::Char('f'));
        // Backspace, then Esc: nothing changes.
        m.update(Key::Char('x'));
        m.update(Key::Backspace);
        assert_eq!(m.prompt.as_ref().map(|p| p.text.as_str()), Some(""));
        assert_eq!(m.update(Key::Esc), Action::None);
        m.update(Key::Char('f'));
        let want = Request {
            filter: Some("arg0 < 3".into()),
            ..old.clone()
        };
        assert_eq!(
            type_text(&mut m, "arg0 < 3"),
            Action::Refilter(want.clone())
        );
        m.refiltered(want.clone());
        let View::Func(v) = &m.view else { panic!() };
        assert!(v.started.is_none() && v.tree.is_none());
        assert_eq!(
            v.request.as_ref().map(|r| r.command()),
            Some("tachy nested -p 0 /bin/app:main --filter 'arg0 < 3' --depth 2".into())
        );
        // s keeps the filter; its duration is checked as --slower-than's.
        m.update(Key::Char('s'));
        assert_eq!(type_text(&mut m, "1 parsec"), Action::None);
        m.update(Key::Char('s'));
        assert_eq!(
            type_text(&mut m, "1ms"),
            Action::Refilter(Request {
                slower_than: Some("1ms".into()),
                ..want
            })
        );
    }

    #[test]
    fn b_cycles_the_keys_to_group_by_then_none() {
        let mut m = func_model();
        let mut req = match &m.view {
            View::Func(v) => v.request.clone().unwrap(),
            View::Profile => panic!("not tracing"),
        };
        for key in ["caller", "tid", "retval"] {
            req.by = Some(key.into());
            assert_eq!(m.update(Key::Char('b')), Action::Refilter(req.clone()));
            m.refiltered(req.clone());
            let View::Func(v) = &mut m.view else { panic!() };
            assert_eq!(
                v.message.as_deref(),
                Some(&*format!("by {key}: counters restarted"))
            );
            assert_eq!(v.group_lines()[1], "waiting for the first report");
            // The keys are known once tracing starts again.
            v.started = func_model_started();
        }
        req.by = None;
        assert_eq!(m.update(Key::Char('b')), Action::Refilter(req.clone()));
        // Esc, grouped: not grouped any more.
        req.by = Some("tid".into());
        m.refiltered(req.clone());
        req.by = None;
        assert_eq!(m.update(Key::Esc), Action::Refilter(req));
    }

    /// What `func_model`'s tracing started with.
    fn func_model_started() -> Option<Box<crate::explore::session::Started>> {
        match func_model().view {
            View::Func(v) => v.started,
            View::Profile => None,
        }
    }

    #[test]
    fn gt_picks_any_function_by_fuzzy_search() {
        let mut m = model();
        assert_eq!(m.update(Key::Char('>')), Action::Index);
        let f = |name: &str| Pickable {
            name: name.into(),
            spec: format!("/bin/app:{name}"),
            object: "app".into(),
        };
        m.index = vec![
            f("step_mid"),
            f("step_arg"),
            f("stop_all_regions"),
            f("main"),
        ];
        let names = |q| -> Vec<String> {
            fuzzy_matches(q, &m.index, 10)
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        assert_eq!(names("starg"), ["step_arg", "stop_all_regions"]);
        assert_eq!(names("mid"), ["step_mid"]);
        assert!(names("zz").is_empty());
        m.update(Key::Char('s'));
        m.update(Key::Char('a'));
        m.update(Key::Down);
        let s = screen(&m, 80, 24);
        crate::golden::check("src/explore/golden", "pick_80x24.txt", s.as_bytes());
        assert_eq!(
            m.update(Key::Enter),
            Action::Trace(Request {
                pid: 0,
                spec: "/bin/app:stop_all_regions".into(),
                expand: Vec::new(),
                open: Vec::new(),
                filter: None,
                slower_than: None,
                by: None,
            })
        );
        assert!(matches!(m.view, View::Func(_)));
    }

    #[test]
    fn enter_drills_into_a_callee_and_esc_comes_back() {
        let mut m = func_model();
        let rows = |m: &Model| match &m.view {
            View::Func(v) => v.rows(),
            View::Profile => Vec::new(),
        };
        // Lines 1-5, then the site placed nowhere.
        let r = rows(&m);
        assert_eq!(r.len(), 6);
        assert_eq!(r[2].site, Some(1));
        assert_eq!((r[3].site, r[3].line), (Some(2), Some(4)));
        assert_eq!((r[5].site, r[5].line), (Some(3), None));
        assert!(r[3].inlined);
        assert_eq!(m.update(Key::Enter), Action::None);
        m.update(Key::Down);
        m.update(Key::Down);
        // mid is planned already: its call site held back is attached,
        // nothing planned again.
        assert_eq!(m.update(Key::Enter), Action::Attach(vec![4]));
        let View::Func(v) = &mut m.view else { panic!() };
        assert_eq!(v.probes_in_place(), Some((0, 0)));
        v.attached(crate::explore::session::Attached {
            slots: vec![4],
            nodes: Vec::new(),
            late: Vec::new(),
            took: std::time::Duration::from_millis(5),
        });
        assert!(v.started.as_ref().is_some_and(|s| s.held.is_empty()));
        assert_eq!(v.breadcrumb(), "step > mid");
        assert_eq!(v.current(), Some(1));
        assert!(
            v.own_line().starts_with("mid  calls 40  avg 500 ns"),
            "{}",
            v.own_line()
        );
        // Back up and in again: nothing is held back now.
        assert_eq!(m.update(Key::Esc), Action::None);
        m.update(Key::Down);
        m.update(Key::Down);
        assert_eq!(m.update(Key::Enter), Action::None);
        assert_eq!(m.update(Key::Esc), Action::None);
        // Into leaf, which is not planned: the plan grows.
        for _ in 0..3 {
            m.update(Key::Down);
        }
        assert_eq!(
            m.update(Key::Enter),
            Action::Replan(Request {
                pid: 0,
                spec: "/bin/app:main".into(),
                expand: vec!["leaf".into()],
                open: vec![crate::explore::func::Step {
                    addr: 2,
                    name: "leaf".into(),
                    via: None,
                }],
                filter: None,
                slower_than: None,
                by: None,
            })
        );
        m.update(Key::Esc);
        assert_eq!(m.update(Key::Esc), Action::Untrace);
    }
}
