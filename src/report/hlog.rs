//! HdrHistogram interval logs (`--hlog`): each interval's histogram of each
//! function, in the V2 compressed format, tagged with the function. Values
//! are nanoseconds; each kernel bucket is recorded at its midpoint, which a
//! 3-significant-digit HdrHistogram keeps inside that bucket, so reading the
//! log back recovers every bucket count exactly.
//!
//! The tag of a histogram is `OBJECT/NAME`: the object's base name (which
//! has no `/`), a `/`, then the demangled name (for a call site of `tachy
//! nested`, its path: the traced function, then each site down to it as
//! `NAME [FILE:LINE]`, joined by `;`, as folded stacks name frames), with
//! `%`, `,`, space, CR
//! and LF written as `%25`, `%2C`, `%20`, `%0D`, `%0A` (interval log tags
//! may hold none of the last four). Before each histogram line a comment
//! `#tachy TAG key=value...` keeps what the histogram cannot: the exact
//! total, min and max, the calls that were not timed, and the raw symbol.
//! HdrHistogram's own readers skip comments.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use super::counts::{Counts, Unit};
use super::hist::{bucket_of, bucket_range, Hist};
use super::{FuncReport, Report};

/// Significant digits of the histograms written: enough that a bucket's
/// midpoint stays inside the bucket (a kernel bucket is at least 1/16 of
/// its value wide, an HdrHistogram bucket at most 1/1024 at 3 digits).
const DIGITS: u8 = 3;

/// The value a kernel bucket is recorded at, in nanoseconds: its midpoint,
/// as the JSON report gives percentiles.
fn recorded_ns(bucket: usize, unit: Unit) -> u64 {
    let (lo, hi) = bucket_range(bucket);
    (lo + (hi - lo) / 2).saturating_mul(unit.ns())
}

/// A histogram of `hist` (in `unit`) in nanoseconds.
pub fn to_histogram(hist: &Hist, unit: Unit) -> Result<Histogram<u64>> {
    let mut h = Histogram::<u64>::new(DIGITS).context("cannot make a histogram")?;
    for (b, &n) in hist.buckets.iter().enumerate() {
        if n > 0 {
            let v = recorded_ns(b, unit);
            h.record_n(v, n)
                .map_err(|e| anyhow!("cannot record {v} ns in a histogram: {e:?}"))?;
        }
    }
    Ok(h)
}

