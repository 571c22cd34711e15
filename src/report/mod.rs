//! Reports: plain data built from the kernel's counters (no BPF types here),
//! the histogram math, and the renderers (`text`, `json`). Renderers take a
//! `&Report` and a writer and print nothing else.

pub mod budget;
pub mod counts;
pub mod fmt;
pub mod groups;
pub mod hist;
pub mod hlog;
pub mod json;
pub mod list;
pub mod prom;
pub mod records;
pub mod text;
pub mod tree;

use std::path::PathBuf;
use std::time::SystemTime;

pub use counts::{Callee, Counts, CpuSplit, Unit, CPU_PARTS};
pub use hist::Hist;

/// One traced function's part of a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncReport {
    /// Demangled name with parameters and clone suffix.
    pub name: String,
    pub raw_name: String,
    /// The object as users know it (as in /proc/PID/maps).
    pub object: PathBuf,
    /// Go code: calls not timed were left by a panic or runtime.Goexit.
    pub go: bool,
    pub counts: Counts,
    /// `--by`: the calls broken down by key.
    pub groups: Option<groups::Groups>,
}

/// What one interval (or the whole run) measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub time: SystemTime,
    /// The time the counts cover (None: not known, as in merged reports).
    pub span: Option<std::time::Duration>,
    pub unit: Unit,
    pub timestamp: bool,
    /// With several functions, the text report shows those never called
    /// too (`--all`).
    pub all: bool,
    pub funcs: Vec<FuncReport>,
}

/// Runs `draw` on `file` (named by its path in errors) or, without one, on
/// stdout, and flushes what it wrote.
pub fn draw_to(
    file: Option<(&std::path::Path, &mut dyn std::io::Write)>,
    draw: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    match file {
        Some((path, f)) => draw(&mut *f)
            .and_then(|_| f.flush())
            .with_context(|| format!("cannot write the report to {}", path.display())),
        None => {
            let mut out = std::io::stdout().lock();
            draw(&mut out)
                .and_then(|_| out.flush())
                .context("cannot write the report to standard output")
        }
    }
}

/// A function timed in inlined instances: its calls through out-of-line
/// copies and through the instances.
#[derive(Debug, PartialEq, Eq)]
pub struct InlinedSplit<'a> {
    pub name: &'a str,
    pub out_of_line: u64,
    pub inlined: u64,
    pub instances: usize,
}

/// The split of each function of `funcs` that has inlined instances
/// (items named `work [inlined caller_b+0x7e]`), by name.
pub fn inlined_split<'a>(funcs: impl Iterator<Item = &'a FuncReport>) -> Vec<InlinedSplit<'a>> {
    let mut by: std::collections::BTreeMap<&str, InlinedSplit<'a>> = Default::default();
    for f in funcs {
        let (name, inlined) = match f.name.split_once(" [inlined ") {
            Some((name, _)) => (name, true),
            None => (f.name.as_str(), false),
        };
        let e = by.entry(name).or_insert(InlinedSplit {
            name,
            out_of_line: 0,
            inlined: 0,
            instances: 0,
        });
        match inlined {
            true => {
                e.inlined += f.counts.count;
                e.instances += 1;
            }
            false => e.out_of_line += f.counts.count,
        }
    }
    by.into_values().filter(|s| s.instances > 0).collect()
}

#[cfg(test)]
mod golden {
    //! Golden files for every renderer. `TACHY_BLESS=1 cargo test` rewrites them.

    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn sample(unit: Unit) -> Report {
        let mut a = Counts::default();
        // 800 calls: 612 between 1.024 and 2.047 ms, 188 between 2.048 and 4.095 ms.
        let record = |c: &mut Counts, ns: u64, n: u64| {
            c.hist.buckets[hist::bucket_of(ns / unit.ns())] += n;
            c.count += n;
            c.total_ns += ns * n;
            c.min_ns = if c.min_ns == 0 { ns } else { c.min_ns.min(ns) };
            c.max_ns = c.max_ns.max(ns);
        };
        record(&mut a, 1_100_000, 300);
        record(&mut a, 1_610_000, 312);
        record(&mut a, 2_120_000, 150);
        record(&mut a, 2_433_000, 38);
        a.unwound = 3;
        let mut b = Counts::default();
        record(&mut b, 7, 2);
        record(&mut b, 300, 5);
        b.filtered = 4;
        b.arg_filtered = Some(11);
        Report {
            time: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            span: Some(Duration::from_secs(2)),
            unit,
            timestamp: false,
            all: false,
            funcs: vec![
                FuncReport {
                    go: false,
                    name: "db::Table::scan(db::Range const&) [clone .isra.0]".into(),
                    raw_name: "_ZN2db5Table4scanERKNS_5RangeE.isra.0".into(),
                    object: "/srv/db/bin/dbd".into(),
                    counts: a,
                    groups: None,
                },
                FuncReport {
                    go: false,
                    name: "fast".into(),
                    raw_name: "fast".into(),
                    object: "/srv/db/bin/dbd".into(),
                    counts: b,
                    groups: None,
                },
            ],
        }
    }

