//! Fault injection: what happens to the traced process and to tachy when
//! things go wrong on either side. tachy is SIGKILLed while its probes are
//! hot, gets two Ctrl-Cs at once, or SIGUSR1s; the target crashes, execs,
//! longjmps out of traced frames, recurses deeper than tachy's per-thread
//! frame stack, or starts and stops many threads. Every outcome is exact.
//!
//! The fixture is `tests/fixtures/faults.c` (modes documented there). Every
//! test takes the `common::serial()` lock first and is skipped (with a
//! message) when not run as root.

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::run::{Outcome, Tachy};
use common::{counts, Fixture};
use serde_json::Value;

/// How long a tachy run may take before the test gives up on it.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the kernel may take to take a dead tachy's breakpoints out.
const DETACH_TIMEOUT: Duration = Duration::from_secs(2);
/// x86 `int3`, the byte a uprobe puts in the traced process's text.
const INT3: u8 = 0xcc;
/// tachy's per-thread frame stack (TACHY_MAX_DEPTH in src/bpf/tachy.h).
const MAX_DEPTH: u64 = 64;

// ---------------------------------------------------------------------------
// Running tachy
// ---------------------------------------------------------------------------

/// Runs `tachy latency --json FUNCS... -- faults FX_ARGS...` to completion.
fn run_cmd(funcs: &[&str], fx_args: &[&str]) -> Outcome {
    let exe = common::build("faults");
    let exe = exe.to_str().unwrap().to_string();
    let mut args: Vec<&str> = vec!["latency", "--json"];
    args.extend_from_slice(funcs);
    args.push("--");
    args.push(&exe);
    args.extend_from_slice(fx_args);
    Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT)
}

/// Starts `tachy latency --json -p PID FUNCS...` and waits for its header.
fn attach(pid: u32, funcs: &[&str]) -> Tachy {
    let pid = pid.to_string();
    let mut args: Vec<&str> = vec!["latency", "--json", "-p", &pid];
    args.extend_from_slice(funcs);
    let mut t = Tachy::start(&args, &[]);
    t.wait_for_header(true);
    t
}

// ---------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------

/// The one function of the report named exactly `name`.
fn func<'a>(rep: &'a Value, name: &str) -> &'a Value {
    let all = rep["functions"]
        .as_array()
        .unwrap_or_else(|| panic!("no functions array in {rep}"));
    let hits: Vec<&Value> = all.iter().filter(|f| f["name"] == name).collect();
    assert_eq!(hits.len(), 1, "expected one function {name:?} in:\n{rep:#}");
    hits[0]
}

fn num(f: &Value, key: &str) -> u64 {
    f[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number in {f}"))
}

/// (count, unwound, overflow, filtered) of one function.
fn tally(rep: &Value, name: &str) -> (u64, u64, u64, u64) {
    let f = func(rep, name);
    (
        num(f, "count"),
        num(f, "unwound"),
        num(f, "overflow"),
        num(f, "filtered"),
    )
}

// ---------------------------------------------------------------------------
// The target's memory
// ---------------------------------------------------------------------------

/// Where tachy puts the entry probe of `func` in `exe`: the ELF address of
/// the function plus the entry offset, from `tachy list`.
fn entry_probe_vaddr(exe: &Path, func: &str) -> u64 {
    let out = Command::new(common::tachy())
        .args(["list", exe.to_str().unwrap(), func])
        .output()
        .expect("tachy list runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tachy list failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("address "))
        .unwrap_or_else(|| panic!("no address line in:\n{text}"));
    let hex = |s: &str| {
        u64::from_str_radix(s.trim_start_matches("0x"), 16)
            .unwrap_or_else(|e| panic!("bad hex {s:?} in {line:?}: {e}"))
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let addr = hex(words[1]);
    let entry = words
        .iter()
        .position(|w| *w == "entry")
        .unwrap_or_else(|| panic!("no entry in {line:?}"));
    let at = match (words.get(entry + 1), words.get(entry + 2)) {
        (Some(&"at"), Some(off)) => hex(off.trim_start_matches('+')),
        _ => 0,
    };
    addr + at
}

/// One line of /proc/PID/maps.
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
}

fn maps(pid: u32) -> Vec<Mapping> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(6, ' ').collect();
            let (s, e) = f[0].split_once('-').unwrap();
            Mapping {
                start: u64::from_str_radix(s, 16).unwrap(),
                end: u64::from_str_radix(e, 16).unwrap(),
                offset: u64::from_str_radix(f[2], 16).unwrap(),
                path: f.get(5).map_or("", |p| p.trim_start()).to_string(),
            }
        })
        .collect()
}

