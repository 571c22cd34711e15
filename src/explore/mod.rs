//! `tachy explore`: a live terminal explorer of one process. The first
//! screen is where its time goes, from a sampling profile of its threads
//! on the CPU and blocked (`sampler`, unwound and named by `stacks`, added
//! up by `profile`); Enter on a function times it and its call sites
//! exactly, in this process, as `tachy nested` does (`session`), and shows
//! its source annotated with them (`func`), drilling into callees. The
//! screens are a pure model (`ui`, `func`); this file is the run loop:
//! terminal, keys, signals, refresh once a second. `--print` prints the
//! first screen's rows instead, for scripts and tests.

pub mod func;
pub mod profile;
pub mod sampler;
pub mod session;
pub mod stacks;
pub mod ui;

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use self::profile::{Profile, Sort};
use self::sampler::{Event, Kind, Sampler};
use self::stacks::{Frame, Stacks};
use self::ui::{Action, Key, Model, View};
use crate::symbols::unwind::UserStack;

const EXAMPLES: &str = "\
Examples:
  tachy explore -p 4242                  where the time of process 4242 goes, live
  tachy explore -p 4242 handle_request   the source of handle_request, timed live
  tachy explore -p 4242 --print -d 5     the first screen's rows after 5 s, printed

Keys of the first screen: Up/Down (j/k) move, s sorts (total, on-CPU,
blocked, self), Enter times the function and its call sites exactly.
Keys of a function's view (its source, each call line with its calls per
call, average and share of the function's time, as tachy nested counts
them): Enter on a call line drills into the callee (its call sites are
timed from then on, the other counts go on, at any depth), Esc goes
back up (at the top: to the first screen), f sets an argument filter (as --filter), s a duration filter
(as --slower-than: only slower calls are counted and broken down), both
restarting the counters; h shows the histogram of the selected call site
or function (as --hist prints it), b groups the traced function's calls
by caller, then thread, each named parameter, return value and none (as
--by; the table's counts, averages and p99 are those of tachy nested
--by KEY --json), r resets the counters, w writes the
tree as tachy nested --json prints it to tachy-explore-PID-N.json. On
both screens > picks any function of the process by fuzzy search and
opens its view. q or Ctrl-C quits; quitting,
SIGHUP detach every probe and leave the process running.";

/// `tachy explore`'s arguments.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ExploreArgs {
    /// The process to explore
    #[arg(short, long, value_name = "PID")]
    pub pid: u32,

    /// Open this function's view at once: FUNC, LIB:FUNC or PATH:FUNC
    #[arg(value_name = "FUNC", conflicts_with = "print")]
    pub func: Option<String>,

    /// Print the profile's rows after -d SECS instead of the full-screen view
    #[arg(long)]
    pub print: bool,

    /// With --print: profile for SECS seconds (2 if not given)
    #[arg(short, long, value_name = "SECS", value_parser = crate::duration::parse_seconds)]
    pub duration: Option<Duration>,

    /// With --print: print N rows at most
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub rows: usize,

    /// With --print: order rows by total, on-cpu, blocked or self time
    #[arg(long, value_name = "KEY", default_value = "total", value_parser = ["total", "on-cpu", "blocked", "self"])]
    pub sort: String,
}

/// Set by SIGINT, SIGTERM and SIGHUP: the run loop ends, detaching
/// everything and restoring the terminal.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_stop() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        let h = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, h);
        }
    }
}

pub fn run(a: ExploreArgs) -> Result<i32> {
    if !crate::target::process_alive(a.pid) {
        bail!("no process {}", a.pid);
    }
    install_stop();
    let sort = match a.sort.as_str() {
        "on-cpu" => Sort::OnCpu,
        "blocked" => Sort::OffCpu,
        "self" => Sort::SelfCpu,
        _ => Sort::Total,
    };
    let collector = Collector::new(a.pid);
    if a.print {
        let sampler = Sampler::start(a.pid)?;
        print(a, sampler, collector, sort)
    } else {
        // Started on a function, the profile is taken when asked for.
        let sampler = match a.func {
            Some(_) => None,
            None => Some(Sampler::start(a.pid)?),
        };
        interactive(a.pid, a.func, sampler, collector)
    }
}

