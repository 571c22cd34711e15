//! Error paths of tachy: every failure is one line on stderr starting with
//! `tachy: ` and exit code 1; clap usage errors exit 2; nothing panics.
//! Most of these attach no probes and need no root; the last ones check
//! what tachy says while it traces (they attach, as root).

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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
                "tachy {args:?} did not finish in time: {}",
                show(args, &out)
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

/// Runs tachy expecting an error: exit code 1, nothing on stdout, one
/// message on stderr starting with `tachy: ` (its first line of at most 200
/// characters; the lines after it, if any, indented or headed `near names:`
/// and `searched:`), no panic. Returns the message (after `tachy: `).
fn error(args: &[&str]) -> String {
    let out = tachy(args);
    let text = show(args, &out);
    assert!(!text.contains("panicked"), "panic:\n{text}");
    assert_eq!(out.status.code(), Some(1), "exit code:\n{text}");
    assert!(out.stdout.is_empty(), "stdout not empty:\n{text}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.ends_with('\n'), "{text}");
    let lines: Vec<&str> = stderr.lines().collect();
    for l in &lines[1..] {
        assert!(
            l.starts_with("  ") || *l == "near names:" || *l == "searched:",
            "more than one message on stderr:\n{text}"
        );
    }
    let msg = stderr
        .trim_end()
        .strip_prefix("tachy: ")
        .unwrap_or_else(|| panic!("stderr does not start with `tachy: `:\n{text}"))
        .to_string();
    if msg.starts_with("no function matches") {
        assert!(lines[0].len() <= 200, "a long first line:\n{text}");
    }
    msg
}

/// Asserts that `msg` contains every one of `parts`.
fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "error {msg:?} does not mention {p:?}");
    }
}

/// Runs tachy expecting a clap usage error: exit code 2, clap's `error: `
/// message with a pointer to `--help` on stderr, nothing on stdout, no panic.
fn usage_error(args: &[&str]) -> String {
    let out = tachy(args);
    let text = show(args, &out);
    assert!(!text.contains("panicked"), "panic:\n{text}");
    assert_eq!(out.status.code(), Some(2), "exit code:\n{text}");
    assert!(out.stdout.is_empty(), "stdout not empty:\n{text}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("error: "), "{text}");
    assert!(stderr.contains("--help"), "{text}");
    stderr
}

/// A pid that no process has.
fn unused_pid() -> u32 {
    [999_999u32, 4_194_000, 3_999_999, 888_888]
        .into_iter()
        .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .expect("every candidate pid exists")
}

/// A scratch directory for these tests.
fn scratch() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("errors");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn no_such_pid() {
    let _lock = common::serial();
    let pid = unused_pid().to_string();
    let msg = error(&["latency", "-p", &pid, "foo"]);
    assert_mentions(&msg, &["no such process", &pid]);
    let msg = error(&["list", "-p", &pid, "foo"]);
    assert_mentions(&msg, &["no such process", &pid]);
}

#[test]
fn path_not_elf() {
    let _lock = common::serial();
    let file = scratch().join("notes.txt");
    std::fs::write(&file, "just some text\n").unwrap();
    let path = file.to_str().unwrap();
    let spec = format!("{path}:foo");
    let msg = error(&["latency", &spec]);
    assert_mentions(&msg, &[path, "not an ELF file"]);
    let msg = error(&["list", path, "foo"]);
    assert_mentions(&msg, &[path, "not an ELF file"]);
    let msg = error(&["latency", "/nonexistent/dir/app:foo"]);
    assert_mentions(&msg, &["/nonexistent/dir/app"]);
}

#[test]
fn no_match_suggests_near_names() {
    let _lock = common::serial();
    let bin = common::build("cpp_o2");
    let path = bin.to_str().unwrap();
    let spec = format!("{path}:shop::Store::lokup");
    let msg = error(&["latency", &spec]);
    assert_mentions(
        &msg,
        &[
            "no function matches",
            "shop::Store::lokup",
            path,
            "\nnear names:\n  shop::Store::lookup\n",
        ],
    );
    // Near names first, then the objects searched, one a line.
    assert!(
        msg.starts_with(
            "no function matches \"shop::Store::lokup\"\nnear names:\n  shop::Store::lookup\n"
        ),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!("\nsearched:\n  {path} (symbols from .symtab)")),
        "{msg}"
    );
    let msg = error(&["list", path, "shop::Store::lokup"]);
    assert_mentions(&msg, &["near names:\n  shop::Store::lookup\n"]);
    // With a command: the executable and its libraries are searched.
    let msg = error(&["latency", "shop::Store::lokup", "--", path, "1", "1"]);
    assert_mentions(&msg, &["near names:\n  shop::Store::lookup\n"]);
    // A name that shares only a few letters with others has none.
    let msg = error(&["latency", "foo", "--", path, "1", "1"]);
    assert!(!msg.contains("near names"), "{msg}");
}

