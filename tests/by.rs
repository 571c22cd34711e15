//! Root-run integration tests of `--by`: calls broken down by caller,
//! thread and process, counted in the kernel, with `--top` and a group map
//! that fills. On the `why` fixture's callers mode (tests/fixtures/why.c:
//! target() from three callers, 5, 3 and 2 times per iteration) and the
//! `by` fixture (tests/fixtures/by.cpp: a C++ method at -O2, called from
//! two call sites on named threads).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::run::{Outcome, Tachy};
use common::{tagged, Fixture};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const SCAN: &str = "grp::Table::scan(int)";

/// Runs `tachy latency OPTS... -- FIXTURE ARGS...`, without the go signal,
/// with `envs` for tachy.
fn run(opts: &[&str], fixture: &str, args: &[&str], envs: &[(&str, &str)]) -> Outcome {
    let exe = common::build(fixture);
    let exe = exe.to_str().unwrap().to_string();
    let mut all: Vec<&str> = vec!["latency"];
    all.extend_from_slice(opts);
    all.push("--");
    all.push(&exe);
    all.extend_from_slice(args);
    let mut env = vec![("FIXTURE_NO_WAIT", "1")];
    env.extend_from_slice(envs);
    Tachy::start(&all, &env).finish(RUN_TIMEOUT)
}

fn func<'a>(rep: &'a Value, name: &str) -> &'a Value {
    rep["functions"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["name"] == name))
        .unwrap_or_else(|| panic!("no function {name} in {rep}"))
}

fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// What the fixture printed (on tachy's standard error with JSON).
fn fixture_text(out: &Outcome) -> String {
    format!("{}\n{}", out.stdout, out.stderr)
}

/// The groups of function `name` as label -> count, the label made of
/// each key value: `function at location` for a caller, `comm tid` for a
/// thread, `comm pid` for a process.
fn groups(rep: &Value, name: &str) -> BTreeMap<String, u64> {
    let f = func(rep, name);
    let mut out = BTreeMap::new();
    for g in f["groups"].as_array().expect("a groups array") {
        let mut parts = Vec::new();
        if let Some(c) = g.get("caller") {
            parts.push(format!(
                "{} at {}",
                c["function"].as_str().unwrap_or("?"),
                c["location"].as_str().unwrap_or("?")
            ));
        }
        if let Some(t) = g.get("tid") {
            parts.push(format!("{} {}", t["comm"].as_str().unwrap(), t["tid"]));
        }
        if let Some(p) = g.get("pid") {
            parts.push(format!("{} {}", p["comm"].as_str().unwrap(), p["pid"]));
        }
        let label = parts.join(", ");
        assert!(
            out.insert(label.clone(), num(g, "count")).is_none(),
            "{label} twice in {f}"
        );
    }
    out
}

