//! Root-run integration tests of where two of tachy's rules meet: a
//! `--filter` and a thrown call, attaching to a busy process, call sites
//! that end with their parent at several depths, tail calls between traced
//! functions, and (`matrix`) each code shape of the fixtures under each
//! option that changes what is counted. Every run is checked to account
//! for each call entered exactly once: timed, filtered, left by exception
//! or not timed.
//!
//! Every test takes the probe lock first (`common::needs_root!()`) and is
//! skipped (with a message) when not run as root.

use crate::common;

use std::time::Duration;

use common::node::{children, name, num};
use common::report::func;
use common::run::{run_fixture, Outcome, Tachy};
use common::{counts, Fixture};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// `tachy SUB OPTS -- FIXTURE ARGS`, which must succeed; its one report.
fn report(sub: &str, opts: &[&str], fixture: &str, args: &[&str]) -> (Value, Outcome) {
    let out = run_fixture(sub, opts, fixture, args, &[]);
    let rep = out.success_report();
    (rep, out)
}

/// The site named `n` among the children of `v`.
fn child<'a>(v: &'a Value, n: &str) -> &'a Value {
    children(v)
        .iter()
        .find(|c| name(c) == n)
        .unwrap_or_else(|| panic!("no site {n} under {}", name(v)))
}

/// Asserts that no node of a nested tree counts a call left by exception.
fn no_unwound(v: &Value) {
    assert_eq!(
        num(v, "unwound"),
        0,
        "{} counts unwound calls: {v}",
        name(v)
    );
    for c in children(v) {
        no_unwound(c);
    }
}

// ---------------------------------------------------------------------------
// A call rejected by --filter never closes another call's frame
// ---------------------------------------------------------------------------

/// shop::risky(i) throws on odd i, and the next call comes at the same
/// stack pointer. With `--filter 'i < 4'`, i = 0 and 2 are timed, 1 and 3
/// are left by exception, and the rejected calls after them (i = 2 is
/// passed, i = 4 is not) must not close the thrown frames.
#[test]
fn filter_rejected_calls_close_no_thrown_frame() {
    let _g = common::needs_root!();
    let (iterations, threads) = (20u64, 2u64);
    let (rep, out) = report(
        "latency",
        &["--json", "--filter", "i < 4", "shop::risky(int)"],
        "cpp_o2",
        &[&iterations.to_string(), &threads.to_string()],
    );
    let f = func(&rep, "shop::risky(int)");
    assert_eq!(num(f, "count"), 2 * threads, "{out}");
    assert_eq!(num(f, "unwound"), 2 * threads, "{out}");
    assert_eq!(
        num(f, "filtered_by_args"),
        (iterations - 4) * threads,
        "{out}"
    );
    // The timed calls sleep 250 us; a thrown frame closed late would last
    // a whole iteration of the fixture (several ms).
    assert!(num(f, "min_ns") >= 250_000, "{out}");
    assert!(num(f, "max_ns") < 2_000_000, "{out}");
}

// ---------------------------------------------------------------------------
// Attaching while the target runs
// ---------------------------------------------------------------------------

/// Attaches `ATTACHES` times to a plain C program that calls outer, work
/// and quick (a leaf, timed by a uretprobe) all the time: a call in flight
/// while the probes go live is never seen to enter without its exits, so
/// no call is ever counted as left by exception.
#[test]
fn attaching_to_a_busy_program_leaves_no_call_unwound() {
    const ATTACHES: usize = 100;
    let _g = common::needs_root!();
    let fx = Fixture::spawn("seams", &["busy", "600", "100"]);
    let pid = fx.pid().to_string();
    let mut quick = 0;
    for i in 0..ATTACHES {
        let out = Tachy::start(
            &[
                "latency", "--json", "-p", &pid, "-d", "0.05", "outer", "work", "quick",
            ],
            &[],
        )
        .finish(RUN_TIMEOUT);
        let rep = out.success_report();
        for f in rep["functions"].as_array().unwrap() {
            assert_eq!(
                num(f, "unwound"),
                0,
                "attach {i}: {} counts calls left by exception\n{out}",
                f["name"]
            );
            assert_eq!(num(f, "overflow"), 0, "attach {i}\n{out}");
        }
        quick += num(func(&rep, "quick"), "count");
    }
    assert!(quick > 0, "quick was never timed");
}

