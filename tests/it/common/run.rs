//! Running tachy from a test: start it, watch its output while it runs,
//! signal it, and collect what it printed when it ends.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Collects what a process writes on one pipe, in a thread.
pub struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl Capture {
    pub fn new(mut r: impl Read + Send + 'static) -> Capture {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let b = buf.clone();
        let thread = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match r.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => b.lock().unwrap().extend_from_slice(&chunk[..n]),
                }
            }
        });
        Capture {
            buf,
            thread: Some(thread),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }

    /// Complete (newline-terminated) lines so far.
    pub fn lines(&self) -> Vec<String> {
        let text = self.text();
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        complete.lines().map(str::to_string).collect()
    }

    /// Waits (until `deadline`) for the writer side to close; false if it
    /// did not.
    pub fn finish(&mut self, deadline: Instant) -> bool {
        while let Some(t) = &self.thread {
            if t.is_finished() {
                let _ = self.thread.take().map(|t| t.join());
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

/// What a finished tachy run produced.
#[derive(Debug)]
pub struct Outcome {
    pub args: Vec<String>,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// From start to exit.
    pub elapsed: Duration,
}

impl Outcome {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Exit code 0 (the command's own status with `--`) and no panic text.
    pub fn assert_success(&self) {
        self.assert_no_panic();
        assert_eq!(self.code(), Some(0), "tachy failed:\n{self}");
    }

    pub fn assert_no_panic(&self) {
        assert!(
            !self.stdout.contains("panicked") && !self.stderr.contains("panicked"),
            "panic text in tachy's output:\n{self}"
        );
    }

    /// Every JSON report line on stdout (fixture lines never start with `{`).
    pub fn reports(&self) -> Vec<Value> {
        json_lines(&self.stdout)
    }

    /// The one JSON report of the run.
    pub fn single_report(&self) -> Value {
        let mut r = self.reports();
        assert_eq!(r.len(), 1, "expected exactly one JSON report\n{self}");
        r.pop().unwrap()
    }

    /// Asserts success; the one JSON report of the run.
    pub fn success_report(&self) -> Value {
        self.assert_success();
        self.single_report()
    }

    /// What the traced command printed: with JSON on standard output, it
    /// goes to tachy's standard error, so both.
    pub fn fixture_text(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// How long [`run_fixture`] lets a run take.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `tachy SUBCOMMAND OPTS... -- FIXTURE ARGS...` to its end: the
/// fixture built, started by tachy without the go signal
/// (`FIXTURE_NO_WAIT=1`), with `envs` for tachy too.
pub fn run_fixture(
    sub: &str,
    opts: &[&str],
    fixture: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Outcome {
    let exe = super::build(fixture);
    let exe = exe.to_string_lossy().into_owned();
    let mut all: Vec<&str> = vec![sub];
    all.extend_from_slice(opts);
    all.push("--");
    all.push(&exe);
    all.extend_from_slice(args);
    let mut env = vec![("FIXTURE_NO_WAIT", "1")];
    env.extend_from_slice(envs);
    Tachy::start(&all, &env).finish(RUN_TIMEOUT)
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "command: tachy {}\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args.join(" "),
            self.status,
            self.stdout,
            self.stderr
        )
    }
}

/// The lines of `text` that are JSON objects, parsed.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// A running tachy. Dropping it SIGKILLs it if it still runs.
pub struct Tachy {
    child: Child,
    args: Vec<String>,
    out: Capture,
    err: Capture,
    started: Instant,
}

impl Tachy {
    pub fn start<S: AsRef<str>>(args: &[S], envs: &[(&str, &str)]) -> Tachy {
        Tachy::start_with(args, envs, |_| {})
    }

    /// Like [`Tachy::start`], with `setup` applied to the command first
    /// (to start tachy in a process group of its own, say).
    pub fn start_with<S: AsRef<str>>(
        args: &[S],
        envs: &[(&str, &str)],
        setup: impl FnOnce(&mut Command),
    ) -> Tachy {
        let args: Vec<String> = args.iter().map(|s| s.as_ref().to_string()).collect();
        let mut cmd = Command::new(super::tachy());
        setup(&mut cmd);
        let mut child = cmd
            .args(&args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start tachy");
        let out = Capture::new(child.stdout.take().unwrap());
        let err = Capture::new(child.stderr.take().unwrap());
        Tachy {
            child,
            args,
            out,
            err,
            started: Instant::now(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn describe(&self) -> String {
        format!(
            "command: tachy {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args.join(" "),
            self.out.text(),
            self.err.text()
        )
    }

    /// Waits until tachy has printed `n` complete lines on stdout (or
    /// stderr) that satisfy `pred`, and returns them; panics if tachy exits
    /// first or `timeout` passes.
    pub fn wait_for_lines(
        &mut self,
        on_stderr: bool,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() {
                // What it printed just before it exited may still be in
                // the pipe: read to the end before the last look.
                let grace = Instant::now() + Duration::from_secs(2);
                self.out.finish(grace);
                self.err.finish(grace);
            }
            let lines = if on_stderr {
                self.err.lines()
            } else {
                self.out.lines()
            };
            let hits: Vec<String> = lines.into_iter().filter(|l| pred(l)).collect();
            if hits.len() >= n {
                return hits;
            }
            if let Some(status) = exited {
                panic!(
                    "tachy exited ({status}) before printing the expected line\n{}",
                    self.describe()
                );
            }
            if Instant::now() >= deadline {
                let d = self.describe();
                self.kill();
                panic!("tachy did not print the expected line within {timeout:?}\n{d}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for one complete line satisfying `pred`.
    pub fn wait_for_line(
        &mut self,
        on_stderr: bool,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) {
        self.wait_for_lines(on_stderr, 1, timeout, pred);
    }

    /// Waits for the header `Tracing ... Hit Ctrl-C to end.` (stdout in
    /// text mode, stderr in JSON mode).
    pub fn wait_for_header(&mut self, on_stderr: bool) {
        self.wait_for_line(on_stderr, Duration::from_secs(20), |l| {
            l.starts_with("Tracing ") && l.ends_with("Hit Ctrl-C to end.")
        });
    }

    /// Waits for the `n`th JSON report on stdout and returns it.
    pub fn wait_for_report(&mut self, n: usize) -> Value {
        let lines = self.wait_for_lines(false, n, Duration::from_secs(10), |l| l.starts_with('{'));
        serde_json::from_str(&lines[n - 1])
            .unwrap_or_else(|e| panic!("bad JSON line {:?}: {e}", lines[n - 1]))
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill() on our own child, which has not been reaped yet.
        let r = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(r, 0, "kill({}, {sig}) failed", self.pid());
    }

    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Waits for tachy to exit (up to `timeout`); panics (after killing it)
    /// if it does not.
    pub fn finish(self, timeout: Duration) -> Outcome {
        self.finish_noting_report(timeout).0
    }

    /// Like [`Tachy::finish`], also returning how long after this call a
    /// JSON report line had appeared on stdout (as seen by polling every
    /// 10 ms; `None` if none appeared before tachy exited).
    pub fn finish_noting_report(mut self, timeout: Duration) -> (Outcome, Option<Duration>) {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut report_at = None;
        let status = loop {
            if report_at.is_none() && self.out.lines().iter().any(|l| l.starts_with('{')) {
                report_at = Some(start.elapsed());
            }
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    let d = self.describe();
                    self.kill();
                    panic!("tachy did not exit within {timeout:?}; killed\n{d}");
                }
                Err(e) => panic!("waiting for tachy: {e}"),
            }
        };
        let elapsed = self.started.elapsed();
        // With `-- CMD` the command shares the pipes; it has normally
        // exited too (what it printed so far is kept if not).
        let grace = Instant::now() + Duration::from_secs(5);
        self.out.finish(grace);
        self.err.finish(grace);
        let out = Outcome {
            args: self.args.clone(),
            status,
            stdout: self.out.text(),
            stderr: self.err.text(),
            elapsed,
        };
        (out, report_at)
    }
}

impl Drop for Tachy {
    fn drop(&mut self) {
        self.kill();
    }
}