    /// Compares output with its golden file in src/report/golden;
    /// `TACHY_BLESS=1` rewrites the file instead.
    pub(crate) fn check(name: &str, got: &[u8]) {
        crate::golden::check("src/report/golden", name, got);
    }

    #[test]
    fn text_nsec() {
        let mut out = Vec::new();
        text::render(&sample(Unit::Nsec), &mut out).unwrap();
        check("text_nsec.txt", &out);
    }

    #[test]
    fn text_usec_single_function() {
        let mut r = sample(Unit::Usec);
        r.funcs.truncate(1);
        let mut out = Vec::new();
        text::render(&r, &mut out).unwrap();
        check("text_usec.txt", &out);
    }

    /// Several functions, two never called: those are left out of the
    /// text and counted on one line (`--all` shows them), and a table
    /// ends the report, most total time first. JSON keeps them all.
    #[test]
    fn text_wide() {
        let mut r = sample(Unit::Usec);
        for name in ["idle_a", "idle_b"] {
            r.funcs.push(FuncReport {
                go: false,
                name: name.into(),
                raw_name: name.into(),
                object: "/srv/db/bin/dbd".into(),
                counts: Counts {
                    probe_ns: 1_250,
                    ..Counts::default()
                },
                groups: None,
            });
        }
        // The fast one first: the table sorts by total time.
        r.funcs.swap(0, 1);
        let mut out = Vec::new();
        text::render(&r, &mut out).unwrap();
        check("text_wide.txt", &out);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("idle_"), "{text}");
        assert_eq!(text.matches("probe time subtracted").count(), 0, "{text}");

        r.all = true;
        let mut out = Vec::new();
        text::render(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Function = idle_a [/srv/db/bin/dbd]\n"),
            "{text}"
        );
        assert!(!text.contains("not called"), "{text}");
        assert!(
            text.ends_with(
                "\nidle_b                                                 0        0      -     -      -      -        0\n"
            ),
            "{text}"
        );