/// Reads the sampler's events into a profile.
struct Collector {
    stacks: Stacks,
    profile: Profile,
    /// Threads asleep: when they went to sleep, and where.
    asleep: HashMap<u32, (u64, Vec<Frame>)>,
    start: Instant,
}

impl Collector {
    fn new(pid: u32) -> Collector {
        Collector {
            stacks: Stacks::new(pid),
            profile: Profile::new(1_000_000_000 / sampler::HZ),
            asleep: HashMap::new(),
            start: Instant::now(),
        }
    }

    fn add(&mut self, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Stack(s) => {
                    let addrs = self.stacks.unwind(&UserStack {
                        ip: s.ip,
                        ret: false,
                        sp: s.sp,
                        bp: s.bp,
                        base: s.base,
                        bytes: &s.stack,
                    });
                    let frames: Vec<Frame> = addrs
                        .iter()
                        .enumerate()
                        .map(|(i, &a)| self.stacks.name(a, i > 0))
                        .collect();
                    match s.kind {
                        Kind::OnCpu => self.profile.add(&frames, None),
                        Kind::Off => {
                            self.asleep.insert(s.tid, (s.ns, frames));
                        }
                    }
                }
                Event::Back { tid, ns } => {
                    if let Some((from, frames)) = self.asleep.remove(&tid) {
                        self.profile.add(&frames, Some(ns.saturating_sub(from)));
                    }
                }
            }
        }
    }
}

fn print(a: ExploreArgs, mut sampler: Sampler, mut c: Collector, sort: Sort) -> Result<i32> {
    let until = Instant::now() + a.duration.unwrap_or(Duration::from_secs(2));
    while Instant::now() < until && !STOP.load(Ordering::SeqCst) {
        let events = sampler.read(Duration::from_millis(100));
        c.add(events);
    }
    let lost = sampler.lost();
    drop(sampler);
    let p = &c.profile;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "pid {}: {:.1} s, {} on-CPU samples, {} blocked{}",
        a.pid,
        c.start.elapsed().as_secs_f64(),
        p.samples,
        crate::report::fmt::human(p.off_ns as f64),
        if lost > 0 {
            format!(", {lost} stacks lost")
        } else {
            String::new()
        }
    )?;
    writeln!(out, " TOTAL    CPU   SELF  BLOCK  FUNCTION  OBJECT")?;
    for r in p.rows(sort).into_iter().take(a.rows) {
        writeln!(
            out,
            "{:5.1}% {:5.1}% {:5.1}% {:5.1}%  {}  {}",
            p.total_share(r) * 100.0,
            p.on_share(r) * 100.0,
            p.self_share(r) * 100.0,
            p.off_share(r) * 100.0,
            r.shown,
            r.key.object.display()
        )?;
    }
    out.flush()?;
    Ok(0)
}

/// The terminal in raw mode on the alternate screen, restored on drop
/// (also on an error, or when the terminal is gone after a SIGHUP: each
/// step is tried, none is fatal).
struct Screen;

impl Screen {
    fn enter() -> Result<Screen> {
        crossterm::terminal::enable_raw_mode().context("cannot set the terminal to raw mode")?;
        let s = Screen;
        crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::cursor::Hide
        )
        .context("cannot switch to the terminal's alternate screen")?;
        Ok(s)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::LeaveAlternateScreen,
            crossterm::cursor::Show
        );
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

fn key_of(k: crossterm::event::KeyEvent) -> Option<Key> {
    use crossterm::event::{KeyCode, KeyEventKind, KeyModifiers};
    if k.kind == KeyEventKind::Release {
        return None;
    }
    Some(match k.code {
        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::Interrupt,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Tab => Key::Tab,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Char(c) => Key::Char(c),
        _ => return None,
    })
}

/// Standard error while the screen is drawn: what tracing says there
/// (notes, warnings) would be drawn over the screen, so it goes to a pipe
/// whose lines the view shows; restored on drop.
struct Stderr {
    saved: libc::c_int,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Stderr {
    fn capture() -> Option<Stderr> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe writes two descriptors into the array; dup and dup2
        // only change this process's descriptor table.
        let saved = unsafe {
            if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return None;
            }
            let saved = libc::dup(2);
            if saved < 0 || libc::dup2(fds[1], 2) < 0 {
                libc::close(fds[0]);
                libc::close(fds[1]);
                return None;
            }
            libc::close(fds[1]);
            saved
        };
        // SAFETY: fds[0] is a descriptor this process owns and nothing else
        // uses.
        let read = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(read).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Some(Stderr { saved, lines })
    }
}

