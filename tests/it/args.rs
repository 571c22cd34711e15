//! Argument operands and `--filter` on the `args` fixture (g++ -O2 -g):
//! where each parameter is at each function's entry, read from the
//! function's own DWARF, compiler clones included; then (as root) exact
//! counts of calls a filter keeps and rejects.

use crate::common;

use tachy::plan::args::{ArgRef, FuncArgs, Source};
use tachy::symbols::{self, ElfObject, Function, Pattern};

/// The functions `pattern` matches in the fixture, with their operands.
fn func_args(fixture: &str, pattern: &str) -> Vec<FuncArgs> {
    let path = common::build(fixture);
    let obj = ElfObject::open(&path, &path).unwrap();
    let found = symbols::find(&obj, &Pattern::parse(pattern).unwrap()).unwrap();
    assert!(!found.functions.is_empty(), "{pattern} not in {fixture}");
    let funcs: Vec<(&Function, u64)> = found.functions.iter().map(|f| (f, f.addr)).collect();
    FuncArgs::for_functions(&obj, &funcs)
}

fn one(pattern: &str) -> FuncArgs {
    let mut v = func_args("args", pattern);
    assert_eq!(v.len(), 1, "{pattern}");
    v.remove(0)
}

fn reg(f: &FuncArgs, arg: &str) -> (Source, u8, bool) {
    let op = f
        .resolve(&ArgRef::parse(arg).unwrap())
        .unwrap_or_else(|e| panic!("{}: {arg}: {e:#}", f.name));
    (op.source, op.size, op.signed)
}

fn err(f: &FuncArgs, arg: &str) -> String {
    f.resolve(&ArgRef::parse(arg).unwrap())
        .map(|op| panic!("{}: {arg} resolved to {op:?}", f.name))
        .unwrap_err()
        .to_string()
}

const RDI: Source = Source::Reg(7);
const RSI: Source = Source::Reg(6);
const RDX: Source = Source::Reg(2);

#[test]
fn plain_functions_and_methods_follow_the_abi() {
    let _g = common::serial();
    let pick = one("pick");
    assert_eq!(reg(&pick, "v"), (RDI, 4, true));
    assert_eq!(reg(&pick, "w"), (RSI, 8, true));
    assert_eq!(reg(&pick, "name"), (RDX, 8, false));
    assert_eq!(reg(&pick, "arg0"), (RDI, 4, true));
    let get = one("Store::get");
    assert_eq!(reg(&get, "this"), (RDI, 8, false));
    assert_eq!(reg(&get, "key"), (RSI, 4, true));
    assert_eq!(reg(&get, "limit"), (RDX, 8, false));
    assert_eq!(reg(&get, "arg1"), (RSI, 4, true));
    // After a double (in xmm0), k is the first integer argument.
    assert_eq!(reg(&one("mixed"), "k"), (RDI, 4, true));
    assert_eq!(
        err(&get, "nokey"),
        "Store::get(int, unsigned long) has no parameter named nokey (its parameters: this, key, limit)"
    );
}

#[test]
fn floats_and_structs_by_value_are_refused() {
    let _g = common::serial();
    assert_eq!(
        err(&one("mixed"), "f"),
        "f of mixed(double, int) is floating point (double): tachy reads integers and pointers"
    );
    assert_eq!(
        err(&one("by_point"), "p"),
        "p of by_point(Point, int) is passed by value as struct Point: tachy reads integers and pointers"
    );
}

/// `Table::scan` never reads `this`: its clone takes `key` in rdi, where
/// the ABI would put `this`.
#[test]
fn clones_are_read_where_their_own_dwarf_says() {
    let _g = common::serial();
    let scan = one("Table::scan");
    assert!(scan.name.contains("[clone"), "{}", scan.name);
    assert_eq!(reg(&scan, "key"), (RDI, 4, true));
    let e = err(&scan, "this");
    assert!(
        e.starts_with("this of (anonymous namespace)::Table::scan(int) [clone"),
        "{e}"
    );
    assert!(e.ends_with("it has no value at the entry"), "{e}");
    let op = scan.resolve(&ArgRef::Index(0)).unwrap();
    assert_eq!(op.source, RDI);
    let note = op.note.unwrap();
    assert!(
        note.contains(": arg0 is register rdi of the clone")
            && note.ends_with("(its DWARF puts parameter key there)"),
        "{note}"
    );
    let scaled = one("scaled");
    assert_eq!(reg(&scaled, "key"), (RDI, 4, true));
    let e = err(&scaled, "factor");
    assert!(e.contains("is the constant 3 in this clone"), "{e}");
}

#[test]
fn names_need_dwarf() {
    let _g = common::serial();
    let v = func_args("args_nodebug", "pick");
    assert_eq!(
        v[0].resolve(&ArgRef::parse("v").unwrap()).unwrap_err().to_string(),
        "v: pick has no DWARF parameter information (built without -g?); name its arguments arg0 to arg5"
    );
    // argN still reads the register, whole.
    let op = v[0].resolve(&ArgRef::Index(1)).unwrap();
    assert_eq!((op.source, op.size, op.signed), (RSI, 8, true));
}

