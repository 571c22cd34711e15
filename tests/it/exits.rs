//! The choice of exit probe, and that it never harms the target: on the
//! `exits` fixture (C++ with exception tables, `tests/fixtures/exits.cpp`),
//! a function is timed by a uretprobe only where it and everything it can
//! call cannot throw; every function the analysis leaves on `ret` probes is
//! thrown through while traced, and the process survives with exact counts.
//!
//! The root tests take the probe lock first (`common::needs_root!()`) and are skipped
//! (with a message) when not run as root.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::report::num;
use common::run::{Outcome, Tachy};
use common::{counts, expected_counts, tagged};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const ITERATIONS: u64 = 10;

/// Each traced function, and the start of what `tachy list` must say of its
/// return (`None`: a uretprobe).
const PLANS: &[(&str, &str)] = &[
    (
        "ex::quiet(long)",
        "uretprobe (calls only code that cannot throw)",
    ),
    (
        "ex::throwing(long)",
        "probes on each ret: calls __cxa_throw@plt at ",
    ),
    (
        "ex::indirect(long (*)(long), long)",
        "probes on each ret: indirect call at +0x",
    ),
    (
        "ex::via_plt(long)",
        "probes on each ret: calls qsort@plt at +0x",
    ),
    (
        "ex::cleanup(long)",
        "probes on each ret: calls _Unwind_Resume@plt at ",
    ),
];

fn exe() -> String {
    common::build("exits").to_str().unwrap().to_string()
}

fn tachy(args: &[&str]) -> Outcome {
    Tachy::start(args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT)
}

/// What `tachy list` says of each `ex::` function's return, by name.
fn listed_returns() -> BTreeMap<String, String> {
    returns_listed(&exe(), "ex::*")
}

/// What `tachy list EXE PATTERN` says of each function's return, by name.
fn returns_listed(exe: &str, pattern: &str) -> BTreeMap<String, String> {
    let out = tachy(&["list", exe, pattern]);
    out.assert_success();
    let mut returns = BTreeMap::new();
    let mut name = None;
    for line in out.stdout.lines() {
        if let Some(n) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) {
            name = n.rsplit_once("  (").map(|(n, _)| n.to_string());
        } else if let (Some(n), Some((_, rest))) = (&name, line.split_once("  return: ")) {
            let ret = rest.split("  exits: ").next().unwrap_or(rest);
            returns.insert(n.clone(), ret.to_string());
        }
    }
    returns
}

/// Whether the listed return is a uretprobe.
fn is_uretprobe(ret: &str) -> bool {
    ret.starts_with("uretprobe")
}

/// `tachy list` says per function which exit it gets and why.
#[test]
fn list_says_which_exit_and_why() {
    let returns = listed_returns();
    for (name, want) in PLANS {
        let got = returns
            .get(*name)
            .unwrap_or_else(|| panic!("{name} not listed: {returns:#?}"));
        assert!(got.starts_with(want), "{name}: {got}");
    }
    // The throw is found in the callee, and named there.
    assert!(
        returns["ex::throwing(long)"].ends_with(" in ex::may_throw(long)"),
        "{returns:#?}"
    );
    // The helpers: one cannot throw, the other throws itself.
    assert!(
        is_uretprobe(&returns["ex::quiet_helper(long)"]),
        "{returns:#?}"
    );
    assert!(
        returns["ex::may_throw(long)"].starts_with("probes on each ret: calls __cxa_throw@plt"),
        "{returns:#?}"
    );
}

/// `--dry-run` shows the same choice and places the uretprobe on the entry
/// probe's `push`, where SP holds the return address; no `ret` probe for it.
#[test]
fn dry_run_places_the_uretprobe_on_the_entry() {
    let exe = exe();
    let mut args = vec!["latency", "--dry-run"];
    args.extend(PLANS.iter().map(|p| p.0));
    args.extend(["--", &exe]);
    let out = tachy(&args);
    out.assert_success();
    let text = &out.stdout;
    for (i, (name, want)) in PLANS.iter().enumerate() {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("  [{i}] {name} in ")))
            .unwrap_or_else(|| panic!("no plan line for {name}\n{out}"));
        assert!(line.contains(&format!("; return: {want}")), "{line}");
    }
    let probes: Vec<(&str, &str)> = text
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("  ["))
        .filter_map(|l| {
            let at = l.split_whitespace().find(|w| w.starts_with("(0x"))?;
            Some((l.split_whitespace().next()?, at))
        })
        .collect();
    let at =
        |kind: &str| -> Vec<&str> { probes.iter().filter(|p| p.0 == kind).map(|p| p.1).collect() };
    assert_eq!(at("uretprobe").len(), 1, "{out}");
    let entry0 = text
        .lines()
        .find(|l| l.starts_with("  entry [0] sp+0 "))
        .unwrap_or_else(|| panic!("no entry of [0] with sp+0\n{out}"));
    assert!(entry0.contains(at("uretprobe")[0]), "{out}");
    // Every `ret` of the four others is probed, and none of quiet's.
    let rets: u64 = PLANS[1..].iter().map(|p| listed_rets(&exe, p.0)).sum();
    assert_eq!(at("exit").len() as u64, rets, "{out}");
}

