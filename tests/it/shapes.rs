//! Code shapes whose jumps stay inside the function: a `switch` compiled to
//! a jump table and computed goto (interpreter loops), and the `.cold` parts
//! of a library stripped to its dynamic symbols (fixture `shapes`, with
//! `libcold.so`; see their sources). None of these jumps is an exit: no
//! probe may stand on them, and every call must be timed whole.
//!
//! The fixture measures each call itself (clock_gettime around it) and
//! prints the mean and the shortest: tachy's must agree with them.

use crate::common;

use std::time::Duration;

use common::run::{Outcome, Tachy};
use common::{counts, expected_counts, tagged};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const ITERATIONS: u64 = 20;

fn libcold() -> String {
    common::build("shapes");
    common::fixtures_out_dir()
        .join("libcold.so")
        .to_str()
        .unwrap()
        .to_string()
}

fn tachy(args: &[&str]) -> Outcome {
    Tachy::start(args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT)
}

/// `tachy list` on the interpreters: their dispatch jumps are proven to
/// stay inside, so they have no tail jump, and being leaves they get a
/// uretprobe.
#[test]
fn list_interpreters_have_no_tail_jumps() {
    let exe = common::build("shapes");
    let out = tachy(&["list", exe.to_str().unwrap(), "interp_*"]);
    out.assert_success();
    for name in ["interp_switch", "interp_goto"] {
        let line = out
            .stdout
            .lines()
            .skip_while(|l| l.split_whitespace().next() != Some(name))
            .nth(1)
            .unwrap_or_else(|| panic!("{name} not listed\n{out}"));
        assert!(
            line.contains("exits: 1 ret;") && line.contains("indirect jump(s) stay inside"),
            "{name}: {line}\n{out}"
        );
        assert!(!line.contains("tail jump"), "{name}: {line}");
        assert!(line.contains("uretprobe (a leaf"), "{name}: {line}");
    }
}

/// `tachy list` on the stripped library: its functions' cold parts have no
/// symbol; the conditional jumps into them are not exits. A tail call to a
/// function without a symbol ends at that function's returns.
#[test]
fn list_stripped_library_finds_cold_parts() {
    let lib = libcold();
    let out = tachy(&["list", &lib, "cold_*"]);
    out.assert_success();
    assert!(out.stdout.contains(".dynsym"), "{out}");
    for name in ["cold_check", "cold_scan"] {
        let line = out
            .stdout
            .lines()
            .skip_while(|l| l.split_whitespace().next() != Some(name))
            .nth(1)
            .unwrap_or_else(|| panic!("{name} not listed\n{out}"));
        assert!(
            line.contains("1 part(s) without a symbol"),
            "{name}: {line}"
        );
        assert!(line.contains("exits: 1 ret"), "{name}: {line}");
        assert!(!line.contains("tail jump"), "{name}: {line}");
    }
    // cold_tail tail-calls a static function: its returns end the call.
    // That function may call fprintf: no uretprobe, and the list says why.
    let line = out
        .stdout
        .lines()
        .skip_while(|l| l.split_whitespace().next() != Some("cold_tail"))
        .nth(1)
        .unwrap_or_else(|| panic!("cold_tail not listed\n{out}"));
    assert!(
        line.contains("exits: 0 ret, tail call to the function at 0x")
            && line.contains("(no symbol)"),
        "{line}"
    );
    assert!(
        line.contains("return: probes on each ret: calls fprintf@plt at +0x"),
        "{line}"
    );
    assert!(!line.contains("tail jump"), "{line}");
}

/// The plan: an entry and a uretprobe per interpreter, an entry per
/// library function with cold parts, and a `ret` probe for each of those
/// (a loop's `jcc` leads into each epilogue: only a single-step there
/// would see it, which costs what the `ret`'s does). Nothing else: no
/// probe on an indirect jump.
#[test]
fn dry_run_plans_no_probe_on_internal_jumps() {
    let exe = common::build("shapes");
    let lib = libcold();
    let check = format!("{lib}:cold_check");
    let scan = format!("{lib}:cold_scan");
    let out = tachy(&[
        "latency",
        "--dry-run",
        "interp_switch",
        "interp_goto",
        &check,
        &scan,
        "--",
        exe.to_str().unwrap(),
        "1",
    ]);
    out.assert_success();
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains("4 function(s), 8 probe(s)"), "{out}");
    let kinds: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("  ["))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let n = |k: &str| kinds.iter().filter(|x| **x == k).count();
    assert_eq!(
        (n("entry"), n("uretprobe"), n("exit"), kinds.len()),
        (4, 2, 2, 8),
        "{out}"
    );
    assert!(!text.contains("tail"), "{out}");
}

