//! Prometheus / OpenMetrics exposition of the run's cumulative counters
//! (`--prometheus`, `--textfile`), encoded with the prometheus-client
//! crate's OpenMetrics text encoder through a collector that hands it
//! counts already aggregated by the kernel. Pure: serving and writing files
//! belong to `crate::export`.
//!
//! Histogram buckets are a fixed set, the same on every host and for every
//! function, so that series from many hosts add up: `le` is 2^k ns for
//! k = 7..=35 (128 ns, 256 ns, ... 17.2 s, 34.4 s), written in seconds, and
//! `+Inf`. Each is a boundary of the kernel's log2 x 16 buckets, so every
//! count is exact: a bucket counts the calls shorter than its bound (whole
//! nanoseconds; a call of exactly 2^k ns goes to the next bucket).
//!
//! `--by` groups are series of their own family, `tachy_group_duration`,
//! with a label per key (see [`GroupTally`] for how many and which).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::counts::Counts;
use super::groups::{label, KeyValue};
use super::hist::{bucket_range, Hist};

/// The exponents k of the bucket bounds 2^k ns.
pub const BOUND_LOG2: std::ops::RangeInclusive<u32> = 7..=35;

/// Label names tachy sets itself, which `--label` may not use; `le` and
/// `quantile` belong to the exposition format.
pub const RESERVED_LABELS: &[&str] = &[
    "function", "object", "caller", "site", "location", "le", "quantile",
];

/// What a series measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesKind {
    /// A traced function (`tachy latency`, or the root of `tachy nested`).
    Function,
    /// A call site of `tachy nested`.
    Site,
    /// The calls of a traced function in one `--by` group.
    Group,
}

/// One labelled set of counters: a histogram in nanoseconds and the calls
/// it does not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    pub kind: SeriesKind,
    /// Label names and values, in order (user labels last).
    pub labels: Vec<(String, String)>,
    /// Durations in nanoseconds, in the kernel's buckets.
    pub hist: Hist,
    pub count: u64,
    pub total_ns: u64,
    pub unwound: u64,
    pub filtered: u64,
    /// `--filter`: calls its expression rejected at their entry (None: no
    /// filter on this function).
    pub arg_filtered: Option<u64>,
}

/// Whether `name` may name a label: `[a-zA-Z_][a-zA-Z0-9_]*`, and not
/// starting with `__` (reserved for Prometheus itself).
pub fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && !name.starts_with("__")
}

/// The bucket bounds, in seconds, without `+Inf`.
pub fn bounds_seconds() -> Vec<f64> {
    BOUND_LOG2.map(|k| (1u64 << k) as f64 / 1e9).collect()
}

/// Per-bucket (not cumulative) counts for the bounds of
/// [`bounds_seconds`] and `+Inf`, as the encoder takes them. A bucket
/// never holds more than `count` (the `+Inf` bucket, equal to `_count`).
fn buckets(s: &Series) -> Vec<(f64, u64)> {
    let mut below = vec![0u64; BOUND_LOG2.clone().count()];
    for (b, &n) in s.hist.buckets.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let (_, hi) = bucket_range(b);
        // The first bound above every value of this bucket; 2^k is always a
        // kernel bucket's lower end, so no bucket straddles a bound.
        let first = BOUND_LOG2
            .clone()
            .position(|k| hi < (1u64 << k))
            .unwrap_or(below.len());
        for slot in below.iter_mut().skip(first) {
            *slot += n;
        }
    }
    let mut out = Vec::with_capacity(below.len() + 1);
    let mut prev = 0;
    for (bound, cum) in bounds_seconds().into_iter().zip(below) {
        let cum = cum.min(s.count).max(prev);
        out.push((bound, cum - prev));
        prev = cum;
    }
    out.push((f64::INFINITY, s.count - prev));
    out
}

/// The families of one kind of series: name stem, help of the histogram.
fn stem(kind: SeriesKind) -> (&'static str, &'static str) {
    match kind {
        SeriesKind::Function => (
            "tachy_function_duration",
            "Duration of the calls of a traced function",
        ),
        SeriesKind::Site => (
            "tachy_site_duration",
            "Duration of the calls made at one call site of a function broken down by tachy nested",
        ),
        SeriesKind::Group => (
            "tachy_group_duration",
            "Duration of the calls of a traced function in one --by group",
        ),
    }
}

