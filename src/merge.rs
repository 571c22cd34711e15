//! `tachy merge`: reports of many runs or hosts read back from `--json`
//! reports and `--hlog` logs and added up; `tachy diff` reads its two
//! inputs here too. Exact: every input carries the kernel's own buckets,
//! which are the same on every host. Functions are matched by demangled
//! name and the base name of their object. Pure: reads the files it is
//! given, traces nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use crate::cli::MergeArgs;
use crate::report::hist::{bucket_of, bucket_range};
use crate::report::hlog::{self, HlogWriter};
use crate::report::{Counts, CpuSplit, FuncReport, Hist, Report, Unit, CPU_PARTS};

/// A function of the merged report, with the count each input gave it.
pub struct Merged {
    pub func: FuncReport,
    /// Calls per input, in the order of the inputs.
    pub per_input: Vec<u64>,
}

/// The sum of every input.
pub struct Merge {
    pub inputs: Vec<PathBuf>,
    pub unit: Unit,
    /// When the earliest input began and the latest ended.
    pub start: SystemTime,
    pub end: SystemTime,
    pub funcs: Vec<Merged>,
}

impl Merge {
    pub fn report(&self) -> Report {
        Report {
            time: self.end,
            span: self.end.duration_since(self.start).ok(),
            unit: self.unit,
            timestamp: false,
            // Every function an input named.
            all: true,
            funcs: self.funcs.iter().map(|m| m.func.clone()).collect(),
        }
    }
}

/// One input file, all its reports or intervals summed.
pub struct Input {
    pub unit: Unit,
    pub start: SystemTime,
    pub end: SystemTime,
    /// How long its reports covered in all (None where one does not say).
    pub span: Option<Duration>,
    pub funcs: Vec<FuncReport>,
}

/// How functions of different inputs are matched.
pub fn key(f: &FuncReport) -> (String, String) {
    key_of(&f.object, &f.name)
}

/// [`key`] of the function `name` of `object`.
pub fn key_of(object: &Path, name: &str) -> (String, String) {
    let base = object
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_else(|| object.display().to_string());
    (base, name.to_string())
}

/// Adds `f` to `g`, the same function.
fn add_to(g: &mut FuncReport, f: &FuncReport) {
    merge_counts(&mut g.counts, &f.counts);
    g.go |= f.go;
    if g.object != f.object {
        // The same function of objects at different paths: name only what
        // they share.
        g.object = PathBuf::from(key(f).0);
    }
}

/// Adds `f` to `g`. The `--cpu` parts (and their histograms) are kept only
/// where both sides have them, or one side has no calls: calls without
/// parts would leave the sum of the parts short of the calls' time.
fn merge_counts(g: &mut Counts, f: &Counts) {
    let lacks = |c: &Counts| c.count > 0 && c.cpu.is_none();
    let lacks_hist = |c: &Counts| c.count > 0 && c.cpu.as_ref().is_some_and(|s| s.hist.is_none());
    let drop = lacks(g) || lacks(f);
    let drop_hist = lacks_hist(g) || lacks_hist(f);
    g.merge(f);
    if drop {
        g.cpu = None;
    } else if let (true, Some(s)) = (drop_hist, g.cpu.as_mut()) {
        s.hist = None;
    }
}

/// The `--cpu` parts of a function of a JSON report (`"cpu"`), if it has
/// them.
fn json_cpu(f: &Value) -> Result<Option<CpuSplit>> {
    let cpu = match f.get("cpu") {
        None | Some(Value::Null) => return Ok(None),
        Some(c) => c,
    };
    let part = |key: &str| {
        cpu.get(format!("{key}_ns"))
            .and_then(Value::as_u64)
            .ok_or_else(|| anyhow!("\"cpu\" without {key}_ns"))
    };
    let mut split = CpuSplit {
        oncpu_ns: part(CPU_PARTS[0].1)?,
        blocked_ns: part(CPU_PARTS[1].1)?,
        runq_ns: part(CPU_PARTS[2].1)?,
        hist: None,
    };
    if let Some(h) = cpu.get("log2_buckets").filter(|h| !h.is_null()) {
        let slots = |key: &str| -> Result<Vec<u64>> {
            h.get(key)
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
                .ok_or_else(|| anyhow!("\"cpu\" log2_buckets without {key}"))
        };
        split.hist = Some([
            slots(CPU_PARTS[0].1)?,
            slots(CPU_PARTS[1].1)?,
            slots(CPU_PARTS[2].1)?,
        ]);
    }
    Ok(Some(split))
}

