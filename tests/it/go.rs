//! Go programs: names as Go prints them (from `.symtab`, and from
//! `.gopclntab` in a stripped build), and, as root, exact counts and true
//! durations with goroutines that grow their stacks, panic, and move
//! between threads. The fixture is `tests/fixtures/gowork.go`, built with
//! the Go toolchain at test time; without `go` these tests skip, saying so.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

/// Runs `tachy ARGS` to its end (a `list` or a `-- CMD` run).
fn tachy(args: &[&str]) -> Output {
    Command::new(common::tachy())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("cannot start tachy")
}

fn text(args: &[&str], out: &Output) -> String {
    format!(
        "command: tachy {}\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `tachy list PATH PATTERN`: (name, address) of each function listed,
/// with the object's header line; asserts success and the `(go)` tag.
fn list(path: &str, pattern: &str) -> (String, Vec<(String, u64)>) {
    let args = ["list", path, pattern];
    let out = tachy(&args);
    let all = text(&args, &out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = stdout.lines();
    let header = lines.next().unwrap_or_default().to_string();
    let mut funcs = Vec::new();
    let mut name = None;
    for line in lines {
        if let Some(n) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) {
            let n = n
                .strip_suffix("  (go)")
                .unwrap_or_else(|| panic!("{line:?} is not a Go function\n{all}"));
            name = Some(n.to_string());
        } else if let Some(rest) = line.strip_prefix("    address 0x") {
            let hex = rest.split(' ').next().unwrap_or_default();
            let addr = u64::from_str_radix(hex, 16).unwrap();
            funcs.push((name.take().expect("address line after a name"), addr));
        }
    }
    (header, funcs)
}

fn names(funcs: &[(String, u64)]) -> Vec<&str> {
    funcs.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn lists_go_names_as_go_prints_them() {
    let _guard = common::serial();
    if common::skip_without_go() {
        return;
    }
    let bin = common::build("gowork");
    let path = bin.to_str().unwrap();
    let (header, f) = list(path, "main.(*Server).handle");
    assert!(header.contains("(symbols from .symtab"), "{header}");
    assert!(header.contains("Go go1."), "{header}");
    assert_eq!(names(&f), ["main.(*Server).handle"]);
    // Methods by receiver glob; a bare selector; a package path.
    assert_eq!(
        names(&list(path, "main.(*Server).*").1),
        ["main.(*Server).handle"]
    );
    assert_eq!(names(&list(path, "handle").1), ["main.(*Server).handle"]);
    // Every instance of a generic function, by its name, as Go prints it,
    // or one by its shape.
    let instances = ["main.Map[go.shape.int_0]", "main.Map[go.shape.string_0]"];
    for p in ["main.Map", "main.Map[...]", "Map"] {
        let mut got = names(&list(path, p).1)
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        got.sort();
        assert_eq!(got, instances, "{p}");
    }
    assert_eq!(
        names(&list(path, "main.Map[go.shape.int_0]").1),
        ["main.Map[go.shape.int_0]"]
    );
    // Closures, by glob too.
    let mut closures: Vec<String> = names(&list(path, "main.runGeneric.func*").1)
        .into_iter()
        .map(String::from)
        .collect();
    closures.sort();
    assert_eq!(closures, ["main.runGeneric.func1", "main.runGeneric.func2"]);
    // `main.*` is package main only, not runtime.main's closures.
    let all_main = list(path, "main.*").1;
    assert!(all_main.len() >= 20, "{all_main:?}");
    assert!(all_main.iter().all(|(n, _)| n.starts_with("main.")));
}

#[test]
fn a_stripped_build_is_named_from_its_function_table() {
    let _guard = common::serial();
    if common::skip_without_go() {
        return;
    }
    let full = common::build("gowork");
    let stripped = common::build("gowork_stripped");
    let out = Command::new("readelf")
        .arg("-S")
        .arg(&stripped)
        .output()
        .expect("readelf");
    let sections = String::from_utf8_lossy(&out.stdout);
    assert!(!sections.contains(".symtab"), "{sections}");
    let (header, s) = list(stripped.to_str().unwrap(), "main.*");
    assert!(header.contains("(symbols from .gopclntab"), "{header}");
    let (_, f) = list(full.to_str().unwrap(), "main.*");
    // The same functions at the same addresses; Go 1.19 keeps the printed
    // name of generic instances in its table.
    let printed = |n: &str| {
        n.replace("[go.shape.int_0]", "[...]")
            .replace("[go.shape.string_0]", "[...]")
    };
    let by_addr = |v: &[(String, u64)], p: bool| -> BTreeMap<u64, String> {
        v.iter()
            .map(|(n, a)| (*a, if p { printed(n) } else { n.clone() }))
            .collect()
    };
    assert_eq!(by_addr(&s, false), by_addr(&f, true));
    assert_eq!(
        names(&list(stripped.to_str().unwrap(), "main.(*Server).handle").1),
        ["main.(*Server).handle"]
    );
}

/// Where runtime.g keeps its stack bounds and goid: from DWARF when the
/// binary has it, else the layout of the Go version that built it; `list`
/// (as `-v` and `--dry-run`) says which, with the exit plan.
#[test]
fn the_goroutine_layout_comes_from_dwarf() {
    let _guard = common::serial();
    if common::skip_without_go() {
        return;
    }
    for (fixture, expected) in [
        (
            "gowork",
            "runtime.g: stack.hi at +8, goid at +152, from DWARF",
        ),
        (
            "gowork_stripped",
            "runtime.g: stack.hi at +8, goid at +152, as go1.19",
        ),
    ] {
        let bin = common::build(fixture);
        let args = ["list", bin.to_str().unwrap(), "main.spin"];
        let out = tachy(&args);
        let all = text(&args, &out);
        assert!(
            all.contains(&format!(
                "return: probes on each ret, frames kept per goroutine (Go: never a uretprobe); {expected}"
            )),
            "{all}"
        );
    }
}

// ---------------------------------------------------------------------------
// Tracing Go programs (root)
// ---------------------------------------------------------------------------

use common::report::{func, num};
use common::run::{Outcome, Tachy};
use serde_json::Value;
use std::time::Duration;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// `tachy latency --json FUNCS -- FIXTURE MODE N` to its end; the
/// fixture's `count` lines come on stderr (JSON has stdout).
fn trace(fixture: &str, funcs: &[&str], mode: &str, n: u64) -> (Outcome, Value) {
    let exe = common::build(fixture);
    let n = n.to_string();
    let mut args = vec!["latency", "--json"];
    args.extend_from_slice(funcs);
    args.extend(["--", exe.to_str().unwrap(), mode, &n]);
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(Duration::from_secs(240));
    out.assert_success();
    assert!(out.stderr.contains("\ndone\n"), "{out}");
    let rep = out.single_report();
    (out, rep)
}

/// Asserts a function's calls: `count` timed, `left` left by panic, none
/// lost to overflow, its fastest call at least `min_ns` less the probe time
/// subtracted from each call (measured once at start-up, it can take off
/// more than this call's probes cost, never more than itself), its median
/// at most `p50_max_ns`.
fn assert_calls(
    rep: &Value,
    out: &Outcome,
    name: &str,
    count: u64,
    left: u64,
    min_ns: u64,
    p50_max_ns: u64,
) {
    let f = func(rep, name);
    let what = format!("{name}: {f}\n{out}");
    assert_eq!(num(f, "count"), count, "count of {what}");
    assert_eq!(num(f, "unwound"), left, "left by panic of {what}");
    assert_eq!(num(f, "overflow"), 0, "overflow of {what}");
    assert_eq!(num(f, "filtered"), 0, "filtered of {what}");
    if count > 0 {
        let probe = f["probe_ns_per_call"].as_u64().unwrap_or(0);
        assert!(num(f, "min_ns") + probe >= min_ns, "min of {what}");
        assert!(
            num(&f["percentiles_ns"], "p50") <= p50_max_ns,
            "p50 of {what}"
        );
    }
}

/// The fixture's own count of `name`.
fn fixture_count(out: &Outcome, name: &str) -> u64 {
    *common::counts(&out.stderr)
        .get(name)
        .unwrap_or_else(|| panic!("fixture printed no count for {name}\n{out}"))
}

fn skip() -> bool {
    common::skip_without_go() || common::skip_unless_root()
}

/// 1,000 goroutines in a sleeping method and 20 in a spinning function:
/// every call counted once and timed from its entry to its return, though
/// goroutines move between threads while they sleep.
#[test]
fn goroutines_sleeping_and_spinning_are_counted_exactly() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace(
        "gowork",
        &["main.(*Server).handle", "main.spin"],
        "server",
        1000,
    );
    assert_eq!(fixture_count(&out, "main.(*Server).handle"), 1000);
    assert_calls(
        &rep,
        &out,
        "main.(*Server).handle",
        1000,
        0,
        2 * MS,
        100 * MS,
    );
    assert_calls(&rep, &out, "main.spin", 100, 0, 500 * US, 20 * MS);
    let handle = func(&rep, "main.(*Server).handle");
    assert!(num(handle, "max_ns") < 2_000 * MS, "{out}");
}

/// A traced frame stays open while its goroutine's stack is copied several
/// times (a recursion of 40 traced 4 KiB frames on an 8 KiB stack), and
/// each traced function that restarts after `runtime.morestack` is one
/// call: every count exact, nothing left.
#[test]
fn stack_growth_under_a_traced_frame_keeps_every_call() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace(
        "gowork",
        &["main.grow", "main.deep", "runtime.copystack"],
        "grow",
        50,
    );
    assert_eq!(fixture_count(&out, "main.deep"), 50 * 41);
    assert_calls(&rep, &out, "main.grow", 50, 0, MS, 2_000 * MS);
    assert_calls(&rep, &out, "main.deep", 50 * 41, 0, 0, 2_000 * MS);
    // The stacks did grow under the open frames.
    let copies = num(func(&rep, "runtime.copystack"), "count");
    assert!(copies >= 50, "{copies} stack copies\n{out}");
}

/// Past the 64 frames a goroutine's traced calls keep, calls are counted as
/// not timed, each once: also the call that goes to `runtime.morestack` and
/// starts again from its entry on the grown stack (150 levels of 4 KiB
/// frames: the stack is still copied at 256 and 512 KiB).
#[test]
fn calls_past_the_deepest_frame_are_counted_once_through_stack_growth() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace("gowork", &["main.deep"], "deepgrow", 20);
    assert_eq!(fixture_count(&out, "main.deep"), 20 * 151);
    let f = func(&rep, "main.deep");
    assert_eq!(num(f, "count"), 20 * 64, "{f}\n{out}");
    assert_eq!(num(f, "overflow"), 20 * (151 - 64), "{f}\n{out}");
    assert_eq!(num(f, "unwound"), 0, "{f}\n{out}");
}

