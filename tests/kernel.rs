//! Kernel functions through kprobes. These machines have no kprobes
//! (CONFIG_KPROBES is off), so the tracing test skips by name, saying why;
//! the error a user gets there is tested in errors.rs.

mod common;

use std::process::Command;

fn kprobes() -> bool {
    std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

/// hrtimer_nanosleep runs once per nanosleep of the plain fixture: four per
/// iteration (slow_sum, mix_local, fast_path twice).
#[test]
fn kernel_function_latency() {
    let _lock = common::serial();
    if !kprobes() {
        eprintln!(
            "skipped: kernel_function_latency: this kernel has no kprobes (/sys/bus/event_source/devices/kprobe is absent)"
        );
        return;
    }
    if !common::is_root() {
        eprintln!("skipped: kernel_function_latency: needs root");
        return;
    }
    let exe = common::build("plain");
    let out = Command::new(common::tachy())
        .args([
            "latency",
            "--json",
            "k:hrtimer_nanosleep",
            "--",
            exe.to_str().unwrap(),
            "5",
            "2",
        ])
        .env("FIXTURE_NO_WAIT", "1")
        .output()
        .unwrap();
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
