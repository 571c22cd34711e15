//! Histogram math and every renderer, on counters built from fuzz input.
//!
//! Counters come two ways. `Kernel`: calls recorded as the BPF program
//! records them (`record_ns`, `add_bucket` in src/bpf/counters.h), per CPU,
//! then merged as `probe::take` merges them: every value is one the kernel
//! can produce. `Raw`: any counters within what the kernel can reach in
//! practice: counts below 2^40, durations below 2^62 ns (146 years), min
//! and max in any order. Any panic on either is a bug. Property checks
//! (`assert!`) hold for every input.
#![no_main]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tachy::report::hist::{self, bucket_of, bucket_range, round_to_precision, NBUCKETS};
use tachy::report::tree::{self, TreeNode, TreeReport};
use tachy::report::{fmt, json, text, Counts, FuncReport, Hist, Report, Unit};

/// Counts stay below this: a kernel counter does not reach 2^40 events.
const MAX_COUNT: u64 = (1 << 40) - 1;
/// Durations of raw counters and tree nodes stay below this (146 years).
const MAX_NS: u64 = 1 << 62;
/// A kernel-recorded call lasts at most 2^48 ns (3.2 days); with at most
/// 64 call records of at most 2^48 ns in all, sums cannot wrap.
const MAX_CALL_NS: u64 = 1 << 48;
const MAX_CALLS: usize = 64;
const CPUS: usize = 4;
const MAX_NODES: usize = 128;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Values and bucket indexes for the bucket round trip.
    values: Vec<u64>,
    /// Bounds for round_to_precision (ordered before use).
    ranges: Vec<(u64, u64)>,
    /// Sparse histogram for the math checks: (bucket index, count).
    buckets: Vec<(u16, u64)>,
    /// Extra quantiles, scaled into 0..=100.
    quantiles: Vec<u16>,
    unit: u8,
    timestamp: bool,
    time: i64,
    funcs: Vec<FuncIn>,
    filter: Option<String>,
    nodes: Vec<NodeIn>,
    svg: bool,
    all_sites: bool,
}

#[derive(Arbitrary, Debug)]
struct FuncIn {
    name: String,
    raw_name: String,
    object: String,
    counts: CountsIn,
}

#[derive(Arbitrary, Debug)]
enum CountsIn {
    Kernel {
        /// The duration filter (`--slower-than`, `--faster-than`), ns.
        min_filter: u64,
        max_filter: u64,
        calls: Vec<CallIn>,
    },
    Raw {
        count: u64,
        total_ns: u64,
        min_ns: u64,
        max_ns: u64,
        unwound: u64,
        filtered: u64,
        overflow: u64,
        indirect_tail: u64,
        buckets: Vec<(u16, u64)>,
    },
}

#[derive(Arbitrary, Debug)]
struct CallIn {
    cpu: u8,
    ns: u64,
    repeat: u32,
    /// 0..=2: a timed call (2: through an indirect tail jump), 3: left by
    /// exception, 4: not timed, frame stack full.
    what: u8,
}

#[derive(Arbitrary, Debug)]
struct NodeIn {
    name: String,
    site: Option<String>,
    kind: u8,
    count: u64,
    total_ns: u64,
    unwound: u64,
    filtered: u64,
    hist: Option<Vec<(u16, u64)>>,
    children: u8,
}

fn unit_of(u: u8) -> Unit {
    match u % 3 {
        0 => Unit::Nsec,
        1 => Unit::Usec,
        _ => Unit::Msec,
    }
}

/// A sparse histogram of values the kernel can bucket in `unit`: none
/// above MAX_NS ns, counts below 2^40.
fn hist_of(sparse: &[(u16, u64)], unit: Unit) -> Hist {
    let top = bucket_of(MAX_NS / unit.ns());
    let mut dense = vec![0u64; NBUCKETS];
    for &(b, n) in sparse.iter().take(64) {
        dense[b as usize % (top + 1)] = n & MAX_COUNT;
    }
    Hist::from_buckets(&dense)
}