/// A place in the target's text: its runtime address, and the executable
/// and file offset that back it.
struct TextSpot {
    pid: u32,
    runtime: u64,
    file: PathBuf,
    file_offset: u64,
}

impl TextSpot {
    /// The entry probe of `func` in the executable of process `pid`
    /// (`exe`): load base (start of the executable's first mapping with
    /// file offset 0) + ELF address + entry offset.
    fn entry_probe(pid: u32, exe: &Path, func: &str) -> TextSpot {
        let vaddr = entry_probe_vaddr(exe, func);
        let exe_path = std::fs::read_link(format!("/proc/{pid}/exe"))
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let maps = maps(pid);
        let base = maps
            .iter()
            .find(|m| m.path == exe_path && m.offset == 0)
            .unwrap_or_else(|| panic!("no offset-0 mapping of {exe_path} in process {pid}"))
            .start;
        let runtime = base + vaddr;
        let m = maps
            .iter()
            .find(|m| m.path == exe_path && m.start <= runtime && runtime < m.end)
            .unwrap_or_else(|| panic!("{runtime:#x} is in no mapping of {exe_path}"));
        TextSpot {
            pid,
            runtime,
            file: PathBuf::from(&exe_path),
            file_offset: runtime - m.start + m.offset,
        }
    }

    /// The byte in the process's memory now.
    fn in_memory(&self) -> u8 {
        let mem = File::open(format!("/proc/{}/mem", self.pid)).unwrap();
        let mut b = [0u8; 1];
        mem.read_exact_at(&mut b, self.runtime)
            .unwrap_or_else(|e| panic!("reading {:#x} of {}: {e}", self.runtime, self.pid));
        b[0]
    }

    /// The byte in the executable file.
    fn in_file(&self) -> u8 {
        let f = File::open(&self.file).unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, self.file_offset).unwrap();
        b[0]
    }

    /// Waits up to `timeout` for the memory to hold the file's byte again.
    fn wait_restored(&self, timeout: Duration) -> Result<(), u8> {
        let deadline = Instant::now() + timeout;
        loop {
            let b = self.in_memory();
            if b == self.in_file() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(b);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

// ---------------------------------------------------------------------------
// The kernel's BPF programs
// ---------------------------------------------------------------------------

/// The BPF programs loaded in the kernel now, as (id, name), from the
/// kernel's own list (BPF_PROG_GET_NEXT_ID, BPF_PROG_GET_FD_BY_ID,
/// BPF_OBJ_GET_INFO_BY_FD). A probe's link holds its program, so a
/// program gone means its links and breakpoints are gone.
fn kernel_bpf_programs() -> Vec<(u32, String)> {
    const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
    const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    /// Offset and length of `name` in struct bpf_prog_info.
    const NAME_AT: usize = 64;
    const NAME_LEN: usize = 16;
    let bpf = |cmd: libc::c_long, attr: &mut [u32; 8]| {
        // SAFETY: attr is a zeroed union bpf_attr prefix of 32 bytes, large
        // enough for these commands' fields; the kernel reads only those.
        unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), 32u32) }
    };
    let mut names = Vec::new();
    let mut id = 0u32;
    loop {
        let mut attr = [0u32; 8];
        attr[0] = id;
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr) != 0 {
            break;
        }
        id = attr[1];
        let mut attr = [0u32; 8];
        attr[0] = id;
        let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr);
        if fd < 0 {
            continue; // gone meanwhile
        }
        let mut info = [0u8; NAME_AT + NAME_LEN];
        let mut attr = [0u32; 8];
        attr[0] = fd as u32;
        attr[1] = info.len() as u32;
        let ptr = info.as_mut_ptr() as u64;
        attr[2] = ptr as u32;
        attr[3] = (ptr >> 32) as u32;
        if bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) == 0 {
            let name = &info[NAME_AT..];
            let end = name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
            names.push((id, String::from_utf8_lossy(&name[..end]).into_owned()));
        }
        // SAFETY: fd was returned to us by the kernel just above.
        unsafe { libc::close(fd as libc::c_int) };
    }
    names
}