fn add(into: &mut Vec<FuncReport>, f: FuncReport) {
    match into.iter_mut().find(|g| key(g) == key(&f)) {
        Some(g) => add_to(g, &f),
        None => into.push(f),
    }
}

/// Reads a `tachy latency --json` report file or an `--hlog` log.
fn load(path: &Path) -> Result<Input> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let input = if first == Some(&b'{') {
        load_json(&bytes)
    } else {
        load_hlog(&bytes).or_else(|e| {
            // A log still being written may end in half a line: the
            // intervals before it are whole.
            let Some(cut) = unfinished_line(&bytes) else {
                return Err(e);
            };
            let input = load_hlog(&bytes[..cut]).map_err(|_| e)?;
            eprintln!(
                "tachy: {}: the last line is incomplete (still being written?): left out",
                path.display()
            );
            Ok(input)
        })
    };
    input.with_context(|| format!("{}", path.display()))
}

/// Where the last line begins, if the file does not end with a newline.
fn unfinished_line(bytes: &[u8]) -> Option<usize> {
    if matches!(bytes.last(), None | Some(b'\n')) {
        return None;
    }
    Some(bytes.iter().rposition(|&b| b == b'\n').map_or(0, |k| k + 1))
}

fn load_hlog(bytes: &[u8]) -> Result<Input> {
    let intervals = hlog::read(bytes, None)?;
    let (Some(first), Some(last)) = (intervals.first(), intervals.last()) else {
        bail!("the log has no histograms");
    };
    let mut input = Input {
        unit: first.report.unit,
        start: first.start,
        end: last.report.time,
        span: None,
        funcs: Vec::new(),
    };
    for i in intervals {
        input.start = input.start.min(i.start);
        input.end = input.end.max(i.report.time);
        for f in i.report.funcs {
            add(&mut input.funcs, f);
        }
    }
    // A run's intervals follow each other: the log covers first to last.
    input.span = input.end.duration_since(input.start).ok();
    Ok(input)
}

fn load_json(bytes: &[u8]) -> Result<Input> {
    let text = std::str::from_utf8(bytes).context("not a text file")?;
    let mut input: Option<Input> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| anyhow!("line {}: not a JSON report: {e}", i + 1))?;
        // --record-slower-than's records and lost counts, between reports.
        if matches!(
            v.get("type").and_then(Value::as_str),
            Some("record" | "records_lost")
        ) {
            continue;
        }
        if v.get("roots").is_some() {
            bail!("line {}: a tachy nested report; merge takes tachy latency --json reports and --hlog logs", i + 1);
        }
        let funcs = v
            .get("functions")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                anyhow!(
                    "line {}: no \"functions\": not a tachy latency --json report",
                    i + 1
                )
            })?;
        let time = v
            .get("time")
            .and_then(Value::as_f64)
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(|t| UNIX_EPOCH + std::time::Duration::from_secs_f64(t))
            .unwrap_or(UNIX_EPOCH);
        let interval = v
            .get("interval_s")
            .and_then(Value::as_f64)
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(Duration::from_secs_f64);
        let into = input.get_or_insert_with(|| Input {
            unit: Unit::Nsec,
            start: time,
            end: time,
            span: Some(Duration::ZERO),
            funcs: Vec::new(),
        });
        into.start = into.start.min(time);
        into.end = into.end.max(time);
        into.span = into.span.zip(interval).map(|(a, b)| a + b);
        for f in funcs {
            let (unit, mut func) = json_func(f).with_context(|| format!("line {}", i + 1))?;
            if into.funcs.is_empty() {
                into.unit = unit;
            } else if unit != into.unit {
                let earlier = into.unit;
                let mixed = || {
                    format!(
                        "line {}: buckets in {} where earlier ones are in {}",
                        i + 1,
                        unit.label(),
                        earlier.label()
                    )
                };
                // Both sides end in the coarser of the two units.
                if unit.ns() > into.unit.ns() {
                    into.coarsen(unit).with_context(mixed)?;
                } else {
                    coarsen_func(&mut func, unit, into.unit).with_context(mixed)?;
                }
            }
            add(&mut into.funcs, func);
        }
    }
    input.ok_or_else(|| anyhow!("no report in the file"))
}