/// The number of `ret`s `tachy list` counts in a function.
fn listed_rets(exe: &str, name: &str) -> u64 {
    let out = tachy(&["list", exe, name]);
    out.assert_success();
    out.stdout
        .split_once("  exits: ")
        .and_then(|(_, r)| r.split_once(" ret"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no ret count for {name}\n{out}"))
}

/// Traced, every function the analysis leaves on `ret` probes has
/// exceptions thrown through it, and the process survives with exact
/// counts (completed + unwound); the one moved to a uretprobe is passed by
/// no exception.
#[test]
fn exceptions_pass_only_through_ret_probes() {
    let _lock = common::needs_root!();
    let returns = listed_returns();
    let exe = exe();
    let it = ITERATIONS.to_string();
    let mut args = vec!["latency", "--json"];
    args.extend(PLANS.iter().map(|p| p.0));
    args.extend(["--", &exe, &it]);
    let out = tachy(&args);
    out.assert_success();
    assert!(out.stderr.lines().any(|l| l == "done"), "{out}");
    assert_eq!(
        counts(&out.stderr),
        expected_counts("exits", ITERATIONS, 1),
        "{out}"
    );
    let thrown = tagged(&out.stderr, "exceptions");
    assert_eq!(thrown.len(), PLANS.len() - 1, "{out}");
    assert_eq!(
        tagged(&out.stderr, "destructors")["ex::cleanup(long)"],
        ITERATIONS,
        "{out}"
    );
    let rep = out.single_report();
    let funcs = rep["functions"].as_array().expect("functions array");
    for (name, _) in PLANS {
        let f = funcs
            .iter()
            .find(|f| f["name"] == *name)
            .unwrap_or_else(|| panic!("{name} not in the report\n{rep:#}"));
        let unwound = thrown.get(*name).copied().unwrap_or(0);
        let ret = &returns[*name];
        if unwound > 0 {
            assert!(
                !is_uretprobe(ret),
                "an exception passes through {name}, planned as {ret}"
            );
            assert_eq!(unwound, ITERATIONS / 2, "{name}\n{out}");
        } else {
            assert!(is_uretprobe(ret), "{name}: {ret}");
        }
        assert_eq!(
            (num(f, "count"), num(f, "unwound")),
            (ITERATIONS - unwound, unwound),
            "{name}: {f}"
        );
        // Each call that returns spins at least 200us in its helper (less
        // the probe time subtracted, an estimate).
        let floor = 200_000 - num(f, "probe_ns_per_call").min(200_000);
        assert!(num(f, "min_ns") >= floor, "{name}: {f}");
    }
}

/// The hazard the analysis avoids is real in this fixture: forced onto a
/// uretprobe, a function an exception passes through takes the process
/// down.
#[test]
fn a_forced_uretprobe_on_a_throwing_function_kills_the_process() {
    let _lock = common::needs_root!();
    let exe = exe();
    let out = tachy(&[
        "latency",
        "--uretprobe",
        "--force",
        "ex::throwing",
        "--",
        &exe,
        "4",
    ]);
    out.assert_no_panic();
    assert!(!out.stdout.lines().any(|l| l == "done"), "{out}");
    assert!(out.stderr.contains("terminate called"), "{out}");
    // tachy passes on the command's death by SIGABRT.
    assert_eq!(out.code(), Some(128 + libc::SIGABRT), "{out}");
}

/// Rust calls the code of other crates linked in through `.got` slots: the
/// proof follows them, and names the panic a function can reach, not the
/// slot.
#[test]
fn rust_panics_are_found_through_got_slots() {
    let exe = common::build("rust_app");
    let returns = returns_listed(exe.to_str().unwrap(), "rust_app::engine::explode");
    let ret = &returns["rust_app::engine::explode"];
    assert!(
        ret.starts_with("probes on each ret: calls core::panicking::"),
        "{ret}"
    );
}
