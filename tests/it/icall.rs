//! Calls through function pointers (fixture `icall`, see its source): the
//! probe on an indirect call reads where the call goes (a register, or a
//! pointer in memory as a vtable holds it), and `tachy nested` counts the
//! calls per callee under the site.

use crate::common;

use std::time::Duration;

use common::run::{Outcome, Tachy};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const ROUNDS: u64 = 10;

fn nested(args: &[&str]) -> Outcome {
    let rounds = ROUNDS.to_string();
    nested_of(args, "dispatch", &[&rounds])
}

/// `tachy nested ARGS FUNC -- icall FIXTURE_ARGS...`.
fn nested_of(args: &[&str], func: &str, fixture_args: &[&str]) -> Outcome {
    let exe = common::build("icall");
    let mut a = vec!["nested"];
    a.extend_from_slice(args);
    a.extend([func, "--", exe.to_str().unwrap()]);
    a.extend_from_slice(fixture_args);
    Tachy::start(&a, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT)
}

/// (name, count) of each callee of a site of the JSON tree.
fn callees(site: &Value) -> Vec<(String, u64)> {
    site["callees"]
        .as_array()
        .unwrap_or_else(|| panic!("no callees in {site}"))
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                c["count"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// Each indirect site's calls, per callee, exactly: 3 and 7 per call of
/// dispatch through the register, 2 and 8 through the table in memory;
/// they add up to the site's count, and the callees are named by symbol
/// in the fixture.
#[test]
fn nested_counts_the_callees_of_each_indirect_call() {
    let _g = common::needs_root!();
    let rep = nested(&["--json"]).success_report();
    let root = &rep["roots"][0];
    assert_eq!(root["name"], "dispatch", "{rep}");
    assert_eq!(root["count"].as_u64(), Some(ROUNDS), "{rep}");
    let sites = root["children"].as_array().expect("sites");
    assert_eq!(sites.len(), 2, "{rep}");
    let want = [
        vec![
            ("slow_b".to_string(), 7 * ROUNDS),
            ("fast_a".into(), 3 * ROUNDS),
        ],
        vec![
            ("slow_b".to_string(), 8 * ROUNDS),
            ("fast_a".into(), 2 * ROUNDS),
        ],
    ];
    for (site, want) in sites.iter().zip(want) {
        assert_eq!(site["kind"], "indirect", "{site}");
        assert_eq!(callees(site), want, "{site}");
        let sum: u64 = want.iter().map(|(_, n)| n).sum();
        assert_eq!(site["count"].as_u64(), Some(sum), "{site}");
        for c in site["callees"].as_array().into_iter().flatten() {
            assert!(
                c["object"].as_str().is_some_and(|o| o.ends_with("icall")),
                "{c}"
            );
            assert!(
                c["addr"].as_str().is_some_and(|a| a.starts_with("0x")),
                "{c}"
            );
        }
    }
}

/// The text report: a line under each indirect site, the most called
/// callee first.
#[test]
fn nested_text_lists_callees_under_the_site() {
    let _g = common::needs_root!();
    let out = nested(&[]);
    out.assert_success();
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("-> callees:"))
        .map(str::trim)
        .collect();
    assert_eq!(
        lines,
        [
            format!("-> callees: slow_b {}, fast_a {}", 7 * ROUNDS, 3 * ROUNDS),
            format!("-> callees: slow_b {}, fast_a {}", 8 * ROUNDS, 2 * ROUNDS),
        ],
        "{out}"
    );
}

/// The dry run lists where each indirect call's probe reads its callee:
/// a register, and a pointer at a register plus 8; the probe stays the
/// call's.
#[test]
fn dry_run_lists_the_callee_read() {
    let out = nested(&["--dry-run"]);
    out.assert_success();
    let sites: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("site <"))
        .collect();
    assert_eq!(sites.len(), 2, "{out}");
    assert!(sites[0].contains(" reads callee *r"), "{out}");
    assert!(
        sites[1].contains(" reads callee *[r") && sites[1].contains("+0x8]"),
        "{out}"
    );
}

