//! Least privilege: tachy traces with CAP_BPF and CAP_PERFMON instead of
//! root, and names the capability it lacks otherwise. Runs tachy as user
//! `nobody` with chosen capabilities through setpriv(1).

mod common;

use std::process::{Command, Output};

/// Runs tachy as uid/gid 65534 with exactly `caps` (plus reading any file,
/// as the fixtures live under root's directories).
fn tachy_with_caps(caps: &[&str], args: &[&str]) -> Option<Output> {
    if !common::is_root() {
        eprintln!("skipped: needs root to drop to chosen capabilities");
        return None;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: needs setpriv(1) from util-linux");
        return None;
    }
    let mut all: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
    all.push("+dac_read_search".into());
    let list = all.join(",");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps={list}"))
        .arg(format!("--ambient-caps={list}"))
        .arg(common::tachy())
        .args(args)
        .env("FIXTURE_NO_WAIT", "1")
        .output()
        .expect("setpriv runs");
    Some(out)
}

#[test]
fn traces_with_cap_bpf_and_cap_perfmon() {
    let _lock = common::serial();
    let exe = common::build("plain");
    let Some(out) = tachy_with_caps(
        &["bpf", "perfmon"],
        &[
            "latency",
            "--json",
            "slow_sum",
            "--",
            exe.to_str().unwrap(),
            "5",
            "1",
        ],
    ) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(report["functions"][0]["count"], 5, "{report}");
}

#[test]
fn names_the_missing_capability() {
    let _lock = common::serial();
    let exe = common::build("plain");
    let Some(out) = tachy_with_caps(
        &["bpf"],
        &["latency", "slow_sum", "--", exe.to_str().unwrap(), "1", "1"],
    ) else {
        return;
    };
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tachy: tracing needs root, or the capabilities CAP_BPF and CAP_PERFMON (missing: CAP_PERFMON)\n"
    );
}

#[test]
fn another_users_process_needs_cap_sys_ptrace() {
    let _lock = common::serial();
    // Process 1 belongs to root; nobody without CAP_SYS_PTRACE cannot read its map.
    let Some(out) = tachy_with_caps(&["bpf", "perfmon"], &["latency", "-p", "1", "c:malloc"])
    else {
        return;
    };
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err,
        "tachy: cannot read the memory map of process 1: permission denied (another user's process needs root or CAP_SYS_PTRACE)\n"
    );
}

#[test]
fn traces_another_users_process_with_cap_sys_ptrace() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let _lock = common::serial();
    if !common::is_root() || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: needs root and setpriv(1)");
        return;
    }
    // The fixture runs as root; tachy as nobody with three capabilities.
    let mut fx = common::Fixture::spawn("plain", &["4", "1"]);
    let caps = "+bpf,+perfmon,+sys_ptrace";
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps={caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg(common::tachy())
        .args(["latency", "-p", &fx.pid().to_string(), "slow_sum"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut header = String::new();
    out.read_line(&mut header).unwrap();
    assert!(
        header.starts_with("Tracing 1 function in pid "),
        "{header:?}"
    );
    fx.go();
    let (status, _) = fx.wait();
    assert!(status.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("count: 4\n"), "{rest}");
}
