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
//! The fixtures, what they are built from and how, are listed once, in
//! `FIXTURES` of [`fixtures`]; [`build`] and [`Fixture::spawn`] take their
//! names.
//!
//! The expected call counts for given arguments are in [`expected_counts`].
//! Some helpers serve tests of one kind of machine only, hence the blanket
//! `dead_code` allowance.

#![allow(dead_code)]

mod fixtures;
pub mod run;

pub use fixtures::{build, fixtures_out_dir, fixtures_src_dir};

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

/// Accessors of the reports of `tachy latency --json`: every test file
/// reads reports through these.
pub mod report {
    use serde_json::Value;

    /// `v[key]`, a number.
    pub fn num(v: &Value, key: &str) -> u64 {
        super::node::num(v, key)
    }

    /// The functions of a report, in its order.
    pub fn functions(rep: &Value) -> &Vec<Value> {
        rep["functions"]
            .as_array()
            .unwrap_or_else(|| panic!("no functions array in {rep}"))
    }

    /// The function named `name` in a report (the first, if several are).
    pub fn func<'a>(rep: &'a Value, name: &str) -> &'a Value {
        functions(rep)
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no function {name} in {rep}"))
    }

    /// The one function of a report named exactly `name`: panics unless
    /// exactly one is.
    pub fn only_func<'a>(rep: &'a Value, name: &str) -> &'a Value {
        let hits: Vec<&Value> = functions(rep)
            .iter()
            .filter(|f| f["name"] == name)
            .collect();
        assert_eq!(
            hits.len(),
            1,
            "expected one function named {name:?} in the report:\n{rep:#}"
        );
        hits[0]
    }
}

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long [`Fixture::spawn`] waits for the `ready <pid>` line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Fixture::wait`] waits for the fixture to finish.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

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

fn env_or(var: &str, default: &str) -> OsString {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into())
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
            ("get_command", 64 * n),
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

/// `text` with each price of this machine (`~1.2 us`, `~640 ns`, and the
/// top of a range, `to 9.5 us`) as `~N`: golden output stays the same
/// wherever it is printed with prices.
pub fn mask_prices(text: &str) -> String {
    let units = [" ns", " us", " ms", " s"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(k) = rest.find(['~', 't']) {
        let (head, tail) = rest.split_at(k);
        out.push_str(head);
        let num_at = if tail.starts_with('~') {
            1
        } else if tail.starts_with("to ") {
            3
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
            continue;
        };
        let digits = tail[num_at..]
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(tail.len() - num_at);
        let after = &tail[num_at + digits..];
        match units.iter().find(|u| after.starts_with(*u)) {
            Some(u) if digits > 0 => {
                out.push_str(&tail[..num_at]);
                out.push('N');
                rest = &after[u.len()..];
            }
            _ => {
                out.push_str(&tail[..1]);
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}