// ---------------------------------------------------------------------------
// --filter, end to end: `args 1000` calls each function with v = i % 10,
// so each value of v comes 100 times.
// ---------------------------------------------------------------------------

use std::collections::BTreeMap;
use std::time::Duration;

use common::run::{Outcome, Tachy};

const ITERATIONS: &str = "1000";
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn tachy(args: &[&str]) -> Outcome {
    Tachy::start(args, &[("FIXTURE_NO_WAIT", "1")]).finish(RUN_TIMEOUT)
}

/// Per function whose name starts with a key of `names`: (calls timed,
/// calls the filter rejected), from `tachy latency --json --filter EXPR`.
fn filtered(expr: &str, funcs: &[&str]) -> (BTreeMap<String, (u64, u64)>, Outcome) {
    let exe = common::build("args");
    let mut args = vec!["latency", "--json", "--filter", expr];
    args.extend_from_slice(funcs);
    args.extend(["--", exe.to_str().unwrap(), ITERATIONS]);
    let out = tachy(&args);
    out.assert_success();
    let mut counts = BTreeMap::new();
    for f in out.single_report()["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap().to_string();
        let count = f["count"].as_u64().unwrap();
        let rejected = f["filtered_by_args"]
            .as_u64()
            .unwrap_or_else(|| panic!("no filtered_by_args in {f}\n{out}"));
        counts.insert(name, (count, rejected));
    }
    (counts, out)
}

/// (timed, rejected) of the one function traced.
fn only(expr: &str, func: &str) -> (u64, u64) {
    let (c, out) = filtered(expr, &[func]);
    assert_eq!(c.len(), 1, "{out}");
    *c.values().next().unwrap()
}

#[test]
fn comparisons_keep_exact_counts() {
    let _g = common::needs_root!();
    assert_eq!(only("v == 3", "pick"), (100, 900));
    assert_eq!(only("arg0 < 4", "pick"), (400, 600));
    assert_eq!(only("v != 0", "pick"), (900, 100));
    assert_eq!(only("v >= 2 && w < 500", "pick"), (300, 700));
    assert_eq!(only("v == 1 || v == 8", "pick"), (200, 800));
    assert_eq!(only("(v == 1 || 2 == v) && name != 0", "pick"), (200, 800));
    assert_eq!(only("v > 0x8", "pick"), (100, 900));
}

/// An int's upper register bits are not the caller's to set: -3 is -3.
#[test]
fn negative_and_unsigned_values() {
    let _g = common::needs_root!();
    assert_eq!(only("n == -3", "narrow"), (100, 900));
    assert_eq!(only("n < -7", "narrow"), (200, 800));
    assert_eq!(only("arg0 <= -8", "narrow"), (200, 800));
    assert_eq!(only("limit >= 5000", "Store::get"), (500, 500));
}

#[test]
fn methods_clones_and_ids() {
    let _g = common::needs_root!();
    // `this` is arg0 of a method; key is arg1.
    assert_eq!(only("this != 0 && key > 6", "Store::get"), (300, 700));
    assert_eq!(only("arg1 == 9", "Store::get"), (100, 900));
    // The clone takes key in rdi: by name and as arg0.
    assert_eq!(only("key == 4", "Table::scan"), (100, 900));
    let (c, out) = filtered("arg0 == 4", &["Table::scan"]);
    assert_eq!(c.values().next(), Some(&(100, 900)), "{out}");
    assert!(
        out.stderr.lines().any(|l| {
            l
            == "tachy: note: (anonymous namespace)::Table::scan(int) [clone .constprop.0.isra.0]: \
                arg0 is register rdi of the clone .constprop.0.isra.0, which may drop or reorder \
                parameters (its DWARF puts parameter key there)"
        }),
        "{out}"
    );
    assert_eq!(only("key == 7", "scaled"), (100, 900));
    assert_eq!(only("pid == 1", "pick"), (0, 1000));
    assert_eq!(only("tid > 0 && pid > 0", "pick"), (1000, 0));
}

/// One expression, two functions: `key` is rsi of the method and rdi of
/// the clone, each read where it is.
#[test]
fn each_function_gets_its_own_operands() {
    let _g = common::needs_root!();
    let (c, out) = filtered("key == 2 || key == 5", &["Store::get", "Table::scan"]);
    assert_eq!(c.len(), 2, "{out}");
    for (name, counts) in &c {
        assert_eq!(*counts, (200, 800), "{name}\n{out}");
    }
}

#[test]
fn system_call_arguments() {
    let _g = common::needs_root!();
    let (c, out) = filtered("arg0 == 1003 || arg0 == 1009", &["syscall:close"]);
    let (timed, rejected) = c["syscall:close"];
    assert_eq!(timed, 200, "{out}");
    // The other 800 calls, and whatever the loader closed.
    assert!(rejected >= 800, "{out}");
    // close(unsigned int fd), as the kernel's tracing names it.
    if !common::syscall_formats() {
        common::skip("--filter on fd of syscall:close: no syscall events in tracefs");
        return;
    }
    let (c, out) = filtered("fd == 1003 || fd == 1009", &["syscall:close"]);
    let (timed, rejected) = c["syscall:close"];
    assert_eq!(timed, 200, "{out}");
    assert!(rejected >= 800, "{out}");
}

