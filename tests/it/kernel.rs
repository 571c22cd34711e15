//! Kernel functions, through fentry/fexit where the kernel loads them, else
//! kprobes. These machines have no kprobes (CONFIG_KPROBES is off) and
//! refuse fentry programs (EPERM), so the tracing tests skip by name,
//! saying why; what a user gets there is tested here and in errors.rs.

use crate::common;

use std::process::{Command, Output};

fn kprobes() -> bool {
    std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

/// Times hrtimer_nanosleep in the plain fixture: it runs once per
/// nanosleep, four per iteration (slow_sum, mix_local, fast_path twice).
fn time_nanosleep(no_fentry: bool) -> Output {
    let exe = common::build("plain");
    let mut cmd = Command::new(common::tachy());
    cmd.args([
        "latency",
        "--json",
        "k:hrtimer_nanosleep",
        "--",
        exe.to_str().unwrap(),
        "5",
        "2",
    ])
    .env("FIXTURE_NO_WAIT", "1");
    if no_fentry {
        cmd.env("TACHY_NO_FENTRY", "1");
    }
    cmd.output().unwrap()
}

fn check_counts(out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rep: serde_json::Value =
        serde_json::from_str(stdout.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    let f = &rep["functions"][0];
    assert_eq!(f["name"], "k:hrtimer_nanosleep", "{rep}");
    assert_eq!(f["count"], 40, "{rep}");
    assert!(f["min_ns"].as_u64().unwrap() >= 200_000, "{rep}");
}

/// With fentry/fexit where the kernel loads them (else kprobes).
#[test]
fn kernel_function_latency() {
    let _lock = common::serial();
    if !common::is_root() {
        common::skip("needs root");
        return;
    }
    let out = time_nanosleep(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("cannot be traced here") && !kprobes() {
        // The line a user gets: why, and what would work.
        assert!(stderr.contains("fentry/fexit failed ("), "{stderr}");
        assert!(stderr.contains("no kprobes"), "{stderr}");
        common::skip(&format!(
            "this kernel refuses fentry programs and has no kprobes: {}",
            stderr.trim()
        ));
        return;
    }
    check_counts(&out);
}

/// With kprobes only (TACHY_NO_FENTRY), where the kernel has them.
#[test]
fn kernel_function_latency_kprobes() {
    let _lock = common::serial();
    if !kprobes() {
        common::skip("this kernel has no kprobes (/sys/bus/event_source/devices/kprobe is absent)");
        return;
    }
    if !common::is_root() {
        common::skip("needs root");
        return;
    }
    check_counts(&time_nanosleep(true));
}

fn dry_run(args: &[&str]) -> String {
    let out = Command::new(common::tachy()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The plan on standard output, notices on standard error.
    format!(
        "{}{}",
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap()
    )
}

/// A bare name no user object has is a kernel function; `k:` names one
/// outright. (--dry-run plans without loading anything.)
#[test]
fn bare_kernel_names() {
    let _lock = common::serial();
    let line =
        "  [0] k:vfs_read: kernel function, timed by fentry/fexit, else a kprobe and kretprobe";
    for args in [
        &["latency", "--dry-run", "vfs_read"][..],
        &["latency", "--dry-run", "k:vfs_read"],
    ] {
        let err = dry_run(args);
        assert!(err.lines().any(|l| l == line), "{args:?}:\n{err}");
    }
    // In a process: its own function first; a name it lacks, the kernel's.
    let mut fixture = common::Fixture::spawn("plain", &["1", "1"]);
    let pid = fixture.pid().to_string();
    let err = dry_run(&["latency", "--dry-run", "-p", &pid, "vfs_read", "slow_sum"]);
    fixture.go();
    let _ = fixture.wait();
    assert!(
        err.lines().any(|l| l
            == "tachy: no function of the traced program matches \"vfs_read\": timing the kernel function k:vfs_read"),
        "{err}"
    );
    // Kernel items are planned first.
    assert!(err.lines().any(|l| l == line), "{err}");
    assert!(
        err.lines().any(|l| l.starts_with("  [1] slow_sum in ")),
        "{err}"
    );
}