/// The sites of each callee of an indirect site that `--expand`
/// CALLER->CALLEE, as a JSON list of (name, count, via).
fn expanded(site: &Value) -> Vec<(String, u64, String)> {
    site["children"]
        .as_array()
        .unwrap_or_else(|| panic!("no children in {site}"))
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                c["count"].as_u64().unwrap_or_default(),
                c["via"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// `--expand 'dispatch->slow_b'` breaks slow_b down under each indirect
/// call of dispatch, counting only the calls made through it to slow_b:
/// its two calls of b_part, 7 and 8 per call of dispatch, never the
/// calls slow_b makes when fast_a, reached through the same call, calls it
/// (one more per loop: 8 and 9 if counted); and the call of rare in its
/// cold part, placed below its start, once per call of dispatch.
#[test]
fn expand_through_an_indirect_call_counts_only_its_callee() {
    let _g = common::needs_root!();
    let rep = nested(&["--expand", "dispatch->slow_b", "--json"]).success_report();
    let sites = rep["roots"][0]["children"].as_array().expect("sites");
    assert_eq!(sites.len(), 2, "{rep}");
    for (site, per) in sites.iter().zip([7, 8]) {
        let b = |n| ("b_part".to_string(), n * ROUNDS, "slow_b".to_string());
        // rare's call stands in slow_b.cold, below slow_b's start.
        let rare = ("rare".to_string(), ROUNDS, "slow_b".to_string());
        assert_eq!(expanded(site), [b(per), b(per), rare], "{site}");
    }
}

/// Both callees broken down: each one's sites under the call
/// count the calls through it to that one; fast_a's call of slow_b counts
/// once per loop, and the text report heads each callee's sites with its
/// name.
#[test]
fn expand_through_an_indirect_call_keeps_each_callee_apart() {
    let _g = common::needs_root!();
    let both = [
        "--expand",
        "dispatch->fast_a",
        "--expand",
        "dispatch->slow_b",
    ];
    let rep = nested(&[&both[..], &["--json"]].concat()).success_report();
    let sites = rep["roots"][0]["children"].as_array().expect("sites");
    for (site, per) in sites.iter().zip([7, 8]) {
        let mut got = expanded(site);
        got.sort();
        let mut want = vec![
            ("b_part".to_string(), per * ROUNDS, "slow_b".to_string()),
            ("b_part".to_string(), per * ROUNDS, "slow_b".to_string()),
            ("rare".to_string(), ROUNDS, "slow_b".to_string()),
            ("slow_b".to_string(), ROUNDS, "fast_a".to_string()),
        ];
        want.sort();
        assert_eq!(got, want, "{site}");
    }
    let out = nested(&both);
    out.assert_success();
    let heads: Vec<&str> = out
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("in "))
        .collect();
    assert_eq!(heads.len(), 4, "{out}");
    assert!(
        heads.contains(&"in slow_b:") && heads.contains(&"in fast_a:"),
        "{out}"
    );
}

/// CALLER->CALLEE with a side empty is one line of usage error.
#[test]
fn expand_through_with_a_side_empty_is_refused() {
    for bad in ["dispatch->", "->slow_b"] {
        let out = nested(&[&format!("--expand={bad}"), "--dry-run"]);
        assert_eq!(out.code(), Some(2), "{bad}: {out}");
        assert!(out.stderr.contains("one side is empty"), "{bad}: {out}");
    }
}

/// Sampled by the overhead budget, an indirect site's callees are scaled
/// with its count: they add up to its calls, and the site is marked an
/// estimate. The budget is set to half the overhead a run without one
/// estimates (on this machine, by its calibration), so that the sites
/// are shed and timed in a share of each second (40,000 rounds: ~0.6 s
/// untraced here, a few seconds sampled). The traced function's calls are
/// never scaled.
#[test]
fn sampled_sites_scale_their_callees_with_their_count() {
    let _g = common::needs_root!();
    let free = nested_of(&["--json", "--max-overhead", "1000"], "dispatch", &["3000"]);
    let rep = free.success_report();
    let pct = rep["overhead"]["estimated_pct"]
        .as_f64()
        .unwrap_or_else(|| panic!("no estimate: {free}"));
    assert!(pct > 0.0, "{free}");
    // Past 1000% (the most --max-overhead takes) the first run was over
    // its budget already.
    let budget = format!("{:.3}", (pct / 2.0).min(999.0));
    let out = nested_of(
        &["--json", "--max-overhead", &budget],
        "dispatch",
        &["40000"],
    );
    let rep = out.success_report();
    let root = &rep["roots"][0];
    assert_eq!(root["count"].as_u64(), Some(40000), "{out}");
    assert!(root.get("estimated").is_none(), "{out}");
    // What became of each site last.
    let mut last: Vec<(String, &Value)> = Vec::new();
    for s in rep["overhead"]["shed"].as_array().into_iter().flatten() {
        let at = s["site"].as_str().unwrap_or_default().to_string();
        last.retain(|(a, _)| *a != at);
        last.push((at, s));
    }
    let sampled: Vec<&str> = last
        .iter()
        .filter(|(_, s)| s["action"] == "sampled")
        .map(|(a, _)| a.as_str())
        .collect();
    assert!(!sampled.is_empty(), "nothing sampled at {budget}%: {out}");
    let sites = root["children"].as_array().expect("sites");
    for at in sampled {
        let site = sites
            .iter()
            .find(|x| x["site"] == at)
            .unwrap_or_else(|| panic!("no site {at}: {out}"));
        assert_eq!(site["estimated"], true, "{site}");
        let calls = site["count"].as_u64().unwrap() + site["unwound"].as_u64().unwrap();
        let per = callees(site);
        assert_eq!(per.iter().map(|(_, n)| n).sum::<u64>(), calls, "{site}");
        let names: Vec<&str> = per.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["slow_b", "fast_a"], "{site}");
    }
}