/// The ids of the tachy programs (any tachy's) the kernel holds.
fn tachy_programs() -> std::collections::BTreeSet<u32> {
    kernel_bpf_programs()
        .into_iter()
        .filter(|(_, n)| n.starts_with("tachy_"))
        .map(|(id, _)| id)
        .collect()
}

/// Waits up to `timeout` for the kernel to hold none of the programs
/// `ids` (it frees them after an RCU grace period); how many are left if
/// not.
fn wait_programs_gone(
    ids: &std::collections::BTreeSet<u32>,
    timeout: Duration,
) -> Result<(), usize> {
    let deadline = Instant::now() + timeout;
    loop {
        match tachy_programs().intersection(ids).count() {
            0 => return Ok(()),
            n if Instant::now() >= deadline => return Err(n),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

// ---------------------------------------------------------------------------
// The `forever` fixture
// ---------------------------------------------------------------------------

fn tick_number(line: &str) -> Option<u64> {
    line.strip_prefix("tick ")?.parse().ok()
}

/// `faults forever`, running: it has printed its first `tick` line.
fn start_forever() -> Fixture {
    let mut fx = Fixture::spawn("faults", &["forever"]);
    fx.go();
    let line = fx
        .read_line(Duration::from_secs(10))
        .expect("faults forever prints tick lines");
    assert!(tick_number(&line).is_some(), "unexpected line {line:?}");
    fx
}

/// Checks that a `forever` fixture is alive and still calling `tick`: it
/// prints a `tick N` line it had not printed when this was called.
fn assert_still_ticking(fx: &mut Fixture, what: &str) {
    assert!(fx.is_running(), "the fixture died {what}");
    // Drain what was printed so far.
    let mut last = 0;
    while let Some(line) = fx.read_line(Duration::ZERO) {
        if let Some(n) = tick_number(&line) {
            last = n;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match fx.read_line(left) {
            Some(line) if tick_number(&line).is_some_and(|n| n > last) => break,
            Some(_) => continue,
            None => panic!("the fixture stopped calling tick {what} (last line: tick {last})"),
        }
    }
    assert!(fx.is_running(), "the fixture died {what}");
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// SIGKILLed while its probes are hot, tachy runs no cleanup of its own:
/// the kernel takes the breakpoints out of the target when the links' file
/// descriptors go, and the target runs on unharmed.
#[test]
fn sigkill_while_probes_are_hot_restores_the_text() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let exe = common::build("faults");
    let mut fx = start_forever();
    let spot = TextSpot::entry_probe(fx.pid(), &exe, "tick");
    let original = spot.in_file();
    assert_ne!(
        original, INT3,
        "the file itself has int3 at tick's entry probe"
    );
    assert_eq!(spot.in_memory(), original, "breakpoint before tachy ran");

    // Other tachy runs on this machine may hold programs of their own:
    // only the ones that appear with this one are its.
    let before = tachy_programs();
    let mut t = attach(fx.pid(), &["tick"]);
    let ours: std::collections::BTreeSet<u32> =
        tachy_programs().difference(&before).copied().collect();
    assert!(
        !ours.is_empty(),
        "the kernel lists no new tachy program while it runs: {:?}",
        kernel_bpf_programs()
    );
    assert_eq!(
        spot.in_memory(),
        INT3,
        "no breakpoint at tick's entry probe ({:#x}) while tachy runs",
        spot.runtime
    );
    // The probes fire: an interim report counts calls.
    t.signal(libc::SIGUSR1);
    let rep = t.wait_for_report(1);
    assert!(num(func(&rep, "tick"), "count") > 0, "{rep:#}");

    t.signal(libc::SIGKILL);
    let out = t.finish(Duration::from_secs(5));
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out}");
    if let Err(b) = spot.wait_restored(DETACH_TIMEOUT) {
        panic!(
            "{DETACH_TIMEOUT:?} after tachy was killed, byte {b:#04x} (not the file's {original:#04x}) \
             is still at tick's entry probe {:#x}",
            spot.runtime
        );
    }
    // The kernel's view: none of tachy's programs (so none of its links)
    // is left.
    if let Err(n) = wait_programs_gone(&ours, DETACH_TIMEOUT) {
        panic!(
            "{DETACH_TIMEOUT:?} after tachy was killed, the kernel still holds {n} of its {} BPF programs",
            ours.len()
        );
    }
    assert_still_ticking(&mut fx, "after tachy was SIGKILLed");
}

/// A target that dies by a signal ends the trace like a normal exit: tachy
/// reports every call and exits 0.
#[test]
fn target_crash_ends_the_trace_with_a_full_report() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let mut fx = Fixture::spawn("faults", &["crash", "20"]);
    let t = attach(fx.pid(), &["tick"]);
    fx.go();
    let (status, fx_out) = fx.wait();
    assert_eq!(
        status.signal(),
        Some(libc::SIGSEGV),
        "the fixture should die by SIGSEGV: {status}\n{fx_out}"
    );
    assert_eq!(counts(&fx_out)["tick"], 20, "{fx_out}");
    let out = t.finish(Duration::from_secs(15));
    out.assert_success();
    let rep = out.single_report();
    assert_eq!(tally(&rep, "tick"), (20, 0, 0, 0), "{out}");
}

/// The same crash under `-- CMD`: the report is complete and tachy passes
/// the shell-style status of the death by SIGSEGV on (128 + 11).
#[test]
fn command_crash_passes_the_signal_status_on() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run_cmd(&["tick"], &["crash", "20"]);
    assert_eq!(out.status.code(), Some(128 + libc::SIGSEGV), "{out}");
    assert_eq!(counts(&out.stderr)["tick"], 20, "{out}");
    let rep = out.single_report();
    assert_eq!(tally(&rep, "tick"), (20, 0, 0, 0), "{out}");
}

/// A target that execs another program: the calls before the exec are all
/// reported, and tachy ends when the new program (same pid) exits.
#[test]
fn target_exec_ends_the_trace_when_the_new_program_exits() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let mut fx = Fixture::spawn("faults", &["exec", "20"]);
    let t = attach(fx.pid(), &["tick"]);
    fx.go();
    let (status, fx_out) = fx.wait();
    assert!(status.success(), "/bin/true after exec: {status}\n{fx_out}");
    assert_eq!(counts(&fx_out)["tick"], 20, "{fx_out}");
    let out = t.finish(Duration::from_secs(15));
    out.assert_success();
    let rep = out.single_report();
    assert_eq!(tally(&rep, "tick"), (20, 0, 0, 0), "{out}");
}

