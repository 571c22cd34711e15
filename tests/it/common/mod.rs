//! Shared harness for tachy's integration tests.
//!
//! Builds the fixture programs in `tests/fixtures/` into
//! `$CARGO_TARGET_TMPDIR/fixtures/` and runs them under the fixture protocol:
//!
//! 1. the fixture prints `ready <pid>` on stdout (flushed);
//! 2. unless `FIXTURE_NO_WAIT=1` is set, it blocks until it reads one line
//!    from stdin (the "go" signal);
//! 3. it does its work, prints one `count <function> <calls>` line per traced
//!    function (plus `exceptions ...` / `panics ...` lines), then `done`,
//!    and exits 0.
//!
//! Arguments of every fixture: `<iterations> [threads]`.
//!
//! Fixture names accepted by [`build`] and [`Fixture::spawn`]:
//!
//! | name            | source                      | build                                   |
//! |-----------------|-----------------------------|-----------------------------------------|
//! | `libfixture.so` | libfixture.c, libfixture.h  | gcc -O2 -g -fPIC -shared                |
//! | `cpp_o2`        | workload.cpp (+ lib)        | g++ -std=c++17 -O2 -g, rpath `$ORIGIN`  |
//! | `cpp_o0`        | workload.cpp (+ lib)        | g++ -std=c++17 -O0 -g, rpath `$ORIGIN`  |
//! | `nested_o2`     | nested.cpp (+ lib)          | g++ -std=c++17 -O2 -g, rpath `$ORIGIN`  |
//! | `plain`         | plain.c                     | gcc -O2 -g                              |
//! | `faults`        | faults.c                    | gcc -O2 -g (modes: see the source)      |
//! | `libcold.so`    | libcold.c                   | gcc -O2 -fPIC -shared, then strip --strip-all |
//! | `shapes`        | shapes.c (+ libcold.so)     | gcc -O2 -g, rpath `$ORIGIN`             |
//! | `calls`         | calls.c                     | gcc -O2 -g                              |
//! | `calls_unwind`  | calls.c                     | gcc -O2 -g -DWITH_UNWIND (ret probes)   |
//! | `seams`         | seams.c (modes: see the source) | gcc -O2 -g                          |
//! | `exits`         | exits.cpp                   | g++ -O2 -g -fcf-protection=none         |
//! | `wide`          | wide.c                      | gcc -O2 -g                              |
//! | `ijump`         | ijump.c                     | gcc -O2 -g -pthread                     |
//! | `why`           | why.c (modes: see the source) | gcc -O2 -g -pthread                   |
//! | `args`          | args.cpp                    | g++ -std=c++17 -O2 -g                   |
//! | `args_nodebug`  | args.cpp                    | g++ -std=c++17 -O2 (no DWARF)           |
//! | `by`            | by.cpp                      | g++ -std=c++17 -O2 -g -pthread          |
//! | `rust_app`      | rust_app.rs                 | rustc -O -g -C panic=unwind (legacy)    |
//! | `rust_app_v0`   | rust_app.rs                 | same + -C symbol-mangling-version=v0    |
//! | `rust_names`    | rust_names.rs               | rustc -O -g (legacy)                    |
//! | `rust_names_v0` | rust_names.rs               | same + -C symbol-mangling-version=v0    |
//! | `gowork`        | gowork.go                   | go build (Debian's golang-go)           |
//! | `gowork_stripped` | gowork.go                 | go build -ldflags='-s -w'               |
//!
//! The expected call counts for given arguments are in [`expected_counts`].
//! Each test binary uses only part of this module, hence the blanket
//! `dead_code` allowance.

#![allow(dead_code)]

pub mod run;

/// Accessors of the nodes of `tachy nested --json` reports.
pub mod node {
    use serde_json::Value;

    pub fn num(v: &Value, key: &str) -> u64 {
        v[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
    }

    pub fn children(v: &Value) -> &Vec<Value> {
        v["children"]
            .as_array()
            .unwrap_or_else(|| panic!("no children array in {v}"))
    }

    pub fn name(v: &Value) -> &str {
        v["name"]
            .as_str()
            .unwrap_or_else(|| panic!("no name in {v}"))
    }
}

/// Accessors of the reports of `tachy latency --json`.
pub mod report {
    use serde_json::Value;

