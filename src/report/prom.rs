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

use std::borrow::Cow;
use std::fmt::Write;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::hist::bucket_range;
use super::Hist;

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
    }
}

/// A counter family: its name after the stem, its help, and its value.
type Counter = (&'static str, &'static str, fn(&Series) -> u64);

/// The collector handed to prometheus-client: every series, with the
/// histograms and counters of each kind of series as one family each.
#[derive(Debug)]
struct Snapshot(Vec<Series>);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for kind in [SeriesKind::Function, SeriesKind::Site] {
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
        Ok(())
    }
}

/// The OpenMetrics text exposition of `series`, ending with `# EOF`.
pub fn render_openmetrics(series: &[Series]) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot(series.to_vec())));
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
        let om = render_openmetrics(&[f, site]);
        crate::golden::check("src/report/golden", "metrics.openmetrics", om.as_bytes());
        let text = openmetrics_to_text(&om);
        crate::golden::check("src/report/golden", "metrics.prom", text.as_bytes());
    }
}