/// What `record_ns` and `count_unwound` in src/bpf/counters.h leave in one CPU's
/// counters, for `n` calls of `d` ns.
fn record(s: &mut Counts, unit: Unit, min_f: u64, max_f: u64, c: &CallIn) {
    let d = c.ns % (MAX_CALL_NS + 1);
    let n = u64::from(c.repeat).clamp(1, (MAX_CALL_NS / d.max(1)).max(1));
    match c.what % 5 {
        3 => s.unwound += n,
        4 => s.overflow += n,
        what => {
            if d < min_f || (max_f != 0 && d > max_f) {
                s.filtered += n;
                return;
            }
            if what == 2 {
                s.indirect_tail += n;
            }
            if s.count == 0 || d < s.min_ns {
                s.min_ns = d;
            }
            if d > s.max_ns {
                s.max_ns = d;
            }
            s.count += n;
            s.total_ns += d * n;
            let b = bucket_of(if unit.ns() > 1 { d / unit.ns() } else { d }).min(NBUCKETS - 1);
            s.hist.buckets[b] += n;
        }
    }
}

fn counts_of(c: &CountsIn, unit: Unit) -> Counts {
    match c {
        CountsIn::Kernel {
            min_filter,
            max_filter,
            calls,
        } => {
            let mut cpus = vec![Counts::default(); CPUS];
            for call in calls.iter().take(MAX_CALLS) {
                let s = &mut cpus[call.cpu as usize % CPUS];
                record(s, unit, *min_filter, *max_filter, call);
            }
            // probe::take: each CPU's counters merged in turn.
            let mut out = Counts::default();
            for s in &cpus {
                out.merge(s);
            }
            out
        }
        CountsIn::Raw {
            count,
            total_ns,
            min_ns,
            max_ns,
            unwound,
            filtered,
            overflow,
            indirect_tail,
            buckets,
        } => {
            Counts {
                count: count & MAX_COUNT,
                total_ns: total_ns % MAX_NS,
                // Not ordered: renderers must cope with min > max (per-CPU
                // counters read while a probe updates them).
                min_ns: min_ns % MAX_NS,
                max_ns: max_ns % MAX_NS,
                unwound: unwound & MAX_COUNT,
                filtered: filtered & MAX_COUNT,
                overflow: overflow & MAX_COUNT,
                indirect_tail: indirect_tail & MAX_COUNT,
                hist_early: unwound.rotate_left(7) & MAX_COUNT,
                under: 0,
                probe_ns: 0,
                probe_add_ns: 0,
                cpu: None,
                arg_filtered: None,
                hist: hist_of(buckets, unit),
                callees: Vec::new(),
                estimated: false,
            }
        }
    }
}