    /// `v[key]`, a number.
    pub fn num(v: &Value, key: &str) -> u64 {
        super::node::num(v, key)
    }

    /// The function named `name` in a report.
    pub fn func<'a>(rep: &'a Value, name: &str) -> &'a Value {
        rep["functions"]
            .as_array()
            .and_then(|fs| fs.iter().find(|f| f["name"] == name))
            .unwrap_or_else(|| panic!("no function {name} in {rep}"))
    }
}

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// How long [`Fixture::spawn`] waits for the `ready <pid>` line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Fixture::wait`] waits for the fixture to finish.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Directory holding the fixture sources.
pub fn fixtures_src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Directory the fixtures are built into.
pub fn fixtures_out_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures")
}

/// Path of the tachy binary under test.
pub fn tachy() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tachy"))
}

/// Process-wide lock so that tests which attach probes run one at a time.
/// A test that panicked while holding it does not poison it for the others.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether the test process runs with effective uid 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the Go toolchain (`go`, or `$GO`) runs here; the Go fixtures
/// need it (`make deps` installs Debian's golang-go).
pub fn have_go() -> bool {
    Command::new(env_or("GO", "go"))
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// True (after [`skip`]) when a Go test cannot run: no `go` here.
pub fn skip_without_go() -> bool {
    if have_go() {
        false
    } else {
        skip("no Go toolchain (`go` is not on PATH; `make deps` installs golang-go)");
        true
    }
}

/// Where [`skip`] lists what did not run; `make test` prints it after the
/// suite.
pub fn skipped_list() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped")
}

/// Says that the running test (or the part of it named in `why`) did not
/// run, and why: `skipped: NAME: WHY` on stderr, and the same line added to
/// [`skipped_list`]. libtest shows a test that returned early as passed, and
/// its stderr only when it fails; the list is what tells them apart. NAME
/// is the test's path (`latency::cpp_o2_every_function_exact`): libtest
/// names the thread that runs a test after it.
pub fn skip(why: &str) {
    let thread = std::thread::current();
    let line = format!("skipped: {}: {why}", thread.name().unwrap_or("?"));
    eprintln!("{line}");
    let list = OpenOptions::new()
        .create(true)
        .append(true)
        .open(skipped_list());
    if let Ok(mut list) = list {
        let _ = writeln!(list, "{line}");
    }
}

/// Whether the kernel's tracing describes system call arguments (tracefs
/// has events/syscalls), so that tachy names them.
pub fn syscall_formats() -> bool {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|t| std::path::Path::new(t).join("events/syscalls").is_dir())
}

/// True (after [`skip`]) when a test that attaches probes cannot run.
pub fn skip_unless_root() -> bool {
    if is_root() {
        false
    } else {
        skip("needs root");
        true
    }
}

/// The [`serial`] lock for a test that attaches probes; `None` (after
/// [`skip`]) without root. See [`needs_root`].
pub fn root_lock() -> Option<MutexGuard<'static, ()>> {
    if skip_unless_root() {
        None
    } else {
        Some(serial())
    }
}

/// `let _lock = common::needs_root!();` first in a test that attaches
/// probes: the [`serial`] lock, held to the end of the test; without root,
/// returns from the test after `skipped: NAME: needs root` ([`skip`]).
macro_rules! needs_root {
    () => {
        match $crate::common::root_lock() {
            Some(lock) => lock,
            None => return,
        }
    };
}
pub(crate) use needs_root;

// ---------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------

/// Recipe for one fixture output.
struct Recipe {
    /// Files (relative to `tests/fixtures/`) the output depends on.
    sources: &'static [&'static str],
    /// Other fixture outputs that must be built first.
    deps: &'static [&'static str],
}