// ---------------------------------------------------------------------------
// Sites that end with their parent, at any depth
// ---------------------------------------------------------------------------

/// outer's last call is work, whose last call is nanosleep: at depth 2
/// both sites end with their parent, and outer's `ret` closes both.
#[test]
fn sites_ending_with_their_parent_close_at_depth_two() {
    let _g = common::needs_root!();
    let n = 20;
    let (rep, out) = report(
        "nested",
        &["--json", "--max-overhead", "0", "outer", "--depth", "2"],
        "seams",
        &["nest", &n.to_string(), "300"],
    );
    let root = &rep["roots"][0];
    no_unwound(root);
    assert_eq!(num(root, "count"), n, "{out}");
    assert_eq!(num(child(root, "quick"), "count"), 2000 * n, "{out}");
    let work = child(root, "work");
    assert_eq!(num(work, "count"), n, "{out}");
    let sleep = child(work, "nanosleep@plt");
    assert_eq!(num(sleep, "count"), n, "{out}");
    assert!(num(sleep, "total_ns") >= n * 300_000, "{out}");
    assert!(num(work, "total_ns") >= num(sleep, "total_ns"), "{out}");
}

/// handoff calls quick, then tail-jumps to napper, which tail-jumps into
/// libc through the PLT. With ret probes, the jump into code tachy does not
/// follow ends handoff (timed up to it) and the tail site that led there;
/// with a uretprobe, handoff's return does. Every call counts, none is left
/// by exception.
#[test]
fn a_tail_site_ending_in_a_jump_to_unknown_code_closes_with_its_parent() {
    let _g = common::needs_root!();
    let n = 50;
    for fixture in ["seams_unwind", "seams"] {
        let (rep, out) = report(
            "nested",
            &["--json", "handoff"],
            fixture,
            &["handoff", &n.to_string(), "200"],
        );
        assert_eq!(counts(&out.fixture_text())["handoff"], n, "{out}");
        let root = &rep["roots"][0];
        no_unwound(root);
        assert_eq!(num(root, "count"), n, "{fixture}: {out}");
        assert_eq!(num(child(root, "quick"), "count"), n, "{fixture}: {out}");
        assert_eq!(num(child(root, "napper"), "count"), n, "{fixture}: {out}");
    }
}

/// The probe time of the site kind that ends on an emulated instruction,
/// as the cache file's sixth line holds it (`in add`), raised by `extra`
/// ns in both: its probes are said to take that much more inside the
/// site's interval, none outside it. The file is measured first into
/// `dir`, for the tachy under test.
fn raise_site_probe_time(dir: &std::path::Path, extra: u64) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let cache = dir.to_str().unwrap();
    let file = dir.join("probe-time");
    run_fixture(
        "nested",
        &["--json", "spun"],
        "seams",
        &["selfspin", "1", "10"],
        &[("TACHY_CACHE_DIR", cache)],
    )
    .success_report();
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with("busy "))
        .map(String::from)
        .collect();
    let nums: Vec<u64> = lines[5].split(' ').map(|n| n.parse().unwrap()).collect();
    lines[5] = format!("{} {}", nums[0] + extra, nums[1] + extra);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
}

