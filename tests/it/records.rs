//! Root-run integration tests of `--record-slower-than`: a record of each
//! slow call, on the `records` and `burst` modes of the `why` fixture
//! (tests/fixtures/why.c). In `records` mode, recorded(i, &cell, 7 * i)
//! runs I times in a thread named "recorder"; the calls with i % 10 == 9
//! sleep 5 ms in part_slow(), the others spin 20 us in part_fast(), so with
//! a 2 ms threshold exactly I / 10 calls are recorded, with known
//! arguments.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::counts;
use common::run::{json_lines, Outcome, Tachy};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// part_slow sleeps 5 ms; a recorded call lasts at least that, and (at
/// SCHED_FIFO) not much more.
const SLOW_NS: u64 = 5_000_000;
const SLOW_CEILING_NS: u64 = 50_000_000;

/// Runs `tachy SUB OPTS... -- why MODE ITERATIONS`, without the go signal.
fn run_why(
    sub: &str,
    opts: &[&str],
    mode: &str,
    iterations: u32,
    envs: &[(&str, &str)],
) -> Outcome {
    let exe = common::build("why");
    let exe = exe.to_str().unwrap().to_string();
    let it = iterations.to_string();
    let mut args: Vec<&str> = vec![sub];
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", &exe, mode, &it]);
    let mut all = vec![("FIXTURE_NO_WAIT", "1")];
    all.extend_from_slice(envs);
    Tachy::start(&args, &all).finish(RUN_TIMEOUT)
}

/// What the fixture said about itself: its pid, the recorder thread's tid,
/// the address of `cell`, one in its stack, and its counts.
struct Said {
    pid: u32,
    tid: u32,
    cell: u64,
    stack: u64,
    recorded: u64,
    slow: u64,
}

fn said(out: &Outcome) -> Said {
    let text = format!("{}\n{}", out.stdout, out.stderr);
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("the fixture did not print {prefix:?}\n{out}"))
            .trim()
            .to_string()
    };
    let c = counts(&text);
    Said {
        pid: field("ready ").parse().unwrap(),
        tid: field("tid recorder ").parse().unwrap(),
        cell: u64::from_str_radix(field("ptr cell 0x").as_str(), 16).unwrap(),
        stack: u64::from_str_radix(field("ptr stack 0x").as_str(), 16).unwrap(),
        recorded: c.get("recorded").copied().unwrap_or(0),
        slow: c.get("slow").copied().unwrap_or(0),
    }
}

/// A record line of the text output, split into its fields.
#[derive(Debug)]
struct TextRecord {
    clock: String,
    pid: u32,
    tid: u32,
    comm: String,
    function: String,
    duration_ns: f64,
    /// on-CPU, blocked, runnable, with --cpu.
    cpu: Option<[f64; 3]>,
    args: Vec<(String, String)>,
    /// The indented lines below it.
    sites: Vec<String>,
}

/// "7.31 ms", "21.3 us", "900 ns", "1.20 s" in ns.
fn human_ns(num: &str, unit: &str) -> f64 {
    let n: f64 = num.parse().unwrap_or_else(|_| panic!("bad number {num:?}"));
    n * match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        u => panic!("bad unit {u:?}"),
    }
}

fn is_clock(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 15
        && b[2] == b':'
        && b[5] == b':'
        && b[8] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| [2, 5, 8].contains(&i) || c.is_ascii_digit())
}