fn recipe(name: &str) -> Recipe {
    match name {
        "libfixture.so" => Recipe {
            sources: &["libfixture.c", "libfixture.h"],
            deps: &[],
        },
        "cpp_o2" | "cpp_o0" => Recipe {
            sources: &["workload.cpp", "libfixture.h"],
            deps: &["libfixture.so"],
        },
        "nested_o2" => Recipe {
            sources: &["nested.cpp", "libfixture.h"],
            deps: &["libfixture.so"],
        },
        "plain" => Recipe {
            sources: &["plain.c"],
            deps: &[],
        },
        "ifunc" => Recipe {
            sources: &["ifunc.c"],
            deps: &[],
        },
        "faults" => Recipe {
            sources: &["faults.c"],
            deps: &[],
        },
        "libcold.so" => Recipe {
            sources: &["libcold.c"],
            deps: &[],
        },
        "shapes" => Recipe {
            sources: &["shapes.c"],
            deps: &["libcold.so"],
        },
        "calls" | "calls_unwind" => Recipe {
            sources: &["calls.c"],
            deps: &[],
        },
        "seams" => Recipe {
            sources: &["seams.c"],
            deps: &[],
        },
        "exits" => Recipe {
            sources: &["exits.cpp"],
            deps: &[],
        },
        "wide" => Recipe {
            sources: &["wide.c"],
            deps: &[],
        },
        "ijump" => Recipe {
            sources: &["ijump.c"],
            deps: &[],
        },
        "why" => Recipe {
            sources: &["why.c"],
            // Its late mode dlopen()s the library.
            deps: &["libfixture.so"],
        },
        "args" | "args_nodebug" => Recipe {
            sources: &["args.cpp"],
            deps: &[],
        },
        "by" => Recipe {
            sources: &["by.cpp"],
            deps: &[],
        },
        "rust_app" | "rust_app_v0" => Recipe {
            sources: &["rust_app.rs"],
            deps: &[],
        },
        "rust_names" | "rust_names_v0" => Recipe {
            sources: &["rust_names.rs"],
            deps: &[],
        },
        "gowork" | "gowork_stripped" => Recipe {
            sources: &["gowork.go"],
            deps: &[],
        },
        other => panic!(
            "unknown fixture {other:?} (known: libfixture.so, cpp_o2, cpp_o0, nested_o2, plain, ifunc, \
             faults, libcold.so, shapes, calls, calls_unwind, exits, wide, ijump, why, args, \
             args_nodebug, by, rust_app, \
             rust_app_v0, rust_names, rust_names_v0, gowork, gowork_stripped)"
        ),
    }
}

