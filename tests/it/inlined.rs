//! Inlined instances, timed (root, but `list` needs none): `work` of the
//! `inlined` fixture is `static inline`, inlined into caller_a (once a
//! round), caller_b (twice) and caller_c (in a loop, three times), and
//! called once a round through a pointer, which leaves one out-of-line
//! copy. Each call spins 300 us and adds the time it measured itself to
//! the fixture's total for its way in. Counts are exact per instance and
//! in total; durations are within 20% of the fixture's own clock; the
//! same at -O2 and at -O3 with loops unrolled. `turns` of `inlined_loop`
//! leaves by the jump that closes its loop: no probe is hit per turn.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::report::{functions, num};
use common::run::run_fixture;

/// Rounds of the fixture.
const ROUNDS: u64 = 4;

/// The way into `work` a report's item stands for: its enclosing function
/// for an instance (`work [inlined caller_b+0x7e]`), else `out_of_line`.
fn way(name: &str) -> String {
    match name.strip_prefix("work [inlined ") {
        Some(rest) => rest.split('+').next().unwrap_or(rest).to_string(),
        None => {
            assert_eq!(name, "work", "an item that is not work");
            "out_of_line".to_string()
        }
    }
}

fn counts_and_times(fixture: &str) {
    let out = run_fixture(
        "latency",
        &["--json", "work"],
        fixture,
        &[&ROUNDS.to_string()],
        &[],
    );
    let rep = out.success_report();
    let text = out.fixture_text();
    let want: BTreeMap<String, u64> = [
        ("caller_a", ROUNDS),
        ("caller_b", 2 * ROUNDS),
        ("caller_c", 3 * ROUNDS),
        ("out_of_line", ROUNDS),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    assert_eq!(
        common::counts(&text),
        want,
        "the fixture's own counts\n{out}"
    );
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    let mut total: BTreeMap<String, u64> = BTreeMap::new();
    let mut instances: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for f in functions(&rep) {
        let w = way(f["name"].as_str().unwrap());
        for k in ["unwound", "filtered", "overflow"] {
            assert_eq!(num(f, k), 0, "{k} of {}\n{out}", f["name"]);
        }
        *calls.entry(w.clone()).or_default() += num(f, "count");
        *total.entry(w.clone()).or_default() += num(f, "total_ns");
        instances.entry(w).or_default().push(num(f, "count"));
    }
    assert_eq!(calls, want, "calls per way in\n{out}");
    // caller_b has two instances, each called once a round.
    assert_eq!(instances["caller_b"], [ROUNDS, ROUNDS], "{out}");
    assert_eq!(instances["caller_a"], [ROUNDS], "{out}");
    // The report's split: out of line, and through every instance.
    let n: usize = instances
        .iter()
        .filter(|(w, _)| *w != "out_of_line")
        .map(|(_, v)| v.len())
        .sum();
    assert_eq!(
        rep["inlined"],
        serde_json::json!([{
            "name": "work",
            "out_of_line": ROUNDS,
            "inlined": 6 * ROUNDS,
            "instances": n,
        }]),
        "{out}"
    );
    let own = common::tagged(&text, "ns");
    for (w, ns) in &own {
        let got = total[w] as f64;
        let ns = *ns as f64;
        assert!(
            (got - ns).abs() <= 0.2 * ns,
            "{w}: tachy timed {got} ns, the fixture {ns} ns\n{out}"
        );
    }
}

#[test]
fn instances_are_counted_and_timed_at_o2() {
    let _g = common::needs_root!();
    counts_and_times("inlined_o2");
}

#[test]
fn instances_are_counted_and_timed_at_o3_unrolled() {
    let _g = common::needs_root!();
    counts_and_times("inlined_o3");
}

/// The text report says how many calls went out of line and how many
/// through inlined instances.
#[test]
fn text_report_splits_out_of_line_and_inlined_calls() {
    let _g = common::needs_root!();
    let out = run_fixture(
        "latency",
        &["work"],
        "inlined_o2",
        &[&ROUNDS.to_string()],
        &[],
    );
    out.assert_success();
    let want = format!(
        "work: {ROUNDS} calls out of line, {} through 4 inlined instances",
        6 * ROUNDS
    );
    assert!(out.stdout.lines().any(|l| l == want), "{want}\n{out}");
}

/// `--by caller` names the function each instance was inlined into.
#[test]
fn by_caller_names_the_enclosing_function() {
    let _g = common::needs_root!();
    let out = run_fixture(
        "latency",
        &["--json", "--by", "caller", "work"],
        "inlined_o2",
        &[&ROUNDS.to_string()],
        &[],
    );
    let rep = out.success_report();
    for f in functions(&rep) {
        let name = f["name"].as_str().unwrap();
        if name == "work" {
            continue;
        }
        let groups = f["groups"].as_array().expect("groups");
        assert_eq!(groups.len(), 1, "{name}\n{out}");
        let caller = groups[0]["caller"].to_string();
        assert!(caller.contains(&way(name)), "{name}: {caller}\n{out}");
        assert_eq!(num(&groups[0], "count"), num(f, "count"), "{out}");
    }
}

/// `--filter` cannot read an instance's parameters: each instance is left
/// out with a line, and the out-of-line copy is timed.
#[test]
fn filter_leaves_instances_out_with_a_line() {
    let _g = common::needs_root!();
    let out = run_fixture(
        "latency",
        &["--json", "--filter", "arg0 > 0", "work"],
        "inlined_o2",
        &[&ROUNDS.to_string()],
        &[],
    );
    let rep = out.success_report();
    let names: Vec<&str> = functions(&rep)
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["work"], "{out}");
    assert_eq!(
        out.stderr
            .lines()
            .filter(|l| l.contains("--filter does not read the parameters of inlined instances"))
            .count(),
        4,
        "{out}"
    );
}