fn text_records(stdout: &str) -> Vec<TextRecord> {
    let mut out: Vec<TextRecord> = Vec::new();
    // Whether the lines above, up to a record, are its sites.
    let mut under = false;
    for line in stdout.lines() {
        if line.starts_with("    ") && under {
            if let Some(r) = out.last_mut() {
                r.sites.push(line.trim().to_string());
            }
            continue;
        }
        under = false;
        // Fields are separated by two spaces; the function's name (first
        // part, after the thread name) may hold single ones.
        let parts: Vec<&str> = line.split("  ").collect();
        let w: Vec<&str> = parts[0].splitn(7, ' ').collect();
        if w.len() < 7 || parts.len() < 2 || !is_clock(w[0]) || w[1] != "pid" || w[3] != "tid" {
            continue;
        }
        under = true;
        let comm = w[5]
            .trim_start_matches('(')
            .trim_end_matches(')')
            .to_string();
        let value = |s: &str| {
            let (n, u) = s.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
            human_ns(n.rsplit(' ').next().unwrap(), u)
        };
        let mut cpu = None;
        let mut rest = &parts[2..];
        if rest.first().is_some_and(|p| p.starts_with("on-CPU ")) {
            cpu = Some([value(rest[0]), value(rest[1]), value(rest[2])]);
            rest = &rest[3..];
        }
        let mut args = Vec::new();
        if let Some(list) = rest.first().and_then(|p| p.strip_prefix("args ")) {
            args = list
                .split(' ')
                .map(|a| {
                    let (k, v) = a.split_once('=').unwrap_or_else(|| panic!("bad arg {a:?}"));
                    (k.to_string(), v.to_string())
                })
                .collect();
            rest = &rest[1..];
        }
        // The value returned (tests in retval.rs).
        if rest.first().is_some_and(|p| p.starts_with("ret=")) {
            rest = &rest[1..];
        }
        assert!(rest.is_empty(), "{line}");
        out.push(TextRecord {
            clock: w[0].to_string(),
            pid: w[2].parse().unwrap(),
            tid: w[4].parse().unwrap(),
            comm,
            function: w[6].to_string(),
            duration_ns: value(parts[1]),
            cpu,
            args,
            sites: Vec::new(),
        });
    }
    out
}

/// The rdi values of the slow calls among I iterations.
fn slow_indices(iterations: u64) -> BTreeSet<u64> {
    (0..iterations).filter(|i| i % 10 == 9).collect()
}

/// Seconds since the epoch now, as a float.
fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn latency_records_each_slow_call_once_with_its_fields() {
    let _g = common::needs_root!();
    let out = run_why(
        "latency",
        &["-u", "--record-slower-than", "2ms", "recorded"],
        "records",
        50,
        &[],
    );
    out.assert_success();
    let fx = said(&out);
    assert_eq!((fx.recorded, fx.slow), (50, 5), "{out}");
    let recs = text_records(&out.stdout);
    assert_eq!(recs.len(), 5, "one record per slow call\n{out}");
    let mut seen = BTreeSet::new();
    for r in &recs {
        assert_eq!((r.pid, r.tid), (fx.pid, fx.tid), "{r:?}\n{out}");
        assert_ne!(r.pid, r.tid);
        assert_eq!(r.comm, "recorder");
        assert_eq!(r.function, "recorded");
        assert!(
            (SLOW_NS as f64..SLOW_CEILING_NS as f64).contains(&r.duration_ns),
            "{r:?}\n{out}"
        );
        assert!(r.cpu.is_none());
        assert!(r.sites.is_empty());
        // recorded(long i, long *cell, long k): named by its DWARF, the
        // pointer in hex.
        let names: Vec<&str> = r.args.iter().map(|a| a.0.as_str()).collect();
        assert_eq!(names, ["i", "cell", "k"]);
        let i: u64 = r.args[0].1.parse().unwrap();
        assert_eq!(r.args[1].1, format!("{:#x}", fx.cell), "{r:?}");
        assert_eq!(r.args[2].1, (7 * i).to_string(), "{r:?}");
        seen.insert(i);
    }
    assert_eq!(seen, slow_indices(50), "{out}");
    // Records print as calls end, before the report; the report still
    // counts every call.
    let first = out.stdout.find(&recs[0].clock).unwrap();
    let report = out.stdout.find("count: 50").expect("the report");
    assert!(first < report, "{out}");
    assert!(!out.stdout.contains("lost"), "{out}");
}