        let mut out = Vec::new();
        r.all = false;
        json::render(&r, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["functions"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn json_usec() {
        let mut out = Vec::new();
        json::render(&sample(Unit::Usec), &mut out).unwrap();
        check("json_usec.json", &out);
    }

    /// The first function of the sample with a `--cpu` split: 800 calls of
    /// 1581 us on average, mostly blocked; with `hist`, its parts' tables.
    fn cpu_sample(hist: bool) -> Report {
        let mut r = sample(Unit::Usec);
        r.funcs.truncate(1);
        let c = &mut r.funcs[0].counts;
        let (blocked, runq) = (1_088_000_000, 37_600_000);
        c.cpu = Some(CpuSplit {
            oncpu_ns: c.total_ns - blocked - runq,
            blocked_ns: blocked,
            runq_ns: runq,
            hist: hist.then(|| {
                [
                    vec![0, 0, 0, 0, 0, 0, 0, 200, 600],
                    vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 700, 100],
                    vec![500, 0, 0, 0, 0, 100, 200],
                ]
            }),
        });
        r
    }

    #[test]
    fn text_cpu() {
        let mut out = Vec::new();
        text::render(&cpu_sample(true), &mut out).unwrap();
        check("text_cpu.txt", &out);
    }

    #[test]
    fn json_cpu() {
        let mut out = Vec::new();
        json::render(&cpu_sample(true), &mut out).unwrap();
        check("json_cpu.json", &out);
        let mut out = Vec::new();
        json::render(&cpu_sample(false), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v["functions"][0]["cpu"].get("log2_buckets").is_none());
    }

    /// The first function of the sample broken down by caller and thread,
    /// three groups kept of four (--top 3), and calls the full map had no
    /// room for.
    fn groups_sample() -> Report {
        use groups::{Group, Groups, KeyValue};
        let mut r = sample(Unit::Usec);
        r.funcs.truncate(1);
        let calls = |n: u64, ns: u64| {
            let mut c = Counts {
                count: n,
                total_ns: n * ns,
                ..Counts::default()
            };
            c.hist.buckets[hist::bucket_of(ns / 1000)] += n;
            c
        };
        let caller = |f: &str, loc: Option<&str>, off: u64| KeyValue::Caller {
            object: "/srv/db/bin/dbd".into(),
            offset: 0x41000 + off,
            function: Some(f.into()),
            function_offset: off,
            location: loc.map(String::from),
        };
        let thread = |tid: u32, comm: &str| KeyValue::Thread {
            tid,
            comm: comm.into(),
        };
        let named = vec![
            Group {
                keys: vec![
                    caller("db::Query::run()", Some("query.cc:112"), 0x4c),
                    thread(4250, "worker-3"),
                ],
                counts: calls(600, 2_050_000),
            },
            Group {
                keys: vec![
                    caller("db::Compactor::step()", Some("compact.cc:48"), 0x1a),
                    thread(4251, "compactor"),
                ],
                counts: calls(150, 172_000),
            },
            Group {
                keys: vec![
                    caller("db::Query::run()", Some("query.cc:112"), 0x4c),
                    thread(4252, "worker-4"),
                ],
                counts: calls(40, 1_900_000),
            },
            Group {
                keys: vec![caller("main", None, 0x2f), thread(4242, "dbd")],
                counts: calls(7, 300_000),
            },
        ];
        r.funcs[0].groups = Some(Groups::build(
            vec!["caller".into(), "tid".into()],
            named,
            Some((4096, calls(3, 1_000_000))),
            Some(3),
        ));
        r
    }

    #[test]
    fn text_groups() {
        let mut out = Vec::new();
        text::render(&groups_sample(), &mut out).unwrap();
        check("text_groups.txt", &out);
    }

    #[test]
    fn json_groups() {
        let mut out = Vec::new();
        json::render(&groups_sample(), &mut out).unwrap();
        check("json_groups.json", &out);
    }

    #[test]
    fn a_zero_nanosecond_call_renders() {
        // Counters whose min exceeds max (as per-CPU sums of a broken
        // kernel side could be) still render.
        let mut c = Counts {
            count: 1,
            min_ns: 1,
            max_ns: 0,
            ..Counts::default()
        };
        c.hist.buckets[0] = 1;
        let r = Report {
            time: UNIX_EPOCH,
            span: None,
            unit: Unit::Nsec,
            timestamp: false,
            all: false,
            funcs: vec![FuncReport {
                go: false,
                name: "f".into(),
                raw_name: "f".into(),
                object: "/x".into(),
                counts: c,
                groups: None,
            }],
        };
        let mut out = Vec::new();
        text::render(&r, &mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("p50 = 0 nsecs"));
        json::render(&r, &mut Vec::new()).unwrap();
    }

    #[test]
    fn empty_function_prints_no_table() {
        let r = Report {
            time: UNIX_EPOCH,
            span: None,
            unit: Unit::Msec,
            timestamp: false,
            all: false,
            funcs: vec![FuncReport {
                go: false,
                name: "f".into(),
                raw_name: "f".into(),
                object: "/x".into(),
                counts: Counts::default(),
                groups: None,
            }],
        };
        let mut out = Vec::new();
        text::render(&r, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "avg = 0 msecs, total: 0 msecs, count: 0\nleft by exception or unwind: 0\n"
        );
    }

    /// System calls and kernel functions never unwind: no line for it.
    #[test]
    fn kernel_items_have_no_unwind_line() {
        let r = Report {
            time: UNIX_EPOCH,
            span: None,
            unit: Unit::Nsec,
            timestamp: false,
            all: false,
            funcs: vec![FuncReport {
                go: false,
                name: "syscall:read".into(),
                raw_name: "read".into(),
                object: "kernel".into(),
                counts: Counts::default(),
                groups: None,
            }],
        };
        let mut out = Vec::new();
        text::render(&r, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "avg = 0 nsecs, total: 0 nsecs, count: 0\n"
        );
    }
}
