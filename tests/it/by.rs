//! Root-run integration tests of `--by`: calls broken down by caller,
//! thread and process, counted in the kernel, with `--top` and a group map
//! that fills. On the `why` fixture's callers mode (tests/fixtures/why.c:
//! target() from three callers, 5, 3 and 2 times per iteration) and the
//! `by` fixture (tests/fixtures/by.cpp: a C++ method at -O2, called from
//! two call sites on named threads).

use crate::common;

use std::collections::BTreeMap;

use common::report::{func, num};
use common::run::{run_fixture, Outcome, Tachy, RUN_TIMEOUT};
use common::{tagged, Fixture};
use serde_json::Value;

const SCAN: &str = "grp::Table::scan(int)";
const FETCH: &str = "grp::Table::fetch(int, long)";

/// Runs `tachy latency OPTS... -- FIXTURE ARGS...`, without the go signal,
/// with `envs` for tachy.
fn run(opts: &[&str], fixture: &str, args: &[&str], envs: &[(&str, &str)]) -> Outcome {
    run_fixture("latency", opts, fixture, args, envs)
}

/// The groups of function `name` as label -> count, the label made of
/// each key value: `function at location` for a caller, `comm tid` for a
/// thread, `comm pid` for a process, `NAME value` for an argument.
fn groups(rep: &Value, name: &str) -> BTreeMap<String, u64> {
    let f = func(rep, name);
    let mut out = BTreeMap::new();
    for g in f["groups"].as_array().expect("a groups array") {
        let mut parts = Vec::new();
        for key in f["by"].as_array().expect("a by array") {
            let key = key.as_str().unwrap();
            let v = &g[key];
            parts.push(match key {
                "caller" => format!(
                    "{} at {}",
                    v["function"].as_str().unwrap_or("?"),
                    v["location"].as_str().unwrap_or("?")
                ),
                "tid" => format!("{} {}", v["comm"].as_str().unwrap(), v["tid"]),
                "pid" => format!("{} {}", v["comm"].as_str().unwrap(), v["pid"]),
                _ => format!("{key} {}", v["value"]),
            });
        }
        let label = parts.join(", ");
        assert!(
            out.insert(label.clone(), num(g, "count")).is_none(),
            "{label} twice in {f}"
        );
    }
    out
}

