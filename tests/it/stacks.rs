//! `--stack` (root): the user stacks of recorded calls, on the `stacks`
//! fixture built with frame pointers (walked in the kernel) and without
//! (copied and unwound with .eh_frame). Its `slow` is called through three
//! chains three deep below main: N times by step_a < route_a, N times by
//! step_b < route_b and 2N times by step_c < route_b. Chains and counts
//! per chain are exact.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::node::num;
use common::report::func;
use common::run::{json_lines, Outcome, Tachy};
use common::Fixture;
use serde_json::Value;

/// Iterations of the fixture.
const N: u64 = 12;

/// tachy latency with `opts` (`--json` first) on the fixture `name`,
/// attached by pid before the fixture starts its calls.
fn traced(name: &str, opts: &[&str]) -> Outcome {
    let mut all = vec!["--json"];
    all.extend_from_slice(opts);
    attached(name, N, &all, true)
}

/// tachy latency with `opts` on `iterations` of the fixture `name`,
/// attached by pid before the fixture starts; its header on stderr
/// (`header_on_stderr`) or stdout.
fn attached(name: &str, iterations: u64, opts: &[&str], header_on_stderr: bool) -> Outcome {
    attached_env(name, iterations, opts, header_on_stderr, &[])
}

/// [`attached`] with `env` set for tachy.
fn attached_env(
    name: &str,
    iterations: u64,
    opts: &[&str],
    header_on_stderr: bool,
    env: &[(&str, &str)],
) -> Outcome {
    let mut fx = Fixture::spawn(name, &[&iterations.to_string()]);
    let pid = fx.pid().to_string();
    let mut args = vec!["latency", "-p", &pid];
    args.extend_from_slice(opts);
    let mut t = Tachy::start(&args, env);
    t.wait_for_header(header_on_stderr);
    fx.go();
    let out = t.finish(Duration::from_secs(60));
    let (status, stdout) = fx.wait();
    assert!(status.success(), "fixture failed: {stdout}");
    assert!(
        stdout.contains(&format!("count slow {}", 4 * iterations)),
        "{stdout}"
    );
    out
}

/// The chains of callers (functions, nearest first, joined by `<`) of the
/// records, with the number of records of each, and the methods named.
fn chains(out: &Outcome) -> (BTreeMap<String, u64>, Vec<String>) {
    let mut counts = BTreeMap::new();
    let mut methods = Vec::new();
    for r in json_lines(&out.stdout)
        .iter()
        .filter(|v| v["type"] == "record")
    {
        let st = &r["stack"];
        let frames = st["frames"].as_array().expect("a stack per record");
        for f in frames {
            let loc = f["location"].as_str().unwrap_or("");
            assert!(loc.starts_with("stacks.c:"), "{f} in {out}");
        }
        let chain: Vec<&str> = frames
            .iter()
            .map(|f| f["function"].as_str().unwrap())
            .collect();
        *counts.entry(chain.join(" < ")).or_default() += 1;
        let m = st["method"].as_str().unwrap().to_string();
        if !methods.contains(&m) {
            methods.push(m);
        }
    }
    (counts, methods)
}

/// The run's one report (its other JSON lines are records).
fn report(out: &Outcome) -> Value {
    let mut reps: Vec<Value> = json_lines(&out.stdout)
        .into_iter()
        .filter(|v| v.get("functions").is_some())
        .collect();
    assert_eq!(reps.len(), 1, "{out}");
    reps.pop().unwrap()
}

