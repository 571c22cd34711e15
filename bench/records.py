#!/usr/bin/env python3
"""What --record-slower-than costs per call at 10,000 slow calls a second
(run by `make bench`, as root).

bench/workloads/records.c calls traced_slow(i, n) N times at 10,000 calls
per second; each call spins 20 us, and the workload times each call itself
(median ns per call). Variants, interleaved in every round:

  untraced       the workload alone
  tachy          tachy latency -p PID traced_slow
  records        tachy latency --record-slower-than 10us: every call is
                 recorded (10,000 records a second through the ring buffer)
  records-none   tachy latency --record-slower-than 1s: the option on, no
                 call slow enough (what saving the arguments at entry costs)

Checks tachy's counts (every call; with records, one record line per call
and none lost), prints medians and what records add per call over plain
tachy latency, and writes them as the section "--record-slower-than: cost
per call" of bench/RESULTS.md (replacing an earlier one).

Environment: BENCH_ROUNDS (default 5), BENCH_CALLS (default 20000: two
seconds a run), BENCH_RESULTS (default bench/RESULTS.md), BENCH_TACHY (the
binary, default target/release/tachy).
"""

import os
import re
import subprocess
import sys

from benchlib import (OUT, ROUNDS, TACHY, WORKLOADS, load_average, medians, over,
                      require_root, rounds_cell, run_workload, write_section)

CALLS = int(os.environ.get("BENCH_CALLS", "20000"))
RATE = 10000
SECTION = "## --record-slower-than: cost per call"
THRESHOLDS = {"records": "10us", "records-none": "1s"}
VARIANTS = ["untraced", "tachy", "records", "records-none"]


def tracer(variant, pid):
    if variant == "untraced":
        return None
    cmd = [TACHY, "latency", "-p", str(pid), "traced_slow"]
    if variant in THRESHOLDS:
        cmd += ["--record-slower-than", THRESHOLDS[variant]]
    return cmd


def run_once(binary, variant):
    """Median ns per call and calls per second the workload measured, and
    tachy's output."""
    out, report = run_workload([binary, str(CALLS), str(RATE)],
                               lambda pid: tracer(variant, pid), tachy_timeout=20)
    m = re.search(r"calls (\d+) ns_per_call (\S+) mean_ns \S+ rate (\S+)", out)
    if not m or int(m.group(1)) != CALLS:
        sys.exit(f"bench: no result from the workload: {out!r}")
    return float(m.group(2)), float(m.group(3)), report


def check(variant, report):
    """The traced runs counted every call, and recorded each once."""
    if variant == "untraced":
        return
    if f"count: {CALLS}" not in report:
        sys.exit(f"bench: {variant}: tachy did not count the {CALLS} calls:\n{report[-2000:]}")
    recorded = len(re.findall(r"^\S+ pid \d+ tid \d+ \(.*\) traced_slow  ", report, re.M))
    want = CALLS if variant == "records" else 0
    if recorded != want or "records lost" in report:
        sys.exit(f"bench: {variant}: {recorded} records, expected {want}:\n{report[-2000:]}")


def main():
    require_root()
    binary = os.path.join(OUT, "records")
    subprocess.run(["gcc", "-O2", "-g", "-o", binary, os.path.join(WORKLOADS, "records.c")],
                   check=True)
    res = {v: [] for v in VARIANTS}
    rates = {v: [] for v in VARIANTS}
    for r in range(ROUNDS):
        for v in VARIANTS:
            ns, rate, report = run_once(binary, v)
            check(v, report)
            res[v].append(ns)
            rates[v].append(rate)
            print(f"round {r + 1}: {v:13} {ns:9.1f} ns/call at {rate:.0f} calls/s", flush=True)
    med = medians(res)
    rate = medians(rates)
    lines = [
        SECTION,
        "",
        f"bench/records.py, {ROUNDS} rounds of {CALLS} calls of traced_slow (20 us each) at "
        f"{RATE} calls per second, variants interleaved; median time of a call as the caller "
        f"measured it; load average at the end: {load_average()}.",
        "",
        "| variant | --record-slower-than | median ns per call | calls per second | all rounds |",
        "|---|---|---|---|---|",
    ]
    for v in VARIANTS:
        t = f"`{THRESHOLDS[v]}`" if v in THRESHOLDS else ""
        lines.append(f"| {v} | {t} | {med[v]:.1f} | {rate[v]:.0f} | {rounds_cell(res[v])} |")
    lines += [
        "",
        f"Every call recorded, {RATE} records a second (records - tachy): "
        f"{over(med, 'records')} per call.",
        "The option on, no call recorded (records-none - tachy): "
        f"{over(med, 'records-none')} per call.",
        "",
    ]
    write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