fn map(pairs: &[(String, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().cloned().collect()
}

/// The line of each caller's call, as the why fixture prints it.
fn why_lines(out: &Outcome) -> BTreeMap<String, u64> {
    tagged(&out.fixture_text(), "line")
}

/// The groups `--by caller` makes of the why fixture's callers mode run
/// for `iterations`: each caller named with the line of its call, with 5,
/// 3 and 2 calls per iteration.
fn why_callers(out: &Outcome, iterations: u64) -> BTreeMap<String, u64> {
    let lines = why_lines(out);
    [("caller_one", 5), ("caller_two", 3), ("caller_three", 2)]
        .into_iter()
        .map(|(c, n)| (format!("{c} at why.c:{}", lines[c]), n * iterations))
        .collect()
}

/// `--by caller` on a C function called from three callers: exact counts
/// per caller, each named with the line of its call (which the fixture
/// prints from __LINE__), in JSON and in text. The caller is read when the
/// call returns: from the return-address slot at a probed `ret`, and from
/// the registers under `--uretprobe`, whose trampoline has taken the
/// slot's place by then.
#[test]
fn callers_have_exact_counts_and_lines() {
    let _g = common::needs_root!();
    let out = run(
        &["--json", "--uretprobe", "--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    let rep = out.success_report();
    let want = why_callers(&out, 10);
    assert_eq!(groups(&rep, "target"), want, "{out}");

    let out = run(
        &["--json", "--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    let rep = out.success_report();
    assert_eq!(groups(&rep, "target"), want, "{out}");
    let f = func(&rep, "target");
    assert_eq!(num(f, "count"), 100, "{out}");
    assert_eq!(f["by"], serde_json::json!(["caller"]));
    assert!(f["groups_other"].is_null() && f["groups_not_kept"].is_null());
    let totals: Vec<u64> = f["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| num(g, "total_ns"))
        .collect();
    assert!(
        totals.windows(2).all(|w| w[0] >= w[1]),
        "not by total\n{out}"
    );

    let out = run(
        &["-u", "--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    out.assert_success();
    let text = &out.stdout;
    let section = text
        .split_once("\ncalled from:\n")
        .unwrap_or_else(|| panic!("no called from section\n{out}"))
        .1;
    let rows: Vec<&str> = section.lines().take(3).collect();
    for (caller, n) in &want {
        let row = rows
            .iter()
            .find(|r| r.starts_with(&format!("  {caller} ")))
            .unwrap_or_else(|| panic!("no line for {caller}\n{out}"));
        assert!(row.contains(&format!("count {n} ")), "{row:?}\n{out}");
        assert!(
            row.contains(" usecs   p50 ") && row.ends_with(" usecs"),
            "{row}"
        );
    }
}

/// Callers of a process that exits within a few milliseconds (one
/// iteration: 10 calls in ~3 ms) are named: from its maps where tachy read
/// them in time, else from the file and offset the kernel saw each
/// caller's address mapped at when its group was made.
#[test]
fn callers_of_a_process_gone_before_its_maps_are_read_are_named() {
    let _g = common::needs_root!();
    let out = run(
        &["--json", "--by", "caller", "target"],
        "why",
        &["callers", "1"],
        &[],
    );
    let rep = out.success_report();
    assert_eq!(groups(&rep, "target"), why_callers(&out, 1), "{out}");
}

/// A caller in a library the process loaded after tachy first read its
/// maps (the why fixture's late mode: nanosleep from main, then from
/// libfixture.so, dlopen()ed 300 ms later) is named too: the maps are read
/// again while the process runs.
#[test]
fn callers_in_a_library_loaded_later_are_named() {
    let _g = common::needs_root!();
    let out = run(
        &["--json", "--by", "caller", "c:nanosleep"],
        "why",
        &["late", "5"],
        &[],
    );
    let rep = out.success_report();
    let f = func(&rep, "nanosleep");
    let mut lib = 0;
    for g in f["groups"].as_array().expect("groups") {
        let c = &g["caller"];
        let object = c["object"].as_str().unwrap_or_default();
        assert!(!object.contains("[unknown]"), "unnamed caller {c}\n{out}");
        if object.ends_with("libfixture.so") {
            assert!(
                c["function"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("fixture_io"),
                "{c}\n{out}"
            );
            assert!(
                c["location"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("libfixture.c:"),
                "{c}\n{out}"
            );
            lib += num(g, "count");
        }
    }
    assert_eq!(lib, 5, "{out}");
}

/// `--top 1`: the caller with the most time is kept, the two others are
/// one "other (2 groups)" line with the rest of the 100 calls. (Which
/// caller has the most time is up to the machine: 50 calls of 200 us, or
/// fewer calls that a busy machine delayed.)
#[test]
fn top_folds_the_rest_into_other() {
    let _g = common::needs_root!();
    let out = run(
        &["--json", "--by", "caller", "--top", "1", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    let rep = out.success_report();
    let lines = why_lines(&out);
    let calls = |c: &str| match c {
        "caller_one" => 50,
        "caller_two" => 30,
        _ => 20,
    };
    let kept = groups(&rep, "target");
    assert_eq!(kept.len(), 1, "{out}");
    let (label, n) = kept.iter().next().unwrap();
    let caller = label.split(' ').next().unwrap();
    assert_eq!(
        label,
        &format!("{caller} at why.c:{}", lines[caller]),
        "{out}"
    );
    assert_eq!(*n, calls(caller), "{out}");
    let f = func(&rep, "target");
    let other = &f["groups_other"];
    assert_eq!(
        (num(other, "groups"), num(other, "count")),
        (2, 100 - n),
        "{out}"
    );
    // The one kept has at least as much time as each of the two folded.
    assert!(2 * num(&f["groups"][0], "total_ns") >= num(other, "total_ns"));

    let out = run(
        &["--by", "caller", "--top", "1", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    out.assert_success();
    let other = out
        .stdout
        .lines()
        .find(|l| l.starts_with("  other (2 groups) "))
        .unwrap_or_else(|| panic!("no other line\n{out}"));
    assert!(
        ["count 50 ", "count 70 ", "count 80 "]
            .iter()
            .any(|c| other.contains(c)),
        "{out}"
    );
}

/// A group map with room for 2 groups: the third caller's calls (its
/// call sites come last in each iteration) are counted as not grouped,
/// and said so, never dropped.
#[test]
fn a_full_map_counts_the_rest_as_not_grouped() {
    let _g = common::needs_root!();
    let small = [("TACHY_BY_GROUPS", "2")];
    let out = run(
        &["--json", "--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &small,
    );
    let rep = out.success_report();
    let lines = why_lines(&out);
    let at = |c: &str| format!("{c} at why.c:{}", lines[c]);
    assert_eq!(
        groups(&rep, "target"),
        map(&[(at("caller_one"), 50), (at("caller_two"), 30)]),
        "{out}"
    );
    let f = func(&rep, "target");
    let rest = &f["groups_not_kept"];
    assert_eq!(
        (num(rest, "count"), num(rest, "map_groups")),
        (20, 2),
        "{out}"
    );
    assert_eq!(num(f, "count"), 100, "{out}");

    let out = run(
        &["--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &small,
    );
    out.assert_success();
    assert!(
        out.stdout.lines().any(
            |l| l.starts_with("  not grouped: the map of 2 groups was full ")
                && l.contains("count 20 ")
        ),
        "{out}"
    );
}

/// The thread ids and names the by fixture printed, as `name tid`.
fn threads(out: &Outcome) -> Vec<String> {
    tagged(&out.fixture_text(), "tid")
        .into_iter()
        .map(|(name, tid)| format!("{name} {tid}"))
        .collect()
}

/// `--by tid` on a C++ method at -O2: each thread with its name and its
/// exact count.
#[test]
fn threads_have_names_and_exact_counts() {
    let _g = common::needs_root!();
    let out = run(
        &["--json", "--by", "tid", "grp::Table::scan"],
        "by",
        &["10", "2"],
        &[],
    );
    let rep = out.success_report();
    let t = threads(&out);
    let named = |prefix: &str| t.iter().find(|x| x.starts_with(prefix)).unwrap().clone();
    assert_eq!(
        groups(&rep, SCAN),
        map(&[
            (named("by "), 10),
            (named("by-worker-1 "), 10),
            (named("by-worker-2 "), 20)
        ]),
        "{out}"
    );
}

/// `--by caller --by tid` on the C++ method at -O2: the two call sites,
/// each with file:line, split by thread.
#[test]
fn callers_of_a_cpp_method_by_thread() {
    let _g = common::needs_root!();
    let out = run(
        &[
            "--json",
            "--by",
            "caller",
            "--by",
            "tid",
            "grp::Table::scan",
        ],
        "by",
        &["10", "2"],
        &[],
    );
    let rep = out.success_report();
    let text = out.fixture_text();
    let lines = tagged(&text, "line");
    let t = threads(&out);
    let named = |prefix: &str| t.iter().find(|x| x.starts_with(prefix)).unwrap().clone();
    let front = format!("grp::front(grp::Table&) at by.cpp:{}", lines["grp::front"]);
    let back = format!(
        "grp::back(grp::Table&, int) at by.cpp:{}",
        lines["grp::back"]
    );
    assert_eq!(
        groups(&rep, SCAN),
        map(&[
            (format!("{front}, {}", named("by ")), 10),
            (format!("{back}, {}", named("by-worker-1 ")), 10),
            (format!("{back}, {}", named("by-worker-2 ")), 20),
        ]),
        "{out}"
    );
}

/// `--by pid` on a path target: two processes running the fixture, each
/// with its exact count and its command.
#[test]
fn processes_of_a_path_target() {
    let _g = common::needs_root!();
    let exe = common::build("by");
    let mut a = Fixture::spawn("by", &["10", "2"]);
    let mut b = Fixture::spawn("by", &["5", "1"]);
    let spec = format!("{}:grp::Table::scan", exe.display());
    let mut t = Tachy::start(&["latency", "--json", "--by", "pid", &spec], &[]);
    t.wait_for_header(true);
    a.go();
    b.go();
    let (pa, pb) = (a.pid(), b.pid());
    let (sa, _) = a.wait();
    let (sb, _) = b.wait();
    assert!(sa.success() && sb.success());
    t.signal(libc::SIGINT);
    let out = t.finish(RUN_TIMEOUT);
    let rep = out.success_report();
    // 10 + 10 + 20 calls, and 5 + 5.
    assert_eq!(
        groups(&rep, SCAN),
        map(&[(format!("by {pa}"), 40), (format!("by {pb}"), 10)]),
        "{out}"
    );
}

/// System calls group by thread: the why fixture's target() sleeps with
/// clock_nanosleep, 100 times on its main thread.
#[test]
fn system_calls_by_thread() {
    let _g = common::needs_root!();
    let out = run(
        &["--json", "--by", "tid", "syscall:clock_nanosleep"],
        "why",
        &["callers", "10"],
        &[],
    );
    let rep = out.success_report();
    let g = groups(&rep, "syscall:clock_nanosleep");
    assert_eq!(g.len(), 1, "{out}");
    let (label, n) = g.iter().next().unwrap();
    assert!(label.starts_with("why "), "{out}");
    assert_eq!(*n, 100, "{out}");
}

/// Keys that mean nothing together, or for what is traced: one line,
/// exit status 2 for usage.
#[test]
fn nonsense_is_refused() {
    let _g = common::serial();
    let cases: [(&[&str], i32, &str); 4] = [
        (
            &["--by", "tid", "--by", "pid", "-p", "1", "f"],
            2,
            "--by tid and --by pid do not go together",
        ),
        (
            &["--by", "tid", "--by", "tid", "-p", "1", "f"],
            2,
            "--by tid is given twice",
        ),
        (&["--top", "3", "-p", "1", "f"], 2, "--by"),
        (
            &["--by", "col-our", "-p", "1", "f"],
            2,
            "is not a key to group by",
        ),
    ];
    for (args, code, text) in cases {
        let mut all = vec!["latency"];
        all.extend_from_slice(args);
        let out = Tachy::start(&all, &[]).finish(RUN_TIMEOUT);
        out.assert_no_panic();
        assert_eq!(out.code(), Some(code), "{out}");
        assert!(out.stderr.contains(text), "{out}");
    }
    if common::skip_unless_root() {
        return;
    }
    let out = run(
        &["--by", "caller", "syscall:clock_nanosleep"],
        "why",
        &["callers", "1"],
        &[],
    );
    // A usage error, found once the traced items are known.
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(
        out.stderr
            .contains("--by caller: a system call (syscall:clock_nanosleep) has no caller"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------
// --by argN and --by NAME: the by fixture's grp::Table::fetch(int key, long
// us) is called with key 7 30 times (20 on the main thread, 10 on
// "by-fetch"), 9 20 times (main), 1000 10 times (by-fetch); `this` is
// argument 0, key argument 1.
// ---------------------------------------------------------------------------

/// The fetch calls of the by fixture grouped by `keys` (`--by` each).
fn fetch_groups(keys: &[&str], more: &[&str]) -> (BTreeMap<String, u64>, Value, Outcome) {
    let mut opts = vec!["--json"];
    for k in keys {
        opts.extend(["--by", k]);
    }
    opts.extend_from_slice(more);
    opts.push("grp::Table::fetch");
    let out = run(&opts, "by", &["1", "1"], &[]);
    let rep = out.success_report();
    (groups(&rep, FETCH), rep, out)
}

fn counted(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// `--by arg1` and `--by key` (its DWARF name) give each value's exact
/// count, in JSON and text.
#[test]
fn argument_values_have_exact_counts() {
    let _g = common::needs_root!();
    let (g, rep, out) = fetch_groups(&["arg1"], &[]);
    assert_eq!(
        g,
        counted(&[("arg1 7", 30), ("arg1 9", 20), ("arg1 1000", 10)]),
        "{out}"
    );
    assert_eq!(num(func(&rep, FETCH), "count"), 60, "{out}");
    let (g, _, out) = fetch_groups(&["key"], &[]);
    assert_eq!(
        g,
        counted(&[("key 7", 30), ("key 9", 20), ("key 1000", 10)]),
        "{out}"
    );

    let out = run(
        &["-u", "--by", "key", "grp::Table::fetch"],
        "by",
        &["1", "1"],
        &[],
    );
    out.assert_success();
    let section = out
        .stdout
        .split_once("\nby key:\n")
        .unwrap_or_else(|| panic!("no by key section\n{out}"))
        .1;
    // By total time: 30 calls of 1 ms, 20 of 200 us, 10 of 50 us.
    let rows: Vec<&str> = section.lines().take(3).collect();
    for (row, (v, n)) in rows.iter().zip([("7", 30), ("9", 20), ("1000", 10)]) {
        assert!(
            row.starts_with(&format!("  key {v} ")) && row.contains(&format!(" count {n} ")),
            "{row:?}\n{out}"
        );
    }
}

/// `--top 1`: the value with the most time (key 7: 30 ms against 4.5 ms)
/// is kept; the two others are one "other (2 groups)" line of 30 calls.
#[test]
fn top_folds_argument_values() {
    let _g = common::needs_root!();
    let (g, rep, out) = fetch_groups(&["key"], &["--top", "1"]);
    assert_eq!(g, counted(&[("key 7", 30)]), "{out}");
    let other = &func(&rep, FETCH)["groups_other"];
    assert_eq!(
        (num(other, "groups"), num(other, "count")),
        (2, 30),
        "{out}"
    );
}

/// `--by key --by tid`: each value split by the thread that passed it.
#[test]
fn argument_values_by_thread() {
    let _g = common::needs_root!();
    let (g, _, out) = fetch_groups(&["key", "tid"], &[]);
    let t = threads(&out);
    let named = |prefix: &str| t.iter().find(|x| x.starts_with(prefix)).unwrap().clone();
    let (main, fetcher) = (named("by "), named("by-fetch "));
    assert_eq!(
        g,
        map(&[
            (format!("key 7, {main}"), 20),
            (format!("key 9, {main}"), 20),
            (format!("key 7, {fetcher}"), 10),
            (format!("key 1000, {fetcher}"), 10),
        ]),
        "{out}"
    );
}

/// A pointer (`this`) groups by address, shown in hex: the main thread's
/// table and the fetch thread's.
#[test]
fn pointers_group_by_address() {
    let _g = common::needs_root!();
    let (g, rep, out) = fetch_groups(&["this"], &[]);
    let mut n: Vec<u64> = g.values().copied().collect();
    n.sort();
    assert_eq!(n, [20, 40], "{out}");
    for grp in func(&rep, FETCH)["groups"].as_array().unwrap() {
        let v = &grp["this"];
        assert_eq!(
            v["hex"].as_str(),
            Some(format!("{:#x}", v["value"].as_u64().unwrap()).as_str()),
            "{out}"
        );
    }
}

/// A compiler clone by name: the args fixture's Table::scan is a
/// `.constprop.isra` clone that takes key in rdi, where the ABI would put
/// `this`; `args 1000` passes each key 0..9 100 times. `arg0` reads the
/// same register there, and says so.
#[test]
fn clones_group_where_their_dwarf_says() {
    let _g = common::needs_root!();
    let each = |key: &str| -> BTreeMap<String, u64> {
        (0..10).map(|v| (format!("{key} {v}"), 100)).collect()
    };
    let out = run(
        &["--json", "--by", "key", "Table::scan"],
        "args",
        &["1000"],
        &[],
    );
    let rep = out.success_report();
    let name = rep["functions"][0]["name"].as_str().unwrap().to_string();
    assert!(name.contains("[clone ."), "{out}");
    assert_eq!(groups(&rep, &name), each("key"), "{out}");
    let out = run(
        &["--json", "--by", "arg0", "Table::scan"],
        "args",
        &["1000"],
        &[],
    );
    let rep = out.success_report();
    assert_eq!(groups(&rep, &name), each("arg0"), "{out}");
    assert!(
        out.stderr.lines().any(|l| l.starts_with("tachy: note: ")
            && l.contains(": arg0 is register rdi of the clone")
            && l.ends_with("(its DWARF puts parameter key there)")),
        "{out}"
    );
}

/// System call arguments: the args fixture closes fds 1000..1009, 10
/// times each with `args 100`.
#[test]
fn system_call_arguments_group() {
    let _g = common::needs_root!();
    let out = run(
        &["--json", "--by", "arg0", "syscall:close"],
        "args",
        &["100"],
        &[],
    );
    let rep = out.success_report();
    let g = groups(&rep, "syscall:close");
    for fd in 1000..1010 {
        assert_eq!(g.get(&format!("arg0 {fd}")), Some(&10), "{fd}\n{out}");
    }
    // By the name the kernel's tracing gives close's argument.
    if !common::syscall_formats() {
        common::skip("--by fd on syscall:close: no syscall events in tracefs");
        return;
    }
    let out = run(
        &["--json", "--by", "fd", "syscall:close"],
        "args",
        &["100"],
        &[],
    );
    let rep = out.success_report();
    let g = groups(&rep, "syscall:close");
    for fd in 1000..1010 {
        assert_eq!(g.get(&format!("fd {fd}")), Some(&10), "{fd}\n{out}");
    }
}

/// An argument key that cannot be read: one line, exit status 2.
#[test]
fn unreadable_argument_keys_are_usage_errors() {
    let _g = common::serial();
    let exe = common::build("args");
    let nodebug = common::build("args_nodebug");
    let at = |obj: &std::path::Path, f: &str| format!("{}:{f}", obj.display());
    let first_line = |key: &str, target: &str| {
        let out =
            Tachy::start(&["latency", "--dry-run", "--by", key, target], &[]).finish(RUN_TIMEOUT);
        out.assert_no_panic();
        assert_eq!(out.code(), Some(2), "{out}");
        out.stderr.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(
        first_line("f", &at(&exe, "mixed")),
        "error: --by f: f of mixed(double, int) is floating point (double): tachy reads integers and pointers"
    );
    assert_eq!(
        first_line("p", &at(&exe, "by_point")),
        "error: --by p: p of by_point(Point, int) is passed by value as struct Point: tachy reads integers and pointers"
    );
    assert_eq!(
        first_line("v", &at(&nodebug, "pick")),
        "error: --by v: v: pick has no DWARF parameter information (built without -g?); name its arguments arg0 to arg5"
    );
    assert_eq!(
        first_line("key", &at(&exe, "pick")),
        "error: --by key: pick has no parameter named key (its parameters: v, w, name)"
    );
    assert_eq!(
        first_line("arg6", &at(&exe, "pick")),
        "error: invalid value 'arg6' for '--by <KEY>': arg6: only arg0 to arg5 (the six integer argument registers) can be read; name a later parameter by its DWARF name"
    );
    if common::syscall_formats() {
        assert_eq!(
            first_line("fds", "syscall:close"),
            "error: --by fds: syscall:close has no parameter named fds (its parameters: fd)"
        );
    }
}

/// pick's cheaper entry probe stands after an instruction that overwrites
/// rsi: `--by w` (rsi) moves it back to the function's first instruction,
/// as --filter does; `--by v` (rdi) leaves it.
#[test]
fn entry_moves_back_for_an_overwritten_register() {
    let _g = common::serial();
    let exe = common::build("args");
    let entry = |key: &str| {
        let out = Tachy::start(
            &[
                "latency",
                "--dry-run",
                "--by",
                key,
                &format!("{}:pick", exe.display()),
            ],
            &[],
        )
        .finish(RUN_TIMEOUT);
        out.assert_success();
        let text = out.fixture_text();
        let func_at = text
            .lines()
            .find_map(|l| l.split(" at 0x").nth(1)?.split(' ').next())
            .unwrap_or_else(|| panic!("{out}"))
            .to_string();
        let entry_at = text
            .lines()
            .find(|l| l.trim_start().starts_with("entry [0]"))
            .and_then(|l| l.rsplit("(0x").next())
            .and_then(|r| r.split(')').next())
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{out}"));
        assert!(
            text.lines()
                .any(|l| l.starts_with("  [0] --by, at entry: ")),
            "{out}"
        );
        (func_at, entry_at)
    };
    let (f, e) = entry("w");
    assert_eq!(f, e);
    let (f, e) = entry("v");
    assert_ne!(f, e);
}

/// `tachy nested --by caller`: the traced function's calls grouped as
/// `latency --by caller` groups them (the why fixture's three callers,
/// exact counts), in its root, beside its call sites; and as a table under
/// the tree in text.
#[test]
fn nested_groups_the_root_by_caller() {
    let _g = common::needs_root!();
    let out = run_fixture(
        "nested",
        &["--json", "--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    let rep = out.success_report();
    let root = &rep["roots"][0];
    assert_eq!(root["name"], "target", "{out}");
    assert_eq!(num(root, "count"), 100, "{out}");
    let flat = serde_json::json!({ "functions": [root] });
    assert_eq!(groups(&flat, "target"), why_callers(&out, 10), "{out}");

    let out = run_fixture(
        "nested",
        &["--by", "caller", "target"],
        "why",
        &["callers", "10"],
        &[],
    );
    assert!(out.stdout.contains("\ncalled from:\n"), "{out}");
    for (caller, n) in why_callers(&out, 10) {
        let (name, _) = caller.split_once(" at ").unwrap();
        assert!(
            out.stdout
                .lines()
                .any(|l| l.contains(name) && l.contains(&format!("count {n:>2} "))),
            "{caller}: {n}\n{out}"
        );
    }
}
