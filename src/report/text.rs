//! The text report: funclatency's log2 table (byte-compatible with
//! libbpf-tools' `print_log2_hist`), its `avg = …, total: …, count: …` line,
//! then exact min/max, percentiles and the calls that were not timed.

use std::io::{self, Write};

use super::hist::round_to_precision;
use super::{FuncReport, Report, Unit};

pub const PERCENTILES: [(f64, &str); 4] =
    [(50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p99.9")];

pub fn render(r: &Report, w: &mut impl Write) -> io::Result<()> {
    if r.timestamp {
        writeln!(w, "{:<8}", clock(r.time))?;
    }
    let many = r.funcs.len() > 1;
    for (i, f) in r.funcs.iter().enumerate() {
        if many {
            if i > 0 {
                writeln!(w)?;
            }
            writeln!(w, "Function = {} [{}]", f.name, f.object.display())?;
        }
        render_func(f, r.unit, w)?;
    }
    Ok(())
}

fn render_func(f: &FuncReport, unit: Unit, w: &mut impl Write) -> io::Result<()> {
    let c = &f.counts;
    let u = unit.label();
    print_log2_hist(&c.hist.log2_slots(), u, w)?;
    let per = unit.ns();
    let avg = c.total_ns.checked_div(c.count).unwrap_or(0) / per;
    writeln!(
        w,
        "avg = {avg} {u}, total: {} {u}, count: {}",
        c.total_ns / per,
        c.count
    )?;
    if c.count > 0 {
        let (min, max) = (c.min_ns / per, c.max_ns / per);
        write!(w, "min = {min} {u}")?;
        let qs: Vec<f64> = PERCENTILES.iter().map(|p| p.0).collect();
        for ((_, name), p) in PERCENTILES.iter().zip(c.hist.percentiles(&qs)) {
            if let Some((lo, hi)) = p {
                // A call of 0 ns is kept as min 1 ns by the kernel: never
                // let min exceed max.
                let v = round_to_precision(lo, hi).clamp(min.min(max), max);
                write!(w, ", {name} = {v} {u}")?;
            }
        }
        writeln!(w, ", max = {max} {u}")?;
    }
    // Kernel items (system calls, kernel functions) never unwind.
    if c.unwound > 0 || f.object != std::path::Path::new("kernel") {
        writeln!(w, "left by exception or unwind: {}", c.unwound)?;
    }
    if c.filtered > 0 {
        writeln!(w, "filtered out by duration: {}", c.filtered)?;
    }
    if c.overflow > 0 {
        writeln!(
            w,
            "not timed, nested deeper than 64 traced frames: {}",
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
    Ok(())
}

/// libbpf-tools' `print_log2_hist`, row for row.
pub fn print_log2_hist(vals: &[u64], val_type: &str, w: &mut impl Write) -> io::Result<()> {
    let Some(idx_max) = vals.iter().rposition(|&v| v > 0) else {
        return Ok(());
    };
    let val_max = vals.iter().copied().max().unwrap_or(0);
    let small = idx_max <= 32;
    let (pad, label_w, width, stars) = if small {
        (5, 19, 10, 40)
    } else {
        (15, 29, 20, 20)
    };
    writeln!(
        w,
        "{:pad$}{:<label_w$} : count    distribution",
        "", val_type
    )?;
    for (i, &val) in vals.iter().enumerate().take(idx_max + 1) {
        let high = (1u128 << (i + 1)) - 1;
        let mut low = (1u128 << (i + 1)) >> 1;
        if low == high {
            low -= 1;
        }
        write!(w, "{low:>width$} -> {high:<width$} : {val:<8} |")?;
        let shown = val.min(val_max);
        let n = (shown as u128 * stars as u128 / val_max as u128) as usize;
        write!(w, "{}{}", "*".repeat(n), " ".repeat(stars - n))?;
        if val > val_max {
            write!(w, "+")?;
        }
        writeln!(w, "|")?;
    }
    Ok(())
}

/// Local wall-clock time as HH:MM:SS.
pub fn clock(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: localtime_r writes only into the tm we pass; tm is plain data
    // for which all-zero bytes are a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return "??:??:??".into();
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}