/// spun calls quick 2000 times (a site that ends on the loop's `jne`, a
/// few ns each), then spins inline for `us`, as the fixture measures with
/// rdtsc while it runs. Where the probe time subtracted from each quick
/// call is more than its probes took inside it (here: made 3 us more,
/// outside unchanged), the quick calls read 0 and spun's own correction,
/// which holds the same probe time, is too large by as much: spun's self
/// time must still be its spin, not 0. The spin is long (10 ms) against
/// the drift of the probe time subtracted for the 2000 quick calls (~0.4 us
/// each under load: 0.8 ms per call of spun).
#[test]
fn self_time_survives_a_probe_time_above_the_calls_inside() {
    let _g = common::needs_root!();
    let (n, us) = (10u64, 10_000u64);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("matrix-self-time");
    raise_site_probe_time(&dir, 3000);
    for cache in [Some(dir.to_str().unwrap()), None] {
        let envs: Vec<(&str, &str)> = cache.map(|c| ("TACHY_CACHE_DIR", c)).into_iter().collect();
        let out = run_fixture(
            "nested",
            &["--json", "spun", "--depth", "2"],
            "seams",
            &["selfspin", &n.to_string(), &us.to_string()],
            &envs,
        );
        let rep = out.success_report();
        let made = counts(&out.fixture_text());
        let spin = common::tagged(&out.fixture_text(), "measured")["spin_ns"];
        let root = &rep["roots"][0];
        no_unwound(root);
        assert_eq!(num(root, "count"), n, "{out}");
        assert_eq!(made["spun"], n, "{out}");
        assert_eq!(num(child(root, "quick"), "count"), made["quick"], "{out}");
        let work = child(root, "work");
        assert_eq!(num(work, "count"), made["work"], "{out}");
        assert_eq!(num(child(work, "nanosleep@plt"), "count"), n, "{out}");
        // The spin is spin_inline's instance, a site of its own (its loop
        // leaves where its closing jump lands): its time and spun's own.
        let inline = children(root)
            .iter()
            .find(|c| name(c) == "spin_inline [inlined]")
            .map_or(0, |c| num(c, "total_ns"));
        let own = (num(root, "self_ns") + inline) / n;
        assert!(
            own >= spin * 6 / 10 && own <= spin * 3 / 2,
            "{cache:?}: spun's self time and its inlined spin {own} ns per call, its spin {spin} ns\n{out}"
        );
        let kids: u64 = children(root).iter().map(|c| num(c, "total_ns")).sum();
        assert_eq!(num(root, "self_ns") + kids, num(root, "total_ns"), "{out}");
    }
}

// ---------------------------------------------------------------------------
// Tail calls between traced functions
// ---------------------------------------------------------------------------

/// tailer spins, then tail-calls mid; with both traced (and their uretprobes
/// on), mid's entry at tailer's key is a handover: tailer lasts until mid
/// returns, and neither is left by exception.
#[test]
fn a_tail_call_between_traced_functions_times_both() {
    let _g = common::needs_root!();
    let (n, us) = (100u64, 100u64);
    let (rep, out) = report(
        "latency",
        &["--json", "top", "mid", "tailer", "leaf"],
        "seams",
        &["tail", &n.to_string(), &us.to_string()],
    );
    assert_eq!(counts(&out.fixture_text())["tailer"], n, "{out}");
    for (f, floor) in [
        ("top", 2 * us),
        ("tailer", 2 * us),
        ("mid", us),
        ("leaf", us),
    ] {
        let v = func(&rep, f);
        assert_eq!(num(v, "count"), n, "{f}\n{out}");
        assert_eq!(num(v, "unwound"), 0, "{f}\n{out}");
        // On average: the probe time subtracted from each call is an
        // estimate, which one call's may be below.
        assert!(num(v, "total_ns") >= n * floor * 1000, "{f}\n{out}");
    }
    // tailer's time runs to mid's return, inside top's.
    assert!(num(func(&rep, "tailer"), "total_ns") <= num(func(&rep, "top"), "total_ns"));
    assert!(num(func(&rep, "tailer"), "total_ns") >= num(func(&rep, "mid"), "total_ns"));
}