#[test]
fn nested_times_only_the_calls_kept() {
    let _g = common::needs_root!();
    let exe = common::build("args");
    let out = tachy(&[
        "nested",
        "--json",
        "--filter",
        "key == 6",
        "Store::get",
        "--",
        exe.to_str().unwrap(),
        ITERATIONS,
    ]);
    out.assert_success();
    let r = out.single_report();
    let root = &r["roots"][0];
    assert_eq!(root["count"].as_u64(), Some(100), "{out}");
    assert_eq!(root["filtered_by_args"].as_u64(), Some(900), "{out}");
}

/// The first line of a usage error, and exit status 2.
fn usage_error(args: &[&str]) -> String {
    let out = tachy(args);
    assert_eq!(out.code(), Some(2), "{out}");
    out.assert_no_panic();
    out.stderr.lines().next().unwrap_or_default().to_string()
}

#[test]
fn bad_filters_are_usage_errors() {
    let _g = common::serial();
    let exe = common::build("args");
    let nodebug = common::build("args_nodebug");
    let at = |f: &str| format!("{}:{f}", exe.display());
    let dry = |expr: &str, func: &str| {
        usage_error(&["latency", "--dry-run", "--filter", expr, &at(func)])
    };
    assert_eq!(
        dry("f > 1", "mixed"),
        "error: f of mixed(double, int) is floating point (double): tachy reads integers and pointers"
    );
    assert_eq!(
        dry("p == 1", "by_point"),
        "error: p of by_point(Point, int) is passed by value as struct Point: tachy reads integers and pointers"
    );
    assert_eq!(
        dry("key == 1", "pick"),
        "error: pick has no parameter named key (its parameters: v, w, name)"
    );
    assert_eq!(
        dry("this == 0", "Table::scan"),
        "error: this of (anonymous namespace)::Table::scan(int) [clone .constprop.0.isra.0] was \
         optimized out of this clone .constprop.0.isra.0: it has no value at the entry"
    );
    assert_eq!(
        dry("factor == 3", "scaled"),
        "error: factor of (anonymous namespace)::scaled(int, int) [clone .constprop.0.isra.0] is \
         the constant 3 in this clone .constprop.0.isra.0: every call passes the same value"
    );
    assert_eq!(
        dry("v > 70000000000", "pick"),
        "error: --filter: v cannot be 70000000000 (v (rdi, int) is signed, 32 bits)"
    );
    assert_eq!(
        usage_error(&[
            "latency",
            "--dry-run",
            "--filter",
            "v == 1",
            &format!("{}:pick", nodebug.display())
        ]),
        "error: v: pick has no DWARF parameter information (built without -g?); name its arguments arg0 to arg5"
    );
    assert_eq!(
        dry("v => 1", "pick"),
        "error: invalid value 'v => 1' for '--filter <EXPR>': invalid --filter \"v => 1\": column 3: '=' is not a comparison: use =="
    );
    assert_eq!(
        dry("v == 1 &&", "pick"),
        "error: invalid value 'v == 1 &&' for '--filter <EXPR>': invalid --filter \"v == 1 &&\": column 10: unexpected end: expected an argument or an integer"
    );
}

/// --dry-run shows each function's expression as it will be read.
#[test]
fn dry_run_shows_the_resolved_filter() {
    let _g = common::serial();
    let exe = common::build("args");
    let out = tachy(&[
        "latency",
        "--dry-run",
        "--filter",
        "key == 3 && limit < 0x100",
        &format!("{}:Store::get", exe.display()),
    ]);
    out.assert_success();
    assert!(
        out.stderr.lines().chain(out.stdout.lines()).any(|l| l
            == "  [0] --filter, at entry: key (rsi, int) == 3 && limit (rdx, long unsigned int) < 256"),
        "{out}"
    );
}

/// The address of the traced function and of its entry probe, from
/// `--dry-run`.
fn entry_of(expr: &str, func: &str) -> (String, String) {
    let exe = common::build("args");
    let out = tachy(&[
        "latency",
        "--dry-run",
        "--filter",
        expr,
        &format!("{}:{func}", exe.display()),
    ]);
    out.assert_success();
    let text = out.stdout.clone();
    let func_at = text
        .lines()
        .find_map(|l| l.split(" at 0x").nth(1))
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("{out}"));
    let entry_at = text
        .lines()
        .find(|l| l.trim_start().starts_with("entry [0]"))
        .and_then(|l| l.rsplit("(0x").next())
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("{out}"));
    (func_at.to_string(), entry_at.to_string())
}

/// pick's entry probe stands after `add %rax,%rsi` (a cheaper place):
/// reading w (rsi) moves it back to the first instruction; reading v
/// (rdi, untouched) leaves it.
#[test]
fn entry_moves_back_when_an_argument_is_overwritten_before_it() {
    let _g = common::serial();
    let (f, e) = entry_of("w < 500", "pick");
    assert_eq!(f, e);
    let (f, e) = entry_of("v < 5", "pick");
    assert_ne!(f, e);
}