/// The same exec under `-- CMD`: tachy waits for the exec'd program and
/// passes its status (0) on.
#[test]
fn command_exec_ends_the_trace_when_the_new_program_exits() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run_cmd(&["tick"], &["exec", "20"]);
    out.assert_success();
    assert_eq!(counts(&out.stderr)["tick"], 20, "{out}");
    let rep = out.single_report();
    assert_eq!(tally(&rep, "tick"), (20, 0, 0, 0), "{out}");
}

/// 4 waves of 64 threads that each make one traced call and exit: every
/// call is timed, none is taken for abandoned.
#[test]
fn sixty_four_threads_starting_and_stopping() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run_cmd(&["work"], &["threads", "4", "64"]);
    out.assert_success();
    assert_eq!(counts(&out.stderr)["work"], 256, "{out}");
    assert!(out.stderr.lines().any(|l| l == "done"), "{out}");
    let rep = out.single_report();
    assert_eq!(tally(&rep, "work"), (256, 0, 0, 0), "{out}");
    assert!(num(func(&rep, "work"), "min_ns") >= 200_000, "{rep:#}");
}

/// deep(100) makes 101 nested calls. A thread keeps 64 open frames: the
/// outer 64 calls (deep(100) .. deep(37)) are timed, the inner 37
/// (deep(36) .. deep(0)) find the stack full and are counted as overflow
/// only. Their returns close nothing (their SP is below every open frame),
/// and nothing is taken for abandoned.
#[test]
fn recursion_deeper_than_the_frame_stack() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let (n, d) = (5u64, 100u64);
    let out = run_cmd(&["deep"], &["deep", &n.to_string(), &d.to_string()]);
    out.assert_success();
    assert_eq!(counts(&out.stderr)["deep"], n * (d + 1), "{out}");
    let rep = out.single_report();
    assert_eq!(
        tally(&rep, "deep"),
        (n * MAX_DEPTH, 0, n * (d + 1 - MAX_DEPTH), 0),
        "(count, unwound, overflow, filtered) of deep\n{out}"
    );
    assert_eq!((n * MAX_DEPTH, n * (d + 1 - MAX_DEPTH)), (320, 185));
    // Even the innermost timed call contains the 50us sleep at the bottom.
    assert!(num(func(&rep, "deep"), "min_ns") >= 50_000, "{rep:#}");
}

