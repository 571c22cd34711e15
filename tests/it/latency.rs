//! Root-run integration tests of `tachy latency`: real uprobes on the fixture
//! programs of `tests/fixtures/`, whose call counts and minimum durations are
//! known by construction (see `tests/it/common/mod.rs`).
//!
//! Every test takes the probe lock first (`common::needs_root!()`) and is
//! skipped (with a message) when not run as root.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::run::{Outcome, Tachy};
// Each function of these reports is there once, and asserted to be.
use common::node::name as fname;
use common::report::{functions, num, only_func as func};
use common::{counts, expected_counts, expected_unwinds, tagged, Fixture, CPP_LOOKUP_STR};
use serde_json::Value;

/// How long a tachy run may take before the test gives up on it.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// Generous upper bound of an average duration (nominal ones are <= 1 ms).
const AVG_CEILING_NS: u64 = 5_000_000;
/// Iterations and threads of the C++ runs.
const CPP_IT: u64 = 10;
const CPP_TH: u64 = 4;

// ---------------------------------------------------------------------------
// Running tachy
// ---------------------------------------------------------------------------

/// Runs tachy to completion.
fn run(args: &[&str], envs: &[(&str, &str)]) -> Outcome {
    Tachy::start(args, envs).finish(RUN_TIMEOUT)
}

const NO_WAIT: &[(&str, &str)] = &[("FIXTURE_NO_WAIT", "1")];

/// Runs `tachy latency OPTS... -- FIXTURE ARGS...` with FIXTURE_NO_WAIT=1.
fn run_cmd(opts: &[&str], fixture: &str, fx_args: &[&str]) -> Outcome {
    let exe = common::build(fixture);
    let exe = exe.to_str().unwrap().to_string();
    let mut args: Vec<&str> = vec!["latency"];
    args.extend_from_slice(opts);
    args.push("--");
    args.push(&exe);
    args.extend_from_slice(fx_args);
    run(&args, NO_WAIT)
}

fn path_str(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn canonical(p: &Path) -> String {
    path_str(&std::fs::canonicalize(p).unwrap())
}

// ---------------------------------------------------------------------------
// JSON reports
// ---------------------------------------------------------------------------

/// Every JSON report line on stdout (fixture lines never start with `{`).
fn reports(out: &Outcome) -> Vec<Value> {
    out.stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}\n{out}"))
        })
        .collect()
}

/// The one report of a run without `-i`.
fn single_report(out: &Outcome) -> Value {
    let mut r = reports(out);
    assert_eq!(r.len(), 1, "expected exactly one JSON report\n{out}");
    let rep = r.pop().unwrap();
    assert!(rep["time"].as_f64().is_some_and(|t| t > 1e9), "{rep}");
    rep
}

/// floor(log2(v)), with 0 for 0 and 1: funclatency's slot of `v`.
fn slot(v: u64) -> usize {
    if v <= 1 {
        0
    } else {
        63 - v.leading_zeros() as usize
    }
}

/// Checks one function's JSON counters: `count` calls returned normally,
/// `unwound` were left by exception; durations at least `floor_ns`, average
/// below AVG_CEILING_NS, and every derived number consistent.
fn check_func(f: &Value, count: u64, unwound: u64, floor_ns: u64) {
    let name = fname(f);
    assert_eq!(num(f, "count"), count, "count of {name}: {f}");
    assert_eq!(num(f, "unwound"), unwound, "unwound of {name}: {f}");
    assert_eq!(num(f, "filtered"), 0, "filtered of {name}: {f}");
    assert_eq!(num(f, "overflow"), 0, "overflow of {name}: {f}");
    assert_eq!(num(f, "indirect_tail"), 0, "indirect_tail of {name}: {f}");
    check_durations(f, floor_ns, AVG_CEILING_NS);
}

/// Duration fields of a function: consistent with `count`, with the
/// minimum at least `floor_ns` and the average below `avg_ceiling_ns`.
fn check_durations(f: &Value, floor_ns: u64, avg_ceiling_ns: u64) {
    let name = fname(f);
    let count = num(f, "count");
    let total = num(f, "total_ns");
    let buckets: Vec<u64> = f["log2_buckets"]
        .as_array()
        .unwrap_or_else(|| panic!("no log2_buckets in {f}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        buckets.iter().sum::<u64>(),
        count,
        "log2_buckets of {name} do not add up to count: {f}"
    );
    assert_eq!(f["log2_unit"], "nsec", "{f}");
    let pct = &f["percentiles_ns"];
    if count == 0 {
        assert_eq!(total, 0, "{f}");
        for k in ["min_ns", "max_ns", "avg_ns"] {
            assert!(f[k].is_null(), "{k} of {name} should be null: {f}");
        }
        for k in ["p50", "p90", "p99", "p99.9"] {
            assert!(pct[k].is_null(), "{k} of {name} should be null: {f}");
        }
        assert!(buckets.is_empty(), "{f}");
        return;
    }
    let (min, max, avg) = (num(f, "min_ns"), num(f, "max_ns"), num(f, "avg_ns"));
    assert!(
        min >= floor_ns,
        "min_ns of {name} is {min}, below the nominal {floor_ns}: {f}"
    );
    assert!(
        avg < avg_ceiling_ns,
        "avg_ns of {name} is {avg}, not below {avg_ceiling_ns}: {f}"
    );
    assert!(min <= avg && avg <= max, "{name}: min/avg/max {f}");
    assert_eq!(avg, total / count, "avg_ns of {name}: {f}");
    assert!(
        total >= count * min && total <= count * max,
        "total_ns of {name}: {f}"
    );
    let mut prev = min;
    for k in ["p50", "p90", "p99", "p99.9"] {
        let p = pct[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} of {name} missing: {f}"));
        assert!(
            p >= prev && p <= max,
            "{k} of {name} = {p} not within [{prev}, {max}]: {f}"
        );
        prev = p;
    }
    // The log2 table starts at min's slot and ends at max's slot.
    assert_eq!(
        buckets.iter().position(|&n| n > 0),
        Some(slot(min)),
        "first log2 slot of {name} does not hold min_ns {min}: {f}"
    );
    assert_eq!(
        buckets.len() - 1,
        slot(max),
        "last log2 slot of {name} does not hold max_ns {max}: {f}"
    );
}

/// Fixture name of a traced function: the demangled name without tachy's
/// ` [clone …]` suffix.
fn fixture_name(tachy_name: &str) -> &str {
    tachy_name
        .split_once(" [clone ")
        .map_or(tachy_name, |(n, _)| n)
}

/// Fixture summary checks: the exact documented counts, `done`, and for
/// every traced function, tachy's count + unwound == the fixture's count.
fn check_fixture_agrees(rep: &Value, fixture_stdout: &str, fixture: &str, it: u64, th: u64) {
    let printed = counts(fixture_stdout);
    assert_eq!(
        printed,
        expected_counts(fixture, it, th),
        "fixture summary:\n{fixture_stdout}"
    );
    assert!(
        fixture_stdout.lines().any(|l| l == "done"),
        "fixture did not finish:\n{fixture_stdout}"
    );
    for f in functions(rep) {
        let name = fixture_name(fname(f));
        let want = printed
            .get(name)
            .unwrap_or_else(|| panic!("fixture prints no count for {name:?}"));
        assert_eq!(
            num(f, "count") + num(f, "unwound"),
            *want,
            "tachy's count + unwound of {name} differ from the fixture's own count: {f}"
        );
    }
}

// ---------------------------------------------------------------------------
// Text reports
// ---------------------------------------------------------------------------

/// One function's part of a text report.
#[derive(Debug, Default)]
struct TextFunc {
    name: Option<String>,
    object: Option<String>,
    hist_header: Option<String>,
    rows: Vec<String>,
    avg_line: Option<String>,
    min_line: Option<String>,
    unwound: Option<u64>,
    filtered: Option<u64>,
}

/// Splits a text report into per-function parts. Fixture lines are ignored.
fn parse_text(stdout: &str) -> Vec<TextFunc> {
    let mut out: Vec<TextFunc> = Vec::new();
    let open_new = |out: &mut Vec<TextFunc>| {
        if out.last().map_or(true, |f| f.avg_line.is_some()) {
            out.push(TextFunc::default());
        }
    };
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("Function = ") {
            let (name, obj) = rest
                .rsplit_once(" [")
                .unwrap_or_else(|| panic!("bad Function line {line:?}"));
            out.push(TextFunc {
                name: Some(name.to_string()),
                object: Some(obj.strip_suffix(']').expect("]").to_string()),
                ..Default::default()
            });
        } else if line.ends_with(" : count     distribution") {
            open_new(&mut out);
            out.last_mut().unwrap().hist_header = Some(line.to_string());
        } else if line.contains(" -> ") && line.starts_with(' ') && line.ends_with('|') {
            out.last_mut()
                .expect("histogram row outside a function")
                .rows
                .push(line.to_string());
        } else if line.starts_with("avg = ") {
            open_new(&mut out);
            out.last_mut().unwrap().avg_line = Some(line.to_string());
        } else if line.starts_with("min = ") {
            out.last_mut().unwrap().min_line = Some(line.to_string());
        } else if let Some(n) = line.strip_prefix("left by exception or unwind: ") {
            out.last_mut().unwrap().unwound = Some(n.parse().unwrap());
        } else if let Some(n) = line.strip_prefix("filtered out by duration: ") {
            out.last_mut().unwrap().filtered = Some(n.parse().unwrap());
        }
    }
    out
}

