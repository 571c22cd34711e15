//! Indirect jumps that no analysis of the code proves internal or leaving
//! (fixture `ijump`, see its source): the frame is already freed and no
//! table is found. Their targets are checked at run time: a jump back into
//! the function goes on (the call is timed whole), a jump to another
//! function is a tail jump to unknown code (timed up to the jump, as
//! before).

use crate::common;

use std::time::Duration;

use common::run::{Outcome, Tachy};
use common::{counts, expected_counts, tagged};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const ITERATIONS: u64 = 20;
const FUNCS: [&str; 5] = [
    "ijump_loop",
    "ijump_table",
    "ijump_rip",
    "ijump_tail",
    "ijump_tail_mem",
];

fn tachy(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let mut envs = vec![("FIXTURE_NO_WAIT", "1")];
    envs.extend_from_slice(env);
    Tachy::start(args, &envs).finish(RUN_TIMEOUT)
}

/// `tachy list` says which jumps are checked and what a pass costs; none
/// is a tail jump to unknown code any more.
#[test]
fn list_says_which_jumps_are_checked_and_their_cost() {
    let exe = common::build("ijump");
    let out = tachy(&["list", exe.to_str().unwrap(), "ijump_*"], &[]);
    out.assert_success();
    for name in FUNCS {
        let line = out
            .stdout
            .lines()
            .skip_while(|l| l.split_whitespace().next() != Some(name))
            .nth(1)
            .unwrap_or_else(|| panic!("{name} not listed\n{out}"));
        assert!(
            line.contains("; 1 indirect jump(s) checked at run time (single-stepped, ~")
                && line.contains(" us per pass)"),
            "{name}: {line}"
        );
        assert!(line.contains("probes on each ret"), "{name}: {line}");
        assert!(!line.contains("unknown code"), "{name}: {line}");
        assert!(!line.contains("stay inside"), "{name}: {line}");
    }
}

/// The plan: an entry and a jump check per function, and a `ret` probe
/// for the three that return themselves; the dry run says it per function.
#[test]
fn dry_run_plans_a_check_on_each_unproven_jump() {
    let exe = common::build("ijump");
    let mut args = vec!["latency", "--dry-run"];
    args.extend(FUNCS);
    args.extend(["--", exe.to_str().unwrap(), "1"]);
    let out = tachy(&args, &[]);
    out.assert_success();
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains("5 function(s), 13 probe(s)"), "{out}");
    for (i, name) in FUNCS.iter().enumerate() {
        let head = format!("  [{i}] {name} in ");
        let line = text
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("{name} not planned\n{out}"));
        assert!(
            line.contains("; 1 indirect jump(s) checked at run time (single-stepped"),
            "{line}"
        );
    }
    let kinds: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("  ["))
        .map(|l| l.split("  ").nth(1).unwrap_or("").trim())
        .collect();
    let n = |k: &str| kinds.iter().filter(|x| x.starts_with(k)).count();
    assert_eq!(
        (
            n("entry"),
            n("indirect jump checked"),
            n("exit"),
            kinds.len()
        ),
        (5, 5, 3, 13),
        "{out}"
    );
    assert_eq!(n("tail"), 0, "{out}");
}

/// Runs the fixture under `tachy latency --json`; the report's functions
/// and the fixture's output (on tachy's stderr with --json).
fn run_traced(env: &[(&str, &str)]) -> (Vec<Value>, String) {
    let exe = common::build("ijump");
    let it = ITERATIONS.to_string();
    let mut args = vec!["latency", "--json"];
    args.extend(FUNCS);
    args.extend(["--", exe.to_str().unwrap(), &it]);
    let out = tachy(&args, env);
    out.assert_success();
    let funcs = out.single_report()["functions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (funcs, out.stderr.clone())
}

fn field(funcs: &[Value], name: &str, k: &str) -> u64 {
    let f = funcs
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in report: {funcs:?}"));
    f[k].as_u64().unwrap_or_else(|| panic!("{k} in {f}"))
}

/// Every call counted once, each read at most as what the fixture measured
/// around it. The jumps back into the function time the call whole: at
/// least its 50 passes of a spin whose shortest untraced run is known (cut
/// at the first jump, it would read one pass), through a register, an
/// indexed table and a RIP-relative slot. The tail jumps to
/// ijump_callee end their calls as before: each is counted as timed up to
/// an indirect tail jump, and reads at least the spin before the jump and
/// less than four times it (with the callee's five, the whole call spins
/// at least six times as long).
fn check(funcs: &[Value], fixture: &str) {
    let expected = expected_counts("ijump", ITERATIONS, 1);
    assert_eq!(counts(fixture), expected, "{fixture}");
    let untraced = tagged(fixture, "untraced");
    let theirs = tagged(fixture, "min_ns");
    for name in FUNCS {
        let num = |k: &str| field(funcs, name, k);
        let f = format!("{name}: {funcs:?}");
        assert_eq!(num("count"), expected[name], "{f}");
        for k in ["unwound", "overflow", "filtered"] {
            assert_eq!(num(k), 0, "{k} of {f}");
        }
        let ours = num("min_ns");
        assert!(
            ours <= theirs[name] + 1_000,
            "{name}: tachy's shortest call {ours} ns, the fixture's {} ns",
            theirs[name]
        );
        if name.starts_with("ijump_tail") {
            assert_eq!(num("indirect_tail"), ITERATIONS, "{f}");
            let spin = untraced["tail"];
            // Less the probe time subtracted (an estimate).
            let floor = spin.saturating_sub(num("probe_ns_per_call"));
            assert!(
                ours >= floor && ours < 4 * spin,
                "{name}: shortest {ours} ns, its spin before the jump {spin} ns untraced"
            );
        } else {
            assert_eq!(num("indirect_tail"), 0, "{f}");
            let whole = tagged(fixture, "passes")[name] * untraced["pass"];
            assert!(
                ours >= whole,
                "{name}: shortest {ours} ns, its passes take {whole} ns untraced"
            );
        }
    }
}

#[test]
fn checked_jumps_time_the_whole_call_or_end_it() {
    let _g = common::needs_root!();
    let (funcs, fixture) = run_traced(&[]);
    check(&funcs, &fixture);
}

/// The same with one uprobe link per probe (kernels before uprobe_multi).
#[test]
fn checked_jumps_with_single_uprobes() {
    let _g = common::needs_root!();
    let (funcs, fixture) = run_traced(&[("TACHY_NO_UPROBE_MULTI", "1")]);
    check(&funcs, &fixture);
}