/// Compiler command producing fixture `name` at `tmp_out`.
fn compile_command(name: &str, src: &Path, out_dir: &Path, tmp_out: &Path) -> Command {
    let cc = || Command::new(env_or("FIXTURE_CC", "gcc"));
    let cxx = || Command::new(env_or("FIXTURE_CXX", "g++"));
    let rustc = || Command::new(env_or("RUSTC", "rustc"));
    match name {
        "libfixture.so" => {
            let mut c = cc();
            c.args([
                "-std=c11", "-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra",
            ])
            .arg("-Wl,-soname,libfixture.so")
            .arg(src.join("libfixture.c"))
            .arg("-o")
            .arg(tmp_out);
            c
        }
        "cpp_o2" | "cpp_o0" => {
            let opt = if name == "cpp_o2" { "-O2" } else { "-O0" };
            let mut c = cxx();
            c.args(["-std=c++17", opt, "-g", "-pthread", "-Wall", "-Wextra"])
                .arg(format!("-I{}", src.display()))
                .arg(src.join("workload.cpp"))
                // Linked by path; DT_NEEDED comes from the library's soname.
                .arg(out_dir.join("libfixture.so"))
                // Literal $ORIGIN (no shell involved): the loader finds the
                // library next to the executable.
                .arg("-Wl,-rpath,$ORIGIN")
                .arg("-o")
                .arg(tmp_out);
            c
        }
        "nested_o2" => {
            let mut c = cxx();
            c.args(["-std=c++17", "-O2", "-g", "-pthread", "-Wall", "-Wextra"])
                .arg(format!("-I{}", src.display()))
                .arg(src.join("nested.cpp"))
                .arg(out_dir.join("libfixture.so"))
                .arg("-Wl,-rpath,$ORIGIN")
                .arg("-o")
                .arg(tmp_out);
            c
        }
        "args" | "args_nodebug" => {
            let mut c = cxx();
            c.args(["-std=c++17", "-O2", "-Wall", "-Wextra"]);
            if name == "args" {
                c.arg("-g");
            }
            c.arg(src.join("args.cpp")).arg("-o").arg(tmp_out);
            c
        }
        "by" => {
            let mut c = cxx();
            c.args(["-std=c++17", "-O2", "-g", "-pthread", "-Wall", "-Wextra"])
                .arg(src.join("by.cpp"))
                .arg("-o")
                .arg(tmp_out);
            c
        }
        "why" => {
            let mut c = cc();
            c.args(["-O2", "-g", "-pthread", "-Wall", "-Wextra"])
                .arg(src.join("why.c"))
                .arg("-ldl")
                .arg("-o")
                .arg(tmp_out);
            c
        }
        "ifunc" => {
            // No builtins: every memset, memcpy and strlen is a call
            // through the PLT.
            let mut c = cc();
            c.args(["-std=c11", "-O2", "-g", "-fno-builtin", "-Wall", "-Wextra"])
                .arg("-Wl,-z,now")
                .arg(src.join("ifunc.c"))
                .arg("-o")
                .arg(tmp_out);
            c
        }
        "plain" | "faults" | "wide" | "ijump" => {
            let mut c = cc();
            c.args(["-std=c11", "-O2", "-g", "-pthread", "-Wall", "-Wextra"])
                .arg(src.join(format!("{name}.c")))
                .arg("-o")
                .arg(tmp_out);
            c
        }
        "libcold.so" => {
            // Built, then stripped to its dynamic symbols in place (as
            // distributions ship libraries): its `.cold` parts lose theirs.
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(
                    "\"$0\" -std=c11 -O2 -g -fPIC -shared -Wall -Wextra -Wl,-soname,libcold.so \
                     \"$1\" -o \"$2\" && strip --strip-all \"$2\"",
                )
                .arg(env_or("FIXTURE_CC", "gcc"))
                .arg(src.join("libcold.c"))
                .arg(tmp_out);
            c
        }
        "shapes" => {
            let mut c = cc();
            c.args(["-std=c11", "-O2", "-g", "-Wall", "-Wextra"])
                .arg(src.join("shapes.c"))
                .arg(out_dir.join("libcold.so"))
                .arg("-Wl,-rpath,$ORIGIN")
                .arg("-o")
                .arg(tmp_out);
            c
        }
        "seams" => {
            let mut c = cc();
            c.args(["-std=c11", "-O2", "-g", "-Wall", "-Wextra"])
                .arg(src.join("seams.c"))
                .arg("-o")
                .arg(tmp_out);
            c
        }
        "calls" | "calls_unwind" => {
            let mut c = cc();
            c.args(["-std=c11", "-O2", "-g", "-pthread", "-Wall", "-Wextra"]);
            if name == "calls_unwind" {
                c.arg("-DWITH_UNWIND");
            }
            c.arg(src.join("calls.c")).arg("-o").arg(tmp_out);
            c
        }
        "exits" => {
            // Without CET's `endbr64` (as Debian's g++ builds by default),
            // every traced function starts with `push`.
            let mut c = cxx();
            c.args([
                "-std=c++17",
                "-O2",
                "-g",
                "-fcf-protection=none",
                "-Wall",
                "-Wextra",
            ])
            .arg(src.join("exits.cpp"))
            .arg("-o")
            .arg(tmp_out);
            c
        }
        "rust_app" | "rust_app_v0" => {
            let mut c = rustc();
            c.args([
                "--edition",
                "2021",
                "--crate-name",
                "rust_app",
                "--crate-type",
                "bin",
            ])
            .args(["-O", "-g", "-C", "panic=unwind"]);
            if name == "rust_app_v0" {
                c.args(["-C", "symbol-mangling-version=v0"]);
            }
            c.arg(src.join("rust_app.rs")).arg("-o").arg(tmp_out);
            c
        }
        "rust_names" | "rust_names_v0" => {
            let mut c = rustc();
            c.args(["--edition", "2021", "--crate-name", "rust_names"])
                .args(["--crate-type", "bin", "-O", "-g"]);
            if name == "rust_names_v0" {
                c.args(["-C", "symbol-mangling-version=v0"]);
            }
            c.arg(src.join("rust_names.rs")).arg("-o").arg(tmp_out);
            c
        }
        "gowork" | "gowork_stripped" => {
            // A file outside any module builds as `command-line-arguments`;
            // the build cache goes with the fixtures, not into $HOME.
            let mut c = Command::new(env_or("GO", "go"));
            c.arg("build")
                .env("GOCACHE", out_dir.join(".gocache"))
                .env("GOPATH", out_dir.join(".gopath"))
                .env("GO111MODULE", "off")
                .arg("-o")
                .arg(tmp_out);
            if name == "gowork_stripped" {
                c.arg("-ldflags=-s -w");
            }
            c.arg(src.join("gowork.go"));
            c
        }
        other => unreachable!("no compile command for {other}"),
    }
}