impl Drop for Stderr {
    fn drop(&mut self) {
        // SAFETY: puts back the descriptor saved by capture.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
    }
}

/// After a stop, the run loop has three seconds to detach and restore the
/// terminal; then the process ends as it is. When the terminal hangs up,
/// crossterm's poll can spin on the dead terminal and never return to the
/// loop; the links are descriptors, so the kernel detaches every probe when
/// the process ends, and the traced process runs on.
fn watch_stop() {
    std::thread::spawn(|| {
        while !STOP.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(3));
        // SAFETY: _exit ends the process at once; nothing is shared.
        unsafe { libc::_exit(0) };
    });
}

/// Writes the tree of the function view as `tachy nested --json` prints
/// it, to a new file of the current directory; says where. The call sites
/// attached after the others are listed as `late`, as a report of `tachy
/// nested` lists those its overhead budget held back: their counts start
/// `from_s` seconds after the others'.
fn write_tree(pid: u32, view: &func::FuncView) -> String {
    let Some(t) = &view.tree else {
        return "nothing counted yet".into();
    };
    let mut value = crate::report::tree::json_value(&t.report);
    // --by: the traced function's groups, in its root.
    if let (Some(g), Some(root)) = (&t.groups, value["roots"].get_mut(0)) {
        crate::report::groups::json_fields(g, t.report.unit, root);
    }
    let note = crate::report::budget::BudgetNote {
        late: view.late.clone(),
        ..Default::default()
    };
    value["late"] = crate::report::budget::json_value(&note)["late"].take();
    let path = (1..)
        .map(|n| std::path::PathBuf::from(format!("tachy-explore-{pid}-{n}.json")))
        .find(|p| !p.exists())
        .unwrap_or_default();
    let text = serde_json::to_string(&value).unwrap_or_default() + "\n";
    match std::fs::write(&path, text) {
        Ok(()) => format!("wrote {}", path.display()),
        Err(e) => format!("cannot write {}: {e}", path.display()),
    }
}

/// Every function of the objects the process maps, for `>`: from
/// tachy's symbol index of each, named as `tachy list` names them.
fn symbol_index(pid: u32) -> Vec<ui::Pickable> {
    let mut out = Vec::new();
    let Ok(all) = crate::symbols::Pattern::parse("*") else {
        return out;
    };
    let mut seen = std::collections::HashSet::new();
    for m in crate::target::exec_mappings(pid).unwrap_or_default() {
        let o = &m.object;
        if !seen.insert(o.display.clone()) {
            continue;
        }
        let Ok(elf) = crate::symbols::ElfObject::open(&o.display, &o.open_path) else {
            continue;
        };
        let Ok(found) = crate::symbols::find(&elf, &all) else {
            continue;
        };
        let object = o
            .display
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.extend(found.functions.into_iter().map(|f| ui::Pickable {
            name: f.display_name(),
            spec: format!("{}:{}", o.display.display(), f.raw),
            object: object.clone(),
        }));
    }
    out
}