/// A string of ASCII digits as a number.
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses `avg = A U, total: T U, count: N` (the exact shape, unit `unit`).
fn parse_avg(line: &str, unit: &str) -> (u64, u64, u64) {
    let parse = || -> Option<(u64, u64, u64)> {
        let suffix = format!(" {unit}");
        let parts: Vec<&str> = line.split(", ").collect();
        let [a, t, c] = parts.as_slice() else {
            return None;
        };
        let a = digits(a.strip_prefix("avg = ")?.strip_suffix(&suffix)?)?;
        let t = digits(t.strip_prefix("total: ")?.strip_suffix(&suffix)?)?;
        let c = digits(c.strip_prefix("count: ")?)?;
        Some((a, t, c))
    };
    let (a, t, c) = parse().unwrap_or_else(|| {
        panic!("avg line {line:?} is not `avg = N {unit}, total: N {unit}, count: N`")
    });
    assert_eq!(
        format!("avg = {a} {unit}, total: {t} {unit}, count: {c}"),
        line
    );
    (a, t, c)
}

/// Parses `min = N U, p50 = N U, p90 = .., p99 = .., p99.9 = .., max = N U,
/// avg = N U` into its values, checking names, unit and order (`avg` aside):
/// whole numbers from 100 units on, at most three significant digits below.
fn parse_min_line(line: &str, unit: &str) -> Vec<f64> {
    let names = ["min", "p50", "p90", "p99", "p99.9", "max", "avg"];
    let parts: Vec<&str> = line.split(", ").collect();
    assert_eq!(parts.len(), names.len(), "min line {line:?}");
    let mut vals = Vec::new();
    for (p, n) in parts.iter().zip(names) {
        let v = p
            .strip_prefix(&format!("{n} = "))
            .and_then(|s| s.strip_suffix(&format!(" {unit}")))
            .unwrap_or_else(|| panic!("part {p:?} of {line:?} is not `{n} = N {unit}`"));
        let (int, frac) = v.split_once('.').unwrap_or((v, ""));
        assert!(
            !int.is_empty()
                && int.bytes().all(|b| b.is_ascii_digit())
                && frac.bytes().all(|b| b.is_ascii_digit()),
            "{line:?}"
        );
        let significant = format!("{int}{frac}").trim_start_matches('0').len();
        assert!(frac.is_empty() || significant <= 3, "{line:?}");
        vals.push(v.parse::<f64>().unwrap());
    }
    assert!(
        vals[..6].windows(2).all(|w| w[0] <= w[1]),
        "min/percentiles/max out of order: {line:?}"
    );
    vals
}

/// BCC's _stars(): floor(width * val / val_max) stars, padded to width.
fn reference_stars(val: u64, val_max: u64, width: u64) -> String {
    let n = val.min(val_max) * width / val_max;
    let mut s = "*".repeat(n as usize) + &" ".repeat((width - n) as usize);
    if val > val_max {
        s.push('+');
    }
    s
}

/// BCC's print_log2_hist() output (funclatency's table) for these slot
/// counts. BCC's slot i+1 is slot i here (BCC keeps zero apart in its
/// slot 0, which it never prints).
fn reference_log2_hist(vals: &[u64], val_type: &str) -> Vec<String> {
    let Some(idx_max) = vals.iter().rposition(|&v| v > 0) else {
        return Vec::new();
    };
    let val_max = *vals.iter().max().unwrap();
    let small = idx_max < 32; // BCC: its idx_max (ours + 1) <= 32
    let mut out = vec![format!(
        "{:>pad$}{:<lw$} : count     distribution",
        "",
        val_type,
        pad = if small { 5 } else { 15 },
        lw = if small { 19 } else { 29 }
    )];
    let stars = if small { 40 } else { 20 };
    let width = if small { 10 } else { 20 };
    for (i, &val) in vals.iter().enumerate().take(idx_max + 1) {
        let high: u128 = (1u128 << (i + 1)) - 1;
        let mut low: u128 = (1u128 << (i + 1)) >> 1;
        if low == high {
            low -= 1;
        }
        out.push(format!(
            "{low:>width$} -> {high:<width$} : {val:<8} |{}|",
            reference_stars(val, val_max, stars)
        ));
    }
    out
}