/// Half the calls panic through a traced function and are recovered by
/// its traced caller: those are counted as left by panic, never timed, and
/// the program goes on to exit 0.
#[test]
fn recovered_panics_are_left_by_panic() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace("gowork", &["main.safeCall", "main.mayPanic"], "panic", 100);
    assert_eq!(fixture_count(&out, "main.mayPanic"), 51);
    assert_calls(&rep, &out, "main.safeCall", 101, 0, 200 * US, 20 * MS);
    assert_calls(&rep, &out, "main.mayPanic", 51, 50, 200 * US, 20 * MS);
}

/// Generic instances and closures, traced by name.
#[test]
fn generics_and_closures_by_name() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace(
        "gowork",
        &["main.Map", "main.runGeneric.func*"],
        "generic",
        50,
    );
    assert_eq!(rep["functions"].as_array().unwrap().len(), 4, "{out}");
    assert_calls(&rep, &out, "main.Map[go.shape.int_0]", 50, 0, 0, 100 * MS);
    assert_calls(
        &rep,
        &out,
        "main.Map[go.shape.string_0]",
        50,
        0,
        0,
        100 * MS,
    );
    assert_calls(&rep, &out, "main.runGeneric.func1", 150, 0, 0, 100 * MS);
    assert_calls(&rep, &out, "main.runGeneric.func2", 100, 0, 0, 100 * MS);
}

