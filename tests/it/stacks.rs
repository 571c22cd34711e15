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

/// tachy latency with `opts` on the fixture `name`, attached by pid before
/// the fixture starts its calls.
fn traced(name: &str, opts: &[&str]) -> Outcome {
    let mut fx = Fixture::spawn(name, &[&N.to_string()]);
    let pid = fx.pid().to_string();
    let mut args = vec!["latency", "--json", "-p", &pid];
    args.extend_from_slice(opts);
    let mut t = Tachy::start(&args, &[]);
    t.wait_for_header(true);
    fx.go();
    let out = t.finish(Duration::from_secs(60));
    let (status, stdout) = fx.wait();
    assert!(status.success(), "fixture failed: {stdout}");
    assert!(
        stdout.contains(&format!("count slow {}", 4 * N)),
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
    let mut fx = Fixture::spawn("stacks_nofp", &["1"]);
    let pid = fx.pid().to_string();
    let mut t = Tachy::start(
        &[
            "latency",
            "-p",
            &pid,
            "--record-slower-than",
            "600us",
            "--stack",
            "slow",
        ],
        &[],
    );
    t.wait_for_header(false);
    fx.go();
    let out = t.finish(Duration::from_secs(60));
    drop(fx);
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    // The calls through step_b and step_c sleep 1 ms; step_a's 100 us.
    let at: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains(" slow ") && lines[i].contains("args v="))
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