/// Standard output on a full disk: the message says what was being
/// written, in tachy's words, with no `(os error 28)`.
#[test]
fn full_disk_says_what_was_being_written() {
    let _lock = common::needs_root!();
    let bin = common::build("plain");
    let out = Command::new(common::tachy())
        .args(["latency", "-d", "1", "slow_sum", "--"])
        .arg(&bin)
        .args(["2", "1"])
        .env("FIXTURE_NO_WAIT", "1")
        .stdin(Stdio::null())
        .stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "tachy: cannot write the report to standard output: no space left on device\n"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("os error"), "{stderr}");
}

/// A long pattern is quoted by its start and its length, never whole.
#[test]
fn long_patterns_are_not_echoed_whole() {
    let _lock = common::serial();
    let bin = common::build("plain");
    let path = bin.to_str().unwrap();
    let huge = "x".repeat(100_000);
    let msg = usage_error(&["latency", &huge, "--", path]);
    assert!(msg.len() < 400, "{msg}");
    assert_mentions(&msg, &["(100000 bytes)", "longer than 4096 bytes"]);
    let long = "y".repeat(4000);
    let msg = error(&["list", path, &long]);
    assert!(msg.len() < 1000, "{msg}");
    assert!(
        msg.starts_with(&format!(
            "no function matches {:?}… (4000 bytes)\n",
            "y".repeat(60)
        )),
        "{msg}"
    );
}

#[test]
fn bad_durations() {
    let _lock = common::serial();
    let bin = common::build("cpp_o2");
    let spec = format!("{}:shop::target", bin.to_str().unwrap());
    let msg = usage_error(&["latency", "--slower-than", "5", &spec]);
    assert_mentions(&msg, &["\"5\"", "unit"]);
    let msg = usage_error(&["latency", "--faster-than", "3h", &spec]);
    assert_mentions(&msg, &["3h"]);
    let msg = usage_error(&["latency", "--slower-than", "fast", &spec]);
    assert_mentions(&msg, &["fast"]);
    let msg = usage_error(&["latency", "--slower-than", "banana", &spec]);
    assert_mentions(&msg, &["banana", "--slower-than"]);
    let msg = usage_error(&[
        "latency",
        "--slower-than",
        "2ms",
        "--faster-than",
        "1ms",
        &spec,
    ]);
    assert_mentions(&msg, &["--slower-than", "--faster-than"]);
    // -d and -i are checked as they are parsed: usage errors.
    let msg = usage_error(&["latency", "-d", "0", &spec]);
    assert_mentions(&msg, &["--duration", "positive"]);
    let msg = usage_error(&["latency", "-i", "0ms", &spec]);
    assert_mentions(&msg, &["--interval", "positive"]);
    // A negative number is a bad value, not an unknown option.
    let msg = usage_error(&["latency", "-i", "-1", &spec]);
    assert_mentions(&msg, &["--interval", "positive"]);
    let msg = usage_error(&["latency", "-d", "-0.5", &spec]);
    assert_mentions(&msg, &["--duration", "positive"]);
}

