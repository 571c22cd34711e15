//! Fault injection: what happens to the traced process and to tachy when
//! things go wrong on either side. tachy is SIGKILLed while its probes are
//! hot, gets two Ctrl-Cs at once, or SIGUSR1s; the target crashes, execs,
//! longjmps out of traced frames, recurses deeper than tachy's per-thread
//! frame stack, or starts and stops many threads. Every outcome is exact.
//!
//! The fixture is `tests/fixtures/faults.c` (modes documented there). Every
//! test takes the probe lock first (`common::needs_root!()`) and is
//! skipped (with a message) when not run as root.

use crate::common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::run::{Outcome, Tachy};
// Each function of these reports is there once, and asserted to be.
use common::report::{num, only_func as func};
use common::{counts, Fixture};
use serde_json::Value;

/// Makes a fixture's process one that may unwind (it maps the C++
/// runtime), so that tachy plans each function by its own code.
const PRELOAD_CXX: (&str, &str) = ("LD_PRELOAD", "libstdc++.so.6");
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
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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

/// pthread_exit through a function timed by a uretprobe: exiter makes an
/// indirect call, but the process maps no C++ runtime, no Rust unwinding
/// and no exception tables outside libc, so a uretprobe times it
/// (`--dry-run` says which rule chose it). The forced unwind ends at the
/// uretprobe's trampoline as at exiter's frame: every thread ends, runs
/// its cleanup handler, and the process finishes. The calls left by
/// pthread_exit are counted as unwound.
#[test]
fn pthread_exit_through_a_uretprobe_of_a_process_that_cannot_unwind() {
    let _lock = common::needs_root!();
    let exe = common::build("faults");
    let exe = exe.to_str().unwrap();
    let plan = Tachy::start(
        &["latency", "--dry-run", "exiter", "--", exe, "pexit", "1"],
        &[("FIXTURE_NO_WAIT", "1")],
    )
    .finish(RUN_TIMEOUT);
    plan.assert_success();
    let text = format!("{}{}", plan.stdout, plan.stderr);
    assert!(
        text.contains("return: uretprobe (process cannot unwind: no C++ runtime,"),
        "{plan}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("  uretprobe ")),
        "{plan}"
    );
    let out = run_cmd(&["exiter"], &["pexit", "10"]);
    out.assert_success();
    let printed = counts(&out.stderr);
    assert_eq!((printed["exiter"], printed["cleanup"]), (10, 5), "{out}");
    assert!(out.stderr.lines().any(|l| l == "done"), "{out}");
    let rep = out.single_report();
    assert_eq!(tally(&rep, "exiter"), (5, 5, 0, 0), "exiter\n{out}");
}

/// A library that can throw, loaded after tachy chose uretprobes because
/// the process could not unwind, ends tracing with one line that names it:
/// no call entered after that is timed by a uretprobe. The process runs on
/// to its end.
#[test]
fn a_library_that_can_throw_loaded_later_ends_tracing() {
    let _lock = common::needs_root!();
    let out = run_cmd(&["tick"], &["dlopen", "200"]);
    out.assert_success();
    assert_eq!(counts(&out.stderr)["tick"], 400, "{out}");
    assert!(out.stderr.lines().any(|l| l == "done"), "{out}");
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("/libstdc++.so.6") && l.contains(", which"))
        .unwrap_or_else(|| panic!("no line names libstdc++\n{out}"));
    assert!(
        line.contains("the uretprobe of 1 function") && line.ends_with("tracing stopped"),
        "{line}"
    );
    let rep = out.single_report();
    let (count, ..) = tally(&rep, "tick");
    assert!((200..400).contains(&count), "{count}\n{out}");
}

/// Two SIGINTs at once are one stop: tachy prints its report, ends with
/// status 0 within 2 s, and the target runs on with its text restored.
#[test]
fn two_ctrl_cs_at_once_are_one_stop() {
    let _lock = common::needs_root!();
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
    // The report comes within ~50 ms; what can take longer, on a loaded
    // machine, is the kernel detaching the probes.
    assert!(
        took < Duration::from_secs(2),
        "tachy took {took:?} to exit after two SIGINTs (report seen after {report_at:?})\n{out}"
    );
    out.assert_success();
    assert_eq!(out.reports().len(), 1, "{out}");
    if let Err(b) = spot.wait_restored(DETACH_TIMEOUT) {
        panic!(
            "byte {b:#04x} (not the file's {original:#04x}) still at tick's entry probe {:#x} \
             {DETACH_TIMEOUT:?} after tachy exited",
            spot.runtime
        );
    }
    assert_still_ticking(&mut fx, "after tachy got two SIGINTs");
}

// ---------------------------------------------------------------------------
// Stopping: however many signals ask, the report is printed
// ---------------------------------------------------------------------------

