//! Durations as people type them on the command line and in bounds.

use anyhow::{bail, Context, Result};

/// Parses `250us`, `1.5ms`, `2s`, `100ns`, `1m` into nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let per: f64 = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "" => bail!("duration {s:?} needs a unit: ns, us, ms, s or m (e.g. 250us)"),
        u => bail!("duration {s:?} has an unknown unit {u:?}: use ns, us, ms, s or m"),
    };
    let n: f64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a duration (e.g. 250us, 1ms, 2s)"))?;
    let ns = n * per;
    if !ns.is_finite() || ns > u64::MAX as f64 / 2.0 {
        bail!("duration {s:?} is too large");
    }
    Ok(ns.round() as u64)
}
