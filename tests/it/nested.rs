//! Root-run integration tests of `tachy nested` (and `tachy list --sites`)
//! on the `nested_o2` fixture (tests/fixtures/nested.cpp): app::handle(int)
//! makes direct, PLT, indirect and tail calls, catches an exception thrown
//! by one of its callees, and takes a slow path on every 4th call, so every
//! call site's count is known exactly and its duration has a known floor.
//!
//! Every test takes the `common::serial()` lock first; those that attach
//! probes are skipped (with a message) when not run as root.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::node::{children, name, num};
use common::run::{Outcome, Tachy};
use common::{counts, tagged, Fixture};
use serde_json::Value;

const FIXTURE: &str = "nested_o2";
const ROOT: &str = "app::handle(int)";
/// How long a tachy run may take before the test gives up on it.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// Generous slack added to a site's nominal average duration for its upper
/// bound (sleeps oversleep, probes cost, the machine may be busy).
const AVG_SLACK_NS: u64 = 10_000_000;
const US: u64 = 1_000;
/// The --slower-than threshold, and its value in ns.
const SLOWER_THAN: &str = "10ms";
const SLOWER_THAN_NS: u64 = 10_000_000;

// ---------------------------------------------------------------------------
// The fixture: expected numbers, source lines
// ---------------------------------------------------------------------------

/// What `I` iterations on `T` threads of the fixture do (see the comment at
/// the top of nested.cpp).
#[derive(Clone, Copy, Debug)]
struct Expect {
    it: u64,
    th: u64,
}

impl Expect {
    /// Calls of app::handle(int).
    fn n(self) -> u64 {
        self.it * self.th
    }
    /// Calls with i % 4 == 0: those that call app::slow_path(int).
    fn slow(self) -> u64 {
        self.th * self.it.div_ceil(4)
    }
    /// Calls with i % 5 == 0: app::risky(int) throws, handle catches.
    fn throws(self) -> u64 {
        self.th * self.it.div_ceil(5)
    }
    /// The fixture's own `count` lines.
    fn counts(self) -> BTreeMap<String, u64> {
        let n = self.n();
        [
            ("app::handle(int)", n),
            ("app::parse(int)", n),
            ("app::tokenize(int)", 2 * n),
            ("fixture_io", n),
            ("app::store(int)", n),
            ("app::slow_path(int)", self.slow()),
            ("app::risky(int)", n),
            ("app::walk(int)", 3 * n),
            ("app::finish(int)", n),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
    fn args(self) -> [String; 2] {
        [self.it.to_string(), self.th.to_string()]
    }
}

/// Checks the fixture's summary in `stdout` (tachy's stdout when started
/// with `--`; tachy's stderr while JSON or folded stacks go to stdout):
/// exact counts, caught exceptions, `done`.
fn check_fixture_summary(stdout: &str, e: Expect, context: &dyn std::fmt::Display) {
    assert_eq!(counts(stdout), e.counts(), "fixture summary\n{context}");
    assert_eq!(
        tagged(stdout, "exceptions").get("app::risky(int)").copied(),
        Some(e.throws()),
        "fixture's caught exceptions\n{context}"
    );
    assert!(
        stdout.lines().any(|l| l == "done"),
        "fixture did not finish\n{context}"
    );
}

fn source() -> String {
    let p = common::fixtures_src_dir().join("nested.cpp");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

/// The 1-based number of the one source line containing `needle`.
fn line_of(needle: &str) -> u32 {
    let src = source();
    let hits: Vec<usize> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "expected exactly one line of nested.cpp containing {needle:?}, found {hits:?}"
    );
    hits[0] as u32
}

/// `nested.cpp:LINE` of the line containing `needle`.
fn loc(needle: &str) -> String {
    format!("nested.cpp:{}", line_of(needle))
}

/// First and last line of app::handle's body (its `{` line to its `}`).
fn handle_lines() -> (u32, u32) {
    let src = source();
    let start = line_of("NOCLONE int handle(int i) {");
    let end = src
        .lines()
        .enumerate()
        .skip(start as usize)
        .find(|(_, l)| *l == "}")
        .map(|(i, _)| i as u32 + 1)
        .expect("end of handle()");
    (start, end)
}

/// Whether `site` is `nested.cpp:L` with L inside app::handle.
fn in_handle(site: &str) -> bool {
    let (a, b) = handle_lines();
    site.strip_prefix("nested.cpp:")
        .and_then(|l| l.parse::<u32>().ok())
        .is_some_and(|l| l >= a && l <= b)
}

/// One call site of app::handle as the tests expect it.
struct SiteSpec {
    name: &'static str,
    kind: &'static str,
    /// A unique piece of the source line the call is on; None for calls
    /// the compiler generates (exception handling), which must only lie
    /// within handle.
    line: Option<&'static str>,
    /// Completed calls (committed with their root call).
    count: u64,
    unwound: u64,
    /// Nominal duration of one call (a lower bound).
    floor_ns: u64,
    /// Whether gcc may leave it out (the never-reached _Unwind_Resume).
    optional: bool,
}

/// The call sites of app::handle(int) and what one unfiltered run of `e`
/// gives for each.
fn handle_sites(e: Expect) -> Vec<SiteSpec> {
    let n = e.n();
    let s = |name, kind, line, count, unwound, floor_us: u64| SiteSpec {
        name,
        kind,
        line,
        count,
        unwound,
        floor_ns: floor_us * US,
        optional: false,
    };
    vec![
        s(
            "app::parse(int)",
            "call",
            Some("int acc = parse(i);"),
            n,
            0,
            150,
        ),
        s(
            "fixture_io@plt",
            "plt",
            Some("acc += fixture_io(i);"),
            n,
            0,
            300,
        ),
        s(
            "*indirect",
            "indirect",
            Some("acc += g_store_fn(i);"),
            n,
            0,
            150,
        ),
        s(
            "app::slow_path(int)",
            "call",
            Some("if (i % 4 == 0) acc += slow_path(i);"),
            e.slow(),
            0,
            20000,
        ),
        // Left by exception when it throws; the frame must count as
        // unwound, not completed, and not hide the sites after it.
        s(
            "app::risky(int)",
            "call",
            Some("acc += risky(i);"),
            n - e.throws(),
            e.throws(),
            0,
        ),
        s("app::walk(int)", "call", Some("acc += walk(2);"), n, 0, 0),
        s(
            "app::finish(int)",
            "tail",
            Some("return finish(acc);"),
            n,
            0,
            100,
        ),
        s("__cxa_begin_catch@plt", "plt", None, e.throws(), 0, 0),
        s("__cxa_end_catch@plt", "plt", None, e.throws(), 0, 0),
        SiteSpec {
            optional: true,
            ..s("_Unwind_Resume@plt", "plt", None, 0, 0, 0)
        },
    ]
}

// ---------------------------------------------------------------------------
// Running tachy
// ---------------------------------------------------------------------------

/// Runs tachy with `args` to completion (killing it after RUN_TIMEOUT).
fn run_tachy(args: &[String], envs: &[(&str, &str)]) -> Outcome {
    Tachy::start(args, envs).finish(RUN_TIMEOUT)
}

/// `tachy nested OPTS... app::handle -- nested_o2 I T` with
/// FIXTURE_NO_WAIT=1 (plus `envs`).
fn run_nested(opts: &[&str], e: Expect, envs: &[(&str, &str)]) -> Outcome {
    let exe = common::build(FIXTURE);
    let mut args: Vec<String> = vec!["nested".into()];
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push(ROOT.into());
    args.push("--".into());
    args.push(exe.to_str().unwrap().into());
    args.extend(e.args());
    let mut all = vec![("FIXTURE_NO_WAIT", "1")];
    all.extend_from_slice(envs);
    run_tachy(&args, &all)
}

// ---------------------------------------------------------------------------
// JSON reports
// ---------------------------------------------------------------------------

/// The one JSON report of a run without `-i` (fixture lines never start
/// with `{`).
fn single_report(out: &Outcome) -> Value {
    let mut reps: Vec<Value> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}\n{out}"))
        })
        .collect();
    assert_eq!(reps.len(), 1, "expected exactly one JSON report\n{out}");
    let rep = reps.pop().unwrap();
    assert!(rep["time"].as_f64().is_some_and(|t| t > 1e9), "time: {rep}");
    rep
}

