//! `tachy explore` driven in a real terminal: tmux runs it in a pseudo-
//! terminal (`new-session -d -x W -y H`), keys go in with `send-keys` and
//! the screen comes out with `capture-pane -p`. The fixture `explore` has
//! a spinning thread and a blocking one; on signals it pauses them, then
//! calls its spinning function a known number of times.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// Processes whose command line holds `needle`, other than this test.
fn processes_with(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != me)
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| {
                    let c = String::from_utf8_lossy(&c).replace('\0', " ");
                    c.contains(needle) && c.contains("latency")
                })
                .unwrap_or(false)
        })
        .collect()
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
    let t = Tmux::start(&format!("{} explore -p {pid}", tachy().display()), 100, 30);
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
    t.wait_for(20, "the probes attached", |s| s.contains("probe time"));
    libc_kill(pid, libc::SIGUSR2);
    let said = format!("count spin_hot {calls}");
    assert_eq!(
        fx.read_line(Duration::from_secs(20)).as_deref(),
        Some(said.as_str())
    );
    let s = t.wait_for(10, "the exact count", |s| {
        s.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 2 && w[0] == "calls" && w[1] == calls.to_string() && w.contains(&"in")
        })
    });
    assert!(s.contains("spin_hot"), "{s}");

    // A hang-up (the SSH session dropped) ends the explorer and its
    // tracer; the target runs on with no probe left.
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
    let until = Instant::now() + Duration::from_secs(5);
    while !processes_with(&format!("{pid}")).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_with(&format!("{pid}")), Vec::<u32>::new());
    assert_eq!(uprobes_on(&common::build("explore")), 0);
    assert!(fx.is_running(), "the target died");
}

#[test]
fn q_quits_and_restores_the_terminal() {
    let _g = needs_root!();
    let mut fx = Fixture::spawn("explore", &[]);
    fx.go();
    let pid = fx.pid();
    let t = Tmux::start(
        &format!(
            "{} explore -p {pid}; echo explore exited $?; sleep 30",
            tachy().display()
        ),
        80,
        24,
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

fn libc_kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory effects; the pid is a process this test
    // started.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}