/// `tachy list` shows each instance with its entry and exits: golden
/// (tests/golden/inlined/; `TACHY_BLESS=1` rewrites it).
#[test]
fn list_shows_each_instance() {
    let _lock = common::serial();
    common::build("inlined_o2");
    let out = Command::new(common::tachy())
        .args(["list", "./inlined_o2", "work"])
        .current_dir(common::fixtures_out_dir())
        .output()
        .unwrap();
    // Prices show where this machine's are cached: the words stay.
    let got: String = common::mask_prices(&String::from_utf8_lossy(&out.stdout))
        .lines()
        .map(|l| match l.split_once("price per call: ~N (") {
            Some((head, words)) => format!("{head}price per call: {}\n", &words[..words.len() - 1]),
            None => format!("{l}\n"),
        })
        .collect();
    assert!(out.status.success(), "{got}");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/inlined/list-o2.txt");
    if std::env::var_os("TACHY_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing golden file {}", path.display()));
    assert_eq!(got, want, "list differs; TACHY_BLESS=1 rewrites it");
}

/// The line of inlined.c where `needle` starts.
fn line_of(needle: &str) -> usize {
    let src = std::fs::read_to_string(common::fixtures_src_dir().join("inlined.c")).unwrap();
    let at = src.find(needle).expect("the fixture has the line");
    src[..at].lines().count() + 1
}

/// Each node of a `tachy nested` tree: its own time and its children's add
/// up to its total, exactly.
fn check_sums(node: &serde_json::Value) {
    use common::node::{children, name};
    let kids: u64 = children(node).iter().map(|c| num(c, "total_ns")).sum();
    assert!(
        kids <= num(node, "total_ns"),
        "{} over its total: {node:#}",
        name(node)
    );
    assert_eq!(
        num(node, "self_ns") + kids,
        num(node, "total_ns"),
        "{node:#}"
    );
    children(node).iter().for_each(check_sums);
}

