//! Self-test of the fixture programs and of the harness in `tests/it/common/`.
//! Does not run tachy: it checks that every fixture builds, follows the
//! ready/go protocol, prints the exact documented counts, and that the -O2
//! C++ build has the code shapes the tracing tests rely on (IPA clone,
//! `.cold` part, tail call, real recursion, non-tail call before unwinding).

use crate::common;

use common::{counts, expected_counts, expected_unwinds, tagged, Fixture};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Runs fixture `name` with `iterations` and `threads` through the go
/// protocol and checks exit status and every summary line.
fn run_and_check(name: &str, iterations: u64, threads: u64) {
    let (it, th) = (iterations.to_string(), threads.to_string());
    let mut fx = Fixture::spawn(name, &[&it, &th]);
    assert!(fx.pid() > 0);
    fx.go();
    let (status, stdout, stderr) = fx.wait_all();
    assert!(
        status.success(),
        "{name} exited with {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some("done"),
        "{name} stdout:\n{stdout}"
    );
    assert_eq!(
        counts(&stdout),
        expected_counts(name, iterations, threads),
        "{name} stdout:\n{stdout}"
    );
    let unwinds = expected_unwinds(iterations, threads);
    if name.starts_with("cpp_") {
        assert_eq!(
            tagged(&stdout, "exceptions").get("shop::risky(int)"),
            Some(&unwinds)
        );
    }
    if name.starts_with("rust_app") {
        assert_eq!(
            tagged(&stdout, "panics").get("rust_app::engine::guarded"),
            Some(&unwinds)
        );
    }
    assert!(stderr.is_empty(), "{name} wrote to stderr:\n{stderr}");
}

/// Output of a binutils tool, panicking if it fails.
fn tool(program: &str, args: &[&str], file: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 tool output")
}

/// Disassembly of the function whose demangled symbol is exactly `symbol`.
fn disassembly_of(objdump: &str, symbol: &str) -> String {
    let header = format!("<{symbol}>:");
    objdump
        .split("\n\n")
        .find(|block| block.lines().next().is_some_and(|l| l.ends_with(&header)))
        .unwrap_or_else(|| panic!("{symbol} not found in objdump output"))
        .to_string()
}

#[test]
fn plain_counts() {
    run_and_check("plain", 5, 2);
}

#[test]
fn plain_default_args() {
    let mut fx = Fixture::spawn("plain", &[]);
    fx.go();
    let (status, stdout) = fx.wait();
    assert!(status.success());
    assert_eq!(counts(&stdout), expected_counts("plain", 20, 1));
}

#[test]
fn cpp_o2_counts() {
    run_and_check("cpp_o2", 5, 3);
}

#[test]
fn cpp_o0_counts() {
    run_and_check("cpp_o0", 4, 2);
}

#[test]
fn cpp_default_args() {
    let mut fx = Fixture::spawn("cpp_o2", &[]);
    fx.go();
    let (status, stdout) = fx.wait();
    assert!(status.success());
    assert_eq!(counts(&stdout), expected_counts("cpp_o2", 20, 4));
    assert_eq!(tagged(&stdout, "exceptions")["shop::risky(int)"], 40);
}

#[test]
fn rust_app_counts() {
    run_and_check("rust_app", 5, 2);
}

#[test]
fn rust_app_v0_counts() {
    run_and_check("rust_app_v0", 3, 1);
}

#[test]
fn rust_names_counts() {
    run_and_check("rust_names", 4, 1);
    run_and_check("rust_names_v0", 3, 1);
}

#[test]
fn waits_for_go_line() {
    let mut fx = Fixture::spawn("plain", &["2"]);
    // Without the go line the fixture prints nothing more and keeps running.
    assert_eq!(fx.read_line(Duration::from_millis(300)), None);
    assert!(fx.is_running());
    fx.go();
    let (status, stdout) = fx.wait();
    assert!(status.success());
    assert_eq!(counts(&stdout)["slow_sum"], 2);
}

