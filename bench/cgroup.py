#!/usr/bin/env python3
"""What --cgroup adds to each traced call (run by `make bench`, as root).

bench/workloads/push.c (traced_push, push first) makes N calls and measures
ns per call itself, in a fresh cgroup v2 directory. Variants, interleaved in
every round:

  untraced      the workload alone
  tachy         tachy latency -p PID traced_push
  tachy-pids    tachy latency -p PID,IDLE traced_push: two processes, so
                each call's process is counted (IDLE, a second copy of the
                workload, never gets its go signal)
  tachy-cgroup  tachy latency --cgroup DIR traced_push: the cgroup check
                at each probe, and each call's process counted

Prints the medians, what --cgroup adds per call over plain `tachy latency`
and over tachy-pids (the cgroup check alone), and writes them as the section
"--cgroup: cost per call" of bench/RESULTS.md (replacing an earlier one).

Environment: as bench/benchlib.py, and BENCH_CALLS (calls per run, default
200000).
"""

import os
import re
import subprocess
import sys
import time

from benchlib import (OUT, ROUNDS, TACHY, WORKLOADS, load_average, median_table, medians,
                      require_root, run_workload, write_section)
CALLS = int(os.environ.get("BENCH_CALLS", "200000"))
SECTION = "## --cgroup: cost per call"
VARIANTS = ["untraced", "tachy", "tachy-pids", "tachy-cgroup"]
FLAGS = ["-O2", "-g", "-fno-ipa-ra", "-fno-stack-protector", "-fno-omit-frame-pointer",
         "-fcf-protection=none"]


def cgroup2_mount():
    """Where cgroup v2 is mounted (/sys/fs/cgroup, or .../unified on a
    hybrid hierarchy)."""
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        if right.split(" ")[0] == "cgroup2":
            return left.split(" ")[4]
    sys.exit("bench: cgroup v2 is not mounted")


def main():
    require_root()
    binary = os.path.join(OUT, "cgroup_push")
    subprocess.run(["gcc"] + FLAGS + ["-o", binary,
                    os.path.join(WORKLOADS, "push.c")], check=True)
    cg = os.path.join(cgroup2_mount(), f"tachy-bench-{os.getpid()}")
    os.makedirs(cg, exist_ok=True)
    # The second process of tachy-pids: waits for a go signal it never gets.
    idle = subprocess.Popen([binary, "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    idle.stdout.readline()
    try:
        res = measure(binary, cg, idle.pid)
    finally:
        idle.kill()
        idle.wait()
        for _ in range(100):
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.02)
    report(res)


def measure(binary, cg, idle):
    def tracer(variant, pid):
        # Every run's workload is in the cgroup, traced or not.
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        scope = {
            "tachy": ["-p", str(pid)],
            "tachy-pids": ["-p", f"{pid},{idle}"],
            "tachy-cgroup": ["--cgroup", cg],
        }
        if variant == "untraced":
            return None
        return [TACHY, "latency"] + scope[variant] + ["traced_push"]

    res = {v: [] for v in VARIANTS}
    for r in range(ROUNDS):
        for v in VARIANTS:
            # tachy-pids and tachy-cgroup trace on after the workload ends
            # (the idle process lives; a cgroup takes new processes): stop
            # them with Ctrl-C for their report.
            out, rep = run_workload([binary, str(CALLS)], lambda pid: tracer(v, pid),
                                    stop=v in ("tachy-pids", "tachy-cgroup"))
            m = re.search(r"calls (\d+) ns_per_call (\S+)", out)
            if not m:
                sys.exit(f"bench: no result from the workload: {out!r}")
            ns, calls = float(m.group(2)), int(m.group(1))
            if v != "untraced" and f"count: {calls}" not in rep:
                sys.exit(f"bench: tachy did not count the {calls} calls:\n{rep}")
            res[v].append(ns)
            print(f"round {r + 1}: {v:13} {ns:9.1f} ns/call", flush=True)
    return res


def report(res):
    med = medians(res)
    plain = med["tachy"] - med["untraced"]
    lines = [
        SECTION,
        "",
        f"bench/cgroup.py, {ROUNDS} rounds of {CALLS} calls of traced_push "
        "(bench/workloads/push.c, push first) in a cgroup v2 directory of its own, "
        f"variants interleaved; load average at the end: {load_average()}.",
        "",
    ] + median_table(VARIANTS, res) + [""]
    for v, base in (("tachy-cgroup", "tachy"), ("tachy-pids", "tachy"),
                    ("tachy-cgroup", "tachy-pids")):
        add = med[v] - med[base]
        share = 100.0 * add / plain if plain > 0 else float("nan")
        under = med[base] - med["untraced"]
        ratio = (med[v] - med["untraced"]) / under if under > 0 else float("nan")
        lines.append(f"{v} over {base}: {add:+.1f} ns per call ({share:+.1f}% of plain "
                     f"tachy's {plain:.1f} ns; cost ratio {v} / {base} {ratio:.3f}).")
    lines.append("")
    write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
