//! `tachy diff`: two reports read as `tachy merge` reads them, their
//! functions paired, and per function the change of count, average,
//! percentiles, max and the `--cpu` parts; then the `--fail-on` bounds of
//! `gate` judged on the functions present in both. Pure: reads the two
//! files it is given, traces nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use crate::cli::DiffArgs;
use crate::gate::{Bound, Figure, Verdict};
use crate::merge::{self, key, key_of, Input};
use crate::report::{Counts, CpuSplit, Unit, CPU_PARTS};

/// `tachy diff`: exit status 0, or 1 where a `--fail-on` bound was
/// crossed; an input that cannot be read ends it with status 2 (as `cmp`
/// and `diff` tell trouble from a difference).
pub fn run_diff(a: DiffArgs) -> Result<i32> {
    let d = match diff(&a.a, &a.b) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tachy: {}", crate::cli::error_text(&e));
            return Ok(2);
        }
    };
    let verdicts = judge(&a.fail_on, &d);
    let mut out = std::io::stdout().lock();
    if a.json {
        render_diff_json(&a.a, &a.b, &d, &a.fail_on, &verdicts, &mut out)
    } else {
        render_diff(&a.a, &a.b, &d, &mut out)
            .and_then(|_| render_verdicts(&a.fail_on, &verdicts, &mut out))
    }
    .and_then(|_| out.flush())
    .context("cannot write the comparison")?;
    Ok(i32::from(verdicts.iter().any(|v| v.crossed == Some(true))))
}

/// One function of `tachy diff`: its counts in A and in B.
pub struct DiffRow {
    pub name: String,
    pub object: PathBuf,
    pub a: Option<Counts>,
    pub b: Option<Counts>,
}

/// A and B side by side.
pub struct Diff {
    pub unit: Unit,
    pub rows: Vec<DiffRow>,
    /// How long A and B covered, where they say.
    pub spans: [Option<Duration>; 2],
}

/// Reads A and B (each summed over its reports) and pairs their functions.
pub fn diff(a: &Path, b: &Path) -> Result<Diff> {
    let (_, inputs) = merge::read(&[a.to_path_buf(), b.to_path_buf()], "compare")?;
    let [ia, ib]: [Input; 2] = inputs
        .try_into()
        .map_err(|_| anyhow!("nothing to compare"))?;
    let mut rows: Vec<DiffRow> = ia
        .funcs
        .iter()
        .map(|f| DiffRow {
            name: f.name.clone(),
            object: f.object.clone(),
            a: Some(f.counts.clone()),
            b: None,
        })
        .collect();
    for f in ib.funcs {
        let k = key(&f);
        match rows.iter_mut().find(|r| key_of(&r.object, &r.name) == k) {
            Some(r) => r.b = Some(f.counts),
            None => rows.push(DiffRow {
                name: f.name,
                object: f.object,
                a: None,
                b: Some(f.counts),
            }),
        }
    }
    Ok(Diff {
        unit: ia.unit,
        rows,
        spans: [ia.span, ib.span],
    })
}

/// What `tachy diff` compares, per function: (label, value in ns or
/// calls); with `cpu` (either side has `--cpu` parts), each part's average
/// per call too (None on a side without them).
fn figures(c: &Counts, unit: Unit, cpu: bool) -> Vec<(&'static str, Option<u64>)> {
    let mut out = vec![
        ("count", Some(c.count)),
        ("avg", c.total_ns.checked_div(c.count)),
    ];
    let pct = crate::report::json::percentiles_ns(c, unit);
    for ((_, name), v) in crate::report::fmt::PERCENTILES.iter().zip(pct) {
        out.push((name, v));
    }
    out.push(("max", (c.count > 0).then_some(c.max_ns)));
    if cpu {
        let parts = c.cpu.as_ref().map(CpuSplit::parts);
        for (i, label) in CPU_LABELS.iter().enumerate() {
            out.push((label, parts.and_then(|p| p[i].checked_div(c.count))));
        }
    }
    out
}

/// The `--cpu` rows of `tachy diff`: each part's average per call.
const CPU_LABELS: [&str; 3] = ["on-CPU", "blocked", "runnable"];

