//! Root-run integration tests of where two of tachy's rules meet: a
//! `--filter` and a thrown call, attaching to a busy process, call sites
//! that end with their parent at several depths, tail calls between traced
//! functions, and (`matrix`) each code shape of the fixtures under each
//! option that changes what is counted. Every run is checked to account
//! for each call entered exactly once: timed, filtered, left by exception
//! or not timed.
//!
//! Every test takes the `common::serial()` lock first and is skipped (with a
//! message) when not run as root.

mod common;

use std::time::Duration;

use common::node::{children, name, num};
use common::run::{run_fixture, Outcome, Tachy};
use common::{counts, Fixture};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// `tachy SUB OPTS -- FIXTURE ARGS`, which must succeed; its one report.
fn report(sub: &str, opts: &[&str], fixture: &str, args: &[&str]) -> (Value, Outcome) {
    let out = run_fixture(sub, opts, fixture, args, &[]);
    let rep = out.success_report();
    (rep, out)
}

/// The function `name` of a `latency --json` report.
fn func<'a>(rep: &'a Value, fname: &str) -> &'a Value {
    common::report::func(rep, fname)
}

/// The site named `n` among the children of `v`.
fn child<'a>(v: &'a Value, n: &str) -> &'a Value {
    children(v)
        .iter()
        .find(|c| name(c) == n)
        .unwrap_or_else(|| panic!("no site {n} under {}", name(v)))
}

/// Asserts that no node of a nested tree counts a call left by exception.
fn no_unwound(v: &Value) {
    assert_eq!(
        num(v, "unwound"),
        0,
        "{} counts unwound calls: {v}",
        name(v)
    );
    for c in children(v) {
        no_unwound(c);
    }
}

// ---------------------------------------------------------------------------
// A call rejected by --filter never closes another call's frame
// ---------------------------------------------------------------------------

/// shop::risky(i) throws on odd i, and the next call comes at the same
/// stack pointer. With `--filter 'i < 4'`, i = 0 and 2 are timed, 1 and 3
/// are left by exception, and the rejected calls after them (i = 2 is
/// passed, i = 4 is not) must not close the thrown frames.
#[test]
fn filter_rejected_calls_close_no_thrown_frame() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let (iterations, threads) = (20u64, 2u64);
    let (rep, out) = report(
        "latency",
        &["--json", "--filter", "i < 4", "shop::risky(int)"],
        "cpp_o2",
        &[&iterations.to_string(), &threads.to_string()],
    );
    let f = func(&rep, "shop::risky(int)");
    assert_eq!(num(f, "count"), 2 * threads, "{out}");
    assert_eq!(num(f, "unwound"), 2 * threads, "{out}");
    assert_eq!(
        num(f, "filtered_by_args"),
        (iterations - 4) * threads,
        "{out}"
    );
    // The timed calls sleep 250 us; a thrown frame closed late would last
    // a whole iteration of the fixture (several ms).
    assert!(num(f, "min_ns") >= 250_000, "{out}");
    assert!(num(f, "max_ns") < 2_000_000, "{out}");
}

// ---------------------------------------------------------------------------
// Attaching while the target runs
// ---------------------------------------------------------------------------

/// Attaches `ATTACHES` times to a plain C program that calls outer, work
/// and quick (a leaf, timed by a uretprobe) all the time: a call in flight
/// while the probes go live is never seen to enter without its exits, so
/// no call is ever counted as left by exception.
#[test]
fn attaching_to_a_busy_program_leaves_no_call_unwound() {
    const ATTACHES: usize = 40;
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let fx = Fixture::spawn("seams", &["busy", "600", "100"]);
    let pid = fx.pid().to_string();
    let mut quick = 0;
    for i in 0..ATTACHES {
        let out = Tachy::start(
            &[
                "latency", "--json", "-p", &pid, "-d", "0.1", "outer", "work", "quick",
            ],
            &[],
        )
        .finish(RUN_TIMEOUT);
        let rep = out.success_report();
        for f in rep["functions"].as_array().unwrap() {
            assert_eq!(
                num(f, "unwound"),
                0,
                "attach {i}: {} counts calls left by exception\n{out}",
                f["name"]
            );
            assert_eq!(num(f, "overflow"), 0, "attach {i}\n{out}");
        }
        quick += num(func(&rep, "quick"), "count");
    }
    assert!(quick > 0, "quick was never timed");
}