/// even(n) ends with `jmp odd`, odd(n) calls even(n - 1): every call is
/// timed, and with --outermost only the outermost of each.
#[test]
fn mutual_recursion_through_a_tail_call() {
    let _g = common::needs_root!();
    let n = 200u64;
    for (opts, even, odd) in [
        (&["--json", "even", "odd"][..], 26 * n, 25 * n),
        (&["--json", "--outermost", "even", "odd"][..], n, n),
    ] {
        let (rep, out) = report("latency", opts, "seams", &["evenodd", &n.to_string()]);
        for (f, c) in [("even", even), ("odd", odd)] {
            let v = func(&rep, f);
            assert_eq!(num(v, "count"), c, "{f}\n{out}");
            assert_eq!(num(v, "unwound"), 0, "{f}\n{out}");
        }
    }
}

/// leaper leaves by longjmp; then relay, entered at the same stack pointer,
/// tail-calls landing, which leaper could tail-call too. landing's entry is
/// not leaper's tail call: leaper's frame was left (unwound) and landing is
/// timed alone, with ret probes (seams_unwind) and with uretprobes (seams).
#[test]
fn a_frame_left_by_longjmp_is_not_handed_over_to_a_later_tail_callee() {
    let _g = common::needs_root!();
    let (n, us) = (50u64, 200u64);
    for fixture in ["seams_unwind", "seams"] {
        let (rep, out) = report(
            "latency",
            &["--json", "leaper", "landing"],
            fixture,
            &["jumptail", &n.to_string(), &us.to_string()],
        );
        let made = counts(&out.fixture_text());
        assert_eq!((made["leaper"], made["landing"]), (n, n), "{out}");
        let leaper = func(&rep, "leaper");
        assert_eq!(num(leaper, "count"), 0, "{fixture}: {out}");
        assert_eq!(num(leaper, "unwound"), n, "{fixture}: {out}");
        let landing = func(&rep, "landing");
        assert_eq!(num(landing, "count"), n, "{fixture}: {out}");
        assert_eq!(num(landing, "unwound"), 0, "{fixture}: {out}");
        assert!(
            num(landing, "total_ns") >= n * us * 1000,
            "{fixture}: {out}"
        );
    }
}

/// Under nested, the tail-called mid and the call of leaf inside it end
/// with tailer's site, at depths 2 and 3.
#[test]
fn nested_tail_sites_at_depth_three() {
    let _g = common::needs_root!();
    let (n, us) = (50u64, 100u64);
    let (rep, out) = report(
        "nested",
        &["--json", "top", "--depth", "3"],
        "seams",
        &["tail", &n.to_string(), &us.to_string()],
    );
    let root = &rep["roots"][0];
    no_unwound(root);
    let tailer = child(root, "tailer");
    let mid = child(tailer, "mid");
    let leaf = child(mid, "leaf");
    for v in [tailer, mid, leaf] {
        assert_eq!(num(v, "count"), n, "{}\n{out}", name(v));
    }
    assert!(num(leaf, "total_ns") >= n * us * 1000, "{out}");
    assert!(num(tailer, "total_ns") >= num(mid, "total_ns"), "{out}");
}

// ---------------------------------------------------------------------------
// The matrix: each code shape under each option that changes what is counted
// ---------------------------------------------------------------------------