#[test]
fn pid_and_command_are_exclusive() {
    let _lock = common::serial();
    let marker = scratch().join("must-not-exist");
    let _ = std::fs::remove_file(&marker);
    let pid = std::process::id().to_string();
    let msg = usage_error(&[
        "latency",
        "-p",
        &pid,
        "foo",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_mentions(&msg, &["-p", "--"]);
    // The command was not started.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn library_not_mapped() {
    let _lock = common::serial();
    // This test process maps libc but no libnosuchthing.
    let pid = std::process::id().to_string();
    let msg = error(&["latency", "-p", &pid, "nosuchthing:foo"]);
    assert_mentions(&msg, &["nosuchthing", &pid]);
    let msg = error(&["list", "-p", &pid, "nosuchthing:foo"]);
    assert_mentions(&msg, &["nosuchthing"]);
    // Without a process, the library is looked for on disk.
    let msg = error(&["latency", "libnosuchthing:foo"]);
    assert_mentions(&msg, &["nosuchthing"]);
    // A library the command does not need.
    let bin = common::build("cpp_o2");
    let msg = error(&[
        "latency",
        "nosuchthing:foo",
        "--",
        bin.to_str().unwrap(),
        "1",
        "1",
    ]);
    assert_mentions(&msg, &["nosuchthing"]);
}

#[test]
fn bare_function_needs_a_target() {
    let _lock = common::serial();
    let msg = error(&["latency", "foo"]);
    assert_mentions(&msg, &["foo", "-p"]);
    let msg = error(&["list", "foo"]);
    assert_mentions(&msg, &["foo", "-p"]);
}

#[test]
fn unknown_command() {
    let _lock = common::serial();
    let msg = error(&["latency", "foo", "--", "/nonexistent/cmd"]);
    assert_mentions(&msg, &["/nonexistent/cmd"]);
    let msg = error(&["latency", "foo", "--", "no-such-command-for-tachy"]);
    assert_mentions(&msg, &["no-such-command-for-tachy"]);
}

#[test]
fn unsupported_targets() {
    let _lock = common::serial();
    if std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        common::skip("the part without kprobes: this kernel has kprobes");
    } else if !common::is_root() {
        common::skip("the part without kprobes: needs root to load programs");
    } else {
        // No kprobes, and fentry either refused (here: EPERM) or, on a
        // kernel that allows it, not the reason for an error.
        // -d 1: where fentry works, the trace ends by itself.
        for args in [
            &["latency", "-d", "1", "k:vfs_read"][..],
            &["latency", "-d", "1", "vfs_read"],
        ] {
            let out = tachy(args);
            if out.status.success() {
                common::skip("the part without kprobes: fentry works here");
                break;
            }
            let msg = error(args);
            assert_mentions(
                &msg,
                &[
                    "kernel function vfs_read cannot be traced here",
                    "fentry/fexit failed (",
                    "no kprobes",
                    "CONFIG_KPROBES=y",
                    "syscall:NAME",
                ],
            );
        }
    }
    let msg = usage_error(&["nested", "k:vfs_read"]);
    assert_mentions(&msg, &["k:vfs_read", "tachy latency"]);
    let msg = error(&["latency", "no_such_function_anywhere"]);
    assert_mentions(
        &msg,
        &["no_such_function_anywhere", "nor kernel function", "-p PID"],
    );
    let msg = error(&["latency", "*"]);
    assert_mentions(&msg, &["\"*\" names", "kernel functions; name at most 64"]);
    let msg = usage_error(&["latency", ":foo"]);
    assert_mentions(&msg, &[":foo"]);
    let bin = common::build("plain");
    let path = bin.to_str().unwrap();
    let msg = usage_error(&["list", "-p", "1", path, "slow_sum"]);
    assert_mentions(&msg, &["-p"]);
}

#[test]
fn usage_errors_exit_2() {
    let _lock = common::serial();
    usage_error(&["latency"]);
    usage_error(&["latency", "--bogus", "foo"]);
    usage_error(&["latency", "-u", "-m", "-p", "1", "foo"]);
    usage_error(&["latency", "-d", "soon", "-p", "1", "foo"]);
    usage_error(&["list"]);
    usage_error(&["frobnicate"]);
}

/// Every bad argument, alone or in a combination that cannot work, is a
/// usage error: exit status 2 and clap's message, before anything runs.
#[test]
fn every_usage_error_exits_2() {
    let _lock = common::serial();
    let bin = common::build("plain");
    let path = bin.to_str().unwrap();
    let spec = format!("{path}:slow_sum");
    let pid = std::process::id().to_string();
    for (args, says) in [
        (&["latency", "--slower-than", "banana", &spec][..], "banana"),
        (&["latency", "--slower-than", "5", &spec], "needs a unit"),
        (&["latency", ""], "empty function name"),
        (&["latency", "  "], "empty function name"),
        (&["latency", "lib:"], "no function after ':'"),
        (&["nested", ""], "empty function name"),
        (&["latency", "-p", "0", "foo"], "0 is not a process"),
        (&["latency", "-p", "-3", "foo"], "not a process"),
        (
            &["latency", "-t", "0", "-p", &pid, "foo"],
            "0 is not a process or thread id",
        ),
        (&["latency", "-p", &pid, "foo", "--", "true"], "exclusive"),
        (&["nested", "-p", &pid, "foo", "--", "true"], "exclusive"),
        (
            &["latency", "-t", "1", &spec, "--", "true"],
            "-t and a command",
        ),
        (&["latency", "--follow", &spec], "--follow needs a process"),
        (&["nested", "--depth", "0", &spec], "--depth"),
        (&["nested", "--depth", "9", &spec], "--depth"),
        (&["nested", "--expand", "", &spec], "--expand"),
        (
            &["list", "-p", "1", path, "slow_sum"],
            "either -p PID or a PATH",
        ),
        (&["list", path, ""], "empty function name"),
        (&["list", "-p", "0", "foo"], "0 is not a process"),
        (&["latency", "-i", "-1", &spec], "positive"),
        (
            &[
                "latency",
                "--slower-than",
                "2ms",
                "--faster-than",
                "1ms",
                &spec,
            ],
            "--faster-than",
        ),
        (
            &["nested", "--svg", "/tmp/x.svg", "-o", "/tmp/x", &spec],
            "--output",
        ),
        (&["nested", "--json", "--folded", &spec], "--folded"),
    ] {
        let msg = usage_error(args);
        assert!(
            msg.contains(says),
            "tachy {args:?}: {msg:?} does not say {says:?}"
        );
    }
}

#[test]
fn unknown_system_call() {
    let _lock = common::serial();
    let msg = error(&["latency", "--dry-run", "syscall:nanosleep_x"]);
    assert_mentions(&msg, &["nanosleep_x", "near names: nanosleep"]);
    let msg = error(&["latency", "--dry-run", "sys:zzzz"]);
    assert_mentions(&msg, &["no system call is named \"zzzz\""]);
}

/// `--dry-run -p PID` names the process the probes are limited to.
#[test]
fn dry_run_names_the_pid() {
    let _lock = common::serial();
    let pid = std::process::id().to_string();
    let out = tachy(&["latency", "--dry-run", "-p", &pid, "c:malloc"]);
    let text = show(&["latency", "--dry-run", "-p", &pid, "c:malloc"], &out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // The plan is what was asked for: on standard output.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().unwrap_or("");
    assert!(
        first.ends_with(&format!("counted in pid {pid}")),
        "first line {first:?}:\n{text}"
    );
}

/// A report file that cannot be written fails at once, before any probe
/// is attached (not when tracing ends, losing the run).
#[test]
fn report_files_are_checked_first() {
    let _lock = common::serial();
    let bin = common::build("plain");
    let spec = format!("{}:slow_sum", bin.to_str().unwrap());
    let start = Instant::now();
    let msg = error(&["nested", "--svg", "/nonexistent/dir/g.svg", &spec]);
    assert_mentions(&msg, &["cannot write /nonexistent/dir/g.svg"]);
    let msg = error(&["latency", "-o", "/nonexistent/dir/r.txt", &spec]);
    assert_mentions(&msg, &["cannot write /nonexistent/dir/r.txt"]);
    let msg = error(&["nested", "--folded", "-o", "/nonexistent/dir/f", &spec]);
    assert_mentions(&msg, &["cannot write /nonexistent/dir/f"]);
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// A command that cannot run is refused before anything is attached or
/// printed.
#[test]
fn command_that_cannot_run() {
    let _lock = common::serial();
    let dir = scratch();
    let bin = common::build("plain");
    // The program, without execute permission.
    let noexec = dir.join("plain-noexec");
    std::fs::copy(&bin, &noexec).unwrap();
    let mut perm = std::fs::metadata(&noexec).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o644);
    std::fs::set_permissions(&noexec, perm).unwrap();
    let p = noexec.to_str().unwrap();
    let msg = error(&["latency", "slow_sum", "--", p, "1", "1"]);
    assert_mentions(&msg, &[p, "not executable"]);
    // Executable text that is neither a program nor a #! script.
    let text = dir.join("not-a-program");
    std::fs::write(&text, "echo hello\n").unwrap();
    let mut perm = std::fs::metadata(&text).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&text, perm).unwrap();
    let t = text.to_str().unwrap();
    let msg = error(&["latency", "c:malloc", "--", t]);
    assert_mentions(&msg, &[t, "#!"]);
}

/// `-t TID` names a thread that exists, in the process of `-p`.
#[test]
fn thread_that_does_not_exist() {
    let _lock = common::serial();
    let pid = std::process::id().to_string();
    let tid = unused_pid().to_string();
    let msg = error(&["latency", "-p", &pid, "-t", &tid, "c:malloc"]);
    assert_mentions(&msg, &[&format!("process {pid} has no thread {tid}")]);
    // Process 1 is no thread of this test process.
    let msg = error(&["latency", "-p", &pid, "-t", "1", "c:malloc"]);
    assert_mentions(&msg, &[&format!("process {pid} has no thread 1")]);
    let bin = common::build("plain");
    let spec = format!("{}:slow_sum", bin.to_str().unwrap());
    let msg = error(&["latency", "-t", &tid, &spec]);
    assert_mentions(&msg, &[&format!("no thread {tid} is running")]);
}

// ---------------------------------------------------------------------------
// What tachy says and where its reports go while it traces (root)
// ---------------------------------------------------------------------------

use common::run::Tachy;

const NO_WAIT: &[(&str, &str)] = &[("FIXTURE_NO_WAIT", "1")];

/// `-o FILE`: the reports, and only they, go to FILE; the traced
/// command's output stays on standard output.
#[test]
fn reports_go_to_the_output_file() {
    let _lock = common::needs_root!();
    let bin = common::build("plain");
    let exe = bin.to_str().unwrap();
    let file = scratch().join("reports.json");
    let _ = std::fs::remove_file(&file);
    let f = file.to_str().unwrap();
    let out = Tachy::start(
        &[
            "latency", "--json", "-o", f, "slow_sum", "--", exe, "4", "1",
        ],
        NO_WAIT,
    )
    .finish(Duration::from_secs(60));
    out.assert_success();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}\n{out}");
    let rep: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(rep["functions"][0]["name"], "slow_sum", "{text}");
    assert_eq!(rep["functions"][0]["count"], 4, "{text}");
    assert!(out.stdout.contains("count slow_sum 4"), "{out}");
    assert!(!out.stdout.contains('{'), "{out}");
    // The header goes to standard error when the report does not go to
    // standard output.
    assert!(out.stderr.contains("Tracing 1 function"), "{out}");
    let _ = std::fs::remove_file(&file);
}