/// `tachy nested caller_a`: work's instance in caller_a is a site of its
/// own, `work [inlined]` at the line it was inlined at, beside the
/// out-of-line call to pause_us: counted as the fixture called it, timed
/// within 20% of the fixture's own clock.
fn nested_site(fixture: &str) {
    use common::node::{children, name};
    let out = run_fixture(
        "nested",
        &["--json", "caller_a"],
        fixture,
        &[&ROUNDS.to_string()],
        &[],
    );
    let rep = out.success_report();
    let text = out.fixture_text();
    let root = &rep["roots"][0];
    assert_eq!(name(root), "caller_a", "{out}");
    assert_eq!(num(root, "count"), ROUNDS, "{out}");
    let kids = children(root);
    let names: Vec<&str> = kids.iter().map(name).collect();
    assert_eq!(names, ["work [inlined]", "pause_us"], "{out}");
    let work = &kids[0];
    assert_eq!(work["kind"], "inlined", "{out}");
    let line = line_of("    work(SPIN_US);\n    pause_us");
    assert_eq!(work["site"], format!("inlined.c:{line}"), "{out}");
    assert_eq!(
        num(work, "count"),
        common::counts(&text)["caller_a"],
        "{out}"
    );
    assert_eq!(num(work, "unwound"), 0, "{out}");
    assert_eq!(num(&kids[1], "count"), ROUNDS, "{out}");
    let own = common::tagged(&text, "ns")["caller_a"] as f64;
    let got = num(work, "total_ns") as f64;
    assert!(
        (got - own).abs() <= 0.2 * own,
        "tachy timed {got} ns, the fixture {own} ns\n{out}"
    );
    check_sums(root);
}

#[test]
fn nested_times_an_instance_as_a_site_at_o2() {
    let _g = common::needs_root!();
    nested_site("inlined_o2");
}

#[test]
fn nested_times_an_instance_as_a_site_at_o3_unrolled() {
    let _g = common::needs_root!();
    nested_site("inlined_o3");
}

/// `--depth 2`: the calls inside work's instance (now_ns, itself inlined,
/// and what it calls) are the instance's sites, not caller_a's; every
/// node's children and its own time add up to it.
#[test]
fn nested_depth_2_breaks_an_instance_down() {
    let _g = common::needs_root!();
    use common::node::{children, name};
    let out = run_fixture(
        "nested",
        &["--json", "--depth", "2", "caller_a"],
        "inlined_o2",
        &[&ROUNDS.to_string()],
        &[],
    );
    let rep = out.success_report();
    let root = &rep["roots"][0];
    let kids = children(root);
    let names: Vec<&str> = kids.iter().map(name).collect();
    assert_eq!(names, ["work [inlined]", "pause_us"], "{out}");
    assert_eq!(num(&kids[0], "count"), ROUNDS, "{out}");
    assert_eq!(num(&kids[1], "count"), ROUNDS, "{out}");
    let inner = children(&kids[0]);
    assert!(!inner.is_empty(), "{out}");
    // The spin reads the clock at least twice a call: once for its start,
    // then until 300 us have passed (through now_ns's instances, or its
    // call where an instance opens where work's does).
    let calls: u64 = inner.iter().map(|k| num(k, "count")).sum();
    assert!(calls >= 2 * ROUNDS, "{out}");
    for k in inner {
        assert!(
            ["now_ns [inlined]", "clock_gettime@plt"].contains(&name(k)),
            "{out}"
        );
        assert_eq!(num(k, "unwound"), 0, "{out}");
    }
    check_sums(root);
}

/// `tachy nested work`: the instances are work's calls at the root, as
/// `latency` times them, each broken down into its own sites.
#[test]
fn nested_roots_are_the_instances() {
    let _g = common::needs_root!();
    use common::node::name;
    let out = run_fixture(
        "nested",
        &["--json", "work"],
        "inlined_o2",
        &[&ROUNDS.to_string()],
        &[],
    );
    let rep = out.success_report();
    let text = out.fixture_text();
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for r in rep["roots"].as_array().unwrap() {
        *calls.entry(way(name(r))).or_default() += num(r, "count");
        assert_eq!(num(r, "unwound"), 0, "{out}");
        check_sums(r);
    }
    assert_eq!(calls, common::counts(&text), "{out}");
}

/// The way into `turns` of the inlined_loop fixture a report's item
/// stands for: the function its instance was inlined into.
fn loop_way(name: &str) -> String {
    let rest = name
        .strip_prefix("turns [inlined ")
        .unwrap_or_else(|| panic!("an item that is not an instance of turns: {name}"));
    rest.split('+').next().unwrap_or(rest).to_string()
}