/// A code shape of the fixtures, and what its run does.
struct Shape {
    name: &'static str,
    fixture: &'static str,
    args: &'static [&'static str],
    /// The arguments of a run long enough to attach to while it runs
    /// (`None`: the shape cannot run that long).
    flight: Option<&'static [&'static str]>,
    /// The functions traced; a nested shape's first one is its root.
    funcs: &'static [&'static str],
    /// `tachy nested --depth N`: the shape is call sites at depth N.
    depth: Option<&'static str>,
    /// Calls left by exception or longjmp, per function (others: none).
    unwound: &'static [(&'static str, u64)],
    /// Calls --outermost times, where it differs from the calls made.
    outermost: &'static [(&'static str, u64)],
    /// Each call of the function lasts at least this (ns) on average: 90%
    /// of what it spins or sleeps, as the probe time subtracted from each
    /// call is an estimate, and the probes of the calls inside it cost
    /// several microseconds each here.
    floor_ns: &'static [(&'static str, u64)],
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "uretprobe exit",
        fixture: "plain",
        args: &["4"],
        flight: Some(&["2000"]),
        funcs: &["slow_sum", "fast_path"],
        depth: None,
        unwound: &[],
        outermost: &[],
        floor_ns: &[("slow_sum", 270_000), ("fast_path", 180_000)],
    },
    Shape {
        name: "ret probes, throwing C++, recursion",
        fixture: "cpp_o2",
        args: &["6", "1"],
        flight: Some(&["2000", "1"]),
        funcs: &["shop::risky(int)", "shop::recurse(int)"],
        depth: None,
        unwound: &[("shop::risky(int)", 3)],
        outermost: &[("shop::recurse(int)", 6)],
        floor_ns: &[
            ("shop::risky(int)", 225_000),
            ("shop::recurse(int)", 180_000),
        ],
    },
    Shape {
        name: "tail calls",
        fixture: "seams",
        args: &["tail", "10", "300"],
        flight: Some(&["tail", "5000", "300"]),
        funcs: &["top", "tailer", "mid", "leaf"],
        depth: None,
        unwound: &[],
        outermost: &[],
        floor_ns: &[("tailer", 540_000), ("leaf", 270_000)],
    },
    Shape {
        name: "jump tables",
        fixture: "shapes",
        args: &["4"],
        flight: Some(&["5000"]),
        funcs: &["interp_switch", "interp_goto"],
        depth: None,
        unwound: &[],
        outermost: &[],
        floor_ns: &[],
    },
    Shape {
        name: "longjmp",
        fixture: "faults",
        args: &["longjmp", "10"],
        flight: Some(&["longjmp", "10000"]),
        funcs: &["escape", "jumper"],
        depth: None,
        unwound: &[("escape", 5), ("jumper", 5)],
        outermost: &[],
        floor_ns: &[],
    },
    Shape {
        name: "calls and tail calls between traced functions",
        fixture: "seams",
        args: &["evenodd", "10"],
        flight: Some(&["evenodd", "20000", "100"]),
        funcs: &["even", "odd"],
        depth: None,
        unwound: &[],
        outermost: &[("even", 10), ("odd", 10)],
        floor_ns: &[],
    },
    Shape {
        name: "sites at depth 2",
        fixture: "seams",
        args: &["nest", "10", "300"],
        flight: Some(&["nest", "1000", "300"]),
        funcs: &["outer"],
        depth: Some("2"),
        unwound: &[],
        outermost: &[],
        floor_ns: &[("outer", 270_000)],
    },
    Shape {
        name: "sites at depth 3",
        fixture: "seams",
        args: &["tail", "10", "300"],
        flight: Some(&["tail", "5000", "300"]),
        funcs: &["top"],
        depth: Some("3"),
        unwound: &[],
        outermost: &[],
        // Of the two spins in each call, the first is expanded: the probe
        // time of its ~200 clock_gettime sites, subtracted, is most of
        // what a spin bounded by the clock lasts.
        floor_ns: &[("top", 270_000)],
    },
    Shape {
        name: "Go with stack growth",
        fixture: "gowork",
        args: &["grow", "10"],
        flight: None,
        funcs: &["main.grow", "main.deep"],
        depth: None,
        unwound: &[],
        outermost: &[("main.deep", 10)],
        floor_ns: &[("main.grow", 900_000)],
    },
];

/// An option that changes what is counted, and how a cell runs with it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Opt {
    Plain,
    Filter,
    By,
    ByStack,
    ByRetval,
    Cpu,
    Record,
    SlowerThan,
    Outermost,
    Interval,
    Nested,
    MidFlight,
}

const OPTS: &[Opt] = &[
    Opt::Plain,
    Opt::Filter,
    Opt::By,
    Opt::ByStack,
    Opt::ByRetval,
    Opt::Cpu,
    Opt::Record,
    Opt::SlowerThan,
    Opt::Outermost,
    Opt::Interval,
    Opt::Nested,
    Opt::MidFlight,
];