/// longjmp out of escape -> jumper on odd iterations: those frames are
/// counted as unwound (when the next escape enters at the same SP, and at
/// the last iteration when the thread exits), the others are timed.
#[test]
fn longjmp_out_of_traced_frames() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run_cmd(&["escape", "jumper"], &["longjmp", "10"]);
    out.assert_success();
    let printed = counts(&out.stderr);
    assert_eq!((printed["escape"], printed["jumper"]), (10, 10), "{out}");
    assert!(out.stderr.lines().any(|l| l == "done"), "{out}");
    let rep = out.single_report();
    assert_eq!(tally(&rep, "escape"), (5, 5, 0, 0), "escape\n{out}");
    assert_eq!(tally(&rep, "jumper"), (5, 5, 0, 0), "jumper\n{out}");
    assert!(num(func(&rep, "escape"), "min_ns") >= 200_000, "{rep:#}");
}

/// Two SIGINTs at once: tachy ends within 2 s, either by the first (report,
/// status 0; the two may merge into one signal) or at once by the second
/// (status 130). Either way the target runs on and its text is restored.
#[test]
fn second_ctrl_c_forces_exit() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let exe = common::build("faults");
    let mut fx = start_forever();
    let spot = TextSpot::entry_probe(fx.pid(), &exe, "tick");
    let original = spot.in_file();
    let t = attach(fx.pid(), &["tick"]);
    assert_eq!(spot.in_memory(), INT3, "no breakpoint while tachy runs");
    t.signal(libc::SIGINT);
    t.signal(libc::SIGINT);
    let sent = Instant::now();
    let (out, report_at) = t.finish_noting_report(Duration::from_secs(10));
    let took = sent.elapsed();
    // The report (when there is one) comes within ~50 ms; what can take
    // longer, on a loaded machine, is the kernel detaching the probes (the
    // closes of the link descriptors, also done by _exit).
    assert!(
        took < Duration::from_secs(2),
        "tachy took {took:?} to exit after two SIGINTs (report seen after {report_at:?})\n{out}"
    );
    assert!(
        matches!(out.status.code(), Some(0) | Some(130)),
        "exit status after two SIGINTs: {}\n{out}",
        out.status
    );
    if out.status.code() == Some(0) {
        assert_eq!(out.reports().len(), 1, "{out}");
    }
    if let Err(b) = spot.wait_restored(DETACH_TIMEOUT) {
        panic!(
            "byte {b:#04x} (not the file's {original:#04x}) still at tick's entry probe {:#x} \
             {DETACH_TIMEOUT:?} after tachy exited",
            spot.runtime
        );
    }
    assert_still_ticking(&mut fx, "after tachy got two SIGINTs");
}