/// The kernel buckets (in `unit`) of a histogram of nanoseconds.
pub fn from_histogram(h: &Histogram<u64>, unit: Unit) -> Hist {
    let mut hist = Hist::default();
    for v in h.iter_recorded() {
        // Any value of the HdrHistogram bucket lies in the kernel bucket.
        let b = bucket_of(v.value_iterated_to() / unit.ns());
        hist.buckets[b] += v.count_at_value();
    }
    hist
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            ',' => out.push_str("%2C"),
            ' ' => out.push_str("%20"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3);
        match code.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(b) if b.is_ascii() => {
                out.push(b as char);
                rest = &rest[i + 3..];
            }
            _ => {
                out.push('%');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The tag naming a function: `OBJECT/NAME`, escaped.
pub fn tag(object: &Path, name: &str) -> String {
    let base = object
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_else(|| object.display().to_string());
    escape(&format!("{}/{name}", base.replace('/', "_")))
}

/// The object base name and function name of a tag; a tag without `/`
/// (not written by tachy) is all name.
pub fn parse_tag(tag: &str) -> (String, String) {
    let s = unescape(tag);
    match s.split_once('/') {
        Some((obj, name)) => (obj.to_string(), name.to_string()),
        None => (String::new(), s),
    }
}

/// Writes an interval log, one interval per report.
pub struct HlogWriter<W: Write> {
    w: W,
    serializer: V2DeflateSerializer,
    base: SystemTime,
}

impl<W: Write> HlogWriter<W> {
    /// Writes the log's header; interval times count from `base`.
    pub fn new(mut w: W, base: SystemTime, unit: Unit) -> Result<HlogWriter<W>> {
        let mut serializer = V2DeflateSerializer::new();
        IntervalLogWriterBuilder::new()
            .add_comment("[Histogram log format version 1.3]")
            .add_comment(&format!(
                "tachy {}: function latency in nanoseconds, one histogram per function (and call site of tachy nested) and interval, tagged OBJECT/FUNCTION (OBJECT/FUNCTION;SITE [FILE:LINE];... for a site)",
                crate::version::VERSION
            ))
            .add_comment(&format!("tachy unit={}", unit.label()))
            .with_start_time(base)
            .with_base_time(base)
            .begin_log_with(&mut w, &mut serializer)?;
        writeln!(
            w,
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        )?;
        w.flush()?;
        Ok(HlogWriter {
            w,
            serializer,
            base,
        })
    }

    /// Writes the histogram of every function of `r`, an interval that
    /// began at `start` and ended at `r.time`.
    pub fn write(&mut self, r: &Report, start: SystemTime) -> Result<()> {
        let offset = start.duration_since(self.base).unwrap_or_default();
        let length = r.time.duration_since(start).unwrap_or_default();
        for f in &r.funcs {
            let tag = tag(&f.object, &f.name);
            let c = &f.counts;
            writeln!(
                self.w,
                "#tachy {tag} count={} total_ns={} min_ns={} max_ns={} unwound={} filtered={} overflow={} indirect_tail={} raw={} object={}",
                c.count,
                c.total_ns,
                c.min_ns,
                c.max_ns,
                c.unwound,
                c.filtered,
                c.overflow,
                c.indirect_tail,
                escape(&f.raw_name),
                escape(&f.object.display().to_string()),
            )?;
            let h = to_histogram(&c.hist, r.unit)?;
            let mut log = IntervalLogWriterBuilder::new()
                .begin_log_with(&mut self.w, &mut self.serializer)?;
            log.write_histogram(&h, offset, length, Tag::new(&tag))
                .map_err(|e| anyhow!("cannot write a histogram: {e}"))?;
        }
        self.w.flush()?;
        Ok(())
    }
}

/// One interval of a log, as a report (object paths are the full paths
/// tachy wrote, else the tags' base names).
pub struct Interval {
    pub start: SystemTime,
    pub report: Report,
}

/// Reads an interval log: the intervals in order, each function's counts
/// in `unit` (the unit the log was written in when `None`). Histograms of
/// the same interval (same start and length) form one report.
pub fn read(bytes: &[u8], unit: Option<Unit>) -> Result<Vec<Interval>> {
    let text = std::str::from_utf8(bytes).context("not a text file")?;
    let mut base = Duration::ZERO;
    let mut unit = unit;
    let mut extra: Option<(String, Vec<(String, String)>)> = None;
    let mut out: Vec<Interval> = Vec::new();
    let mut last_key = None;
    let mut deserializer = Deserializer::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("#tachy ") {
            if let Some(u) = rest.strip_prefix("unit=") {
                if unit.is_none() {
                    unit = Unit::from_label(u.trim());
                }
                continue;
            }
            let mut words = rest.split(' ');
            let tag = words.next().unwrap_or_default().to_string();
            let kv = words
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), unescape(v)))
                .collect();
            extra = Some((tag, kv));
            continue;
        }
        // The parser wants each line with its end.
        let line = format!("{line}\n");
        let entry = IntervalLogIterator::new(line.as_bytes())
            .next()
            .transpose()
            .map_err(|_| anyhow!("line {}: not an interval log line", i + 1))?;
        let h = match entry {
            None => continue,
            Some(LogEntry::StartTime(_)) => continue,
            Some(LogEntry::BaseTime(t)) => {
                base = t;
                continue;
            }
            Some(LogEntry::Interval(h)) => h,
        };
        let unit = unit.unwrap_or_default();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(h.encoded_histogram().trim())
            .with_context(|| format!("line {}: bad base64", i + 1))?;
        let hist: Histogram<u64> = deserializer
            .deserialize(&mut &bytes[..])
            .map_err(|e| anyhow!("line {}: bad histogram: {e:?}", i + 1))?;
        let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
        let (obj, name) = parse_tag(&tag);
        let mut counts = Counts {
            count: hist.len(),
            hist: from_histogram(&hist, unit),
            ..Counts::default()
        };
        let mut raw = name.clone();
        let mut object = PathBuf::from(obj);
        match extra.take() {
            Some((t, kv)) if t == tag => {
                for (k, v) in kv {
                    let n = v.parse::<u64>().ok();
                    match (k.as_str(), n) {
                        ("total_ns", Some(n)) => counts.total_ns = n,
                        ("min_ns", Some(n)) => counts.min_ns = n,
                        ("max_ns", Some(n)) => counts.max_ns = n,
                        ("unwound", Some(n)) => counts.unwound = n,
                        ("filtered", Some(n)) => counts.filtered = n,
                        ("overflow", Some(n)) => counts.overflow = n,
                        ("indirect_tail", Some(n)) => counts.indirect_tail = n,
                        ("raw", _) => raw = v,
                        ("object", _) => object = PathBuf::from(v),
                        _ => {}
                    }
                }
            }
            _ => {
                // A log from elsewhere: what the histogram says.
                counts.total_ns = hist
                    .iter_recorded()
                    .map(|v| v.value_iterated_to().saturating_mul(v.count_at_value()))
                    .fold(0u64, u64::saturating_add);
                if counts.count > 0 {
                    counts.min_ns = hist.min();
                    counts.max_ns = hist.max();
                }
            }
        }
        let start = UNIX_EPOCH + base + h.start_timestamp();
        let key = (h.start_timestamp(), h.duration());
        let f = FuncReport {
            name,
            raw_name: raw,
            object,
            go: false,
            counts,
            groups: None,
        };
        if last_key == Some(key) {
            if let Some(last) = out.last_mut() {
                last.report.funcs.push(f);
                continue;
            }
        }
        last_key = Some(key);
        out.push(Interval {
            start,
            report: Report {
                time: start + h.duration(),
                span: Some(h.duration()),
                unit,
                timestamp: false,
                all: true,
                funcs: vec![f],
            },
        });
    }
    if out.is_empty() && !text.lines().any(|l| l.starts_with("#[")) {
        bail!("not an HdrHistogram interval log");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::hist::NBUCKETS;

    #[test]
    fn every_bucket_survives_the_round_trip() {
        for unit in [Unit::Nsec, Unit::Usec, Unit::Msec] {
            // Every bucket up to 2^62 ns (146 years).
            let top = (0..NBUCKETS)
                .take_while(|&b| bucket_range(b).1.saturating_mul(unit.ns()) < 1 << 62)
                .count();
            assert!(top > 38 * 16, "{unit:?}: {top}");
            let mut hist = Hist::default();
            for b in 0..top {
                hist.buckets[b] = 1 + (b as u64 % 7);
            }
            let h = to_histogram(&hist, unit).unwrap();
            assert_eq!(from_histogram(&h, unit), hist, "{unit:?}");
        }
    }

    #[test]
    fn tags_keep_names_with_spaces_commas_and_slashes() {
        let name = "std::map<int, int>::operator/(int) const [clone .isra.0] 100%";
        let t = tag(Path::new("/usr/lib/libx.so.1"), name);
        assert!(Tag::new(&t).is_some(), "{t}");
        assert_eq!(parse_tag(&t), ("libx.so.1".to_string(), name.to_string()));
    }
}