fn expected() -> BTreeMap<String, u64> {
    [
        ("step_a < route_a < main", N),
        ("step_b < route_b < main", N),
        ("step_c < route_b < main", 2 * N),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect()
}

fn exact_chains(fixture: &str, method: &str) {
    let out = traced(fixture, &["--record-slower-than", "0ns", "--stack", "slow"]);
    out.assert_success();
    let rep = report(&out);
    assert_eq!(num(func(&rep, "slow"), "count"), 4 * N, "{out}");
    let (got, methods) = chains(&out);
    assert_eq!(got, expected(), "{out}");
    assert_eq!(methods, vec![method.to_string()], "{out}");
    assert!(
        out.stderr
            .contains(&format!("its callers (user stack by {method})")),
        "{out}"
    );
}

#[test]
fn frame_pointers_walked_in_the_kernel() {
    let _g = common::needs_root!();
    exact_chains("stacks_fp", "frame pointers");
}

#[test]
fn stack_copied_and_unwound_without_frame_pointers() {
    let _g = common::needs_root!();
    exact_chains("stacks_nofp", "stack copy");
}

/// Text records: the method, then one caller a line.
#[test]
fn text_records_list_callers() {
    let _g = common::needs_root!();
    let opts = ["--record-slower-than", "600us", "--stack", "slow"];
    let out = attached("stacks_nofp", 1, &opts, false);
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    // The calls with an odd argument (through step_b and step_c) sleep
    // 1 ms, the others 100 us (recorded only when a busy machine wakes
    // them late).
    let odd = |l: &str| {
        l.split_once("args v=")
            .and_then(|(_, v)| v.split_whitespace().next()?.parse::<u64>().ok())
            .is_some_and(|v| v % 2 == 1)
    };
    let at: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains(" slow ") && odd(lines[i]))
        .collect();
    assert_eq!(at.len(), 3, "{out}");
    for &i in &at {
        assert_eq!(lines[i + 1], "    stack (stack copy):", "{out}");
        assert!(lines[i + 2].starts_with("      step_"), "{out}");
        assert!(
            lines[i + 3].starts_with("      route_b at stacks.c:"),
            "{out}"
        );
        assert!(lines[i + 4].starts_with("      main at stacks.c:"), "{out}");
    }
}

/// The stack is only for records.
#[test]
fn stack_needs_records() {
    let out = Tachy::start(&["latency", "--stack", "slow"], &[]).finish(Duration::from_secs(20));
    assert_eq!(out.code(), Some(2), "{out}");
}

/// Per function, the calls of each chain of callers of `--by stack`.
fn groups(rep: &Value, name: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for g in func(rep, name)["groups"].as_array().expect("groups") {
        let chain: Vec<&str> = g["stack"]
            .as_array()
            .expect("a stack key")
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        *out.entry(chain.join(" < ")).or_default() += num(g, "count");
    }
    out
}

fn by_stack_counts(fixture: &str, method: &str) {
    let out = traced(fixture, &["--by", "stack", "slow"]);
    let rep = out.success_report();
    assert_eq!(num(func(&rep, "slow"), "count"), 4 * N, "{out}");
    assert_eq!(groups(&rep, "slow"), expected(), "{out}");
    assert_eq!(num(func(&rep, "slow"), "groups_lost"), 0, "{out}");
    assert!(
        out.stderr.contains(&format!(
            "Grouping calls by their callers out to main (user stack by {method})"
        )),
        "{out}"
    );
}

#[test]
fn by_stack_with_frame_pointers() {
    let _g = common::needs_root!();
    by_stack_counts("stacks_fp", "frame pointers");
}

#[test]
fn by_stack_from_stack_copies() {
    let _g = common::needs_root!();
    by_stack_counts("stacks_nofp", "stack copy");
}

/// A ring buffer of one page cannot hold a record with a stack copy
/// (12 KiB): every call is lost to the groups, and the report counts them
/// as not grouped, in JSON and text.
#[test]
fn by_stack_counts_the_calls_whose_records_were_lost() {
    let _g = common::needs_root!();
    let env = [("TACHY_RECORD_BUFFER", "4096")];
    let out = attached_env(
        "stacks_nofp",
        N,
        &["--json", "--by", "stack", "slow"],
        true,
        &env,
    );
    let rep = out.success_report();
    let slow = func(&rep, "slow");
    assert_eq!(num(slow, "count"), 4 * N, "{out}");
    assert_eq!(groups(&rep, "slow"), BTreeMap::new(), "{out}");
    assert_eq!(num(slow, "groups_lost"), 4 * N, "{out}");
    let out = attached_env("stacks_nofp", N, &["--by", "stack", "slow"], false, &env);
    out.assert_success();
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("not grouped"))
        .unwrap_or_else(|| panic!("no not-grouped line\n{out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words,
        [
            "not",
            "grouped:",
            "their",
            "records",
            "came",
            "faster",
            "than",
            "tachy",
            "read",
            "them",
            "count",
            &(4 * N).to_string(),
            "avg",
            "-",
            "nsecs",
            "p50",
            "-",
            "nsecs",
            "p99",
            "-",
            "nsecs"
        ],
        "{out}"
    );
}