/// `tachy latency --json PLAIN:slow_sum`: a cheap trace of a file that no
/// process runs (its report counts nothing, but is a report).
fn cheap_trace() -> Vec<String> {
    let spec = format!("{}:slow_sum", common::build("plain").display());
    ["latency", "--json", &spec]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Whether stderr holds the `Tracing ...` header.
fn began(stderr: &str) -> bool {
    stderr
        .lines()
        .any(|l| l.starts_with("Tracing ") && l.ends_with("Hit Ctrl-C to end."))
}

/// 50 stops by two signals sent at once once tracing began, in a process
/// group of tachy's own: SIGINT twice to tachy (25 runs), and SIGTERM to
/// tachy then SIGINT to its group, as GNU timeout and a terminal's Ctrl-C
/// do (25 runs). Every run prints its one report and exits 0.
#[test]
fn double_signals_never_lose_the_report() {
    let _lock = common::needs_root!();
    let args = cheap_trace();
    let start = Instant::now();
    for run in 0..50 {
        let mut t = Tachy::start_with(&args, &[], |c| {
            std::os::unix::process::CommandExt::process_group(c, 0);
        });
        t.wait_for_header(true);
        let (first, second, group) = if run % 2 == 0 {
            (libc::SIGINT, libc::SIGINT, false)
        } else {
            (libc::SIGTERM, libc::SIGINT, true)
        };
        t.signal(first);
        // SAFETY: kill() on tachy, or on the process group it leads.
        let r = unsafe { libc::kill(if group { -t.pid() } else { t.pid() }, second) };
        assert_eq!(r, 0, "run {run}: second signal");
        let out = t.finish(RUN_TIMEOUT);
        assert_eq!(out.code(), Some(0), "run {run}: status\n{out}");
        assert_eq!(out.reports().len(), 1, "run {run}: report lost\n{out}");
        assert!(!out.stderr.contains("abandoned"), "run {run}\n{out}");
    }
    eprintln!("50 double-signal runs took {:?}", start.elapsed());
}

/// 50 runs of `timeout T tachy ...` that began tracing: each prints its
/// report (timeout signals tachy, then its process group). A run that had
/// not begun tracing when the time was up says so, and is not counted; T
/// starts at 0.6 s and grows by 0.3 s after each such run (a loaded
/// machine starts tachy slower).
#[test]
fn timeout_never_loses_the_report() {
    let _lock = common::needs_root!();
    let args = cheap_trace();
    let start = Instant::now();
    let (mut traced, mut early) = (0, 0);
    let mut limit = 0.6f64;
    while traced < 50 {
        assert!(early < 50, "{early} runs had not begun tracing in time");
        let out = Command::new("timeout")
            .arg(format!("{limit:.1}"))
            .arg(common::tachy())
            .args(&args)
            .output()
            .expect("cannot run timeout");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let text = format!(
            "timeout {limit:.1}: status {}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}",
            out.status
        );
        assert_eq!(out.status.code(), Some(124), "{text}");
        if !began(&stderr) {
            assert_eq!(stderr, "tachy: stopped before tracing began\n", "{text}");
            early += 1;
            limit = (limit + 0.3).min(5.0);
            continue;
        }
        let reports = stdout.lines().filter(|l| l.starts_with('{')).count();
        assert_eq!(reports, 1, "run {traced}: report lost\n{text}");
        assert!(!stderr.contains("abandoned"), "{text}");
        traced += 1;
    }
    eprintln!(
        "50 timeout runs (and {early} that had not begun tracing; last limit {limit:.1} s) took {:?}",
        start.elapsed()
    );
}

/// A second stop more than a second after the first, while the report
/// cannot be printed (standard output is a full pipe), ends tachy at once
/// with 130 and says that the report was abandoned.
#[test]
fn a_late_second_stop_abandons_the_report_and_says_so() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt;
    let _lock = common::needs_root!();
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two-element array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just created, and are owned here once.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut tachy_out = File::from(write_end.try_clone().unwrap());
    let args = cheap_trace();
    let mut child = Command::new(common::tachy())
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(write_end))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start tachy");
    let err = common::run::Capture::new(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !began(&err.text()) {
        assert!(Instant::now() < deadline, "no header: {}", err.text());
        std::thread::sleep(Duration::from_millis(10));
    }
    // Fill the pipe: tachy's report cannot be written now. Through an
    // open file description of its own, so that tachy's end stays
    // blocking.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&tachy_out);
    tachy_out = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{fd}"))
        .unwrap();
    let junk = [b'x'; 4096];
    while std::io::Write::write(&mut tachy_out, &junk).is_ok() {}
    let pid = child.id() as i32;
    // SAFETY: kill() on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    std::thread::sleep(Duration::from_millis(1300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "tachy ended: {}",
        err.text()
    );
    let sent = Instant::now();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(sent.elapsed() < Duration::from_secs(5), "tachy runs on");
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(read_end);
    assert_eq!(status.code(), Some(130), "{}", err.text());
    assert!(
        err.text()
            .ends_with("tachy: stopped again before the report was printed: report abandoned\n"),
        "{}",
        err.text()
    );
}

