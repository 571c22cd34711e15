//! Durations as people type them on the command line and in bounds.

use std::time::Duration;

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

/// Parses a positive time: seconds (`5`, `0.5`) or a duration with its
/// unit (`500ms`, `2m`).
pub fn parse_seconds(s: &str) -> std::result::Result<Duration, String> {
    let too_long = || format!("{s:?} is longer than {MAX_SECONDS} seconds (31 years), the most");
    let ns = match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_nan() => return Err(format!("{s:?} is not a number of seconds")),
        Ok(secs) if secs <= 0.0 => return Err(POSITIVE.into()),
        Ok(secs) if secs <= MAX_SECONDS as f64 => (secs * 1e9).round() as u64,
        Ok(_) => return Err(too_long()),
        Err(_) if s.trim_start().starts_with('-') => return Err(POSITIVE.into()),
        Err(_) => parse_duration(s).map_err(|e| e.to_string())?,
    };
    if ns == 0 {
        return Err(POSITIVE.into());
    }
    if ns > MAX_SECONDS * 1_000_000_000 {
        return Err(too_long());
    }
    Ok(Duration::from_nanos(ns))
}

/// The longest time `-d` and `-i` take, in seconds.
const MAX_SECONDS: u64 = 999_999_999;

pub(crate) const POSITIVE: &str = "needs a positive time (e.g. 5, 0.5, 500ms)";
