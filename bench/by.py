#!/usr/bin/env python3
"""What --by caller and --by tid add to each traced call (run by `make
bench`, as root).

Two workloads, each making N calls and measuring ns per call itself, as the
two ways tachy times a return:

  uretprobe   bench/workloads/push.c, traced_push (C, push first: make
              bench's workload (a)); its object has no unwinding code, so
              the return is a uretprobe, whose registers hold the caller
  ret probes  bench/workloads/cppexits.cpp built with -DHELPER_MAY_THROW,
              bench::traced (make bench's workload (i)): an exception could
              pass, so each `ret` is probed and the caller is read from the
              user stack there

Variants, interleaved in every round:

  untraced      the workload alone
  tachy         tachy latency -p PID FUNC
  tachy-caller  tachy latency --by caller -p PID FUNC
  tachy-tid     tachy latency --by tid -p PID FUNC

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
FLAGS = ["-O2", "-g", "-fno-stack-protector", "-fno-omit-frame-pointer", "-fcf-protection=none"]
WORKLOADS_BY = [
    dict(name="uretprobe", exe="by_push", cc="gcc", src="push.c", flags=["-fno-ipa-ra"],
         func="traced_push", what="traced_push (bench/workloads/push.c, C, push first): "
         "returns timed by a uretprobe"),
    dict(name="ret probes", exe="by_cppthrow", cc="g++", src="cppexits.cpp",
         flags=["-DHELPER_MAY_THROW"], func="bench::traced",
         what="bench::traced (bench/workloads/cppexits.cpp -DHELPER_MAY_THROW, C++): "
         "each `ret` probed, the caller read from the user stack"),
]


def tracer(variant, pid, func):
    by = {"tachy-caller": ["--by", "caller"], "tachy-tid": ["--by", "tid"]}
    if variant == "untraced":
        return None
    return [TACHY, "latency", "-p", str(pid)] + by.get(variant, []) + [func]


def run_once(binary, func, variant):
    """ns per call the workload measured, the calls it made, and tachy's report."""
    out, report = run_workload([binary, str(CALLS)], lambda pid: tracer(variant, pid, func))
    m = re.search(r"calls (\d+) ns_per_call (\S+)", out)
    if not m:
        sys.exit(f"bench: no result from the workload: {out!r}")
    return float(m.group(2)), int(m.group(1)), report


def main():
    require_root()
    for w in WORKLOADS_BY:
        w["binary"] = os.path.join(OUT, w["exe"])
        subprocess.run([w["cc"]] + FLAGS + w["flags"] + ["-o", w["binary"],
                        os.path.join(WORKLOADS, w["src"])], check=True)
    res = {(w["name"], v): [] for w in WORKLOADS_BY for v in VARIANTS}
    for r in range(ROUNDS):
        for w in WORKLOADS_BY:
            for v in VARIANTS:
                ns, calls, report = run_once(w["binary"], w["func"], v)
                res[(w["name"], v)].append(ns)
                # Every call counted, and with --by in one group: the check
                # that the traced runs really traced and grouped.
                if v != "untraced" and f"count: {calls}" not in report:
                    sys.exit(f"bench: tachy did not count the {calls} calls:\n{report}")
                if v not in ("untraced", "tachy") and not re.search(
                        rf"\n  \S.*count {calls} ", report):
                    sys.exit(f"bench: tachy --by did not put the {calls} calls in one group:\n"
                             f"{report}")
                print(f"round {r + 1}: {w['name']:10} {v:13} {ns:9.1f} ns/call", flush=True)
    med = medians(res)
    lines = [
        SECTION,
        "",
        f"bench/by.py, {ROUNDS} rounds of {CALLS} calls per run, workloads and variants "
        f"interleaved; load average at the end: {load_average()}.",
        "",
    ]
    for w in WORKLOADS_BY:
        n = w["name"]
        plain = med[(n, "tachy")] - med[(n, "untraced")]
        lines += [f"{w['what']}:", "",
                  "| variant | median ns per call | all rounds |", "|---|---|---|"]
        for v in VARIANTS:
            lines.append(f"| {v} | {med[(n, v)]:.1f} | {rounds_cell(res[(n, v)])} |")
        lines.append("")
        for v in ("tachy-caller", "tachy-tid"):
            add = med[(n, v)] - med[(n, "tachy")]
            share = 100.0 * add / plain if plain > 0 else float("nan")
            lines.append(f"Added per call by {v} over plain tachy ({n}): {add:.1f} ns "
                         f"({share:.1f}% of plain tachy's {plain:.1f} ns per call; "
                         "goal <= 5%).")
        lines.append("")
    write_section(SECTION, "\n".join(lines).rstrip() + "\n")


if __name__ == "__main__":
    main()