/// A stripped build, traced by the names of its `.gopclntab`.
#[test]
fn a_stripped_build_is_traced_by_pclntab_names() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace(
        "gowork_stripped",
        &["main.safeCall", "main.mayPanic"],
        "panic",
        40,
    );
    assert_calls(&rep, &out, "main.safeCall", 41, 0, 200 * US, 20 * MS);
    assert_calls(&rep, &out, "main.mayPanic", 21, 20, 200 * US, 20 * MS);
}

/// GOMAXPROCS 2 and runtime.Gosched inside the traced function: its
/// goroutines resume on other threads mid-call; every call counts once,
/// timed across the moves (10 rounds of 50 us spinning at least).
#[test]
fn goroutines_moving_between_threads_keep_their_frames() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace("gowork", &["main.yielder"], "sched", 50);
    assert_eq!(fixture_count(&out, "main.yielder"), 200);
    assert_calls(&rep, &out, "main.yielder", 200, 0, 500 * US, 2_000 * MS);
}

/// A running process (`-p`): the text report says "left by panic".
#[test]
fn a_running_go_process_reports_left_by_panic() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let mut fx = common::Fixture::spawn("gowork", &["panic", "20"]);
    let pid = fx.pid().to_string();
    let mut t = Tachy::start(&["latency", "-u", "-p", &pid, "main.mayPanic"], &[]);
    t.wait_for_header(false);
    fx.go();
    let (status, fx_out) = fx.wait();
    assert!(status.success(), "{fx_out}");
    let out = t.finish(Duration::from_secs(15));
    out.assert_success();
    assert!(out.stdout.contains("count: 11\n"), "{out}");
    assert!(out.stdout.contains("\nleft by panic: 10\n"), "{out}");
    assert!(!out.stdout.contains("exception"), "{out}");
}

/// `--uretprobe` never puts a uretprobe on Go code, and says why: panics
/// and stack growth through the traced functions then leave the program
/// alive and the counts exact.
#[test]
fn uretprobe_is_refused_for_go_with_a_reason() {
    let _guard = common::serial();
    if common::skip_without_go() {
        return;
    }
    let exe = common::build("gowork");
    let spec = format!("{}:main.(*Server).handle", exe.display());
    let args = ["latency", "--uretprobe", "--dry-run", &spec];
    let out = tachy(&args);
    let all = text(&args, &out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("uretprobe  "), "{all}");
    assert!(stdout.contains("go ret [0]"), "{all}");
    assert!(stdout.contains("never a uretprobe"), "{all}");
    if common::skip_unless_root() {
        return;
    }
    let (out, rep) = trace(
        "gowork",
        &["--uretprobe", "main.mayPanic", "main.deep"],
        "panic",
        20,
    );
    assert!(
        out.stderr.contains(
            "tachy: --uretprobe is not used for Go functions (main.mayPanic and 1 more): a uretprobe replaces the return address"
        ),
        "{out}"
    );
    assert!(!out.stderr.contains("C++ exception"), "{out}");
    assert_calls(&rep, &out, "main.mayPanic", 11, 10, 200 * US, 20 * MS);
}

/// `--json` marks Go functions, so `tachy merge` of two runs' reports says
/// "left by panic" for them, as the live text report does.
#[test]
fn merged_go_reports_say_left_by_panic() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tachy-go-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for k in 0..2 {
        let (out, rep) = trace("gowork", &["main.mayPanic"], "panic", 20);
        assert_eq!(func(&rep, "main.mayPanic")["go"], true, "{out}");
        let path = dir.join(format!("run{k}.json"));
        std::fs::write(&path, &out.stdout).unwrap();
        files.push(path.to_str().unwrap().to_string());
    }
    let args = ["merge", &files[0], &files[1]];
    let out = tachy(&args);
    let all = text(&args, &out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("count: 22\n"), "{all}");
    assert!(stdout.contains("\nleft by panic: 20\n"), "{all}");
    assert!(!stdout.contains("exception"), "{all}");
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------
// tachy nested on Go functions (root)
// ---------------------------------------------------------------------------