/// The report's one root, app::handle(int).
fn the_root(rep: &Value) -> &Value {
    let roots = rep["roots"]
        .as_array()
        .unwrap_or_else(|| panic!("no roots array in {rep}"));
    assert_eq!(roots.len(), 1, "expected one root: {rep:#}");
    let r = &roots[0];
    assert_eq!(r["name"], ROOT, "{r:#}");
    assert_eq!(r["kind"], "function", "{r:#}");
    assert!(r["site"].is_null(), "a root has no site: {r:#}");
    r
}

/// The children of `node` named `n`.
fn kids_named<'a>(node: &'a Value, n: &str) -> Vec<&'a Value> {
    children(node).iter().filter(|c| name(c) == n).collect()
}

/// The one child of `node` named `n`.
fn kid<'a>(node: &'a Value, n: &str) -> &'a Value {
    let hits = kids_named(node, n);
    assert_eq!(
        hits.len(),
        1,
        "expected one child named {n:?} under:\n{node:#}"
    );
    hits[0]
}

/// Checks `node` and every node below it: the keys of its kind, self_ns ==
/// max(0, total_ns - sum(children's total_ns)), and a node with no
/// completed call has no time. For `node` itself, and for every node below
/// it when `deep`: the children's totals add up to at most the node's, so
/// that self_ns + children's total_ns == total_ns exactly.
fn check_sums(node: &Value, deep: bool) {
    check_tree(node, true, deep);
}

fn check_tree(node: &Value, within: bool, deep: bool) {
    let kids = children(node);
    let total = num(node, "total_ns");
    let kids_total: u64 = kids.iter().map(|c| num(c, "total_ns")).sum();
    assert_eq!(
        num(node, "self_ns"),
        total.saturating_sub(kids_total),
        "self_ns of {} ({}):\n{node:#}",
        name(node),
        node["site"]
    );
    if within {
        assert!(
            kids_total <= total,
            "children of {} ({}) add up to {kids_total} ns, more than its total {total} ns:\n{node:#}",
            name(node),
            node["site"]
        );
        assert_eq!(
            num(node, "self_ns") + kids_total,
            total,
            "self_ns + children's total_ns != total_ns for {} ({}):\n{node:#}",
            name(node),
            node["site"]
        );
    }
    // A site's total includes calls left by exception (timed up to when
    // tachy saw them leave), so only a node with neither has no time.
    if num(node, "count") + num(node, "unwound") == 0 {
        assert_eq!(total, 0, "time without calls: {node:#}");
    }
    num(node, "unwound");
    if node["kind"] == "function" {
        num(node, "filtered");
    } else {
        assert!(
            matches!(
                node["kind"].as_str(),
                Some("call" | "plt" | "indirect" | "tail" | "inlined")
            ),
            "bad kind: {node:#}"
        );
        assert!(
            node.get("filtered").is_none(),
            "filtered on a site: {node:#}"
        );
        // `file:line`, or null where the object has no line table (a
        // library function reached through the PLT).
        assert!(
            node["site"].is_null()
                || node["site"].as_str().is_some_and(|s| s
                    .split(" (inlined from ")
                    .next()
                    .unwrap()
                    .contains(':')),
            "site is neither file:line nor null: {node:#}"
        );
    }
    for c in kids {
        check_tree(c, deep, deep);
    }
}

/// Checks the depth-1 sites of `root` against `handle_sites(e)`: exact
/// counts and unwinds, location, kind, time floor and ceiling, and that
/// nothing else is there. Sites listed in `expanded` may have children;
/// the others must have none.
fn check_handle_sites(root: &Value, e: Expect, expanded: &[&str]) {
    let specs = handle_sites(e);
    for c in children(root) {
        assert!(
            specs.iter().any(|s| s.name == name(c)),
            "unexpected call site {} under {ROOT}:\n{c:#}",
            name(c)
        );
    }
    for s in &specs {
        let hits = kids_named(root, s.name);
        if hits.is_empty() && s.optional {
            continue;
        }
        assert_eq!(
            hits.len(),
            1,
            "expected one site {} under:\n{root:#}",
            s.name
        );
        let c = hits[0];
        let site = c["site"].as_str().unwrap_or_default();
        match s.line {
            Some(needle) => assert_eq!(site, loc(needle), "location of {}: {c:#}", s.name),
            None => assert!(
                in_handle(site),
                "{} at {site:?}, not in handle: {c:#}",
                s.name
            ),
        }
        assert_eq!(c["kind"], s.kind, "kind of {}: {c:#}", s.name);
        let count = num(c, "count");
        assert_eq!(count, s.count, "count of site {}: {c:#}", s.name);
        assert_eq!(
            num(c, "unwound"),
            s.unwound,
            "unwound of site {}: {c:#}",
            s.name
        );
        let total = num(c, "total_ns");
        assert!(
            total >= s.floor_ns * count,
            "total_ns of {} is {total}, below {count} x nominal {} ns: {c:#}",
            s.name,
            s.floor_ns
        );
        assert!(
            total < (s.floor_ns + AVG_SLACK_NS) * count.max(1),
            "total_ns of {} is {total}, not below {count} x {} ns: {c:#}",
            s.name,
            s.floor_ns + AVG_SLACK_NS
        );
        if !expanded.contains(&s.name) {
            assert!(
                children(c).is_empty(),
                "{} should not be broken down: {c:#}",
                s.name
            );
        }
    }
}

/// The fixed part of a fast handle() call, in ns: parse + fixture_io +
/// store + finish.
const FAST_FLOOR_NS: u64 = (150 + 300 + 150 + 100) * US;
const SLOW_PATH_NS: u64 = 20000 * US;

// ---------------------------------------------------------------------------
// The fixture itself
// ---------------------------------------------------------------------------

/// The fixture prints the documented counts and, with FIXTURE_TIMINGS=1,
/// one duration per handle() call, bimodal as designed (the slow calls take
/// at least the slow path's 20ms).
#[test]
fn fixture_counts_and_timings() {
    let _guard = common::serial();
    let e = Expect { it: 8, th: 2 };
    let mut fx = Fixture::spawn_env(FIXTURE, &["8", "2"], &[("FIXTURE_TIMINGS", "1")]);
    fx.go();
    let (status, stdout) = fx.wait();
    assert!(status.success(), "fixture failed ({status}):\n{stdout}");
    check_fixture_summary(&stdout, e, &stdout);
    let took = timings(&stdout);
    assert_eq!(took.len() as u64, e.n(), "took lines:\n{stdout}");
    for (i, ns) in took {
        let floor = FAST_FLOOR_NS + if i % 4 == 0 { SLOW_PATH_NS } else { 0 };
        assert!(ns >= floor, "handle({i}) took {ns} ns < {floor}:\n{stdout}");
    }
}

