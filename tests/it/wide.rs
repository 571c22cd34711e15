//! Root-run integration tests of `tachy nested` on a tree wider than 128
//! nodes: the `wide` fixture (tests/fixtures/wide.c), whose function wide(i)
//! has 51 call sites (10 of which never run) into functions with 2 or 3 call
//! sites each (some never run), 192 nodes at --depth 2 with every count
//! known. The text report hides the sites that never ran and says how
//! many; --all-sites shows them; JSON has them all.
//!
//! Every test takes the `common::serial()` lock first; those that attach
//! probes are skipped (with a message) when not run as root.

use crate::common;

use std::time::Duration;

use common::node::{children as kids, name, num};
use common::run::{Outcome, Tachy};
use serde_json::Value;

const FIXTURE: &str = "wide";
/// Calls of wide(i), i = 0..N: N / 2 even and N / 2 odd.
const N: u64 = 200;
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// Sites that never run at --depth 2: 10 rareK calls, their 2 sites each,
/// and the third site of each of the 40 midK.
const NEVER_RAN: u64 = 10 + 10 * 2 + 40;

/// `tachy nested --max-overhead 0 OPTS... wide -- wide N` with
/// FIXTURE_NO_WAIT=1. The budget is off: tick does nothing, so its 191
/// sites' probes sit near the default budget, and on a loaded machine the
/// budget samples them (counts scaled, not exact).
fn run_wide(opts: &[&str]) -> Outcome {
    let exe = common::build(FIXTURE);
    let mut args: Vec<String> = vec!["nested".into(), "--max-overhead".into(), "0".into()];
    args.extend(opts.iter().map(|s| s.to_string()));
    args.extend(["wide".into(), "--".into()]);
    args.push(exe.to_str().unwrap().into());
    args.push(N.to_string());
    Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT)
}

/// The planned tree has more than 128 nodes (the old limit), and every
/// site counts exactly the calls the fixture makes: midK once per call of
/// wide, its sites N, N / 2 (even i) and 0 times; rareK and its sites
/// never; the odd-i tick N / 2 times. JSON keeps the sites that never ran.
#[test]
fn wide_tree_at_depth_2_counts_every_site() {
    let _guard = common::needs_root!();
    let out = run_wide(&["--json", "--depth", "2"]);
    out.assert_success();
    let summary = common::counts(&out.stderr);
    assert_eq!(summary.get("wide").copied(), Some(N), "{out}");
    let rep = out.single_report();
    let root = &rep["roots"][0];
    assert_eq!(name(root), "wide", "{root:#}");
    assert_eq!(num(root, "count"), N, "{root:#}");
    assert_eq!(num(root, "unwound"), 0, "{root:#}");

    fn nodes(v: &Value) -> usize {
        1 + kids(v).iter().map(nodes).sum::<usize>()
    }
    assert_eq!(nodes(root), 192, "{root:#}");

    let sites = kids(root);
    assert_eq!(sites.len(), 51, "{root:#}");
    for (k, mid) in sites.iter().take(40).enumerate() {
        assert_eq!(name(mid), format!("mid{k}"), "{mid:#}");
        assert_eq!(num(mid, "count"), N, "{mid:#}");
        assert_eq!(num(mid, "unwound"), 0, "{mid:#}");
        let mut ticks: Vec<u64> = kids(mid)
            .iter()
            .map(|t| {
                assert_eq!(name(t), "tick", "{mid:#}");
                assert_eq!(num(t, "unwound"), 0, "{mid:#}");
                num(t, "count")
            })
            .collect();
        ticks.sort_unstable();
        assert_eq!(ticks, vec![0, N / 2, N], "{mid:#}");
    }
    let mut rare: Vec<String> = Vec::new();
    let mut odd_ticks = Vec::new();
    for s in &sites[40..] {
        match name(s) {
            "tick" => odd_ticks.push(num(s, "count")),
            n => {
                rare.push(n.to_string());
                assert_eq!(num(s, "count") + num(s, "unwound"), 0, "{s:#}");
                assert_eq!(kids(s).len(), 2, "{s:#}");
                for t in kids(s) {
                    assert_eq!(num(t, "count") + num(t, "unwound"), 0, "{s:#}");
                }
            }
        }
    }
    rare.sort();
    let want: Vec<String> = (0..10).map(|k| format!("rare{k}")).collect();
    assert_eq!(rare, want, "{root:#}");
    assert_eq!(odd_ticks, vec![N / 2], "{root:#}");
}

/// Lines of the text report that are call sites (`... per call ...`).
fn site_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.contains(" per call ")).collect()
}

/// The text report shows the 122 sites that ran and one line for the 70
/// that did not; --all-sites shows all 191, and no such line.
#[test]
fn wide_text_hides_sites_that_never_ran() {
    let _guard = common::needs_root!();
    let hidden_line =
        format!("  ({NEVER_RAN} call sites that never ran are hidden: --all-sites shows them)");

    let out = run_wide(&["--depth", "2"]);
    out.assert_success();
    assert_eq!(common::counts(&out.stdout).get("wide").copied(), Some(N));
    let text = &out.stdout;
    let sites = site_lines(text);
    assert_eq!(sites.len(), 40 + 40 * 2 + 1, "{out}");
    assert!(
        sites.iter().all(|l| !l.contains("0.00 per call")),
        "a site that never ran is shown\n{out}"
    );
    assert!(!text.contains("rare"), "{out}");
    for k in 0..40 {
        let mid = format!("  mid{k} ");
        let line = sites
            .iter()
            .find(|l| l.contains(&mid))
            .unwrap_or_else(|| panic!("no line for mid{k}\n{out}"));
        assert!(line.contains(" 1.00 per call "), "{line}");
    }
    assert_eq!(
        sites
            .iter()
            .filter(|l| l.contains(" 0.50 per call "))
            .count(),
        41,
        "{out}"
    );
    assert_eq!(
        text.lines().filter(|l| *l == hidden_line).count(),
        1,
        "{out}"
    );

    let out = run_wide(&["--depth", "2", "--all-sites"]);
    out.assert_success();
    let text = &out.stdout;
    let sites = site_lines(text);
    assert_eq!(sites.len(), 191, "{out}");
    assert_eq!(
        sites
            .iter()
            .filter(|l| l.contains(" 0.00 per call "))
            .count() as u64,
        NEVER_RAN,
        "{out}"
    );
    assert_eq!(text.matches(" rare").count(), 10, "{out}");
    assert!(!text.contains("never ran"), "{out}");
}
