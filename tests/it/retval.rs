//! Return values (root): `--by retval`, `--filter` on `ret` and `ret=` in
//! slow-call records, on the `retval` fixture, whose `fetch` returns -1
//! after 1.5 ms on every 4th call (the slow error path) and 0 or 1 after
//! 200 us otherwise; `classify` returns an enum, `touch` nothing and
//! `ratio` a double. Counts are exact: each call is timed, or rejected by
//! the filter at its entry or exit.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::node::num;
use common::report::func;
use common::run::{run_fixture, Outcome, Tachy};
use common::Fixture;
use serde_json::Value;

/// Iterations of the fixture: a multiple of 4.
const N: u64 = 40;

fn latency(opts: &[&str]) -> Outcome {
    run_fixture("latency", opts, "retval", &[&N.to_string()], &[])
}

/// Count per returned value (its text: a name where it has one).
fn by_value(f: &Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for g in f["groups"].as_array().expect("a groups array") {
        let r = &g["retval"];
        let key = match r["name"].as_str() {
            Some(n) => n.to_string(),
            None => r["value"].to_string(),
        };
        *out.entry(key).or_default() += num(g, "count");
    }
    out
}

/// fetch is called by main and by outer: 2N calls, of which N return 0,
/// N/2 return 1 and N/2 return -1.
#[test]
fn by_retval_counts_each_value() {
    let _g = common::needs_root!();
    let out = latency(&["--json", "--by", "retval", "fetch"]);
    let rep = out.success_report();
    let f = func(&rep, "fetch");
    assert_eq!(num(f, "count"), 2 * N, "{out}");
    let want: BTreeMap<String, u64> = [("-1", N / 2), ("0", N), ("1", N / 2)]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    assert_eq!(by_value(f), want, "{out}");
    // The error path is the slow one.
    let slow = f["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["retval"]["value"] == -1)
        .unwrap();
    assert!(num(slow, "avg_ns") >= 1_500_000, "{out}");
    // Text: one line per value.
    let out = latency(&["--by", "retval", "fetch"]);
    out.assert_success();
    assert!(
        out.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("retval -1 ")),
        "{out}"
    );
}

#[test]
fn enums_are_named_and_void_is_refused() {
    let _g = common::needs_root!();
    let out = latency(&["--json", "--by", "retval", "classify"]);
    let rep = out.success_report();
    let got = by_value(func(&rep, "classify"));
    let want: BTreeMap<String, u64> = [
        ("STATE_IDLE", N.div_ceil(3)),
        ("STATE_BUSY", (N + 1) / 3),
        ("STATE_FAILED", N / 3),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    assert_eq!(got, want, "{out}");
    for (opts, msg) in [
        (
            &["--by", "retval", "touch"][..],
            "error: --by retval: touch returns void",
        ),
        (
            &["--filter", "ret == 0", "touch"][..],
            "error: ret: touch returns void",
        ),
        (
            &["--by", "retval", "ratio"][..],
            "error: --by retval: ratio returns floating point (double): tachy reads integer and pointer return values",
        ),
    ] {
        let out = latency(opts);
        assert_eq!(out.code(), Some(2), "{out}");
        assert_eq!(out.stderr.lines().next(), Some(msg), "{out}");
    }
}

/// `ret < 0` keeps exactly the error calls; the others are counted as
/// rejected by the filter, at their exit.
#[test]
fn filter_on_ret_counts_the_rest_as_filtered() {
    let _g = common::needs_root!();
    let out = latency(&["--json", "--filter", "ret < 0", "fetch"]);
    let rep = out.success_report();
    let f = func(&rep, "fetch");
    assert_eq!(num(f, "count"), N / 2, "{out}");
    assert_eq!(num(f, "filtered_by_args"), 3 * N / 2, "{out}");
    assert_eq!(num(f, "unwound"), 0, "{out}");
    assert!(num(f, "min_ns") >= 1_500_000, "{out}");
    // An entry operand with it: arg0 at the entry, ret at the exit.
    let out = latency(&["--json", "--filter", "ret == 1 || arg0 < 2", "fetch"]);
    let f = func(&out.success_report(), "fetch").clone();
    // ret == 1: i % 4 == 1 (N/4 per caller); arg0 < 2 adds i = 0.
    assert_eq!(num(&f, "count"), 2 * (N / 4 + 1), "{out}");
    assert_eq!(
        num(&f, "filtered_by_args"),
        2 * N - 2 * (N / 4 + 1),
        "{out}"
    );
    let out = latency(&["--json", "--filter", "arg0 >= 20 && ret < 0", "fetch"]);
    let f = func(&out.success_report(), "fetch").clone();
    assert_eq!(num(&f, "count"), N / 4, "{out}");
    assert_eq!(num(&f, "filtered_by_args"), 2 * N - N / 4, "{out}");
}

/// The outermost traced call of `tachy nested`: its sites are kept only
/// for the calls the filter keeps.
#[test]
fn nested_root_filtered_by_ret() {
    let _g = common::needs_root!();
    let out = run_fixture(
        "nested",
        &["--json", "--filter", "ret < 10", "outer"],
        "retval",
        &[&N.to_string()],
        &[],
    );
    let rep = out.success_report();
    let root = &rep["roots"][0];
    assert_eq!(num(root, "count"), N / 4, "{out}");
    assert_eq!(num(root, "filtered_by_args"), 3 * N / 4, "{out}");
    let fetch = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str().is_some_and(|n| n.starts_with("fetch")))
        .unwrap_or_else(|| panic!("no fetch site\n{out}"));
    assert_eq!(num(fetch, "count"), N / 4, "{out}");
}