#[test]
fn records_carry_wall_clock_time_of_the_call_end() {
    let _g = common::needs_root!();
    let before = now_secs();
    let out = run_why(
        "latency",
        &["--json", "--cpu", "--record-slower-than", "2ms", "recorded"],
        "records",
        30,
        &[],
    );
    let after = now_secs();
    out.assert_success();
    let fx = said(&out);
    let lines = json_lines(&out.stdout);
    let recs: Vec<&Value> = lines.iter().filter(|v| v["type"] == "record").collect();
    assert_eq!(recs.len(), 3, "{out}");
    let mut last = 0.0;
    let mut seen = BTreeSet::new();
    for r in &recs {
        let t = r["time"].as_f64().unwrap();
        assert!(
            before <= t && t <= after,
            "{t} outside [{before}, {after}]\n{out}"
        );
        // In the order the calls ended, 5 ms or more apart.
        assert!(t >= last + 0.004, "{out}");
        last = t;
        assert_eq!(r["pid"], fx.pid);
        assert_eq!(r["tid"], fx.tid);
        assert_eq!(r["comm"], "recorder");
        assert_eq!(r["function"], "recorded");
        let d = r["duration_ns"].as_u64().unwrap();
        assert!((SLOW_NS..SLOW_CEILING_NS).contains(&d), "{r}");
        let c = &r["cpu"];
        let parts = ["oncpu_ns", "blocked_ns", "runnable_ns"].map(|k| c[k].as_u64().unwrap());
        assert_eq!(parts.iter().sum::<u64>(), d, "parts add up\n{r}");
        // It sleeps 5 ms of it.
        assert!(parts[1] >= 4_000_000, "{r}");
        let args = r["args"].as_array().unwrap();
        let names: Vec<&str> = args.iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["i", "cell", "k"]);
        let i = args[0]["value"].as_u64().unwrap();
        assert_eq!(args[1]["value"], fx.cell);
        assert_eq!(args[2]["value"], 7 * i);
        assert!(r.get("sites").is_none());
        seen.insert(i);
    }
    assert_eq!(seen, slow_indices(30));
    // Then how many were lost, then the report, which stays parseable.
    let n = lines.len();
    assert_eq!(
        lines[n - 2],
        serde_json::json!({"type": "records_lost", "lost": 0})
    );
    assert_eq!(lines[n - 1]["functions"][0]["count"], 30, "{out}");
}

#[test]
fn nested_records_break_down_the_one_call() {
    let _g = common::needs_root!();
    let out = run_why(
        "nested",
        &["--json", "--record-slower-than", "2ms", "recorded"],
        "records",
        40,
        &[],
    );
    out.assert_success();
    let lines = json_lines(&out.stdout);
    let recs: Vec<&Value> = lines.iter().filter(|v| v["type"] == "record").collect();
    assert_eq!(recs.len(), 4, "{out}");
    for r in &recs {
        let d = r["duration_ns"].as_u64().unwrap();
        let sites = r["sites"].as_array().unwrap_or_else(|| panic!("{r}"));
        let names: Vec<&str> = sites.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["part_fast", "part_slow"], "{r}");
        let ns: Vec<u64> = sites
            .iter()
            .map(|s| s["total_ns"].as_u64().unwrap())
            .collect();
        for s in sites {
            assert_eq!(s["count"], 1, "{r}");
            assert_eq!(s["level"], 1, "{r}");
            assert!(s["location"].as_str().unwrap().starts_with("why.c:"), "{r}");
        }
        assert!(ns[1] >= SLOW_NS, "{r}");
        // 20 us of CPU time, at SCHED_FIFO.
        assert!((15_000..2_000_000).contains(&ns[0]), "{r}");
        assert!(ns[0] + ns[1] <= d, "the sites fit in the call\n{r}");
        assert_eq!(r["more_sites"], 0);
    }
    // The tree report still ends the output.
    assert!(lines.last().unwrap().get("roots").is_some(), "{out}");

    // The same as text: the sites under their call, indented.
    let out = run_why(
        "nested",
        &["--record-slower-than", "2ms", "recorded"],
        "records",
        20,
        &[],
    );
    out.assert_success();
    let recs = text_records(&out.stdout);
    assert_eq!(recs.len(), 2, "{out}");
    for r in &recs {
        assert_eq!(r.sites.len(), 2, "{r:?}");
        assert!(r.sites[0].starts_with("part_fast at why.c:"), "{r:?}");
        assert!(r.sites[0].ends_with("  1 call"), "{r:?}");
        assert!(r.sites[1].starts_with("part_slow at why.c:"), "{r:?}");
    }
}

#[test]
fn a_full_ring_buffer_counts_what_it_loses() {
    let _g = common::needs_root!();
    const CALLS: u32 = 20_000;
    // One page of ring buffer holds about 30 records: a burst of 20,000
    // calls, each recorded (threshold 0), overflows it.
    let out = run_why(
        "latency",
        &["--record-slower-than", "0ns", "tiny"],
        "burst",
        CALLS,
        &[("TACHY_RECORD_BUFFER", "4096")],
    );
    out.assert_success();
    let printed = text_records(&out.stdout)
        .iter()
        .filter(|r| r.function == "tiny")
        .count() as u64;
    let lost: u64 = out
        .stdout
        .lines()
        .find_map(|l| {
            l.strip_suffix(" records lost: calls ended faster than tachy could read them")
        })
        .unwrap_or_else(|| panic!("no records lost line\n{}", out.stderr))
        .parse()
        .unwrap();
    assert!(lost > 0 && printed > 0, "printed {printed}, lost {lost}");
    assert_eq!(
        printed + lost,
        u64::from(CALLS),
        "every call printed or counted lost"
    );
    assert!(
        out.stdout.contains(&format!("count: {CALLS}")),
        "{}",
        out.stderr
    );
}

