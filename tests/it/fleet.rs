//! Histograms that leave the host: `--hlog` interval logs read back by the
//! hdrhistogram crate's own reader, and `tachy merge` / `tachy diff` of
//! reports from several runs. Tracing tests run as root on the fixtures of
//! `tests/fixtures/`, whose call counts are known by construction.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use common::report::{func, num};
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
    let _lock = common::needs_root!();
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
    let _lock = common::needs_root!();
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

/// A tag of an interval log with its `%XX` escapes decoded.
fn unescape_tag(tag: &str) -> String {
    let mut out = Vec::new();
    let b = tag.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let hex = tag
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(c)) => {
                out.push(c);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// `tachy nested --hlog`: the function's and each call site's histogram,
/// tagged with the site's path as folded stacks name it; read back by the
/// hdrhistogram crate, every count is the JSON report's, exactly, and
/// `tachy merge` reads the log with the sites by their paths.
#[test]
fn nested_hlog_tags_each_site_with_its_path() {
    let _lock = common::needs_root!();
    let dir = scratch("nested-hlog");
    let log = dir.join("nested.hlog");
    let exe = common::build("nested_o2");
    let out = Tachy::start(
        &[
            "nested",
            "--json",
            "--depth",
            "2",
            "--hlog",
            log.to_str().unwrap(),
            "app::handle(int)",
            "--",
            exe.to_str().unwrap(),
            "20",
            "2",
        ],
        &[("FIXTURE_NO_WAIT", "1")],
    )
    .finish(RUN_TIMEOUT);
    out.assert_success();
    let rep = out.single_report();
    fn walk(n: &Value, prefix: Option<&str>, out: &mut std::collections::BTreeMap<String, u64>) {
        let name = n["name"].as_str().unwrap();
        let frame = match n["site"].as_str() {
            Some(s) => format!("{name} [{s}]"),
            None => name.to_string(),
        };
        let path = match prefix {
            Some(p) => format!("{p};{frame}"),
            None => frame,
        };
        *out.entry(format!("nested_o2/{path}")).or_default() += num(n, "count");
        for c in n["children"].as_array().unwrap() {
            walk(c, Some(&path), out);
        }
    }
    let mut want = std::collections::BTreeMap::new();
    walk(&rep["roots"][0], None, &mut want);
    assert_eq!(want["nested_o2/app::handle(int)"], 40, "{out}");
    assert!(
        want.keys()
            .any(|k| k.matches(';').count() == 2 && want[k] > 0),
        "no second level in {want:?}"
    );
    let mut got = std::collections::BTreeMap::new();
    for (tag, _, h) in read_hlog(&log) {
        *got.entry(unescape_tag(&tag)).or_default() += h.len();
    }
    assert_eq!(got, want, "{out}");

    // tachy merge reads the sites back by their paths.
    let merged = tachy(&["merge", "--json", log.to_str().unwrap()]);
    merged.assert_success();
    let v: Value = serde_json::from_str(merged.stdout.trim()).unwrap();
    let mut again = std::collections::BTreeMap::new();
    for f in v["functions"].as_array().unwrap() {
        let key = format!("nested_o2/{}", f["name"].as_str().unwrap());
        *again.entry(key).or_default() += num(f, "count");
    }
    assert_eq!(again, want);
}

/// `tachy merge` adds `--cpu` parts exactly where every input has them and
/// drops them where one does not; `tachy diff` shows each part's average
/// per call and its change.
#[test]
fn merge_and_diff_keep_cpu_parts() {
    let dir = scratch("cpu");
    let line = |count: u64, cpu: Option<[u64; 3]>| {
        let cpu = match cpu {
            Some([on, bl, rq]) => format!(
                r#", "cpu": {{"oncpu_ns": {on}, "oncpu_share": 0.1, "blocked_ns": {bl}, "blocked_share": 0.8, "runnable_ns": {rq}, "runnable_share": 0.1}}"#
            ),
            None => String::new(),
        };
        format!(
            r#"{{"time": 1.0, "functions": [{{"name": "f", "raw_name": "f", "object": "/x", "count": {count}, "total_ns": {t}, "min_ns": 900, "max_ns": 1100, "log2_unit": "nsec", "buckets": [[960, {count}]], "unwound": 0, "filtered": 0, "overflow": 0, "indirect_tail": 0{cpu}}}]}}"#,
            t = count * 1000
        )
    };
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text + "\n").unwrap();
        p.to_str().unwrap().to_string()
    };
    let a = write("a.json", line(2, Some([600, 1200, 200])));
    let b = write("b.json", line(4, Some([1000, 2900, 100])));
    let c = write("c.json", line(2, None));
    let merged = tachy(&["merge", "--json", &a, &b]);
    merged.assert_success();
    let v: Value = serde_json::from_str(merged.stdout.trim()).unwrap();
    let cpu = &v["functions"][0]["cpu"];
    assert_eq!(
        [
            cpu["oncpu_ns"].clone(),
            cpu["blocked_ns"].clone(),
            cpu["runnable_ns"].clone()
        ],
        [1600, 4100, 300],
        "{merged}"
    );
    let text = tachy(&["merge", &a, &b]);
    text.assert_success();
    assert!(text.stdout.contains("on-CPU"), "{text}");
    // An input without the parts: the sum would be short, so none.
    let mixed = tachy(&["merge", "--json", &a, &c]);
    mixed.assert_success();
    let v: Value = serde_json::from_str(mixed.stdout.trim()).unwrap();
    assert_eq!(num(&v["functions"][0], "count"), 4);
    assert!(v["functions"][0].get("cpu").is_none(), "{mixed}");

    // Per call: on-CPU 300 -> 250 ns, blocked 600 -> 725, runnable 100 -> 25.
    let js = tachy(&["diff", "--json", &a, &b]);
    js.assert_success();
    let v: Value = serde_json::from_str(js.stdout.trim()).unwrap();
    let f = &v["functions"][0];
    for (side, want) in [("a", [300, 600, 100]), ("b", [250, 725, 25])] {
        let got: Vec<u64> = ["oncpu_avg_ns", "blocked_avg_ns", "runnable_avg_ns"]
            .iter()
            .map(|k| num(&f[side], k))
            .collect();
        assert_eq!(got, want, "{side}: {v}");
    }
    let ch = &f["change_percent"];
    assert_eq!(
        [
            ch["oncpu"].as_f64(),
            ch["blocked"].as_f64(),
            ch["runnable"].as_f64()
        ],
        [Some(-16.7), Some(20.8), Some(-75.0)],
        "{v}"
    );
    let diff = tachy(&["diff", &a, &c]);
    diff.assert_success();
    let row: Vec<&str> = diff
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("on-CPU "))
        .unwrap_or_else(|| panic!("{diff}"))
        .split_whitespace()
        .collect();
    assert_eq!(row, ["on-CPU", "300", "ns", "-", "-"], "{diff}");
}