/// Checks the shape `^\s+\d+ -> \d+\s+: \d+\s+\|\**\s*\|$` of a row and
/// returns its (low, high, count, stars).
fn parse_hist_row(row: &str) -> (u64, u64, u64, usize) {
    let parse = || -> Option<(u64, u64, u64, usize)> {
        let t = row.trim_start();
        if t.len() == row.len() {
            return None;
        }
        let (low, rest) = t.split_once(" -> ")?;
        let (high, rest) = rest.split_once(' ')?;
        let rest = rest.trim_start().strip_prefix(": ")?;
        let (count, rest) = rest.split_once(' ')?;
        let inner = rest.trim_start().strip_prefix('|')?.strip_suffix('|')?;
        let stars = inner.len() - inner.trim_start_matches('*').len();
        if !inner[stars..].bytes().all(|b| b == b' ') {
            return None;
        }
        Some((digits(low)?, digits(high)?, digits(count)?, stars))
    };
    parse().unwrap_or_else(|| panic!("histogram row {row:?} has not the print_log2_hist shape"))
}

/// Checks a function's histogram: header and rows byte-identical to
/// BCC's print_log2_hist for the counts shown, 40 stars on the
/// fullest row, counts adding up to `count`, and min/max (in `unit`) in the
/// first/last non-empty rows.
fn check_text_hist(f: &TextFunc, unit: &str, count: u64, min_max: Option<(u64, u64)>) {
    if count == 0 {
        assert!(f.hist_header.is_none() && f.rows.is_empty(), "{f:?}");
        return;
    }
    let header = f.hist_header.as_deref().expect("histogram header");
    assert!(header.contains(unit), "header {header:?} lacks {unit}");
    let parsed: Vec<(u64, u64, u64, usize)> = f.rows.iter().map(|r| parse_hist_row(r)).collect();
    let vals: Vec<u64> = parsed.iter().map(|p| p.2).collect();
    let mut expect = vec![header.to_string()];
    expect.extend(f.rows.iter().cloned());
    assert_eq!(
        expect,
        reference_log2_hist(&vals, unit),
        "histogram differs from print_log2_hist"
    );
    assert_eq!(vals.iter().sum::<u64>(), count, "{f:?}");
    let max_row = parsed.iter().max_by_key(|p| p.2).unwrap();
    assert_eq!(max_row.3, 40, "fullest row has not 40 stars: {f:?}");
    if let Some((min, max)) = min_max {
        // The min/max line rounds to three digits, the rows hold whole
        // units truncated: a shown 256 is a value of 255 or 256 there.
        let first = parsed.iter().find(|p| p.2 > 0).unwrap();
        let last = parsed.last().unwrap();
        assert!(
            first.0 <= min && min.saturating_sub(1) <= first.1,
            "min {min} not in first row {first:?}"
        );
        assert!(
            last.0 <= max && max.saturating_sub(1) <= last.1,
            "max {max} not in last row {last:?}"
        );
    }
}

/// The part of a text report for function `name` (multi-function reports).
fn text_func<'a>(parts: &'a [TextFunc], name: &str) -> &'a TextFunc {
    let hits: Vec<&TextFunc> = parts
        .iter()
        .filter(|f| f.name.as_deref() == Some(name))
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "one text part for {name:?} expected: {parts:#?}"
    );
    hits[0]
}

/// The `Tracing ...` header line(s) in `text`.
fn header_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("Tracing ")).collect()
}

// ---------------------------------------------------------------------------
// C++ fixtures
// ---------------------------------------------------------------------------

/// Traces every shop function and fixture_io in a C++ fixture started by
/// tachy, and checks exact counts, exceptions and durations.
fn cpp_all_functions(fixture: &str, lib_spec: &str) {
    let (it, th) = (CPP_IT, CPP_TH);
    let n = it * th;
    let unw = expected_unwinds(it, th);
    let exe = common::build(fixture);
    let lib = common::build("libfixture.so");
    let out = run_cmd(
        &[
            "--json",
            "shop::Store::lookup",
            "shop::Pool<shop::Conn>::acquire",
            "shop::checksum",
            "shop::validate",
            "shop::forward",
            "shop::target",
            "shop::recurse",
            "shop::risky",
            "shop::maybe_throw",
            lib_spec,
        ],
        fixture,
        &[&it.to_string(), &th.to_string()],
    );
    // tachy's status is the fixture's, which exits 0.
    out.assert_success();

    // JSON mode: the header is on stderr, alone.
    let hdr = header_lines(&out.stderr);
    assert_eq!(hdr.len(), 1, "{out}");
    assert!(
        hdr[0].starts_with("Tracing 11 functions in pid ")
            && hdr[0].ends_with(". Hit Ctrl-C to end."),
        "{out}"
    );
    assert!(
        header_lines(&out.stdout).is_empty(),
        "header on stdout in JSON mode\n{out}"
    );
    assert_eq!(
        out.stderr
            .lines()
            .filter(|l| l.starts_with("tachy") || l.starts_with("Tracing"))
            .count(),
        1,
        "unexpected lines on stderr\n{out}"
    );
    // The fixture's output went to stderr: stdout holds the reports only.
    assert!(
        out.stdout.lines().all(|l| l.starts_with('{')),
        "not only JSON on stdout\n{out}"
    );

    // The fixture ran to its end and its summary agrees with tachy.
    assert_eq!(
        tagged(&out.stderr, "exceptions").get("shop::risky(int)"),
        Some(&unw),
        "{out}"
    );
    let rep = single_report(&out);
    assert_eq!(functions(&rep).len(), 11, "{rep:#}");
    check_fixture_agrees(&rep, &out.stderr, fixture, it, th);

    // `shop::Store::lookup` matched both overloads and nothing else.
    let lookups = functions(&rep)
        .iter()
        .filter(|f| fname(f).starts_with("shop::Store::lookup("))
        .count();
    assert_eq!(lookups, 2, "{rep:#}");

    check_func(func(&rep, "shop::Store::lookup(int)"), n, 0, 300_000);
    check_func(func(&rep, CPP_LOOKUP_STR), n, 0, 300_000);
    check_func(
        func(&rep, "shop::Pool<shop::Conn>::acquire()"),
        n,
        0,
        250_000,
    );
    // At -O2 only the IPA clone of checksum exists.
    let checksum_plain = "shop::checksum(shop::Buffer const&, unsigned int)";
    let checksums: Vec<&Value> = functions(&rep)
        .iter()
        .filter(|f| fname(f).starts_with("shop::checksum("))
        .collect();
    assert_eq!(checksums.len(), 1, "{rep:#}");
    let checksum = checksums[0];
    if fixture == "cpp_o2" {
        let name = fname(checksum);
        let suffix = name
            .strip_prefix(&format!("{checksum_plain} [clone "))
            .and_then(|s| s.strip_suffix(']'))
            .unwrap_or_else(|| panic!("checksum is not the clone at -O2: {name}"));
        assert!(
            checksum["raw_name"].as_str().unwrap().ends_with(suffix),
            "{checksum}"
        );
    } else {
        assert_eq!(fname(checksum), checksum_plain);
    }
    check_func(checksum, n, 0, 200_000);
    check_func(func(&rep, "shop::validate(int)"), n, 0, 200_000);
    // forward's time includes target, which it tail-calls at -O2.
    check_func(func(&rep, "shop::forward(int)"), n, 0, 300_000);
    check_func(func(&rep, "shop::target(int)"), n, 0, 300_000);
    // Every invocation of the recursion counts; the innermost is 200us.
    check_func(func(&rep, "shop::recurse(int)"), 4 * n, 0, 200_000);
    check_func(func(&rep, "shop::risky(int)"), n - unw, unw, 250_000);
    check_func(func(&rep, "shop::maybe_throw(int)"), n - unw, unw, 0);
    check_func(func(&rep, "fixture_io"), n, 0, 300_000);

    // Objects and raw names.
    let exe_s = path_str(&exe);
    for f in functions(&rep) {
        let raw = f["raw_name"].as_str().unwrap();
        if fname(f) == "fixture_io" {
            assert_eq!(f["object"], canonical(&lib).as_str(), "{f}");
            assert_eq!(raw, "fixture_io");
        } else {
            assert_eq!(f["object"], exe_s.as_str(), "{f}");
            assert!(raw.starts_with("_ZN4shop"), "{f}");
        }
    }
}