#[test]
fn no_wait_env_skips_go_line() {
    for name in ["plain", "cpp_o2", "rust_app"] {
        // No go() call: the fixture must run on its own.
        let fx = Fixture::spawn_env(name, &["2", "1"], &[("FIXTURE_NO_WAIT", "1")]);
        let (status, stdout) = fx.wait();
        assert!(status.success(), "{name}: {status}");
        assert_eq!(counts(&stdout), expected_counts(name, 2, 1), "{name}");
    }
}

#[test]
fn drop_kills_the_fixture() {
    let fx = Fixture::spawn("plain", &[]);
    let pid = fx.pid() as libc::pid_t;
    drop(fx);
    // The child was killed and reaped, so the pid no longer exists.
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid, 0) };
    assert_eq!(r, -1, "pid {pid} still exists after drop");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ESRCH)
    );
}

#[test]
fn wait_timeout_kills_and_panics() {
    let fx = Fixture::spawn("plain", &[]);
    let pid = fx.pid() as libc::pid_t;
    // Never sent the go line, so the fixture cannot finish in time.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fx.wait_timeout(Duration::from_millis(300))
    }));
    let message = result.expect_err("wait_timeout should panic");
    let text = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(text.contains("did not finish"), "{text}");
    // SAFETY: signal 0 only checks for existence.
    assert_eq!(unsafe { libc::kill(pid, 0) }, -1, "pid {pid} still exists");
}

#[test]
fn bad_arguments_exit_2() {
    for name in ["plain", "cpp_o0", "rust_app"] {
        let out = Command::new(common::build(name))
            .arg("zero")
            .env("FIXTURE_NO_WAIT", "1")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
    }
}

#[test]
fn counts_parser() {
    let text = "ready 1\ncount a::b(int) 3\ncount x<y, z>::f() 12\nexceptions a::b(int) 1\ndone\n";
    let c = counts(text);
    assert_eq!(c.len(), 2);
    assert_eq!(c["a::b(int)"], 3);
    assert_eq!(c["x<y, z>::f()"], 12);
    assert_eq!(tagged(text, "exceptions")["a::b(int)"], 1);
}

#[test]
fn cpp_o2_code_shapes() {
    let bin = common::build("cpp_o2");
    let syms = tool("nm", &["-C"], &bin);
    let has = |needle: &str| syms.lines().any(|l| l.ends_with(needle));

    // checksum exists only as an IPA clone, and the clone is what is called.
    let clone = syms
        .lines()
        .filter_map(|l| l.split_once(" t ").map(|(_, s)| s))
        .find(|s| {
            s.starts_with("shop::checksum(")
                && [".constprop.", ".isra.", ".part."]
                    .iter()
                    .any(|k| s.contains(k))
        })
        .unwrap_or_else(|| panic!("no clone of shop::checksum in nm output:\n{syms}"))
        .to_string();
    assert!(
        !has(" shop::checksum(shop::Buffer const&, unsigned int)"),
        "uncloned checksum present"
    );

    // Cold split part of validate().
    assert!(
        has(" shop::validate(int) [clone .cold]"),
        "no .cold part of shop::validate"
    );
    assert!(has(" shop::validate(int)"));

    // Template and overloads keep their plain names.
    assert!(has(" W shop::Pool<shop::Conn>::acquire()"));
    assert!(has(" T shop::Store::lookup(int)"));
    assert!(has(&format!(" T {}", common::CPP_LOOKUP_STR)));

    let asm = tool("objdump", &["-d", "-C", "--no-show-raw-insn"], &bin);
    let calls_clone = format!("<{clone}>");
    assert!(
        asm.lines()
            .any(|l| l.contains("call") && l.ends_with(&calls_clone)),
        "no call to {clone}"
    );

    // forward() ends in a jmp to target() and has no ret of its own.
    let forward = disassembly_of(&asm, "shop::forward(int)");
    assert!(
        forward
            .lines()
            .any(|l| l.contains("jmp") && l.ends_with("<shop::target(int)>")),
        "shop::forward is not a tail call:\n{forward}"
    );
    assert!(
        !forward.lines().any(|l| l.contains("\tret")),
        "shop::forward has a ret:\n{forward}"
    );

    // recurse() really calls itself (not turned into a loop).
    let recurse = disassembly_of(&asm, "shop::recurse(int)");
    assert!(
        recurse
            .lines()
            .any(|l| l.contains("call") && l.ends_with("<shop::recurse(int)>")),
        "shop::recurse does not call itself:\n{recurse}"
    );

    // risky() calls (not jumps to) maybe_throw(), so unwinding crosses its frame.
    let risky = disassembly_of(&asm, "shop::risky(int)");
    assert!(
        risky
            .lines()
            .any(|l| l.contains("call") && l.ends_with("<shop::maybe_throw(int)>")),
        "shop::risky does not call shop::maybe_throw:\n{risky}"
    );

    // The executable finds libfixture.so through its $ORIGIN runpath.
    let dynamic = tool("readelf", &["-d"], &bin);
    assert!(
        dynamic.contains("Shared library: [libfixture.so]"),
        "{dynamic}"
    );
    assert!(dynamic.contains("[$ORIGIN]"), "{dynamic}");
}

