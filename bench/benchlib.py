"""What the per-feature benchmark rows of `make bench` share (bench/by.py,
bench/filter.py, bench/why.py, bench/records.py, bench/cgroup.py): where things are, one run
of a workload with or without tachy attached, and the section each row
writes into bench/RESULTS.md.

A workload prints "ready PID", waits for the go signal on stdin, works, and
prints its own measurement; tachy is attached (its "Tracing ..." line seen)
before the go signal, and its text report is collected until it exits with
the workload.

Environment: BENCH_ROUNDS (default 5), BENCH_RESULTS (default
bench/RESULTS.md), BENCH_TACHY (the binary, default target/release/tachy).
"""

import os
import signal
import statistics
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "target", "bench")
WORKLOADS = os.path.join(ROOT, "bench", "workloads")
TACHY = os.environ.get("BENCH_TACHY") or os.path.join(ROOT, "target", "release", "tachy")
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(ROOT, "bench", "RESULTS.md")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))


def require_root():
    """Exits unless root (uprobes need it); makes the output directory."""
    if os.geteuid() != 0:
        sys.exit("bench: run as root (uprobes)")
    os.makedirs(OUT, exist_ok=True)


def run_workload(argv, tracer, go="g", tachy_timeout=10, stop=False):
    """Runs the workload `argv` with tachy (`tracer(pid)`, a command or None)
    attached before the go signal `go`; with `stop`, tachy is sent SIGINT
    once the workload has exited (a trace that outlives it: a cgroup,
    several processes). Returns the workload's standard output and tachy's
    (its report; "" without tachy)."""
    wp = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = wp.stdout.readline()
    if not line.startswith("ready "):
        wp.kill()
        sys.exit(f"bench: workload did not start: {line!r}")
    tp = None
    cmd = tracer(wp.pid)
    lines = []
    if cmd:
        # The "Tracing ..." line goes with the text report, on stdout.
        tp = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        attached = threading.Event()

        def watch():
            for l in tp.stdout:
                lines.append(l)
                if l.startswith("Tracing "):
                    attached.set()
        reader = threading.Thread(target=watch, daemon=True)
        reader.start()
        if not attached.wait(60):
            tp.kill()
            wp.kill()
            sys.exit(f"bench: tachy did not attach: {tp.stderr.read()[-300:]}")
    wp.stdin.write(go)
    wp.stdin.flush()
    out = wp.stdout.read()
    wp.wait()
    if tp:
        if stop:
            tp.send_signal(signal.SIGINT)
        try:
            tp.wait(timeout=tachy_timeout)
        except subprocess.TimeoutExpired:
            tp.kill()
            tp.wait()
        reader.join(5)
    return out, "".join(lines)


def attach_tracer(cmd, word, wait_s, name, victim=None):
    """Starts tracer `cmd` (its stderr with its stdout) and waits up to
    `wait_s` for a line starting with `word` (tachy's "Tracing ",
    bpftrace's "Attaching"). Returns the process, the list its lines go to
    and the thread reading them. On a timeout, kills it and `victim` and
    exits naming `name`."""
    tp = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    attached = threading.Event()

    def watch():
        for l in tp.stdout:
            lines.append(l)
            if l.startswith(word):
                attached.set()
    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    if not attached.wait(wait_s):
        tp.kill()
        if victim:
            victim.kill()
        sys.exit(f"bench: {name} did not attach: {''.join(lines)[-300:]}")
    return tp, lines, reader


def medians(res):
    """The median of each variant's rounds."""
    return {v: statistics.median(xs) for v, xs in res.items()}


def load_average():
    """The 1, 5 and 15 minute load averages, as /proc/loadavg says them."""
    return " ".join(open("/proc/loadavg").read().split()[:3])


def over(med, v, base="tachy"):
    """What variant `v` adds over `base`, from their medians: ns and share."""
    d = med[v] - med[base]
    return f"{d:+.1f} ns ({100 * d / med[base]:+.1f}%)"


def rounds_cell(xs):
    """A table cell with every round's value."""
    return ", ".join(f"{x:.0f}" for x in xs)


def median_table(variants, res):
    """Markdown lines of a table: each variant's median and every round."""
    med = medians(res)
    lines = ["| variant | median ns per call | all rounds |", "|---|---|---|"]
    for v in variants:
        lines.append(f"| {v} | {med[v]:.1f} | {rounds_cell(res[v])} |")
    return lines


def write_section(section, text):
    """Prints `text` and puts it in RESULTS in place of an earlier section
    starting with the heading `section` (up to the next section), else at
    the end."""
    print()
    print(text)
    try:
        old = open(RESULTS).read()
    except OSError:
        old = ""
    start = old.find(section)
    if start >= 0:
        nxt = old.find("\n## ", start + len(section))
        old = old[:start] + (old[nxt + 1:] if nxt >= 0 else "")
    with open(RESULTS, "w") as f:
        f.write(old.rstrip("\n") + "\n\n" + text if old.strip() else text)
