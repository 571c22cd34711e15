//! Histograms that leave the host: `--hlog` interval logs read back by the
//! hdrhistogram crate's own reader, and `tachy merge` / `tachy diff` of
//! reports from several runs. Tracing tests run as root on the fixtures of
//! `tests/fixtures/`, whose call counts are known by construction.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use common::run::{json_lines, Outcome, Tachy};
use common::{counts, Fixture};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fleet")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `tachy latency OPTS... -- plain ITERATIONS 1` to its end.
fn trace_plain(opts: &[&str], iterations: u64) -> Outcome {
    let exe = common::build("plain");
    let it = iterations.to_string();
    let mut args: Vec<&str> = vec!["latency"];
    args.extend_from_slice(opts);
    args.extend(["--", exe.to_str().unwrap(), &it, "1"]);
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT);
    out.assert_success();
    out
}

fn func<'a>(rep: &'a Value, name: &str) -> &'a Value {
    rep["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {rep}"))
}

fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// The kernel's bucket of a value (see src/report/hist.rs): 16 exact
/// values, then 16 linear sub-buckets per power of two.
fn bucket_of(v: u64) -> u64 {
    if v < 16 {
        return v;
    }
    let lg = 63 - v.leading_zeros() as u64;
    (lg - 3) * 16 + ((v >> (lg - 4)) & 15)
}

/// Every interval of an HdrHistogram log, read with the hdrhistogram
/// crate alone: (tag, start offset, histogram).
fn read_hlog(path: &Path) -> Vec<(String, Duration, Histogram<u64>)> {
    let bytes = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut de = Deserializer::new();
    for entry in IntervalLogIterator::new(&bytes) {
        match entry.unwrap_or_else(|e| panic!("{}: {e:?}", path.display())) {
            LogEntry::Interval(h) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(h.encoded_histogram())
                    .unwrap();
                let hist: Histogram<u64> = de.deserialize(&mut &raw[..]).unwrap();
                let tag = h.tag().expect("every histogram is tagged").to_string();
                out.push((tag, h.start_timestamp(), hist));
            }
            LogEntry::StartTime(_) | LogEntry::BaseTime(_) => {}
        }
    }
    out
}

/// Traces slow_sum and fast_path of `plain` with JSON reports every second
/// and an interval log in `dir`: the outcome, the log, the iterations.
fn interval_run(dir: &Path) -> (Outcome, PathBuf, u64) {
    let log = dir.join("run.hlog");
    // ~1 ms of work per iteration: two or three intervals of 1 s.
    let it = 1600;
    let out = trace_plain(
        &[
            "--json",
            "-i",
            "1",
            "--hlog",
            log.to_str().unwrap(),
            "slow_sum",
            "fast_path",
        ],
        it,
    );
    (out, log, it)
}

const PERCENTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

#[test]
fn hlog_intervals_read_back_exactly() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let dir = scratch("hlog");
    let (out, log, it) = interval_run(&dir);
    let reports = json_lines(&out.stdout);
    assert!(reports.len() >= 2, "expected interval reports\n{out}");
    let logged = read_hlog(&log);
    let names = ["slow_sum", "fast_path"];
    assert_eq!(logged.len(), names.len() * reports.len(), "{out}");
    let made = counts(&out.stderr);
    let mut totals = [0u64; 2];
    let mut last_start = None;
    for (i, rep) in reports.iter().enumerate() {
        let start = logged[i * names.len()].1;
        assert!(last_start.is_none_or(|s| s < start), "intervals in order");
        last_start = Some(start);
        for (k, name) in names.iter().enumerate() {
            let (tag, s, h) = &logged[i * names.len() + k];
            assert_eq!(*s, start, "one start per interval");
            assert_eq!(tag, &format!("plain/{name}"));
            let f = func(rep, name);
            assert_eq!(h.len(), num(f, "count"), "{name} interval {i}");
            totals[k] += h.len();
            if h.is_empty() {
                continue;
            }
            // Every kernel bucket of the report holds the same calls in
            // the log.
            for b in f["buckets"].as_array().unwrap() {
                let (lo, n) = (b[0].as_u64().unwrap(), b[1].as_u64().unwrap());
                let in_log: u64 = h
                    .iter_recorded()
                    .filter(|v| bucket_of(v.value_iterated_to()) == bucket_of(lo))
                    .map(|v| v.count_at_value())
                    .sum();
                assert_eq!(in_log, n, "{name} bucket at {lo} ns, interval {i}");
            }
            // The same percentiles: the log's lies in the bucket of the
            // report's, within HdrHistogram's 0.1%.
            for (p, q) in PERCENTILES {
                let want = num(&f["percentiles_ns"], p);
                let got = h.value_at_quantile(q);
                assert_eq!(
                    bucket_of(got),
                    bucket_of(want),
                    "{name} {p}: log {got} ns, report {want} ns"
                );
            }
            // Min and max are in the buckets of the exact ones.
            assert_eq!(bucket_of(h.min()), bucket_of(num(f, "min_ns")), "{name}");
            assert_eq!(bucket_of(h.max()), bucket_of(num(f, "max_ns")), "{name}");
        }
    }
    assert_eq!(totals, [it, 2 * it]);
    assert_eq!(made["slow_sum"], it);
    assert_eq!(made["fast_path"], 2 * it);
}

