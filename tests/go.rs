//! Go programs: names as Go prints them (from `.symtab`, and from
//! `.gopclntab` in a stripped build), and, as root, exact counts and true
//! durations with goroutines that grow their stacks, panic, and move
//! between threads. The fixture is `tests/fixtures/gowork.go`, built with
//! the Go toolchain at test time; without `go` these tests skip, saying so.

mod common;

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