/// The figures of `a` and `b` side by side.
fn paired(
    a: &Counts,
    b: &Counts,
    unit: Unit,
) -> impl Iterator<Item = (&'static str, Option<u64>, Option<u64>)> {
    let cpu = a.cpu.is_some() || b.cpu.is_some();
    figures(a, unit, cpu)
        .into_iter()
        .zip(figures(b, unit, cpu))
        .map(|((label, va), (_, vb))| (label, va, vb))
}

fn change(a: Option<u64>, b: Option<u64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a > 0 => Some((b as f64 - a as f64) / a as f64 * 100.0),
        _ => None,
    }
}

/// `tachy diff`: per function, A, B and the change of count, average and
/// each percentile.
pub fn render_diff(a: &Path, b: &Path, d: &Diff, w: &mut impl Write) -> std::io::Result<()> {
    let unit = d.unit;
    writeln!(w, "A = {}", a.display())?;
    writeln!(w, "B = {}", b.display())?;
    for r in &d.rows {
        writeln!(w)?;
        writeln!(w, "Function = {} [{}]", r.name, r.object.display())?;
        let (ca, cb) = match (&r.a, &r.b) {
            (Some(ca), Some(cb)) => (ca, cb),
            (Some(_), None) => {
                writeln!(w, "  only in A")?;
                continue;
            }
            _ => {
                writeln!(w, "  only in B")?;
                continue;
            }
        };
        writeln!(w, "  {:<8} {:>14} {:>14} {:>10}", "", "A", "B", "change")?;
        for (label, va, vb) in paired(ca, cb, unit) {
            let show = |v: Option<u64>| match (v, label) {
                (None, _) => "-".to_string(),
                (Some(n), "count") => n.to_string(),
                (Some(n), _) => crate::report::fmt::human(n as f64),
            };
            let ch = match change(va, vb) {
                Some(c) => format!("{c:+.1}%"),
                None => "-".to_string(),
            };
            writeln!(w, "  {label:<8} {:>14} {:>14} {ch:>10}", show(va), show(vb))?;
        }
    }
    Ok(())
}

/// `tachy diff --json`: `{"a", "b", "functions": [{"name", "object", "a",
/// "b", "change_percent"}]}`, each side `{"count", "avg_ns", "p50", ...,
/// "max_ns"}` (ns) or null where the function is missing.
pub fn render_diff_json(
    a: &Path,
    b: &Path,
    d: &Diff,
    bounds: &[Bound],
    verdicts: &[Verdict],
    w: &mut impl Write,
) -> std::io::Result<()> {
    let (unit, rows) = (d.unit, &d.rows);
    let side = |c: &Option<Counts>, cpu: bool| match c {
        None => Value::Null,
        Some(c) => {
            let mut m = serde_json::Map::new();
            for (label, v) in figures(c, unit, cpu) {
                let key = match label {
                    "count" => "count".to_string(),
                    "avg" => "avg_ns".to_string(),
                    "max" => "max_ns".to_string(),
                    p if CPU_LABELS.contains(&p) => format!("{}_avg_ns", json_part(p)),
                    p => p.to_string(),
                };
                m.insert(key, serde_json::json!(v));
            }
            Value::Object(m)
        }
    };
    let funcs: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut change = serde_json::Map::new();
            let cpu = [&r.a, &r.b]
                .iter()
                .any(|s| s.as_ref().is_some_and(|c| c.cpu.is_some()));
            if let (Some(ca), Some(cb)) = (&r.a, &r.b) {
                for (label, va, vb) in paired(ca, cb, unit) {
                    change.insert(json_part(label), serde_json::json!(change_of(va, vb)));
                }
            }
            serde_json::json!({
                "name": r.name,
                "object": r.object.display().to_string(),
                "a": side(&r.a, cpu),
                "b": side(&r.b, cpu),
                "change_percent": change,
            })
        })
        .collect();
    let mut v = serde_json::json!({
        "a": a.display().to_string(),
        "b": b.display().to_string(),
        "functions": funcs,
    });
    if !bounds.is_empty() {
        let judged: Vec<Value> = verdicts
            .iter()
            .map(|v| {
                serde_json::json!({
                    "function": v.function,
                    "bound": v.bound,
                    "a": v.a,
                    "b": v.b,
                    "crossed": v.crossed,
                })
            })
            .collect();
        v["fail_on"] = serde_json::json!({
            "bounds": bounds.iter().map(|b| b.text.clone()).collect::<Vec<_>>(),
            "failed": verdicts.iter().any(|v| v.crossed == Some(true)),
            "verdicts": judged,
        });
    }
    serde_json::to_writer(&mut *w, &v)?;
    writeln!(w)
}

