//! `tachy explore` driven in a real terminal: tmux runs it in a pseudo-
//! terminal (`new-session -d -x W -y H`), keys go in with `send-keys` and
//! the screen comes out with `capture-pane -p`. The fixture `explore` has
//! a spinning thread and a blocking one; on signals it pauses them, then
//! calls its spinning function and `explore_step` (one call of `step_mid`,
//! three of `step_leaf`, each from a line of its own) a known number of
//! times.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::run::Tachy;
use crate::common::{self, needs_root, tachy, Fixture};

/// One tmux session, killed on drop.
struct Tmux {
    name: String,
}

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux runs (make deps installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Tmux {
    /// Runs `command` (through sh) in a new detached session of W x H.
    fn start(command: &str, w: u16, h: u16) -> Tmux {
        let name = format!("tachy-explore-{}", std::process::id());
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", &name, "-x", &w.to_string()])
            .args(["-y", &h.to_string(), command])
            .status()
            .expect("tmux runs (make deps installs it)");
        assert!(status.success(), "tmux new-session failed");
        Tmux { name }
    }

    /// Runs `tachy explore ARGS` in `dir` (where `w` writes), W x H: by
    /// exec, so that a hang-up reaches the explorer and not a shell; with
    /// `then`, through a shell that runs `then` after it.
    fn explore(args: &str, dir: &Path, w: u16, h: u16, then: Option<&str>) -> Tmux {
        let run = match then {
            None => "exec".to_string(),
            Some(_) => String::new(),
        };
        let command = format!(
            "cd {} && {run} {} explore {args}{}",
            dir.display(),
            tachy().display(),
            then.map_or(String::new(), |t| format!("; {t}"))
        );
        Tmux::start(&command, w, h)
    }

    /// Resizes the window (the explorer gets a SIGWINCH).
    fn resize(&self, w: u16, h: u16) {
        let (w, h) = (w.to_string(), h.to_string());
        tmux(&["resize-window", "-t", &self.name, "-x", &w, "-y", &h]);
    }

    /// Types `text` as it is (spaces and all).
    fn type_text(&self, text: &str) {
        tmux(&["send-keys", "-t", &self.name, "-l", text]);
    }

    fn screen(&self) -> String {
        tmux(&["capture-pane", "-p", "-t", &self.name])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", self.name.as_str()];
        args.extend_from_slice(keys);
        tmux(&args);
    }

    /// The pid of the program running in the pane.
    fn pane_pid(&self) -> i32 {
        tmux(&["display-message", "-p", "-t", &self.name, "#{pane_pid}"])
            .trim()
            .parse()
            .expect("tmux gives the pane's pid")
    }

    /// Waits until the screen satisfies `ok`; panics with the screen after
    /// `secs` seconds.
    fn wait_for(&self, secs: u64, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if Instant::now() > until {
                panic!("screen never showed {what}:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn alive(&self) -> bool {
        Command::new("tmux")
            .args(["has-session", "-t", &self.name])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        tmux(&["kill-session", "-t", &self.name]);
    }
}

/// The line of the screen's table that shows `func`.
fn row_of(screen: &str, func: &str) -> Option<usize> {
    screen
        .lines()
        .position(|l| l.split_whitespace().any(|w| w == func))
}

fn uprobes_on(path: &Path) -> usize {
    let events = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events")
        .or_else(|_| std::fs::read_to_string("/sys/kernel/debug/tracing/uprobe_events"))
        .unwrap_or_default();
    let p = path.display().to_string();
    events.lines().filter(|l| l.contains(&p)).count()
}

#[test]
fn profile_orders_spinner_and_blocker_enter_counts_exactly_sighup_detaches() {
    let _g = needs_root!();
    let calls = 40;
    let mut fx = Fixture::spawn("explore", &[&calls.to_string()]);
    fx.go();
    let pid = fx.pid();
    let t = Tmux::explore(&format!("-p {pid}"), &std::env::temp_dir(), 100, 30, None);
    let explorer = t.pane_pid();
    let s = t.wait_for(20, "spin_hot and block_wait", |s| {
        row_of(s, "spin_hot").is_some() && row_of(s, "block_wait").is_some()
    });
    assert!(s.contains("tachy explore"), "{s}");
    // By on-CPU time the spinning function comes first, by blocked time
    // the blocking one.
    t.keys(&["s"]);
    let s = t.wait_for(5, "the on-CPU order", |s| s.contains("CPU*"));
    assert!(
        row_of(&s, "spin_hot") < row_of(&s, "block_wait"),
        "on-CPU order:\n{s}"
    );
    t.keys(&["s"]);
    let s = t.wait_for(5, "the blocked order", |s| s.contains("BLOCK*"));
    assert!(
        row_of(&s, "block_wait") < row_of(&s, "spin_hot"),
        "blocked order:\n{s}"
    );
    // By self time the spinning function is the first row, selected.
    t.keys(&["s"]);
    let s = t.wait_for(5, "the self order", |s| s.contains("SELF*"));
    let first = s
        .lines()
        .find(|l| l.starts_with("> "))
        .unwrap_or_else(|| panic!("no selected row:\n{s}"));
    assert!(first.contains("spin_hot"), "self order:\n{s}");

    // Paused, then timed: the count is exactly the calls made after.
    libc_kill(pid, libc::SIGUSR1);
    assert_eq!(
        fx.read_line(Duration::from_secs(10)).as_deref(),
        Some("paused")
    );
    t.keys(&["Enter"]);
    t.wait_for(20, "the first report", |s| s.contains("spin_hot  calls 0"));
    round(&mut fx, calls);
    let s = t.wait_for(10, "the exact count", |s| {
        s.contains(&format!(" spin_hot  calls {calls}  avg"))
    });
    assert!(s.contains("probes in place"), "{s}");

    hang_up(&t, explorer, &mut fx);
}

/// A hang-up (the SSH session dropped) ends the explorer and its tracing;
/// the target runs on with no probe left.
fn hang_up(t: &Tmux, explorer: i32, fx: &mut Fixture) {
    hang_up_of(t, explorer, fx, "explore");
}

/// [`hang_up`] with the explorer on fixture `name`.
fn hang_up_of(t: &Tmux, explorer: i32, fx: &mut Fixture, name: &str) {
    libc_kill(explorer as u32, libc::SIGHUP);
    let until = Instant::now() + Duration::from_secs(10);
    while t.alive() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !t.alive(),
        "explore still runs after SIGHUP:\n{}",
        t.screen()
    );
    // Its links were descriptors of its own: gone with it (a zombie not
    // yet reaped by tmux has closed its descriptors too).
    let exited = || {
        std::fs::read_to_string(format!("/proc/{explorer}/stat")).map_or(true, |st| {
            st.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    };
    let until = Instant::now() + Duration::from_secs(5);
    while !exited() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(exited(), "explore {explorer} still runs");
    assert_eq!(uprobes_on(&common::build(name)), 0);
    assert!(fx.is_running(), "the target died");
}

#[test]
fn q_quits_and_restores_the_terminal() {
    let _g = needs_root!();
    let mut fx = Fixture::spawn("explore", &[]);
    fx.go();
    let pid = fx.pid();
    let t = Tmux::explore(
        &format!("-p {pid}"),
        &std::env::temp_dir(),
        80,
        24,
        Some("echo explore exited $?; sleep 30"),
    );
    t.wait_for(20, "the profile", |s| row_of(s, "spin_hot").is_some());
    t.keys(&["q"]);
    let s = t.wait_for(10, "the shell again", |s| s.contains("explore exited 0"));
    // The alternate screen is gone: the profile is no longer shown.
    assert!(row_of(&s, "spin_hot").is_none(), "{s}");
    assert!(fx.is_running(), "the target died");
}

#[test]
fn print_lists_the_same_rows() {
    let _g = needs_root!();
    let mut fx = Fixture::spawn("explore", &[]);
    fx.go();
    let out = Command::new(tachy())
        .args(["explore", "--print", "-d", "2", "--sort", "on-cpu", "-p"])
        .arg(fx.pid().to_string())
        .output()
        .expect("tachy runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spin = row_of(&text, "spin_hot").unwrap_or_else(|| panic!("no spin_hot:\n{text}"));
    let block = row_of(&text, "block_wait").unwrap_or_else(|| panic!("no block_wait:\n{text}"));
    assert!(spin < block, "{text}");
    assert!(fx.is_running(), "the target died");
}

/// The screen with what changes from run to run masked: numbers (with
/// their units and the spaces before them) become `#`, the fixtures'
/// directory `DIR`.
fn masked(screen: &str) -> String {
    let dir = common::build("explore")
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let text = screen.replace(src, "DIR").replace(&dir, "DIR");
    let number = |w: &str| {
        let w = w.trim_start_matches('~');
        w.starts_with(|c: char| c.is_ascii_digit())
            && w.chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | '%' | 'i'))
    };
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
        let mut kept: Vec<&str> = Vec::new();
        let mut i = 0;
        while i < words.len() {
            if number(words[i]) {
                kept.push("#");
                if words
                    .get(i + 1)
                    .is_some_and(|u| ["ns", "us", "ms", "s"].contains(u))
                {
                    i += 1;
                }
            } else {
                kept.push(words[i]);
            }
            i += 1;
        }
        out.push_str(&kept.join(" "));
        out.push('\n');
    }
    out
}

/// Compares `got` with golden file `name` of src/explore/golden;
/// `TACHY_BLESS=1` rewrites it.
fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/explore/golden")
        .join(name);
    if std::env::var_os("TACHY_BLESS").is_some() {
        std::fs::write(&path, got).expect("golden file written");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing golden file {}", path.display()));
    assert_eq!(got, want, "{name} differs; TACHY_BLESS=1 rewrites it");
}

/// The words of the screen's row whose source text is `text` (with a
/// note after it or not), the `n`th such row (0 first).
fn site_row(screen: &str, text: &str, n: usize) -> Vec<String> {
    let noted = format!("{text}  [");
    screen
        .lines()
        .filter(|l| l.trim_end().ends_with(text) || l.contains(&noted))
        .nth(n)
        .unwrap_or_else(|| panic!("no row {n} of {text}:\n{screen}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn function_view_counts_each_call_site_drills_down_and_back() {
    let _g = needs_root!();
    let calls = 40;
    let (mut fx, dir, t, explorer) = explore_paused(calls, "explore_step", "explore_step");
    let pid = fx.pid();
    round(&mut fx, calls);
    let s = t.wait_for(10, "the exact count", |s| {
        s.contains(&format!(" explore_step  calls {calls}  avg"))
    });
    // Its source, each call line with its calls per call: one call of
    // step_mid and three of step_leaf, each from a line of its own.
    let mid = site_row(&s, "step_mid();", 0);
    assert_eq!(mid[1], "1.00", "{s}");
    for n in 0..3 {
        let leaf = site_row(&s, "step_leaf();", n);
        assert_eq!(leaf[1], "1.00", "{s}");
        assert!(leaf.iter().any(|w| w.ends_with('%')), "{s}");
    }
    assert!(s.contains("explore.c"), "{s}");
    golden("function_tmux_80x24.txt", &masked(&s));
    // Resized to 200x50, the same view, laid out again.
    t.resize(200, 50);
    let s = t.wait_for(10, "the view at 200x50", |s| {
        s.lines().count() >= 50 && s.contains(&format!(" explore_step  calls {calls}  avg"))
    });
    golden("function_tmux_200x50.txt", &masked(&s));
    t.resize(80, 24);
    t.wait_for(10, "the view at 80x24", |s| s.lines().count() <= 24);

    // The plan is nested --depth 2's, step_mid's call sites held back:
    // what --dry-run lists, but for the probes of the sites in step_mid
    // (node [1], the first call site of explore_step).
    let (planned, in_mid) = dry_run_depth_2(pid);
    assert_eq!(in_mid, 2, "step_mid's two call sites");
    assert_eq!(probes_in_place(&s), planned - in_mid, "{s}");

    // Into step_mid: its call sites are attached while the run goes on;
    // step_mid's own count goes on from what it was.
    t.keys(&["Down", "Enter"]);
    let s = t.wait_for(20, "step_mid's sites attached", |s| {
        s.contains("explore_step > step_mid") && s.contains("2 call sites attached in")
    });
    assert_eq!(probes_in_place(&s), planned, "{s}");
    assert!(
        s.contains(&format!(" step_mid  calls {calls}  avg")),
        "counted on:\n{s}"
    );
    round(&mut fx, calls);
    let s = t.wait_for(10, "step_mid's count grown", |s| {
        s.contains(&format!(" step_mid  calls {}  avg", 2 * calls))
    });
    // Its sites count from the drill on: two calls in each of the last
    // round's, half a call per call of the whole count.
    for n in 0..2 {
        let row = site_row(&s, "step_leaf();", n);
        assert_eq!(row[1], "0.50", "{s}");
        assert_eq!(row[row.len() - 3], "[from", "{s}");
    }
    assert!(s.contains("--depth 2"), "{s}");

    // Esc: back to explore_step, whose counts went on.
    t.keys(&["Escape"]);
    let s = t.wait_for(10, "explore_step again", |s| {
        s.contains(&format!(" explore_step  calls {}  avg", 2 * calls))
            && !s.contains("explore_step > step_mid")
    });
    assert_eq!(site_row(&s, "step_mid();", 0)[1], "1.00", "{s}");

    // w: the tree as tachy nested --json prints it, step_mid broken down.
    let (_, v) = written(&t, &dir);
    let root = &v["roots"][0];
    assert_eq!(root["name"], "explore_step", "{v}");
    assert_eq!(root["count"], 2 * calls, "{v}");
    let kids = root["children"].as_array().expect("children");
    let counts: Vec<(&str, u64)> = kids
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap_or(""),
                k["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let all = 2 * calls;
    assert_eq!(
        counts,
        [
            ("step_mid", all),
            ("step_leaf", all),
            ("step_leaf", all),
            ("step_leaf", all)
        ],
        "{v}"
    );
    let under: Vec<u64> = kids[0]["children"]
        .as_array()
        .expect("step_mid's sites")
        .iter()
        .map(|k| k["count"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(under, [calls, calls], "{v}");
    // The same fields at every node as tachy nested --json prints for the
    // same command (its second line), over a round of its own.
    let pid_s = pid.to_string();
    let mut nested = Tachy::start(
        &[
            "nested",
            "--json",
            "--depth",
            "2",
            "-p",
            &pid_s,
            "explore_step",
        ],
        &[],
    );
    nested.wait_for_header(true);
    round(&mut fx, calls);
    nested.signal(libc::SIGINT);
    let n = nested.finish(Duration::from_secs(20)).success_report();
    assert_eq!(shape(&v["roots"]), shape(&n["roots"]), "{v}\n{n}");

    // Those two count from a later moment: listed as late.
    let late = v["late"].as_array().expect("late");
    assert_eq!(late.len(), 2, "{v}");
    assert!(
        late.iter().all(|l| l["name"] == "step_leaf"
            && l["level"] == 2
            && l["from_s"].as_f64() > Some(0.0)),
        "{v}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    hang_up(&t, explorer, &mut fx);
}

/// `w`, then the file it wrote in `dir`: the screen that says so, and
/// the file's JSON.
fn written(t: &Tmux, dir: &Path) -> (String, serde_json::Value) {
    t.keys(&["w"]);
    let s = t.wait_for(10, "the file written", |s| {
        s.contains("wrote tachy-explore-")
    });
    let name = s
        .split_whitespace()
        .find(|w| w.starts_with("tachy-explore-"))
        .unwrap_or_default();
    let path = dir.join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}\n{s}", path.display()));
    let v = serde_json::from_str(&text).expect("JSON");
    (s, v)
}

/// The paused fixture (`calls` a round), and `tachy explore -p PID ARGS`
/// on it at 80x24, run in a directory of its own (where `w` writes),
/// showing `func`'s view: the fixture, the directory, the session and
/// the explorer's pid.
fn explore_paused(calls: u64, args: &str, func: &str) -> (Fixture, std::path::PathBuf, Tmux, i32) {
    let fx = paused(calls);
    let pid = fx.pid();
    let dir = std::env::temp_dir().join(format!("tachy-explore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let t = Tmux::explore(&format!("-p {pid} {args}"), &dir, 80, 24, None);
    let explorer = t.pane_pid();
    let first = format!("{func}  calls 0");
    t.wait_for(20, "the first report", |s| s.contains(&first));
    (fx, dir, t, explorer)
}

/// [`explore_paused`] on `func`'s view, and a first round, counted.
fn first_round(calls: u64, func: &str) -> (Fixture, std::path::PathBuf, Tmux, i32) {
    let (mut fx, dir, t, explorer) = explore_paused(calls, func, &format!(" {func}"));
    round(&mut fx, calls);
    let counted = format!(" {func}  calls {calls}  avg");
    t.wait_for(10, "the first round", |s| s.contains(&counted));
    (fx, dir, t, explorer)
}

/// The fields of a JSON value, object by object, without their values.
fn shape(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), shape(x))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        _ => Value::Null,
    }
}

/// The number of probes the function view's header says are in place.
fn probes_in_place(screen: &str) -> usize {
    screen
        .lines()
        .find_map(|l| {
            l.split(" probes in place")
                .next()
                .filter(|_| l.contains(" probes in place"))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no probes in place:\n{screen}"))
}

/// `tachy nested ARGS --dry-run`: the number of its probes, and its
/// listing.
fn dry_run(args: &[&str]) -> (usize, String) {
    let out = Command::new(tachy())
        .arg("nested")
        .args(args)
        .arg("--dry-run")
        .output()
        .expect("tachy runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    let probes = text
        .lines()
        .next()
        .and_then(|l| l.split(" function(s), ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no probe count:\n{text}"));
    (probes, text)
}

/// `tachy nested --dry-run -p PID explore_step --depth 2`: its probes,
/// and those of the call sites in node [1] (step_mid).
fn dry_run_depth_2(pid: u32) -> (usize, usize) {
    let pid = pid.to_string();
    let (probes, text) = dry_run(&["--depth", "2", "-p", &pid, "explore_step"]);
    let in_mid = text
        .lines()
        .filter(|l| l.trim_start().starts_with("site <") && l.contains(" in [1]"))
        .count();
    (probes, in_mid)
}

/// The fixture with its spinning and blocking threads paused, so that
/// only the calls of each SIGUSR2 round are counted.
fn paused(calls: u64) -> Fixture {
    let mut fx = Fixture::spawn("explore", &[&calls.to_string()]);
    fx.go();
    libc_kill(fx.pid(), libc::SIGUSR1);
    assert_eq!(
        fx.read_line(Duration::from_secs(10)).as_deref(),
        Some("paused")
    );
    fx
}

/// One SIGUSR2 round of the fixture: `calls` calls of each function.
fn round(fx: &mut Fixture, calls: u64) {
    libc_kill(fx.pid(), libc::SIGUSR2);
    let said = format!("count spin_hot {calls}");
    assert_eq!(
        fx.read_line(Duration::from_secs(20)).as_deref(),
        Some(said.as_str())
    );
}

/// `tachy latency -p PID step_arg ARGS --json`, attached.
fn latency(pid: u32, args: &[&str]) -> Tachy {
    let pid = pid.to_string();
    let mut a = vec!["latency", "-p", &pid, "step_arg", "--json"];
    a.extend_from_slice(args);
    let mut t = Tachy::start(&a, &[]);
    t.wait_for_header(true);
    t
}

/// The count of step_arg in the report `latency` prints when stopped.
fn latency_count(t: Tachy) -> u64 {
    t.signal(libc::SIGINT);
    let rep = t.finish(Duration::from_secs(20)).success_report();
    common::report::num(common::report::func(&rep, "step_arg"), "count")
}

/// The function view's second line: the equivalent `tachy nested`.
fn command_of(screen: &str) -> &str {
    screen.lines().nth(1).unwrap_or_default()
}

#[test]
fn pick_filter_slower_than_and_hist_count_as_latency_does() {
    let _g = needs_root!();
    let calls = 40;
    let mut fx = paused(calls);
    let pid = fx.pid();
    let dir = std::env::temp_dir();
    let t = Tmux::explore(&format!("-p {pid}"), &dir, 200, 30, None);
    let explorer = t.pane_pid();
    // `>`: step_arg by fuzzy search, then its view.
    t.wait_for(20, "the profile", |s| s.contains("where time goes"));
    t.keys(&[">"]);
    t.type_text("steparg");
    let s = t.wait_for(20, "the matches", |s| {
        s.contains("functions match") && s.contains("function> steparg_")
    });
    let first = s
        .lines()
        .find(|l| l.starts_with("> "))
        .unwrap_or_else(|| panic!("no match selected:\n{s}"));
    assert!(first.contains("step_arg"), "{s}");
    t.keys(&["Enter"]);
    t.wait_for(20, "step_arg's view", |s| s.contains(" step_arg  calls 0"));

    // f: a bad expression says why on the status line; nothing changes.
    t.keys(&["f"]);
    t.type_text("n <> 1");
    t.keys(&["Enter"]);
    let s = t.wait_for(10, "the filter's error", |s| s.contains("\"n <> 1\""));
    assert!(!command_of(&s).contains("--filter"), "{s}");
    // A name no parameter has is refused when planned.
    t.keys(&["f"]);
    t.type_text("nope == 1");
    t.keys(&["Enter"]);
    let s = t.wait_for(10, "the unknown name", |s| s.contains("nope"));
    assert!(!command_of(&s).contains("--filter"), "{s}");

    // As --filter: the calls with n < 10 are counted.
    t.keys(&["f"]);
    t.type_text("n < 10");
    t.keys(&["Enter"]);
    t.wait_for(20, "the filtered view", |s| {
        s.contains("--filter 'n < 10'") && s.contains(" step_arg  calls 0")
    });
    let lat = latency(pid, &["--filter", "n < 10"]);
    round(&mut fx, calls);
    let s = t.wait_for(10, "the filtered count", |s| {
        s.contains(" step_arg  calls 10  avg")
    });
    assert_eq!(latency_count(lat), 10, "{s}");

    // s: only the calls over 1 ms (n a multiple of 4) of those.
    t.keys(&["s"]);
    t.type_text("1ms");
    t.keys(&["Enter"]);
    t.wait_for(20, "the slow calls' view", |s| {
        s.contains("filter n < 10, slower than 1ms: counters restarted")
            && s.contains(" step_arg  calls 0")
    });
    let lat = latency(pid, &["--filter", "n < 10", "--slower-than", "1ms"]);
    round(&mut fx, calls);
    // n = 0, 4, 8: unless the machine is so busy that a short call took
    // over 1 ms; the explorer counts what latency counts either way.
    let slow = latency_count(lat);
    assert!((3..=10).contains(&slow), "{slow} slow calls");
    t.wait_for(10, "the slow calls' count", |s| {
        s.contains(&format!(" step_arg  calls {slow}  avg"))
    });

    // h: the histogram of the function's counted calls, as --hist prints.
    t.keys(&["h"]);
    let s = t.wait_for(10, "the histogram", |s| {
        s.contains(&format!("histogram of step_arg: {slow} calls timed"))
    });
    assert!(s.contains("nsecs") && s.contains("distribution"), "{s}");
    let in_table: u64 = s
        .lines()
        .filter(|l| l.contains("->"))
        .filter_map(|l| {
            l.split(':')
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(in_table, slow, "{s}");
    t.keys(&["Escape"]);
    t.wait_for(10, "the source again", |s| s.contains("LINE"));

    hang_up(&t, explorer, &mut fx);
}

fn libc_kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory effects; the pid is a process this test
    // started.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// The rows of the `b` table on the screen: (label, count, avg, p99),
/// avg and p99 as the screen writes them (`1.2 us`).
fn group_rows(screen: &str) -> Vec<(String, u64, String, String)> {
    let mut out = Vec::new();
    let mut in_table = false;
    for l in screen.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.first() == Some(&"COUNT") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        // count, avg (number unit), p99 (number unit), label.
        let (Some(n), true) = (w.first().and_then(|n| n.parse().ok()), w.len() > 5) else {
            break;
        };
        out.push((w[5..].join(" "), n, w[1..3].join(" "), w[3..5].join(" ")));
    }
    out
}

/// The counts of the screen's `b` table by label, sorted.
fn group_counts(screen: &str) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = group_rows(screen)
        .into_iter()
        .map(|(l, n, _, _)| (l, n))
        .collect();
    v.sort();
    v
}

/// `tachy nested -p PID by_target --json --by KEY`, attached.
fn nested_by(pid: u32, key: &str) -> Tachy {
    let pid = pid.to_string();
    let mut t = Tachy::start(
        &["nested", "--json", "--by", key, "-p", &pid, "by_target"],
        &[],
    );
    t.wait_for_header(true);
    t
}

/// The groups of the root of a `tachy nested --by --json` report, as the
/// screen labels them, with their counts, sorted.
fn nested_groups(t: Tachy) -> Vec<(String, u64)> {
    t.signal(libc::SIGINT);
    let rep = t.finish(Duration::from_secs(20)).success_report();
    let root = &rep["roots"][0];
    let key = root["by"][0].as_str().expect("a --by key").to_string();
    let mut v: Vec<(String, u64)> = root["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            let v = &g[&key];
            let label = match key.as_str() {
                "caller" => format!(
                    "{} at {}",
                    v["function"].as_str().unwrap_or("?"),
                    v["location"].as_str().unwrap_or("?")
                ),
                "tid" => format!("tid {} ({})", v["tid"], v["comm"].as_str().unwrap_or("?")),
                _ => format!("{key} {}", v["value"]),
            };
            (label, g["count"].as_u64().unwrap_or(0))
        })
        .collect();
    v.sort();
    v
}

/// `b` groups the traced function's calls by caller, then thread, its
/// named parameter, its return value, then not at all; each table counts
/// what `tachy nested --by KEY --json` counts over the same round: the
/// fixture's by_target is called 5, 3 and 2 times per call of
/// explore_calls from three callers, with v = 1, 2 and 3.
#[test]
fn b_groups_by_caller_thread_argument_and_return_as_nested_by() {
    let _g = needs_root!();
    let calls = 10;
    let (mut fx, dir, t, explorer) = explore_paused(calls, "by_target", " by_target");
    let pid = fx.pid();
    let mut total = 0;
    for key in ["caller", "tid", "v", "retval"] {
        t.keys(&["b"]);
        let title = format!("calls of by_target by {key}");
        t.wait_for(20, &title, |s| {
            s.contains(&title)
                && command_of(s).contains(&format!("--by {key}"))
                && s.contains(" by_target  calls 0")
        });
        let nested = nested_by(pid, key);
        round(&mut fx, calls);
        total = 10 * calls;
        let s = t.wait_for(10, "the groups counted", |s| {
            s.contains(&format!(" by_target  calls {total}  avg"))
                && group_rows(s).iter().map(|r| r.1).sum::<u64>() == total
        });
        let got = group_counts(&s);
        assert_eq!(got, nested_groups(nested), "{s}");
        let mut counts: Vec<u64> = got.iter().map(|g| g.1).collect();
        counts.sort_unstable();
        match key {
            "tid" => assert_eq!(counts, [total], "{s}"),
            _ => assert_eq!(counts, [2 * calls, 3 * calls, 5 * calls], "{s}"),
        }
        if key == "caller" {
            for f in [
                "by_one at explore.c:",
                "by_two at explore.c:",
                "by_three at",
            ] {
                assert!(got.iter().any(|g| g.0.starts_with(f)), "{f}\n{s}");
            }
            // The groups by total time: their order, with times masked,
            // is the machine's; the golden has them by name.
            let m = masked(&s);
            let mut rows: Vec<&str> = m.lines().filter(|l| l.starts_with("# # # ")).collect();
            rows.sort_unstable();
            let mut rows = rows.into_iter();
            let m: String = m
                .lines()
                .map(|l| match l.starts_with("# # # ") {
                    true => rows.next().unwrap_or(l),
                    false => l,
                })
                .flat_map(|l| [l, "\n"])
                .collect();
            golden("by_tmux_80x24.txt", &m);
            // w: the tree with the groups at its root, as nested --by
            // --json has them; the screen's numbers are the file's.
            let (s, v) = written(&t, &dir);
            let root = &v["roots"][0];
            assert_eq!(root["by"], serde_json::json!(["caller"]), "{v}");
            for g in root["groups"].as_array().expect("groups") {
                let label = format!(
                    "{} at {}",
                    g["caller"]["function"].as_str().unwrap_or("?"),
                    g["caller"]["location"].as_str().unwrap_or("?")
                );
                let row = group_rows(&s)
                    .into_iter()
                    .find(|r| r.0 == label)
                    .unwrap_or_else(|| panic!("{label} not on the screen:\n{s}"));
                let human = |k: &serde_json::Value| {
                    tachy::report::fmt::human(k.as_u64().unwrap_or(0) as f64)
                };
                assert_eq!(row.1, g["count"].as_u64().unwrap_or(0), "{label}\n{s}");
                assert_eq!(row.2, human(&g["avg_ns"]), "{label}\n{s}");
                assert_eq!(row.3, human(&g["percentiles_ns"]["p99"]), "{label}\n{s}");
            }
        }
    }
    // After retval, not grouped: the source again.
    t.keys(&["b"]);
    let s = t.wait_for(20, "the view without --by", |s| {
        !command_of(s).contains("--by") && s.contains("LINE")
    });
    assert!(total > 0, "{s}");
    let _ = std::fs::remove_dir_all(&dir);
    hang_up(&t, explorer, &mut fx);
}

/// Moves the selection of the function view to the row holding `text`.
fn select_row(t: &Tmux, text: &str) {
    t.keys(&["Home"]);
    for _ in 0..40 {
        let s = t.screen();
        if s.lines().any(|l| l.starts_with("> ") && l.contains(text)) {
            return;
        }
        t.keys(&["Down"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no row holds {text}:\n{}", t.screen());
}

/// Enter on the row holding `text`: the screen once the breadcrumb ends
/// with `crumb` and says `sites` (e.g. "2 call sites") were attached.
fn drill(t: &Tmux, text: &str, crumb: &str, sites: &str) -> String {
    select_row(t, text);
    t.keys(&["Enter"]);
    let attached = format!("{sites} attached in");
    t.wait_for(20, &attached, |s| {
        s.contains(crumb) && s.contains(&attached)
    })
}

/// Drilling through the PLT into libc: Enter on explore_calls's line
/// that calls write() attaches the call sites of libc's write while the
/// run goes on, and write@plt's count goes on from what it was.
#[test]
fn enter_on_a_plt_call_drills_into_the_library() {
    let _g = needs_root!();
    let calls = 10;
    let (mut fx, dir, t, explorer) = first_round(calls, "explore_calls");
    select_row(&t, "write(-1");
    t.keys(&["Enter"]);
    let s = t.wait_for(20, "write's call sites attached", |s| {
        s.contains("explore_calls > write@plt") && s.contains(" call sites attached in")
    });
    assert!(
        s.contains(&format!(" write@plt  calls {calls}  avg")),
        "{s}"
    );
    // libc's source is not on disk: its lines are named from DWARF (or
    // its code is shown), in libc's own file.
    assert!(s.contains("write.c"), "{s}");
    round(&mut fx, calls);
    let s = t.wait_for(10, "write's count grown", |s| {
        s.contains(&format!(" write@plt  calls {}  avg", 2 * calls))
    });
    // Its call sites count from the drill on: once in each of the last
    // round's calls, half a call per call of the whole count.
    assert!(
        s.lines()
            .skip(5)
            .any(|l| l.split_whitespace().any(|w| w == "0.50")),
        "{s}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    hang_up(&t, explorer, &mut fx);
}

/// One round of the Go fixture's `rounds` mode: work() `2 * calls`
/// times.
fn go_round(fx: &mut Fixture, calls: u64) {
    libc_kill(fx.pid(), libc::SIGUSR2);
    let said = format!("count main.work {}", 2 * calls);
    assert_eq!(
        fx.read_line(Duration::from_secs(20)).as_deref(),
        Some(said.as_str())
    );
}

/// In a Go program, Enter on main.work's call of main.nap drills into it
/// as into a C function: its call site (time.Sleep) is attached while
/// the run goes on, main.nap's count goes on, exactly.
#[test]
fn enter_on_a_go_call_drills_into_the_go_function() {
    let _g = needs_root!();
    if common::skip_without_go() {
        return;
    }
    let calls = 10;
    let mut fx = Fixture::spawn("gowork", &["rounds", &calls.to_string()]);
    fx.go();
    assert_eq!(
        fx.read_line(Duration::from_secs(10)).as_deref(),
        Some("waiting")
    );
    let pid = fx.pid();
    let t = Tmux::explore(
        &format!("-p {pid} main.work"),
        &std::env::temp_dir(),
        80,
        24,
        None,
    );
    let explorer = t.pane_pid();
    t.wait_for(20, "main.work's view", |s| {
        s.contains(" main.work  calls 0")
    });
    go_round(&mut fx, calls);
    t.wait_for(10, "the first round", |s| {
        s.contains(&format!(" main.work  calls {}  avg", 2 * calls))
    });
    let s = drill(
        &t,
        "nap(2 * time.Millisecond)",
        "main.work > main.nap",
        "call site",
    );
    assert!(
        s.contains(&format!(" main.nap  calls {}  avg", 2 * calls)),
        "{s}"
    );
    go_round(&mut fx, calls);
    let s = t.wait_for(10, "main.nap's count grown", |s| {
        s.contains(&format!(" main.nap  calls {}  avg", 4 * calls))
    });
    // time.Sleep counts from the drill on: once in each call of the last
    // round, half a call per call of the whole count.
    assert_eq!(site_row(&s, "time.Sleep(d)", 0)[1], "0.50", "{s}");
    hang_up(&t, explorer, &mut fx);
}

/// Three levels deep: Enter on deep_top's call of deep_mid attaches
/// deep_mid's call site (planned with the view, held back until then);
/// Enter there on its call of deep_low breaks deep_low down, a level
/// deeper than the plan: the plan grows by deep_low's two call sites while
/// the run goes on, and the counts of the levels above go on from what they
/// were. Over the next round, each count grows by what `tachy nested
/// --depth 3 --json` counts over the same round, and deep_low's sites
/// count exactly its calls of deep_leaf.
#[test]
fn a_third_level_grows_the_plan_and_the_counts_above_go_on() {
    let _g = needs_root!();
    let calls = 20;
    let (mut fx, dir, t, explorer) = first_round(calls, "deep_top");
    drill(&t, "deep_mid();", "deep_top > deep_mid", "1 call site");
    round(&mut fx, calls);
    t.wait_for(10, "the second round", |s| {
        s.contains(&format!(" deep_mid  calls {}  avg", 2 * calls))
    });
    let s = drill(&t, "deep_low();", "deep_mid > deep_low", "2 call sites");
    // Counted on: deep_low since the second drill-down, one round.
    assert!(
        s.contains(&format!(" deep_low  calls {calls}  avg")),
        "counted on:\n{s}"
    );
    assert!(!s.contains("restarted"), "{s}");
    // The probes in place are those of the command the view names.
    let cmd = command_of(&s).split("  counted").next().unwrap_or_default();
    assert!(cmd.contains("--expand deep_low"), "{s}");
    let args: Vec<&str> = cmd.split_whitespace().skip(2).collect();
    let (planned, text) = dry_run(&args);
    assert_eq!(probes_in_place(&s), planned, "{s}\n{text}");

    // The next round, counted by tachy nested --depth 3 too.
    let pid_s = fx.pid().to_string();
    let mut nested = Tachy::start(
        &["nested", "--json", "--depth", "3", "-p", &pid_s, "deep_top"],
        &[],
    );
    nested.wait_for_header(true);
    round(&mut fx, calls);
    nested.signal(libc::SIGINT);
    let n = nested.finish(Duration::from_secs(20)).success_report();
    let s = t.wait_for(10, "the third round", |s| {
        s.contains(&format!(" deep_low  calls {}  avg", 2 * calls))
    });
    // deep_leaf's two sites, counted from the third drill-down: one call
    // each in each of the last round's calls of deep_low, half a call per
    // call of its whole count.
    for k in 0..2 {
        let row = site_row(&s, "deep_leaf();", k);
        assert_eq!(row[1], "0.50", "{s}");
    }
    // The last round's calls are all in a report by now.
    std::thread::sleep(Duration::from_secs(2));
    let (_, v) = written(&t, &dir);
    let chain = |v: &serde_json::Value| {
        let top = &v["roots"][0];
        let mid = &top["children"][0];
        let low = &mid["children"][0];
        let leaves: Vec<u64> = low["children"]
            .as_array()
            .map(|a| a.iter().filter_map(|k| k["count"].as_u64()).collect())
            .unwrap_or_default();
        let count = |x: &serde_json::Value| x["count"].as_u64().unwrap_or(0);
        (count(top), count(mid), count(low), leaves)
    };
    // Each grew by what tachy nested counted over the round: its every
    // call, and deep_leaf's sites counted from the round on.
    assert_eq!(chain(&n), (calls, calls, calls, vec![calls, calls]), "{n}");
    assert_eq!(
        chain(&v),
        (3 * calls, 3 * calls, 2 * calls, vec![calls, calls]),
        "{v}"
    );
    assert_eq!(shape(&v["roots"]), shape(&n["roots"]), "{v}\n{n}");
    // deep_low and its two sites count from later moments: listed as late.
    let late: Vec<(String, u64)> = v["late"]
        .as_array()
        .expect("late")
        .iter()
        .map(|l| {
            let name = l["name"].as_str().unwrap_or_default().to_string();
            (name, l["level"].as_u64().unwrap_or(0))
        })
        .collect();
    assert_eq!(
        late,
        [
            ("deep_low".to_string(), 2),
            ("deep_leaf".to_string(), 3),
            ("deep_leaf".to_string(), 3)
        ],
        "{v}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    hang_up(&t, explorer, &mut fx);
}

/// Enter on an indirect call names the callees its probe saw, with their
/// calls: by_three's loop of two calls through by_pointer (compiled as two
/// call sites on its line) reaches by_target once per call at the first,
/// from when by_three's sites were attached.
#[test]
fn enter_on_an_indirect_call_names_its_callees() {
    let _g = needs_root!();
    let calls = 10;
    let (mut fx, dir, t, explorer) = explore_paused(calls, "explore_calls", " explore_calls");
    select_row(&t, "by_three();");
    t.keys(&["Enter"]);
    t.wait_for(20, "by_three's call sites attached", |s| {
        s.contains("explore_calls > by_three") && s.contains(" call sites attached in")
    });
    round(&mut fx, calls);
    t.wait_for(10, "the round", |s| {
        s.contains(&format!(" by_three  calls {calls}  avg"))
    });
    select_row(&t, "by_pointer(3)");
    t.keys(&["Enter"]);
    let want = format!("*indirect: callees seen: by_target {calls}");
    t.wait_for(10, "the callees seen", |s| s.contains(&want));
    let _ = std::fs::remove_dir_all(&dir);
    hang_up(&t, explorer, &mut fx);
}

/// One round of the icall fixture in its wait mode: ten calls of
/// dispatch.
fn icall_round(fx: &mut Fixture) {
    libc_kill(fx.pid(), libc::SIGUSR2);
    assert_eq!(
        fx.read_line(Duration::from_secs(20)).as_deref(),
        Some("count dispatch 10")
    );
}

/// Enter on a callee seen under an indirect call drills into it: the
/// plan grows by `--expand 'dispatch->slow_b'` (the command the view
/// names, whose dry run lists the probes in place), slow_b's two calls of
/// b_part and its call of rare are attached under each of dispatch's two
/// indirect calls (six sites) and, under the call drilled from, count only the calls through
/// it to slow_b (70 a round, not the 80 slow_b makes when fast_a calls it
/// too), half a call per call of slow_b over the two rounds counted.
#[test]
fn enter_on_a_callee_of_an_indirect_call_drills_into_it() {
    let _g = needs_root!();
    let mut fx = Fixture::spawn("icall", &["10", "wait"]);
    fx.go();
    assert_eq!(
        fx.read_line(Duration::from_secs(10)).as_deref(),
        Some("count dispatch 10")
    );
    let pid = fx.pid();
    let dir = std::env::temp_dir().join(format!("tachy-explore-icall-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let t = Tmux::explore(&format!("-p {pid} dispatch"), &dir, 80, 24, None);
    let explorer = t.pane_pid();
    t.wait_for(20, "the first report", |s| s.contains("dispatch  calls 0"));
    icall_round(&mut fx);
    t.wait_for(10, "the first round", |s| {
        s.contains(" dispatch  calls 10  avg") && s.contains("-> slow_b")
    });
    select_row(&t, "-> slow_b");
    t.keys(&["Enter"]);
    let s = t.wait_for(20, "slow_b's call sites attached", |s| {
        s.contains("dispatch > *indirect -> slow_b") && s.contains("6 call sites attached in")
    });
    assert!(
        s.contains(" slow_b  calls 70 of 100 through *indirect"),
        "{s}"
    );
    let cmd = command_of(&s).split("  counted").next().unwrap_or_default();
    assert!(cmd.contains("--expand 'dispatch->slow_b'"), "{s}");
    let args: Vec<String> = cmd
        .split_whitespace()
        .skip(2)
        .map(|w| w.trim_matches('\'').to_string())
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (planned, text) = dry_run(&args);
    assert_eq!(probes_in_place(&s), planned, "{s}\n{text}");
    icall_round(&mut fx);
    let s = t.wait_for(10, "the second round", |s| {
        s.contains(" slow_b  calls 140 of 200 through *indirect")
    });
    for line in ["b_part(v);", "b_part(v + 1);"] {
        let row = site_row(&s, line, 0);
        assert_eq!(row[1], "0.50", "{s}");
    }
    // Counted since the drill: one round of slow_b's calls through the
    // register call, 7 of dispatch's 10 each.
    std::thread::sleep(Duration::from_secs(2));
    let (_, v) = written(&t, &dir);
    let site = &v["roots"][0]["children"][0];
    let kids: Vec<(String, u64, String)> = site["children"]
        .as_array()
        .expect("the callee's sites")
        .iter()
        .map(|k| {
            let f = |n: &str| k[n].as_str().unwrap_or_default().to_string();
            (f("name"), k["count"].as_u64().unwrap_or(0), f("via"))
        })
        .collect();
    let b = ("b_part".to_string(), 70, "slow_b".to_string());
    let rare = ("rare".to_string(), 10, "slow_b".to_string());
    assert_eq!(kids, [b.clone(), b, rare], "{v}");
    let _ = std::fs::remove_dir_all(&dir);
    hang_up_of(&t, explorer, &mut fx, "icall");
}