/// A function of a JSON report, and the unit of its buckets.
fn json_func(f: &Value) -> Result<(Unit, FuncReport)> {
    let s = |k: &str| {
        f.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| anyhow!("a function without {k:?}"))
    };
    let n = |k: &str| f.get(k).and_then(Value::as_u64).unwrap_or(0);
    let name = s("name")?;
    let unit = s("log2_unit")
        .ok()
        .and_then(|u| Unit::from_label(&u))
        .ok_or_else(|| anyhow!("{name}: no log2_unit"))?;
    let buckets = f.get("buckets").and_then(Value::as_array).ok_or_else(|| {
        anyhow!("{name}: no \"buckets\" (a report of an older tachy cannot be merged exactly)")
    })?;
    let mut hist = Hist::default();
    for b in buckets {
        let pair = b.as_array().filter(|p| p.len() == 2);
        let lo = pair.and_then(|p| p[0].as_u64());
        let calls = pair.and_then(|p| p[1].as_u64());
        let (Some(lo), Some(calls)) = (lo, calls) else {
            bail!("{name}: a bucket is not [lowest value, calls]: {b}");
        };
        hist.buckets[bucket_of(lo)] += calls;
    }
    let counts = Counts {
        count: n("count"),
        total_ns: n("total_ns"),
        min_ns: n("min_ns"),
        max_ns: n("max_ns"),
        unwound: n("unwound"),
        filtered: n("filtered"),
        overflow: n("overflow"),
        indirect_tail: n("indirect_tail"),
        arg_filtered: f.get("filtered_by_args").and_then(Value::as_u64),
        cpu: json_cpu(f).with_context(|| name.clone())?,
        hist,
        ..Counts::default()
    };
    let in_hist: u64 = counts.hist.buckets.iter().sum();
    if in_hist != counts.count {
        bail!(
            "{name}: {} calls in the buckets but a count of {}",
            in_hist,
            counts.count
        );
    }
    Ok((
        unit,
        FuncReport {
            raw_name: s("raw_name").unwrap_or_else(|_| name.clone()),
            object: PathBuf::from(s("object").unwrap_or_default()),
            name,
            // Go code, whose unwound calls were left by a panic.
            go: f.get("go").and_then(Value::as_bool).unwrap_or(false),
            counts,
            groups: None,
        },
    ))
}

impl Input {
    /// Puts every function's buckets into `to`, a coarser unit.
    fn coarsen(&mut self, to: Unit) -> Result<()> {
        for f in &mut self.funcs {
            coarsen_func(f, self.unit, to)?;
        }
        self.unit = to;
        Ok(())
    }
}

/// Puts the buckets of `f`, in `from`, into the coarser unit `to`. Exact
/// or refused: a bucket of `from` is a range of durations in `from`, and the
/// kernel puts a duration d in the bucket of d / unit, so each of its calls
/// is in the `to` bucket of its value divided by 1,000 (or 1,000,000). When
/// that is the same bucket at both ends of the range, all of its calls go
/// there; when the range straddles a bound of the `to` buckets (1000 is no
/// power of two, so a range can), how many calls fall on each side is not
/// known and the conversion is refused, naming the bucket. The `--cpu`
/// parts' log2 histograms are converted the same way, or else left out (as
/// an input without them leaves them out); their totals are in ns.
fn coarsen_func(f: &mut FuncReport, from: Unit, to: Unit) -> Result<()> {
    let ratio = to.ns() / from.ns();
    let mut hist = Hist::default();
    for (b, &n) in f.counts.hist.buckets.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let (lo, hi) = bucket_range(b);
        let (first, last) = (bucket_of(lo / ratio), bucket_of(hi / ratio));
        if first != last {
            bail!(
                "{}: {n} call{} between {lo} and {hi} {}, on both sides of {} {}, where {} buckets part: how many fall on each side is not known",
                f.name,
                if n == 1 { "" } else { "s" },
                from.label(),
                bucket_range(last).0,
                to.label(),
                to.label(),
            );
        }
        hist.buckets[first] += n;
    }
    f.counts.hist = hist;
    if let Some(split) = f.counts.cpu.as_mut() {
        split.hist = split.hist.take().and_then(|parts| {
            let mut out: [Vec<u64>; 3] = Default::default();
            for (o, slots) in out.iter_mut().zip(parts) {
                *o = coarsen_log2(&slots, ratio)?;
            }
            Some(out)
        });
    }
    Ok(())
}