/// Runs the fixture under `tachy latency --json` for `specs`; returns the
/// report's functions and the fixture's output (on tachy's stderr).
fn run_traced(specs: &[&str]) -> (Vec<Value>, String) {
    let exe = common::build("shapes");
    let it = ITERATIONS.to_string();
    let mut args = vec!["latency", "--json"];
    args.extend_from_slice(specs);
    args.extend(["--", exe.to_str().unwrap(), &it]);
    let out = tachy(&args);
    out.assert_success();
    let mut reports = out.reports();
    assert_eq!(reports.len(), 1, "{out}");
    let funcs = reports.remove(0)["functions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // With --json the command's output goes to stderr.
    (funcs, out.stderr.clone())
}

/// Checks a function's count and that its times agree with the fixture's
/// own: tachy times from the entry probe to the return, inside the
/// fixture's clock_gettime pair, so it may read less by what its probes
/// cost and never more. The shortest calls are compared (the mean moves
/// when the fixture is preempted outside the timed window, on a loaded
/// machine): tachy's shortest is at most the fixture's, and at least the
/// fixture's less 5% and 40 us (an entry and an exit probe single-stepped,
/// ~11 us each here, with margin).
fn check(funcs: &[Value], stdout: &str, name: &str, min_ns: u64) {
    let f = funcs
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in report: {funcs:?}"));
    let num = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{k} in {f}"));
    assert_eq!(
        num("count"),
        expected_counts("shapes", ITERATIONS, 1)[name],
        "{f}"
    );
    assert_eq!(counts(stdout)[name], ITERATIONS, "{stdout}");
    for k in ["indirect_tail", "unwound", "overflow", "filtered"] {
        assert_eq!(num(k), 0, "{name} {k}: {f}");
    }
    // A bound the call cannot beat, less the probe time subtracted (an
    // estimate that drifts with the machine, by up to its own size).
    let floor = min_ns.saturating_sub(f["probe_ns_per_call"].as_u64().unwrap_or(0));
    assert!(num("min_ns") >= floor, "{name} min below {floor}: {f}");
    let (ours, theirs) = (num("min_ns"), tagged(stdout, "min_ns")[name]);
    assert!(
        ours <= theirs + 1_000 && ours + theirs / 20 + 40_000 >= theirs,
        "{name}: tachy's shortest call {ours} ns, the fixture's {theirs} ns\n{f}"
    );
    let (ours, theirs) = (
        num("total_ns") / num("count"),
        tagged(stdout, "avg_ns")[name],
    );
    assert!(
        ours <= theirs + 1_000,
        "{name}: tachy's mean {ours} ns, the fixture's {theirs} ns\n{f}"
    );
}

/// Interpreter loops dispatching through a jump table and through computed
/// goto: each call is timed whole, not cut at its first dispatch.
#[test]
fn interpreters_are_timed_whole() {
    let _g = common::needs_root!();
    let (funcs, stdout) = run_traced(&["interp_switch", "interp_goto"]);
    check(&funcs, &stdout, "interp_switch", 0);
    check(&funcs, &stdout, "interp_goto", 0);
}

/// Functions of a stripped library whose cold paths, or whose tail-called
/// function, have no symbol: calls are timed whole (each spins >= 200 us).
#[test]
fn cold_paths_of_a_stripped_library_are_timed_whole() {
    let _g = common::needs_root!();
    let spec = format!("{}:cold_*", libcold());
    let (funcs, stdout) = run_traced(&[&spec]);
    // The cold paths ran: 5 of 20 calls of cold_check, 9 of cold_scan's
    // 80 loop turns.
    assert_eq!(tagged(&stdout, "cold")["cold_check"], 5, "{stdout}");
    assert_eq!(tagged(&stdout, "cold")["cold_scan"], 9, "{stdout}");
    check(&funcs, &stdout, "cold_check", 200_000);
    check(&funcs, &stdout, "cold_scan", 200_000);
    check(&funcs, &stdout, "cold_tail", 200_000);
}

/// `epilogue_jumps` (an indirect call keeps it on `ret` probes) reaches its
/// epilogue only by jumps: its `ret` is timed at those jumps, which the
/// kernel emulates, instead of the `ret`, which it single-steps.
#[test]
fn a_ret_reached_by_jumps_is_timed_at_them() {
    let exe = common::build("shapes");
    let exe = exe.to_str().unwrap();
    let out = tachy(&["list", exe, "epilogue_jumps"]);
    out.assert_success();
    assert!(
        out.stdout.contains(
            "return: probes on each ret: indirect call at +0x16  exits: 1 ret \
             (1 timed at 3 emulated jump(s) into the epilogue)"
        ),
        "{out}"
    );
    // SP at the jumps is 24 bytes below SP at the `ret`: the `je` counts
    // when taken, the `jae` when not, the `jmp` always.
    let out = tachy(&["latency", "--dry-run", "epilogue_jumps", "--", exe, "1"]);
    out.assert_success();
    let text = format!("{}{}", out.stdout, out.stderr);
    let exits: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("exit"))
        .map(|l| l.split(" /").next().unwrap_or(l).trim())
        .collect();
    assert_eq!(
        exits,
        [
            "ahead of ret, sp+0x18 if b",
            "ahead of ret, sp+0x18 if e",
            "ahead of ret, sp+0x18"
        ],
        "{out}"
    );
}