/// `took app::handle(int) I NS` lines: (i, ns).
fn timings(stdout: &str) -> Vec<(u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("took app::handle(int) "))
        .map(|r| {
            let (i, ns) = r.split_once(' ').expect("took line");
            (i.parse().unwrap(), ns.parse().unwrap())
        })
        .collect()
}

fn objdump_handle(bin: &Path, symbol: &str) -> Option<String> {
    let out = Command::new("objdump")
        .args(["-d", "-C", "--no-show-raw-insn"])
        .arg(bin)
        .output()
        .ok()?;
    assert!(out.status.success(), "objdump failed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let head = format!("<{symbol}>:");
    let start = text
        .find(&head)
        .unwrap_or_else(|| panic!("no {symbol} in the disassembly"));
    let body = &text[start..];
    let end = body.find("\n\n").unwrap_or(body.len());
    Some(body[..end].to_string())
}

/// The code shapes the tests rely on, at -O2: real calls, a PLT call, an
/// indirect call gcc could not devirtualize, and a tail jump to finish.
#[test]
fn fixture_code_shape() {
    let _guard = common::serial();
    let bin = common::build(FIXTURE);
    let Some(handle) = objdump_handle(&bin, ROOT) else {
        common::skip("no objdump");
        return;
    };
    let has = |pat: &str| handle.lines().any(|l| l.contains(pat));
    for callee in [
        "app::parse(int)",
        "fixture_io@plt",
        "app::slow_path(int)",
        "app::risky(int)",
        "app::walk(int)",
    ] {
        assert!(
            handle
                .lines()
                .any(|l| l.contains("call") && l.contains(&format!("<{callee}>"))),
            "no call to {callee} in handle:\n{handle}"
        );
    }
    assert!(
        handle
            .lines()
            .any(|l| l.contains("call") && l.contains("*%")),
        "no indirect call in handle:\n{handle}"
    );
    assert!(
        !has("<app::store(int)>"),
        "store was devirtualized:\n{handle}"
    );
    assert!(
        handle
            .lines()
            .any(|l| l.contains("jmp") && l.contains("<app::finish(int)>")),
        "finish is not tail-called:\n{handle}"
    );
    assert!(
        !handle.lines().any(|l| l.trim_end().ends_with("ret")),
        "handle has a ret of its own:\n{handle}"
    );
    let parse = objdump_handle(&bin, "app::parse(int)").unwrap();
    assert_eq!(
        parse
            .lines()
            .filter(|l| l.contains("call") && l.contains("<app::tokenize(int)>"))
            .count(),
        2,
        "parse should call tokenize twice:\n{parse}"
    );
}

// ---------------------------------------------------------------------------
// tachy list --sites
// ---------------------------------------------------------------------------

/// (kind, location, name) of each site line of `tachy list --sites` output.
fn listed_sites(out: &Outcome) -> Vec<(String, String, String)> {
    let mut sites = Vec::new();
    let mut declared = None;
    for l in out.stdout.lines() {
        let t = l.trim_start();
        if let Some(n) = t
            .strip_suffix(" call sites:")
            .or_else(|| t.strip_suffix(" call site:"))
        {
            assert!(declared.is_none(), "two site lists:\n{out}");
            declared = Some(n.parse::<usize>().unwrap_or_else(|_| panic!("bad {l:?}")));
            continue;
        }
        if declared.is_some() && t.starts_with("0x") {
            let addr = t.split_whitespace().next().unwrap();
            assert!(u64::from_str_radix(&addr[2..], 16).is_ok(), "{l:?}");
            // The location and name are separated by two spaces.
            let rest = t[addr.len()..].trim_start();
            let (kind, rest) = rest.split_once(char::is_whitespace).unwrap();
            let (location, name) = rest
                .trim_start()
                .split_once("  ")
                .unwrap_or_else(|| panic!("{l:?}"));
            sites.push((
                kind.to_string(),
                location.to_string(),
                name.trim().to_string(),
            ));
        }
    }
    assert_eq!(
        declared,
        Some(sites.len()),
        "site count line vs site lines:\n{out}"
    );
    sites
}

fn list_sites(func: &str) -> Outcome {
    let bin = common::build(FIXTURE);
    let out = run_tachy(
        &[
            "list".into(),
            "--sites".into(),
            bin.to_str().unwrap().into(),
            func.into(),
        ],
        &[],
    );
    out.assert_success();
    out
}

#[test]
fn list_sites_of_handle() {
    let _guard = common::serial();
    let out = list_sites("app::handle");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.trim() == "app::handle(int)  (c++)"),
        "{out}"
    );
    let sites = listed_sites(&out);
    let specs = handle_sites(Expect { it: 1, th: 1 });
    for (kind, location, name) in &sites {
        let spec = specs
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("unexpected site {name:?} ({kind} at {location})\n{out}"));
        assert_eq!(kind, spec.kind, "kind of {name}\n{out}");
        match spec.line {
            Some(needle) => assert_eq!(*location, loc(needle), "location of {name}\n{out}"),
            None => assert!(
                in_handle(location),
                "{name} at {location}, not in handle\n{out}"
            ),
        }
    }
    for s in specs.iter().filter(|s| !s.optional) {
        assert_eq!(
            sites.iter().filter(|x| x.2 == s.name).count(),
            1,
            "expected one site {}\n{out}",
            s.name
        );
    }

    // parse's own sites: two direct calls of tokenize, on their lines.
    let out = list_sites("app::parse");
    let sites = listed_sites(&out);
    let tok: Vec<_> = sites
        .iter()
        .filter(|s| s.2 == "app::tokenize(int)")
        .collect();
    assert_eq!(tok.len(), 2, "{out}");
    assert_eq!(tok[0].0, "call", "{out}");
    assert_eq!(tok[1].0, "call", "{out}");
    let mut locs: Vec<&str> = tok.iter().map(|s| s.1.as_str()).collect();
    locs.sort();
    let mut want = vec![loc("int a = tokenize(x);"), loc("int b = tokenize(x + 1);")];
    want.sort();
    assert_eq!(locs, want, "{out}");
}

// ---------------------------------------------------------------------------
// tachy nested
// ---------------------------------------------------------------------------

#[test]
fn nested_json_depth1() {
    let _guard = common::needs_root!();
    let e = Expect { it: 20, th: 2 };
    let nsites = listed_sites(&list_sites("app::handle")).len();
    let out = run_nested(&["--json", "--max-overhead", "0"], e, &[]);
    out.assert_success();
    check_fixture_summary(&out.stderr, e, &out);
    let header = format!("Tracing {ROOT} and {nsites} call sites (1 level) ");
    assert!(
        out.stderr.lines().any(|l| l.starts_with(&header)),
        "no header {header:?}... on stderr\n{out}"
    );
    let rep = single_report(&out);
    let root = the_root(&rep);
    assert_eq!(num(root, "count"), e.n(), "{root:#}");
    assert_eq!(num(root, "filtered"), 0, "{root:#}");
    assert_eq!(num(root, "unwound"), 0, "{root:#}");
    check_sums(root, true);
    check_handle_sites(root, e, &[]);
    let total = num(root, "total_ns");
    let floor = e.n() * FAST_FLOOR_NS + e.slow() * SLOW_PATH_NS;
    assert!(
        total >= floor,
        "root total {total} < nominal {floor}: {root:#}"
    );
    assert!(
        total < e.n() * 20_000_000,
        "root total {total} >= 20ms per call: {root:#}"
    );
}