/// Log2 slots (slot i: [2^i, 2^(i+1)), slot 0 also 0) of values divided by
/// `ratio`; None when a slot's calls would fall in two.
fn coarsen_log2(slots: &[u64], ratio: u64) -> Option<Vec<u64>> {
    let slot = |v: u64| {
        if v == 0 {
            0
        } else {
            63 - v.leading_zeros() as usize
        }
    };
    let mut out = vec![0u64; slots.len()];
    for (i, &n) in slots.iter().enumerate().filter(|(_, &n)| n > 0) {
        let (lo, hi) = if i == 0 {
            (0, 1)
        } else {
            (1u64 << i, (1u64 << i) * 2 - 1)
        };
        let (a, b) = (slot(lo / ratio), slot(hi / ratio));
        if a != b {
            return None;
        }
        out[a] += n;
    }
    let used = out.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
    out.truncate(used);
    Some(out)
}

/// Puts every input into the coarsest unit among them, or says which
/// bucket of which input cannot be converted exactly.
fn common_unit(paths: &[PathBuf], inputs: &mut [Input], what: &str) -> Result<Unit> {
    let Some(coarsest) = inputs.iter().map(|i| i.unit).max_by_key(|u| u.ns()) else {
        bail!("nothing to {what}");
    };
    let (at, _) = inputs
        .iter()
        .enumerate()
        .find(|(_, i)| i.unit == coarsest)
        .expect("the coarsest unit is an input's");
    for (p, input) in paths.iter().zip(inputs.iter_mut()) {
        let from = input.unit;
        if from != coarsest {
            input.coarsen(coarsest).with_context(|| {
                format!(
                    "{} has buckets in {} and {} in {}, which they cannot be added to exactly",
                    p.display(),
                    from.label(),
                    paths[at].display(),
                    coarsest.label(),
                )
            })?;
        }
    }
    Ok(coarsest)
}

/// Reads every input, each summed over its reports or intervals, and puts
/// them in one unit, the coarsest among them; `what` is the command's
/// verb, for its errors (`merge`, `compare`).
pub fn read(paths: &[PathBuf], what: &str) -> Result<(Unit, Vec<Input>)> {
    let mut inputs = Vec::new();
    for p in paths {
        inputs.push(load(p)?);
    }
    let unit = common_unit(paths, &mut inputs, what)?;
    Ok((unit, inputs))
}

/// Reads every input and adds them up.
pub fn merge(paths: &[PathBuf]) -> Result<Merge> {
    let (unit, inputs) = read(paths, "merge")?;
    let Some(first) = inputs.first() else {
        bail!("nothing to merge");
    };
    let mut m = Merge {
        inputs: paths.to_vec(),
        unit,
        start: first.start,
        end: first.end,
        funcs: Vec::new(),
    };
    for (n, input) in inputs.into_iter().enumerate() {
        m.start = m.start.min(input.start);
        m.end = m.end.max(input.end);
        for f in input.funcs {
            let k = key(&f);
            let calls = f.counts.count;
            let at = match m.funcs.iter().position(|g| key(&g.func) == k) {
                Some(at) => {
                    add_to(&mut m.funcs[at].func, &f);
                    at
                }
                None => {
                    m.funcs.push(Merged {
                        func: f,
                        per_input: vec![0; paths.len()],
                    });
                    m.funcs.len() - 1
                }
            };
            m.funcs[at].per_input[n] += calls;
        }
    }
    Ok(m)
}

/// `tachy merge`: reads, adds up, prints (or writes the log).
pub fn run_merge(a: MergeArgs) -> Result<i32> {
    let m = merge(&a.files)?;
    if let Some(path) = &a.hlog {
        let f = std::fs::File::create(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        write_hlog(&m, std::io::BufWriter::new(f))
            .with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(0);
    }
    let draw = |w: &mut dyn Write| -> std::io::Result<()> {
        let mut w = w;
        if a.json {
            return render_json(&m, a.per_input, &mut w);
        }
        crate::report::text::render(&m.report(), &mut w)?;
        if a.per_input {
            render_per_input(&m, &mut w)?;
        }
        Ok(())
    };
    let mut file = match &a.output {
        Some(path) => Some((
            path.as_path(),
            std::io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot write {}", path.display()))?,
            ),
        )),
        None => None,
    };
    crate::report::draw_to(file.as_mut().map(|(p, f)| (*p, f as &mut dyn Write)), draw)?;
    Ok(0)
}