impl Opt {
    fn args(self) -> &'static [&'static str] {
        match self {
            Opt::Plain | Opt::Nested | Opt::MidFlight => &[],
            Opt::Filter => &["--filter", "arg0 > 2"],
            Opt::By => &["--by", "tid"],
            Opt::ByStack => &["--by", "stack"],
            Opt::ByRetval => &["--by", "retval"],
            Opt::Cpu => &["--cpu"],
            Opt::Record => &["--record-slower-than", "100us"],
            Opt::SlowerThan => &["--slower-than", "150us"],
            Opt::Outermost => &["--outermost"],
            Opt::Interval => &["-i", "0.05"],
        }
    }
}

/// Combinations tachy refuses, with exit status 2: (shape, option, what
/// its message says).
const REFUSED: &[(&str, Opt, &str)] = &[
    (
        "sites at depth 2",
        Opt::Outermost,
        "unexpected argument '--outermost'",
    ),
    (
        "sites at depth 2",
        Opt::ByStack,
        "--by stack groups the calls of tachy latency",
    ),
    (
        "sites at depth 3",
        Opt::ByStack,
        "--by stack groups the calls of tachy latency",
    ),
    (
        "sites at depth 2",
        Opt::ByRetval,
        "--by retval: outer returns void",
    ),
    ("longjmp", Opt::ByRetval, "--by retval: escape returns void"),
    (
        "sites at depth 3",
        Opt::Outermost,
        "unexpected argument '--outermost'",
    ),
    (
        "Go with stack growth",
        Opt::Cpu,
        "--cpu splits time per thread, and a goroutine moves between threads",
    ),
];

/// One counter of one function (or root), summed over the run's reports.
fn sum(reports: &[Value], nested: bool, fname: &str, key: &str) -> u64 {
    reports
        .iter()
        .map(|rep| {
            let list = if nested {
                &rep["roots"]
            } else {
                &rep["functions"]
            };
            list.as_array()
                .and_then(|fs| fs.iter().find(|f| f["name"] == fname))
                .map_or(0, |f| f[key].as_u64().unwrap_or(0))
        })
        .sum()
}

