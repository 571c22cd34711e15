//! Root-run integration tests on the system's own libraries: glibc's IFUNC
//! symbols (`memset`, `memcpy`, `strlen`) are timed where callers arrive,
//! with exact counts from the `ifunc` fixture (tests/fixtures/ifunc.c)
//! under `-p`, `-- CMD` and a path target; and every function of libc and
//! libstdc++ is attached at once, what the kernel refuses left out by name.
//!
//! Every test takes the `common::serial()` lock first; those that attach
//! probes are skipped (with a message) when not run as root.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::run::{run_fixture, Tachy};
use common::Fixture;
use serde_json::Value;

/// Calls the fixture makes of each function for N = 2000.
const CALLS: [(&str, u64); 4] = [
    ("memset", 2000),
    ("memcpy", 4000),
    ("strlen", 6000),
    ("wcsrchr", 8000),
];

const SPECS: [&str; 4] = ["c:memset", "c:memcpy", "c:strlen", "c:wcsrchr"];

/// Per IFUNC symbol, the functions reported for it: (name, count).
fn by_symbol(rep: &Value, symbol: &str) -> Vec<(String, u64)> {
    let prefix = format!("{symbol} (");
    rep["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter_map(|f| {
            let name = f["name"].as_str()?;
            name.starts_with(&prefix)
                .then(|| (name.to_string(), f["count"].as_u64().unwrap_or(0)))
        })
        .collect()
}

/// Each symbol's calls are all counted, at the functions its resolver can
/// return (`-- CMD`, path: "may resolve to") or at the one the process
/// uses (`-p`: "resolved to"), and nowhere else.
fn check(rep: &Value, resolved: bool) {
    for (symbol, calls) in CALLS {
        let funcs = by_symbol(rep, symbol);
        assert!(!funcs.is_empty(), "{symbol} not reported: {rep:#}");
        let how = if resolved {
            "resolved to"
        } else {
            "may resolve to"
        };
        for (name, _) in &funcs {
            assert!(name.starts_with(&format!("{symbol} ({how} ")), "{name}");
        }
        if resolved {
            assert_eq!(funcs.len(), 1, "{funcs:?}");
        }
        let total: u64 = funcs.iter().map(|f| f.1).sum();
        assert_eq!(total, calls, "{symbol}: {funcs:?}");
        assert_eq!(funcs.iter().filter(|f| f.1 > 0).count(), 1, "{funcs:?}");
    }
}

#[test]
fn ifunc_calls_are_counted_exactly_in_a_running_process() {
    let _lock = common::needs_root!();
    let fx = Fixture::spawn("ifunc", &["2000"]);
    let pid = fx.pid().to_string();
    let mut args = vec!["latency", "--json", "-p", &pid];
    args.extend(SPECS);
    check(&attached_report(fx, &args), true);
}

/// `tachy ARGS` attached to the waiting fixture `fx`, which then runs to
/// its end, and so does tachy: its one report.
fn attached_report(mut fx: Fixture, args: &[&str]) -> Value {
    let mut t = Tachy::start(args, &[]);
    t.wait_for_header(true);
    fx.go();
    let (status, out) = fx.wait();
    assert!(status.success(), "{out}");
    let o = t.finish(Duration::from_secs(30));
    o.assert_success();
    o.single_report()
}

#[test]
fn ifunc_calls_are_counted_exactly_in_a_command() {
    let _lock = common::needs_root!();
    let mut opts = vec!["--json"];
    opts.extend(SPECS);
    let o = run_fixture("latency", &opts, "ifunc", &["2000"], &[]);
    o.assert_success();
    check(&o.single_report(), false);
}