/// Each way into the epilogue ends the call, exactly once, with the whole
/// call timed.
#[test]
fn calls_ended_at_jumps_into_the_epilogue_are_timed_whole() {
    let _g = common::needs_root!();
    let (funcs, stdout) = run_traced(&["epilogue_jumps"]);
    check(&funcs, &stdout, "epilogue_jumps", 0);
    // 13 of the 20 calls make two ~20 us calls each.
    let f = funcs
        .iter()
        .find(|f| f["name"] == "epilogue_jumps")
        .unwrap();
    let max = f["max_ns"].as_u64().unwrap();
    assert!(max >= 40_000, "{f}");
}

/// `tachy nested` on it: the indirect call site counts every call, and the
/// parent's calls all complete.
#[test]
fn nested_with_early_exits() {
    let _g = common::needs_root!();
    let exe = common::build("shapes");
    let it = ITERATIONS.to_string();
    let out = tachy(&[
        "nested",
        "--json",
        "epilogue_jumps",
        "--",
        exe.to_str().unwrap(),
        &it,
    ]);
    out.assert_success();
    let reports = out.reports();
    let root = &reports[0]["roots"][0];
    assert_eq!(root["count"], ITERATIONS, "{root:#}");
    assert_eq!(root["unwound"], 0, "{root:#}");
    let sites = root["children"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "{root:#}");
    // i % 3 != 0 for 13 of i in 0..20, two calls each.
    assert_eq!(sites[0]["count"], 26, "{root:#}");
    assert_eq!(sites[0]["unwound"], 0, "{root:#}");
}

/// Redis's GET in small: get_command tail-jumps to get_generic, whose last
/// call returns into `xor %eax,%eax` ahead of its epilogue. A probe there
/// would be single-stepped, as the `ret` is: the `ret` keeps its probe and
/// stands for every way out (no probe ahead of it, no jump into the
/// epilogue probed).
#[test]
fn a_call_returning_ahead_of_the_epilogue_is_timed_at_the_ret() {
    let exe = common::build("shapes");
    let exe = exe.to_str().unwrap();
    let out = tachy(&["list", exe, "get_command"]);
    out.assert_success();
    assert!(
        out.stdout.contains(", tail call to get_generic") && !out.stdout.contains("timed at"),
        "{out}"
    );
    let out = tachy(&["latency", "--dry-run", "get_command", "--", exe, "1"]);
    out.assert_success();
    let kinds: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("  ["))
        .filter_map(|l| l.split("  /").next())
        .map(str::trim)
        .collect();
    assert_eq!(kinds, ["entry [0] sp+0", "exit"], "{out}");
}

/// Every way out of get_generic (a hit, a miss, a wrong type) ends the
/// call exactly once.
#[test]
fn calls_ended_at_the_ret_after_a_call_count_exactly() {
    let _g = common::needs_root!();
    let (funcs, stdout) = run_traced(&["get_command"]);
    let f = funcs
        .iter()
        .find(|f| f["name"] == "get_command")
        .unwrap_or_else(|| panic!("get_command not in report: {funcs:?}"));
    let expected = expected_counts("shapes", ITERATIONS, 1)["get_command"];
    assert_eq!(counts(&stdout)["get_command"], expected, "{stdout}");
    assert_eq!(f["count"].as_u64(), Some(expected), "{f}");
    for k in ["miss", "wrongtype", "hit"] {
        assert!(tagged(&stdout, "gets")[k] > 0, "{k}: {stdout}");
    }
    for k in ["indirect_tail", "unwound", "overflow", "filtered"] {
        assert_eq!(f[k], 0, "{k}: {f}");
    }
}
