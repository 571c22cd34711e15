//! Integration tests of `tachy list`: which functions a pattern matches, in
//! a file or in a running process, with addresses, fragments and exits.
//! Needs no probes (and no root), but takes the `common::serial()` lock like
//! the other tachy tests.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Fixture, CPP_LOOKUP_STR};

/// Runs tachy with `args`, killing it after 30 s.
fn tachy(args: &[&str]) -> Output {
    let mut child = Command::new(common::tachy())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start tachy");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "tachy {args:?} did not finish in time\n--- stdout ---\n{}\n--- stderr ---\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn show(args: &[&str], out: &Output) -> String {
    format!(
        "command: tachy {}\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `tachy list ARGS`, asserting exit 0, empty stderr and no panic;
/// returns stdout.
fn list_ok(args: &[&str]) -> String {
    let mut all = vec!["list"];
    all.extend_from_slice(args);
    let out = tachy(&all);
    let text = show(&all, &out);
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(out.stderr.is_empty(), "{text}");
    String::from_utf8(out.stdout).unwrap()
}

/// One object's part of the listing.
#[derive(Debug)]
struct Listed {
    /// The `OBJECT (symbols from SOURCE):` line.
    header: String,
    /// (function name, detail line, language) in listing order.
    funcs: Vec<(String, String, String)>,
}

/// Parses `tachy list` output: object header lines at column 0, function
/// names indented by 2, their details indented by 4.
fn parse_list(stdout: &str) -> Vec<Listed> {
    let mut out: Vec<Listed> = Vec::new();
    let mut lines = stdout.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.starts_with(' ') {
            assert!(
                line.ends_with("):") && line.contains(" (symbols from "),
                "{line:?}"
            );
            out.push(Listed {
                header: line.to_string(),
                funcs: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("  ").filter(|n| !n.starts_with(' ')) {
            // `NAME  (LANG)`
            let (name, lang) = rest
                .rsplit_once("  (")
                .and_then(|(n, l)| Some((n, l.strip_suffix(')')?)))
                .unwrap_or_else(|| panic!("function line {line:?} is not `  NAME  (LANG)`"));
            assert!(matches!(lang, "c" | "c++" | "rust"), "{line:?}");
            let detail = lines
                .next()
                .unwrap_or_else(|| panic!("no detail line after {line:?}"));
            assert!(detail.starts_with("    address 0x"), "{detail:?}");
            // What a call costs in probe hits ends the line (a function
            // without a way out, as `_start`, has none).
            let detail = match detail.split_once("  price per call: ") {
                Some((d, price)) => {
                    assert!(price.contains("entry "), "{price:?}");
                    d
                }
                None => detail,
            };
            out.last_mut()
                .expect("function before any object line")
                .funcs
                .push((name.to_string(), detail.to_string(), lang.to_string()));
        } else {
            panic!("unexpected list line {line:?}\n{stdout}");
        }
    }
    out
}

/// The address in a detail line.
fn detail_addr(detail: &str) -> u64 {
    let hex = detail
        .strip_prefix("    address 0x")
        .and_then(|s| s.split(' ').next())
        .unwrap();
    u64::from_str_radix(hex, 16).unwrap()
}

/// Function symbols whose demangled name starts with `prefix`, from `nm -C`
/// (text symbols only, without `.cold` parts): name -> address.
fn nm_functions(file: &Path, prefix: &str) -> BTreeMap<String, u64> {
    let out = Command::new("nm").arg("-C").arg(file).output().expect("nm");
    assert!(out.status.success());
    let mut map = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let mut it = line.splitn(3, ' ');
        let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if !matches!(kind, "t" | "T" | "W" | "w") || !name.starts_with(prefix) {
            continue;
        }
        if name.ends_with("[clone .cold]") {
            continue;
        }
        map.insert(name.to_string(), u64::from_str_radix(addr, 16).unwrap());
    }
    map
}

/// Checks a `shop::*` listing against nm: every shop function exactly once,
/// at nm's address.
fn check_all_shop(fixture: &str) -> BTreeMap<String, String> {
    let bin = common::build(fixture);
    let path = bin.to_str().unwrap();
    let stdout = list_ok(&[path, "shop::*"]);
    let objs = parse_list(&stdout);
    assert_eq!(objs.len(), 1, "{stdout}");
    assert_eq!(objs[0].header, format!("{path} (symbols from .symtab):"));
    let names: Vec<&str> = objs[0].funcs.iter().map(|(n, _, _)| n.as_str()).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(
        unique.len(),
        names.len(),
        "a function is listed twice:\n{stdout}"
    );
    let nm = nm_functions(&bin, "shop::");
    assert_eq!(
        unique,
        nm.keys().map(|s| s.as_str()).collect::<BTreeSet<_>>(),
        "listed functions differ from nm's\n{stdout}"
    );
    for (name, detail, lang) in &objs[0].funcs {
        assert_eq!(lang, "c++", "{name}");
        assert_eq!(detail_addr(detail), nm[name], "address of {name}: {detail}");
        assert!(
            !name.contains(".cold"),
            "cold part listed as a function: {name}"
        );
        assert!(detail.contains("  entry "), "{detail}");
        assert!(detail.contains("  exits: "), "{detail}");
    }
    objs[0]
        .funcs
        .iter()
        .map(|(n, d, _)| (n.clone(), d.clone()))
        .collect()
}

#[test]
fn list_cpp_o2_shop_functions() {
    let _lock = common::serial();
    let funcs = check_all_shop("cpp_o2");
    for want in [
        "shop::Store::lookup(int)",
        CPP_LOOKUP_STR,
        "shop::Pool<shop::Conn>::acquire()",
        "shop::validate(int)",
        "shop::forward(int)",
        "shop::target(int)",
        "shop::recurse(int)",
        "shop::risky(int)",
        "shop::maybe_throw(int)",
    ] {
        assert!(funcs.contains_key(want), "{want} not listed: {funcs:#?}");
    }
    // checksum exists only as its IPA clone, named with the clone suffix.
    let checksums: Vec<&String> = funcs
        .keys()
        .filter(|n| n.starts_with("shop::checksum("))
        .collect();
    assert_eq!(
        checksums,
        vec!["shop::checksum(shop::Buffer const&, unsigned int) [clone .constprop.0]"]
    );
    // validate has its .cold part as a fragment.
    let validate = &funcs["shop::validate(int)"];
    assert!(validate.contains("  fragments 1  "), "{validate}");
    // forward ends in a tail call and has no ret of its own.
    let forward = &funcs["shop::forward(int)"];
    assert!(
        forward.ends_with("exits: 0 ret, tail call to shop::target(int)"),
        "{forward}"
    );
    // Functions without a cold part have no fragments.
    assert!(!funcs["shop::target(int)"].contains("fragments"));
    assert!(funcs["shop::recurse(int)"].ends_with("exits: 1 ret"));
}

#[test]
fn list_cpp_o0_shop_functions() {
    let _lock = common::serial();
    let funcs = check_all_shop("cpp_o0");
    assert!(
        funcs.contains_key("shop::checksum(shop::Buffer const&, unsigned int)"),
        "{funcs:#?}"
    );
    assert!(funcs.keys().all(|n| !n.contains("[clone")), "{funcs:#?}");
    // At -O0 forward calls target and returns normally.
    let forward = &funcs["shop::forward(int)"];
    assert!(forward.ends_with("exits: 1 ret"), "{forward}");
}

#[test]
fn list_path_colon_pattern_and_overloads() {
    let _lock = common::serial();
    let bin = common::build("cpp_o2");
    let path = bin.to_str().unwrap();
    let spec = format!("{path}:shop::Store::lookup");
    let objs = parse_list(&list_ok(&[&spec]));
    let names: Vec<&str> = objs[0].funcs.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names.len(), 2, "{objs:#?}");
    assert!(names.contains(&"shop::Store::lookup(int)"));
    assert!(names.contains(&CPP_LOOKUP_STR));

    // Parameters pick one overload; spaces in them do not matter.
    for pat in ["shop::Store::lookup(int)", "Store::lookup( int )"] {
        let objs = parse_list(&list_ok(&[path, pat]));
        let names: Vec<&str> = objs[0].funcs.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, vec!["shop::Store::lookup(int)"], "{pat}");
    }
}

/// A fixture-like process started from `exe` that waits on stdin.
struct Waiting {
    child: Child,
}

impl Waiting {
    fn spawn(exe: &Path) -> Waiting {
        let mut child = Command::new(exe)
            .args(["1", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), format!("ready {}", child.id()));
        Waiting { child }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn list_in_process_libc_and_libraries() {
    let _lock = common::serial();
    let mut fx = Fixture::spawn("cpp_o2", &["1", "1"]);
    let pid = fx.pid().to_string();

    // c:malloc finds malloc in the libc the process maps.
    let objs = parse_list(&list_ok(&["-p", &pid, "c:malloc"]));
    assert_eq!(objs.len(), 1, "{objs:#?}");
    let obj = objs[0].header.split(" (symbols from ").next().unwrap();
    let base = Path::new(obj).file_name().unwrap().to_str().unwrap();
    assert!(
        base.starts_with("libc.so") || base.starts_with("libc-"),
        "{objs:#?}"
    );
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains(obj), "{obj} is not mapped by {pid}");
    assert!(
        objs[0].funcs.iter().any(|(n, _, _)| n == "malloc"),
        "{objs:#?}"
    );

    // A bare name is looked up in the executable first...
    let exe = std::fs::canonicalize(common::build("cpp_o2")).unwrap();
    let objs = parse_list(&list_ok(&["-p", &pid, "shop::risky"]));
    assert_eq!(objs.len(), 1);
    assert!(
        objs[0]
            .header
            .starts_with(&format!("{} (symbols from ", exe.display())),
        "{objs:#?}"
    );
    assert_eq!(objs[0].funcs[0].0, "shop::risky(int)");
    // ...then in the libraries it maps.
    let lib = std::fs::canonicalize(common::build("libfixture.so")).unwrap();
    let objs = parse_list(&list_ok(&["-p", &pid, "fixture_io"]));
    assert_eq!(objs.len(), 1, "{objs:#?}");
    assert!(
        objs[0]
            .header
            .starts_with(&format!("{} (symbols from ", lib.display())),
        "{objs:#?}"
    );
    assert_eq!(objs[0].funcs.len(), 1);
    assert_eq!(objs[0].funcs[0].0, "fixture_io");
    assert_eq!(objs[0].funcs[0].2, "c");

    // The process is unaffected.
    fx.go();
    let (status, _) = fx.wait();
    assert!(status.success());
}

#[test]
fn list_bare_name_in_process_with_stripped_executable() {
    let _lock = common::serial();
    // A stripped copy of the C fixture: no .symtab, and its .dynsym holds
    // only imports, so malloc can only be found in libc.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("list-stripped");
    std::fs::create_dir_all(&dir).unwrap();
    let stripped = dir.join(format!("plain-stripped-{}", std::process::id()));
    let st = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(common::build("plain"))
        .status()
        .expect("strip");
    assert!(st.success());
    let proc_ = Waiting::spawn(&stripped);
    let pid = proc_.child.id().to_string();

    // "with -p a bare name is looked up in the executable, then in the
    // libraries it maps" (tachy latency --help).
    let args = ["list", "-p", pid.as_str(), "malloc"];
    let out = tachy(&args);
    let text = show(&args, &out);
    drop(proc_);
    let _ = std::fs::remove_file(&stripped);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let objs = parse_list(&String::from_utf8_lossy(&out.stdout));
    assert!(
        objs.iter()
            .any(|o| o.header.contains("libc.so") && o.funcs.iter().any(|(n, _, _)| n == "malloc")),
        "{text}"
    );
}

#[test]
fn list_rust_names() {
    let _lock = common::serial();
    // Legacy mangling: the two instantiations share one demangled name.
    let legacy = common::build("rust_app");
    let objs = parse_list(&list_ok(&[legacy.to_str().unwrap(), "rust_app::engine::*"]));
    assert!(objs[0].funcs.iter().all(|f| f.2 == "rust"), "{objs:#?}");
    let names: Vec<&str> = objs[0].funcs.iter().map(|(n, _, _)| n.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec![
            "rust_app::engine::explode",
            "rust_app::engine::guarded",
            "rust_app::engine::process",
            "rust_app::engine::transform",
            "rust_app::engine::transform",
        ]
    );

    // v0 mangling: the instantiations have distinct names...
    let v0 = common::build("rust_app_v0");
    let v0 = v0.to_str().unwrap();
    let objs = parse_list(&list_ok(&[v0, "rust_app::engine::transform"]));
    let mut names: Vec<&str> = objs[0].funcs.iter().map(|(n, _, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "rust_app::engine::transform::<alloc::string::String>",
            "rust_app::engine::transform::<u32>",
        ]
    );
}

#[test]
fn list_rust_v0_instantiation_by_its_listed_name() {
    let _lock = common::serial();
    // ...and the name tachy lists for one instantiation selects just it
    // ("Functions are matched by demangled name").
    let v0 = common::build("rust_app_v0");
    let v0 = v0.to_str().unwrap();
    for name in [
        "rust_app::engine::transform::<u32>",
        "rust_app::engine::transform::<alloc::string::String>",
    ] {
        let objs = parse_list(&list_ok(&[v0, name]));
        let names: Vec<&str> = objs[0].funcs.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, vec![name]);
    }
}

#[test]
fn list_plain_c_functions() {
    let _lock = common::serial();
    let bin = common::build("plain");
    let path = bin.to_str().unwrap();
    for name in ["slow_sum", "fast_path", "mix_local"] {
        let objs = parse_list(&list_ok(&[path, name]));
        assert_eq!(objs.len(), 1);
        assert_eq!(objs[0].funcs.len(), 1, "{objs:#?}");
        assert_eq!(objs[0].funcs[0].0, name);
        assert_eq!(objs[0].funcs[0].2, "c");
    }
    let objs = parse_list(&list_ok(&[path, "*_*"]));
    let names: BTreeSet<&str> = objs[0].funcs.iter().map(|(n, _, _)| n.as_str()).collect();
    for name in ["slow_sum", "fast_path", "mix_local"] {
        assert!(names.contains(name), "{names:?}");
    }
}

/// System calls and kernel functions are listed by name (from the system
/// call table and /proc/kallsyms); a bare name no object has is the
/// kernel's.
#[test]
fn list_system_calls_and_kernel_functions() {
    let _lock = common::serial();
    assert_eq!(
        list_ok(&["syscall:pread*"]),
        "system calls (timed from sys_enter to sys_exit):\n  syscall:pread64  number 17\n  \
         syscall:preadv  number 295\n  syscall:preadv2  number 327\n"
    );
    let line = "  k:vfs_read  timed by fentry/fexit where the kernel allows, else a kprobe and kretprobe\n";
    let want = format!("kernel (functions from /proc/kallsyms):\n{line}");
    assert_eq!(list_ok(&["k:vfs_read"]), want);
    assert_eq!(list_ok(&["vfs_read"]), want);
}

/// Names of the functions `tachy list FILE PATTERN` prints.
fn listed_names(file: &str, pattern: &str) -> Vec<String> {
    let objs = parse_list(&list_ok(&[file, pattern]));
    let mut names: Vec<String> = objs
        .iter()
        .flat_map(|o| o.funcs.iter().map(|(n, _, _)| n.clone()))
        .collect();
    names.sort();
    names
}

/// Rust paths written as legacy demangling and backtraces show them match
/// v0's inherent impls (`<m::Db>::get`), and `Trait::method` and
/// `Type::method` both match `<Type as Trait>::method`, in both manglings.
#[test]
fn list_rust_methods_in_both_manglings() {
    let _lock = common::serial();
    let legacy = common::build("rust_names");
    let v0 = common::build("rust_names_v0");
    let (legacy, v0) = (legacy.to_str().unwrap(), v0.to_str().unwrap());
    let get_v0 = "<rust_names::store::Db>::get";
    let get_legacy = "rust_names::store::Db::get";
    for pat in ["rust_names::store::Db::get", "store::Db::get", "Db::get"] {
        assert_eq!(listed_names(v0, pat), vec![get_v0], "{pat}");
        assert_eq!(listed_names(legacy, pat), vec![get_legacy], "{pat}");
    }
    assert_eq!(listed_names(v0, get_v0), vec![get_v0]);

    let find = "<rust_names::store::Db as rust_names::store::Lookup>::find";
    for pat in [
        "rust_names::store::Lookup::find",
        "rust_names::store::Db::find",
        "Lookup::find",
        "Db::find",
        find,
    ] {
        assert_eq!(listed_names(v0, pat), vec![find], "{pat}");
        assert_eq!(listed_names(legacy, pat), vec![find], "{pat}");
    }

    // Every method of Db, inherent and trait.
    assert_eq!(
        listed_names(v0, "rust_names::store::Db::*"),
        vec![find, get_v0]
    );
    assert_eq!(
        listed_names(legacy, "rust_names::store::Db::*"),
        vec![find, get_legacy]
    );

    // A generic impl's method: every instance, or one by its arguments.
    let peek = "rust_names::store::Wrapper::peek";
    assert_eq!(
        listed_names(v0, peek),
        vec![
            "<rust_names::store::Wrapper<alloc::string::String>>::peek",
            "<rust_names::store::Wrapper<u32>>::peek",
        ]
    );
    assert_eq!(
        listed_names(v0, "rust_names::store::Wrapper<u32>::peek"),
        vec!["<rust_names::store::Wrapper<u32>>::peek"]
    );
    assert_eq!(
        listed_names(legacy, peek),
        vec![
            "rust_names::store::Wrapper<T>::peek",
            "rust_names::store::Wrapper<T>::peek"
        ]
    );
    // A generic function.
    assert_eq!(
        listed_names(v0, "rust_names::store::largest"),
        vec!["rust_names::store::largest::<u64>"]
    );
    assert_eq!(
        listed_names(legacy, "rust_names::store::largest"),
        vec!["rust_names::store::largest"]
    );
}

/// The C++ standard library as people name its functions: globs after
/// `std::`, operators, typedefs in parameter lists.
#[test]
fn list_std_names_as_people_type_them() {
    let _lock = common::serial();
    let lib = "libstdc++.so.6";
    assert_eq!(
        listed_names(lib, "std::terminate*"),
        vec!["std::terminate()"]
    );
    assert_eq!(
        listed_names(lib, "std::terminate"),
        vec!["std::terminate()"]
    );
    for pat in [
        "operator new",
        "operator new(unsigned long)",
        "operator new(size_t)",
    ] {
        assert!(
            listed_names(lib, pat).contains(&"operator new(unsigned long)".to_string()),
            "{pat}"
        );
    }
    assert_eq!(
        listed_names(lib, "operator new(unsigned long)"),
        vec!["operator new(unsigned long)"]
    );
    assert!(listed_names(lib, "operator delete").contains(&"operator delete(void*)".to_string()));
    assert_eq!(
        listed_names(lib, "std::istream::get(char&)"),
        vec!["std::basic_istream<char, std::char_traits<char> >::get(char&)"]
    );
    assert_eq!(
        listed_names(lib, "std::string::compare(const std::string&) const"),
        vec![
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::compare(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&) const",
            "std::string::compare(std::string const&) const",
        ]
    );
}

/// `tachy list LIB a b`, `tachy list LIB:a LIB:b` and `tachy list PATH a b`
/// list what each pattern matches ("Usage: tachy list ... <PATTERN>...").
#[test]
fn list_several_patterns() {
    let _lock = common::serial();
    let lib = "libstdc++.so.6";
    let want = vec!["operator new(unsigned long)", "std::terminate()"];
    let names = |args: &[&str]| {
        let objs = parse_list(&list_ok(args));
        let mut n: Vec<String> = objs
            .iter()
            .flat_map(|o| o.funcs.iter().map(|f| f.0.clone()))
            .collect();
        n.sort();
        n
    };
    assert_eq!(
        names(&[lib, "std::terminate", "operator new(unsigned long)"]),
        want
    );
    assert_eq!(
        names(&[
            "libstdc++.so.6:std::terminate",
            "libstdc++.so.6:operator new(unsigned long)"
        ]),
        want
    );
    let bin = common::build("plain");
    let path = bin.to_str().unwrap();
    assert_eq!(
        names(&[path, "slow_sum", "fast_path"]),
        vec!["fast_path", "slow_sum"]
    );
    // One that matches nothing: what matched is listed, the miss is said
    // on standard error, and the exit status is 1.
    let args = ["list", path, "slow_sum", "nosuchfn", "fast_path"];
    let out = tachy(&args);
    let text = show(&args, &out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let objs = parse_list(&String::from_utf8_lossy(&out.stdout));
    let mut n: Vec<&str> = objs[0].funcs.iter().map(|f| f.0.as_str()).collect();
    n.sort_unstable();
    assert_eq!(n, ["fast_path", "slow_sum"], "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("tachy: no function matches \"nosuchfn\"\n"),
        "{text}"
    );
}

/// `tachy list PATH LIB:PATTERN` looks in LIB, not in PATH.
#[test]
fn list_path_then_lib_pattern() {
    let _lock = common::serial();
    let bin = common::build("plain");
    let path = bin.to_str().unwrap();
    let objs = parse_list(&list_ok(&[path, "c:_exi*", "slow_sum"]));
    let libc = objs
        .iter()
        .find(|o| o.header.contains("/libc.so.6 ("))
        .unwrap_or_else(|| panic!("libc not listed: {objs:#?}"));
    assert!(libc.funcs.iter().any(|f| f.0 == "_exit"), "{objs:#?}");
    let exe = objs
        .iter()
        .find(|o| o.header.starts_with(&format!("{path} (")))
        .expect("the executable");
    assert_eq!(exe.funcs.len(), 1, "{objs:#?}");
}

/// `tachy list PATH` with no pattern is a usage error that says so.
#[test]
fn list_path_without_pattern_is_a_usage_error() {
    let _lock = common::serial();
    let bin = common::build("plain");
    let path = bin.to_str().unwrap();
    let out = tachy(&["list", path]);
    let text = show(&["list", path], &out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no pattern: give one after"),
        "{text}"
    );
}