/// `tachy nested --json --max-overhead 0 [OPTS] FUNC -- gowork MODE N` to its end: the
/// fixture's output and the traced function's tree.
fn nested(opts: &[&str], func: &str, mode: &str, n: u64) -> (Outcome, Value) {
    let exe = common::build("gowork");
    let n = n.to_string();
    // Each site's calls are counted exactly: no budget sheds them.
    let mut args = vec!["nested", "--json", "--max-overhead", "0"];
    args.extend_from_slice(opts);
    args.extend([func, "--", exe.to_str().unwrap(), mode, &n]);
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(Duration::from_secs(240));
    out.assert_success();
    assert!(out.stderr.contains("\ndone\n"), "{out}");
    let rep = out.single_report();
    let roots = rep["roots"].as_array().expect("roots").clone();
    assert_eq!(roots.len(), 1, "{out}");
    assert_eq!(roots[0]["go"], true, "{out}");
    (out, roots[0].clone())
}

/// The children of a tree node.
fn kids(n: &Value) -> &Vec<Value> {
    n["children"].as_array().expect("children")
}

/// The one child of `n` called `name` (and, with `site`, at a `file:line`
/// ending so).
fn kid<'a>(n: &'a Value, name: &str, out: &Outcome) -> &'a Value {
    let found: Vec<&Value> = kids(n).iter().filter(|c| c["name"] == name).collect();
    assert_eq!(found.len(), 1, "{name} under {}\n{out}", n["name"]);
    found[0]
}

/// Asserts a site's calls: `count` returned, `left` left by panic, and
/// the average of the returned ones within [min_ns, max_ns] (less the
/// probe time subtracted from each, as for `assert_calls`).
fn assert_site(s: &Value, out: &Outcome, count: u64, left: u64, min_ns: u64, max_ns: u64) {
    let what = format!("{} at {}: {s}\n{out}", s["name"], s["site"]);
    assert_eq!(num(s, "count"), count, "count of {what}");
    assert_eq!(num(s, "unwound"), left, "left by panic of {what}");
    let probe = s["probe_ns_per_call"].as_u64().unwrap_or(0);
    if let Some(avg) = num(s, "total_ns").checked_div(count) {
        assert!(
            avg + probe >= min_ns && avg <= max_ns,
            "avg {avg} ns of {what}"
        );
    }
}

/// The root's time is its sites' and its own: the sites never add up to
/// more than it, and what is left (self) is at most `self_max_ns` a call.
fn assert_self(root: &Value, out: &Outcome, self_max_ns: u64) {
    let sum: u64 = kids(root).iter().map(|c| num(c, "total_ns")).sum();
    let total = num(root, "total_ns");
    assert!(sum <= total, "sites {sum} ns > root {total} ns\n{out}");
    assert_eq!(num(root, "self_ns"), total - sum, "{out}");
    let per_call = (total - sum) / num(root, "count");
    assert!(per_call <= self_max_ns, "self {per_call} ns a call\n{out}");
}

/// Each call site of a Go function timed per goroutine: a sleep and two
/// spins called by 2 goroutines 40 times each, every site call counted,
/// each within its known duration, self time what is left; drilled down
/// into the sleeping callee, its own call. (The spins are not drilled
/// into: they spin until a deadline, so the probes of their thousands of
/// calls would make them spin less, not longer, and the probe time
/// subtracted would read them short.)
#[test]
fn nested_go_sites_are_counted_exactly() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, root) = nested(&["--expand", "main.nap"], "main.work", "nested", 40);
    assert_eq!(fixture_count(&out, "main.work"), 80);
    assert_eq!(num(&root, "count"), 80, "{out}");
    assert_eq!(num(&root, "unwound"), 0, "{out}");
    assert!(num(&root, "total_ns") / 80 >= 2_600 * US, "{out}");
    let sites = kids(&root);
    let names: Vec<&str> = sites.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["main.nap", "main.spin", "main.spin"], "{out}");
    for s in sites {
        assert_eq!(s["kind"], "call", "{out}");
        assert!(
            s["site"].as_str().unwrap().starts_with("gowork.go:"),
            "{out}"
        );
    }
    assert_ne!(sites[1]["site"], sites[2]["site"], "{out}");
    assert_site(&sites[0], &out, 80, 0, 2 * MS, 100 * MS);
    assert_site(&sites[1], &out, 80, 0, 300 * US, 20 * MS);
    assert_site(&sites[2], &out, 80, 0, 300 * US, 20 * MS);
    assert_self(&root, &out, 200 * US);
    let sleep = kid(&sites[0], "time.Sleep", &out);
    assert_site(sleep, &out, 80, 0, 2 * MS, 100 * MS);
}

/// A method called through an interface and a closure are indirect sites,
/// each timed: the 1 ms nap and the 200 us spin; each site's probe reads
/// where it goes: the method, and the closure, 80 calls each.
#[test]
fn nested_go_interface_and_closure_calls_are_indirect() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, root) = nested(&[], "main.dispatch", "nested", 40);
    assert_eq!(fixture_count(&out, "main.(*napper).Nap"), 80);
    assert_eq!(num(&root, "count"), 80, "{out}");
    let sites = kids(&root);
    assert_eq!(sites.len(), 2, "{out}");
    for s in sites {
        assert_eq!(s["kind"], "indirect", "{out}");
        assert_eq!(s["name"], "*indirect", "{out}");
    }
    assert_site(&sites[0], &out, 80, 0, MS, 100 * MS);
    assert_site(&sites[1], &out, 80, 0, 200 * US, 20 * MS);
    assert_self(&root, &out, 200 * US);
    let callees = |s: &Value| -> Vec<(String, u64)> {
        s["callees"]
            .as_array()
            .unwrap_or_else(|| panic!("no callees: {out}"))
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    num(c, "count"),
                )
            })
            .collect()
    };
    assert_eq!(
        callees(&sites[0]),
        [("main.(*napper).Nap".to_string(), 80)],
        "{out}"
    );
    let closure = callees(&sites[1]);
    assert_eq!(closure.len(), 1, "{out}");
    assert!(closure[0].0.starts_with("main.main.func"), "{out}");
    assert_eq!(closure[0].1, 80, "{out}");
}