/// The depth-2 node of `parent` for call site `name` at `needle`'s line.
fn kid_at<'a>(parent: &'a Value, n: &str, needle: &str) -> &'a Value {
    let l = loc(needle);
    let hits: Vec<&Value> = kids_named(parent, n)
        .into_iter()
        .filter(|c| c["site"].as_str() == Some(l.as_str()))
        .collect();
    assert_eq!(hits.len(), 1, "expected one {n} at {l} under:\n{parent:#}");
    hits[0]
}

#[test]
fn nested_depth2() {
    let _guard = common::needs_root!();
    let e = Expect { it: 8, th: 2 };
    let out = run_nested(&["--json", "--max-overhead", "0", "--depth", "2"], e, &[]);
    out.assert_success();
    check_fixture_summary(&out.stderr, e, &out);
    assert!(
        out.stderr.contains(" call sites (2 levels) "),
        "header on stderr\n{out}"
    );
    let rep = single_report(&out);
    let root = the_root(&rep);
    assert_eq!(num(root, "count"), e.n(), "{root:#}");
    // Children within their parent: at the root here; at every level in
    // nested_depth2_children_within_parent.
    check_sums(root, false);
    // Direct calls and the tail call are broken down, and so are PLT
    // calls, into the library function the process maps.
    let expandable = [
        "app::parse(int)",
        "app::slow_path(int)",
        "app::risky(int)",
        "app::walk(int)",
        "app::finish(int)",
        "fixture_io@plt",
        "__cxa_begin_catch@plt",
        "__cxa_end_catch@plt",
        "_Unwind_Resume@plt",
    ];
    check_handle_sites(root, e, &expandable);
    // Nothing below level 2.
    for c in children(root) {
        for g in children(c) {
            assert!(children(g).is_empty(), "level 3 under depth 2: {g:#}");
        }
    }

    // parse: exactly 2 tokenize calls per parse call, one per site.
    let parse = kid(root, "app::parse(int)");
    let pc = num(parse, "count");
    assert_eq!(pc, e.n());
    let t1 = kid_at(parse, "app::tokenize(int)", "int a = tokenize(x);");
    let t2 = kid_at(parse, "app::tokenize(int)", "int b = tokenize(x + 1);");
    for t in [t1, t2] {
        assert_eq!(t["kind"], "call", "{t:#}");
        assert_eq!(
            num(t, "count"),
            pc,
            "one call per parse call at each site: {t:#}"
        );
        assert_eq!(num(t, "unwound"), 0, "{t:#}");
        assert!(num(t, "total_ns") >= 50 * US * pc, "tokenize floor: {t:#}");
        assert!(
            num(t, "total_ns") < (50 * US + AVG_SLACK_NS) * pc,
            "tokenize ceiling: {t:#}"
        );
    }
    let tok_calls: u64 = kids_named(parse, "app::tokenize(int)")
        .iter()
        .map(|t| num(t, "count"))
        .sum();
    assert_eq!(
        tok_calls,
        2 * pc,
        "tokenize calls per parse call: {parse:#}"
    );

    // walk: its recursive call site counts once per handle call, for the
    // outermost walk only (deeper levels run while that site's frame, not
    // the level-1 walk site, is the innermost one).
    let walk = kid(root, "app::walk(int)");
    let rec = kid_at(walk, "app::walk(int)", "int r = walk(depth - 1);");
    assert_eq!(rec["kind"], "call", "{rec:#}");
    assert_eq!(num(rec, "count"), e.n(), "{walk:#}");
    assert_eq!(num(rec, "unwound"), 0, "{walk:#}");

    // risky: its throw leaves __cxa_throw by exception, each time.
    let risky = kid(root, "app::risky(int)");
    let throw = kid(risky, "__cxa_throw@plt");
    assert_eq!(num(throw, "count"), 0, "{risky:#}");
    assert_eq!(num(throw, "unwound"), e.throws(), "{risky:#}");

    // slow_path: its own sleep dominates it.
    let slow = kid(root, "app::slow_path(int)");
    let sleep = kid(slow, "nanosleep@plt");
    assert!(num(sleep, "count") >= e.slow(), "{slow:#}");
    assert!(
        num(sleep, "total_ns") >= e.slow() * SLOW_PATH_NS,
        "{slow:#}"
    );

    // fixture_io, reached through the PLT, is broken down in libfixture.so:
    // its nanosleep call, at fixture_io's line in libfixture.c that calls
    // sleep_us (inlined there), then the nanosleep line inside sleep_us.
    let io = kid(root, "fixture_io@plt");
    let lib_src = std::fs::read_to_string(common::fixtures_src_dir().join("libfixture.c")).unwrap();
    let lib_line = |needle: &str| {
        lib_src
            .lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} in libfixture.c"))
            + 1
    };
    let sleep = kid(io, "nanosleep@plt");
    let site = sleep["site"].as_str().unwrap_or("");
    let (call, inner) = (
        lib_line("sleep_us(300);"),
        lib_line("while (nanosleep(&ts, &ts) == -1"),
    );
    assert!(
        site == format!("libfixture.c:{inner}")
            || site == format!("libfixture.c:{call} (inlined from libfixture.c:{inner})"),
        "{io:#}"
    );
    assert_eq!(sleep["kind"], "plt", "{io:#}");
    assert_eq!(
        num(sleep, "count"),
        e.n(),
        "one nanosleep per fixture_io call: {io:#}"
    );
    assert!(num(sleep, "total_ns") >= e.n() * 300 * US, "{io:#}");
}

/// At every level, a node's children add up to at most its own time (the
/// flame graph and folded stacks rely on it), also below a call site that
/// is sometimes left by exception (app::risky(int), whose sites before the
/// throw complete).
#[test]
fn nested_depth2_children_within_parent() {
    let _guard = common::needs_root!();
    let e = Expect { it: 8, th: 2 };
    let out = run_nested(&["--json", "--depth", "2"], e, &[]);
    out.assert_success();
    check_fixture_summary(&out.stderr, e, &out);
    let rep = single_report(&out);
    check_sums(the_root(&rep), true);
}

/// (name, site, kind, count, unwound) of each child of `node`, sorted.
fn shape(node: &Value) -> Vec<(String, String, String, u64, u64)> {
    let mut v: Vec<_> = children(node)
        .iter()
        .map(|c| {
            (
                name(c).to_string(),
                c["site"].as_str().unwrap_or("").to_string(),
                c["kind"].as_str().unwrap_or("").to_string(),
                num(c, "count"),
                num(c, "unwound"),
            )
        })
        .collect();
    v.sort();
    v
}