#[test]
fn cpp_o2_every_function_exact() {
    let _lock = common::needs_root!();
    cpp_all_functions("cpp_o2", "libfixture:fixture_io");
}

#[test]
fn cpp_o0_every_function_exact() {
    let _lock = common::needs_root!();
    cpp_all_functions("cpp_o0", "libfixture.so:fixture_io");
}

#[test]
fn outermost_times_whole_recursions() {
    let _lock = common::needs_root!();
    for fixture in ["cpp_o2", "cpp_o0"] {
        let (it, th) = (CPP_IT, CPP_TH);
        let out = run_cmd(
            &["--json", "--outermost", "shop::recurse"],
            fixture,
            &[&it.to_string(), &th.to_string()],
        );
        out.assert_success();
        let rep = single_report(&out);
        assert_eq!(functions(&rep).len(), 1);
        let f = func(&rep, "shop::recurse(int)");
        // One timed call per outer recursion (the fixture counts all 4 levels).
        assert_eq!(
            counts(&out.stderr)["shop::recurse(int)"],
            4 * it * th,
            "{out}"
        );
        assert_eq!(num(f, "count"), it * th, "{fixture}: {f}");
        assert_eq!(num(f, "unwound"), 0, "{fixture}: {f}");
        assert_eq!(num(f, "filtered"), 0, "{fixture}: {f}");
        assert_eq!(num(f, "overflow"), 0, "{fixture}: {f}");
        // Each outer call spans the 4 levels of 200us.
        check_durations(f, 4 * 200_000, 2 * AVG_CEILING_NS);
    }
}

#[test]
fn attach_to_running_process_text_report() {
    let _lock = common::needs_root!();
    let (it, th) = (6u64, 2u64);
    let n = it * th;
    let unw = expected_unwinds(it, th);
    let mut fx = Fixture::spawn("cpp_o2", &[&it.to_string(), &th.to_string()]);
    let pid = fx.pid().to_string();
    let mut t = Tachy::start(
        &[
            "latency",
            "-p",
            &pid,
            "shop::Store::lookup(int)",
            "shop::risky",
            "libfixture:fixture_io",
        ],
        &[],
    );
    t.wait_for_header(false);
    fx.go();
    let (status, fx_out) = fx.wait();
    assert!(status.success(), "fixture: {status}\n{fx_out}");
    let fx_exit = Instant::now();
    // tachy ends by itself once the process is gone.
    let out = t.finish(Duration::from_secs(15));
    out.assert_success();
    assert!(
        fx_exit.elapsed() < Duration::from_secs(5),
        "tachy took {:?} to notice the exit",
        fx_exit.elapsed()
    );
    assert!(out.stderr.is_empty(), "{out}");

    let exe = canonical(&common::build("cpp_o2"));
    let lib = canonical(&common::build("libfixture.so"));
    let hdr = header_lines(&out.stdout);
    assert_eq!(
        hdr,
        vec![format!(
            "Tracing 3 functions in pid {pid} ({exe}): shop::Store::lookup(int), shop::risky(int), \
             fixture_io. Hit Ctrl-C to end."
        )],
        "{out}"
    );
    assert_eq!(counts(&fx_out), expected_counts("cpp_o2", it, th));
    assert_eq!(tagged(&fx_out, "exceptions")["shop::risky(int)"], unw);

    let parts = parse_text(&out.stdout);
    assert_eq!(parts.len(), 3, "{out}");
    for (name, object, count, unwound) in [
        ("shop::Store::lookup(int)", &exe, n, 0),
        ("shop::risky(int)", &exe, n - unw, unw),
        ("fixture_io", &lib, n, 0),
    ] {
        let f = text_func(&parts, name);
        assert_eq!(f.object.as_deref(), Some(object.as_str()), "{f:?}");
        let (avg, total, c) = parse_avg(f.avg_line.as_deref().unwrap(), "nsecs");
        assert_eq!(c, count, "{name}\n{out}");
        assert_eq!(f.unwound, Some(unwound), "{name}\n{out}");
        assert_eq!(f.filtered, None, "{name}\n{out}");
        assert_eq!(avg, total / c);
        let v = parse_min_line(f.min_line.as_deref().unwrap(), "nsecs");
        assert!(v[0] >= 250_000.0, "{name}: {f:?}");
        assert!(avg < AVG_CEILING_NS);
        check_text_hist(f, "nsecs", c, Some((v[0] as u64, v[5] as u64)));
        assert_eq!(c + unwound, counts(&fx_out)[name]);
    }
}

#[test]
fn attach_to_running_process_json() {
    let _lock = common::needs_root!();
    let (it, th) = (5u64, 2u64);
    let n = it * th;
    let mut fx = Fixture::spawn("plain", &[&it.to_string(), &th.to_string()]);
    let pid = fx.pid().to_string();
    let mut t = Tachy::start(
        &[
            "latency",
            "--json",
            "-p",
            &pid,
            "slow_sum",
            "fast_path",
            "mix_local",
        ],
        &[],
    );
    // In JSON mode the header goes to stderr.
    t.wait_for_header(true);
    fx.go();
    let (status, fx_out) = fx.wait();
    assert!(status.success());
    let out = t.finish(Duration::from_secs(15));
    out.assert_success();
    assert!(header_lines(&out.stdout).is_empty(), "{out}");
    let rep = single_report(&out);
    assert_eq!(functions(&rep).len(), 3);
    check_fixture_agrees(&rep, &fx_out, "plain", it, th);
    let exe = canonical(&common::build("plain"));
    check_func(func(&rep, "slow_sum"), n, 0, 300_000);
    check_func(func(&rep, "fast_path"), 2 * n, 0, 200_000);
    check_func(func(&rep, "mix_local"), n, 0, 200_000);
    for f in functions(&rep) {
        assert_eq!(f["object"], exe.as_str(), "{f}");
    }
}

// ---------------------------------------------------------------------------
// C and Rust fixtures
// ---------------------------------------------------------------------------

