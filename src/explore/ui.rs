//! The explorer's screens as a pure model: state, `update(key)` that says
//! what the run loop must do, and `draw(frame)`. Nothing here reads the
//! terminal or the kernel, so screens are tested with ratatui's
//! `TestBackend` (golden text with the numbers masked).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Row as TableRow, Table, TableState};
use ratatui::Frame;
use serde_json::Value;

use super::profile::{Profile, Row, Sort};
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

/// What the run loop must do after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Time this function exactly: `tachy latency` of `spec`.
    Trace {
        spec: String,
        shown: String,
    },
    /// Stop timing and go back to the profile.
    Untrace,
}

/// The numbers of one report of `tachy latency --json` for the function.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interval {
    pub count: u64,
    pub avg_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// The function being timed.
#[derive(Clone, Debug, Default)]
pub struct TraceView {
    pub shown: String,
    pub spec: String,
    /// Reports read, and the calls and ns they counted together.
    pub reports: u64,
    pub count: u64,
    pub total_ns: u64,
    pub last: Option<Interval>,
    /// The probes' own time per call, as the report says.
    pub probe_ns: Option<u64>,
    /// What `tachy latency` said on standard error, last lines.
    pub said: Vec<String>,
    pub ended: bool,
}

impl TraceView {
    /// Adds one report of `tachy latency --json`.
    pub fn add_report(&mut self, v: &Value) {
        let Some(f) = v["functions"].as_array().and_then(|a| a.first()) else {
            return;
        };
        let n = |key: &str| f[key].as_u64().unwrap_or(0);
        let p = |key: &str| f["percentiles_ns"][key].as_u64().unwrap_or(0);
        self.reports += 1;
        self.count += n("count");
        self.total_ns += n("total_ns");
        self.probe_ns = f["probe_ns_per_call"].as_u64().or(self.probe_ns);
        self.last = Some(Interval {
            count: n("count"),
            avg_ns: n("avg_ns"),
            p50_ns: p("p50"),
            p99_ns: p("p99"),
            max_ns: n("max_ns"),
        });
    }

    pub fn say(&mut self, line: String) {
        self.said.push(line);
        let extra = self.said.len().saturating_sub(4);
        self.said.drain(..extra);
    }
}

/// Which screen is shown.
#[derive(Clone, Debug)]
pub enum View {
    Profile,
    Trace(TraceView),
}

pub struct Model {
    /// `pid 4242 (server)`.
    pub target: String,
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
        match (&self.view, key) {
            (_, Key::Interrupt | Key::Char('q')) => Action::Quit,
            (View::Trace(_), Key::Esc) => {
                self.view = View::Profile;
                Action::Untrace
            }
            (View::Trace(_), _) => Action::None,
            (View::Profile, key) => self.update_profile(key),
        }
    }

    fn update_profile(&mut self, key: Key) -> Action {
        let n = self.rows().len();
        let last = n.saturating_sub(1);
        match key {
            Key::Up | Key::Char('k') => self.selected = self.selected.saturating_sub(1),
            Key::Down | Key::Char('j') => self.selected = (self.selected + 1).min(last),
            Key::PageUp => self.selected = self.selected.saturating_sub(10),
            Key::PageDown => self.selected = (self.selected + 10).min(last),
            Key::Home => self.selected = 0,
            Key::End => self.selected = last,
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
                self.view = View::Trace(TraceView {
                    shown: shown.clone(),
                    spec: spec.clone(),
                    ..Default::default()
                });
                return Action::Trace { spec, shown };
            }
            _ => {}
        }
        Action::None
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
            View::Trace(t) => self.draw_trace(t, f, head, body, foot),
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

    fn draw_trace(&self, t: &TraceView, f: &mut Frame, head: Rect, body: Rect, foot: Rect) {
        let probe = match t.probe_ns {
            Some(ns) => format!("probe time {} per call", human(ns as f64)),
            None => "attaching probes...".to_string(),
        };
        f.render_widget(
            Paragraph::new(vec![
                Line::from(Span::styled(
                    format!("tachy explore  {}  > {}", self.target, t.shown),
                    Style::new().add_modifier(Modifier::BOLD),
                )),
                Line::from(format!("tachy latency {}  {probe}", t.spec)),
            ]),
            head,
        );
        let mut lines = vec![Line::from("")];
        let avg_all = if t.count > 0 {
            human(t.total_ns as f64 / t.count as f64)
        } else {
            "-".into()
        };
        lines.push(Line::from(format!(
            "  calls        {:>12}   in {} s",
            t.count, t.reports
        )));
        lines.push(Line::from(format!("  avg          {avg_all:>12}")));
        if let Some(l) = &t.last {
            lines.push(Line::from(""));
            lines.push(Line::from("  last second"));
            lines.push(Line::from(format!("  calls        {:>12}", l.count)));
            for (name, ns) in [
                ("avg", l.avg_ns),
                ("p50", l.p50_ns),
                ("p99", l.p99_ns),
                ("max", l.max_ns),
            ] {
                let v = if l.count > 0 {
                    human(ns as f64)
                } else {
                    "-".into()
                };
                lines.push(Line::from(format!("  {name:<12} {v:>12}")));
            }
        }
        if !t.said.is_empty() {
            lines.push(Line::from(""));
            lines.extend(t.said.iter().map(|s| Line::from(format!("  {s}"))));
        }
        if t.ended {
            lines.push(Line::from("  tracing ended"));
        }
        f.render_widget(Paragraph::new(lines), body);
        f.render_widget(Paragraph::new("Esc back  q quit"), foot);
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
            Action::Trace {
                spec: "/bin/app:spin".into(),
                shown: "spin".into()
            }
        );
        assert_eq!(m.update(Key::Down), Action::None);
        assert_eq!(m.update(Key::Esc), Action::Untrace);
        assert!(matches!(m.view, View::Profile));
        assert_eq!(m.update(Key::Char('q')), Action::Quit);
    }

    #[test]
    fn trace_screen_adds_reports() {
        let mut m = model();
        m.update(Key::Enter);
        let View::Trace(t) = &mut m.view else {
            panic!("not tracing")
        };
        let rep: Value = serde_json::from_str(
            r#"{"functions":[{"count":7,"total_ns":7000,"avg_ns":1000,"max_ns":3000,
               "probe_ns_per_call":1200,"percentiles_ns":{"p50":900,"p99":2900}}]}"#,
        )
        .unwrap();
        t.add_report(&rep);
        t.add_report(&rep);
        assert_eq!((t.count, t.reports), (14, 2));
        let s = screen(&m, 80, 24);
        crate::golden::check("src/explore/golden", "trace_80x24.txt", s.as_bytes());
    }
}
