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
import subprocess
import sys

from benchlib import (OUT, ROUNDS, TACHY, WORKLOADS, load_average, medians, require_root,
                      rounds_cell, run_workload, write_section)

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
    out, report = run_workload([binary, str(TRIPS)], lambda pid: tracer(variant, pid),
                               go="go\n")
    m = re.search(r"switch_ns (\S+)", out)
    if not m:
        sys.exit(f"bench: no result from the workload: {out!r}")
    return float(m.group(1)), report


def main():
    require_root()
    binary = os.path.join(OUT, "pingpong")
    subprocess.run(["gcc", "-O2", "-g", "-pthread", "-o", binary,
                    os.path.join(WORKLOADS, "pingpong.c")], check=True)
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
    med = medians(res)
    lines = [
        SECTION,
        "",
        f"bench/why.py, {ROUNDS} rounds of {TRIPS} round trips (2 switches each) of "
        "two threads pinned to CPU 0 through pipes, variants interleaved; "
        f"load average at the end: {load_average()}.",
        "",
        "| variant | median ns per switch | all rounds |",
        "|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {med[v]:.1f} | {rounds_cell(res[v])} |")
    lines += [
        "",
        f"Added by --cpu per switch of a thread with an open traced frame "
        f"(tachy-cpu - tachy): {med['tachy-cpu'] - med['tachy']:.1f} ns.",
        f"Added per switch of threads with none (cpu-idle - untraced): "
        f"{med['cpu-idle'] - med['untraced']:.1f} ns.",
        "",
    ]
    write_section(SECTION, "\n".join(lines))

if __name__ == "__main__":
    main()