#[test]
fn cpp_o0_has_no_clones() {
    let bin = common::build("cpp_o0");
    let syms = tool("nm", &["-C"], &bin);
    let shop: Vec<&str> = syms.lines().filter(|l| l.contains(" shop::")).collect();
    assert!(shop.iter().all(|l| !l.contains("[clone")), "{shop:#?}");
    assert!(shop
        .iter()
        .any(|l| l.ends_with(" shop::checksum(shop::Buffer const&, unsigned int)")));
    let asm = tool("objdump", &["-d", "-C", "--no-show-raw-insn"], &bin);
    let forward = disassembly_of(&asm, "shop::forward(int)");
    assert!(forward
        .lines()
        .any(|l| l.contains("call") && l.ends_with("<shop::target(int)>")));
}

#[test]
fn libfixture_exports_fixture_io() {
    let lib = common::build("libfixture.so");
    let syms = tool("nm", &["-D", "--defined-only"], &lib);
    assert!(syms.lines().any(|l| l.ends_with(" T fixture_io")), "{syms}");
}

#[test]
fn plain_symbols() {
    let syms = tool("nm", &[], &common::build("plain"));
    for want in [" T slow_sum", " T fast_path", " t mix_local"] {
        assert!(
            syms.lines().any(|l| l.ends_with(want)),
            "missing{want}:\n{syms}"
        );
    }
}

#[test]
fn rust_manglings() {
    let legacy = tool("nm", &[], &common::build("rust_app"));
    assert!(
        legacy.contains("_ZN8rust_app6engine7process17h"),
        "legacy mangling expected"
    );
    let legacy_demangled = tool("nm", &["-C"], &common::build("rust_app"));
    assert!(legacy_demangled
        .lines()
        .any(|l| l.ends_with(" rust_app::engine::process")));
    // Both instantiations of the generic demangle to the same legacy name.
    let n = legacy_demangled
        .lines()
        .filter(|l| l.ends_with(" rust_app::engine::transform"))
        .count();
    assert_eq!(n, 2, "{legacy_demangled}");

    let v0 = tool("nm", &[], &common::build("rust_app_v0"));
    assert!(v0.contains("_RNvNtCs"), "v0 mangling expected");
    assert!(!v0.contains("_ZN8rust_app6engine7process"));
    let v0_demangled = tool("nm", &["-C"], &common::build("rust_app_v0"));
    for want in [
        " rust_app::engine::process",
        " rust_app::engine::transform::<u32>",
        " rust_app::engine::transform::<alloc::string::String>",
        " rust_app::engine::guarded",
        " rust_app::engine::explode",
    ] {
        assert!(
            v0_demangled.lines().any(|l| l.ends_with(want)),
            "missing{want}"
        );
    }
}