/// `--expand app::parse` at depth 1 breaks down parse exactly as depth 2
/// does, and nothing else.
#[test]
fn nested_expand_parse() {
    let _guard = common::needs_root!();
    let e = Expect { it: 8, th: 2 };
    let out = run_nested(
        &["--json", "--max-overhead", "0", "--expand", "app::parse"],
        e,
        &[],
    );
    out.assert_success();
    check_fixture_summary(&out.stderr, e, &out);
    let rep = single_report(&out);
    let root = the_root(&rep);
    assert_eq!(num(root, "count"), e.n(), "{root:#}");
    check_sums(root, true);
    check_handle_sites(root, e, &["app::parse(int)"]);
    let parse = kid(root, "app::parse(int)");
    assert!(!children(parse).is_empty(), "parse not expanded: {parse:#}");
    for c in children(parse) {
        assert!(children(c).is_empty(), "expanded below parse: {c:#}");
    }

    let out2 = run_nested(&["--json", "--max-overhead", "0", "--depth", "2"], e, &[]);
    out2.assert_success();
    let rep2 = single_report(&out2);
    let parse2 = kid(the_root(&rep2), "app::parse(int)");
    assert_eq!(
        shape(parse),
        shape(parse2),
        "parse under --expand vs --depth 2:\n{parse:#}\n{parse2:#}"
    );
}

/// How many attempts the filter tests make to get an unambiguous run.
const ATTEMPTS: usize = 8;
/// Probe overhead allowed between the fixture's clock reads around a
/// handle() call and tachy's timestamps at its entry and return.
const BAND_NS: u64 = 2000 * US;

/// Which calls of app::handle a filtered run keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Filter {
    /// `--slower-than 10ms`
    Slower,
    /// `--faster-than 10ms`
    Faster,
}

/// The `i` of each handle(i) call tachy must keep under `filter`, from the
/// fixture's own timings; None when a call is too close to the threshold to
/// tell. The fixture's window brackets tachy's (same clock), so a call the
/// fixture measured under 10ms took under 10ms for tachy too; one it
/// measured at 10ms + BAND_NS or more took at least 10ms for tachy (unless
/// the machine stalled between the two clocks for longer than BAND_NS). A
/// call with the slow path takes at least 20ms for both.
fn kept_calls(took: &[(u64, u64)], filter: Filter) -> Option<Vec<u64>> {
    let mut kept = Vec::new();
    for &(i, ns) in took {
        let slow = if i % 4 == 0 {
            assert!(
                ns >= SLOW_PATH_NS,
                "handle({i}) took {ns} ns < the slow path"
            );
            true
        } else if ns < SLOWER_THAN_NS {
            false
        } else if ns >= SLOWER_THAN_NS + BAND_NS {
            true
        } else {
            return None;
        };
        if slow == (filter == Filter::Slower) {
            kept.push(i);
        }
    }
    Some(kept)
}

/// The classification the filter tests rely on (no tracing).
#[test]
fn kept_calls_from_fixture_timings() {
    let _guard = common::serial();
    let ms = |x: f64| (x * 1e6) as u64;
    let quiet = [
        (0, ms(25.0)),
        (1, ms(1.1)),
        (2, ms(0.9)),
        (3, ms(9.9)),
        (4, ms(22.0)),
        (5, ms(1.2)),
    ];
    assert_eq!(kept_calls(&quiet, Filter::Slower), Some(vec![0, 4]));
    assert_eq!(kept_calls(&quiet, Filter::Faster), Some(vec![1, 2, 3, 5]));
    // i = 2 slowed well past the threshold: kept by --slower-than only.
    let noisy = [
        (0, ms(25.0)),
        (1, ms(1.1)),
        (2, ms(13.0)),
        (3, ms(1.0)),
        (4, ms(22.0)),
    ];
    assert_eq!(kept_calls(&noisy, Filter::Slower), Some(vec![0, 2, 4]));
    assert_eq!(kept_calls(&noisy, Filter::Faster), Some(vec![1, 3]));
    // i = 3 within the band above the threshold: cannot tell.
    let close = [(0, ms(25.0)), (3, SLOWER_THAN_NS + BAND_NS / 2)];
    assert_eq!(kept_calls(&close, Filter::Slower), None);
    assert_eq!(kept_calls(&close, Filter::Faster), None);
}

/// One run with `--slower-than 10ms` or `--faster-than 10ms` on
/// SLOWER_E: (outcome, report root, the calls tachy must have kept, or None
/// when the run is ambiguous). Checks what holds whatever the machine's
/// noise, and, when the kept calls are known, the exact count of every
/// site of app::handle under them.
fn filter_run(filter: Filter) -> (Outcome, Value, Option<Vec<u64>>) {
    let e = SLOWER_E;
    let flag = match filter {
        Filter::Slower => "--slower-than",
        Filter::Faster => "--faster-than",
    };
    let out = run_nested(
        &["--json", "--hist", flag, SLOWER_THAN],
        e,
        &[("FIXTURE_TIMINGS", "1")],
    );
    out.assert_success();
    check_fixture_summary(&out.stderr, e, &out);
    let took = timings(&out.stderr);
    assert_eq!(took.len() as u64, e.n(), "{out}");
    let rep = single_report(&out);
    let root = the_root(&rep).clone();
    check_sums(&root, true);
    check_hists(&root);
    let count = num(&root, "count");
    assert_eq!(
        count + num(&root, "filtered"),
        e.n(),
        "count + filtered: {root:#}\n{out}"
    );
    assert_eq!(num(&root, "unwound"), 0, "{root:#}");
    // Exact whatever the noise: every call with the slow path is kept with
    // --slower-than and filtered out with --faster-than.
    let slow = kid(&root, "app::slow_path(int)");
    let want_slow = match filter {
        Filter::Slower => e.slow(),
        Filter::Faster => 0,
    };
    assert_eq!(
        num(slow, "count"),
        want_slow,
        "slow_path site: {root:#}\n{out}"
    );
    assert_eq!(num(slow, "unwound"), 0, "slow_path site: {root:#}");
    assert!(
        num(slow, "total_ns") >= want_slow * SLOW_PATH_NS,
        "{root:#}"
    );
    // Sites taken once per call count once per kept call.
    for n in [
        "app::parse(int)",
        "fixture_io@plt",
        "*indirect",
        "app::walk(int)",
        "app::finish(int)",
    ] {
        assert_eq!(
            num(kid(&root, n), "count"),
            count,
            "{n} under kept calls: {root:#}\n{out}"
        );
    }

    let Some(kept) = kept_calls(&took, filter) else {
        eprintln!("note: a call took within {BAND_NS} ns above {SLOWER_THAN}; retrying. {took:?}");
        return (out, root, None);
    };
    let k = kept.len() as u64;
    let threw = kept.iter().filter(|i| *i % 5 == 0).count() as u64;
    let noisy = took
        .iter()
        .filter(|(i, ns)| i % 4 != 0 && *ns >= SLOWER_THAN_NS)
        .count();
    if noisy > 0 {
        eprintln!(
            "note: {noisy} call(s) without the slow path took >= {SLOWER_THAN} by the fixture's \
             own clock; kept calls: {kept:?}; timings: {took:?}"
        );
    }
    let ctx = format!("kept calls by the fixture's timings: i = {kept:?}\n{out}");
    assert_eq!(count, k, "root count: {root:#}\n{ctx}");
    assert_eq!(
        num(&root, "filtered"),
        e.n() - k,
        "root filtered: {root:#}\n{ctx}"
    );
    assert_eq!(
        num(slow, "count"),
        kept.iter().filter(|i| *i % 4 == 0).count() as u64,
        "slow_path under kept calls: {root:#}\n{ctx}"
    );
    let risky = kid(&root, "app::risky(int)");
    assert_eq!(
        num(risky, "count"),
        k - threw,
        "risky returned under kept calls: {root:#}\n{ctx}"
    );
    for n in ["__cxa_begin_catch@plt", "__cxa_end_catch@plt"] {
        assert_eq!(
            num(kid(&root, n), "count"),
            threw,
            "{n}: exceptions caught under kept calls: {root:#}\n{ctx}"
        );
    }
    let floor: u64 = kept
        .iter()
        .map(|i| FAST_FLOOR_NS + if i % 4 == 0 { SLOW_PATH_NS } else { 0 })
        .sum();
    let total = num(&root, "total_ns");
    assert!(
        total >= floor,
        "root total {total} < nominal {floor}: {root:#}\n{ctx}"
    );
    let kept_took: u64 = took
        .iter()
        .filter(|(i, _)| kept.contains(i))
        .map(|(_, ns)| ns)
        .sum();
    assert!(
        total <= kept_took,
        "root total {total} > {kept_took}, the fixture's own time for the kept calls: {root:#}\n{ctx}"
    );
    (out, root, Some(kept))
}

