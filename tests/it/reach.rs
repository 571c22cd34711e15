//! Reach: stripped binaries with separate debug information (debuglink,
//! build ID, MiniDebugInfo), a process in its own mount namespace whose
//! binary the host cannot see, and a process whose binary was deleted.
//! Every trace asserts exact counts.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::report::{func, num};
use common::Fixture;
use serde_json::Value;

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A fresh directory holding a copy of the C++ fixture (and the library it
/// loads from its own directory).
fn scratch(tag: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("reach-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = common::build("cpp_o2");
    std::fs::copy(&exe, dir.join("app")).unwrap();
    std::fs::copy(
        exe.with_file_name("libfixture.so"),
        dir.join("libfixture.so"),
    )
    .unwrap();
    dir
}

/// Strips `app` in `dir`, keeping its debug information in `.debug/app.debug`
/// named by a debuglink.
fn strip_with_debuglink(dir: &Path) {
    std::fs::create_dir_all(dir.join(".debug")).unwrap();
    run(Command::new("objcopy").current_dir(dir).args([
        "--only-keep-debug",
        "app",
        ".debug/app.debug",
    ]));
    run(Command::new("strip")
        .current_dir(dir)
        .args(["--strip-all", "app"]));
    run(Command::new("objcopy")
        .current_dir(dir)
        .args(["--add-gnu-debuglink=.debug/app.debug", "app"]));
}

fn tachy(args: &[&str]) -> std::process::Output {
    Command::new(common::tachy())
        .args(args)
        .output()
        .expect("tachy runs")
}

/// Runs `tachy ARGS -- APP 6 2` and returns its one JSON report.
fn trace_command(args: &[&str], app: &Path) -> (Value, String) {
    let mut all: Vec<&str> = args.to_vec();
    let app_s = app.to_str().unwrap();
    all.extend(["--", app_s, "6", "2"]);
    let out = Command::new(common::tachy())
        .args(&all)
        .env("FIXTURE_NO_WAIT", "1")
        .output()
        .expect("tachy runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "tachy {all:?} failed\n{stdout}\n{stderr}"
    );
    let json: Vec<Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(json.len(), 1, "{stdout}\n{stderr}");
    (json.into_iter().next().unwrap(), stdout)
}

/// Attaches `tachy ARGS -p PID` to a waiting fixture, lets it run, and
/// returns tachy's one JSON report and the fixture's stdout.
fn trace_pid(args: &[&str], mut fx: Fixture) -> (Value, String) {
    let pid = fx.pid().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-p", &pid]);
    let mut child = Command::new(common::tachy())
        .args(&all)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tachy starts");
    let mut stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut err_text = String::new();
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("tachy {all:?} never attached: {err_text}"));
        err_text.push_str(&line);
        err_text.push('\n');
        if line.starts_with("Tracing ") {
            break;
        }
    }
    fx.go();
    let (status, fx_out) = fx.wait();
    assert!(status.success(), "fixture failed under tracing: {fx_out}");
    let mut out = String::new();
    stdout.read_to_string(&mut out).unwrap();
    let st = child.wait().unwrap();
    while let Ok(l) = rx.try_recv() {
        err_text.push_str(&l);
    }
    assert!(st.success(), "tachy {all:?}: {out}\n{err_text}");
    let json: Vec<Value> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(json.len(), 1, "{out}\n{err_text}");
    (json.into_iter().next().unwrap(), fx_out)
}

/// 6 iterations x 2 threads: risky returns on even iterations, throws on odd.
fn check_counts(rep: &Value) {
    assert_eq!(
        num(func(rep, "shop::Store::lookup(int)"), "count"),
        12,
        "{rep:#}"
    );
    let risky = func(rep, "shop::risky(int)");
    assert_eq!(
        (num(risky, "count"), num(risky, "unwound")),
        (6, 6),
        "{risky}"
    );
    assert!(num(risky, "min_ns") >= 250_000, "{risky}");
}