/// With `-i`, `--svg` draws the whole run: here every call happened in
/// the first intervals, and the last ones saw none.
#[test]
fn svg_holds_every_interval() {
    let _lock = common::needs_root!();
    let bin = common::build("nested_o2");
    let exe = bin.to_str().unwrap();
    let svg = scratch().join("whole.svg");
    let _ = std::fs::remove_file(&svg);
    let spec = format!("{exe}:app::handle");
    let script = format!("{exe} 4 1; sleep 1.5");
    let out = Tachy::start(
        &[
            "nested",
            "--svg",
            svg.to_str().unwrap(),
            "-i",
            "0.3",
            "--follow",
            &spec,
            "--",
            "sh",
            "-c",
            &script,
        ],
        NO_WAIT,
    )
    .finish(Duration::from_secs(60));
    out.assert_success();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("app::handle"), "{out}");
    assert!(text.contains("app::slow_path"), "{out}");
    let _ = std::fs::remove_file(&svg);
}

/// Pids printed in `(pid N)` by tachy.
fn pid_in(text: &str) -> Option<i32> {
    let at = text.find("(pid ")? + 5;
    let end = text[at..].find(')')? + at;
    text[at..end].parse().ok()
}

/// `-d` ends tracing, not the command: tachy says it runs on.
#[test]
fn duration_leaves_the_command_running_and_says_so() {
    let _lock = common::needs_root!();
    let start = Instant::now();
    let mut t = Tachy::start(
        &["latency", "-d", "0.5", "c:nanosleep", "--", "sleep", "5"],
        &[],
    );
    t.wait_for_line(true, Duration::from_secs(10), |l| l.contains("runs on"));
    assert!(start.elapsed() < Duration::from_secs(4), "{}", t.describe());
    let text = t.describe();
    let line = text
        .lines()
        .find(|l| l.contains("runs on"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.starts_with("tachy: ") && line.contains("sleep 5"),
        "{line}"
    );
    let pid = pid_in(&line).unwrap_or_else(|| panic!("no pid in {line:?}"));
    // SAFETY: kill() on the sleep this test started through tachy.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "{line}");
    let out = t.finish(Duration::from_secs(10));
    out.assert_success();
    // Nothing else to say: the function is in a library the command maps.
    assert!(!out.stderr.contains("nothing was counted"), "{out}");
}

/// After Ctrl-C (SIGINT to tachy alone), tachy reports, then says it
/// waits for the command, and ends with the command's status.
#[test]
fn interrupted_tachy_says_it_waits_for_the_command() {
    let _lock = common::needs_root!();
    let mut t = Tachy::start(&["latency", "c:nanosleep", "--", "sleep", "2"], &[]);
    t.wait_for_header(false);
    let start = Instant::now();
    t.signal(libc::SIGINT);
    t.wait_for_line(true, Duration::from_secs(5), |l| {
        l.starts_with("tachy: waiting for sleep 2 (pid ") && l.contains("Ctrl-C again")
    });
    let out = t.finish(Duration::from_secs(20));
    out.assert_success();
    assert!(start.elapsed() >= Duration::from_millis(1000), "{out}");
    assert!(out.stdout.contains("count: "), "{out}");
}

/// A shell that starts the traced program as a new process: nothing is
/// counted without --follow, and tachy says so.
#[test]
fn shell_command_without_follow_is_explained() {
    let _lock = common::needs_root!();
    let bin = common::build("plain");
    let exe = bin.to_str().unwrap();
    let spec = format!("{exe}:slow_sum");
    // Two commands: the shell forks for the first.
    let script = format!("{exe} 2 1; true");
    let out = Tachy::start(
        &["latency", "--json", &spec, "--", "sh", "-c", &script],
        NO_WAIT,
    )
    .finish(Duration::from_secs(60));
    out.assert_success();
    assert_eq!(out.single_report()["functions"][0]["count"], 0, "{out}");
    let hint = out
        .stderr
        .lines()
        .find(|l| l.contains("nothing was counted"))
        .unwrap_or_else(|| panic!("no hint\n{out}"));
    assert!(
        hint.contains("sh is a shell or wrapper") && hint.contains("--follow"),
        "{hint}"
    );
    let out = Tachy::start(
        &[
            "latency", "--json", "--follow", &spec, "--", "sh", "-c", &script,
        ],
        NO_WAIT,
    )
    .finish(Duration::from_secs(60));
    out.assert_success();
    assert_eq!(out.single_report()["functions"][0]["count"], 2, "{out}");
    assert!(!out.stderr.contains("nothing was counted"), "{out}");
}

/// Runs a command, panicking if it fails.
fn run(cmd: &mut Command) {
    let st = cmd.status().expect("command runs");
    assert!(st.success(), "{cmd:?}");
}

/// A miss names every object searched and where each one's symbols came
/// from, the executable first, and says when it has none.
#[test]
fn miss_names_every_object_searched() {
    let _lock = common::serial();
    let msg = error(&["latency", "nosuchfn", "--", "/usr/bin/true"]);
    assert!(
        msg.starts_with(
            "no function matches \"nosuchfn\"\nsearched:\n  /usr/bin/true (no function symbols: stripped, and exports none"
        ),
        "{msg}"
    );
    assert_mentions(&msg, &["libc.so.6 (symbols from "]);

    // A stripped C++ executable: the executable is named first, with no
    // symbols, then the libraries it needs.
    let dir = scratch().join("stripped-miss");
    std::fs::create_dir_all(&dir).unwrap();
    let app = dir.join("app");
    run(Command::new("strip")
        .arg("-o")
        .arg(&app)
        .arg(common::build("cpp_o2")));
    std::fs::copy(common::build("libfixture.so"), dir.join("libfixture.so")).unwrap();
    let app_s = app.to_str().unwrap();
    let msg = error(&["latency", "shop::Store::lokup", "--", app_s, "1", "1"]);
    assert!(
        msg.starts_with(&format!(
            "no function matches \"shop::Store::lokup\"\nsearched:\n  {app_s} (no function symbols: stripped, and exports none"
        )),
        "{msg}"
    );
    assert_mentions(
        &msg,
        &[
            "libfixture.so (symbols from .symtab)",
            "libstdc++.so.6",
            "(symbols from .dynsym (exported functions only))",
        ],
    );
    assert!(!msg.contains("near names"), "{msg}");
}

/// A stripped object whose `.gnu_debuglink` file is missing: the message
/// says which file was looked for, and where.
#[test]
fn missing_debuglink_file_is_named() {
    let _lock = common::serial();
    let dir = scratch().join("debuglink-missing");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, src) in [("app", "cpp_o2"), ("libfixture.so", "libfixture.so")] {
        let out = dir.join(name);
        let debug = dir.join(format!("{name}.debug"));
        let built = common::build(src);
        run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&built)
            .arg(&debug));
        run(Command::new("strip").arg("-o").arg(&out).arg(&built));
        run(Command::new("objcopy")
            .current_dir(&dir)
            .arg(format!("--add-gnu-debuglink={name}.debug"))
            .arg(name));
        std::fs::remove_file(&debug).unwrap();
    }
    let d = std::fs::canonicalize(&dir).unwrap();
    let d = d.to_str().unwrap();
    let looked = |name: &str| {
        format!("{name}.debug (named by .gnu_debuglink) in {d}, {d}/.debug or /usr/lib/debug{d}")
    };
    // An executable with no symbols at all.
    let app = dir.join("app");
    let msg = error(&["list", app.to_str().unwrap(), "shop::risky"]);
    assert_mentions(
        &msg,
        &[
            "has no function symbols",
            "no debug file: looked for",
            &looked("app"),
        ],
    );
    // A library with exported functions only: listed, and the header says
    // which debug file is missing.
    let lib = dir.join("libfixture.so");
    let out = tachy(&["list", lib.to_str().unwrap(), "fixture_io"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&["list"], &out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let header = stdout.lines().next().unwrap();
    assert!(
        header.starts_with(&format!(
            "{} (symbols from .dynsym (exported functions only); no debug file: looked for ",
            lib.display()
        )),
        "{header}"
    );
    assert!(header.contains(&looked("libfixture.so")), "{header}");
    // A miss in it says so too.
    let msg = error(&["list", lib.to_str().unwrap(), "fixture_nope"]);
    assert_mentions(&msg, &[&looked("libfixture.so")]);
}

/// Near names compare whole qualified paths, without `[abi:…]` tags and
/// parameter lists: `kv::Store::raed` is near `kv::Store::read[abi:cxx11](int)`.
#[test]
fn near_names_ignore_abi_tags_and_parameters() {
    let _lock = common::serial();
    let exe = scratch().join("kvdemo");
    run(Command::new("g++")
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(&exe)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo.cpp")));
    let exe = exe.to_str().unwrap();
    let near = |n: &str| format!("\nnear names:\n  {n}\nsearched:\n");
    let msg = error(&["list", exe, "kv::Store::raed"]);
    assert!(msg.contains(&near("kv::Store::read")), "{msg}");
    let msg = error(&["list", exe, "kv::Stroe::read"]);
    assert!(msg.contains(&near("kv::Store::read")), "{msg}");
    // With a parameter list: the overloads there are, with theirs.
    let msg = error(&["list", exe, "kv::Store::read(long)"]);
    assert!(msg.contains(&near("kv::Store::read(int)")), "{msg}");
    // Not a like-named function of another library's class.
    let msg = error(&["list", exe, "leveldb::DBImpl::Get"]);
    assert!(!msg.contains("near names"), "{msg}");
}

/// JSON or folded stacks on standard output never mix with the traced
/// command's output: the command writes its standard output to stderr.
#[test]
fn machine_output_holds_reports_only() {
    let _lock = common::needs_root!();
    let plain = common::build("plain");
    let out = Tachy::start(
        &[
            "latency",
            "--json",
            "slow_sum",
            "--",
            plain.to_str().unwrap(),
            "4",
            "1",
        ],
        NO_WAIT,
    )
    .finish(Duration::from_secs(60));
    out.assert_success();
    assert!(!out.stdout.is_empty(), "{out}");
    assert!(out.stdout.lines().all(|l| l.starts_with('{')), "{out}");
    assert!(out.stderr.contains("count slow_sum 4"), "{out}");
    let nested = common::build("nested_o2");
    let out = Tachy::start(
        &[
            "nested",
            "--folded",
            "app::handle",
            "--",
            nested.to_str().unwrap(),
            "4",
            "1",
        ],
        NO_WAIT,
    )
    .finish(Duration::from_secs(60));
    out.assert_success();
    assert!(!out.stdout.is_empty(), "{out}");
    assert!(
        out.stdout
            .lines()
            .all(|l| l.starts_with("app::handle(int)") && !l.starts_with("count ")),
        "{out}"
    );
    assert!(out.stderr.contains("\ndone\n"), "{out}");
}

// ---------------------------------------------------------------------------
// Edges of input: each refused with its exit status and one exact line
// ---------------------------------------------------------------------------

/// Runs tachy expecting a usage error; returns the first line on stderr
/// (clap's `error: ...`).
fn usage_line(args: &[&str]) -> String {
    usage_error(args)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Values that cannot work are usage errors (exit status 2), each said in
/// one exact line.
#[test]
fn edges_of_input_are_usage_errors() {
    let _lock = common::serial();
    let plain = common::build("plain");
    let spec = format!("{}:slow_sum", plain.display());
    let cpp = format!("{}:shop::target", common::build("cpp_o2").display());
    let exits = format!("{}:ex::throwing", common::build("exits").display());
    let pid = std::process::id().to_string();
    for (args, line) in [
        (
            &["latency", "-i", "1ns", &spec][..],
            r#"error: invalid value '1ns' for '--interval <SECS>': "1ns" is shorter than 10ms, the shortest interval"#,
        ),
        (
            &["nested", "-i", "0.009", &spec],
            r#"error: invalid value '0.009' for '--interval <SECS>': "0.009" is shorter than 10ms, the shortest interval"#,
        ),
        (
            &["latency", "-d", "1000000000", &spec],
            r#"error: invalid value '1000000000' for '--duration <SECS>': "1000000000" is longer than 999999999 seconds (31 years), the most"#,
        ),
        (
            &["latency", "--faster-than", "0ns", &spec],
            "error: --faster-than 0ns keeps no call: give a positive duration (e.g. 250us)",
        ),
        (
            &["latency", "--pgrep", "", "foo"],
            "error: --pgrep: an empty pattern matches every process: give a pattern",
        ),
        (
            &["latency", "--pgrep", "([", "foo"],
            r#"error: --pgrep "([": Invalid regular expression"#,
        ),
        (
            &["latency", "--by", "caller", "-p", &pid, "syscall:read"],
            "error: --by caller: a system call (syscall:read) has no caller that tachy reads; group it by tid or pid",
        ),
        (
            &["latency", "--by", "goroutine", &cpp],
            "error: --by goroutine groups calls of Go functions; shop::target(int) is not Go code",
        ),
        (
            &["latency", "--uretprobe", &exits],
            "error: --uretprobe: ex::throwing(long) may throw (calls __cxa_throw@plt at .cold+0x2d in \
             ex::may_throw(long)), and an exception through a uretprobe aborts the process: add --force \
             to use one anyway",
        ),
    ] {
        assert_eq!(usage_line(args), line, "tachy {args:?}");
    }
    // The edges themselves are taken; --force takes the uretprobe.
    for args in [
        &["latency", "--dry-run", "-i", "10ms", &spec][..],
        &["latency", "--dry-run", "-d", "999999999", &spec],
        &["latency", "--dry-run", "--faster-than", "1ns", &spec],
        &["latency", "--dry-run", "--uretprobe", "--force", &exits],
    ] {
        let out = tachy(args);
        assert_eq!(out.status.code(), Some(0), "{}", show(args, &out));
    }
    let line = usage_line(&["latency", "--force", &exits]);
    assert!(
        line.starts_with("error: the following required arguments"),
        "{line}"
    );
}

/// `-p` of a thread other than a process's main thread names the process
/// and the `-t` to use; `-p` of a zombie says it has exited.
#[test]
fn pid_of_a_thread_or_a_zombie() {
    let _lock = common::serial();
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        let _ = stop_rx.recv();
    });
    let tid = rx.recv().unwrap().to_string();
    let pid = std::process::id().to_string();
    assert_eq!(
        error(&["latency", "-p", &tid, "c:malloc"]),
        format!("{tid} is a thread of process {pid}: use -p {pid} -t {tid}")
    );
    stop_tx.send(()).unwrap();
    thread.join().unwrap();
    let mut child = Command::new("true").spawn().unwrap();
    let zombie = child.id().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{zombie}/stat"))
        .unwrap()
        .contains(") Z")
    {
        assert!(Instant::now() < deadline, "{zombie} did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        error(&["latency", "-p", &zombie, "c:malloc"]),
        format!("process {zombie} has exited: a zombie that its parent {pid} has not reaped")
    );
    child.wait().unwrap();
}

/// A process that exits while tachy reads its symbols (it exits as soon
/// as its executable is opened): said as such, exit status 1.
#[test]
fn process_that_exits_during_planning() {
    let _lock = common::serial();
    if !common::is_root() {
        common::skip("needs root to attach");
        return;
    }
    let fx = common::Fixture::spawn("faults", &["exit-on-open"]);
    let pid = fx.pid().to_string();
    assert_eq!(
        error(&["latency", "-p", &pid, "tick"]),
        format!("process {pid} exited before its probes were attached")
    );
}
