#!/usr/bin/env python3
"""What --by caller adds to each traced call (run by `make bench`, as root).

bench/workloads/push.c (traced_push: push first, built as make bench's
workload (a)) makes N calls and measures ns per call itself. Variants,
interleaved in every round:

  untraced      the workload alone
  tachy         tachy latency -p PID traced_push
  tachy-caller  tachy latency --by caller -p PID traced_push
  tachy-tid     tachy latency --by tid -p PID traced_push

Prints the medians and what each --by variant adds per call over plain
`tachy latency` (ns, and as a share of plain tachy's own cost per call,
tachy - untraced; the goal is <= 5%), and writes them as the section
"--by: cost per call" of bench/RESULTS.md (replacing an earlier one).

Environment: BENCH_ROUNDS (default 5), BENCH_CALLS (calls per run, default
200000), BENCH_RESULTS (default bench/RESULTS.md), BENCH_TACHY (the binary,
default target/release/tachy).
"""

import os
import re
import subprocess
import sys

from benchlib import (OUT, ROUNDS, TACHY, WORKLOADS, load_average, medians, require_root,
                      rounds_cell, run_workload, write_section)
CALLS = int(os.environ.get("BENCH_CALLS", "200000"))
SECTION = "## --by: cost per call"
VARIANTS = ["untraced", "tachy", "tachy-caller", "tachy-tid"]
FLAGS = ["-O2", "-g", "-fno-ipa-ra", "-fno-stack-protector", "-fno-omit-frame-pointer",
         "-fcf-protection=none"]


def tracer(variant, pid):
    by = {"tachy-caller": ["--by", "caller"], "tachy-tid": ["--by", "tid"]}
    if variant == "untraced":
        return None
    return [TACHY, "latency", "-p", str(pid)] + by.get(variant, []) + ["traced_push"]


def run_once(binary, variant):
    """ns per call the workload measured, the calls it made, and tachy's report."""
    out, report = run_workload([binary, str(CALLS)], lambda pid: tracer(variant, pid))
    m = re.search(r"calls (\d+) ns_per_call (\S+)", out)
    if not m:
        sys.exit(f"bench: no result from the workload: {out!r}")
    return float(m.group(2)), int(m.group(1)), report


def main():
    require_root()
    binary = os.path.join(OUT, "by_push")
    subprocess.run(["gcc"] + FLAGS + ["-o", binary,
                    os.path.join(WORKLOADS, "push.c")], check=True)
    res = {v: [] for v in VARIANTS}
    for r in range(ROUNDS):
        for v in VARIANTS:
            ns, calls, report = run_once(binary, v)
            res[v].append(ns)
            # Every call counted, and with --by in one group: the check
            # that the traced runs really traced and grouped.
            if v != "untraced" and f"count: {calls}" not in report:
                sys.exit(f"bench: tachy did not count the {calls} calls:\n{report}")
            if v != "untraced" and v != "tachy" and not re.search(
                    rf"\n  \S.*count {calls} ", report):
                sys.exit(f"bench: tachy --by did not put the {calls} calls in one group:\n{report}")
            print(f"round {r + 1}: {v:13} {ns:9.1f} ns/call", flush=True)
    med = medians(res)
    plain = med["tachy"] - med["untraced"]
    lines = [
        SECTION,
        "",
        f"bench/by.py, {ROUNDS} rounds of {CALLS} calls of traced_push (bench/workloads/push.c, "
        "push first), variants interleaved; "
        f"load average at the end: {load_average()}.",
        "",
        "| variant | median ns per call | all rounds |",
        "|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {med[v]:.1f} | {rounds_cell(res[v])} |")
    lines.append("")
    for v in ("tachy-caller", "tachy-tid"):
        add = med[v] - med["tachy"]
        share = 100.0 * add / plain if plain > 0 else float("nan")
        lines.append(f"Added per call by {v} over plain tachy: {add:.1f} ns "
                     f"({share:.1f}% of plain tachy's {plain:.1f} ns per call; goal <= 5%).")
    lines.append("")
    write_section(SECTION, "\n".join(lines))

if __name__ == "__main__":
    main()