#[test]
fn merge_and_diff_of_two_runs() {
    let _lock = common::needs_root!();
    let dir = scratch("two");
    let it = 300;
    let mut files = Vec::new();
    for run in ["one", "two"] {
        let out = trace_plain(&["--json", "--cpu", "slow_sum", "fast_path"], it);
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

    // --cpu: the merged parts are the sums of the runs' parts.
    let js = tachy(&["merge", "--json", &files[0], &files[1]]);
    js.assert_success();
    let merged: Value = serde_json::from_str(js.stdout.trim()).unwrap();
    for part in ["oncpu_ns", "blocked_ns", "runnable_ns"] {
        let of = |v: &Value| num(&func(v, "slow_sum")["cpu"], part);
        let runs: u64 = files
            .iter()
            .map(|f| {
                json_lines(&std::fs::read_to_string(f).unwrap())
                    .iter()
                    .filter(|r| r.get("functions").is_some())
                    .map(of)
                    .sum::<u64>()
            })
            .sum();
        assert_eq!(of(&merged), runs, "{part}: {js}");
    }

    let diff = tachy(&["diff", &files[0], &files[1]]);
    diff.assert_success();
    assert!(
        diff.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("blocked ")),
        "{diff}"
    );
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
    let line = |unit: &str| line_with(unit, 2, "[[1, 2]]");
    std::fs::write(&ns, line("nsec") + "\n").unwrap();
    std::fs::write(&us, line("usec") + "\n").unwrap();
    // 1984-2047 ns: 1.984 to 2.047 us, in two usec buckets.
    let straddles = dir.join("straddles.json");
    std::fs::write(
        &straddles,
        line_with("nsec", 3, "[[1, 2], [1984, 1]]") + "\n",
    )
    .unwrap();
    let garbage = dir.join("garbage.txt");
    std::fs::write(&garbage, "hello\n").unwrap();
    let nested = dir.join("nested.json");
    std::fs::write(&nested, "{\"time\": 1.0, \"roots\": []}\n").unwrap();
    let cases: [(&[&Path], &str); 5] = [
        (
            &[&us, &straddles],
            "straddles.json has buckets in nsec and",
        ),
        (
            &[&us, &straddles],
            "in usec, which they cannot be added to exactly: f: 1 call between 1984 and 2047 nsec, on both sides of 2 usec, where usec buckets part",
        ),
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

/// A report of -u's or -m's buckets and one of nanoseconds: bucket 1 ns
/// (0 us) and 2048-2175 ns (2 us) go whole into usec buckets, as in one
/// file with lines of both units and in `diff`.
#[test]
fn merge_and_diff_convert_buckets_into_the_coarser_unit_where_exact() {
    let dir = scratch("units");
    let ns = dir.join("ns.json");
    let us = dir.join("us.json");
    std::fs::write(&ns, line_with("nsec", 5, "[[1, 2], [2048, 3]]") + "\n").unwrap();
    std::fs::write(&us, line_with("usec", 2, "[[1, 2]]") + "\n").unwrap();
    let both = dir.join("both.json");
    std::fs::write(
        &both,
        line_with("nsec", 5, "[[1, 2], [2048, 3]]")
            + "\n"
            + &line_with("usec", 2, "[[1, 2]]")
            + "\n",
    )
    .unwrap();
    for files in [[&ns, &us], [&us, &ns]] {
        let out = tachy(&[
            "merge",
            "--json",
            files[0].to_str().unwrap(),
            files[1].to_str().unwrap(),
        ]);
        out.assert_success();
        let rep = out.single_report();
        let f = func(&rep, "f");
        assert_eq!(f["log2_unit"], "usec", "{rep}");
        assert_eq!(num(f, "count"), 7);
        assert_eq!(num(f, "total_ns"), 4000);
        assert_eq!(buckets_of(f), vec![(0, 2), (1, 2), (2, 3)]);
    }
    let out = tachy(&["merge", "--json", both.to_str().unwrap()]);
    out.assert_success();
    assert_eq!(
        buckets_of(func(&out.single_report(), "f")),
        vec![(0, 2), (1, 2), (2, 3)]
    );
    let out = tachy(&["diff", "--json", ns.to_str().unwrap(), us.to_str().unwrap()]);
    out.assert_success();
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["functions"][0]["a"]["count"], 5, "{v}");
    assert_eq!(v["functions"][0]["b"]["count"], 2, "{v}");
}

/// One line of a `tachy latency --json` report: function f with `count`
/// calls in `buckets` ([lowest value, calls]...) of `unit`.
fn line_with(unit: &str, count: u64, buckets: &str) -> String {
    format!(
        r#"{{"time": 1.0, "functions": [{{"name": "f", "raw_name": "f", "object": "/x", "count": {count}, "total_ns": 2000, "min_ns": 900, "max_ns": 1100, "log2_unit": "{unit}", "buckets": {buckets}, "unwound": 0, "filtered": 0, "overflow": 0, "indirect_tail": 0}}]}}"#
    )
}

// ---------------------------------------------------------------------------
// --prometheus and --textfile, read with Python's prometheus_client parsers
// (Debian's python3-prometheus-client, installed by `make deps`).
// ---------------------------------------------------------------------------

/// One HTTP GET of `path` on `addr`: (status line, body).
fn http_get(addr: &str, path: &str, openmetrics: bool) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = if openmetrics {
        "application/openmetrics-text; version=1.0.0"
    } else {
        "*/*"
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// The families of an exposition as prometheus_client parses it
/// (`openmetrics` or `text`); panics with the parser's message.
fn parse_exposition(text: &str, format: &str) -> Value {
    use std::io::Write;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/prom_parse.py");
    let mut child = std::process::Command::new("/usr/bin/python3")
        .arg(script)
        .arg(format)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("No module named 'prometheus_client'"),
        "python3-prometheus-client is missing (make deps installs it)"
    );
    assert!(out.status.success(), "{err}\n--- input ---\n{text}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A histogram of one function as parsed: (count, sum in seconds,
/// cumulative buckets (le, count) in order, labels of its `_count`).
fn parsed_histogram(fams: &Value, function: &str) -> (u64, f64, Vec<(f64, u64)>, Value) {
    let fam = &fams["tachy_function_duration_seconds"];
    assert_eq!(fam["type"], "histogram", "{fams}");
    let mine = |s: &&Value| s[1]["function"] == function;
    let samples: Vec<&Value> = fam["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(mine)
        .collect();
    let one = |suffix: &str| {
        samples
            .iter()
            .find(|s| s[0] == format!("tachy_function_duration_seconds{suffix}"))
            .unwrap_or_else(|| panic!("no {suffix} of {function} in {fams}"))
    };
    let count = one("_count")[2].as_f64().unwrap() as u64;
    let sum = one("_sum")[2].as_f64().unwrap();
    let labels = one("_count")[1].clone();
    let buckets = bucket_samples(
        samples.iter().copied(),
        "tachy_function_duration_seconds_bucket",
    );
    (count, sum, buckets, labels)
}

/// The samples named `name` (a histogram's `_bucket`) among `samples`, as
/// (le, cumulative count).
fn bucket_samples<'a>(samples: impl Iterator<Item = &'a Value>, name: &str) -> Vec<(f64, u64)> {
    samples
        .filter(|s| s[0] == name)
        .map(|s| {
            let le = s[1]["le"].as_str().unwrap();
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (le, s[2].as_f64().unwrap() as u64)
        })
        .collect()
}

/// The value of counter `family` for `function`.
fn parsed_counter(fams: &Value, family: &str, function: &str) -> u64 {
    fams[family]["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no {family} in {fams}"))
        .iter()
        .find(|s| s[1]["function"] == function)
        .unwrap_or_else(|| panic!("no {family} of {function}"))[2]
        .as_f64()
        .unwrap() as u64
}

/// Buckets cumulative and monotonic, `+Inf` last and equal to `_count`,
/// and the fixed bounds 2^k ns, k = 7..=35.
fn check_buckets(count: u64, buckets: &[(f64, u64)]) {
    let bounds: Vec<f64> = (7..=35).map(|k| (1u64 << k) as f64 / 1e9).collect();
    assert_eq!(buckets.len(), bounds.len() + 1, "{buckets:?}");
    for (i, b) in bounds.iter().enumerate() {
        assert!((buckets[i].0 - b).abs() <= b * 1e-12, "{buckets:?}");
    }
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
    assert_eq!(buckets.last(), Some(&(f64::INFINITY, count)));
}

#[test]
fn prometheus_scrapes_and_textfile_count_exactly() {
    let _lock = common::needs_root!();
    let dir = scratch("prometheus");
    let textfile = dir.join("tachy.prom");
    let exe = common::build("plain");
    let exe_s = exe.to_str().unwrap();
    // A path target: tracing goes on until tachy is stopped, whichever
    // processes come and go.
    let mut t = Tachy::start(
        &[
            "latency",
            "--json",
            "-i",
            "0.2",
            "--prometheus",
            "127.0.0.1:0",
            "--textfile",
            textfile.to_str().unwrap(),
            "--label",
            "env=ci",
            "--label",
            "host=h1",
            &format!("{exe_s}:slow_sum"),
            &format!("{exe_s}:fast_path"),
        ],
        &[],
    );
    let line = t.wait_for_lines(true, 1, Duration::from_secs(30), |l| {
        l.starts_with("tachy: serving metrics at http://")
    });
    let addr = line[0]
        .trim_start_matches("tachy: serving metrics at http://")
        .trim_end_matches("/metrics")
        .to_string();
    assert_eq!(http_get(&addr, "/", false).0, "HTTP/1.1 404 Not Found");
    let (status, before) = http_get(&addr, "/metrics", true);
    assert_eq!(status, "HTTP/1.1 200 OK");
    let fams = parse_exposition(&before, "openmetrics");
    assert_eq!(parsed_histogram(&fams, "slow_sum").0, 0);

    // Read the textfile as fast as possible while it is rewritten: every
    // read is a whole file, and its inode changes (renamed over).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, textfile) = (stop.clone(), textfile.clone());
        std::thread::spawn(move || {
            use std::io::Read;
            use std::os::unix::fs::MetadataExt;
            let (mut inodes, mut reads) = (std::collections::BTreeSet::new(), 0u64);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let mut f = std::fs::File::open(&textfile).unwrap();
                inodes.insert(f.metadata().unwrap().ino());
                let mut text = String::new();
                f.read_to_string(&mut text).unwrap();
                let last = text.lines().last().unwrap_or("");
                assert!(
                    text.ends_with('\n')
                        && last.starts_with(
                            "tachy_function_filtered_calls_total{function=\"fast_path\""
                        ),
                    "a partial textfile was read:\n{text}"
                );
                reads += 1;
            }
            (inodes, reads)
        })
    };
    let mut fx = Fixture::spawn("plain", &["600", "1"]);
    fx.go();
    let (status, stdout) = fx.wait();
    assert!(status.success());
    let made = counts(&stdout);

    // Scraped after the calls: exact counts, in both formats.
    let (_, om) = http_get(&addr, "/metrics", true);
    let (_, text) = http_get(&addr, "/metrics", false);
    let scraped = parse_exposition(&om, "openmetrics");
    for fams in [&scraped, &parse_exposition(&text, "text")] {
        for (name, floor_ns) in [("slow_sum", 300_000u64), ("fast_path", 200_000)] {
            let (count, sum, buckets, labels) = parsed_histogram(fams, name);
            assert_eq!(count, made[name], "{name}\n{om}");
            check_buckets(count, &buckets);
            // Every call sleeps at least floor_ns: none is shorter than the
            // bound below half of it, and the sum is at least floor x count.
            let half = floor_ns as f64 / 2e9;
            assert!(buckets.iter().filter(|b| b.0 < half).all(|b| b.1 == 0));
            assert!(
                sum >= 0.9 * (floor_ns * count) as f64 / 1e9,
                "{name} sum {sum}"
            );
            assert_eq!(labels["object"], exe_s);
            assert_eq!(labels["env"], "ci");
            assert_eq!(labels["host"], "h1");
            for counter in ["unwound", "filtered"] {
                let fam = format!("tachy_function_{counter}_calls");
                assert_eq!(parsed_counter(fams, &fam, name), 0);
            }
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (inodes, reads) = watcher.join().unwrap();
    // Rewritten every 0.2 s for a second or more.
    assert!(
        inodes.len() >= 3,
        "{} inodes in {reads} reads",
        inodes.len()
    );

    t.signal(libc::SIGINT);
    let out = t.finish(RUN_TIMEOUT);
    out.assert_success();
    let reports = json_lines(&out.stdout);
    let last = parse_exposition(&std::fs::read_to_string(&textfile).unwrap(), "text");
    for name in ["slow_sum", "fast_path"] {
        let (count, total_ns, _, _, _, kernel) = summed(&reports, name);
        assert_eq!(count, made[name], "{out}");
        for fams in [&scraped, &last] {
            let (n, sum, buckets, _) = parsed_histogram(fams, name);
            assert_eq!(n, count);
            // The same calls as tachy's own reports, whose totals are
            // whole nanoseconds.
            assert!(
                (sum * 1e9 - total_ns as f64).abs() < 1.0,
                "{sum} s vs {total_ns} ns"
            );
            for (le, cum) in &buckets[..buckets.len() - 1] {
                let below: u64 = kernel
                    .iter()
                    .filter(|(lo, _)| (*lo as f64) < le * 1e9 - 0.5)
                    .map(|(_, n)| n)
                    .sum();
                assert_eq!(*cum, below, "{name} le={le}");
            }
        }
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1, "temporary files left in {}", dir.display());
}

/// The groups of `function` in an exposition: the values of its labels
/// other than function, object, le and the user's env, joined by `,`,
/// mapped to (count, sum in seconds); each group's buckets checked.
fn parsed_groups(fams: &Value, function: &str) -> std::collections::BTreeMap<String, (u64, f64)> {
    let fam = "tachy_group_duration_seconds";
    assert_eq!(fams[fam]["type"], "histogram", "{fams}");
    let samples: Vec<&Value> = fams[fam]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[1]["function"] == function)
        .collect();
    let key = |labels: &Value| {
        labels
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| !["function", "object", "le", "env"].contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut out = std::collections::BTreeMap::new();
    for c in samples.iter().filter(|s| s[0] == format!("{fam}_count")) {
        let k = key(&c[1]);
        let mine: Vec<&&Value> = samples.iter().filter(|s| key(&s[1]) == k).collect();
        let sum = mine
            .iter()
            .find(|s| s[0] == format!("{fam}_sum"))
            .unwrap_or_else(|| panic!("no _sum of {k}"))[2]
            .as_f64()
            .unwrap();
        let buckets = bucket_samples(mine.iter().map(|s| **s), &format!("{fam}_bucket"));
        let count = c[2].as_f64().unwrap() as u64;
        check_buckets(count, &buckets);
        assert_eq!(c[1]["object"], mine[0][1]["object"]);
        assert_eq!(c[1]["env"], "ci", "{k}: the user's labels");
        assert!(out.insert(k.clone(), (count, sum)).is_none(), "{k} twice");
    }
    out
}

/// `--by caller` in the textfile: a histogram per caller (three callers,
/// 50, 30 and 20 calls), named as the text report names them, exact; with
/// `--top 2` the smallest is the "other" series; the records of
/// `--record-slower-than` counted.
#[test]
fn by_groups_and_records_are_metrics() {
    let _lock = common::needs_root!();
    let dir = scratch("groups");
    let textfile = dir.join("tachy.prom");
    let exe = common::build("why");
    let run = |opts: &[&str]| {
        let mut args = vec![
            "latency",
            "--textfile",
            textfile.to_str().unwrap(),
            "--label",
            "env=ci",
            "--by",
            "caller",
        ];
        args.extend_from_slice(opts);
        args.extend(["target", "--", exe.to_str().unwrap(), "callers", "10"]);
        let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT);
        out.assert_success();
        let lines = common::tagged(&format!("{}\n{}", out.stdout, out.stderr), "line");
        let text = std::fs::read_to_string(&textfile).unwrap();
        (out, lines, parse_exposition(&text, "text"))
    };

    let (out, lines, fams) = run(&[]);
    let at = |c: &str| format!("caller={c} at why.c:{}", lines[c]);
    let groups = parsed_groups(&fams, "target");
    let counts: Vec<(String, u64)> = groups.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    let mut want = vec![
        (at("caller_one"), 50),
        (at("caller_two"), 30),
        (at("caller_three"), 20),
    ];
    want.sort();
    assert_eq!(counts, want, "{out}");
    // Each call sleeps 200 us.
    for (k, (n, sum)) in &groups {
        assert!(*sum >= 0.9 * 200e-6 * *n as f64, "{k}: {sum} s");
    }
    assert_eq!(parsed_histogram(&fams, "target").0, 100);
    assert!(fams.get("tachy_records").is_none(), "{fams}");

    let (out, lines, fams) = run(&["--top", "2", "--record-slower-than", "0ns"]);
    let at = |c: &str| format!("caller={c} at why.c:{}", lines[c]);
    let counts: Vec<(String, u64)> = parsed_groups(&fams, "target")
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    let mut want = vec![
        (at("caller_one"), 50),
        (at("caller_two"), 30),
        ("caller=other".to_string(), 20),
    ];
    want.sort();
    assert_eq!(counts, want, "{out}");
    // One record per call, none lost; labelled with the user's labels.
    let records = |fam: &str| {
        let s = &fams[fam]["samples"][0];
        assert_eq!(s[1], serde_json::json!({"env": "ci"}), "{fams}");
        s[2].as_f64().unwrap() as u64
    };
    assert_eq!(records("tachy_records"), 100, "{out}");
    assert_eq!(records("tachy_records_lost"), 0, "{out}");
}

#[test]
fn prometheus_bad_label_or_busy_port_attaches_nothing() {
    let _lock = common::serial();
    // Usage errors: exit 2, before anything else.
    for (args, says) in [
        (
            vec!["--prometheus", "9464", "--label", "bad-name=x"],
            "is not a label name",
        ),
        (
            vec!["--prometheus", "9464", "--label", "function=x"],
            "is a label tachy sets itself",
        ),
        (vec!["--label", "env=x"], "give --prometheus or --textfile"),
        (
            vec!["--textfile", "x.prom", "--label", "a=1", "--label", "a=2"],
            "--label a is given twice",
        ),
        (vec!["--prometheus", "9464", "-u"], "metrics are in seconds"),
        (
            vec!["--textfile", "x.prom", "--by", "tid", "--label", "comm=x"],
            "--label comm: with --by, comm is a label tachy sets itself",
        ),
        (
            vec![
                "--textfile",
                "x.prom",
                "--by",
                "caller",
                "--label",
                "caller=x",
            ],
            "is a label tachy sets itself",
        ),
        (vec!["--prometheus", "nowhere"], "is not ADDR:PORT"),
    ] {
        let mut all = vec!["latency"];
        all.extend(args.iter().copied());
        all.extend(["-p", "1", "slow_sum"]);
        let out = tachy(&all);
        assert_eq!(out.code(), Some(2), "{out}");
        assert!(out.stderr.contains(says), "{out}");
    }
    if common::skip_unless_root() {
        return;
    }
    // A busy port: one line, exit 1, and the process is never probed.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().to_string();
    let mut fx = Fixture::spawn("plain", &["20", "1"]);
    let pid = fx.pid().to_string();
    let out = tachy(&["latency", "--prometheus", &port, "-p", &pid, "slow_sum"]);
    assert_eq!(out.code(), Some(1), "{out}");
    assert_eq!(
        out.stderr.trim_end(),
        format!("tachy: cannot listen on {port} for --prometheus: address already in use"),
        "{out}"
    );
    assert!(!out.stdout.contains("Tracing"), "{out}");
    fx.go();
    let (status, stdout) = fx.wait();
    assert!(status.success());
    assert_eq!(counts(&stdout)["slow_sum"], 20);
}

// ---------------------------------------------------------------------------
// Scoping: --cgroup, several -p, --comm / --pgrep.
// ---------------------------------------------------------------------------

/// The `processes` of a JSON report: pid -> calls entered.
fn processes(rep: &Value) -> std::collections::BTreeMap<u64, u64> {
    rep["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("no processes in {rep}"))
        .iter()
        .map(|p| (num(p, "pid"), num(p, "calls")))
        .collect()
}

/// A cgroup v2 directory made for one test, removed (with any process
/// still in it killed) when dropped.
struct TestCgroup(PathBuf);

impl TestCgroup {
    /// None (after printing why) where cgroup v2 is not mounted writable.
    fn new(name: &str) -> Option<TestCgroup> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mount = info.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            (right.split(' ').next()? == "cgroup2")
                .then(|| left.split(' ').nth(4).map(PathBuf::from))?
        });
        let Some(mount) = mount else {
            common::skip("cgroup v2 is not mounted");
            return None;
        };
        let dir = mount.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&dir);
        if let Err(e) = std::fs::create_dir(&dir) {
            common::skip(&format!(
                "cgroup v2 at {} is not writable: {e}",
                mount.display()
            ));
            return None;
        }
        Some(TestCgroup(dir))
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Ok(pids) = std::fs::read_to_string(self.0.join("cgroup.procs")) {
            for p in pids.lines().filter_map(|l| l.parse::<i32>().ok()) {
                // SAFETY: kill on a process this test put in its cgroup.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
        }
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `tachy latency --json -p A,B slow_sum` over fixtures `a` and `b`, which
/// start once tachy is attached; no Ctrl-C: tachy ends when both have.
/// Its outcome, and the two pids.
fn slow_sum_of_both(mut a: Fixture, mut b: Fixture) -> (Outcome, u32, u32) {
    let (pa, pb) = (a.pid(), b.pid());
    let both = format!("{pa},{pb}");
    let mut t = Tachy::start(&["latency", "--json", "-p", &both, "slow_sum"], &[]);
    t.wait_for_header(true);
    a.go();
    b.go();
    assert!(a.wait().0.success());
    assert!(b.wait().0.success());
    (t.finish(RUN_TIMEOUT), pa, pb)
}

#[test]
fn cgroup_counts_its_processes_started_before_and_after_attach_only() {
    let _lock = common::needs_root!();
    let Some(cg) = TestCgroup::new("tachy-fleet") else {
        return;
    };
    let exe = common::build("plain");
    let exe_s = exe.to_str().unwrap();
    let cg_s = cg.0.to_str().unwrap();
    let mut inside = Fixture::spawn("plain", &["100", "1"]);
    cg.add(inside.pid());
    let mut outside = Fixture::spawn("plain", &["70", "1"]);
    let mut t = Tachy::start(
        &[
            "latency",
            "--json",
            "--cgroup",
            cg_s,
            &format!("{exe_s}:slow_sum"),
            &format!("{exe_s}:fast_path"),
        ],
        &[],
    );
    t.wait_for_header(true);
    inside.go();
    outside.go();
    // Started after tachy attached, then put in the cgroup.
    let mut late = Fixture::spawn("plain", &["150", "1"]);
    cg.add(late.pid());
    late.go();
    let pids = [inside.pid(), late.pid()].map(u64::from);
    let outside_pid = u64::from(outside.pid());
    let mut made = std::collections::BTreeMap::new();
    for fx in [inside, outside, late] {
        let (status, stdout) = fx.wait();
        assert!(status.success());
        made.insert(made.len(), counts(&stdout));
    }
    t.signal(libc::SIGINT);
    let out = t.finish(RUN_TIMEOUT);
    out.assert_success();
    let rep = out.single_report();
    assert_eq!(num(func(&rep, "slow_sum"), "count"), 100 + 150, "{out}");
    assert_eq!(num(func(&rep, "fast_path"), "count"), 200 + 300, "{out}");
    assert_eq!(made[&1]["slow_sum"], 70, "the outside process ran");
    let procs = processes(&rep);
    assert_eq!(procs.get(&pids[0]), Some(&300), "{rep}");
    assert_eq!(procs.get(&pids[1]), Some(&450), "{rep}");
    assert!(!procs.contains_key(&outside_pid), "{rep}");
    assert!(out.stderr.contains(&format!("in cgroup {cg_s}")), "{out}");
    // With nobody in it, a bare name has no process to be looked up in.
    let out = tachy(&["latency", "--cgroup", cg_s, "slow_sum"]);
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(out.stderr.contains("no process runs in it now"), "{out}");
}

#[test]
fn several_pids_are_counted_each_and_the_trace_ends_with_the_last() {
    let _lock = common::needs_root!();
    let a = Fixture::spawn("plain", &["100", "1"]);
    let b = Fixture::spawn("plain", &["60", "1"]);
    let (out, pa, pb) = slow_sum_of_both(a, b);
    out.assert_success();
    let rep = out.single_report();
    assert_eq!(num(func(&rep, "slow_sum"), "count"), 160, "{out}");
    let procs = processes(&rep);
    assert_eq!(procs.len(), 2, "{rep}");
    assert_eq!(procs[&u64::from(pa)], 100, "{rep}");
    assert_eq!(procs[&u64::from(pb)], 60, "{rep}");
    let comms: Vec<&str> = rep["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["comm"].as_str().unwrap())
        .collect();
    assert_eq!(comms, ["plain", "plain"], "{rep}");
}

/// Processes of different programs (here a copy of the fixture, another
/// file): the functions are found in each program and traced in both,
/// each process's calls counted.
/// With several processes, the `processes` line counts calls entered and
/// a `--by pid` table calls timed, and the report says so: two processes
/// of the C++ fixture, whose shop::risky(int) leaves by exception in half
/// its calls (I/2 * T), each entered I * T times.
#[test]
fn processes_line_counts_calls_entered_and_by_pid_calls_timed() {
    let _lock = common::needs_root!();
    let mut a = Fixture::spawn("cpp_o2", &["20", "2"]);
    let mut b = Fixture::spawn("cpp_o2", &["10", "2"]);
    let (pa, pb) = (a.pid(), b.pid());
    let both = format!("{pa},{pb}");
    let mut t = Tachy::start(
        &["latency", "-p", &both, "--by", "pid", "shop::risky(int)"],
        &[],
    );
    t.wait_for_header(false);
    a.go();
    b.go();
    let (sa, outa) = a.wait();
    let (sb, outb) = b.wait();
    assert!(sa.success() && sb.success());
    assert_eq!(counts(&outa)["shop::risky(int)"], 40);
    assert_eq!(counts(&outb)["shop::risky(int)"], 20);
    let out = t.finish(RUN_TIMEOUT);
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("avg = ") && l.ends_with(", count: 30")),
        "{out}"
    );
    assert!(lines.contains(&"left by exception or unwind: 30"), "{out}");
    // The --by pid table: calls timed, those that returned.
    let by_pid: Vec<(u32, u64)> = lines
        .iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["pid", pid, "(cpp_o2)", "count", n, ..] => {
                    Some((pid.parse().ok()?, n.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect();
    assert_eq!(by_pid, [(pa, 20), (pb, 10)], "{out}");
    // The processes line: calls entered, and it says that those hold the
    // calls count leaves out (here the 30 left by exception).
    let want = format!(
        "processes, by calls entered (timed or not: also those left by exception, \
         filtered out or still running, which count leaves out): \
         {pa} (cpp_o2) 40, {pb} (cpp_o2) 20"
    );
    assert!(lines.contains(&want.as_str()), "{out}");
}

#[test]
fn several_pids_of_different_programs_are_each_traced() {
    let _lock = common::needs_root!();
    let dir = scratch("two-programs");
    let copy = dir.join("plain_copy");
    std::fs::copy(common::build("plain"), &copy).unwrap();
    let a = Fixture::spawn("plain", &["100", "1"]);
    let mut cmd = std::process::Command::new(&copy);
    cmd.args(["60", "1"]);
    let b = Fixture::spawn_command("plain", cmd);
    let (out, pa, pb) = slow_sum_of_both(a, b);
    out.assert_success();
    let rep = out.single_report();
    let mut by_object: Vec<(String, u64)> = rep["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == "slow_sum")
        .map(|f| {
            let obj = f["object"].as_str().unwrap();
            (obj.rsplit('/').next().unwrap().to_string(), num(f, "count"))
        })
        .collect();
    by_object.sort();
    assert_eq!(
        by_object,
        [("plain".to_string(), 100), ("plain_copy".to_string(), 60)],
        "{out}"
    );
    let procs = processes(&rep);
    assert_eq!(procs[&u64::from(pa)], 100, "{rep}");
    assert_eq!(procs[&u64::from(pb)], 60, "{rep}");
}

#[test]
fn comm_and_pgrep_find_processes_by_name() {
    let _lock = common::serial();
    // Errors before anything is attached.
    let out = tachy(&["latency", "--comm", "nosuchcommxyz", "slow_sum"]);
    assert_eq!(out.code(), Some(1), "{out}");
    assert_eq!(
        out.stderr.trim_end(),
        "tachy: --comm nosuchcommxyz: no running process has that command name"
    );
    let out = tachy(&["latency", "--pgrep", "^nosuch[0-9]xyz$", "slow_sum"]);
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(
        out.stderr
            .contains("no running process's command name matches"),
        "{out}"
    );
    // A pattern that does not compile is a usage error.
    let out = tachy(&["latency", "--pgrep", "(", "slow_sum"]);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.starts_with("error: --pgrep \"(\": "), "{out}");
    let out = tachy(&["latency", "--comm", "x", "-p", "1", "slow_sum"]);
    assert_eq!(out.code(), Some(2), "{out}");
    if common::skip_unless_root() {
        return;
    }
    // A copy of the fixture under a name no other process has.
    let dir = scratch("comm");
    let exe = dir.join("fleetcommfx");
    std::fs::copy(common::build("plain"), &exe).unwrap();
    let start = |n: &str| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([n, "1"]);
        Fixture::spawn_command("fleetcommfx", cmd)
    };
    for (flag, pattern) in [("--comm", "fleetcommfx"), ("--pgrep", "^fleetcomm(fx|zz)$")] {
        let mut a = start("80");
        let mut b = start("40");
        let mut t = Tachy::start(&["latency", "--json", flag, pattern, "slow_sum"], &[]);
        t.wait_for_header(true);
        a.go();
        b.go();
        let made = counts(&a.wait().1)["slow_sum"] + counts(&b.wait().1)["slow_sum"];
        let out = t.finish(RUN_TIMEOUT);
        out.assert_success();
        let rep = out.single_report();
        assert_eq!(num(func(&rep, "slow_sum"), "count"), made, "{flag}\n{out}");
        let mut calls: Vec<u64> = processes(&rep).into_values().collect();
        calls.sort_unstable();
        assert_eq!(calls, [40, 80], "{flag}\n{rep}");
    }
}

/// A report of function f: `count` calls over `interval_s` seconds, in the
/// given nanosecond buckets.
fn gate_report(interval_s: u64, total_ns: u64, max_ns: u64, buckets: &str) -> String {
    format!(
        r#"{{"time": 1.0, "interval_s": {interval_s}, "functions": [{{"name": "f", "raw_name": "f", "object": "/x", "count": 100, "total_ns": {total_ns}, "min_ns": 1000, "max_ns": {max_ns}, "log2_unit": "nsec", "buckets": {buckets}, "unwound": 0, "filtered": 0, "overflow": 0, "indirect_tail": 0}}]}}"#
    ) + "\n"
}

/// `diff --fail-on`: exit 1 and a line per crossed bound; 0 when none is
/// crossed; 2 when an input cannot be read; a bound that cannot be judged
/// is named and does not fail.
#[test]
fn diff_fail_on_names_each_crossed_bound() {
    let dir = scratch("gate");
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    // 100 calls of 1 us; then 10 of them 4.1 us; then the first at half
    // the rate.
    let a = write("a.json", gate_report(10, 100_000, 1000, "[[1000, 100]]"));
    let b = write(
        "b.json",
        gate_report(10, 130_000, 4100, "[[1000, 90], [4096, 10]]"),
    );
    let slow = write("slow.json", gate_report(20, 100_000, 1000, "[[1000, 100]]"));
    let bounds = |args: &[&str]| -> Vec<String> {
        args.iter()
            .flat_map(|b| ["--fail-on".to_string(), b.to_string()])
            .collect()
    };
    let run = |x: &str, y: &str, b: &[&str]| {
        let mut args = vec!["diff".to_string(), x.to_string(), y.to_string()];
        args.extend(bounds(b));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tachy(&args)
    };
    let verdict = |out: &Outcome| -> Vec<String> {
        out.stdout
            .split("\nfail-on: ")
            .nth(1)
            .unwrap_or_else(|| panic!("{out}"))
            .lines()
            .map(str::to_string)
            .collect()
    };

    let out = run(
        &a,
        &b,
        &["p99 > +10%", "avg > +20%", "max > 4us", "p50 > +1%"],
    );
    assert_eq!(out.code(), Some(1), "{out}");
    assert_eq!(
        verdict(&out),
        [
            "FAILED (p99 > +10%, avg > +20%, max > 4us, p50 > +1%)",
            "  f [/x]: crossed p99 > +10%: 1.0 us -> 4.1 us (+310.0%)",
            "  f [/x]: crossed avg > +20%: 1.0 us -> 1.3 us (+30.0%)",
            "  f [/x]: crossed max > 4us: 1.0 us -> 4.1 us (+310.0%)",
        ],
        "{out}"
    );

    let out = run(&a, &a, &["p99 > +10%", "avg >= +0.1%"]);
    assert_eq!(out.code(), Some(0), "{out}");
    assert_eq!(verdict(&out), ["passed (p99 > +10%, avg >= +0.1%)"]);

    // Rates from each report's interval: 10 calls/s, then 5.
    let out = run(&a, &slow, &["rate < -25%", "count < -1%"]);
    assert_eq!(out.code(), Some(1), "{out}");
    assert_eq!(
        verdict(&out),
        [
            "FAILED (rate < -25%, count < -1%)",
            "  f [/x]: crossed rate < -25%: 10 -> 5 (-50.0%)",
        ]
    );

    // A report that does not say how long it covered has no rate.
    let no_span = write(
        "no_span.json",
        gate_report(10, 100_000, 1000, "[[1000, 100]]").replace("\"interval_s\": 10, ", ""),
    );
    let out = run(&a, &no_span, &["rate < -25%"]);
    assert_eq!(out.code(), Some(0), "{out}");
    assert_eq!(
        verdict(&out),
        [
            "passed (rate < -25%)",
            "  f [/x]: not judged (a side lacks the figure) rate < -25%: 10 -> -",
        ]
    );

    // JSON carries the verdicts.
    let js = tachy(&["diff", "--json", &a, &b, "--fail-on", "p99 > +10%"]);
    assert_eq!(js.code(), Some(1), "{js}");
    let v: Value = serde_json::from_str(js.stdout.trim()).unwrap();
    assert_eq!(v["fail_on"]["failed"], true, "{js}");
    assert_eq!(v["fail_on"]["verdicts"][0]["bound"], "p99 > +10%");
    assert_eq!(v["fail_on"]["verdicts"][0]["crossed"], true);
    assert_eq!(v["fail_on"]["verdicts"][0]["a"], 1000.0);
    assert_eq!(v["fail_on"]["verdicts"][0]["b"], 4100.0);

    // Trouble is 2; a bad bound is a usage error (2), one line.
    let out = tachy(&["diff", &a, "/nonexistent.json", "--fail-on", "p99 > +10%"]);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(
        out.stderr.contains("cannot read /nonexistent.json"),
        "{out}"
    );
    let out = tachy(&["diff", &a, &b, "--fail-on", "p98 > +10%"]);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("unknown figure \"p98\""), "{out}");
}

/// A log still being written ends in half a line: merge and diff read the
/// whole intervals before it and say that the last line was left out.
#[test]
fn an_unfinished_last_log_line_is_left_out_with_a_warning() {
    let dir = scratch("unfinished");
    let json = dir.join("b.json");
    std::fs::write(
        &json,
        gate_report(10, 130_000, 4100, "[[1000, 90], [4096, 10]]"),
    )
    .unwrap();
    let log = dir.join("b.hlog");
    tachy(&[
        "merge",
        "--hlog",
        log.to_str().unwrap(),
        json.to_str().unwrap(),
    ])
    .assert_success();
    let whole = std::fs::read_to_string(&log).unwrap();
    let last = whole.lines().last().unwrap();
    let growing = dir.join("growing.hlog");
    std::fs::write(&growing, format!("{whole}{}", &last[..30])).unwrap();
    let out = tachy(&["merge", "--json", growing.to_str().unwrap()]);
    out.assert_success();
    assert_eq!(
        out.stderr.trim(),
        format!(
            "tachy: {}: the last line is incomplete (still being written?): left out",
            growing.display()
        )
    );
    assert_eq!(num(func(&out.single_report(), "f"), "count"), 100);
    // A whole file that ends without a newline is still read whole.
    std::fs::write(&growing, whole.trim_end()).unwrap();
    let out = tachy(&["merge", "--json", growing.to_str().unwrap()]);
    out.assert_success();
    assert_eq!(out.stderr, "");
}