// ---------------------------------------------------------------------------
// Sites that end with their parent, at any depth
// ---------------------------------------------------------------------------

/// outer's last call is work, whose last call is nanosleep: at depth 2
/// both sites end with their parent, and outer's `ret` closes both.
#[test]
fn sites_ending_with_their_parent_close_at_depth_two() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let n = 20;
    let (rep, out) = report(
        "nested",
        &["--json", "outer", "--depth", "2"],
        "seams",
        &["nest", &n.to_string(), "300"],
    );
    let root = &rep["roots"][0];
    no_unwound(root);
    assert_eq!(num(root, "count"), n, "{out}");
    assert_eq!(num(child(root, "quick"), "count"), 2000 * n, "{out}");
    let work = child(root, "work");
    assert_eq!(num(work, "count"), n, "{out}");
    let sleep = child(work, "nanosleep@plt");
    assert_eq!(num(sleep, "count"), n, "{out}");
    assert!(num(sleep, "total_ns") >= n * 300_000, "{out}");
    assert!(num(work, "total_ns") >= num(sleep, "total_ns"), "{out}");
}

// ---------------------------------------------------------------------------
// Tail calls between traced functions
// ---------------------------------------------------------------------------

/// tailer spins, then tail-calls mid; with both traced (and their uretprobes
/// on), mid's entry at tailer's key is a handover: tailer lasts until mid
/// returns, and neither is left by exception.
#[test]
fn a_tail_call_between_traced_functions_times_both() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let (n, us) = (100u64, 100u64);
    let (rep, out) = report(
        "latency",
        &["--json", "top", "mid", "tailer", "leaf"],
        "seams",
        &["tail", &n.to_string(), &us.to_string()],
    );
    assert_eq!(counts(&out.fixture_text())["tailer"], n, "{out}");
    for (f, floor) in [
        ("top", 2 * us),
        ("tailer", 2 * us),
        ("mid", us),
        ("leaf", us),
    ] {
        let v = func(&rep, f);
        assert_eq!(num(v, "count"), n, "{f}\n{out}");
        assert_eq!(num(v, "unwound"), 0, "{f}\n{out}");
        // On average: the probe time subtracted from each call is an
        // estimate, which one call's may be below.
        assert!(num(v, "total_ns") >= n * floor * 1000, "{f}\n{out}");
    }
    // tailer's time runs to mid's return, inside top's.
    assert!(num(func(&rep, "tailer"), "total_ns") <= num(func(&rep, "top"), "total_ns"));
    assert!(num(func(&rep, "tailer"), "total_ns") >= num(func(&rep, "mid"), "total_ns"));
}

/// even(n) ends with `jmp odd`, odd(n) calls even(n - 1): every call is
/// timed, and with --outermost only the outermost of each.
#[test]
fn mutual_recursion_through_a_tail_call() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let n = 200u64;
    for (opts, even, odd) in [
        (&["--json", "even", "odd"][..], 26 * n, 25 * n),
        (&["--json", "--outermost", "even", "odd"][..], n, n),
    ] {
        let (rep, out) = report("latency", opts, "seams", &["evenodd", &n.to_string()]);
        for (f, c) in [("even", even), ("odd", odd)] {
            let v = func(&rep, f);
            assert_eq!(num(v, "count"), c, "{f}\n{out}");
            assert_eq!(num(v, "unwound"), 0, "{f}\n{out}");
        }
    }
}

/// Under nested, the tail-called mid and the call of leaf inside it end
/// with tailer's site, at depths 2 and 3.
#[test]
fn nested_tail_sites_at_depth_three() {
    let _g = common::serial();
    if common::skip_unless_root() {
        return;
    }
    let (n, us) = (50u64, 100u64);
    let (rep, out) = report(
        "nested",
        &["--json", "top", "--depth", "3"],
        "seams",
        &["tail", &n.to_string(), &us.to_string()],
    );
    let root = &rep["roots"][0];
    no_unwound(root);
    let tailer = child(root, "tailer");
    let mid = child(tailer, "mid");
    let leaf = child(mid, "leaf");
    for v in [tailer, mid, leaf] {
        assert_eq!(num(v, "count"), n, "{}\n{out}", name(v));
    }
    assert!(num(leaf, "total_ns") >= n * us * 1000, "{out}");
    assert!(num(tailer, "total_ns") >= num(mid, "total_ns"), "{out}");
}