#[test]
fn records_carry_ret() {
    let _g = common::needs_root!();
    let out = latency(&["--json", "--record-slower-than", "1ms", "fetch", "classify"]);
    out.assert_success();
    let recs: Vec<Value> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "record")
        .collect();
    // Every error call (1.5 ms) is recorded with ret=-1 and no other call
    // is: a 200 us call preempted past 1 ms is recorded too, with its own
    // value.
    let errors = recs
        .iter()
        .filter(|r| r["function"] == "fetch" && r["ret"] == -1)
        .count() as u64;
    assert_eq!(errors, N / 2, "{out}");
    for r in &recs {
        if r["function"] == "fetch" {
            assert!([-1, 0, 1].contains(&r["ret"].as_i64().unwrap()), "{r}");
            if r["ret"] == -1 {
                assert!(r["duration_ns"].as_u64().unwrap() >= 1_500_000, "{r}");
            }
        }
        if r["function"] == "classify" {
            assert!(
                r["ret_name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("STATE_")),
                "{r}"
            );
        }
    }
    let out = latency(&["--record-slower-than", "1ms", "fetch"]);
    out.assert_success();
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains(" fetch  ") && l.ends_with("  ret=-1")),
        "{out}"
    );
}

/// Attached mid-flight with -p: calls in flight when the probes go live
/// are not seen to return a value they did not.
#[test]
fn attached_mid_flight() {
    let _g = common::needs_root!();
    let mut fx = Fixture::spawn("retval", &["2000"]);
    fx.go();
    std::thread::sleep(Duration::from_millis(100));
    let pid = fx.pid().to_string();
    let out = Tachy::start(
        &[
            "latency", "--json", "-p", &pid, "-d", "1", "--by", "retval", "fetch",
        ],
        &[],
    )
    .finish(Duration::from_secs(60));
    let rep = out.success_report();
    let f = func(&rep, "fetch");
    let got = by_value(f);
    assert!(
        got.keys().all(|k| ["-1", "0", "1"].contains(&k.as_str())),
        "{out}"
    );
    assert_eq!(got.values().sum::<u64>(), num(f, "count"), "{out}");
    assert!(num(f, "count") > 100, "{out}");
    assert_eq!(num(f, "unwound"), 0, "{out}");
    let out = Tachy::start(
        &[
            "latency", "--json", "-p", &pid, "-d", "1", "--filter", "ret < 0", "fetch",
        ],
        &[],
    )
    .finish(Duration::from_secs(60));
    let f = func(&out.success_report(), "fetch").clone();
    // One call in four returns -1, and each takes longer: of the calls
    // that ended, between a fifth and a half kept.
    let (kept, rejected) = (num(&f, "count"), num(&f, "filtered_by_args"));
    assert!(kept > 0 && rejected > kept, "{out}");
    drop(fx);
}

/// System calls: the kernel's value, errno named. The fixture reads an
/// empty non-blocking pipe once per iteration: -EAGAIN.
#[test]
fn syscall_errno_values() {
    let _g = common::needs_root!();
    let out = run_fixture(
        "latency",
        &["--json", "--by", "retval", "syscall:read"],
        "retval",
        &["8"],
        &[],
    );
    let rep = out.success_report();
    let got = by_value(func(&rep, "syscall:read"));
    assert_eq!(got.get("EAGAIN"), Some(&8), "{out}");
    let out = run_fixture(
        "latency",
        &[
            "--filter",
            "ret == -11",
            "syscall:read",
            "--record-slower-than",
            "0ns",
        ],
        "retval",
        &["8"],
        &[],
    );
    out.assert_success();
    let eagain = out
        .stdout
        .lines()
        .filter(|l| l.ends_with("  ret=-11 (EAGAIN)"))
        .count();
    assert_eq!(eagain, 8, "{out}");
}