/// `route` mode (see the fixture): 20 calls of route, each one call
/// through a pointer, 14 to slow_b (spinning 20,000,000 turns twice,
/// ~80 ms here) and 6 to fast_a (microseconds). `--slower-than 10ms`
/// keeps the 14: the site counts 14, but its callees are counted at the
/// call, over every call through it, and say so: in JSON
/// `callees_before_filter`, in text on their line.
#[test]
fn callees_under_a_duration_filter_count_every_call_and_say_so() {
    let _g = common::needs_root!();
    let args = ["2", "route", "20000000"];
    let opts = ["--slower-than", "10ms", "--max-overhead", "0"];
    let mut json = vec!["--json"];
    json.extend(opts);
    let out = nested_of(&json, "route", &args);
    let rep = out.success_report();
    let root = &rep["roots"][0];
    assert_eq!(root["name"], "route", "{rep}");
    assert_eq!(root["count"].as_u64(), Some(14), "{rep}");
    assert_eq!(root["filtered"].as_u64(), Some(6), "{rep}");
    let sites = root["children"].as_array().expect("sites");
    assert_eq!(sites.len(), 1, "{rep}");
    let site = &sites[0];
    assert_eq!(site["kind"], "indirect", "{site}");
    assert_eq!(site["count"].as_u64(), Some(14), "{site}");
    assert_eq!(site["callees_before_filter"], "--slower-than", "{site}");
    assert_eq!(
        callees(site),
        [("slow_b".to_string(), 14), ("fast_a".into(), 6)],
        "{site}"
    );
    let out = nested_of(&opts, "route", &args);
    out.assert_success();
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("-> callees"))
        .collect();
    assert_eq!(
        lines,
        ["-> callees (all calls, before --slower-than): slow_b 14, fast_a 6"],
        "{out}"
    );
}

/// The probe on an indirect call is single-stepped (only `call rel32` is
/// emulated), after the site's clock started: that step is subtracted as
/// the probe time inside the site, so what an indirect site takes beyond
/// its callee's sites (its self time: the jump, slow_b's own few
/// instructions, fast_a's) is well under the step's price that
/// `--dry-run` gives (it read a whole step, ~15 us, high here before).
#[test]
fn an_indirect_site_does_not_read_its_single_step() {
    let _g = common::needs_root!();
    // Run first: it measures the probes' prices the dry run then gives.
    let both = [
        "--expand",
        "dispatch->fast_a",
        "--expand",
        "dispatch->slow_b",
    ];
    let rep = nested(&[&both[..], &["--json", "--max-overhead", "0"]].concat()).success_report();
    let dry = nested(&["--dry-run"]);
    dry.assert_success();
    let step_ns = dry
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("site <0>"))
        .and_then(|l| l.split("single-stepped ~").nth(1))
        .and_then(|p| {
            let mut w = p.split_whitespace();
            let n: f64 = w.next()?.parse().ok()?;
            let unit = match w.next()? {
                "ns" => 1.0,
                "us" => 1e3,
                "ms" => 1e6,
                _ => return None,
            };
            Some(n * unit)
        })
        .unwrap_or_else(|| panic!("no single-stepped site price:\n{dry}"));
    for site in rep["roots"][0]["children"].as_array().expect("sites") {
        let calls = site["count"].as_u64().unwrap_or(0);
        assert_eq!(calls, 10 * ROUNDS, "{site}");
        let self_per_call = site["self_ns"].as_u64().unwrap_or(u64::MAX) as f64 / calls as f64;
        assert!(
            self_per_call < step_ns / 2.0,
            "self {self_per_call} ns per call, a step {step_ns} ns: {site}"
        );
    }
}

/// CALLER->CALLEE that breaks nothing down says why, one line each: no
/// function matches CALLEE, or CALLER makes no indirect call planned.
#[test]
fn expand_through_that_breaks_nothing_down_says_why() {
    for (e, why) in [
        (
            "dispatch->slow_bb",
            "no function of the process matches \"slow_bb\"",
        ),
        ("rounds->slow_b", "no traced function, nor callee broken down, matching \"rounds\" makes an indirect call"),
    ] {
        let out = nested(&["--expand", e, "--dry-run"]);
        out.assert_success();
        let line = format!("tachy: left out --expand \"{e}\": {why}");
        assert!(out.stderr.lines().any(|l| l.starts_with(&line)), "{e}: {out}");
    }
}