/// A counter family: its name after the stem, its help, and its value.
type Counter = (&'static str, &'static str, fn(&Series) -> u64);

/// `--record-slower-than`: the calls recorded and the records the ring
/// buffer had no room for, since tracing began.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordCounts {
    /// The user's labels.
    pub labels: Vec<(String, String)>,
    pub recorded: u64,
    pub lost: u64,
}

/// The collector handed to prometheus-client: every series, with the
/// histograms and counters of each kind of series as one family each, and
/// the record counters.
#[derive(Debug)]
struct Snapshot(Vec<Series>, Option<RecordCounts>);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for kind in [SeriesKind::Function, SeriesKind::Site, SeriesKind::Group] {
            let series: Vec<&Series> = self.0.iter().filter(|s| s.kind == kind).collect();
            if series.is_empty() {
                continue;
            }
            let (name, help) = stem(kind);
            let seconds = Unit::Seconds;
            let mut family =
                encoder.encode_descriptor(name, help, Some(&seconds), MetricType::Histogram)?;
            for s in &series {
                let labels = &s.labels;
                let mut m = family.encode_family(labels)?;
                m.encode_histogram::<NoLabelSet>(
                    s.total_ns as f64 / 1e9,
                    s.count,
                    &buckets(s),
                    None,
                )?;
            }
            // The kernel counts unwound and filtered calls per function,
            // not per group.
            if kind == SeriesKind::Group {
                continue;
            }
            let counters: [Counter; 2] = [
                (
                    "unwound_calls",
                    "Calls left by an exception, longjmp or unwinding, not in the histogram",
                    |s| s.unwound,
                ),
                (
                    "filtered_calls",
                    "Completed calls left out of the histogram by --slower-than or --faster-than",
                    |s| s.filtered,
                ),
            ];
            let prefix = name.trim_end_matches("_duration");
            let rejected: Vec<(&Series, u64)> = series
                .iter()
                .filter_map(|s| Some((*s, s.arg_filtered?)))
                .collect();
            if !rejected.is_empty() {
                let name = format!("{prefix}_rejected_calls");
                let mut family = encoder.encode_descriptor(
                    &name,
                    "Calls --filter rejected at their entry, by their arguments",
                    None,
                    MetricType::Counter,
                )?;
                for (s, n) in &rejected {
                    let labels = &s.labels;
                    let mut m = family.encode_family(labels)?;
                    m.encode_counter::<NoLabelSet, _, u64>(n, None)?;
                }
            }
            for (suffix, help, value) in counters {
                let name = format!("{prefix}_{suffix}");
                let mut family =
                    encoder.encode_descriptor(&name, help, None, MetricType::Counter)?;
                for s in &series {
                    let labels = &s.labels;
                    let mut m = family.encode_family(labels)?;
                    m.encode_counter::<NoLabelSet, _, u64>(&value(s), None)?;
                }
            }
        }
        if let Some(r) = &self.1 {
            for (name, help, n) in [
                (
                    "tachy_records",
                    "Calls recorded by --record-slower-than",
                    r.recorded,
                ),
                (
                    "tachy_records_lost",
                    "Records of --record-slower-than the ring buffer had no room for",
                    r.lost,
                ),
            ] {
                let mut family =
                    encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
                let mut m = family.encode_family(&r.labels)?;
                m.encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        Ok(())
    }
}

/// The OpenMetrics text exposition of `series` (and of the record
/// counters, with `--record-slower-than`), ending with `# EOF`.
pub fn render_openmetrics(series: &[Series], records: Option<&RecordCounts>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot(series.to_vec(), records.cloned())));
    let mut out = String::new();
    // Writing into a String cannot fail; the encoder fails only on a
    // writer error.
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

