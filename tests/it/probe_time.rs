//! Root-run tests of the probe-time correction on the `calls` fixture
//! (tests/fixtures/calls.c): spins traced with each kind of entry and exit
//! probe, and a function whose time is 90% one callee and 10% a cheap leaf
//! called 8 times. Their untraced durations come from untraced twins (the
//! same code under another name) that the fixture times in every
//! iteration, right after the traced calls.
//!
//! The bounds: on these virtual machines the speed of the same code drifts
//! by up to 2x within a second and by more between runs (bench/RESULTS.md,
//! "Probe time"), and the probes' own time drifts with it, so a correction
//! measured once cannot be exact to tens of nanoseconds. A spin of 20 us
//! must read within 20% of its twin, or with at most half the probes' own
//! time left in (a single-stepped entry is half the spin); at 1 us and
//! at 50 ns at least half of the probes' own time must be gone; in
//! `nested`, the shares of a known 90/10 split must not come out inverted
//! as they do raw.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::run::Tachy;
use common::{tagged, Fixture};
use serde_json::Value;

/// The fixture's `untraced <function> <ns>` lines.
fn untraced(stdout: &str) -> BTreeMap<String, f64> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("untraced "))
        .filter_map(|l| {
            let (f, ns) = l.split_once(' ')?;
            Some((f.to_string(), ns.parse().ok()?))
        })
        .collect()
}

/// Runs `tachy ARGS -p PID FUNC` on fixture `fixture` with `iterations`
/// and `spin_ns`; returns tachy's one JSON report and the fixture's stdout.
fn run(fixture: &str, args: &[&str], func: &str, iterations: u64, spin_ns: u64) -> (Value, String) {
    let mut fx = Fixture::spawn(fixture, &[&iterations.to_string(), &spin_ns.to_string()]);
    let pid = fx.pid().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--json", "-p", &pid, func]);
    let mut t = Tachy::start(&all, &[]);
    t.wait_for_header(true);
    fx.go();
    let (status, fx_out) = fx.wait();
    assert!(status.success(), "fixture: {status}\n{fx_out}");
    let out = t.finish(Duration::from_secs(30));
    out.assert_success();
    let reps: Vec<Value> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l:?}: {e}")))
        .collect();
    assert_eq!(reps.len(), 1, "one report\n{out}");
    (reps[0].clone(), fx_out)
}

/// p50 of the one function of a latency report, and its probe time.
fn p50(rep: &Value) -> (f64, u64) {
    let f = &rep["functions"][0];
    let p = f["percentiles_ns"]["p50"]
        .as_u64()
        .unwrap_or_else(|| panic!("no p50 in {f}"));
    (p as f64, f["probe_ns_per_call"].as_u64().unwrap_or(0))
}

/// Checks one spin against its untraced twin: at 20 us and more, p50
/// within 20% of it; shorter, with at most half of the probes' own time
/// left in (or taken out too much). A single-stepped entry costs ~10 us
/// here and its cost drifts by up to 40% between the calibration and the
/// run (seen in a clean CI run: 13.3 us against 9.5 us calibrated), so at
/// 20 us half the probe time also passes: the raw reading is ~47% off.
/// A single-step's cost drifts on its own (the trap goes through the
/// hypervisor: 15.7 us against 9.5 us calibrated in a clean CI run, the
/// twin unslowed), so at 20 us the bound is half of what the probes cost
/// in this run (the reading with the subtraction undone, less the twin's):
/// no subtraction, or one several times too large, still fails it.
fn check_spin(fixture: &str, func: &str, spin_ns: u64) {
    let (rep, fx_out) = run(fixture, &["latency"], func, 2000, spin_ns);
    let want = untraced(&fx_out)[func];
    let (got, probe) = p50(&rep);
    assert!(probe > 0, "no probe time subtracted: {rep}");
    let (ok, bound) = if spin_ns >= 20_000 {
        let off = (got - want).abs();
        // What the probes cost in this run: the reading with the
        // subtraction undone, less the untraced time.
        let spent = got + probe as f64 - want;
        (
            off <= 0.2 * want || off <= 0.5 * spent,
            "20% of the untraced time and half of what the probes cost in this run",
        )
    } else {
        (
            (got - want).abs() <= 0.5 * probe as f64,
            "half the probe time",
        )
    };
    assert!(
        ok,
        "{fixture} {func} ({spin_ns} ns): p50 {got} ns, untraced {want:.0} ns, {probe} ns subtracted: off by more than {bound}"
    );
}

/// Push-first entry (emulated), uretprobe exit (`calls` has no unwinding
/// code and spin_push calls only its own code).
#[test]
fn spins_read_their_untraced_time_push_uretprobe() {
    let _guard = common::needs_root!();
    for ns in [50, 1000, 20_000] {
        check_spin("calls", "spin_push", ns);
    }
}

/// Push-first entry, probes on `ret` (`calls_unwind` imports an unwinder).
#[test]
fn spins_read_their_untraced_time_push_ret() {
    let _guard = common::needs_root!();
    for ns in [50, 1000, 20_000] {
        check_spin("calls_unwind", "spin_push", ns);
    }
}

/// endbr64-first entry: the kernel single-steps it, inside the call.
#[test]
fn spins_read_their_untraced_time_endbr64() {
    let _guard = common::needs_root!();
    for fixture in ["calls", "calls_unwind"] {
        for ns in [1000, 20_000] {
            check_spin(fixture, "spin_endbr", ns);
        }
    }
}

