#!/usr/bin/env python3
"""What --cpu adds to a context switch (run by `make bench`, as root).

bench/workloads/pingpong.c: two threads pinned to CPU 0 pass a byte through
two pipes, every round trip two context switches, each thread inside one
call of traced_pingpong(). It measures ns per switch itself. Variants,
interleaved in every round:

  untraced    the workload alone
  tachy       tachy latency -p PID traced_pingpong
  tachy-cpu   tachy latency --cpu -p PID traced_pingpong: every switch is
              one of a thread with an open traced frame
  cpu-idle    tachy latency --cpu -p PID other_function (never called while
              the threads switch): no thread has an open traced frame

Prints medians and the added cost per switch (tachy-cpu less tachy; cpu-idle
less untraced), and writes them as the section "--cpu: cost per context
switch" of bench/RESULTS.md (replacing an earlier one).

Environment: BENCH_ROUNDS (default 5), BENCH_TRIPS (round trips per run,
default 100000), BENCH_RESULTS (default bench/RESULTS.md), BENCH_TACHY (the
binary, default target/release/tachy).
"""

import os
import re
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "target", "bench")
TACHY = os.environ.get("BENCH_TACHY") or os.path.join(ROOT, "target", "release", "tachy")
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(ROOT, "bench", "RESULTS.md")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
TRIPS = int(os.environ.get("BENCH_TRIPS", "100000"))
SECTION = "## --cpu: cost per context switch"
VARIANTS = ["untraced", "tachy", "tachy-cpu", "cpu-idle"]


def tracer(variant, pid):
    if variant == "tachy":
        return [TACHY, "latency", "-p", str(pid), "traced_pingpong"]
    if variant == "tachy-cpu":
        return [TACHY, "latency", "--cpu", "-p", str(pid), "traced_pingpong"]
    if variant == "cpu-idle":
        return [TACHY, "latency", "--cpu", "-p", str(pid), "other_function"]
    return None


def run_once(binary, variant):
    """ns per switch the workload measured, and tachy's report."""
    wp = subprocess.Popen([binary, str(TRIPS)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    line = wp.stdout.readline()
    if not line.startswith("ready "):
        wp.kill()
        sys.exit(f"bench: workload did not start: {line!r}")
    tp = None
    cmd = tracer(variant, wp.pid)
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
    wp.stdin.write("go\n")
    wp.stdin.flush()
    out = wp.stdout.read()
    wp.wait()
    if tp:
        try:
            tp.wait(timeout=10)
        except subprocess.TimeoutExpired:
            tp.kill()
            tp.wait()
        reader.join(5)
    report = "".join(lines)
    m = re.search(r"switch_ns (\S+)", out)
    if not m:
        sys.exit(f"bench: no result from the workload: {out!r}")
    return float(m.group(1)), report


def main():
    if os.geteuid() != 0:
        sys.exit("bench: run as root (uprobes)")
    os.makedirs(OUT, exist_ok=True)
    binary = os.path.join(OUT, "pingpong")
    subprocess.run(["gcc", "-O2", "-g", "-pthread", "-o", binary,
                    os.path.join(ROOT, "bench", "workloads", "pingpong.c")], check=True)
    res = {v: [] for v in VARIANTS}
    for r in range(ROUNDS):
        for v in VARIANTS:
            ns, report = run_once(binary, v)
            res[v].append(ns)
            # Both threads' calls are timed and split: the check that the
            # traced runs really traced.
            if v in ("tachy", "tachy-cpu") and "count: 2" not in report:
                sys.exit(f"bench: tachy did not count the 2 calls:\n{report}")
            if v == "tachy-cpu" and "on-CPU " not in report:
                sys.exit(f"bench: tachy --cpu printed no split:\n{report}")
            print(f"round {r + 1}: {v:10} {ns:8.1f} ns/switch", flush=True)
    med = {v: statistics.median(res[v]) for v in VARIANTS}
    load = open("/proc/loadavg").read().split()[:3]
    lines = [
        SECTION,
        "",
        f"bench/why.py, {ROUNDS} rounds of {TRIPS} round trips (2 switches each) of "
        "two threads pinned to CPU 0 through pipes, variants interleaved; "
        f"load average at the end: {' '.join(load)}.",
        "",
        "| variant | median ns per switch | all rounds |",
        "|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {med[v]:.1f} | {', '.join(f'{x:.0f}' for x in res[v])} |")
    lines += [
        "",
        f"Added by --cpu per switch of a thread with an open traced frame "
        f"(tachy-cpu - tachy): {med['tachy-cpu'] - med['tachy']:.1f} ns.",
        f"Added per switch of threads with none (cpu-idle - untraced): "
        f"{med['cpu-idle'] - med['untraced']:.1f} ns.",
        "",
    ]
    text = "\n".join(lines)
    print()
    print(text)
    try:
        old = open(RESULTS).read()
    except OSError:
        old = ""
    # Replace an earlier section of ours, up to the next section.
    start = old.find(SECTION)
    if start >= 0:
        nxt = old.find("\n## ", start + len(SECTION))
        old = old[:start] + (old[nxt + 1:] if nxt >= 0 else "")
    with open(RESULTS, "w") as f:
        f.write(old.rstrip("\n") + "\n\n" + text if old.strip() else text)


if __name__ == "__main__":
    main()