#[test]
fn syscalls_are_recorded_with_their_arguments() {
    let _g = common::needs_root!();
    let out = run_why(
        "latency",
        &["--record-slower-than", "2ms", "syscall:clock_nanosleep"],
        "records",
        30,
        &[],
    );
    out.assert_success();
    let fx = said(&out);
    let recs = text_records(&out.stdout);
    assert_eq!(recs.len(), 3, "{out}");
    for r in &recs {
        assert_eq!((r.pid, r.tid), (fx.pid, fx.tid));
        assert_eq!(r.comm, "recorder");
        assert_eq!(r.function, "syscall:clock_nanosleep");
        assert!((SLOW_NS as f64..SLOW_CEILING_NS as f64).contains(&r.duration_ns));
        // clock_nanosleep(CLOCK_REALTIME, 0, &ts, ...): glibc's nanosleep.
        let args: Vec<(&str, &str)> = r
            .args
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        // Named and typed as the kernel's tracing says, where it does.
        let names: [&str; 3] = if common::syscall_formats() {
            ["which_clock", "flags", "rqtp"]
        } else {
            ["arg0", "arg1", "arg2"]
        };
        assert_eq!(&args[..2], [(names[0], "0"), (names[1], "0")], "{r:?}");
        assert_eq!(args[2].0, names[2], "{r:?}");
        // The timespec glibc passes lies in the recorder thread's stack,
        // a little below a local of its start function.
        let rqtp = u64::from_str_radix(args[2].1.trim_start_matches("0x"), 16).unwrap();
        assert!(
            rqtp < fx.stack && fx.stack - rqtp < 64 * 1024,
            "a stack address (a local at {:#x}): {r:?}",
            fx.stack
        );
    }
}

#[test]
fn bad_record_options_are_usage_errors() {
    let out = Tachy::start(&["latency", "--record-slower-than", "5", "f"], &[]).finish(RUN_TIMEOUT);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("needs a unit"), "{out}");
    let out = Tachy::start(
        &[
            "nested",
            "--folded",
            "--record-slower-than",
            "5ms",
            "f",
            "--",
            "true",
        ],
        &[],
    )
    .finish(RUN_TIMEOUT);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(
        out.stderr.contains("--record-slower-than and --folded"),
        "{out}"
    );
    let why = common::build("why");
    let out = Tachy::start(
        &[
            "latency",
            "--record-slower-than",
            "5ms",
            "tiny",
            "--",
            why.to_str().unwrap(),
            "burst",
        ],
        &[("TACHY_RECORD_BUFFER", "1000")],
    )
    .finish(RUN_TIMEOUT);
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(out.stderr.contains("TACHY_RECORD_BUFFER=1000"), "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
}