/// Every site's histogram (--hist) holds exactly its counted calls: those
/// under the kept root calls.
fn check_hists(node: &Value) {
    for c in children(node) {
        let buckets = c["log2_buckets"]
            .as_array()
            .unwrap_or_else(|| panic!("no log2_buckets in {c:#}"));
        let sum: u64 = buckets.iter().map(|b| b.as_u64().unwrap()).sum();
        assert_eq!(
            sum,
            num(c, "count"),
            "{}: histogram vs count: {node:#}",
            name(c)
        );
        check_hists(c);
    }
}

/// I = 8 on one thread: i = 0 and 4 take the slow path, i = 0 and 5 throw.
const SLOWER_E: Expect = Expect { it: 8, th: 1 };

/// `--slower-than 10ms` keeps exactly the calls that took the slow path
/// (i % 4 == 0), plus any other call the machine slowed past 10ms by the
/// fixture's own clock (none on a quiet machine); the breakdown covers
/// those calls only.
#[test]
fn nested_slower_than() {
    let _guard = common::needs_root!();
    for _ in 1..=ATTEMPTS {
        let (_, root, kept) = filter_run(Filter::Slower);
        let Some(kept) = kept else { continue };
        if kept.iter().all(|i| i % 4 == 0) {
            // The quiet case, literally: kept == the i % 4 == 0 calls.
            assert_eq!(num(&root, "count"), SLOWER_E.slow(), "{root:#}");
            assert_eq!(
                num(kid(&root, "app::slow_path(int)"), "count"),
                num(&root, "count"),
                "every kept call took the slow path: {root:#}"
            );
        }
        return;
    }
    panic!("in {ATTEMPTS} attempts, every run had a call within {BAND_NS} ns above {SLOWER_THAN}");
}

/// `--faster-than 10ms` keeps exactly the calls without the slow path
/// (less any the machine slowed past 10ms).
#[test]
fn nested_faster_than() {
    let _guard = common::needs_root!();
    for _ in 1..=ATTEMPTS {
        let (_, root, kept) = filter_run(Filter::Faster);
        let Some(kept) = kept else { continue };
        assert!(
            num(&root, "total_ns") <= kept.len() as u64 * SLOWER_THAN_NS,
            "kept calls add up to more than 10ms each: {root:#}"
        );
        return;
    }
    panic!("in {ATTEMPTS} attempts, every run had a call within {BAND_NS} ns above {SLOWER_THAN}");
}

/// Calls left by exception count only under kept root calls, as completed
/// ones do: with --slower-than, of the calls that throw (i = 0 and 5) only
/// the kept ones count (on a quiet machine i = 0 alone; i = 5 is filtered
/// out).
#[test]
fn nested_slower_than_unwound_follows_filter() {
    let _guard = common::needs_root!();
    for _ in 1..=ATTEMPTS {
        let (out, root, kept) = filter_run(Filter::Slower);
        let Some(kept) = kept else { continue };
        let threw = kept.iter().filter(|i| *i % 5 == 0).count() as u64;
        let risky = kid(&root, "app::risky(int)");
        assert_eq!(
            num(risky, "unwound"),
            threw,
            "risky left by exception under the kept calls i = {kept:?} ({threw} of them throw; \
             {} calls throw in all): {risky:#}\n{out}",
            SLOWER_E.throws()
        );
        return;
    }
    panic!("in {ATTEMPTS} attempts, every run had a call within {BAND_NS} ns above {SLOWER_THAN}");
}

#[test]
fn nested_folded() {
    let _guard = common::needs_root!();
    let e = Expect { it: 8, th: 1 };
    let out = run_nested(&["--folded"], e, &[]);
    out.assert_success();
    check_fixture_summary(&out.stderr, e, &out);
    let fixture_line = |l: &str| {
        l == "done"
            || l.starts_with("ready ")
            || l.starts_with("count ")
            || l.starts_with("exceptions ")
    };
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| !l.is_empty() && !fixture_line(l))
        .collect();
    assert!(!lines.is_empty(), "no folded lines\n{out}");
    let mut weights: BTreeMap<String, u64> = BTreeMap::new();
    for l in &lines {
        let (stack, w) = l
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("folded line {l:?} is not `stack weight`\n{out}"));
        let w: u64 = w
            .parse()
            .unwrap_or_else(|_| panic!("weight of {l:?} is not an integer\n{out}"));
        assert!(w > 0, "zero weight in {l:?}\n{out}");
        let frames: Vec<&str> = stack.split(';').collect();
        assert_eq!(frames[0], ROOT, "first frame of {l:?}\n{out}");
        assert!(frames.len() <= 2, "deeper than 1 level: {l:?}\n{out}");
        for f in &frames[1..] {
            let (n, site) = f
                .rsplit_once(" [")
                .unwrap_or_else(|| panic!("frame {f:?} is not `name [file:line]`\n{out}"));
            assert!(!n.is_empty(), "{l:?}");
            let site = site.strip_suffix(']').expect("]");
            assert!(
                in_handle(site),
                "frame {f:?} of {l:?}: site not in handle\n{out}"
            );
        }
        assert!(
            weights.insert(stack.to_string(), w).is_none(),
            "stack {stack:?} twice\n{out}"
        );
    }
    let slow = format!(
        "{ROOT};app::slow_path(int) [{}]",
        loc("if (i % 4 == 0) acc += slow_path(i);")
    );
    let io = format!("{ROOT};fixture_io@plt [{}]", loc("acc += fixture_io(i);"));
    let w_slow = *weights
        .get(&slow)
        .unwrap_or_else(|| panic!("no {slow:?} line\n{out}"));
    assert!(
        w_slow >= e.slow() * SLOW_PATH_NS,
        "{slow} weighs {w_slow}\n{out}"
    );
    let w_io = *weights
        .get(&io)
        .unwrap_or_else(|| panic!("no {io:?} line\n{out}"));
    assert!(w_io >= e.n() * 300 * US, "{io} weighs {w_io}\n{out}");
    assert!(
        weights.contains_key(ROOT),
        "no line for the root's self time\n{out}"
    );
    // Self weights add up to the root's total time.
    let sum: u64 = weights.values().sum();
    let floor = e.n() * FAST_FLOOR_NS + e.slow() * SLOW_PATH_NS;
    assert!(
        sum >= floor,
        "weights add up to {sum} < nominal {floor}\n{out}"
    );
}

fn svg_path() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nested-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("handle-{}.svg", std::process::id()))
}