/// A path target of a private copy of libc counts the one process that
/// loads that copy.
#[test]
fn ifunc_calls_are_counted_exactly_through_a_path() {
    let _lock = common::needs_root!();
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("libc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libc.so.6");
    std::fs::copy(Path::new("/lib/x86_64-linux-gnu/libc.so.6"), &lib).unwrap();
    let specs: Vec<String> = CALLS
        .iter()
        .map(|(s, _)| format!("{}:{s}", lib.display()))
        .collect();
    let mut args = vec![
        "latency".to_string(),
        "--json".into(),
        "-d".into(),
        "8".into(),
    ];
    args.extend(specs);
    let mut t = Tachy::start(&args, &[]);
    t.wait_for_header(true);
    let out = Command::new(common::build("ifunc"))
        .arg("2000")
        .env("FIXTURE_NO_WAIT", "1")
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let o = t.finish(Duration::from_secs(30));
    o.assert_success();
    check(&o.single_report(), false);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every function of libc and libstdc++ at once: the kernel's x86 uprobe
/// code refuses some instructions (VEX-encoded ones such as `vmovd` at the
/// entry of `__memset_avx2_unaligned_erms`, `data16 call __tls_get_addr`),
/// and one refused probe used to fail the whole attach. Entries move off
/// them, what has no place is left out with a line naming the function,
/// the offset and the instruction, and the rest is traced.
#[test]
fn every_function_of_libc_and_libstdcxx_attaches() {
    let _lock = common::needs_root!();
    let fx = Fixture::spawn("cpp_o2", &["1", "1"]);
    let pid = fx.pid().to_string();
    let args = ["latency", "-p", &pid, "c:*", "libstdc++:*", "-d", "1"];
    let mut t = Tachy::start(&args, &[]);
    t.wait_for_line(false, Duration::from_secs(300), |l| {
        l.starts_with("Tracing ") && l.ends_with("Hit Ctrl-C to end.")
    });
    let o = t.finish(Duration::from_secs(120));
    o.assert_success();
    let header = o
        .stdout
        .lines()
        .find(|l| l.starts_with("Tracing "))
        .unwrap();
    let n: usize = header
        .split_whitespace()
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{header}"));
    // libc alone has about 3,600 functions, libstdc++ about 3,800.
    assert!(n > 5000, "{header}");
    for line in o
        .stderr
        .lines()
        .filter(|l| l.starts_with("tachy: left out"))
    {
        let named = line.contains("the kernel cannot probe `")
            && (line.contains(" at offset ") || line.contains("+0x"))
            || line.contains("the kernel refused the probe at ")
            || line.contains(", whose entry counts the calls");
        assert!(named, "{line}");
    }
    drop(fx);
}

/// `tachy list` says that an IFUNC symbol is one, and what its resolver
/// can return.
#[test]
fn list_names_ifunc_candidates() {
    let _lock = common::serial();
    let o = Command::new(common::tachy())
        .args(["list", "/lib/x86_64-linux-gnu/libc.so.6:memset"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("IFUNC"), "{text}");
    assert!(text.contains("__memset_"), "{text}");
}

/// `tachy ARGS` (a dry run), which must succeed: its standard output.
fn dry_run(args: &[&str]) -> String {
    let o = Command::new(common::tachy()).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "tachy {args:?}: {text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    text
}

/// The `calls IFUNC` lines of a --dry-run: (implementation as named, its
/// object).
fn ifunc_callees(plan: &str) -> Vec<(String, String)> {
    plan.lines()
        .filter_map(|l| l.trim_start().split_once("] calls IFUNC ").map(|x| x.1))
        .filter_map(|l| l.rsplit_once(" at ").map(|x| x.0))
        .filter_map(|l| l.rsplit_once(" in "))
        .map(|(name, obj)| (name.to_string(), obj.to_string()))
        .collect()
}

/// The call-site probes of a --dry-run under node `parent`.
fn sites_under(plan: &str, parent: u32) -> usize {
    let tag = format!(" in [{parent}]");
    plan.lines()
        .filter(|l| l.trim_start().starts_with("site <") && l.contains(&tag))
        .count()
}

/// The site of memset under filler in a nested report, which counts all
/// of filler's memset calls and no call left by exception.
fn memset_site(rep: &Value, fillers: u64) -> &Value {
    let root = &rep["roots"][0];
    assert_eq!(root["count"], fillers, "{rep:#}");
    let site = root["children"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["kind"] == "plt"))
        .unwrap_or_else(|| panic!("no memset site: {rep:#}"));
    assert_eq!(site["count"], 1000 * fillers, "{rep:#}");
    assert_eq!(site["unwound"], 0, "{rep:#}");
    site
}

/// `tachy nested --depth 2` on filler, which calls memset (an IFUNC of
/// libc) 1000 times: the memset site is broken down into what latency
/// times for memset, never into the resolver's code. In a running process
/// (-p), the implementation it uses, named as latency names it, with that
/// function's own sites under it; for a command tachy starts, each
/// implementation the resolver can return.
#[test]
fn nested_breaks_an_ifunc_site_down_into_its_implementation() {
    let _lock = common::needs_root!();
    let n = 5u64;
    let fx = Fixture::spawn("seams", &["fill", &n.to_string()]);
    let pid = fx.pid().to_string();
    let plan = dry_run(&["nested", "--dry-run", "-p", &pid, "filler", "--depth", "2"]);
    let callees = ifunc_callees(&plan);
    assert_eq!(callees.len(), 1, "{plan}");
    let (name, lib) = &callees[0];
    let used = name
        .strip_prefix("memset (resolved to ")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{plan}"));
    // The implementation's own sites, planned as a traced function's.
    let own = dry_run(&["nested", "--dry-run", &format!("{lib}:{used}")]);
    assert_eq!(sites_under(&plan, 1), sites_under(&own, 0), "{plan}\n{own}");
    let args = ["nested", "--json", "-p", &pid, "filler", "--depth", "2"];
    let rep = attached_report(fx, &args);
    let site = memset_site(&rep, n);
    assert_eq!(
        site["name"],
        format!("memset@plt (resolved to {used})"),
        "{rep:#}"
    );
    assert_eq!(
        site["children"].as_array().map_or(0, |c| c.len()),
        sites_under(&own, 0),
        "{rep:#}"
    );

    // A command tachy starts: every implementation, the resolver none.
    let exe = common::build("seams");
    let exe = exe.to_string_lossy();
    let mut args = vec!["nested", "--dry-run", "filler", "--depth", "2", "--", &exe];
    args.extend(["fill", "5"]);
    let plan = dry_run(&args);
    let callees = ifunc_callees(&plan);
    assert!(callees.len() >= 2, "{plan}");
    for (name, _) in &callees {
        assert!(
            name.starts_with("memset (may resolve to __memset_"),
            "{plan}"
        );
    }
    let o = run_fixture(
        "nested",
        &["--json", "filler", "--depth", "2"],
        "seams",
        &["fill", &n.to_string()],
        &[],
    );
    o.assert_success();
    let rep = o.single_report();
    let site = memset_site(&rep, n);
    assert_eq!(site["name"], "memset@plt", "{rep:#}");
    assert_eq!(
        site["children"].as_array().map_or(0, |c| c.len()),
        sites_under(&plan, 1),
        "{rep:#}"
    );
}