fn interactive(
    pid: u32,
    func: Option<String>,
    sampler: Option<Sampler>,
    mut c: Collector,
) -> Result<i32> {
    let comm = crate::scope::comm(pid).unwrap_or_else(|| "?".into());
    let mut model = Model::new(format!("pid {pid} ({comm})"), Profile::default());
    model.pid = pid;
    let screen = Screen::enter()?;
    let stderr = Stderr::capture();
    let backend = ratatui::backend::CrosstermBackend::new(std::io::stdout());
    let mut term = ratatui::Terminal::new(backend).context("cannot draw on the terminal")?;
    term.clear().ok();
    watch_stop();
    let mut sampler = sampler;
    let mut session: Option<session::Session> = None;
    let mut first = func.map(|f| model.trace(f.clone(), f));
    let mut next_draw = Instant::now();
    let mut dirty = true;
    let result = loop {
        if STOP.load(Ordering::SeqCst) {
            break Ok(0);
        }
        if let Some(s) = sampler.as_mut() {
            let events = s.read(Duration::from_millis(20));
            c.add(events);
        }
        if let View::Func(v) = &mut model.view {
            let mut afresh = None;
            if let Some(s) = session.as_ref() {
                for u in s.updates.try_iter() {
                    match u {
                        session::Update::Started(st) => v.started(st),
                        session::Update::Tree(t) => v.tree = Some(t),
                        session::Update::Attached(a) => v.attached(a),
                        session::Update::Grown(st, a) => v.grown(st, a),
                        session::Update::NotGrown(req, why) => afresh = Some((req, why)),
                        session::Update::Failed(e) => v.say(e),
                        session::Update::Ended => v.ended = true,
                    }
                    dirty = true;
                }
            }
            // The plan could not grow: the kernel is given the new plan
            // whole, counted from zero.
            if let Some((req, why)) = afresh {
                if let Some(s) = session.take() {
                    s.stop();
                }
                v.message = Some(format!("planned again, counters restarted: {why}"));
                session = Some(session::Session::start(req));
            }
            if let Some(e) = stderr.as_ref() {
                for line in e.lines.try_iter() {
                    v.say(line);
                    dirty = true;
                }
            }
        }
        if !crate::target::process_alive(pid) {
            break Ok(0);
        }
        let mut action = first.take().unwrap_or(Action::None);
        match crossterm::event::poll(Duration::from_millis(30)) {
            Ok(true) => match crossterm::event::read() {
                Ok(crossterm::event::Event::Key(k)) => {
                    if let Some(key) = key_of(k) {
                        action = model.update(key);
                        dirty = true;
                    }
                }
                Ok(crossterm::event::Event::Resize(..)) => dirty = true,
                Ok(_) => {}
                // The terminal is gone (the SSH session dropped).
                Err(_) => break Ok(0),
            },
            Ok(false) => {}
            Err(_) => break Ok(0),
        }
        match action {
            Action::Quit => break Ok(0),
            // A level deeper than the plan: it grows while the run goes on.
            Action::Replan(req) if session.is_some() => {
                if let Some(s) = session.as_ref() {
                    s.grow(req);
                }
            }
            Action::Trace(req) | Action::Replan(req) => {
                // The profile stops: its numbers stay on the first screen.
                if let Some(s) = sampler.take() {
                    model.lost = s.lost();
                }
                // The probes of the new plan replace the old: the kernel
                // is given the new plan whole.
                if let Some(s) = session.take() {
                    s.stop();
                }
                session = Some(session::Session::start(req));
            }
            Action::Attach(slots) => {
                if let Some(s) = session.as_ref() {
                    s.attach(slots);
                }
            }
            Action::Refilter(req) => match session::check(&req) {
                Ok(()) => {
                    if let Some(s) = session.take() {
                        s.stop();
                    }
                    model.refiltered(req.clone());
                    session = Some(session::Session::start(req));
                }
                Err(e) => model.refused(format!("{e:#}")),
            },
            Action::Index => {
                if model.index.is_empty() {
                    model.index = symbol_index(pid);
                }
            }
            Action::Reset => {
                if let Some(s) = session.as_ref() {
                    s.reset();
                }
                if let View::Func(v) = &mut model.view {
                    v.reset();
                }
            }
            Action::Write => {
                if let View::Func(v) = &mut model.view {
                    v.message = Some(write_tree(pid, v));
                }
            }
            Action::Untrace => {
                if let Some(s) = session.take() {
                    s.stop();
                }
                if sampler.is_none() && c.profile.samples == 0 {
                    sampler = Sampler::start(pid).ok();
                }
            }
            Action::None => {}
        }
        let now = Instant::now();
        if now >= next_draw || dirty {
            if sampler.is_some() {
                model.profile = c.profile.clone();
                model.seconds = c.start.elapsed().as_secs_f64();
            }
            if term.draw(|f| model.draw(f)).is_err() {
                break Ok(0);
            }
            dirty = false;
            while next_draw <= now {
                next_draw += Duration::from_secs(1);
            }
        }
    };
    if let Some(s) = session.take() {
        s.stop();
    }
    drop(sampler);
    drop(term);
    drop(stderr);
    drop(screen);
    result
}
