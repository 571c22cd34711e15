//! The JSON report: one object per interval, one line each.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use super::counts::{Counts, Unit};
use super::fmt::{cpu_json, PERCENTILES};
use super::hist::bucket_range;
use super::Report;

/// The percentiles of the text report (p50, p90, p99, p99.9) in ns: the
/// midpoint of the bucket holding each, within the exact min and max; the
/// exact value where it is known (the min or max at the first or last
/// rank).
pub fn percentiles_ns(c: &Counts, unit: Unit) -> Vec<Option<u64>> {
    let qs: Vec<f64> = PERCENTILES.iter().map(|p| p.0).collect();
    c.hist
        .percentiles(&qs)
        .into_iter()
        .zip(c.percentile_ranges(&qs, unit))
        .map(|(bucket, known)| match known {
            Some((lo, hi)) if lo == hi => Some(lo),
            _ => bucket.map(|(lo, hi)| {
                (lo + (hi - lo) / 2)
                    .saturating_mul(unit.ns())
                    .clamp(c.min_ns.min(c.max_ns), c.max_ns)
            }),
        })
        .collect()
}

pub fn render(r: &Report, w: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut *w, &value(r))?;
    writeln!(w)
}

/// The report as one JSON object.
pub fn value(r: &Report) -> Value {
    let funcs: Vec<Value> = r
        .funcs
        .iter()
        .map(|f| {
            let c = &f.counts;
            let mut pct = Map::new();
            for ((_, name), v) in PERCENTILES.iter().zip(percentiles_ns(c, r.unit)) {
                pct.insert(name.to_string(), json!(v));
            }
            let mut v = json!({
                "name": f.name,
                "raw_name": f.raw_name,
                "object": f.object.display().to_string(),
                "count": c.count,
                "total_ns": c.total_ns,
                "min_ns": if c.count > 0 { Some(c.min_ns) } else { None },
                "max_ns": if c.count > 0 { Some(c.max_ns) } else { None },
                "avg_ns": c.total_ns.checked_div(c.count),
                "percentiles_ns": pct,
                "log2_unit": r.unit.label(),
                "log2_buckets": c.hist.log2_slots(),
                "buckets": c.hist.buckets.iter().enumerate()
                    .filter(|(_, &n)| n > 0)
                    .map(|(b, &n)| [bucket_range(b).0, n])
                    .collect::<Vec<_>>(),
                "unwound": c.unwound,
                "filtered": c.filtered,
                "overflow": c.overflow,
                "indirect_tail": c.indirect_tail,
            });
            if f.go {
                // Go code: `unwound` counts calls left by a panic or
                // runtime.Goexit (tachy merge says so, as the text does).
                v["go"] = json!(true);
            }
            if let Some(split) = &c.cpu {
                v["cpu"] = cpu_json(split);
            }
            if let Some(n) = c.arg_filtered {
                v["filtered_by_args"] = json!(n);
            }
            if let Some(g) = &f.groups {
                super::groups::json_fields(g, r.unit, &mut v);
            }
            if c.probe_ns > 0 {
                v["probe_ns_per_call"] = json!(c.probe_ns);
                v["shorter_than_probe_time"] = json!(c.under);
            }
            v
        })
        .collect();
    let ts = r
        .time
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut v = json!({ "time": ts, "functions": funcs });
    let split = super::inlined_split(r.funcs.iter());
    if !split.is_empty() {
        v["inlined"] = split
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "out_of_line": s.out_of_line,
                    "inlined": s.inlined,
                    "instances": s.instances,
                })
            })
            .collect();
    }
    if let Some(span) = r.span {
        v["interval_s"] = json!(span.as_secs_f64());
    }
    v
}