#[test]
fn hlog_that_cannot_be_written_fails_before_attaching() {
    let _lock = common::serial();
    let fx = Fixture::spawn("plain", &["1"]);
    let out = Tachy::start(
        &[
            "latency",
            "--hlog",
            "/nonexistent/dir/x.hlog",
            "-p",
            &fx.pid().to_string(),
            "slow_sum",
        ],
        &[],
    )
    .finish(RUN_TIMEOUT);
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(
        out.stderr
            .starts_with("tachy: cannot write /nonexistent/dir/x.hlog"),
        "{out}"
    );
}

/// Runs tachy (not a trace) to its end.
fn tachy(args: &[&str]) -> Outcome {
    Tachy::start(args, &[]).finish(RUN_TIMEOUT)
}

/// What the test itself adds up for one function over `reports`: count,
/// total, unwound, min, max and the fine buckets.
fn summed(reports: &[Value], name: &str) -> (u64, u64, u64, u64, u64, Vec<(u64, u64)>) {
    let (mut count, mut total, mut unwound, mut min, mut max) = (0, 0, 0, u64::MAX, 0);
    let mut buckets = std::collections::BTreeMap::new();
    for rep in reports {
        let f = func(rep, name);
        count += num(f, "count");
        total += num(f, "total_ns");
        unwound += num(f, "unwound");
        if num(f, "count") > 0 {
            min = min.min(num(f, "min_ns"));
            max = max.max(num(f, "max_ns"));
        }
        for b in f["buckets"].as_array().unwrap() {
            *buckets.entry(b[0].as_u64().unwrap()).or_insert(0) += b[1].as_u64().unwrap();
        }
    }
    (
        count,
        total,
        unwound,
        min,
        max,
        buckets.into_iter().collect(),
    )
}

fn buckets_of(f: &Value) -> Vec<(u64, u64)> {
    f["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b[0].as_u64().unwrap(), b[1].as_u64().unwrap()))
        .collect()
}

#[test]
fn merge_of_parts_of_a_run_is_the_whole_run() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let dir = scratch("merge");
    let (out, log, it) = interval_run(&dir);
    let lines: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with('{')).collect();
    assert!(lines.len() >= 2, "expected interval reports\n{out}");
    let reports = json_lines(&out.stdout);
    // The first interval in one file, the others in another.
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::write(&a, format!("{}\n", lines[0])).unwrap();
    std::fs::write(&b, lines[1..].join("\n") + "\n").unwrap();
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());

    let merged = tachy(&["merge", "--json", "--per-input", a_s, b_s]);
    merged.assert_success();
    let m = merged.single_report();
    let from_log = tachy(&["merge", "--json", log.to_str().unwrap()]);
    from_log.assert_success();
    let l = from_log.single_report();
    for (name, calls) in [("slow_sum", it), ("fast_path", 2 * it)] {
        let (count, total, unwound, min, max, buckets) = summed(&reports, name);
        assert_eq!(count, calls);
        for f in [func(&m, name), func(&l, name)] {
            assert_eq!(num(f, "count"), count, "{name}");
            assert_eq!(num(f, "total_ns"), total, "{name}");
            assert_eq!(num(f, "unwound"), unwound, "{name}");
            assert_eq!(num(f, "min_ns"), min, "{name}");
            assert_eq!(num(f, "max_ns"), max, "{name}");
            assert_eq!(buckets_of(f), buckets, "{name}");
            assert_eq!(f["object"], func(&reports[0], name)["object"]);
        }
        // JSON and log inputs give the same percentiles.
        assert_eq!(
            func(&m, name)["percentiles_ns"],
            func(&l, name)["percentiles_ns"]
        );
        let first = num(func(&reports[0], name), "count");
        assert_eq!(
            func(&m, name)["per_input"],
            serde_json::json!([first, count - first]),
            "{name}"
        );
    }
    assert_eq!(m["inputs"], serde_json::json!([a_s, b_s]));

    // Back out as a log: one interval, read by the hdrhistogram crate.
    let relog = dir.join("merged.hlog");
    tachy(&["merge", "--hlog", relog.to_str().unwrap(), a_s, b_s]).assert_success();
    let logged = read_hlog(&relog);
    assert_eq!(logged.len(), 2);
    assert_eq!(logged[0].0, "plain/slow_sum");
    assert_eq!(logged[0].2.len(), it);
    assert_eq!(logged[1].2.len(), 2 * it);
}

