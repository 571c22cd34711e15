//! Argument operands and `--filter` on the `args` fixture (g++ -O2 -g):
//! where each parameter is at each function's entry, read from the
//! function's own DWARF, compiler clones included; then (as root) exact
//! counts of calls a filter keeps and rejects.

mod common;

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
        "f of mixed(double, int) is floating point (double): filters compare integers and pointers"
    );
    assert_eq!(
        err(&one("by_point"), "p"),
        "p of by_point(Point, int) is passed by value as struct Point: filters compare integers and pointers"
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