/// A Ctrl-C later than a second after the first, while tachy waits for
/// the command after the report, stops the waiting at once: status 130.
#[test]
fn a_late_ctrl_c_stops_waiting_for_the_command() {
    let _lock = common::needs_root!();
    let started = Instant::now();
    let mut t = Tachy::start(
        &["latency", "--json", "c:nanosleep", "--", "sleep", "30"],
        &[],
    );
    t.wait_for_header(true);
    t.signal(libc::SIGINT);
    t.wait_for_line(true, Duration::from_secs(5), |l| {
        l.starts_with("tachy: waiting for sleep 30 (pid ")
    });
    let waiting = t.describe();
    let sleep_pid: i32 = waiting
        .lines()
        .find_map(|l| l.split("(pid ").nth(1)?.split(')').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no pid: {waiting}"));
    t.signal(libc::SIGINT);
    let sent = started.elapsed();
    let out = t.finish(Duration::from_secs(10));
    // SAFETY: kill() on the sleep this test started through tachy.
    unsafe { libc::kill(sleep_pid, libc::SIGKILL) };
    // (The sleep holds tachy's pipes open: the time to tachy's exit. Its
    // clock starts after `started`: a quick exit reads below `sent`.)
    assert!(
        out.elapsed.saturating_sub(sent) < Duration::from_secs(2),
        "{out}"
    );
    assert_eq!(out.code(), Some(130), "{out}");
    assert_eq!(out.reports().len(), 1, "{out}");
}

/// `make demo` stopped by `timeout` (which signals make, then the process
/// group; make passes SIGTERM on to tachy too) prints its report, 5 runs
/// of 3 s (before stops were one stop, 3 of 10 such runs lost it). The demo runs the tachy under test, with many rounds so that
/// the time is up while it traces.
#[test]
fn make_demo_under_timeout_prints_its_report() {
    let _lock = common::needs_root!();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("demo-timeout");
    std::fs::create_dir_all(dir.join("release")).unwrap();
    let bin = dir.join("release/tachy");
    let _ = std::fs::remove_file(&bin);
    std::os::unix::fs::symlink(common::tachy(), &bin).unwrap();
    let make = |timeout: Option<&str>| {
        let mut c = Command::new("timeout");
        c.arg(timeout.unwrap_or("120"))
            .arg("make")
            .arg("-s")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .arg("demo")
            // Built by the tests already: `build` does nothing.
            .arg("CARGO=true")
            .arg(format!("TARGET_DIR={}", dir.display()))
            .arg(format!(
                "DEMO_ROUNDS={}",
                if timeout.is_some() { 100_000 } else { 10 }
            ));
        c.output().expect("cannot run make")
    };
    let show = |o: &std::process::Output| {
        format!(
            "status {}\n--- stdout ---\n{}--- stderr ---\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    // Builds the demo program once, outside the time limit.
    let out = make(None);
    assert!(out.status.success(), "{}", show(&out));
    for run in 0..5 {
        let out = make(Some("3"));
        let text = show(&out);
        assert_eq!(out.status.code(), Some(124), "run {run}: {text}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report: Vec<&str> = stdout
            .lines()
            .skip_while(|l| !l.starts_with("Tracing "))
            .skip(1)
            .collect();
        assert!(
            report.iter().any(|l| l.contains("count: "))
                && report.iter().any(|l| l.contains("kv::Store::write")),
            "run {run}: report lost\n{text}"
        );
    }
}

/// SIGUSR1 prints an interim report of everything since the last report
/// without starting a new interval: interim counts grow, and the final
/// report (on SIGINT) covers them all.
#[test]
fn sigusr1_interim_reports_are_cumulative() {
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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
/// The process may unwind (libstdc++ preloaded), so dispatch's exits are
/// probed where they are, not timed by a uretprobe.
#[test]
fn indirect_tail_jump_ends_the_traced_call() {
    let _lock = common::needs_root!();
    const N: u64 = 6;
    let exe = common::build("faults");
    let out = Tachy::start(
        &[
            "latency",
            "--json",
            "dispatch",
            "even",
            "odd",
            "--",
            exe.to_str().unwrap(),
            "dispatch",
            &N.to_string(),
        ],
        &[("FIXTURE_NO_WAIT", "1"), PRELOAD_CXX],
    )
    .finish(RUN_TIMEOUT);
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

    let args = [
        "nested",
        "--json",
        "dispatch",
        "--",
        exe.to_str().unwrap(),
        "dispatch",
        "6",
    ];
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1"), PRELOAD_CXX]).finish(RUN_TIMEOUT);
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