fn env_or(var: &str, default: &str) -> OsString {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into())
}

fn mtime(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Builds fixture `name` (and what it depends on) unless an up-to-date copy
/// exists, and returns the path of the output.
///
/// Within a test process each fixture is checked once; concurrent test
/// processes are serialized by an flock on `fixtures/.build.lock`, and every
/// output is compiled under a temporary name and then renamed into place, so
/// a running fixture is never overwritten in place. Panics with the
/// compiler's stderr if compilation fails.
pub fn build(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let out_dir = fixtures_out_dir();
    fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));
    let _lock = FileLock::acquire(&out_dir.join(".build.lock"));
    build_locked(name, &out_dir, &mut built)
}

fn build_locked(name: &str, out_dir: &Path, built: &mut BTreeMap<String, PathBuf>) -> PathBuf {
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let recipe = recipe(name);
    let src = fixtures_src_dir();

    // Inputs: the sources, the outputs depended on, and this file (it holds
    // the compiler flags).
    let mut inputs: Vec<PathBuf> = recipe.sources.iter().map(|s| src.join(s)).collect();
    for dep in recipe.deps {
        inputs.push(build_locked(dep, out_dir, built));
    }
    inputs.push(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/common/mod.rs"
    )));

    let out = out_dir.join(name);
    let newest_input = inputs
        .iter()
        .map(|p| mtime(p).unwrap_or_else(|| panic!("missing fixture input {}", p.display())))
        .max()
        .expect("fixture has inputs");
    let up_to_date = matches!(mtime(&out), Some(t) if t > newest_input);

    if !up_to_date {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tmp = out_dir.join(format!(
            ".{name}.tmp.{}.{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut cmd = compile_command(name, &src, out_dir, &tmp);
        let output = cmd
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run compiler for fixture {name}: {cmd:?}: {e}"));
        if !output.status.success() {
            let _ = fs::remove_file(&tmp);
            panic!(
                "building fixture {name} failed ({}):\n{cmd:?}\n--- stderr ---\n{}\n--- stdout ---\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr),
                String::from_utf8_lossy(&output.stdout),
            );
        }
        fs::rename(&tmp, &out).unwrap_or_else(|e| {
            let _ = fs::remove_file(&tmp);
            panic!("cannot move {} to {}: {e}", tmp.display(), out.display())
        });
    }

    built.insert(name.to_string(), out.clone());
    out
}

/// Exclusive flock held until dropped (closing the file releases it).
struct FileLock(File);

impl FileLock {
    fn acquire(path: &Path) -> FileLock {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        loop {
            // SAFETY: the descriptor is valid for the lifetime of `file`.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return FileLock(file);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                panic!("flock {}: {err}", path.display());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// A running fixture process. Dropping it SIGKILLs and reaps the process if
/// it is still running, so a failing test leaves nothing behind.
pub struct Fixture {
    child: Child,
    pid: u32,
    /// Write end of the fixture's stdin; taken by [`Fixture::go`].
    stdin: Option<ChildStdin>,
    /// Lines of the fixture's stdout (without newline), from a reader thread.
    stdout_lines: Receiver<String>,
    /// Thread collecting the fixture's stderr.
    stderr_thread: Option<JoinHandle<String>>,
}

impl Fixture {
    /// Builds and starts fixture `name` with `args`, and waits for its
    /// `ready <pid>` line. The fixture then blocks until [`Fixture::go`].
    pub fn spawn(name: &str, args: &[&str]) -> Fixture {
        Fixture::spawn_env(name, args, &[])
    }

    /// Like [`Fixture::spawn`], with extra environment variables (e.g.
    /// `("FIXTURE_NO_WAIT", "1")` to make the fixture start without waiting
    /// for the go line).
    pub fn spawn_env(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Fixture {
        let path = build(name);
        let mut cmd = Command::new(&path);
        cmd.args(args).envs(envs.iter().copied());
        Fixture::spawn_command(name, cmd)
    }

    /// Starts a prepared command that ends up running a fixture (a copy of
    /// one, or one behind `unshare`), with the same protocol.
    pub fn spawn_command(name: &str, mut cmd: Command) -> Fixture {
        let path = PathBuf::from(cmd.get_program());
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start fixture {}: {e}", path.display()));
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");

        let (tx, stdout_lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if buf.last() == Some(&b'\n') {
                            buf.pop();
                        }
                        let line = String::from_utf8_lossy(&buf).into_owned();
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let stderr_thread = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stderr.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        });

        // From here on, a panic kills the child through Drop.
        let mut fixture = Fixture {
            child,
            pid,
            stdin,
            stdout_lines,
            stderr_thread: Some(stderr_thread),
        };
        match fixture.stdout_lines.recv_timeout(READY_TIMEOUT) {
            Ok(line) => {
                let reported = line
                    .strip_prefix("ready ")
                    .and_then(|p| p.trim().parse::<u32>().ok());
                if reported != Some(pid) {
                    let stderr = fixture.kill_and_collect_stderr();
                    panic!(
                        "fixture {name}: expected \"ready {pid}\", got {line:?}\n--- stderr ---\n{stderr}"
                    );
                }
            }
            Err(e) => {
                let stderr = fixture.kill_and_collect_stderr();
                let why = match e {
                    RecvTimeoutError::Timeout => "timed out waiting for",
                    RecvTimeoutError::Disconnected => "stdout closed before",
                };
                panic!("fixture {name}: {why} the ready line\n--- stderr ---\n{stderr}");
            }
        }
        fixture
    }

    /// Process id of the fixture.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends the go line, letting the fixture start its work, and closes its
    /// stdin. Does nothing on later calls. A fixture that already died is
    /// not an error here; [`Fixture::wait`] reports its status.
    pub fn go(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"go\n");
            let _ = stdin.flush();
        }
    }

    /// Whether the fixture process has not exited yet.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Next stdout line, if one arrives within `timeout`. Lines read here
    /// are not part of what [`Fixture::wait`] returns.
    pub fn read_line(&mut self, timeout: Duration) -> Option<String> {
        self.stdout_lines.recv_timeout(timeout).ok()
    }

    /// Waits (up to [`WAIT_TIMEOUT`]) for the fixture to exit; returns its
    /// exit status and the stdout after the ready line. Stderr is dropped;
    /// see [`Fixture::wait_all`].
    pub fn wait(self) -> (ExitStatus, String) {
        let (status, stdout, _stderr) = self.wait_all();
        (status, stdout)
    }

    /// Like [`Fixture::wait`], also returning the fixture's stderr.
    pub fn wait_all(self) -> (ExitStatus, String, String) {
        self.wait_timeout(WAIT_TIMEOUT)
    }

    /// Waits up to `timeout` for the fixture to exit; returns its exit
    /// status, stdout (after the ready line) and stderr. On timeout the
    /// fixture is killed and this panics with what it printed.
    pub fn wait_timeout(mut self, timeout: Duration) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + timeout;
        let mut stdout = String::new();
        // The reader thread ends (disconnecting the channel) at stdout EOF,
        // i.e. when the fixture exits.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout_lines.recv_timeout(left) {
                Ok(line) => {
                    stdout.push_str(&line);
                    stdout.push('\n');
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => self.timed_out(timeout, &stdout),
            }
        }
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => self.timed_out(timeout, &stdout),
                Err(e) => panic!("waiting for fixture {}: {e}", self.pid),
            }
        };
        let stderr = self.collect_stderr();
        (status, stdout, stderr)
    }

    fn timed_out(&mut self, timeout: Duration, stdout: &str) -> ! {
        let stderr = self.kill_and_collect_stderr();
        panic!(
            "fixture {} did not finish within {timeout:?}; killed\n--- stdout ---\n{stdout}\n\
             --- stderr ---\n{stderr}",
            self.pid
        );
    }

    /// SIGKILLs and reaps the child if it is still running.
    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // Child::kill sends SIGKILL.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn kill_and_collect_stderr(&mut self) -> String {
        self.kill();
        self.collect_stderr()
    }

    /// Stderr of an exited fixture (empty if already collected).
    fn collect_stderr(&mut self) -> String {
        self.stderr_thread
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// Summary parsing and expected values
// ---------------------------------------------------------------------------

/// Parses the `count <function> <calls>` summary lines of a fixture's
/// stdout into function -> calls. Function names may contain spaces; the
/// count is the last field.
pub fn counts(stdout: &str) -> BTreeMap<String, u64> {
    tagged(stdout, "count")
}

/// Parses summary lines `<tag> <name> <number>` (e.g. tag `exceptions` for
/// the C++ fixture, `panics` for the Rust one) into name -> number.
pub fn tagged(stdout: &str, tag: &str) -> BTreeMap<String, u64> {
    let mut map = BTreeMap::new();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')) else {
            continue;
        };
        let (name, n) = rest
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("malformed summary line {line:?}"));
        let n: u64 = n
            .parse()
            .unwrap_or_else(|_| panic!("malformed count in summary line {line:?}"));
        map.insert(name.to_string(), n);
    }
    map
}

