//! Exact latency of the function picked in the explorer: runs `tachy
//! latency --json -i 1` on it as a child process and reads its reports,
//! so every number the explorer shows is one `tachy latency --json` prints
//! for the same probes and interval (one implementation of planning,
//! probing and reporting, not two). The child dies with the explorer
//! (PR_SET_PDEATHSIG), and its probes with it.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

/// What the child said.
pub enum Line {
    /// One report (a JSON object of `tachy latency --json`).
    Report(Value),
    /// A line of its standard error (what it traces, or why it cannot).
    Said(String),
    /// It ended.
    Ended,
}

pub struct Watch {
    child: Child,
    lines: Receiver<Line>,
}

impl Watch {
    /// Starts timing `spec` (`PATH:RAW`) in process `pid`.
    pub fn start(pid: u32, spec: &str) -> Result<Watch> {
        let exe = std::env::current_exe().context("cannot find tachy's own executable")?;
        let mut cmd = Command::new(exe);
        cmd.args(["latency", "--json", "-i", "1", "-p"])
            .arg(pid.to_string())
            .arg(spec)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to
        // end the child when its parent (this process) dies.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start tachy latency for {spec}"))?;
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Ok(v) = serde_json::from_str::<Value>(&line) {
                        if tx.send(Line::Report(v)).is_err() {
                            return;
                        }
                    }
                }
                let _ = tx.send(Line::Ended);
            });
        }
        if let Some(err) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    if tx.send(Line::Said(line)).is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Watch { child, lines: rx })
    }

    /// What the child said since the last call.
    pub fn read(&mut self) -> Vec<Line> {
        self.lines.try_iter().collect()
    }

    /// Stops the child (SIGTERM, then SIGKILL after a second) and waits
    /// for it: its probes are gone when this returns.
    pub fn stop(mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill of our own child, which has not been waited for
        // yet, so the pid is still its own.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
