//! The explorer's screens as a pure model: state, `update(key)` that says
//! what the run loop must do, and `draw(frame)`. Nothing here reads the
//! terminal or the kernel, so screens are tested with ratatui's
//! `TestBackend` (golden text with the numbers masked).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Row as TableRow, Table, TableState};
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

/// What the run loop must do after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Time this function exactly, with its call sites.
    Trace(Request),
    /// Trace again with other probes (a callee drilled into).
    Replan(Request),
    /// Counting starts again from zero.
    Reset,
    /// Write the current tree as `tachy nested --json` prints it.
    Write,
    /// Stop timing and go back to the profile.
    Untrace,
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
        }
    }

    fn rows(&self) -> Vec<&Row> {
        self.profile.rows(self.sort)
    }

    pub fn update(&mut self, key: Key) -> Action {
        self.message = None;
        match (&mut self.view, key) {
            (_, Key::Interrupt | Key::Char('q')) => Action::Quit,
            (View::Func(v), key) => match v.update(key) {
                FuncAction::None => Action::None,
                FuncAction::Replan(r) => Action::Replan(r),
                FuncAction::Reset => Action::Reset,
                FuncAction::Write => Action::Write,
                FuncAction::Leave => {
                    self.view = View::Profile;
                    Action::Untrace
                }
            },
            (View::Profile, key) => self.update_profile(key),
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
            level: 1,
            expanded,
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
            price: Some("~2.0 us (entry emulated, exit emulated)".into()),
        }));
        v.tree = Some(Tree {
            report: TreeReport {
                time: std::time::SystemTime::UNIX_EPOCH,
                timestamp: false,
                unit: crate::report::Unit::Nsec,
                filter: None,
                all_sites: false,
                roots: vec![root],
            },
            percentiles: vec![(Some(900), Some(2_900)); 5],
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
        // mid is expanded already: no new probes.
        assert_eq!(m.update(Key::Enter), Action::None);
        let View::Func(v) = &m.view else { panic!() };
        assert_eq!(v.breadcrumb(), "step > mid");
        assert_eq!(v.current(), Some(1));
        assert!(
            v.own_line().starts_with("mid  calls 40  avg 500 ns"),
            "{}",
            v.own_line()
        );
        // Back up, then into leaf, which needs its probes.
        assert_eq!(m.update(Key::Esc), Action::None);
        for _ in 0..3 {
            m.update(Key::Down);
        }
        assert_eq!(
            m.update(Key::Enter),
            Action::Replan(Request {
                pid: 0,
                spec: "/bin/app:main".into(),
                expand: vec!["leaf".into()],
            })
        );
        m.update(Key::Esc);
        assert_eq!(m.update(Key::Esc), Action::Untrace);
    }
}