/// Demangled name of the `std::string` overload of `shop::Store::lookup`.
pub const CPP_LOOKUP_STR: &str = "shop::Store::lookup(std::__cxx11::basic_string<char, \
     std::char_traits<char>, std::allocator<char> > const&)";

/// Exact `count` lines fixture `name` prints for `iterations` and `threads`
/// (function name as printed -> calls), as documented in each fixture source.
pub fn expected_counts(name: &str, iterations: u64, threads: u64) -> BTreeMap<String, u64> {
    let n = iterations * threads;
    let list: Vec<(&str, u64)> = match name {
        "cpp_o2" | "cpp_o0" => vec![
            ("shop::Store::lookup(int)", n),
            (CPP_LOOKUP_STR, n),
            ("shop::Pool<shop::Conn>::acquire()", n),
            ("shop::checksum(shop::Buffer const&, unsigned int)", n),
            ("shop::validate(int)", n),
            ("shop::forward(int)", n),
            ("shop::target(int)", n),
            // recurse(3) once per iteration: depths 3, 2, 1, 0.
            ("shop::recurse(int)", 4 * n),
            ("shop::risky(int)", n),
            ("shop::maybe_throw(int)", n),
            ("fixture_io", n),
        ],
        "plain" => vec![("slow_sum", n), ("fast_path", 2 * n), ("mix_local", n)],
        "exits" => vec![
            ("ex::quiet(long)", iterations),
            ("ex::throwing(long)", iterations),
            ("ex::indirect(long (*)(long), long)", iterations),
            ("ex::via_plt(long)", iterations),
            ("ex::cleanup(long)", iterations),
        ],
        "shapes" => vec![
            ("interp_switch", n),
            ("interp_goto", n),
            ("cold_check", n),
            ("cold_scan", n),
            ("cold_tail", n),
            ("epilogue_jumps", n),
        ],
        "ijump" => vec![
            ("ijump_loop", n),
            ("ijump_table", n),
            ("ijump_rip", n),
            ("ijump_tail", n),
            ("ijump_tail_mem", n),
        ],
        "rust_app" | "rust_app_v0" => vec![
            ("rust_app::engine::process", n),
            ("rust_app::engine::transform::<u32>", n),
            ("rust_app::engine::transform::<alloc::string::String>", n),
            ("rust_app::engine::guarded", n),
            ("rust_app::engine::explode", n),
        ],
        "rust_names" | "rust_names_v0" => vec![
            ("rust_names::store::Db::get", iterations),
            ("rust_names::store::Lookup::find", iterations),
            ("rust_names::store::Wrapper<u32>::peek", iterations),
            (
                "rust_names::store::Wrapper<alloc::string::String>::peek",
                iterations,
            ),
            ("rust_names::store::largest::<u64>", iterations),
        ],
        other => panic!("no expected counts for fixture {other:?}"),
    };
    list.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Calls that leave by exception / panic: `shop::risky(int)` in the C++
/// fixtures and `rust_app::engine::guarded` in the Rust ones fail on odd
/// iteration indices, i.e. `iterations / 2` times per thread.
pub fn expected_unwinds(iterations: u64, threads: u64) -> u64 {
    (iterations / 2) * threads
}