fn time_of(t: i64) -> SystemTime {
    let d = Duration::from_secs(t.unsigned_abs() % (1 << 40));
    if t >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

/// Builds a tree in preorder from `nodes`: each takes `children % 4`
/// subtrees after it, at most 4 levels, at most MAX_NODES nodes in all.
fn build(
    nodes: &mut std::slice::Iter<'_, NodeIn>,
    depth: usize,
    left: &mut usize,
    unit: Unit,
) -> Option<TreeNode> {
    if *left == 0 {
        return None;
    }
    let n = nodes.next()?;
    *left -= 1;
    let kind = if depth == 0 {
        "function"
    } else {
        ["call", "plt", "indirect", "tail"][n.kind as usize % 4]
    };
    let mut children = Vec::new();
    if depth < 4 {
        for _ in 0..n.children % 4 {
            match build(nodes, depth + 1, left, unit) {
                Some(c) => children.push(c),
                None => break,
            }
        }
    }
    Some(TreeNode {
        name: n.name.clone(),
        site: n.site.clone(),
        kind,
        count: n.count & MAX_COUNT,
        total_ns: n.total_ns % (MAX_NS / MAX_NODES as u64),
        unwound: n.unwound & MAX_COUNT,
        filtered: n.filtered & MAX_COUNT,
        arg_filtered: None,
        hist: n.hist.as_ref().map(|h| hist_of(h, unit)),
        hist_early: n.filtered.rotate_left(7) & MAX_COUNT,
        probe_ns: 0,
        under: 0,
        probe_add_ns: 0,
        cpu: None,
        // Go and C trees differ only in the words of what was left.
        go: n.count & 1 == 1,
        callees: None,
        estimated: false,
        via: None,
        children,
    })
}

fn check_hist(h: &Hist, extra_q: &[f64]) {
    let slots = h.log2_slots();
    assert!(slots.len() <= 64);
    let total: u128 = h.buckets.iter().map(|&n| n as u128).sum();
    assert_eq!(
        slots.iter().map(|&n| n as u128).sum::<u128>(),
        total,
        "log2 slots lose counts"
    );
    let mut qs = vec![50.0, 99.9, 100.0];
    qs.extend_from_slice(extra_q);
    let p = h.percentiles(&qs);
    assert_eq!(p.len(), qs.len());
    for r in p.iter().flatten() {
        assert!(r.0 <= r.1);
        let _ = round_to_precision(r.0, r.1);
    }
    if total == 0 {
        assert!(p.iter().all(Option::is_none));
    }
}

fuzz_target!(|input: Input| {
    let unit = unit_of(input.unit);

    for &v in input.values.iter().take(16) {
        let b = bucket_of(v);
        assert!(b < NBUCKETS);
        let (lo, hi) = bucket_range(b);
        assert!(lo <= v && v <= hi, "{v} not in bucket {b} = [{lo}, {hi}]");
        assert_eq!((bucket_of(lo), bucket_of(hi)), (b, b));
        let b = (v % NBUCKETS as u64) as usize;
        let (lo, hi) = bucket_range(b);
        assert_eq!((bucket_of(lo), bucket_of(hi)), (b, b));
    }
    for &(a, b) in input.ranges.iter().take(16) {
        let (lo, hi) = (a.min(b), a.max(b));
        let r = round_to_precision(lo, hi);
        assert!(lo <= r && r <= hi, "round_to_precision({lo}, {hi}) = {r}");
        assert_eq!(
            round_to_precision(hi, lo),
            r,
            "a reversed range rounds alike"
        );
    }
    let extra_q: Vec<f64> = input
        .quantiles
        .iter()
        .take(8)
        .map(|&q| f64::from(q) * 100.0 / f64::from(u16::MAX))
        .collect();
    check_hist(&hist_of(&input.buckets, unit), &extra_q);

    // The latency report, text and JSON.
    let funcs: Vec<FuncReport> = input
        .funcs
        .iter()
        .take(4)
        .map(|f| FuncReport {
            name: f.name.clone(),
            raw_name: f.raw_name.clone(),
            object: f.object.clone().into(),
            counts: counts_of(&f.counts, unit),
            // Both wordings of calls not timed (exception, panic).
            go: f.name.len() % 2 == 1,
            groups: None,
        })
        .collect();
    for f in &funcs {
        check_hist(&f.counts.hist, &extra_q);
        let mut c = f.counts.clone();
        c.merge(&f.counts);
    }
    let report = Report {
        time: time_of(input.time),
        span: Some(Duration::from_millis(input.time.unsigned_abs() % 10_000)),
        unit,
        timestamp: input.timestamp,
        all: input.timestamp,
        funcs,
    };
    let mut out = Vec::new();
    text::render(&report, &mut out).expect("writing to a Vec");
    out.clear();
    json::render(&report, &mut out).expect("writing to a Vec");
    serde_json_check(&out);

    // The nested report: text, JSON, folded stacks, and sometimes SVG.
    let mut it = input.nodes.iter();
    let mut left = MAX_NODES;
    let mut roots = Vec::new();
    while roots.len() < 8 {
        match build(&mut it, 0, &mut left, unit) {
            Some(n) => roots.push(n),
            None => break,
        }
    }
    let callees_before = input.filter.is_some().then(|| "--slower-than".to_string());
    let tr = TreeReport {
        time: time_of(input.time),
        timestamp: input.timestamp,
        unit,
        filter: input.filter,
        all_sites: input.all_sites,
        callees_before,
        roots,
    };
    let mut out = Vec::new();
    tree::render_text(&tr, &mut out).expect("writing to a Vec");
    out.clear();
    tree::render_json(&tr, &mut out).expect("writing to a Vec");
    serde_json_check(&out);
    out.clear();
    tree::render_folded(&tr, &mut out).expect("writing to a Vec");
    if input.svg {
        out.clear();
        let _ = tree::render_svg(&tr, &mut out);
    }
    for r in &tr.roots {
        let _ = fmt::compact(&r.name, 20);
        let _ = fmt::human(r.total_ns as f64);
    }
    let _ = hist::SUB;
});

/// A JSON renderer writes one line of valid JSON.
fn serde_json_check(out: &[u8]) {
    assert!(out.ends_with(b"\n"));
    assert_eq!(
        out.iter().filter(|&&c| c == b'\n').count(),
        1,
        "JSON is one line"
    );
    assert!(out.starts_with(b"{"));
}
