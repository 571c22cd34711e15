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

const PERCENTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

#[test]
fn hlog_intervals_read_back_exactly() {
    let _lock = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let dir = scratch("hlog");
    let log = dir.join("plain.hlog");
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
