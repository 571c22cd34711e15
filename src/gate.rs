//! `tachy diff --fail-on`: bounds on how much a figure of a function may
//! change from report A to report B, so that a CI job fails on a latency
//! regression. A bound reads `FIGURE OP LIMIT`:
//!
//! - FIGURE: `count`, `rate` (calls per second; both reports must say how
//!   long they covered), `avg`, `p50`, `p90`, `p99`, `p99.9`, `max`, and
//!   with `--cpu` reports `oncpu`, `blocked`, `runnable` (average per call).
//! - OP: `>`, `>=`, `<` or `<=`.
//! - LIMIT: a change in percent (`+10%`, `-25%`), a change in the figure's
//!   own terms (`+2ms`, `-100` calls), or without a sign a value B itself
//!   must not cross (`5ms`, `1000`).
//!
//! A function missing from either side, or a figure either side lacks
//! (a percentile of no calls, a rate of a report without its length, a
//! change from 0), is not judged and is named as such.

use std::fmt;

use anyhow::{bail, Context, Result};

/// What a bound reads of a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    Count,
    Rate,
    /// One of `merge`'s figures (avg, a percentile, max, a --cpu part), by
    /// its label there.
    Time(&'static str),
}

const TIME_FIGURES: [(&str, &str); 10] = [
    ("avg", "avg"),
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p99.9", "p99.9"),
    ("max", "max"),
    ("oncpu", "on-CPU"),
    ("on-cpu", "on-CPU"),
    ("blocked", "blocked"),
    ("runnable", "runnable"),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Above,
    AtLeast,
    Below,
    AtMost,
}

/// The limit, in the figure's own terms (ns for times, calls, calls/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// B's change over A, in percent.
    Percent(f64),
    /// B minus A.
    Change(f64),
    /// B itself.
    Value(f64),
}

/// One `--fail-on` bound, as given and as parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    pub text: String,
    pub figure: Figure,
    pub op: Op,
    pub limit: Limit,
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

const SYNTAX: &str =
    "a bound reads FIGURE OP LIMIT, e.g. 'p99 > +10%', 'avg > +2ms', 'max > 50ms', 'count < -20%'";

impl Bound {
    pub fn parse(s: &str) -> Result<Bound> {
        let t = s.trim();
        let at = t
            .find(['<', '>'])
            .with_context(|| format!("{s:?}: no comparison (> or <): {SYNTAX}"))?;
        let (name, rest) = t.split_at(at);
        let (op, limit) = match rest.as_bytes() {
            [b'>', b'=', ..] => (Op::AtLeast, &rest[2..]),
            [b'<', b'=', ..] => (Op::AtMost, &rest[2..]),
            [b'>', ..] => (Op::Above, &rest[1..]),
            _ => (Op::Below, &rest[1..]),
        };
        let name = name.trim().to_ascii_lowercase();
        let figure = match name.as_str() {
            "count" | "calls" => Figure::Count,
            "rate" | "calls/s" => Figure::Rate,
            n => match TIME_FIGURES.iter().find(|(k, _)| *k == n) {
                Some((_, label)) => Figure::Time(label),
                None if n.is_empty() => bail!("{s:?}: no figure before the comparison: {SYNTAX}"),
                None => bail!(
                    "{s:?}: unknown figure {n:?}: use count, rate, avg, p50, p90, p99, p99.9, max, oncpu, blocked or runnable"
                ),
            },
        };
        let limit = parse_limit(limit.trim(), figure).with_context(|| format!("{s:?}"))?;
        Ok(Bound {
            text: t.to_string(),
            figure,
            op,
            limit,
        })
    }

    /// Whether A -> B crosses this bound; None where it cannot be judged.
    pub fn crossed(&self, a: Option<f64>, b: Option<f64>) -> Option<bool> {
        let x = match self.limit {
            Limit::Value(_) => b?,
            Limit::Change(_) => b? - a?,
            Limit::Percent(_) => {
                let (a, b) = (a?, b?);
                if a == 0.0 {
                    return None;
                }
                (b - a) / a * 100.0
            }
        };
        let (Limit::Value(l) | Limit::Change(l) | Limit::Percent(l)) = self.limit;
        Some(match self.op {
            Op::Above => x > l,
            Op::AtLeast => x >= l,
            Op::Below => x < l,
            Op::AtMost => x <= l,
        })
    }
}

