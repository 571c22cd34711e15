//! The text report: BCC's Python funclatency's log2 table and its
//! `avg = …, total: …, count: …` line, byte for byte (unit words `nsecs`,
//! `usecs`, `msecs`), then tachy's own lines: exact min/max, percentiles
//! and the calls that were not timed.

use std::io::{self, Write};

#[cfg(test)]
use super::counts::Counts;
use super::counts::{CpuSplit, Unit, CPU_PARTS};
use super::fmt::{
    clock, compact, print_log2_hist, probe_time_note, render_split_hist, PERCENTILES,
};
use super::{FuncReport, Report};

pub fn render(r: &Report, w: &mut impl Write) -> io::Result<()> {
    if r.timestamp {
        writeln!(w, "{:<8}", clock(r.time))?;
    }
    if let [f] = r.funcs.as_slice() {
        return render_func(f, r.unit, w);
    }
    // Several functions: a block for each one called (each one with
    // --all), a line for the others, then one row each.
    let shown: Vec<&FuncReport> = r
        .funcs
        .iter()
        .filter(|f| r.all || f.counts.called())
        .collect();
    for (i, f) in shown.iter().enumerate() {
        if i > 0 {
            writeln!(w)?;
        }
        writeln!(w, "Function = {} [{}]", f.name, f.object.display())?;
        render_func(f, r.unit, w)?;
    }
    let idle = r.funcs.len() - shown.len();
    if idle > 0 {
        if !shown.is_empty() {
            writeln!(w)?;
        }
        match idle {
            1 => writeln!(w, "1 function not called (--all shows it)")?,
            n => writeln!(w, "{n} functions not called (--all shows them)")?,
        }
    }
    if !shown.is_empty() {
        writeln!(w)?;
        render_summary(&shown, r.unit, r.span, w)?;
        render_inlined_split(&shown, w)?;
    }
    Ok(())
}

/// For a function timed in inlined instances, how many calls went
/// through its out-of-line copies and how many through the instances: one
/// line each, after the table.
fn render_inlined_split(funcs: &[&FuncReport], w: &mut impl Write) -> io::Result<()> {
    for s in super::inlined_split(funcs.iter().copied()) {
        writeln!(
            w,
            "{}: {} call{} out of line, {} through {} inlined instance{}",
            s.name,
            s.out_of_line,
            if s.out_of_line == 1 { "" } else { "s" },
            s.inlined,
            s.instances,
            if s.instances == 1 { "" } else { "s" }
        )?;
    }
    Ok(())
}

/// The columns of the summary table after the durations' unit.
const SUMMARY: [&str; 7] = ["calls", "calls/s", "avg", "p50", "p99", "max", "total"];

/// One row per function, most total time first: calls, calls per second
/// over `span`, and durations in `unit`.
fn render_summary(
    funcs: &[&FuncReport],
    unit: Unit,
    span: Option<std::time::Duration>,
    w: &mut impl Write,
) -> io::Result<()> {
    let mut funcs = funcs.to_vec();
    funcs.sort_by(|a, b| {
        b.counts
            .total_ns
            .cmp(&a.counts.total_ns)
            .then(b.counts.count.cmp(&a.counts.count))
            .then(a.name.cmp(&b.name))
    });
    let rows: Vec<(String, Vec<String>)> = funcs
        .iter()
        .map(|f| {
            let c = &f.counts;
            let rate = match span {
                Some(d) if d.as_secs_f64() > 0.0 => number(c.count as f64 / d.as_secs_f64()),
                _ => "-".into(),
            };
            let mut cols = vec![c.count.to_string(), rate];
            if c.count == 0 {
                cols.extend(["-", "-", "-", "-", "0"].map(String::from));
            } else {
                let max = c.max_ns;
                let p = c.percentile_ranges(&[50.0, 99.0], unit);
                let at = |p: Option<(u64, u64)>| match p {
                    Some((lo, hi)) => value(lo, hi, unit),
                    None => "-".into(),
                };
                cols.push(mean(c.total_ns as f64 / c.count as f64, unit));
                cols.push(at(p.first().copied().flatten()));
                cols.push(at(p.get(1).copied().flatten()));
                cols.push(value(max, max, unit));
                cols.push(value(c.total_ns, c.total_ns, unit));
            }
            (compact(&f.name, 60), cols)
        })
        .collect();
    let head = format!("function ({})", unit.word());
    let name_w = rows
        .iter()
        .map(|r| r.0.chars().count())
        .chain([head.len()])
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = SUMMARY
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .map(|r| r.1[i].len())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |name: &str, cols: &[&str]| {
        let mut l = format!("{name:<name_w$}");
        for (c, wd) in cols.iter().zip(&widths) {
            l.push_str(&format!("  {c:>wd$}"));
        }
        l
    };
    writeln!(w, "{}", line(&head, &SUMMARY))?;
    for (name, cols) in &rows {
        let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
        writeln!(w, "{}", line(name, &cols))?;
    }
    Ok(())
}