/// --raw leaves the probes' time in, and says nothing about it.
#[test]
fn raw_subtracts_nothing() {
    let _guard = common::needs_root!();
    let (rep, fx_out) = run("calls", &["latency", "--raw"], "spin_push", 500, 1000);
    let (got, probe) = p50(&rep);
    assert_eq!(probe, 0, "{rep}");
    let want = untraced(&fx_out)["spin_push"];
    assert!(got > want, "raw p50 {got} <= untraced {want}");
    assert_eq!(tagged(&fx_out, "count").get("spin_push"), Some(&500));
}

/// split: spin_long is 90% of its untraced time, short_leaf (8 calls) 10%.
/// Raw, the leaf's 16 probe hits take about a third of the reading and
/// spin_long keeps under half: the conclusion inverted. With the probes'
/// time subtracted, spin_long keeps more than half, at least 2.5 times the
/// leaf's share, and the leaf at most 25%. (The budget of 5 points is
/// below what these machines allow: each site's probes drift by +-20%
/// between runs and CPUs, 9 of them per call; bench/RESULTS.md, "Probe
/// time".) The budget is off: 9 site hits on a 22 us call are over the
/// default 10%, and a sampled site's share is an estimate, not a reading.
#[test]
fn nested_shares_of_a_known_split() {
    let _guard = common::needs_root!();
    for fixture in ["calls", "calls_unwind"] {
        let (rep, fx_out) = run(
            fixture,
            &["nested", "--max-overhead", "0"],
            "split",
            2000,
            1000,
        );
        let u = untraced(&fx_out);
        let root = &rep["roots"][0];
        let total = root["total_ns"].as_f64().unwrap_or(0.0);
        let share = |name: &str| -> f64 {
            let kid = root["children"]
                .as_array()
                .and_then(|c| c.iter().find(|k| k["name"] == name))
                .unwrap_or_else(|| panic!("no {name} under {root:#}"));
            100.0 * kid["total_ns"].as_f64().unwrap_or(0.0) / total
        };
        let want_long = 100.0 * u["spin_long"] / u["split"];
        let want_leaf = 100.0 * 8.0 * u["short_leaf"] / u["split"];
        let (long, leaf) = (share("spin_long"), share("short_leaf"));
        assert!(
            (50.0..=100.0).contains(&long) && long >= 2.5 * leaf && leaf <= 25.0,
            "{fixture}: spin_long {long:.1}% (untraced {want_long:.1}%), short_leaf {leaf:.1}% (untraced {want_leaf:.1}%)\n{root:#}"
        );
    }
}

/// --raw on the same split: the leaf's probes are counted in, so its share
/// reads well above its untraced 10% (at least 1.5 times: 30% and more on
/// these machines, where it inverts the conclusion; how far depends on
/// the machine's probe cost against its spin speed).
#[test]
fn nested_raw_split_counts_the_leaf_probes_in() {
    let _guard = common::needs_root!();
    let (rep, fx_out) = run(
        "calls",
        &["nested", "--raw", "--max-overhead", "0"],
        "split",
        2000,
        1000,
    );
    let root = &rep["roots"][0];
    let total = root["total_ns"].as_f64().unwrap_or(0.0);
    let kid = |name: &str| -> f64 {
        root["children"]
            .as_array()
            .and_then(|c| c.iter().find(|k| k["name"] == name))
            .map(|k| 100.0 * k["total_ns"].as_f64().unwrap_or(0.0) / total)
            .unwrap_or_else(|| panic!("no {name} under {root:#}"))
    };
    let u = untraced(&fx_out);
    let want_leaf = 100.0 * 8.0 * u["short_leaf"] / u["split"];
    let leaf = kid("short_leaf");
    assert!(
        leaf >= 1.5 * want_leaf,
        "short_leaf {leaf:.1}% raw, {want_leaf:.1}% untraced\n{root:#}"
    );
}

/// Runs `tachy latency -v -d 0.2 PLAIN:slow_sum` in `cwd` with
/// TACHY_CACHE_DIR set to `cache`; returns its stderr.
fn verbose_run(cwd: &std::path::Path, cache: &str) -> String {
    let spec = format!("{}:slow_sum", common::build("plain").display());
    let out = std::process::Command::new(common::tachy())
        .args(["latency", "-v", "-d", "0.2", &spec])
        .env("TACHY_CACHE_DIR", cache)
        .current_dir(cwd)
        .output()
        .expect("cannot run tachy");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    stderr
}

/// A scratch directory of this test file, empty.
fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An empty TACHY_CACHE_DIR is as unset: nothing is written into the
/// current directory.
#[test]
fn an_empty_cache_dir_is_unset() {
    let _guard = common::needs_root!();
    let cwd = scratch("cache-empty");
    let stderr = verbose_run(&cwd, "");
    let left: Vec<_> = std::fs::read_dir(&cwd).unwrap().collect();
    assert!(
        left.is_empty(),
        "written into the current directory: {left:?}\n{stderr}"
    );
    assert!(!stderr.contains("cannot cache"), "{stderr}");
}

/// A cache directory that cannot be written (here: below a file): every
/// run says so in one line naming the file, and -v does not claim it
/// cached.
#[test]
fn an_unwritable_cache_is_said_once_per_run() {
    let _guard = common::needs_root!();
    let dir = scratch("cache-unwritable");
    let file = dir.join("a-file");
    std::fs::write(&file, "").unwrap();
    let cache = file.join("tachy");
    for _ in 0..2 {
        let stderr = verbose_run(&dir, cache.to_str().unwrap());
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("cannot cache"))
            .collect();
        assert_eq!(
            said,
            [format!(
                "tachy: cannot cache the probes' own time in {}/probe-time (not a directory): \
                 each start measures it again (set TACHY_CACHE_DIR to a writable directory)",
                cache.display()
            )],
            "{stderr}"
        );
        assert!(stderr.contains("measured, not cached"), "{stderr}");
        assert!(!stderr.contains("measured and cached"), "{stderr}");
    }
}
