//! AArch64 objects planned on this x86-64 machine: fixtures built by
//! Debian's cross compilers (`gcc-aarch64-linux-gnu`, `g++-aarch64-linux-gnu`),
//! whose `tachy list` and `--dry-run` output is golden
//! (tests/golden/arm64/; `TACHY_BLESS=1` rewrites it), and the one line that
//! refuses to attach to them. Needs no root: nothing is attached.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

/// The cross-compiled fixtures: (name, compiler, source, flags).
const FIXTURES: [(&str, &str, &str, &[&str]); 2] = [
    ("plain", "aarch64-linux-gnu-gcc", "plain.c", &["-O2", "-g"]),
    (
        "exits",
        "aarch64-linux-gnu-g++",
        "exits.cpp",
        &["-O2", "-g"],
    ),
];

/// Builds the arm64 fixtures once into their own directory; `None` (after
/// saying so) where the cross compilers are missing.
fn build() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = common::fixtures_out_dir().join("arm64");
            std::fs::create_dir_all(&dir).unwrap();
            for (name, cc, src, flags) in FIXTURES {
                let out = dir.join(name);
                let status = Command::new(cc)
                    .args(flags)
                    .arg("-o")
                    .arg(&out)
                    .arg(common::fixtures_src_dir().join(src))
                    .status();
                match status {
                    Ok(s) if s.success() => {}
                    Ok(s) => panic!("{cc} failed on {src}: {s}"),
                    Err(e) => {
                        eprintln!("cannot run {cc} ({e}): make deps installs it");
                        return None;
                    }
                }
            }
            Some(dir)
        })
        .clone()
}

/// Runs tachy in `dir` (so paths print as `./NAME`), asserting exit 0 and
/// an empty stderr; returns stdout.
fn tachy_in(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(common::tachy())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "tachy {args:?}: {}\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// Compares `got` with tests/golden/arm64/NAME, or rewrites it under
/// `TACHY_BLESS=1`; prices are masked (printed only where the code is of
/// the machine the prices were measured on).
fn golden(name: &str, got: &str) {
    let got = &common::mask_prices(got);
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/arm64")
        .join(name);
    if std::env::var_os("TACHY_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing golden file {}", path.display()));
    assert_eq!(got, &want, "{name} differs; TACHY_BLESS=1 rewrites it");
}

#[test]
fn list_and_dry_run_of_arm64_objects_are_golden() {
    let _lock = common::serial();
    let Some(dir) = build() else {
        common::skip("no aarch64 cross compiler");
        return;
    };
    for (name, args) in [
        ("list-plain.txt", &["list", "./plain", "*"][..]),
        ("list-exits.txt", &["list", "./exits", "*"]),
        (
            "latency-exits.txt",
            &["latency", "--dry-run", "./exits:ex::*"],
        ),
        ("latency-plain.txt", &["latency", "--dry-run", "./plain:*"]),
        (
            "nested-exits.txt",
            &["nested", "--dry-run", "./exits:ex::via_plt"],
        ),
    ] {
        golden(name, &tachy_in(&dir, args));
    }
}

#[test]
fn attaching_to_arm64_code_on_x86_refuses_with_one_line() {
    let _lock = common::serial();
    let Some(dir) = build() else {
        common::skip("no aarch64 cross compiler");
        return;
    };
    for cmd in ["latency", "nested"] {
        let out = Command::new(common::tachy())
            .args([cmd, "./exits:ex::quiet"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(
            stderr,
            "tachy: cannot attach to ./exits: it is aarch64 code and this tachy runs on x86_64 (list and --dry-run work; run an aarch64 build of tachy where the code runs)\n"
        );
    }
}

#[test]
fn prices_are_masked_in_goldens() {
    assert_eq!(
        common::mask_prices(
            "exit  single-stepped ~9.5 us; ~2.0 us to 10.5 us (entry), into 3 tails ~x"
        ),
        "exit  single-stepped ~N; ~N to N (entry), into 3 tails ~x"
    );
}