/// A count or rate: whole from 100 on, three significant digits below.
fn number(v: f64) -> String {
    digits(v, 3, Unit::Nsec)
}

fn render_func(f: &FuncReport, unit: Unit, w: &mut impl Write) -> io::Result<()> {
    let c = &f.counts;
    let u = unit.word();
    let table = print_log2_hist(&c.hist.log2_slots(), u, w)?;
    // funclatency: a blank line, the avg line and a blank line after the
    // table. (funclatency prints nothing at all without calls; tachy
    // still says count: 0.)
    if table {
        writeln!(w)?;
    }
    let per = unit.ns();
    // As funclatency: total and avg in whole units, truncated.
    let total = c.total_ns / per;
    let avg = total.checked_div(c.count).unwrap_or(0);
    writeln!(w, "avg = {avg} {u}, total: {total} {u}, count: {}", c.count)?;
    if table {
        writeln!(w)?;
    }
    if c.count > 0 {
        let (min, max) = (c.min_ns.min(c.max_ns), c.max_ns);
        write!(w, "min = {} {u}", value(min, min, unit))?;
        let qs: Vec<f64> = PERCENTILES.iter().map(|p| p.0).collect();
        for ((_, name), p) in PERCENTILES.iter().zip(c.percentile_ranges(&qs, unit)) {
            if let Some((lo, hi)) = p {
                write!(w, ", {name} = {} {u}", value(lo, hi, unit))?;
            }
        }
        let avg = c.total_ns as f64 / c.count as f64;
        writeln!(
            w,
            ", max = {} {u}, avg = {} {u}",
            value(max, max, unit),
            mean(avg, unit)
        )?;
    }
    if let Some(split) = &c.cpu {
        render_split(split, c.count, unit, w)?;
    }
    // Kernel items (system calls, kernel functions) never unwind.
    if f.go {
        writeln!(w, "left by panic: {}", c.unwound)?;
    } else if c.unwound > 0 || f.object != std::path::Path::new("kernel") {
        writeln!(w, "left by exception or unwind: {}", c.unwound)?;
    }
    if let Some(note) = probe_time_note(c.probe_ns, c.under) {
        writeln!(w, "{note}")?;
    }
    if c.filtered > 0 {
        writeln!(w, "filtered out by duration: {}", c.filtered)?;
    }
    if let Some(n) = c.arg_filtered {
        writeln!(w, "filtered out by --filter: {n}")?;
    }
    if c.overflow > 0 {
        writeln!(
            w,
            "not timed, nested deeper than 64 traced frames{}: {}",
            if f.go {
                " or past 16384 goroutines in traced calls"
            } else {
                ""
            },
            c.overflow
        )?;
    }
    if c.indirect_tail > 0 {
        writeln!(
            w,
            "timed only up to an indirect tail jump: {}",
            c.indirect_tail
        )?;
    }
    if let Some(hist) = c.cpu.as_ref().and_then(|s| s.hist.as_ref()) {
        render_split_hist(hist, unit, w)?;
    }
    if let Some(g) = &f.groups {
        super::groups::render_text(g, unit, w)?;
    }
    Ok(())
}