/// Runs one cell; what it found wrong.
fn cell(shape: &Shape, opt: Opt) -> Vec<String> {
    let mut bad = Vec::new();
    let nested = shape.depth.is_some() || opt == Opt::Nested;
    let mut args: Vec<&str> = vec![if nested { "nested" } else { "latency" }, "--json"];
    // Go's calls group by goroutine, not by thread; a filter on Go code
    // reads its return value (its arguments are not read), at its exits.
    match opt {
        Opt::By if shape.fixture == "gowork" => args.extend(["--by", "goroutine"]),
        Opt::Filter if shape.fixture == "gowork" => args.extend(["--filter", "ret > 0"]),
        _ => args.extend_from_slice(opt.args()),
    }
    if let Some(d) = shape.depth {
        args.extend(["--depth", d]);
    }
    if nested {
        args.push(shape.funcs[0]);
    } else {
        args.extend_from_slice(shape.funcs);
    }
    let what = format!("{} x {:?}", shape.name, opt);
    let refusal = REFUSED
        .iter()
        .find(|(s, o, _)| *s == shape.name && *o == opt);
    let out = if opt == Opt::MidFlight {
        let Some(flight) = shape.flight else {
            common::skip(&format!("{what}: the shape's run is too short"));
            return bad;
        };
        let mut fx = Fixture::spawn(shape.fixture, flight);
        // Running, then attached to.
        std::thread::sleep(Duration::from_millis(50));
        fx.go();
        let pid = fx.pid().to_string();
        args.extend(["-p", &pid, "-d", "0.3"]);
        let out = Tachy::start(&args, &[]).finish(RUN_TIMEOUT);
        drop(fx);
        out
    } else {
        run_fixture(args[0], &args[1..], shape.fixture, shape.args, &[])
    };
    if let Some((_, _, msg)) = refusal {
        if out.code() != Some(2) || !out.stderr.contains(msg) {
            bad.push(format!("{what}: not refused with {msg:?}\n{out}"));
        }
        return bad;
    }
    if out.code() != Some(0) {
        bad.push(format!("{what}: failed\n{out}"));
        return bad;
    }
    let reports = out.reports();
    let made = counts(&out.fixture_text());
    let shown = if nested {
        &shape.funcs[..1]
    } else {
        shape.funcs
    };
    for &f in shown {
        let get = |k: &str| sum(&reports, nested, f, k);
        let (count, filtered, by_args, unwound, overflow) = (
            get("count"),
            get("filtered"),
            get("filtered_by_args"),
            get("unwound"),
            get("overflow"),
        );
        let accounted = count + filtered + by_args + unwound + overflow;
        let known_unwound = shape.unwound.iter().find(|u| u.0 == f).map_or(0, |u| u.1);
        if opt == Opt::MidFlight {
            // Calls made before the probes went live are not seen.
            if known_unwound == 0 && unwound != 0 {
                bad.push(format!("{what}: {f}: {unwound} unwound\n{out}"));
            }
            continue;
        }
        let entered = match (opt, shape.outermost.iter().find(|o| o.0 == f)) {
            (Opt::Outermost, Some(o)) => o.1,
            _ => made.get(f).copied().unwrap_or(0),
        };
        if accounted != entered {
            bad.push(format!(
                "{what}: {f}: entered {entered} != counted {count} + filtered {filtered} + \
                 rejected {by_args} + unwound {unwound} + not timed {overflow}\n{out}"
            ));
        }
        if opt != Opt::Filter && unwound != known_unwound {
            bad.push(format!(
                "{what}: {f}: {unwound} unwound, not {known_unwound}\n{out}"
            ));
        }
        if opt == Opt::SlowerThan && !nested && count > 0 && get("min_ns") < 150_000 {
            bad.push(format!(
                "{what}: {f}: a call under --slower-than timed\n{out}"
            ));
        }
        if matches!(opt, Opt::By | Opt::ByStack | Opt::ByRetval) {
            // Every timed call is in one group, or counted as not.
            let list = if nested { "roots" } else { "functions" };
            let grouped: u64 = reports
                .iter()
                .filter_map(|rep| rep[list].as_array())
                .flatten()
                .filter(|x| x["name"] == f)
                .map(|x| {
                    let groups = x["groups"].as_array().map_or(0, |g| {
                        g.iter().map(|g| g["count"].as_u64().unwrap_or(0)).sum()
                    });
                    let folded = ["groups_other", "groups_not_kept"]
                        .iter()
                        .map(|k| x[*k]["count"].as_u64().unwrap_or(0))
                        .sum::<u64>();
                    groups + folded + x["groups_lost"].as_u64().unwrap_or(0)
                })
                .sum();
            if grouped != count {
                bad.push(format!(
                    "{what}: {f}: {grouped} in groups of {count} timed\n{out}"
                ));
            }
        }
        let floor = shape.floor_ns.iter().find(|x| x.0 == f).map_or(0, |x| x.1);
        if count > 0 && get("total_ns") < count * floor {
            bad.push(format!("{what}: {f}: avg under {floor} ns\n{out}"));
        }
        // No call lasts longer than the whole run.
        let run_ns = out.elapsed.as_nanos() as u64;
        if count > 0 && get("total_ns") > count * run_ns {
            bad.push(format!("{what}: {f}: avg over the run's time\n{out}"));
        }
    }
    bad
}

/// Each shape under each option: every call entered is counted once, as
/// timed, filtered, rejected by --filter, left by exception or not timed.
#[test]
fn matrix() {
    let _g = common::needs_root!();
    let go = common::have_go();
    let mut bad = Vec::new();
    for shape in SHAPES {
        if shape.fixture.starts_with("gowork") && !go {
            common::skip(&format!("{}: no Go toolchain", shape.name));
            continue;
        }
        for &opt in OPTS {
            bad.extend(cell(shape, opt));
        }
    }
    assert!(
        bad.is_empty(),
        "{} cells wrong:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
