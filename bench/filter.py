#!/usr/bin/env python3
"""What a two-clause --filter adds to each call (run by `make bench`, as root).

bench/workloads/argfilter.c calls traced_args(key, n) N times with
key = i % 10 and measures ns per call itself. Variants, interleaved in every
round:

  untraced        the workload alone
  tachy           tachy latency -p PID traced_args
  filter-pass     + --filter 'key >= 0 && key < 10': both terms evaluated,
                  every call passes and is timed
  filter-reject   + --filter 'key == 3 && tid > 0': 9 calls in 10 rejected
                  at the entry (their return is still observed by the exit
                  probe, which finds no frame)

Checks tachy's counts (every call; a tenth with filter-reject, the rest
counted as filtered out), prints medians and the cost of the filter per call
against plain tachy latency, and writes them as the section "--filter: cost
per call" of bench/RESULTS.md (replacing an earlier one).

Environment: BENCH_ROUNDS (default 5), BENCH_CALLS (default 200000),
BENCH_RESULTS (default bench/RESULTS.md), BENCH_TACHY (the binary, default
target/release/tachy).
"""

import os
import re
import subprocess
import sys

from benchlib import (OUT, ROUNDS, TACHY, WORKLOADS, load_average, medians, over,
                      require_root, rounds_cell, run_workload, write_section)
CALLS = int(os.environ.get("BENCH_CALLS", "200000"))
WARMUP = 1000
SECTION = "## --filter: cost per call"
FILTERS = {
    "filter-pass": "key >= 0 && key < 10",
    "filter-reject": "key == 3 && tid > 0",
}
VARIANTS = ["untraced", "tachy", "filter-pass", "filter-reject"]


def tracer(variant, pid):
    if variant == "untraced":
        return None
    cmd = [TACHY, "latency", "-p", str(pid), "traced_args"]
    if variant in FILTERS:
        cmd += ["--filter", FILTERS[variant]]
    return cmd


def run_once(binary, variant):
    """ns per call the workload measured, calls it made, tachy's report."""
    out, report = run_workload([binary, str(CALLS), str(WARMUP)],
                               lambda pid: tracer(variant, pid), tachy_timeout=20)
    m = re.search(r"calls (\d+) ns_per_call (\S+)", out)
    if not m:
        sys.exit(f"bench: no result from the workload: {out!r}")
    return float(m.group(2)), int(m.group(1)), report


def check(variant, calls, report):
    """The traced runs really traced, and the filter kept what it should."""
    if variant == "untraced":
        return
    count = re.search(r"count: (\d+)", report)
    rejected = re.search(r"filtered out by --filter: (\d+)", report)
    kept = calls // 10 if variant == "filter-reject" else calls
    if not count or int(count.group(1)) != kept:
        sys.exit(f"bench: {variant}: expected count {kept}:\n{report}")
    if variant in FILTERS and (not rejected or int(rejected.group(1)) != calls - kept):
        sys.exit(f"bench: {variant}: expected {calls - kept} filtered out:\n{report}")


def main():
    require_root()
    if CALLS % 10 or WARMUP % 10:
        sys.exit("bench: BENCH_CALLS must be a multiple of 10")
    binary = os.path.join(OUT, "argfilter")
    src = WORKLOADS
    subprocess.run(["gcc", "-O2", "-g", f"-I{src}", "-o", binary,
                    os.path.join(src, "argfilter.c")], check=True)
    res = {v: [] for v in VARIANTS}
    for r in range(ROUNDS):
        for v in VARIANTS:
            ns, calls, report = run_once(binary, v)
            check(v, calls, report)
            res[v].append(ns)
            print(f"round {r + 1}: {v:14} {ns:8.1f} ns/call", flush=True)
    med = medians(res)
    lines = [
        SECTION,
        "",
        f"bench/filter.py, {ROUNDS} rounds of {CALLS} calls of traced_args(key, n) "
        "(entry probe on an emulated instruction, uretprobe: a leaf), variants interleaved; "
        f"load average at the end: {load_average()}.",
        "",
        "| variant | --filter | median ns per call | all rounds |",
        "|---|---|---|---|",
    ]
    for v in VARIANTS:
        f = f"`{FILTERS[v]}`" if v in FILTERS else ""
        lines.append(f"| {v} | {f} | {med[v]:.1f} | {rounds_cell(res[v])} |")
    lines += [
        "",
        "Two terms evaluated, every call timed (filter-pass - tachy): "
        f"{over(med, 'filter-pass')} per call; goal <= 5%.",
        "9 calls in 10 rejected at the entry (filter-reject - tachy): "
        f"{over(med, 'filter-reject')} per call.",
        "",
    ]
    write_section(SECTION, "\n".join(lines))

if __name__ == "__main__":
    main()