/// A duration known to lie in [lo_ns, hi_ns], in `unit`: the midpoint
/// with no more digits than that range supports, and at most three
/// significant ones below 100 units (`0.168`, `12.3`, `1630`).
pub fn value(lo_ns: u64, hi_ns: u64, unit: Unit) -> String {
    let (lo, hi) = (lo_ns.min(hi_ns), lo_ns.max(hi_ns));
    let width = (hi - lo).saturating_add(1);
    // The largest power of ten no wider than the range, in ns.
    let mut step = 1u64;
    while let Some(next) = step.checked_mul(10).filter(|&n| n <= width) {
        step = next;
    }
    let mid = lo as f64 + (hi - lo) as f64 / 2.0;
    let v = (mid / step as f64).round() * step as f64;
    digits(v, decimals_of_step(step, unit), unit)
}

/// An average in `unit`, to three significant digits (whole ns at most).
pub fn mean(ns: f64, unit: Unit) -> String {
    digits(ns, decimals_of_step(1, unit), unit)
}

/// How many decimals of `unit` a step of `step` ns shows.
fn decimals_of_step(step: u64, unit: Unit) -> usize {
    let (mut per, mut d) = (unit.ns(), 0usize);
    while per > step {
        per /= 10;
        d += 1;
    }
    d
}

/// `ns` in `unit` with at most `max_decimals` decimals and no more than
/// three significant digits below 100 units.
fn digits(ns: f64, max_decimals: usize, unit: Unit) -> String {
    let v = ns / unit.ns() as f64;
    let sig = if v <= 0.0 || v >= 100.0 {
        0
    } else {
        (2.0 - v.log10().floor()).max(0.0) as usize
    };
    let d = sig.min(max_decimals);
    let s = format!("{v:.d$}");
    // 99.96 rounds to "100.0": three significant digits are "100".
    match s.split_once('.') {
        Some((int, _)) if int.trim_start_matches('-').len() >= 3 => int.to_string(),
        _ => s,
    }
}