/// `--expand 'main.dispatch->main.(*napper).Nap'` breaks the method down
/// under the interface call: its call of time.Sleep, once per call (80),
/// each at least the 1 ms nap, headed by the method (`via`); the closure
/// call never reaches it, so the method's sites under it count nothing.
#[test]
fn nested_go_expands_a_callee_of_an_interface_call() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let expand = "main.dispatch->main.(*napper).Nap";
    let (out, root) = nested(&["--expand", expand], "main.dispatch", "nested", 40);
    let sites = kids(&root);
    assert_eq!(sites.len(), 2, "{out}");
    let sleep = kid(&sites[0], "time.Sleep", &out);
    assert_eq!(sleep["via"], "main.(*napper).Nap", "{out}");
    assert_site(sleep, &out, 80, 0, MS, 100 * MS);
    let closure_kids: u64 = kids(&sites[1]).iter().map(|k| num(k, "count")).sum();
    assert_eq!(closure_kids, 0, "{out}");
}

/// A site whose callee recurses 40 frames of 4 KiB deep while the site is
/// open: the goroutine's 8 KiB stack is copied several times under it (the
/// callee's prologue calls runtime.morestack), the call still returns to
/// the site's key, and every count is exact; the program exits 0.
#[test]
fn nested_go_site_survives_stack_growth_in_its_callee() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, root) = nested(&["--depth", "2"], "main.grow", "grow", 50);
    assert_eq!(num(&root, "count"), 50, "{out}");
    assert_eq!(num(&root, "unwound"), 0, "{out}");
    let sleep = kid(&root, "time.Sleep", &out);
    assert_site(sleep, &out, 50, 0, MS, 100 * MS);
    let deep = kid(&root, "main.deep", &out);
    assert_site(deep, &out, 50, 0, 0, 100 * MS);
    // deep's own call of deep, under the first one: once per grow.
    let inner = kid(deep, "main.deep", &out);
    assert_site(inner, &out, 50, 0, 0, 100 * MS);
    assert!(num(inner, "total_ns") <= num(deep, "total_ns"), "{out}");
    // No site was left open by the growth.
    fn no_unwound(n: &Value, out: &Outcome) {
        assert_eq!(num(n, "unwound"), 0, "{n}\n{out}");
        kids(n).iter().for_each(|c| no_unwound(c, out));
    }
    no_unwound(&root, &out);
    assert_self(&root, &out, 200 * US);
}

/// GOMAXPROCS 2 and runtime.Gosched in the traced function: its
/// goroutines resume on other threads while a site is open, and each site
/// call is counted once on its goroutine.
#[test]
fn nested_go_sites_follow_goroutines_across_threads() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, root) = nested(&[], "main.yielder", "sched", 50);
    assert_eq!(num(&root, "count"), 200, "{out}");
    assert_eq!(num(&root, "unwound"), 0, "{out}");
    // runtime.Gosched, or what it inlines (runtime.mcall in Go 1.19).
    let yields: Vec<&Value> = kids(&root)
        .iter()
        .filter(|c| {
            let n = c["name"].as_str().unwrap();
            n == "runtime.Gosched" || n == "runtime.mcall"
        })
        .collect();
    assert_eq!(yields.len(), 1, "{out}");
    assert_site(yields[0], &out, 2000, 0, 0, 2_000 * MS);
    let spin = kid(&root, "main.spin", &out);
    assert_site(spin, &out, 2000, 0, 50 * US, 20 * MS);
    assert_self(&root, &out, 2 * MS);
}

/// Half the calls of a site panic, and the traced function recovers: those
/// are counted as left by panic and never timed; the recovery's own call
/// (runtime.deferreturn) and the deferred closure's (indirect) are counted;
/// the program goes on to exit 0. The text report says "left by panic".
#[test]
fn nested_go_sites_left_by_panic_are_counted() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, root) = nested(&[], "main.safeCall", "panic", 100);
    assert_eq!(num(&root, "count"), 101, "{out}");
    assert_eq!(num(&root, "unwound"), 0, "{out}");
    let may = kid(&root, "main.mayPanic", &out);
    assert_site(may, &out, 51, 50, 200 * US, 20 * MS);
    let deferred = kid(&root, "*indirect", &out);
    assert_site(deferred, &out, 51, 0, 0, 20 * MS);
    let recovered = kid(&root, "runtime.deferreturn", &out);
    assert_site(recovered, &out, 50, 0, 0, 20 * MS);

    let exe = common::build("gowork");
    let args = [
        "nested",
        "main.safeCall",
        "--",
        exe.to_str().unwrap(),
        "panic",
        "20",
    ];
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(Duration::from_secs(60));
    out.assert_success();
    assert!(out.stdout.contains("main.safeCall  calls 21"), "{out}");
    assert!(out.stdout.contains("(10 left by panic)"), "{out}");
    assert!(!out.stdout.contains("exception"), "{out}");
}