fn parse_limit(t: &str, figure: Figure) -> Result<Limit> {
    if t.is_empty() {
        bail!("no limit after the comparison: {SYNTAX}");
    }
    let (sign, body) = match t.as_bytes()[0] {
        b'+' => (Some(1.0), &t[1..]),
        b'-' => (Some(-1.0), &t[1..]),
        _ => (None, t),
    };
    let body = body.trim();
    if let Some(p) = body.strip_suffix('%') {
        let n: f64 = p
            .trim()
            .parse()
            .ok()
            .filter(|n: &f64| n.is_finite())
            .with_context(|| format!("{t:?} is not a percentage"))?;
        let Some(sign) = sign else {
            bail!("a change in percent needs its sign: +{n}% or -{n}%");
        };
        return Ok(Limit::Percent(sign * n));
    }
    let n = match figure {
        Figure::Time(_) => crate::duration::parse_duration(body)? as f64,
        Figure::Count | Figure::Rate => body
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .with_context(|| format!("{t:?} is not a number of calls"))?,
    };
    Ok(match sign {
        Some(s) => Limit::Change(s * n),
        None => Limit::Value(n),
    })
}

/// For clap: a bound, or the reason it is not one.
pub fn parse_arg(s: &str) -> std::result::Result<Bound, String> {
    Bound::parse(s).map_err(|e| format!("{e:#}"))
}

/// A bound a function crossed, or could not be judged on.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub function: String,
    pub bound: String,
    /// What the bound reads: how A and B print.
    pub figure: Figure,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// None: not judged.
    pub crossed: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bound {
        Bound::parse(s).unwrap()
    }

    #[test]
    fn bounds_parse_into_figure_op_and_limit() {
        let p = b("p99 > +10%");
        assert_eq!(p.figure, Figure::Time("p99"));
        assert_eq!(p.op, Op::Above);
        assert_eq!(p.limit, Limit::Percent(10.0));
        assert_eq!(b("avg>=+2ms").limit, Limit::Change(2e6));
        assert_eq!(b("avg>=+2ms").op, Op::AtLeast);
        assert_eq!(b("max > 50ms").limit, Limit::Value(50e6));
        assert_eq!(b("count < -20%").limit, Limit::Percent(-20.0));
        assert_eq!(b("count <= -100").limit, Limit::Change(-100.0));
        assert_eq!(b("rate < 1000").limit, Limit::Value(1000.0));
        assert_eq!(b("OnCPU > +5%").figure, Figure::Time("on-CPU"));
        assert_eq!(b("p99.9 > +1%").figure, Figure::Time("p99.9"));
    }

    #[test]
    fn a_bad_bound_says_what_is_wrong() {
        let e = |s: &str| format!("{:#}", Bound::parse(s).unwrap_err());
        assert!(e("p99 +10%").contains("no comparison"), "{}", e("p99 +10%"));
        assert!(e("p98 > +10%").contains("unknown figure \"p98\""));
        assert!(e("> +10%").contains("no figure"));
        assert!(e("p99 >").contains("no limit"));
        assert!(e("p99 > 10%").contains("needs its sign"));
        assert!(e("p99 > +10").contains("needs a unit"));
        assert!(e("count > +ten").contains("not a number of calls"));
    }

    #[test]
    fn crossing_compares_the_change_or_the_value() {
        let p = b("p99 > +10%");
        assert_eq!(p.crossed(Some(100.0), Some(111.0)), Some(true));
        assert_eq!(p.crossed(Some(100.0), Some(110.0)), Some(false));
        assert_eq!(
            b("p99 >= +10%").crossed(Some(100.0), Some(110.0)),
            Some(true)
        );
        assert_eq!(p.crossed(Some(0.0), Some(5.0)), None);
        assert_eq!(p.crossed(None, Some(5.0)), None);
        let c = b("count < -20%");
        assert_eq!(c.crossed(Some(1000.0), Some(790.0)), Some(true));
        assert_eq!(c.crossed(Some(1000.0), Some(800.0)), Some(false));
        let v = b("max > 50ms");
        assert_eq!(v.crossed(None, Some(50e6 + 1.0)), Some(true));
        assert_eq!(v.crossed(Some(1.0), Some(50e6)), Some(false));
        let d = b("avg > +2ms");
        assert_eq!(d.crossed(Some(1e6), Some(3.5e6)), Some(true));
        assert_eq!(d.crossed(Some(1e6), Some(2.5e6)), Some(false));
    }
}