/// `--cpu`: each part's share of the calls' time and its average per call.
pub fn render_split(
    split: &CpuSplit,
    count: u64,
    unit: Unit,
    w: &mut impl Write,
) -> io::Result<()> {
    let u = unit.word();
    let parts = split.parts();
    let sum: u64 = parts.iter().sum();
    let line: Vec<String> = CPU_PARTS
        .iter()
        .zip(parts)
        .map(|((name, _), ns)| {
            let share = if sum > 0 {
                ns as f64 * 100.0 / sum as f64
            } else {
                0.0
            };
            // As tachy's other averages: three significant digits, so a
            // part shorter than the unit does not read 0.
            let avg = match count {
                0 => "0".to_string(),
                n => mean(ns as f64 / n as f64, unit),
            };
            format!("{name} {share:.1}% (avg {avg} {u})")
        })
        .collect();
    writeln!(w, "{}", line.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Function `f` of `/x` with these counts.
    fn func_f(counts: Counts) -> FuncReport {
        FuncReport {
            go: false,
            name: "f".into(),
            raw_name: "f".into(),
            object: "/x".into(),
            counts,
            groups: None,
        }
    }

    /// One function's report with `calls` (in ns) bucketed in `unit`, as
    /// the kernel buckets them.
    fn report_of(calls: &[u64], unit: Unit) -> String {
        let mut c = Counts::default();
        for &ns in calls {
            c.hist.buckets[super::super::hist::bucket_of(ns / unit.ns())] += 1;
            c.count += 1;
            c.total_ns += ns;
            c.min_ns = if c.count == 1 { ns } else { c.min_ns.min(ns) };
            c.max_ns = c.max_ns.max(ns);
        }
        let f = func_f(c);
        let mut out = Vec::new();
        render_func(&f, unit, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Calls shorter than the unit keep three significant digits in
    /// tachy's own line; funclatency's avg line stays truncated.
    #[test]
    fn small_durations_keep_three_digits() {
        let out = report_of(&[112_000, 168_000], Unit::Msec);
        assert!(
            out.contains("\navg = 0 msecs, total: 0 msecs, count: 2\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "\nmin = 0.112 msecs, p50 = 0.112 msecs, p90 = 0.168 msecs, p99 = 0.168 msecs, \
                 p99.9 = 0.168 msecs, max = 0.168 msecs, avg = 0.140 msecs\n"
            ),
            "{out}"
        );
        // A percentile whose rank is the first or the last call is the
        // exact min or max; one in between, its bucket within them.
        let out = report_of(&[700, 750, 750, 800], Unit::Usec);
        assert!(
            out.contains(
                "\nmin = 0.700 usecs, p50 = 0.8 usecs, p90 = 0.800 usecs, p99 = 0.800 usecs, \
                 p99.9 = 0.800 usecs, max = 0.800 usecs, avg = 0.750 usecs\n"
            ),
            "{out}"
        );
        let out = report_of(&[750], Unit::Usec);
        assert!(
            out.contains(
                "\nmin = 0.750 usecs, p50 = 0.750 usecs, p90 = 0.750 usecs, p99 = 0.750 usecs, \
                 p99.9 = 0.750 usecs, max = 0.750 usecs, avg = 0.750 usecs\n"
            ),
            "{out}"
        );
        // Whole units from 100 on, and never finer than a nanosecond.
        let out = report_of(&[1_234_567, 12_345], Unit::Usec);
        assert!(out.contains("\nmin = 12.3 usecs, "), "{out}");
        assert!(
            out.contains(", max = 1235 usecs, avg = 623 usecs\n"),
            "{out}"
        );
        let out = report_of(&[7, 8], Unit::Nsec);
        assert!(out.contains("\nmin = 7 nsecs, p50 = 7 nsecs, "), "{out}");
        assert!(out.contains(", max = 8 nsecs, avg = 8 nsecs\n"), "{out}");
    }

    /// `--cpu`: a part's average per call keeps three significant digits,
    /// as the min line's avg: a part shorter than the unit is not 0.
    #[test]
    fn cpu_parts_shorter_than_the_unit_keep_their_digits() {
        let split = CpuSplit {
            oncpu_ns: 2 * 750,
            blocked_ns: 2 * 112_000,
            runq_ns: 0,
            hist: None,
        };
        let mut out = Vec::new();
        render_split(&split, 2, Unit::Usec, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "on-CPU 0.7% (avg 0.750 usecs), blocked 99.3% (avg 112 usecs), \
             waiting for a CPU 0.0% (avg 0 usecs)\n"
        );
    }

    /// The whole report of one function: BCC's table, a blank line, its
    /// avg line, a blank line, then tachy's lines.
    #[test]
    fn avg_line_is_funclatencys() {
        let mut c = Counts::default();
        c.hist.buckets[super::super::hist::bucket_of(3)] = 2;
        c.count = 2;
        c.total_ns = 7_999;
        c.min_ns = 3_000;
        c.max_ns = 4_999;
        let f = func_f(c);
        let mut out = Vec::new();
        render_func(&f, Unit::Usec, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.starts_with(
                "     usecs               : count     distribution\n\
                 \x20        0 -> 1          : 0        |                                        |\n\
                 \x20        2 -> 3          : 2        |****************************************|\n\
                 \navg = 3 usecs, total: 7 usecs, count: 2\n\n"
            ),
            "{out}"
        );
    }
}