#[test]
fn nested_svg() {
    let _guard = common::needs_root!();
    let e = Expect { it: 4, th: 1 };
    let path = svg_path();
    let _ = std::fs::remove_file(&path);
    let out = run_nested(&["--svg", path.to_str().unwrap()], e, &[]);
    out.assert_success();
    check_fixture_summary(&out.stdout, e, &out);
    let svg = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("no SVG at {}: {err}\n{out}", path.display()));
    let _ = std::fs::remove_file(&path);
    assert!(
        svg.starts_with("<?xml") || svg.starts_with("<svg"),
        "not an SVG: {:?}",
        &svg[..svg.len().min(200)]
    );
    assert!(svg.contains("<svg"), "no <svg> element");
    assert!(svg.contains(ROOT), "root name missing from the SVG");
    assert!(
        svg.contains("app::slow_path(int)"),
        "slow_path missing from the SVG"
    );
    assert!(
        out.stderr
            .contains(&format!("flame graph written to {}", path.display())),
        "{out}"
    );
    assert!(!out.stdout.lines().any(|l| l.starts_with('{')), "{out}");
}

#[test]
fn nested_text() {
    let _guard = common::needs_root!();
    let e = Expect { it: 8, th: 2 };
    let listed = listed_sites(&list_sites("app::handle"));
    let out = run_nested(&[], e, &[]);
    out.assert_success();
    check_fixture_summary(&out.stdout, e, &out);
    let lines: Vec<&str> = out.stdout.lines().collect();

    let header = format!("Tracing {ROOT} and {} call sites (1 level) ", listed.len());
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&header) && l.ends_with(". Hit Ctrl-C to end.")),
        "no header {header:?}...\n{out}"
    );
    let root_idx = lines
        .iter()
        .position(|l| l.starts_with(&format!("{ROOT}  calls {}", e.n())))
        .unwrap_or_else(|| panic!("no root line `{ROOT}  calls {}`\n{out}", e.n()));
    let root_line = lines[root_idx];
    assert!(
        root_line.contains("  avg ") && root_line.contains("  total "),
        "{root_line:?}"
    );
    assert!(
        !root_line.contains(" of "),
        "nothing filtered: {root_line:?}"
    );
    // A root whose reading is mostly probe time says so in a line after
    // the probe time's: not a site.
    let below: Vec<&str> = lines[root_idx + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("  the probes' own time is "))
        .copied()
        .collect();
    // The call through g_store_fn: its callee under it, every call.
    let callees: Vec<&str> = below
        .iter()
        .filter(|l| l.trim_start().starts_with("-> callees:"))
        .map(|l| l.trim())
        .collect();
    assert_eq!(
        callees,
        [format!("-> callees: app::store(int) {}", e.n())],
        "{out}"
    );
    let tree: Vec<&str> = below
        .into_iter()
        .filter(|l| !l.trim_start().starts_with("-> callees:"))
        .collect();
    assert!(
        tree.first()
            .is_some_and(|l| l.trim_start().starts_with("self ")),
        "first line under the root is not `self`\n{out}"
    );
    // The exceptions are caught in handle: its call to _Unwind_Resume (at
    // the end of a cleanup that passes them on) never runs, and is hidden.
    let never_ran = "_Unwind_Resume@plt";
    assert_eq!(
        listed.iter().filter(|(_, _, n)| n == never_ran).count(),
        1,
        "{listed:?}"
    );
    assert_eq!(
        tree.len(),
        1 + (listed.len() - 1) + 2,
        "self, one line per site that ran, one for the site hidden and one for the probe time\n{out}"
    );
    assert_eq!(
        tree[tree.len() - 2],
        "  (1 call site that never ran is hidden: --all-sites shows them)",
        "{out}"
    );
    assert!(
        tree[tree.len() - 1].starts_with("  probe time subtracted from each call: ~"),
        "{out}"
    );
    for (kind, location, name) in &listed {
        let label = format!("{location}  {name}");
        let hits: Vec<&&str> = tree.iter().filter(|l| l.contains(&label)).collect();
        if name == never_ran {
            assert!(hits.is_empty(), "{label:?} never ran, yet is shown\n{out}");
            continue;
        }
        assert_eq!(hits.len(), 1, "expected one line with {label:?}\n{out}");
        let l = hits[0];
        assert_eq!(kind == "tail", l.contains(" (tail)"), "tail mark of {l:?}");
        assert!(l.contains(" per call"), "{l:?}");
        assert!(
            l.trim_end().ends_with('%') || l.contains("left by exception"),
            "{l:?}"
        );
    }
    let line_for = |n: &str| -> &str {
        tree.iter()
            .find(|l| l.contains(&format!("  {n}")))
            .unwrap_or_else(|| panic!("no line for {n}\n{out}"))
    };
    assert!(
        line_for("app::parse(int)").contains("1.00 per call"),
        "{out}"
    );
    assert!(
        line_for("app::slow_path(int)").contains("0.25 per call"),
        "{out}"
    );
    // 8 calls per thread: i = 0 and 5 throw. Calls per call count every
    // call of the site, including the 2 of 8 that leave by exception.
    let risky = line_for("app::risky(int)");
    assert!(risky.contains("1.00 per call"), "{risky:?}");
    assert!(
        risky.contains(&format!("({} left by exception)", e.throws())),
        "{risky:?}"
    );
}

// ---------------------------------------------------------------------------
// Plain C (tests/fixtures/calls.c): functions written in assembly
// ---------------------------------------------------------------------------

/// `tachy nested OPTS... FUNC -- FIXTURE ITERATIONS` on a `calls` build,
/// with FIXTURE_NO_WAIT=1.
fn run_calls(fixture: &str, opts: &[&str], func: &str, iterations: u64) -> Outcome {
    let exe = common::build(fixture);
    let mut args: Vec<String> = vec!["nested".into()];
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push(func.into());
    args.push("--".into());
    args.push(exe.to_str().unwrap().into());
    args.push(iterations.to_string());
    run_tachy(&args, &[("FIXTURE_NO_WAIT", "1")])
}

/// The exit line of `--dry-run`'s plan for the one traced function.
fn planned_exit(fixture: &str, func: &str) -> String {
    let out = run_calls(fixture, &["--dry-run", "-v"], func, 1);
    out.assert_success();
    let probes = out.stdout.lines().chain(out.stderr.lines());
    let kinds: Vec<&str> = probes
        .filter_map(|l| l.split_whitespace().next())
        .filter(|k| *k == "exit" || *k == "uretprobe")
        .collect();
    assert!(!kinds.is_empty(), "no exit probe planned\n{out}");
    kinds[0].to_string()
}

/// work4 calls leaf 4 times without moving SP: its call sites open at the
/// SP its own frame is keyed by. Timed by a uretprobe (it calls only code
/// of its own, in `calls`) and by probes on its `ret` (`calls_unwind`,
/// where it has an unreached call to `pthread_exit`), every call
/// completes and none is taken for abandoned. The budget is off: leaf
/// does next to nothing, and on a loaded machine the default budget samples
/// its site (its count scaled, not exact).
#[test]
fn nested_plain_c_frameless_caller_every_exit_kind() {
    let _guard = common::needs_root!();
    for (fixture, exit) in [("calls", "uretprobe"), ("calls_unwind", "exit")] {
        assert_eq!(planned_exit(fixture, "work4"), exit, "{fixture}");
        let n = 200;
        let out = run_calls(fixture, &["--json", "--max-overhead", "0"], "work4", n);
        out.assert_success();
        assert_eq!(counts(&out.stderr).get("work4").copied(), Some(n), "{out}");
        let rep = single_report(&out);
        let root = &rep["roots"][0];
        assert_eq!(name(root), "work4", "{root:#}");
        assert_eq!(num(root, "count"), n, "{fixture}: {root:#}");
        assert_eq!(num(root, "unwound"), 0, "{fixture}: {root:#}");
        let leaf = kid(root, "leaf");
        assert_eq!(num(leaf, "count"), 4 * n, "{fixture}: {leaf:#}");
        assert_eq!(num(leaf, "unwound"), 0, "{fixture}: {leaf:#}");
        check_sums(root, true);
    }
}