fn map(pairs: &[(String, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().cloned().collect()
}

/// The line of each caller's call, as the why fixture prints it.
fn why_lines(out: &Outcome) -> BTreeMap<String, u64> {
    tagged(&fixture_text(out), "line")
}

/// `--by caller` on a C function called from three callers: exact counts
/// per caller, each named with the line of its call (which the fixture
/// prints from __LINE__), in JSON and in text.
#[test]
fn callers_have_exact_counts_and_lines() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run(
        &["--json", "--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    out.assert_success();
    let rep = out.single_report();
    let lines = why_lines(&out);
    let at = |c: &str| format!("{c} at why.c:{}", lines[c]);
    assert_eq!(
        groups(&rep, "target"),
        map(&[
            (at("caller_one"), 50),
            (at("caller_two"), 30),
            (at("caller_three"), 20)
        ]),
        "{out}"
    );
    let f = func(&rep, "target");
    assert_eq!(num(f, "count"), 100, "{out}");
    assert_eq!(f["by"], serde_json::json!(["caller"]));
    assert!(f["groups_other"].is_null() && f["groups_not_kept"].is_null());
    let totals: Vec<u64> = f["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| num(g, "total_ns"))
        .collect();
    assert!(
        totals.windows(2).all(|w| w[0] >= w[1]),
        "not by total\n{out}"
    );

    let out = run(
        &["-u", "--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    out.assert_success();
    let text = &out.stdout;
    let section = text
        .split_once("\ncalled from:\n")
        .unwrap_or_else(|| panic!("no called from section\n{out}"))
        .1;
    let rows: Vec<&str> = section.lines().take(3).collect();
    for (c, n) in [("caller_one", 50), ("caller_two", 30), ("caller_three", 20)] {
        let row = rows
            .iter()
            .find(|r| r.starts_with(&format!("  {} ", at(c))))
            .unwrap_or_else(|| panic!("no line for {c}\n{out}"));
        assert!(row.contains(&format!("count {n} ")), "{row:?}\n{out}");
        assert!(
            row.contains(" usecs   p50 ") && row.ends_with(" usecs"),
            "{row}"
        );
    }
}

/// `--top 1`: the caller with the most time is kept, the two others are
/// one "other (2 groups)" line with the rest of the 100 calls. (Which
/// caller has the most time is up to the machine: 50 calls of 200 us, or
/// fewer calls that a busy machine delayed.)
#[test]
fn top_folds_the_rest_into_other() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run(
        &["--json", "--by", "caller", "--top", "1", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    out.assert_success();
    let rep = out.single_report();
    let lines = why_lines(&out);
    let calls = |c: &str| match c {
        "caller_one" => 50,
        "caller_two" => 30,
        _ => 20,
    };
    let kept = groups(&rep, "target");
    assert_eq!(kept.len(), 1, "{out}");
    let (label, n) = kept.iter().next().unwrap();
    let caller = label.split(' ').next().unwrap();
    assert_eq!(
        label,
        &format!("{caller} at why.c:{}", lines[caller]),
        "{out}"
    );
    assert_eq!(*n, calls(caller), "{out}");
    let f = func(&rep, "target");
    let other = &f["groups_other"];
    assert_eq!(
        (num(other, "groups"), num(other, "count")),
        (2, 100 - n),
        "{out}"
    );
    // The one kept has at least as much time as each of the two folded.
    assert!(2 * num(&f["groups"][0], "total_ns") >= num(other, "total_ns"));

    let out = run(
        &["--by", "caller", "--top", "1", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    out.assert_success();
    let other = out
        .stdout
        .lines()
        .find(|l| l.starts_with("  other (2 groups) "))
        .unwrap_or_else(|| panic!("no other line\n{out}"));
    assert!(
        ["count 50 ", "count 70 ", "count 80 "]
            .iter()
            .any(|c| other.contains(c)),
        "{out}"
    );
}

/// A group map with room for 2 groups: the third caller's calls (its
/// call sites come last in each iteration) are counted as not grouped,
/// and said so, never dropped.
#[test]
fn a_full_map_counts_the_rest_as_not_grouped() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let small = [("TACHY_BY_GROUPS", "2")];
    let out = run(
        &["--json", "--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &small,
    );
    out.assert_success();
    let rep = out.single_report();
    let lines = why_lines(&out);
    let at = |c: &str| format!("{c} at why.c:{}", lines[c]);
    assert_eq!(
        groups(&rep, "target"),
        map(&[(at("caller_one"), 50), (at("caller_two"), 30)]),
        "{out}"
    );
    let f = func(&rep, "target");
    let rest = &f["groups_not_kept"];
    assert_eq!(
        (num(rest, "count"), num(rest, "map_groups")),
        (20, 2),
        "{out}"
    );
    assert_eq!(num(f, "count"), 100, "{out}");

    let out = run(
        &["--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &small,
    );
    out.assert_success();
    assert!(
        out.stdout.lines().any(
            |l| l.starts_with("  not grouped: the map of 2 groups was full ")
                && l.contains("count 20 ")
        ),
        "{out}"
    );
}

/// The thread ids and names the by fixture printed, as `name tid`.
fn threads(out: &Outcome) -> Vec<String> {
    tagged(&fixture_text(out), "tid")
        .into_iter()
        .map(|(name, tid)| format!("{name} {tid}"))
        .collect()
}

/// `--by tid` on a C++ method at -O2: each thread with its name and its
/// exact count.
#[test]
fn threads_have_names_and_exact_counts() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run(
        &["--json", "--by", "tid", "grp::Table::scan"],
        "by",
        &["10", "2"],
        &[],
    );
    out.assert_success();
    let rep = out.single_report();
    let t = threads(&out);
    let named = |prefix: &str| t.iter().find(|x| x.starts_with(prefix)).unwrap().clone();
    assert_eq!(
        groups(&rep, SCAN),
        map(&[
            (named("by "), 10),
            (named("by-worker-1 "), 10),
            (named("by-worker-2 "), 20)
        ]),
        "{out}"
    );
}

/// `--by caller --by tid` on the C++ method at -O2: the two call sites,
/// each with file:line, split by thread.
#[test]
fn callers_of_a_cpp_method_by_thread() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run(
        &[
            "--json",
            "--by",
            "caller",
            "--by",
            "tid",
            "grp::Table::scan",
        ],
        "by",
        &["10", "2"],
        &[],
    );
    out.assert_success();
    let rep = out.single_report();
    let text = fixture_text(&out);
    let lines = tagged(&text, "line");
    let t = threads(&out);
    let named = |prefix: &str| t.iter().find(|x| x.starts_with(prefix)).unwrap().clone();
    let front = format!("grp::front(grp::Table&) at by.cpp:{}", lines["grp::front"]);
    let back = format!(
        "grp::back(grp::Table&, int) at by.cpp:{}",
        lines["grp::back"]
    );
    assert_eq!(
        groups(&rep, SCAN),
        map(&[
            (format!("{front}, {}", named("by ")), 10),
            (format!("{back}, {}", named("by-worker-1 ")), 10),
            (format!("{back}, {}", named("by-worker-2 ")), 20),
        ]),
        "{out}"
    );
}

/// `--by pid` on a path target: two processes running the fixture, each
/// with its exact count and its command.
#[test]
fn processes_of_a_path_target() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let exe = common::build("by");
    let mut a = Fixture::spawn("by", &["10", "2"]);
    let mut b = Fixture::spawn("by", &["5", "1"]);
    let spec = format!("{}:grp::Table::scan", exe.display());
    let mut t = Tachy::start(&["latency", "--json", "--by", "pid", &spec], &[]);
    t.wait_for_header(true);
    a.go();
    b.go();
    let (pa, pb) = (a.pid(), b.pid());
    let (sa, _) = a.wait();
    let (sb, _) = b.wait();
    assert!(sa.success() && sb.success());
    t.signal(libc::SIGINT);
    let out = t.finish(RUN_TIMEOUT);
    out.assert_success();
    let rep = out.single_report();
    // 10 + 10 + 20 calls, and 5 + 5.
    assert_eq!(
        groups(&rep, SCAN),
        map(&[(format!("by {pa}"), 40), (format!("by {pb}"), 10)]),
        "{out}"
    );
}

/// System calls group by thread: the why fixture's target() sleeps with
/// clock_nanosleep, 100 times on its main thread.
#[test]
fn system_calls_by_thread() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let out = run(
        &["--json", "--by", "tid", "syscall:clock_nanosleep"],
        "why",
        &["callers", "10"],
        &[],
    );
    out.assert_success();
    let rep = out.single_report();
    let g = groups(&rep, "syscall:clock_nanosleep");
    assert_eq!(g.len(), 1, "{out}");
    let (label, n) = g.iter().next().unwrap();
    assert!(label.starts_with("why "), "{out}");
    assert_eq!(*n, 100, "{out}");
}

/// Keys that mean nothing together, or for what is traced: one line,
/// exit status 2 for usage.
#[test]
fn nonsense_is_refused() {
    let _g = common::serial();
    let cases: [(&[&str], i32, &str); 4] = [
        (
            &["--by", "tid", "--by", "pid", "-p", "1", "f"],
            2,
            "--by tid and --by pid do not go together",
        ),
        (
            &["--by", "tid", "--by", "tid", "-p", "1", "f"],
            2,
            "--by tid is given twice",
        ),
        (&["--top", "3", "-p", "1", "f"], 2, "--by"),
        (
            &["--by", "colour", "-p", "1", "f"],
            2,
            "is not a key to group by",
        ),
    ];
    for (args, code, text) in cases {
        let mut all = vec!["latency"];
        all.extend_from_slice(args);
        let out = Tachy::start(&all, &[]).finish(RUN_TIMEOUT);
        out.assert_no_panic();
        assert_eq!(out.code(), Some(code), "{out}");
        assert!(out.stderr.contains(text), "{out}");
    }
    if common::skip_unless_root() {
        return;
    }
    let out = run(
        &["--by", "caller", "syscall:clock_nanosleep"],
        "why",
        &["callers", "1"],
        &[],
    );
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(
        out.stderr
            .contains("--by caller: a system call (syscall:clock_nanosleep) has no caller"),
        "{out}"
    );
}
