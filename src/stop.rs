//! How a trace is stopped: SIGINT and SIGTERM, and SIGUSR1's interim
//! reports. Owns the signal handlers and the state they share with the run
//! loop; it prints nothing but the one line a handler writes before it
//! ends the process.
//!
//! A stop is one stop however many signals ask for it within [`WINDOW`]
//! of the first: GNU `timeout` signals tachy and then its whole process
//! group, `make` passes a SIGTERM on to its children, and a Ctrl-C in a
//! terminal reaches every process of the foreground group, so one request
//! often arrives as two or three signals microseconds apart. A signal
//! later than that is a second request: before the report is printed it
//! ends tachy at once (the kernel removes the probes when the process
//! goes) and says that the report was abandoned; after it, it ends tachy
//! at once with the status the run has come to (see [`reported`]).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

/// Signals within this time of the first one are the same stop.
pub const WINDOW: Duration = Duration::from_secs(1);

/// Planning and attaching: nothing measured yet.
const STARTING: u8 = 0;
/// Probes attached: the run loop owes a report.
const TRACING: u8 = 1;
/// The last report is printed: what is left is detaching and waiting.
const REPORTED: u8 = 2;

static PHASE: AtomicU8 = AtomicU8::new(STARTING);
/// CLOCK_MONOTONIC (ns) of the first SIGINT or SIGTERM; 0 before one.
static FIRST_AT: AtomicU64 = AtomicU64::new(0);
/// Once reported: the exit status a later signal ends tachy with; -1 for
/// 128 + the signal's number.
static AFTER_REPORT: AtomicI32 = AtomicI32::new(0);
static INTERIM: AtomicBool = AtomicBool::new(false);

/// CLOCK_MONOTONIC in ns (at least 1); async-signal-safe.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the timespec passed, and is
    // async-signal-safe (POSIX).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64).max(1)
}

/// Writes `line` to stderr and ends the process with `code`, from a
/// signal handler: write and _exit are async-signal-safe.
fn say_and_exit(line: &[u8], code: i32) -> ! {
    // SAFETY: write of a static buffer to fd 2, then _exit.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::_exit(code)
    }
}

extern "C" fn on_stop(sig: libc::c_int) {
    let now = monotonic_ns();
    // The time of the first signal, if this is not the first.
    let first = FIRST_AT
        .compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst)
        .err();
    let later = first.is_some_and(|at| now.saturating_sub(at) >= WINDOW.as_nanos() as u64);
    match PHASE.load(Ordering::SeqCst) {
        STARTING => say_and_exit(b"tachy: stopped before tracing began\n", 128 + sig),
        TRACING if later => say_and_exit(
            b"tachy: stopped again before the report was printed: report abandoned\n",
            128 + sig,
        ),
        // The first signal stops the run loop, which prints the report;
        // others within the window are the same stop.
        TRACING => {}
        // Reported: a stop that came after the run ended by itself, or a
        // later one, ends tachy now; the same stop again changes nothing.
        _ if first.is_none() || later => {
            let code = match AFTER_REPORT.load(Ordering::SeqCst) {
                -1 => 128 + sig,
                c => c,
            };
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(code) }
        }
        _ => {}
    }
}

extern "C" fn on_usr1(_: libc::c_int) {
    INTERIM.store(true, Ordering::SeqCst);
}

/// Installs the handlers of SIGINT, SIGTERM (stop) and SIGUSR1 (interim
/// report). From here until [`tracing`], a stop ends tachy at once.
pub fn install() {
    // SAFETY: the handlers only touch atomics, read the clock, write to
    // stderr and call _exit, all async-signal-safe.
    unsafe {
        let h = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGINT, h);
        libc::signal(libc::SIGTERM, h);
        let u = on_usr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGUSR1, u);
    }
}

/// The probes are attached: a stop now ends the run loop, which prints
/// the report.
pub fn tracing() {
    PHASE.store(TRACING, Ordering::SeqCst);
}

/// The last report is printed. A stop from now on (other than the same
/// stop again) ends tachy at once with `status`, or with 128 + the
/// signal's number when `status` is `None` (the status is not known: a
/// command still runs).
pub fn reported(status: Option<i32>) {
    AFTER_REPORT.store(status.unwrap_or(-1), Ordering::SeqCst);
    PHASE.store(REPORTED, Ordering::SeqCst);
}

/// Whether SIGINT or SIGTERM asked tachy to stop.
pub fn requested() -> bool {
    FIRST_AT.load(Ordering::SeqCst) != 0
}

/// How long ago the first stopping signal came, if one did.
pub fn since_first() -> Option<Duration> {
    match FIRST_AT.load(Ordering::SeqCst) {
        0 => None,
        at => Some(Duration::from_nanos(monotonic_ns().saturating_sub(at))),
    }
}

/// Whether SIGUSR1 asked for an interim report since the last call.
pub fn take_interim() -> bool {
    INTERIM.swap(false, Ordering::SeqCst)
}