#[test]
fn merge_and_diff_of_two_runs() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let dir = scratch("two");
    let it = 300;
    let mut files = Vec::new();
    for run in ["one", "two"] {
        let out = trace_plain(&["--json", "slow_sum", "fast_path"], it);
        let path = dir.join(format!("{run}.json"));
        std::fs::write(&path, &out.stdout).unwrap();
        files.push(path.to_str().unwrap().to_string());
    }
    let text = tachy(&["merge", "--per-input", &files[0], &files[1]]);
    text.assert_success();
    assert!(text.stdout.starts_with("Function = slow_sum ["), "{text}");
    let avg_lines: Vec<&str> = text
        .stdout
        .lines()
        .filter(|l| l.starts_with("avg = "))
        .collect();
    assert_eq!(avg_lines.len(), 2, "{text}");
    assert!(
        avg_lines[0].ends_with(&format!(", count: {}", 2 * it)),
        "{text}"
    );
    assert!(
        avg_lines[1].ends_with(&format!(", count: {}", 4 * it)),
        "{text}"
    );
    let per_input = text.stdout.split("Calls per input:\n").nth(1).unwrap();
    let want: Vec<String> = ["slow_sum", "fast_path"]
        .iter()
        .zip([it, 2 * it])
        .flat_map(|(name, n)| {
            let w = files[0].len();
            [
                format!("{name} ["),
                format!("  {:<w$}  {n}", files[0]),
                format!("  {:<w$}  {n}", files[1]),
            ]
        })
        .collect();
    let got: Vec<&str> = per_input.lines().collect();
    assert_eq!(got.len(), want.len(), "{text}");
    for (g, w) in got.iter().zip(&want) {
        assert!(g.starts_with(w.as_str()), "{g:?} vs {w:?}");
    }

    let diff = tachy(&["diff", &files[0], &files[1]]);
    diff.assert_success();
    let count_lines: Vec<&str> = diff
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("count "))
        .collect();
    assert_eq!(count_lines.len(), 2, "{diff}");
    let words: Vec<&str> = count_lines[0].split_whitespace().collect();
    assert_eq!(words, ["count", "300", "300", "+0.0%"], "{diff}");
    let js = tachy(&["diff", "--json", &files[0], &files[1]]);
    js.assert_success();
    let v: Value = serde_json::from_str(js.stdout.trim()).unwrap();
    let f = &v["functions"][1];
    assert_eq!(f["name"], "fast_path");
    assert_eq!(f["a"]["count"], 2 * it);
    assert_eq!(f["b"]["count"], 2 * it);
    assert_eq!(f["change_percent"]["count"], 0.0);
    for p in ["avg_ns", "p50", "p90", "p99", "p99.9", "max_ns"] {
        assert!(f["a"][p].as_u64().unwrap() >= 200_000, "{p}: {v}");
    }
}

#[test]
fn merge_refuses_what_it_cannot_add_exactly() {
    let dir = scratch("bad");
    let ns = dir.join("ns.json");
    let us = dir.join("us.json");
    let line = |unit: &str| {
        format!(
            r#"{{"time": 1.0, "functions": [{{"name": "f", "raw_name": "f", "object": "/x", "count": 2, "total_ns": 2000, "min_ns": 900, "max_ns": 1100, "log2_unit": "{unit}", "buckets": [[1, 2]], "unwound": 0, "filtered": 0, "overflow": 0, "indirect_tail": 0}}]}}"#
        )
    };
    std::fs::write(&ns, line("nsec") + "\n").unwrap();
    std::fs::write(&us, line("usec") + "\n").unwrap();
    let garbage = dir.join("garbage.txt");
    std::fs::write(&garbage, "hello\n").unwrap();
    let nested = dir.join("nested.json");
    std::fs::write(&nested, "{\"time\": 1.0, \"roots\": []}\n").unwrap();
    let cases: [(&[&Path], &str); 4] = [
        (&[&ns, &us], "has buckets in usec and"),
        (&[&nested], "a tachy nested report"),
        (
            &[Path::new("/nonexistent.json")],
            "cannot read /nonexistent.json",
        ),
        (&[&garbage], "not an interval log line"),
    ];
    for (files, msg) in cases {
        let mut args = vec!["merge"];
        args.extend(files.iter().map(|p| p.to_str().unwrap()));
        let out = tachy(&args);
        assert_eq!(out.code(), Some(1), "{out}");
        assert_eq!(out.stderr.lines().count(), 1, "{out}");
        assert!(out.stderr.contains(msg), "{msg}: {out}");
    }
    // The same unit adds up: 2 + 2 calls.
    let out = tachy(&[
        "merge",
        "--json",
        ns.to_str().unwrap(),
        ns.to_str().unwrap(),
    ]);
    out.assert_success();
    let rep = out.single_report();
    let f = func(&rep, "f");
    assert_eq!(num(f, "count"), 4);
    assert_eq!(num(f, "total_ns"), 4000);
    assert_eq!(buckets_of(f), vec![(1, 4)]);
}