/// A duration filter would keep or drop a Go call's sites with it, which
/// the goroutine's frames do not do yet: refused with one line.
#[test]
fn nested_go_with_a_duration_filter_is_refused() {
    if common::skip_without_go() {
        return;
    }
    let exe = common::build("gowork");
    let spec = format!("{}:main.work", exe.display());
    let args = ["nested", "--slower-than", "1ms", "--dry-run", &spec];
    let out = tachy(&args);
    let all = text(&args, &out);
    // A usage error: status 2, clap's `error: ` line first.
    assert_eq!(out.status.code(), Some(2), "{all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: tachy nested does not apply --slower-than/--faster-than to the call sites of Go functions yet (main.work)"),
        "{all}"
    );
}

/// --outermost on a recursive Go function: each goroutine's outermost call
/// counted once (41 calls deep, its stack copied under it), none left.
#[test]
fn outermost_counts_each_goroutines_outer_call() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace(
        "gowork",
        &["--outermost", "main.deep", "main.grow"],
        "grow",
        50,
    );
    assert_eq!(fixture_count(&out, "main.deep"), 50 * 41);
    assert_calls(&rep, &out, "main.deep", 50, 0, 0, 2_000 * MS);
    assert_calls(&rep, &out, "main.grow", 50, 0, MS, 2_000 * MS);
    // The outer call holds the 40 below it.
    let deep = func(&rep, "main.deep");
    let grow = func(&rep, "main.grow");
    assert!(num(deep, "total_ns") <= num(grow, "total_ns"), "{out}");
}

/// `--by goroutine`: 30 goroutines that each call yielder 4 times, moving
/// between threads mid-call (GOMAXPROCS 2, runtime.Gosched), make 30
/// groups of exactly 4 calls, each named by its goroutine's id.
#[test]
fn calls_group_by_goroutine() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep) = trace(
        "gowork",
        &["--by", "goroutine", "main.yielder"],
        "sched",
        30,
    );
    let f = func(&rep, "main.yielder");
    assert_eq!(f["by"], serde_json::json!(["goroutine"]), "{out}");
    let groups = f["groups"].as_array().unwrap();
    let mut ids: Vec<u64> = groups
        .iter()
        .map(|g| {
            assert_eq!(num(g, "count"), 4, "{g}\n{out}");
            num(&g["goroutine"], "goid")
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 30, "{out}");
    assert!(ids[0] > 0, "{out}");
    assert!(f["groups_other"].is_null() && f["groups_not_kept"].is_null());
}