/// SIGUSR1 prints an interim report of everything since the last report
/// without starting a new interval: interim counts grow, and the final
/// report (on SIGINT) covers them all.
#[test]
fn sigusr1_interim_reports_are_cumulative() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let mut fx = start_forever();
    let mut t = attach(fx.pid(), &["tick"]);
    std::thread::sleep(Duration::from_millis(500));
    t.signal(libc::SIGUSR1);
    let first = num(func(&t.wait_for_report(1), "tick"), "count");
    std::thread::sleep(Duration::from_millis(500));
    t.signal(libc::SIGUSR1);
    let second = num(func(&t.wait_for_report(2), "tick"), "count");
    t.signal(libc::SIGINT);
    let out = t.finish(Duration::from_secs(10));
    out.assert_success();
    let reps = out.reports();
    assert_eq!(
        reps.len(),
        3,
        "two interim reports and the final one\n{out}"
    );
    let last = num(func(&reps[2], "tick"), "count");
    // ~1.1 ms per tick: hundreds of calls in the first half second.
    assert!(first > 0, "first interim report counts nothing\n{out}");
    assert!(
        second >= first,
        "interim reports are not cumulative: {first} then {second}\n{out}"
    );
    assert!(
        last >= second,
        "the final report ({last}) counts fewer calls than the interim one ({second})\n{out}"
    );
    for rep in &reps {
        let (_, unwound, overflow, filtered) = tally(rep, "tick");
        assert_eq!((unwound, overflow, filtered), (0, 0, 0), "{out}");
    }
    assert_still_ticking(&mut fx, "after tachy ended");
}

/// `--follow`: a process that forks a child, which forks a grandchild, each
/// calling tick 5 times. Without --follow only the traced process counts.
#[test]
fn follow_traces_forked_processes() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run_cmd(&["--follow", "tick"], &["fork", "5"]);
    out.assert_success();
    assert_eq!(counts(&out.stderr)["all"], 15, "{out}");
    assert_eq!(tally(&out.single_report(), "tick"), (15, 0, 0, 0), "{out}");

    let out = run_cmd(&["tick"], &["fork", "5"]);
    out.assert_success();
    assert_eq!(tally(&out.single_report(), "tick"), (5, 0, 0, 0), "{out}");

    // Attached to a running process: its forks after the attach count too.
    let mut fx = Fixture::spawn("faults", &["fork", "5"]);
    let t = attach(fx.pid(), &["--follow", "tick"]);
    fx.go();
    let (status, fx_out) = fx.wait();
    assert!(status.success(), "{fx_out}");
    let out = t.finish(Duration::from_secs(15));
    out.assert_success();
    assert_eq!(tally(&out.single_report(), "tick"), (15, 0, 0, 0), "{out}");
}

/// An indirect tail jump (`jmp *%rax`) leaves the traced function for code
/// tachy cannot know: the call is timed up to the jump, and with `nested`
/// it ends the traced call, so the breakdown of every call is committed.
#[test]
fn indirect_tail_jump_ends_the_traced_call() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    const N: u64 = 6;
    let out = run_cmd(&["dispatch", "even", "odd"], &["dispatch", &N.to_string()]);
    out.assert_success();
    let fx = counts(&out.stderr);
    assert_eq!((fx["dispatch"], fx["even"], fx["odd"]), (N, N / 2, N / 2));
    let rep = out.single_report();
    let d = func(&rep, "dispatch");
    assert_eq!(tally(&rep, "dispatch"), (N, 0, 0, 0), "{rep:#}");
    assert_eq!(num(d, "indirect_tail"), N, "{d}");
    // work() sleeps 200 us before the jump.
    assert!(num(d, "min_ns") >= 200_000, "{d}");
    assert_eq!(tally(&rep, "even"), (N / 2, 0, 0, 0), "{rep:#}");
    assert_eq!(tally(&rep, "odd"), (N / 2, 0, 0, 0), "{rep:#}");

    let exe = common::build("faults");
    let args = [
        "nested",
        "--json",
        "dispatch",
        "--",
        exe.to_str().unwrap(),
        "dispatch",
        "6",
    ];
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT);
    out.assert_success();
    let rep = out.single_report();
    let root = &rep["roots"][0];
    assert_eq!(
        (num(root, "count"), num(root, "unwound")),
        (N, 0),
        "{rep:#}"
    );
    let work = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "work")
        .unwrap_or_else(|| panic!("no work site: {rep:#}"));
    assert_eq!(num(work, "count"), N, "{rep:#}");
    assert!(num(work, "total_ns") >= N * 200_000, "{rep:#}");
}