/// The same exposition in Prometheus's older text format (0.0.4), which
/// node_exporter's textfile collector and plain HTTP clients read: no `#
/// UNIT` or `# EOF` lines, and a counter family named as its `_total`
/// samples.
pub fn openmetrics_to_text(om: &str) -> String {
    let counters: Vec<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        let line: Cow<str> = renamed.map_or(Cow::Borrowed(line), Cow::Owned);
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The label value of a function's groups past the bound of [`GroupTally`].
pub const OTHER: &str = "other";
/// The label value of a function's calls the kernel's group map had no
/// room for.
pub const NOT_GROUPED: &str = "not grouped";
/// Groups per function with a series of their own when `--top` is not
/// given.
pub const DEFAULT_GROUP_SERIES: usize = 20;

/// The label a `--by` key's values go in: the key as `--by` names it
/// (`caller`, `tid`, `pid`, `arg1`, a parameter's name), or `by_` and the
/// key where that is not a label name or is one the group series already
/// have (`function`, `object`, `comm`).
pub fn group_label_name(key: &str) -> String {
    const TAKEN: &[&str] = &["function", "object", "comm", "le", "quantile"];
    if valid_label_name(key) && !TAKEN.contains(&key) {
        return key.to_string();
    }
    let safe: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("by_{safe}")
}

/// The labels of a group: one per key (a thread or process by its number,
/// a caller as `function at file:line`), then `comm` with the name of the
/// thread or process when a key has one.
fn key_labels(by: &[String], keys: &[KeyValue]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = by
        .iter()
        .zip(keys)
        .map(|(name, k)| (group_label_name(name), k.metric_value()))
        .collect();
    if let Some(comm) = keys.iter().find_map(KeyValue::comm) {
        out.push(("comm".into(), comm.to_string()));
    }
    out
}

/// One function's groups in [`GroupTally`].
#[derive(Clone, Debug, Default)]
struct FuncGroups {
    /// The groups with a series, in the order they got it.
    named: Vec<(Vec<KeyValue>, Counts)>,
    /// Index in `named` by the group's text label.
    at: HashMap<String, usize>,
    /// The groups past the bound, added up.
    other: Counts,
    /// The calls the kernel's group map had no room for.
    unkept: Counts,
}

/// `--by` groups as metrics, counted since tracing began. Per function, the
/// first `bound` groups seen (the largest by total time among those a read
/// of the kernel's map first sees) keep a series of their own for the
/// whole run; groups seen later are added up in one series whose key
/// labels are all [`OTHER`], and calls the kernel's map had no room for in
/// one whose key labels are all [`NOT_GROUPED`]. A group never moves
/// between series, so every series only grows, as counters must for
/// Prometheus's `rate()`, and a scrape holds at most `bound + 2` group
/// histograms per function.
#[derive(Clone, Debug)]
pub struct GroupTally {
    by: Vec<String>,
    bound: usize,
    funcs: Vec<FuncGroups>,
}

impl GroupTally {
    /// Groups by the keys `by` (as `--by` names them), at most `bound`
    /// named groups per function.
    pub fn new(by: Vec<String>, bound: usize) -> GroupTally {
        GroupTally {
            by,
            bound,
            funcs: Vec::new(),
        }
    }

    /// Adds one read of the kernel's groups: (function id, the group's key
    /// values or None for the calls not grouped, its counts).
    pub fn add(&mut self, read: Vec<(u32, Option<Vec<KeyValue>>, Counts)>) {
        let mut new: Vec<(u32, String, Vec<KeyValue>, Counts)> = Vec::new();
        for (id, keys, counts) in read {
            let id_us = id as usize;
            if self.funcs.len() <= id_us {
                self.funcs.resize_with(id_us + 1, FuncGroups::default);
            }
            let f = &mut self.funcs[id_us];
            let Some(keys) = keys else {
                f.unkept.merge(&counts);
                continue;
            };
            let name = label(&keys);
            if let Some(&i) = f.at.get(&name) {
                f.named[i].1.merge(&counts);
            } else if let Some(n) = new.iter_mut().find(|n| n.0 == id && n.1 == name) {
                n.3.merge(&counts);
            } else {
                new.push((id, name, keys, counts));
            }
        }
        new.sort_by(|a, b| {
            (b.3.total_ns, b.3.count, &a.1)
                .cmp(&(a.3.total_ns, a.3.count, &b.1))
                .then_with(|| a.0.cmp(&b.0))
        });
        for (id, name, keys, counts) in new {
            let f = &mut self.funcs[id as usize];
            if f.named.len() < self.bound {
                f.at.insert(name, f.named.len());
                f.named.push((keys, counts));
            } else {
                f.other.merge(&counts);
            }
        }
    }

    /// The group series, labelled with `function_labels(id)` first; the
    /// "other" and "not grouped" series once they have had calls.
    pub fn series(&self, function_labels: impl Fn(u32) -> Vec<(String, String)>) -> Vec<Series> {
        let mut out = Vec::new();
        for (id, f) in self.funcs.iter().enumerate() {
            let base = function_labels(id as u32);
            let folds = [(OTHER, &f.other), (NOT_GROUPED, &f.unkept)];
            let named = f
                .named
                .iter()
                .map(|(keys, c)| (key_labels(&self.by, keys), c));
            let folded = folds
                .into_iter()
                .filter(|(_, c)| c.count > 0)
                .map(|(v, c)| {
                    let labels = self
                        .by
                        .iter()
                        .map(|n| (group_label_name(n), v.to_string()))
                        .collect();
                    (labels, c)
                });
            for (keys, c) in named.chain(folded) {
                let mut labels = base.clone();
                labels.extend(keys);
                out.push(Series {
                    kind: SeriesKind::Group,
                    labels,
                    hist: c.hist.clone(),
                    count: c.count,
                    total_ns: c.total_ns,
                    unwound: 0,
                    filtered: 0,
                    arg_filtered: None,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::hist::bucket_of;

    fn series(durations_ns: &[u64]) -> Series {
        let mut hist = Hist::default();
        for &d in durations_ns {
            hist.buckets[bucket_of(d)] += 1;
        }
        Series {
            kind: SeriesKind::Function,
            labels: vec![
                ("function".into(), "db::Table::scan(int)".into()),
                ("object".into(), "/srv/db/bin/dbd".into()),
                ("env".into(), "prod".into()),
            ],
            hist,
            count: durations_ns.len() as u64,
            total_ns: durations_ns.iter().sum(),
            unwound: 3,
            filtered: 0,
            arg_filtered: None,
        }
    }

    impl Series {
        fn into_counts(self) -> Counts {
            Counts {
                count: self.count,
                total_ns: self.total_ns,
                hist: self.hist,
                ..Counts::default()
            }
        }
    }

    fn tid(t: u32) -> Option<Vec<KeyValue>> {
        Some(vec![KeyValue::Thread {
            tid: t,
            comm: format!("w{t}"),
        }])
    }

    /// (label values after `function`, count) of each group series.
    fn shown(tally: &GroupTally) -> Vec<(Vec<String>, u64)> {
        tally
            .series(|id| vec![("function".into(), format!("f{id}"))])
            .into_iter()
            .map(|s| {
                let v = s
                    .labels
                    .iter()
                    .map(|l| format!("{}={}", l.0, l.1))
                    .collect();
                (v, s.count)
            })
            .collect()
    }

    #[test]
    fn groups_keep_their_series_and_the_rest_is_other() {
        let mut t = GroupTally::new(vec!["tid".into()], 2);
        // First read: three threads, the two with most time get a series.
        t.add(vec![
            (0, tid(1), series(&[10; 5]).into_counts()),
            (0, tid(2), series(&[1000; 2]).into_counts()),
            (0, tid(3), series(&[500; 3]).into_counts()),
            (1, tid(9), series(&[10]).into_counts()),
        ]);
        // Later: thread 1 grows past the others but stays in "other";
        // thread 4 is new and goes there too; the map was full once.
        t.add(vec![
            (0, tid(1), series(&[10_000; 9]).into_counts()),
            (0, tid(2), series(&[1000]).into_counts()),
            (0, tid(4), series(&[10]).into_counts()),
            (0, None, series(&[7, 7]).into_counts()),
        ]);
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shown(&t),
            vec![
                (l(&["function=f0", "tid=2", "comm=w2"]), 3),
                (l(&["function=f0", "tid=3", "comm=w3"]), 3),
                (l(&["function=f0", "tid=other"]), 15),
                (l(&["function=f0", "tid=not grouped"]), 2),
                (l(&["function=f1", "tid=9", "comm=w9"]), 1),
            ]
        );
    }

    #[test]
    fn group_label_names() {
        assert_eq!(group_label_name("caller"), "caller");
        assert_eq!(group_label_name("arg1"), "arg1");
        assert_eq!(group_label_name("len"), "len");
        assert_eq!(group_label_name("function"), "by_function");
        assert_eq!(group_label_name("comm"), "by_comm");
        assert_eq!(group_label_name("a.b"), "by_a_b");
    }

    #[test]
    fn every_bound_is_a_kernel_bucket_edge() {
        for k in BOUND_LOG2 {
            let (lo, _) = bucket_range(bucket_of(1u64 << k));
            assert_eq!(lo, 1u64 << k);
        }
    }

    #[test]
    fn buckets_count_calls_shorter_than_their_bound() {
        let s = series(&[100, 127, 128, 300, 300_000, 1 << 40]);
        let b = buckets(&s);
        assert_eq!(b.len(), BOUND_LOG2.count() + 1);
        // le=128ns: 100 and 127; 128 is not shorter than 128.
        assert_eq!(b[0], (128e-9, 2));
        // le=256ns: 128.
        assert_eq!(b[1].1, 1);
        // le=512ns: 300.
        assert_eq!(b[2].1, 1);
        // 300 us is below 2^19 ns = 524.288 us and above 2^18 ns.
        assert_eq!(b[19 - 7].1, 1);
        // 2^40 ns is beyond the last bound.
        assert_eq!(b.last().copied(), Some((f64::INFINITY, 1)));
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 6);
    }

    #[test]
    fn label_names() {
        for ok in ["env", "_x", "Host_2"] {
            assert!(valid_label_name(ok), "{ok}");
        }
        for bad in ["", "2x", "a-b", "__name", "a b", "é"] {
            assert!(!valid_label_name(bad), "{bad}");
        }
    }

    #[test]
    fn golden_openmetrics_and_text() {
        let mut site = series(&[2_000, 3_000, 40_000]);
        site.kind = SeriesKind::Site;
        site.labels = vec![
            ("function".into(), "main".into()),
            ("caller".into(), "main".into()),
            ("site".into(), "say \"hi\"\\n".into()),
            ("location".into(), "app.c:12".into()),
        ];
        site.unwound = 0;
        let mut f = series(&[1_500, 250_000, 250_000, 9_000_000]);
        f.filtered = 4;
        f.arg_filtered = Some(11);
        let mut tally = GroupTally::new(vec!["caller".into(), "tid".into()], 1);
        let caller = KeyValue::Caller {
            object: "/srv/app".into(),
            offset: 0x1234,
            function: Some("main".into()),
            function_offset: 0x14,
            location: Some("app.c:40".into()),
        };
        let thread = |tid: u32| KeyValue::Thread {
            tid,
            comm: format!("worker-{tid}"),
        };
        tally.add(vec![
            (
                0,
                Some(vec![caller.clone(), thread(7)]),
                series(&[5_000; 3]).into_counts(),
            ),
            (
                0,
                Some(vec![caller, thread(8)]),
                series(&[5_000]).into_counts(),
            ),
            (0, None, series(&[1_000]).into_counts()),
        ]);
        let mut all = vec![f, site];
        all.extend(tally.series(|_| vec![("function".into(), "work".into())]));
        let records = RecordCounts {
            labels: vec![("env".into(), "prod".into())],
            recorded: 12,
            lost: 3,
        };
        let om = render_openmetrics(&all, Some(&records));
        crate::golden::check("src/report/golden", "metrics.openmetrics", om.as_bytes());
        let text = openmetrics_to_text(&om);
        crate::golden::check("src/report/golden", "metrics.prom", text.as_bytes());
    }
}