#[test]
fn a_json_file_with_records_still_merges() {
    let _g = common::needs_root!();
    let dir = std::env::temp_dir().join(format!("tachy-records-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.json");
    let path = file.to_str().unwrap();
    let out = run_why(
        "latency",
        &[
            "--json",
            "-o",
            path,
            "--record-slower-than",
            "2ms",
            "recorded",
        ],
        "records",
        20,
        &[],
    );
    out.assert_success();
    // Records go where the report goes.
    let text = std::fs::read_to_string(&file).unwrap();
    let lines = json_lines(&text);
    let types: Vec<&str> = lines
        .iter()
        .map(|v| v["type"].as_str().unwrap_or("report"))
        .collect();
    assert_eq!(
        types,
        ["record", "record", "records_lost", "report"],
        "{text}"
    );
    let merged = Tachy::start(&["merge", "--json", path], &[]).finish(RUN_TIMEOUT);
    merged.assert_success();
    assert_eq!(
        merged.single_report()["functions"][0]["count"],
        20,
        "{merged}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Records of the `args` fixture, each call recorded (threshold 0), as
/// (function, its arguments as printed) in the order the calls ended.
fn args_records(fixture: &str, funcs: &[&str], iterations: u32) -> (Vec<TextRecord>, Outcome) {
    let exe = common::build(fixture);
    let it = iterations.to_string();
    let mut args = vec!["latency", "--record-slower-than", "0ns"];
    args.extend_from_slice(funcs);
    args.extend_from_slice(&["--", exe.to_str().unwrap(), &it]);
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT);
    out.assert_success();
    (text_records(&out.stdout), out)
}

/// The printed arguments of each record of `function` (a prefix of the
/// name as printed), in order.
fn args_of(recs: &[TextRecord], function: &str) -> Vec<Vec<(String, String)>> {
    recs.iter()
        .filter(|r| r.function.starts_with(function))
        .map(|r| r.args.clone())
        .collect()
}

fn pairs(list: &[(&str, String)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Every call of the `args` fixture gets v = i % 10: each record shows
/// the function's own integer and pointer parameters by name, as many as
/// it has, with their exact values; a clone's as its DWARF places them (a
/// dropped `this` left out, a folded constant shown); floating-point and
/// struct parameters skipped.
#[test]
fn records_name_each_functions_own_parameters() {
    let _g = common::needs_root!();
    const N: u32 = 20;
    let (recs, out) = args_records(
        "args",
        &[
            "pick",
            "Store::get",
            "Table::scan",
            "scaled",
            "mixed",
            "by_point",
            "narrow",
        ],
        N,
    );
    let v = |i: u32| i64::from(i % 10);
    let expect = |f: &dyn Fn(i64) -> Vec<(&'static str, String)>| -> Vec<Vec<(String, String)>> {
        (0..N).map(|i| pairs(&f(v(i)))).collect()
    };
    // Store::get's `this` is a heap address, the same in every call.
    let get = args_of(&recs, "Store::get");
    assert_eq!(get.len(), N as usize, "{out}");
    let this = get[0][0].1.clone();
    assert!(this.starts_with("0x"), "{out}");
    assert_eq!(
        get,
        expect(&|v| vec![
            ("this", this.clone()),
            ("key", v.to_string()),
            ("limit", (v * 1000).to_string())
        ]),
        "{out}"
    );
    // The clone dropped `this`: key is in rdi.
    assert_eq!(
        args_of(&recs, "(anonymous namespace)::Table::scan"),
        expect(&|v| vec![("key", v.to_string())]),
        "{out}"
    );
    // .constprop: factor is 3 in every call.
    assert_eq!(
        args_of(&recs, "(anonymous namespace)::scaled"),
        expect(&|v| vec![("key", v.to_string()), ("factor", "3".into())]),
        "{out}"
    );
    assert_eq!(
        args_of(&recs, "mixed"),
        expect(&|v| vec![("k", v.to_string())]),
        "{out}"
    );
    assert_eq!(
        args_of(&recs, "by_point"),
        expect(&|v| vec![("k", v.to_string())]),
        "{out}"
    );
    // An int's sign from its low 32 bits.
    assert_eq!(
        args_of(&recs, "narrow"),
        expect(&|v| vec![("n", (-v).to_string())]),
        "{out}"
    );
    // pick adds v into rsi before its cheaper entry probe: records move
    // the probe to the first instruction, so w is the caller's 100 * v.
    let pick = args_of(&recs, "pick");
    assert_eq!(pick.len(), N as usize, "{out}");
    for (i, a) in pick.iter().enumerate() {
        let v = v(i as u32);
        assert_eq!(a.len(), 3, "{a:?}");
        assert_eq!(a[0], ("v".into(), v.to_string()), "{out}");
        assert_eq!(a[1], ("w".into(), (100 * v).to_string()), "{out}");
        assert_eq!(a[2].0, "name");
        assert!(a[2].1.starts_with("0x"), "{a:?}");
    }
    // names[i & 1]: two string literals, alternating.
    assert_ne!(pick[0][2].1, pick[1][2].1);
    assert_eq!(pick[0][2].1, pick[2][2].1);
}

/// Without DWARF a record shows the first three argument registers.
#[test]
fn records_without_dwarf_show_three_registers() {
    let _g = common::needs_root!();
    const N: u32 = 10;
    let (recs, out) = args_records("args_nodebug", &["pick"], N);
    let pick = args_of(&recs, "pick");
    assert_eq!(pick.len(), N as usize, "{out}");
    for (i, a) in pick.iter().enumerate() {
        let names: Vec<&str> = a.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["arg0", "arg1", "arg2"], "{out}");
        // pick writes rsi before its cheaper entry probe: the probe moves
        // to the first instruction for the registers shown.
        let v = i % 10;
        assert_eq!(a[0].1, v.to_string(), "{out}");
        assert_eq!(a[1].1, (100 * v).to_string(), "{out}");
        assert!(a[2].1.starts_with("0x"), "{a:?}");
    }
}