/// pair calls helper from two call sites; at depth 2 helper's call site is
/// a node under each, probed once: each node counts the calls made under
/// its parent, and no call is taken for abandoned.
#[test]
fn nested_function_under_two_parents_is_probed_once() {
    let _guard = common::needs_root!();
    for fixture in ["calls", "calls_unwind"] {
        let dry = run_calls(fixture, &["--dry-run", "--depth", "2"], "pair", 1);
        dry.assert_success();
        let mut seen = BTreeMap::new();
        for l in dry.stdout.lines().chain(dry.stderr.lines()) {
            let Some(kind) = ["site end ", "site "]
                .into_iter()
                .find(|k| l.trim_start().starts_with(k))
            else {
                continue;
            };
            let addr = l
                .split_whitespace()
                .find(|w| w.starts_with("(0x"))
                .unwrap_or("")
                .to_string();
            *seen.entry((kind, addr)).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), 6, "3 sites and 3 ends\n{dry}");
        assert!(
            seen.values().all(|&c| c == 1),
            "an address probed twice: {seen:?}\n{dry}"
        );
        let n = 200;
        let out = run_calls(fixture, &["--json", "--depth", "2"], "pair", n);
        out.assert_success();
        let rep = single_report(&out);
        let root = &rep["roots"][0];
        assert_eq!(num(root, "count"), n, "{fixture}: {root:#}");
        assert_eq!(num(root, "unwound"), 0, "{fixture}: {root:#}");
        let helpers = kids_named(root, "helper");
        assert_eq!(helpers.len(), 2, "{root:#}");
        for h in helpers {
            assert_eq!(num(h, "count"), n, "{fixture}: {h:#}");
            assert_eq!(num(h, "unwound"), 0, "{fixture}: {h:#}");
            let leaf = kid(h, "leaf");
            assert_eq!(num(leaf, "count"), n, "{fixture}: {leaf:#}");
            assert_eq!(num(leaf, "unwound"), 0, "{fixture}: {leaf:#}");
        }
        check_sums(root, true);
    }
}

// ---------------------------------------------------------------------------
// Sites in code inlined from headers (examples/demo.cpp)
// ---------------------------------------------------------------------------

/// The demo program (examples/demo.cpp) built as `make demo` builds it,
/// once per test binary: kv::Store::read calls nanosleep inside
/// std::this_thread::sleep_for, inlined from libstdc++'s headers.
fn demo_exe() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nested-demo");
            std::fs::create_dir_all(&dir).unwrap();
            let exe = dir.join("kvdemo");
            let st = Command::new("g++")
                .args(["-O2", "-g", "-pthread", "-o"])
                .arg(&exe)
                .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo.cpp"))
                .status()
                .unwrap();
            assert!(st.success(), "g++ examples/demo.cpp failed");
            exe
        })
        .clone()
}

/// Whether `loc` is `demo.cpp:LINE (inlined from this_thread_sleep.h:N)`.
fn is_sleep_for_site(loc: &str, line: usize) -> bool {
    loc.strip_prefix(&format!(
        "demo.cpp:{line} (inlined from this_thread_sleep.h:"
    ))
    .and_then(|r| r.strip_suffix(')'))
    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A call site inside code inlined from a header is placed at the line of
/// the traced function that holds it (`demo.cpp:22`, where read() calls
/// sleep_for), with the inline chain after it, in `list --sites`, in the
/// nested tree's JSON and in its text, whose columns stay aligned.
#[test]
fn sites_inlined_from_headers_are_placed_in_the_traced_function() {
    let _guard = common::serial();
    let exe = demo_exe();
    let exe_s = exe.to_str().unwrap().to_string();
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo.cpp")).unwrap();
    let line_of = |needle: &str| src.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let (sleep_line, first, last) = (
        line_of("std::this_thread::sleep_for(wait);"),
        line_of("std::string read(int key)"),
        line_of("return \"value-\" + std::to_string(key);") + 1,
    );
    let out = run_tachy(
        &[
            "list".into(),
            "--sites".into(),
            exe_s.clone(),
            "kv::Store::read".into(),
        ],
        &[],
    );
    out.assert_success();
    let sites = listed_sites(&out);
    let sleep: Vec<&(String, String, String)> =
        sites.iter().filter(|s| s.2 == "nanosleep@plt").collect();
    assert_eq!(sleep.len(), 1, "{out}");
    assert!(is_sleep_for_site(&sleep[0].1, sleep_line), "{out}");
    // Every site, inlined or not, is at a line of read() itself.
    for (_, loc, name) in &sites {
        let line: usize = loc
            .strip_prefix("demo.cpp:")
            .and_then(|r| r.split(' ').next())
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| panic!("{name} at {loc}, not at a line of demo.cpp\n{out}"));
        assert!(
            line > first && line < last,
            "{name} at {loc}, not in read()\n{out}"
        );
    }

    if common::skip_unless_root() {
        return;
    }
    let nested = |opts: &[&str]| {
        let mut args: Vec<String> = vec!["nested".into()];
        args.extend(opts.iter().map(|s| s.to_string()));
        args.extend([
            "kv::Store::read".into(),
            "--".into(),
            exe_s.clone(),
            "20".into(),
        ]);
        let out = run_tachy(&args, &[]);
        out.assert_success();
        out
    };
    let out = nested(&["--json"]);
    let rep = single_report(&out);
    let root = &rep["roots"][0];
    let sleep = kid(root, "nanosleep@plt");
    assert!(
        is_sleep_for_site(sleep["site"].as_str().unwrap_or(""), sleep_line),
        "{sleep:#}"
    );
    assert_eq!(num(sleep, "count"), 40, "{sleep:#}");

    let out = nested(&["--all-sites"]);
    let rows: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains(" per call "))
        .collect();
    // Every call site is a row, but those inside an inlined instance
    // (itself a row), which are its sites at the next level.
    let instances = rows.iter().filter(|l| l.contains(" [inlined] ")).count();
    assert!(instances > 0, "{out}");
    assert!(rows.len() - instances <= sites.len(), "{out}");
    let row = rows
        .iter()
        .find(|l| l.contains("  nanosleep@plt  "))
        .unwrap_or_else(|| panic!("no nanosleep@plt row\n{out}"));
    let label = row.trim_start().split("  nanosleep@plt").next().unwrap();
    assert!(is_sleep_for_site(label, sleep_line), "{row}\n{out}");
    assert!(row.contains(" 1.00 per call  avg "), "{row}\n{out}");
    // One column for every row, the self line's too, within the width.
    let cols: Vec<usize> = out
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("self ") || l.contains(" per call "))
        .map(|l| l[..l.find("  avg ").unwrap()].chars().count())
        .collect();
    assert!(cols.windows(2).all(|w| w[0] == w[1]), "{out}");
    assert!(cols[0] <= 2 + 90 + 2 + 15, "{out}");
}