/// A flame graph of callers: one folded line per chain, weighted by calls.
#[test]
fn folded_callers() {
    let _g = common::needs_root!();
    let out = attached(
        "stacks_nofp",
        N,
        &["--by", "stack", "--folded", "slow"],
        true,
    );
    out.assert_success();
    let mut lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("main;"))
        .collect();
    lines.sort_unstable();
    let want = [
        format!("main;route_a;step_a;slow {N}"),
        format!("main;route_b;step_b;slow {N}"),
        format!("main;route_b;step_c;slow {}", 2 * N),
    ];
    assert_eq!(lines, want, "{out}");
}

/// --by stack with a filter on an argument and one on the duration: each
/// call entered is counted in a group, or filtered, and the groups hold
/// exactly the calls counted.
#[test]
fn by_stack_with_filters_accounts_for_every_call() {
    let _g = common::needs_root!();
    // slow(v): step_a passes 2i, step_b 2i + 1, step_c 2(i + k) + 1.
    let out = traced(
        "stacks_nofp",
        &["--by", "stack", "--filter", "v >= 6", "slow"],
    );
    let rep = out.success_report();
    let f = func(&rep, "slow");
    let (counted, rejected) = (num(f, "count"), num(f, "filtered_by_args"));
    assert_eq!(
        counted + rejected + num(f, "unwound") + num(f, "filtered"),
        4 * N,
        "{out}"
    );
    // v < 6: step_a for i < 3 (3), step_b for i < 3 (3), step_c for
    // i + k < 3 (i = 0: 2, i = 1: 2, i = 2: 1).
    assert_eq!(rejected, 11, "{out}");
    assert_eq!(groups(&rep, "slow").values().sum::<u64>(), counted, "{out}");
    let want: BTreeMap<String, u64> = [
        ("step_a < route_a < main", N - 3),
        ("step_b < route_b < main", N - 3),
        ("step_c < route_b < main", 2 * N - 5),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    assert_eq!(groups(&rep, "slow"), want, "{out}");
    // By duration: the 1 ms calls (step_b and step_c) all, and a 100 us
    // one of step_a only where load stretched it past 600 us.
    let out = traced(
        "stacks_fp",
        &["--by", "stack", "--slower-than", "600us", "slow"],
    );
    let rep = out.success_report();
    let f = func(&rep, "slow");
    let counted = num(f, "count");
    assert_eq!(counted + num(f, "filtered"), 4 * N, "{out}");
    let got = groups(&rep, "slow");
    assert_eq!(got.get("step_b < route_b < main"), Some(&N), "{out}");
    assert_eq!(got.get("step_c < route_b < main"), Some(&(2 * N)), "{out}");
    let a = got.get("step_a < route_a < main").copied().unwrap_or(0);
    assert_eq!(a, counted - 3 * N, "{out}");
    assert!(a < N / 2, "{out}");
}

/// --by stack goes alone, and needs a user function.
#[test]
fn by_stack_refusals() {
    for (args, says) in [
        (
            &["latency", "--by", "stack", "--by", "tid", "slow"][..],
            "--by stack goes alone",
        ),
        (&["latency", "--folded", "slow"][..], "give --by stack"),
    ] {
        let out = Tachy::start(args, &[]).finish(Duration::from_secs(20));
        assert_eq!(out.code(), Some(2), "{out}");
        assert!(out.stderr.contains(says), "{out}");
    }
}