const FUNCS: &[&str] = &[
    "latency",
    "--json",
    "shop::Store::lookup(int)",
    "shop::risky",
];

#[test]
fn debuglink_debug_file_gives_symbols_and_lines() {
    let _lock = common::serial();
    let dir = scratch("debuglink");
    strip_with_debuglink(&dir);
    let app = dir.join("app");
    let out = tachy(&["list", "--sites", app.to_str().unwrap(), "shop::risky"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let debug = std::fs::canonicalize(dir.join(".debug/app.debug")).unwrap();
    assert!(
        text.starts_with(&format!(
            "{} (symbols from the debug file {}):",
            app.display(),
            debug.display()
        )),
        "{text}"
    );
    // Call sites are placed with the debug file's DWARF.
    assert!(text.contains("workload.cpp:"), "{text}");
    // --verbose and --dry-run say it too.
    let spec = format!("{}:shop::risky", app.display());
    let out = tachy(&["latency", "--dry-run", &spec]);
    let err = String::from_utf8_lossy(&out.stdout);
    assert!(
        err.contains(&format!(
            "(symbols from the debug file {})",
            debug.display()
        )),
        "{err}"
    );
    if common::skip_unless_root() {
        return;
    }
    let (rep, _) = trace_command(FUNCS, &app);
    check_counts(&rep);
}

#[test]
fn debuglink_with_wrong_crc_is_not_used() {
    let _lock = common::serial();
    let dir = scratch("badcrc");
    strip_with_debuglink(&dir);
    // Another build's debug file under the same name: its CRC differs.
    run(Command::new("objcopy").current_dir(&dir).args([
        "--only-keep-debug",
        common::build("cpp_o0").to_str().unwrap(),
        ".debug/app.debug",
    ]));
    let out = tachy(&["list", dir.join("app").to_str().unwrap(), "shop::risky"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("has no function symbols"), "{err}");
}

#[test]
fn minidebuginfo_gives_symbols() {
    let _lock = common::serial();
    let dir = scratch("mini");
    run(Command::new("objcopy")
        .current_dir(&dir)
        .args(["--only-keep-debug", "app", "full.debug"]));
    run(Command::new("objcopy")
        .current_dir(&dir)
        .args(["--strip-debug", "full.debug", "mini"]));
    run(Command::new("xz").current_dir(&dir).args(["-f", "mini"]));
    run(Command::new("strip")
        .current_dir(&dir)
        .args(["--strip-all", "app"]));
    run(Command::new("objcopy").current_dir(&dir).args([
        "--add-section",
        ".gnu_debugdata=mini.xz",
        "app",
    ]));
    let app = dir.join("app");
    let out = tachy(&["list", app.to_str().unwrap(), "shop::risky"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!(
            "{} (symbols from .gnu_debugdata (MiniDebugInfo)):",
            app.display()
        )),
        "{text}"
    );
    if common::skip_unless_root() {
        return;
    }
    let (rep, _) = trace_command(FUNCS, &app);
    check_counts(&rep);
}

/// Removes a file tests put under /usr/lib/debug, even on failure.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn build_id_debug_file_gives_symbols() {
    let _lock = common::needs_root!();
    let dir = scratch("buildid");
    run(Command::new("objcopy")
        .current_dir(&dir)
        .args(["--only-keep-debug", "app", "app.debug"]));
    run(Command::new("strip")
        .current_dir(&dir)
        .args(["--strip-all", "app"]));
    let notes = run(Command::new("readelf").args(["-n", dir.join("app").to_str().unwrap()]));
    let notes = String::from_utf8_lossy(&notes.stdout);
    let id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("the fixture has a build ID")
        .trim()
        .to_string();
    let target = Path::new("/usr/lib/debug/.build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    let _cleanup = Cleanup(target.clone());
    std::fs::copy(dir.join("app.debug"), &target).unwrap();
    let app = dir.join("app");
    let out = tachy(&["list", app.to_str().unwrap(), "shop::risky"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "(symbols from the debug file {})",
            target.display()
        )),
        "{text}"
    );
    let (rep, _) = trace_command(FUNCS, &app);
    check_counts(&rep);
}

#[test]
fn deleted_binary_is_traced_through_map_files() {
    let _lock = common::needs_root!();
    let dir = scratch("deleted");
    let app = dir.join("app");
    let mut cmd = Command::new(&app);
    cmd.args(["6", "2"]);
    let fx = Fixture::spawn_command("app", cmd);
    std::fs::remove_file(&app).unwrap();
    let (rep, fx_out) = trace_pid(FUNCS, fx);
    check_counts(&rep);
    assert!(fx_out.contains("done"), "{fx_out}");
}

/// A stripped binary (debug file beside it) in a mount namespace of its
/// own, at a path that on the host is an empty directory: traced by
/// `latency` and by `nested` with exact counts.
#[test]
fn stripped_binary_in_its_own_mount_namespace() {
    let _lock = common::needs_root!();
    if Command::new("unshare").arg("--help").output().is_err() {
        common::skip("needs unshare(1)");
        return;
    }
    let dir = scratch("mntns");
    strip_with_debuglink(&dir);
    let inside = dir.join("mnt");
    std::fs::create_dir_all(&inside).unwrap();
    let start = |tag: &str| {
        let script = format!(
            "mount -t tmpfs tachy-{tag} {m} && mkdir {m}/.debug && cp {d}/app {d}/libfixture.so {m}/ && cp {d}/.debug/app.debug {m}/.debug/ && exec {m}/app 6 2",
            m = inside.display(),
            d = dir.display()
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
        Fixture::spawn_command("app", cmd)
    };
    let fx = start("latency");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", fx.pid())).unwrap();
    let seen = format!("{}/app", inside.display());
    assert!(maps.contains(&seen), "{maps}");
    assert!(
        !Path::new(&seen).exists(),
        "{seen} must not exist on the host"
    );
    let (rep, _) = trace_pid(FUNCS, fx);
    check_counts(&rep);

    let fx = start("nested");
    let (rep, _) = trace_pid(&["nested", "--json", "shop::risky"], fx);
    let root = &rep["roots"][0];
    assert_eq!(root["name"], "shop::risky(int)", "{rep:#}");
    assert_eq!(
        (num(root, "count"), num(root, "unwound")),
        (6, 6),
        "{rep:#}"
    );
    let throw = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "shop::maybe_throw(int)")
        .unwrap_or_else(|| panic!("{rep:#}"));
    // The breakdown covers the 6 calls that returned; in each, maybe_throw
    // returned too (the other 6 calls left by exception, with their sites).
    assert_eq!(
        (num(throw, "count"), num(throw, "unwound")),
        (6, 0),
        "{throw}"
    );
}

/// A path target covers processes that start after tachy attached: two
/// runs of a program started once tachy is tracing its path are both
/// counted, exactly.
#[test]
fn path_target_covers_processes_started_later() {
    let _lock = common::needs_root!();
    let dir = scratch("later");
    let app = dir.join("app");
    let spec = format!("{}:shop::Store::lookup(int)", app.display());
    let mut child = Command::new(common::tachy())
        .args(["latency", "--json", "-d", "4", &spec])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let header = lines.next().unwrap().unwrap();
    assert!(
        header.starts_with("Tracing 1 function in every process that maps "),
        "{header}"
    );
    for _ in 0..2 {
        let st = Command::new(&app)
            .args(["3", "2"])
            .env("FIXTURE_NO_WAIT", "1")
            .output()
            .unwrap();
        assert!(st.status.success());
    }
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{out}");
    let rep: Value =
        serde_json::from_str(out.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(
        num(func(&rep, "shop::Store::lookup(int)"), "count"),
        12,
        "{rep:#}"
    );
}