/// Keys that say nothing of a Go function, and `goroutine` on C code, are
/// usage errors.
#[test]
fn by_keys_go_refuses() {
    let _guard = common::serial();
    if common::skip_without_go() {
        return;
    }
    let go = common::build("gowork");
    let c = common::build("plain");
    let cases = [
        (
            format!("{}:main.yielder", go.display()),
            "tid",
            "error: --by tid does not group calls of Go functions (main.yielder): group them by goroutine, pid, retval or stack",
        ),
        (
            format!("{}:main.yielder", go.display()),
            "arg0",
            "error: --by arg0 does not group calls of Go functions (main.yielder): group them by goroutine, pid, retval or stack",
        ),
        (
            format!("{}:main", c.display()),
            "goroutine",
            "error: --by goroutine groups calls of Go functions; main is not Go code",
        ),
    ];
    for (target, key, line) in cases {
        let args = ["latency", "--dry-run", "--by", key, &target];
        let out = tachy(&args);
        let all = text(&args, &out);
        // Usage errors: status 2, clap's `error: ` line first.
        assert_eq!(out.status.code(), Some(2), "{all}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().next(), Some(line), "{all}");
    }
}

/// The p50 of the one function of a latency report, and the probe time
/// subtracted from each call (0: none).
fn p50_and_probe(rep: &Value, name: &str) -> (f64, u64) {
    let f = func(rep, name);
    (
        num(&f["percentiles_ns"], "p50") as f64,
        f["probe_ns_per_call"].as_u64().unwrap_or(0),
    )
}

/// Go frames have the probes' own time subtracted, as C's: a 2 us spin
/// reads its untraced twin's time (timed by the fixture after each call)
/// with at most half of the probes' time left in or taken out too much;
/// with --raw all of it is left in.
#[test]
fn go_frames_subtract_the_probes_own_time() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let untraced = |out: &Outcome| -> f64 {
        out.stderr
            .lines()
            .find_map(|l| l.strip_prefix("untraced main.tick "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no untraced time\n{out}"))
    };
    let (out, rep) = trace("gowork", &["main.tick"], "tick", 2000);
    let want = untraced(&out);
    let (got, probe) = p50_and_probe(&rep, "main.tick");
    assert!(probe > 0, "no probe time subtracted\n{out}");
    assert_calls(&rep, &out, "main.tick", 2000, 0, 0, 20 * MS);
    assert!(
        (got - want).abs() <= 0.5 * probe as f64,
        "p50 {got} ns, untraced {want} ns, {probe} ns subtracted\n{out}"
    );
    let (out, rep) = trace("gowork", &["--raw", "main.tick"], "tick", 2000);
    let want = untraced(&out);
    let (raw, none) = p50_and_probe(&rep, "main.tick");
    assert_eq!(none, 0, "{out}");
    assert!(
        raw - want >= 0.5 * probe as f64,
        "raw p50 {raw} ns, untraced {want} ns\n{out}"
    );
}

/// Two processes of one Go binary lay out their heaps alike, so their
/// goroutines often have the same g: traced together (`-p A,B`), each
/// keeps its own frames, and every count is exact.
#[test]
fn two_go_processes_keep_their_goroutines_apart() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let mut a = common::Fixture::spawn("gowork", &["panic", "100"]);
    let mut b = common::Fixture::spawn("gowork", &["panic", "100"]);
    let pids = format!("{},{}", a.pid(), b.pid());
    let mut t = Tachy::start(
        &[
            "latency",
            "--json",
            "-p",
            &pids,
            "main.safeCall",
            "main.mayPanic",
        ],
        &[],
    );
    t.wait_for_header(true);
    a.go();
    b.go();
    let (sa, oa) = a.wait();
    let (sb, ob) = b.wait();
    assert!(sa.success() && sb.success(), "{oa}\n{ob}");
    let out = t.finish(Duration::from_secs(30));
    out.assert_success();
    let rep = out.single_report();
    assert_calls(&rep, &out, "main.safeCall", 202, 0, 200 * US, 20 * MS);
    assert_calls(&rep, &out, "main.mayPanic", 102, 100, 200 * US, 20 * MS);
}

/// `tachy latency --json OPTS -- gowork MODE N` to its end: the one
/// report and the slow-call records, apart.
fn trace_records(opts: &[&str], mode: &str, n: u64) -> (Outcome, Value, Vec<Value>) {
    let exe = common::build("gowork");
    let n = n.to_string();
    let mut args = vec!["latency", "--json"];
    args.extend_from_slice(opts);
    args.extend(["--", exe.to_str().unwrap(), mode, &n]);
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(Duration::from_secs(240));
    out.assert_success();
    assert!(out.stderr.contains("\ndone\n"), "{out}");
    let (mut reps, records): (Vec<Value>, Vec<Value>) = common::run::json_lines(&out.stdout)
        .into_iter()
        .partition(|v| v.get("functions").is_some());
    assert_eq!(reps.len(), 1, "{out}");
    let records = records
        .into_iter()
        .filter(|v| v["type"] == "record")
        .collect();
    (out, reps.pop().unwrap(), records)
}

/// Count per value of a `--by retval` report's groups (its JSON text).
fn by_retval(f: &Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for g in f["groups"].as_array().expect("a groups array") {
        *out.entry(g["retval"]["value"].to_string()).or_default() += num(g, "count");
    }
    out
}

fn map(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Goroutines of the `retval` mode (10 calls each of check and ready).
const RET_G: u64 = 20;

/// Go's first integer result register, typed by Go's DWARF (`~r0`: an
/// int, a bool), read at every `ret` of calls whose goroutines yield,
/// move between threads and grow their stacks on the slow error path:
/// exact counts per value.
#[test]
fn go_calls_group_by_return_value() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let opts = ["--by", "retval", "main.check", "main.ready"];
    let (out, rep, _) = trace_records(&opts, "retval", RET_G);
    assert_eq!(fixture_count(&out, "main.check"), 10 * RET_G);
    assert!(
        out.stderr.contains(&format!("\nerrors {}\n", 2 * RET_G)),
        "{out}"
    );
    for name in ["main.check", "main.ready"] {
        let f = func(&rep, name);
        assert_eq!(num(f, "count"), 10 * RET_G, "{name}\n{out}");
        assert_eq!(num(f, "unwound"), 0, "{name}\n{out}");
        assert_eq!(num(f, "overflow"), 0, "{name}\n{out}");
    }
    let check = func(&rep, "main.check");
    assert_eq!(
        by_retval(check),
        map(&[("-1", 2 * RET_G), ("0", 8 * RET_G)]),
        "{out}"
    );
    // The error path is the slow one (1 ms of spinning).
    let slow = check["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["retval"]["value"] == -1)
        .unwrap();
    assert!(num(slow, "avg_ns") >= 900 * US, "{out}");
    assert_eq!(
        by_retval(func(&rep, "main.ready")),
        map(&[("false", 2 * RET_G), ("true", 8 * RET_G)]),
        "{out}"
    );
}

/// `--filter 'ret < 0'` on Go code is decided at the `ret`: the error
/// calls are timed, the others counted as filtered, none lost.
#[test]
fn go_filter_on_ret_counts_the_rest_as_filtered() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let opts = ["--filter", "ret < 0", "main.check"];
    let (out, rep, _) = trace_records(&opts, "retval", RET_G);
    let f = func(&rep, "main.check");
    assert_eq!(num(f, "count"), 2 * RET_G, "{out}");
    assert_eq!(num(f, "filtered_by_args"), 8 * RET_G, "{out}");
    assert_eq!(num(f, "unwound"), 0, "{out}");
    assert_eq!(num(f, "overflow"), 0, "{out}");
    assert!(num(f, "min_ns") >= 900 * US, "{out}");
    // Arguments of Go functions are still not read: one line.
    let exe = common::build("gowork");
    let spec = format!("{}:main.check", exe.display());
    let args = ["latency", "--dry-run", "--filter", "i > 2", &spec];
    let out = tachy(&args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&args, &out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().next(),
        Some("error: --filter does not read the arguments of Go functions yet (main.check): only ret"),
        "{}",
        text(&args, &out)
    );
}

/// Slow Go calls are recorded, each with the value it returned.
#[test]
fn go_records_carry_ret() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let opts = ["--record-slower-than", "900us", "main.check"];
    let (out, rep, records) = trace_records(&opts, "retval", RET_G);
    assert_eq!(num(func(&rep, "main.check"), "count"), 10 * RET_G, "{out}");
    let errors = records.iter().filter(|r| r["ret"] == -1).count() as u64;
    assert_eq!(errors, 2 * RET_G, "{out}");
    for r in &records {
        assert_eq!(r["function"], "main.check", "{r}\n{out}");
        assert!(r["ret"].is_i64(), "{r}\n{out}");
        assert!(r["stack"].is_null(), "{r}\n{out}");
    }
    // Text records say ret=.
    let exe = common::build("gowork");
    let args = [
        "latency",
        "--record-slower-than",
        "900us",
        "main.check",
        "--",
        exe.to_str().unwrap(),
        "retval",
        "2",
    ];
    let out = Tachy::start(&args, &[("FIXTURE_NO_WAIT", "1")]).finish(Duration::from_secs(120));
    out.assert_success();
    let lines = out
        .stdout
        .lines()
        .filter(|l| l.contains(" main.check ") && l.ends_with("  ret=-1"))
        .count();
    assert_eq!(lines, 4, "{out}");
}