#[test]
fn plain_c_functions() {
    let _lock = common::needs_root!();
    let (it, th) = (8u64, 2u64);
    let n = it * th;
    let out = run_cmd(
        &["--json", "slow_sum", "fast_path", "mix_local"],
        "plain",
        &[&it.to_string(), &th.to_string()],
    );
    out.assert_success();
    let rep = single_report(&out);
    assert_eq!(functions(&rep).len(), 3, "{rep:#}");
    check_fixture_agrees(&rep, &out.stderr, "plain", it, th);
    check_func(func(&rep, "slow_sum"), n, 0, 300_000);
    check_func(func(&rep, "fast_path"), 2 * n, 0, 200_000);
    // The static (local-symbol) function.
    check_func(func(&rep, "mix_local"), n, 0, 200_000);
    let exe = path_str(&common::build("plain"));
    for f in functions(&rep) {
        assert_eq!(f["object"], exe.as_str(), "{f}");
        assert_eq!(f["raw_name"], f["name"], "C names are not mangled: {f}");
    }
}

/// Several functions, two never called: the text report leaves those
/// out and says how many, then ends with one row per function called;
/// `--all` shows every function.
#[test]
fn functions_never_called_are_one_line() {
    let _lock = common::needs_root!();
    let (it, th) = (8u64, 2u64);
    let n = it * th;
    let fx_args = [it.to_string(), th.to_string()];
    let fx_args = [fx_args[0].as_str(), fx_args[1].as_str()];
    let funcs = ["slow_sum", "fast_path", "c:a64l", "c:l64a"];
    let out = run_cmd(&funcs, "plain", &fx_args);
    out.assert_success();
    let parts = parse_text(&out.stdout);
    let names: Vec<&str> = parts.iter().filter_map(|f| f.name.as_deref()).collect();
    assert_eq!(names, ["slow_sum", "fast_path"], "{out}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    let idle = lines
        .iter()
        .position(|l| *l == "2 functions not called (--all shows them)")
        .unwrap_or_else(|| panic!("no line for the functions not called\n{out}"));
    // A blank line, the table's header, then a row per function called,
    // most total time first.
    assert_eq!(lines[idle + 1], "", "{out}");
    let head: Vec<&str> = lines[idle + 2].split_whitespace().collect();
    assert_eq!(
        head,
        ["function", "(nsecs)", "calls", "calls/s", "avg", "p50", "p99", "max", "total"],
        "{out}"
    );
    let rows: Vec<Vec<&str>> = lines[idle + 3..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    let mut got: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    got.sort_unstable();
    let (n1, n2) = (n.to_string(), (2 * n).to_string());
    assert_eq!(
        got,
        [("fast_path", n2.as_str()), ("slow_sum", n1.as_str())],
        "{out}"
    );
    for r in &rows {
        assert_eq!(r.len(), 8, "{out}");
        assert!(r[2].parse::<f64>().unwrap() > 0.0, "calls/s: {out}");
    }
    let total = |r: &Vec<&str>| r[7].parse::<f64>().unwrap();
    assert!(
        total(&rows[0]) >= total(&rows[1]),
        "most total time first\n{out}"
    );

    let mut all = vec!["--all"];
    all.extend(funcs);
    let out = run_cmd(&all, "plain", &fx_args);
    out.assert_success();
    let parts = parse_text(&out.stdout);
    let names: Vec<&str> = parts.iter().filter_map(|f| f.name.as_deref()).collect();
    assert_eq!(names, ["slow_sum", "fast_path", "a64l", "l64a"], "{out}");
    assert!(!out.stdout.contains("not called"), "{out}");
}

/// Rust fixture: process, both transform instantiations, guarded (left by
/// panic on odd iterations) and explode (which panics).
fn rust_functions(fixture: &str) {
    let (it, th) = (6u64, 2u64);
    let n = it * th;
    let unw = expected_unwinds(it, th);
    let out = run_cmd(
        &[
            "--json",
            "rust_app::engine::process",
            "rust_app::engine::transform",
            "rust_app::engine::guarded",
            "rust_app::engine::explode",
        ],
        fixture,
        &[&it.to_string(), &th.to_string()],
    );
    out.assert_success();
    assert_eq!(
        tagged(&out.stderr, "panics").get("rust_app::engine::guarded"),
        Some(&unw),
        "{out}"
    );
    assert_eq!(
        counts(&out.stderr),
        expected_counts(fixture, it, th),
        "{out}"
    );
    let rep = single_report(&out);
    assert_eq!(functions(&rep).len(), 5, "{rep:#}");
    check_func(func(&rep, "rust_app::engine::process"), n, 0, 300_000);
    check_func(
        func(&rep, "rust_app::engine::guarded"),
        n - unw,
        unw,
        250_000,
    );
    check_func(func(&rep, "rust_app::engine::explode"), n - unw, unw, 0);
    let transforms: Vec<&Value> = functions(&rep)
        .iter()
        .filter(|f| fname(f).starts_with("rust_app::engine::transform"))
        .collect();
    assert_eq!(transforms.len(), 2, "{rep:#}");
    if fixture == "rust_app_v0" {
        check_func(
            func(&rep, "rust_app::engine::transform::<u32>"),
            n,
            0,
            250_000,
        );
        check_func(
            func(&rep, "rust_app::engine::transform::<alloc::string::String>"),
            n,
            0,
            250_000,
        );
        for f in functions(&rep) {
            assert!(f["raw_name"].as_str().unwrap().starts_with("_R"), "{f}");
        }
    } else {
        // Legacy mangling: both instantiations demangle to the same name
        // and differ only in their raw (hashed) names.
        for f in &transforms {
            assert_eq!(fname(f), "rust_app::engine::transform");
            check_func(f, n, 0, 250_000);
        }
        assert_ne!(transforms[0]["raw_name"], transforms[1]["raw_name"]);
        for f in functions(&rep) {
            assert!(
                f["raw_name"].as_str().unwrap().starts_with("_ZN8rust_app"),
                "{f}"
            );
        }
    }
}

#[test]
fn rust_legacy_mangling_functions() {
    let _lock = common::needs_root!();
    rust_functions("rust_app");
}

#[test]
fn rust_v0_mangling_functions() {
    let _lock = common::needs_root!();
    rust_functions("rust_app_v0");
}

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

#[test]
fn duration_filters() {
    let _lock = common::needs_root!();
    let (it, th) = (5u64, 2u64);
    let n = it * th;
    let args = [it.to_string(), th.to_string()];
    let fx_args = [args[0].as_str(), args[1].as_str()];
    // shop::Store::lookup(int) takes at least 300us and far less than 10s.
    for (opt, val, kept) in [
        ("--slower-than", "10s", false),
        ("--faster-than", "10s", true),
        ("--slower-than", "250us", true),
        ("--faster-than", "250us", false),
    ] {
        let out = run_cmd(
            &["--json", opt, val, "shop::Store::lookup(int)"],
            "cpp_o2",
            &fx_args,
        );
        out.assert_success();
        let rep = single_report(&out);
        let f = func(&rep, "shop::Store::lookup(int)");
        let (count, filtered) = if kept { (n, 0) } else { (0, n) };
        assert_eq!(num(f, "count"), count, "{opt} {val}: {f}");
        assert_eq!(num(f, "filtered"), filtered, "{opt} {val}: {f}");
        assert_eq!(num(f, "unwound"), 0, "{opt} {val}: {f}");
        check_durations(f, 300_000, AVG_CEILING_NS);
    }

    // Filtering counts completed calls only; calls left by exception are
    // counted as unwound either way.
    let unw = expected_unwinds(it, th);
    let out = run_cmd(
        &[
            "--json",
            "--slower-than",
            "200us",
            "shop::risky",
            "shop::maybe_throw",
        ],
        "cpp_o2",
        &fx_args,
    );
    out.assert_success();
    let rep = single_report(&out);
    let risky = func(&rep, "shop::risky(int)");
    assert_eq!(num(risky, "count"), n - unw, "{risky}");
    assert_eq!(num(risky, "filtered"), 0, "{risky}");
    assert_eq!(num(risky, "unwound"), unw, "{risky}");
    let thrower = func(&rep, "shop::maybe_throw(int)");
    assert_eq!(num(thrower, "count"), 0, "{thrower}");
    assert_eq!(num(thrower, "filtered"), n - unw, "{thrower}");
    assert_eq!(num(thrower, "unwound"), unw, "{thrower}");

    // Text mode reports the filtered calls on their own line.
    let out = run_cmd(
        &["--slower-than", "10s", "shop::Store::lookup(int)"],
        "cpp_o2",
        &fx_args,
    );
    out.assert_success();
    let parts = parse_text(&out.stdout);
    assert_eq!(parts.len(), 1, "{out}");
    let f = &parts[0];
    assert_eq!(
        f.avg_line.as_deref(),
        Some("avg = 0 nsecs, total: 0 nsecs, count: 0"),
        "{out}"
    );
    assert_eq!(f.min_line, None, "{out}");
    assert_eq!(f.filtered, Some(n), "{out}");
    assert_eq!(f.unwound, Some(0), "{out}");
    check_text_hist(f, "nsecs", 0, None);
}

#[test]
fn units_usec_and_msec() {
    let _lock = common::needs_root!();
    let (it, th) = (CPP_IT, CPP_TH);
    let n = it * th;
    let fx_args = [it.to_string(), th.to_string()];
    let fx_args = [fx_args[0].as_str(), fx_args[1].as_str()];
    for (flag, unit, per) in [("-u", "usecs", 1_000u64), ("-m", "msecs", 1_000_000)] {
        let out = run_cmd(
            &[flag, "shop::Store::lookup(int)", "shop::recurse"],
            "cpp_o2",
            &fx_args,
        );
        out.assert_success();
        assert_eq!(header_lines(&out.stdout).len(), 1, "{out}");
        let parts = parse_text(&out.stdout);
        assert_eq!(parts.len(), 2, "{out}");
        for (name, count, floor_ns) in [
            ("shop::Store::lookup(int)", n, 300_000u64),
            ("shop::recurse(int)", 4 * n, 200_000),
        ] {
            let f = text_func(&parts, name);
            let header = f.hist_header.as_deref().unwrap();
            assert!(header.contains(unit), "{flag}: header {header:?}\n{out}");
            let (avg, total, c) = parse_avg(f.avg_line.as_deref().unwrap(), unit);
            assert_eq!(c, count, "{flag} {name}\n{out}");
            // Values are truncated to whole units.
            assert!(total >= count * floor_ns / per, "{flag} {name}\n{out}");
            assert!(avg >= floor_ns / per, "{flag} {name}\n{out}");
            assert!(avg < AVG_CEILING_NS / per, "{flag} {name}\n{out}");
            let v = parse_min_line(f.min_line.as_deref().unwrap(), unit);
            // Sub-unit durations keep their digits (0.3 msecs, not 0).
            assert!(v[0] >= floor_ns as f64 / per as f64, "{flag} {name}: {v:?}");
            // tachy's own avg is the exact one, to three digits.
            let exact = total as f64 / c as f64;
            assert!(v[6] + 1.0 >= exact, "{flag} {name}: {v:?}");
            check_text_hist(f, unit, c, Some((v[0] as u64, v[5] as u64)));
        }
    }
}

/// Two calls shorter than the display unit: `-m` on slow_sum (~300 us
/// each), `-u` on spin_push (~0.8 us each). Every value of tachy's line
/// has three significant digits, none reads 0, and the percentiles are the
/// calls themselves, not their bucket's middle: p50 is the shorter call
/// (the min), p90 and up the longer (the max); avg is their mean.
#[test]
fn sub_unit_calls_read_exactly_in_three_digits() {
    let _lock = common::needs_root!();
    for (flag, unit, func, fixture, fx_args, floor) in [
        ("-m", "msecs", "slow_sum", "plain", ["2", "1"], 0.300),
        ("-u", "usecs", "spin_push", "calls", ["2", "750"], 0.100),
    ] {
        let out = run_cmd(&[flag, func], fixture, &fx_args);
        out.assert_success();
        let parts = parse_text(&out.stdout);
        assert_eq!(parts.len(), 1, "{out}");
        let f = &parts[0];
        let (_, _, count) = parse_avg(f.avg_line.as_deref().unwrap(), unit);
        assert_eq!(count, 2, "{flag}\n{out}");
        let line = f.min_line.as_deref().unwrap();
        let v = parse_min_line(line, unit);
        // `N.NNN`, `N.NN` or `NN.N` (`NNN` from 100 units on).
        for part in line.split(", ") {
            let num = part.split(" = ").nth(1).unwrap().split(' ').next().unwrap();
            let (int, frac) = num.split_once('.').unwrap_or((num, ""));
            let sig = format!("{int}{frac}").trim_start_matches('0').len();
            assert!(
                sig == 3 || (frac.is_empty() && int.len() >= 3),
                "{flag}: {part:?} has not three significant digits: {line}"
            );
        }
        let (min, max, avg) = (v[0], v[5], v[6]);
        assert!(min >= floor, "{flag}: {line}");
        assert_eq!(v[1], min, "{flag}: p50 of two calls is the shorter: {line}");
        for p in &v[2..5] {
            assert_eq!(
                *p, max,
                "{flag}: p90 and up of two calls are the longer: {line}"
            );
        }
        assert!(
            (avg - (min + max) / 2.0).abs() <= 0.012 * max.max(0.2),
            "{flag}: avg is the mean of the two calls: {line}"
        );
    }
}

#[test]
fn text_histogram_is_print_log2_hist() {
    let _lock = common::needs_root!();
    let (it, th) = (8u64, 2u64);
    let n = it * th;
    let out = run_cmd(&["slow_sum"], "plain", &[&it.to_string(), &th.to_string()]);
    out.assert_success();
    let exe = path_str(&common::build("plain"));
    let hdr = header_lines(&out.stdout);
    assert_eq!(hdr.len(), 1, "{out}");
    assert!(
        hdr[0].starts_with("Tracing 1 function in pid ")
            && hdr[0].ends_with(&format!("({exe} {it} {th}): slow_sum. Hit Ctrl-C to end.")),
        "{out}"
    );
    let parts = parse_text(&out.stdout);
    assert_eq!(parts.len(), 1, "{out}");
    let f = &parts[0];
    // A single function has no `Function = ` line.
    assert_eq!(f.name, None);
    let (_, _, c) = parse_avg(f.avg_line.as_deref().unwrap(), "nsecs");
    assert_eq!(c, n);
    let v = parse_min_line(f.min_line.as_deref().unwrap(), "nsecs");
    assert!(v[0] >= 300_000.0);
    for row in &f.rows {
        parse_hist_row(row);
    }
    check_text_hist(f, "nsecs", c, Some((v[0] as u64, v[5] as u64)));
    assert_eq!(f.unwound, Some(0));
    // Blank line between the header and the report, and around the avg
    // line, as funclatency.
    let lines: Vec<&str> = out.stdout.lines().collect();
    let hist_at = lines
        .iter()
        .position(|l| l.ends_with(" : count     distribution"))
        .unwrap();
    assert_eq!(lines[hist_at - 1], "", "{out}");
    let avg_at = lines.iter().position(|l| l.starts_with("avg = ")).unwrap();
    assert_eq!(lines[avg_at - 1], "", "{out}");
    assert_eq!(lines[avg_at + 1], "", "{out}");
    assert!(lines[avg_at - 2].ends_with('|'), "{out}");
}

#[test]
fn timestamp_line() {
    let _lock = common::needs_root!();
    let out = run_cmd(&["-T", "-u", "slow_sum"], "plain", &["2", "1"]);
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    let hist_at = lines
        .iter()
        .position(|l| l.ends_with(" : count     distribution"))
        .unwrap_or_else(|| panic!("no histogram\n{out}"));
    let ts = lines[hist_at - 1];
    let b = ts.as_bytes();
    assert!(
        b.len() == 8
            && b[2] == b':'
            && b[5] == b':'
            && [0, 1, 3, 4, 6, 7].iter().all(|&i| b[i].is_ascii_digit()),
        "no HH:MM:SS line before the report: {ts:?}\n{out}"
    );
}

#[test]
fn interval_reports_add_up() {
    let _lock = common::needs_root!();
    // ~1.2 ms per iteration: about 2 s of work, so at least one interval
    // report before the final one.
    let it = 1600u64;
    let out = run_cmd(
        &["--json", "-i", "1", "slow_sum"],
        "plain",
        &[&it.to_string(), "1"],
    );
    out.assert_success();
    let reps = reports(&out);
    assert!(reps.len() >= 2, "expected interval reports\n{out}");
    let mut total = 0;
    for (k, rep) in reps.iter().enumerate() {
        let f = func(rep, "slow_sum");
        check_durations(f, 300_000, AVG_CEILING_NS);
        total += num(f, "count");
        // Each says how long it covered: a whole interval but the last.
        let span = rep["interval_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("{rep}"));
        if k + 1 < reps.len() {
            assert!((0.9..1.5).contains(&span), "interval_s {span}: {rep}");
        } else {
            assert!(span > 0.0 && span < 1.5, "interval_s {span}: {rep}");
        }
    }
    // Each report covers only its own interval.
    assert_eq!(total, it, "{out}");
    assert_eq!(counts(&out.stderr)["slow_sum"], it);
}

#[test]
fn uretprobe_mode_counts_exactly() {
    let _lock = common::needs_root!();
    let (it, th) = (CPP_IT, CPP_TH);
    let n = it * th;
    let out = run_cmd(
        &[
            "--json",
            "--uretprobe",
            "shop::Store::lookup(int)",
            "shop::Pool<shop::Conn>::acquire",
            "libfixture:fixture_io",
        ],
        "cpp_o2",
        &[&it.to_string(), &th.to_string()],
    );
    out.assert_success();
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("tachy: warning: ") && l.contains("--uretprobe"))
        .collect();
    assert_eq!(warnings.len(), 1, "no --uretprobe warning\n{out}");
    let rep = single_report(&out);
    assert_eq!(functions(&rep).len(), 3, "{rep:#}");
    check_fixture_agrees(&rep, &out.stderr, "cpp_o2", it, th);
    check_func(func(&rep, "shop::Store::lookup(int)"), n, 0, 300_000);
    check_func(
        func(&rep, "shop::Pool<shop::Conn>::acquire()"),
        n,
        0,
        250_000,
    );
    check_func(func(&rep, "fixture_io"), n, 0, 300_000);
}

#[test]
fn duration_limit_leaves_process_unharmed() {
    let _lock = common::needs_root!();
    let mut fx = Fixture::spawn("plain", &["3", "1"]);
    let pid = fx.pid().to_string();
    // The fixture waits for go, so nothing is called while tachy runs.
    let out = run(
        &[
            "latency",
            "--json",
            "-d",
            "1",
            "-p",
            &pid,
            "slow_sum",
            "fast_path",
        ],
        &[],
    );
    out.assert_success();
    assert!(
        out.elapsed >= Duration::from_secs(1) && out.elapsed < Duration::from_secs(8),
        "tachy -d 1 ran for {:?}\n{out}",
        out.elapsed
    );
    let rep = single_report(&out);
    for name in ["slow_sum", "fast_path"] {
        let f = func(&rep, name);
        assert_eq!(num(f, "count"), 0, "{f}");
        assert_eq!(num(f, "unwound"), 0, "{f}");
        check_durations(f, 0, AVG_CEILING_NS);
    }
    // Still alive and well after tachy detached.
    assert!(fx.is_running(), "fixture died while traced");
    fx.go();
    let (status, stdout, stderr) = fx.wait_all();
    assert!(status.success(), "{status}\n{stdout}\n{stderr}");
    assert_eq!(counts(&stdout), expected_counts("plain", 3, 1));
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn exceptions_and_panics_pass_through_probes() {
    let _lock = common::needs_root!();
    let (it, th) = (CPP_IT, CPP_TH);
    let n = it * th;
    let unw = expected_unwinds(it, th);
    for fixture in ["cpp_o2", "cpp_o0"] {
        let out = run_cmd(
            &["--json", "shop::risky", "shop::maybe_throw"],
            fixture,
            &[&it.to_string(), &th.to_string()],
        );
        // The fixture caught every exception and exited 0.
        out.assert_success();
        assert!(out.stderr.lines().any(|l| l == "done"), "{out}");
        assert_eq!(
            tagged(&out.stderr, "exceptions")["shop::risky(int)"],
            unw,
            "{out}"
        );
        let rep = single_report(&out);
        check_fixture_agrees(&rep, &out.stderr, fixture, it, th);
        check_func(func(&rep, "shop::risky(int)"), n - unw, unw, 250_000);
        check_func(func(&rep, "shop::maybe_throw(int)"), n - unw, unw, 0);
    }
    for fixture in ["rust_app", "rust_app_v0"] {
        let (it, th) = (6u64, 2u64);
        let unw = expected_unwinds(it, th);
        let out = run_cmd(
            &[
                "--json",
                "rust_app::engine::guarded",
                "rust_app::engine::explode",
            ],
            fixture,
            &[&it.to_string(), &th.to_string()],
        );
        out.assert_success();
        assert!(out.stderr.lines().any(|l| l == "done"), "{out}");
        assert_eq!(
            tagged(&out.stderr, "panics")["rust_app::engine::guarded"],
            unw,
            "{out}"
        );
        let rep = single_report(&out);
        let g = func(&rep, "rust_app::engine::guarded");
        assert_eq!(
            (num(g, "count"), num(g, "unwound")),
            (it * th - unw, unw),
            "{g}"
        );
    }
}

#[test]
fn command_exit_status_is_passed_on() {
    let _lock = common::needs_root!();
    // A bad argument makes the fixture exit 2 before calling anything.
    let out = run_cmd(&["--json", "shop::target"], "cpp_o2", &["zero"]);
    out.assert_no_panic();
    assert_eq!(out.code(), Some(2), "{out}");
    let rep = single_report(&out);
    assert_eq!(num(func(&rep, "shop::target(int)"), "count"), 0);
    assert!(
        out.stderr.contains("workload: bad iterations: zero"),
        "{out}"
    );
}

#[test]
fn thread_filter_excludes_other_threads() {
    let _lock = common::needs_root!();
    // The fixture's main thread only waits: every traced call happens in a
    // worker thread, so `-t <main thread>` times none of them.
    let (it, th) = (4u64, 2u64);
    let mut fx = Fixture::spawn("plain", &[&it.to_string(), &th.to_string()]);
    let pid = fx.pid().to_string();
    let mut t = Tachy::start(
        &[
            "latency",
            "--json",
            "-p",
            &pid,
            "-t",
            &pid,
            "slow_sum",
            "fast_path",
        ],
        &[],
    );
    t.wait_for_header(true);
    fx.go();
    let (status, fx_out) = fx.wait();
    assert!(status.success());
    assert_eq!(counts(&fx_out), expected_counts("plain", it, th));
    let out = t.finish(Duration::from_secs(15));
    out.assert_success();
    let rep = single_report(&out);
    for name in ["slow_sum", "fast_path"] {
        let f = func(&rep, name);
        assert_eq!(num(f, "count"), 0, "{f}");
        assert_eq!(num(f, "unwound"), 0, "{f}");
        assert_eq!(num(f, "filtered"), 0, "{f}");
    }
}

/// A command that is a script: its interpreter's libraries (libc) can be
/// named before it starts, and the program the script execs is traced
/// under the same process: nanosleep, four per iteration of `plain`.
#[test]
fn script_command_traces_through_its_interpreter() {
    let _lock = common::needs_root!();
    let plain = common::build("plain");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, shebang) in [("direct.sh", "#!/bin/sh"), ("env.sh", "#!/usr/bin/env sh")] {
        let script = dir.join(name);
        std::fs::write(
            &script,
            format!("{shebang}\nexec {} \"$@\"\n", plain.display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let script = path_str(&script);
        let out = run(
            &["latency", "--json", "c:nanosleep", "--", &script, "3", "1"],
            NO_WAIT,
        );
        out.assert_success();
        let rep = single_report(&out);
        check_func(func(&rep, "nanosleep"), 4 * 3, 0, 200_000);
        // A function of the program itself is not known before it starts.
        let out = run(&["latency", "slow_sum", "--", &script, "1"], NO_WAIT);
        assert_eq!(out.code(), Some(1), "{out}");
        assert!(
            out.stderr.contains("is a script run by") && out.stderr.contains("PATH:FUNC"),
            "{out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// System call latency through the raw syscall tracepoints: the plain
/// fixture sleeps with nanosleep (clock_nanosleep underneath) once in each
/// of slow_sum, mix_local and each of the two fast_path calls per iteration.
#[test]
fn syscall_latency_counts_exactly() {
    let _lock = common::needs_root!();
    let (it, th) = (6u64, 2u64);
    let out = run_cmd(
        &[
            "--json",
            "syscall:clock_nanosleep",
            "syscall:nanosleep",
            "slow_sum",
        ],
        "plain",
        &[&it.to_string(), &th.to_string()],
    );
    out.assert_success();
    let rep = single_report(&out);
    let sleeps = func(&rep, "syscall:clock_nanosleep");
    assert_eq!(sleeps["object"], "kernel", "{sleeps}");
    // slow_sum, fast_path twice, mix_local: four sleeps per iteration.
    check_func(sleeps, 4 * it * th, 0, 200_000);
    assert_eq!(num(func(&rep, "syscall:nanosleep"), "count"), 0, "{rep:#}");
    // The sleep inside slow_sum is part of it.
    let slow = func(&rep, "slow_sum");
    check_func(slow, it * th, 0, 300_000);
}

/// Only the BPF programs the plan uses are loaded: a function with an
/// entry probe and probes on its `ret`s needs the entry and exit programs
/// (and the thread-exit watch), not those of tail jumps, uretprobes, call
/// sites, forks, system calls or kernel functions. (slow_sum's `ret`s are
/// probed in a process that may unwind: libstdc++ preloaded.) The same
/// programs serve uprobe_multi links and single uprobes.
#[test]
fn loads_only_the_programs_the_plan_uses() {
    let _lock = common::needs_root!();
    let exe = common::build("plain");
    // Their attach type is set at load: both kinds of link count alike.
    let mut counts = Vec::new();
    for links in ["uprobe_multi", "uprobe"] {
        let mut envs = vec![NO_WAIT[0], ("LD_PRELOAD", "libstdc++.so.6")];
        if links == "uprobe" {
            envs.push(("TACHY_NO_UPROBE_MULTI", "1"));
        }
        let out = run(
            &[
                "latency",
                "-v",
                "slow_sum",
                "--",
                exe.to_str().unwrap(),
                "1",
                "1",
            ],
            &envs,
        );
        assert!(out.status.success(), "{out:?}");
        let line = out
            .stderr
            .lines()
            .find(|l| l.starts_with("BPF programs loaded: "))
            .unwrap_or_else(|| panic!("{out:?}"));
        let mut progs: Vec<&str> = line["BPF programs loaded: ".len()..].split(", ").collect();
        progs.sort();
        assert_eq!(
            progs,
            ["tachy_entry", "tachy_exit", "tachy_thread_exit"],
            "{out:?}"
        );
        assert!(
            out.stderr
                .lines()
                .any(|l| l.starts_with("attached ") && l.ends_with(&format!(" {links} link(s)"))),
            "{out:?}"
        );
        let count = out
            .stdout
            .lines()
            .find_map(|l| l.split("count: ").nth(1))
            .unwrap_or_else(|| panic!("{out:?}"))
            .trim()
            .to_string();
        counts.push(count);
    }
    assert_eq!(counts[0], counts[1], "{counts:?}");
}