/// Every bound judged on every function present in both A and B: those
/// crossed, and those that could not be judged (a figure a side lacks).
/// Functions in one side only are judged on nothing.
pub fn judge(bounds: &[Bound], d: &Diff) -> Vec<Verdict> {
    let mut out = Vec::new();
    let rate = |c: &Counts, span: Option<Duration>| {
        span.filter(|s| !s.is_zero())
            .map(|s| c.count as f64 / s.as_secs_f64())
    };
    for r in &d.rows {
        let (Some(ca), Some(cb)) = (&r.a, &r.b) else {
            continue;
        };
        let cpu = ca.cpu.is_some() || cb.cpu.is_some();
        let (fa, fb) = (figures(ca, d.unit, cpu), figures(cb, d.unit, cpu));
        let of = |fs: &[(&str, Option<u64>)], label: &str| {
            fs.iter()
                .find(|(l, _)| *l == label)
                .and_then(|(_, v)| v.map(|n| n as f64))
        };
        for bound in bounds {
            let (va, vb) = match bound.figure {
                Figure::Count => (Some(ca.count as f64), Some(cb.count as f64)),
                Figure::Rate => (rate(ca, d.spans[0]), rate(cb, d.spans[1])),
                Figure::Time(label) => (of(&fa, label), of(&fb, label)),
            };
            let crossed = bound.crossed(va, vb);
            if crossed != Some(false) {
                out.push(Verdict {
                    function: format!("{} [{}]", r.name, r.object.display()),
                    bound: bound.text.clone(),
                    figure: bound.figure,
                    a: va,
                    b: vb,
                    crossed,
                });
            }
        }
    }
    out
}

/// After the comparison: which functions crossed which bound, and which
/// bound could not be judged where.
fn render_verdicts(
    bounds: &[Bound],
    verdicts: &[Verdict],
    w: &mut impl Write,
) -> std::io::Result<()> {
    if bounds.is_empty() {
        return Ok(());
    }
    let figure = |f: Figure, v: Option<f64>| match v {
        None => "-".to_string(),
        Some(n) if matches!(f, Figure::Time(_)) => crate::report::fmt::human(n),
        Some(n) if n.fract() == 0.0 => format!("{n}"),
        Some(n) => format!("{n:.1}"),
    };
    let crossed: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| v.crossed == Some(true))
        .collect();
    writeln!(w)?;
    let list: Vec<&str> = bounds.iter().map(|b| b.text.as_str()).collect();
    if crossed.is_empty() {
        writeln!(w, "fail-on: passed ({})", list.join(", "))?;
    } else {
        writeln!(w, "fail-on: FAILED ({})", list.join(", "))?;
    }
    for v in verdicts {
        let change = match (v.a, v.b) {
            (Some(a), Some(b)) if a != 0.0 => format!(" ({:+.1}%)", (b - a) / a * 100.0),
            _ => String::new(),
        };
        let what = if v.crossed == Some(true) {
            "crossed"
        } else {
            "not judged (a side lacks the figure)"
        };
        writeln!(
            w,
            "  {}: {what} {}: {} -> {}{change}",
            v.function,
            v.bound,
            figure(v.figure, v.a),
            figure(v.figure, v.b),
        )?;
    }
    Ok(())
}

/// A figure's name in `change_percent`: a `--cpu` part as the JSON report
/// names it (`oncpu`, `blocked`, `runnable`).
fn json_part(label: &str) -> String {
    match CPU_LABELS.iter().position(|l| *l == label) {
        Some(i) => CPU_PARTS[i].1.to_string(),
        None => label.to_string(),
    }
}

fn change_of(a: Option<u64>, b: Option<u64>) -> Option<f64> {
    change(a, b).map(|c| (c * 10.0).round() / 10.0)
}