/// A Go function without a result, and one whose first result is a
/// float, are refused with one line each.
#[test]
fn go_without_an_integer_result_is_refused() {
    if common::skip_without_go() {
        return;
    }
    let exe = common::build("gowork");
    for (func, line) in [
        ("main.nap", "error: --by retval: main.nap has no result"),
        (
            "main.ratio",
            "error: --by retval: main.ratio's first result is floating point (float64): tachy reads Go's first integer result register",
        ),
    ] {
        let spec = format!("{}:{func}", exe.display());
        let args = ["latency", "--dry-run", "--by", "retval", &spec];
        let out = tachy(&args);
        let all = text(&args, &out);
        assert_eq!(out.status.code(), Some(2), "{all}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().next(), Some(line), "{all}");
    }
}

/// Iterations of the `chains` and `gochains` modes.
const CHAIN_N: u64 = 10;

/// The callers of main.leaf in the fixture: N through one < alpha, N
/// through two < beta, 2N through three < beta; below them `tail`.
fn chains_below(tail: &[&str]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (chain, n) in [
        (["main.one", "main.alpha"], CHAIN_N),
        (["main.two", "main.beta"], CHAIN_N),
        (["main.three", "main.beta"], 2 * CHAIN_N),
    ] {
        let mut all: Vec<&str> = chain.to_vec();
        all.extend_from_slice(tail);
        out.insert(all.join(" < "), n);
    }
    out
}

/// `--by stack` on Go code walks the goroutine's frame pointers at each
/// `ret`: exact chains and counts, while main's goroutine yields and moves
/// between threads.
#[test]
fn go_calls_group_by_stack() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let (out, rep, _) = trace_records(&["--by", "stack", "main.leaf"], "chains", CHAIN_N);
    let f = func(&rep, "main.leaf");
    assert_eq!(num(f, "count"), 4 * CHAIN_N, "{out}");
    assert_eq!(num(f, "unwound"), 0, "{out}");
    let mut got = BTreeMap::new();
    for g in f["groups"].as_array().expect("groups") {
        let chain: Vec<&str> = g["stack"]
            .as_array()
            .expect("a stack key")
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        *got.entry(chain.join(" < ")).or_default() += num(g, "count");
    }
    assert_eq!(got, chains_below(&["main.main"]), "{out}");
    assert!(
        out.stderr
            .contains("Grouping calls by their callers out to main (user stack by frame pointers)"),
        "{out}"
    );
}

/// `--record-slower-than --stack` on Go code: each call on a goroutine of
/// its own, whose stack grew under the traced call, prints its callers
/// with file:line up to the goroutine's first function (never
/// runtime.goexit, where the walk stops).
#[test]
fn go_records_print_the_stack_up_to_the_goroutine() {
    let _guard = common::serial();
    if skip() {
        return;
    }
    let opts = ["--record-slower-than", "0ns", "--stack", "main.leaf"];
    let (out, rep, records) = trace_records(&opts, "gochains", CHAIN_N);
    let f = func(&rep, "main.leaf");
    assert_eq!(num(f, "count"), 4 * CHAIN_N, "{out}");
    assert_eq!(num(f, "unwound"), 0, "{out}");
    let mut got = BTreeMap::new();
    for r in &records {
        assert_eq!(r["stack"]["method"], "frame pointers", "{r}\n{out}");
        let frames = r["stack"]["frames"].as_array().expect("frames");
        for x in frames {
            let loc = x["location"].as_str().unwrap_or("");
            assert!(loc.starts_with("gowork.go:"), "{x} in {r}\n{out}");
        }
        let names: Vec<&str> = frames
            .iter()
            .map(|x| x["function"].as_str().unwrap())
            .collect();
        // The goroutine runs each's closure, which calls the one passed to it.
        assert!(names.len() == 5, "{r}\n{out}");
        assert!(names[2].starts_with("main.main.func"), "{r}\n{out}");
        assert_eq!(
            &names[3..],
            ["main.each.func1", "main.each.func2"],
            "{r}\n{out}"
        );
        *got.entry(format!("{} < {}", names[0], names[1]))
            .or_default() += 1;
    }
    assert_eq!(got, chains_below(&[]), "{out}");
}