/// The fixture's own time per call through `way` (traced), and per call
/// of turns_ref (the same loop out of line, untraced, in the same run):
/// a probe hit on each of the loop's 1,000,000 turns would add at least
/// 0.6 s a call, where the untraced loop takes about a millisecond. The
/// bound leaves room for the instance's own two probes and for
/// preemption on a loaded machine.
fn assert_not_hit_every_turn(text: &str, way: &str, calls: u64, out: &dyn std::fmt::Display) {
    let ns = common::tagged(text, "ns");
    let own = common::counts(text);
    let per_call = ns[way] as f64 / calls as f64;
    let untraced = ns["ref"] as f64 / own["ref"] as f64;
    assert!(
        per_call <= 3.0 * untraced + 10e6,
        "{way}: {per_call:.0} ns a call traced, {untraced:.0} ns untraced\n{out}"
    );
}

/// `turns` is inline-only and its loop's closing jump is the edge that
/// leaves it: `latency` puts the exit where that edge lands, not on the
/// jump (hit on every turn). Every instance is timed: exact counts,
/// totals within 20% of the fixture's own clock, and no probe per turn.
fn loop_exit_latency(fixture: &str) {
    let out = run_fixture(
        "latency",
        &["--json", "turns"],
        fixture,
        &[&ROUNDS.to_string()],
        &[],
    );
    let rep = out.success_report();
    let text = out.fixture_text();
    assert!(!out.stderr.contains("left out"), "{out}");
    let want: BTreeMap<String, u64> = [("loop_a", ROUNDS), ("loop_b", 2 * ROUNDS)]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    let own = common::counts(&text);
    assert_eq!(own["loop_a"], want["loop_a"], "{out}");
    assert_eq!(own["loop_b"], want["loop_b"], "{out}");
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    let mut total: BTreeMap<String, u64> = BTreeMap::new();
    let mut instances: BTreeMap<String, usize> = BTreeMap::new();
    for f in functions(&rep) {
        let w = loop_way(f["name"].as_str().unwrap());
        for k in ["unwound", "filtered", "overflow"] {
            assert_eq!(num(f, k), 0, "{k} of {}\n{out}", f["name"]);
        }
        *calls.entry(w.clone()).or_default() += num(f, "count");
        *total.entry(w.clone()).or_default() += num(f, "total_ns");
        *instances.entry(w).or_default() += 1;
    }
    assert_eq!(calls, want, "calls per way in\n{out}");
    assert_eq!(instances["loop_b"], 2, "{out}");
    let ns = common::tagged(&text, "ns");
    for (w, n) in &want {
        let (got, own) = (total[w] as f64, ns[w] as f64);
        assert!(
            (got - own).abs() <= 0.2 * own,
            "{w}: tachy timed {got} ns, the fixture {own} ns\n{out}"
        );
        assert_not_hit_every_turn(&text, w, *n, &out);
    }
}

#[test]
fn loop_closing_exit_is_probed_where_it_lands_at_o2() {
    let _g = common::needs_root!();
    loop_exit_latency("inlined_loop_o2");
}

#[test]
fn loop_closing_exit_is_probed_where_it_lands_at_o3_unrolled() {
    let _g = common::needs_root!();
    loop_exit_latency("inlined_loop_o3");
}

/// `tachy nested loop_b`: its two instances of `turns`, whose loops leave
/// by their closing jumps, are sites beside its call of begin(), counted
/// as the fixture called them, with no probe per turn.
#[test]
fn nested_times_a_loop_closing_instance_as_a_site() {
    let _g = common::needs_root!();
    use common::node::{children, name};
    let out = run_fixture(
        "nested",
        &["--json", "loop_b"],
        "inlined_loop_o2",
        &[&ROUNDS.to_string()],
        &[],
    );
    let rep = out.success_report();
    let text = out.fixture_text();
    let root = &rep["roots"][0];
    assert_eq!(name(root), "loop_b", "{out}");
    assert_eq!(num(root, "count"), ROUNDS, "{out}");
    let kids = children(root);
    let names: Vec<&str> = kids.iter().map(name).collect();
    assert_eq!(
        names,
        ["begin", "turns [inlined]", "turns [inlined]"],
        "{out}"
    );
    for k in kids {
        assert_eq!(num(k, "count"), ROUNDS, "{out}");
        assert_eq!(num(k, "unwound"), 0, "{out}");
    }
    check_sums(root);
    assert_not_hit_every_turn(&text, "loop_b", 2 * ROUNDS, &out);
}