/// Writes the merged report as an interval log of one interval.
pub fn write_hlog(m: &Merge, w: impl Write) -> Result<()> {
    let mut log = HlogWriter::new(w, m.start, m.unit)?;
    log.write(&m.report(), m.start)
}

/// `--per-input`: each function's calls in each input, after the report.
pub fn render_per_input(m: &Merge, w: &mut impl Write) -> std::io::Result<()> {
    writeln!(w)?;
    writeln!(w, "Calls per input:")?;
    let width = m
        .inputs
        .iter()
        .map(|p| p.display().to_string().len())
        .max()
        .unwrap_or(0);
    for f in &m.funcs {
        writeln!(w, "{} [{}]", f.func.name, f.func.object.display())?;
        for (p, n) in m.inputs.iter().zip(&f.per_input) {
            writeln!(w, "  {:<width$}  {n}", p.display().to_string())?;
        }
    }
    Ok(())
}

/// The JSON report of a merge, with `"inputs"` (the files) and, per
/// function, `"per_input"` (calls in each) with `--per-input`.
pub fn render_json(m: &Merge, per_input: bool, w: &mut impl Write) -> std::io::Result<()> {
    let mut v = crate::report::json::value(&m.report());
    v["inputs"] = m
        .inputs
        .iter()
        .map(|p| Value::from(p.display().to_string()))
        .collect();
    if per_input {
        if let Some(funcs) = v["functions"].as_array_mut() {
            for (jf, f) in funcs.iter_mut().zip(&m.funcs) {
                jf["per_input"] = f.per_input.iter().copied().collect();
            }
        }
    }
    serde_json::to_writer(&mut *w, &v)?;
    writeln!(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn func(hist: Hist) -> FuncReport {
        FuncReport {
            name: "f".into(),
            raw_name: "f".into(),
            object: PathBuf::from("/x"),
            go: false,
            counts: Counts {
                count: hist.buckets.iter().sum(),
                hist,
                ..Counts::default()
            },
            groups: None,
        }
    }

    /// A bucket converts when all of its durations land in one bucket of
    /// the coarser unit, and then into the bucket each of them lands in.
    #[test]
    fn a_bucket_converts_into_the_bucket_of_its_durations_or_is_refused() {
        let (mut exact, mut refused) = (0, 0);
        for b in 0..bucket_of(1 << 40) {
            for (from, to) in [
                (Unit::Nsec, Unit::Usec),
                (Unit::Usec, Unit::Msec),
                (Unit::Nsec, Unit::Msec),
            ] {
                let ratio = to.ns() / from.ns();
                let mut h = Hist::default();
                h.buckets[b] = 3;
                let mut f = func(h);
                let (lo, hi) = bucket_range(b);
                match coarsen_func(&mut f, from, to) {
                    Ok(()) => {
                        exact += 1;
                        for v in [lo, (lo + hi) / 2, hi] {
                            assert_eq!(f.counts.hist.buckets[bucket_of(v / ratio)], 3, "{v}");
                        }
                    }
                    Err(e) => {
                        refused += 1;
                        assert_ne!(bucket_of(lo / ratio), bucket_of(hi / ratio));
                        assert!(
                            e.to_string().contains(&format!("between {lo} and {hi}")),
                            "{e}"
                        );
                    }
                }
            }
        }
        assert!(exact > 0 && refused > 0);
        // 1984-2047 ns holds 1.984 us and 2.047 us.
        let mut h = Hist::default();
        h.buckets[bucket_of(1984)] = 5;
        let e = coarsen_func(&mut func(h), Unit::Nsec, Unit::Usec).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f: 5 calls between 1984 and 2047 nsec, on both sides of 2 usec, where usec buckets part: how many fall on each side is not known"
        );
    }

    #[test]
    fn cpu_log2_slots_convert_or_are_left_out() {
        // 0-1, 256-511 ns are all 0 us; 1024-2047 ns straddles 1 and 2 us.
        assert_eq!(
            coarsen_log2(&[1, 0, 0, 0, 0, 0, 0, 0, 2], 1000),
            Some(vec![3])
        );
        let mut slots = vec![0; 11];
        slots[10] = 1;
        assert_eq!(coarsen_log2(&slots, 1000), None);
    }
}
