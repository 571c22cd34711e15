#!/usr/bin/env python3
"""Plain C at bpftrace's cost: CPython's PyObject_GetAttr (run by `make
bench`, as root).

bench/workloads/getattr.py reads attributes with getattr() in a loop, each
read a call of PyObject_GetAttr, a C function with an indirect call. In a
process that cannot unwind (python3 maps no C++ runtime, no Rust unwinding,
no exception tables outside libc), tachy times it with a uretprobe by
default. Variants, interleaved in every round, each timed by the workload
itself (wall time of its loop):

  untraced    the workload alone
  tachy       tachy latency -p PID PyObject_GetAttr (the default plan)
  tachy-rets  the same in a process that may unwind (libstdc++ loaded by
              LD_PRELOAD): the plan of the function's own code, probes on
              each ret
  bpftrace    uprobe + uretprobe with a histogram, the usual one-liner

Prints medians and the ratio tachy / bpftrace (goal <= 1.1), and writes
the section "CPython PyObject_GetAttr: wall time" of bench/RESULTS.md.

The workload runs at real-time priority (chrt -f 10, BENCH_RT=0 to run it
as is), so that a busy machine's wait for a CPU stays out of its wall time
(at load 10 on 2 cores the untraced rounds spread 64-141 ms).

Environment: BENCH_ROUNDS (default 5), BENCH_CALLS (loop iterations,
default 300000; two reads each), BENCH_PYTHON (default /usr/bin/python3.11),
BENCH_RT, BENCH_RESULTS, BENCH_TACHY.
"""

import os
import re
import shutil
import subprocess
import sys
import threading
import time

from benchlib import (ROUNDS, TACHY, WORKLOADS, load_average, medians, require_root,
                      rounds_cell, write_section)

PYTHON = os.environ.get("BENCH_PYTHON", "/usr/bin/python3.11")
CALLS = int(os.environ.get("BENCH_CALLS", "300000"))
SECTION = "## CPython PyObject_GetAttr: wall time"
RT = (["chrt", "-f", "10"] if os.environ.get("BENCH_RT", "1") != "0" and shutil.which("chrt")
      else [])
VARIANTS = ["untraced", "tachy", "tachy-rets", "bpftrace"]
FUNC = "PyObject_GetAttr"
PRELOAD = "libstdc++.so.6"
BT = ("uprobe:{exe}:{f} {{ @s[tid] = nsecs; }} "
      "uretprobe:{exe}:{f} /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}")


def entry_addr(pid):
    """Where PyObject_GetAttr's first byte is in process `pid`."""
    sym = subprocess.run(["readelf", "-W", "--dyn-syms", PYTHON], capture_output=True,
                         text=True).stdout
    m = re.search(rf"^\s*\d+: ([0-9a-f]+)\s+\d+ FUNC .* {FUNC}(@\S*)?$", sym, re.M)
    vaddr = int(m.group(1), 16)
    pie = "DYN" in subprocess.run(["readelf", "-h", PYTHON], capture_output=True,
                                  text=True).stdout
    if not pie:
        return vaddr
    real = os.path.realpath(PYTHON)
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5] == real and int(parts[2], 16) == 0:
            return int(parts[0].split("-")[0], 16) + vaddr
    sys.exit("bench: python3 is not mapped")


def probed(pid, addr):
    """Whether a breakpoint (int3) stands at `addr` in process `pid`."""
    with open(f"/proc/{pid}/mem", "rb") as m:
        m.seek(addr)
        return m.read(1) == b"\xcc"


def tracer(variant, pid):
    exe = os.path.realpath(PYTHON)
    if variant in ("tachy", "tachy-rets"):
        return [TACHY, "latency", "-p", str(pid), FUNC]
    if variant == "bpftrace":
        return ["bpftrace", "-p", str(pid), "-e", BT.format(exe=exe, f=FUNC)]
    return None


def run_once(variant):
    """The workload's wall time (s) and the tracer's output."""
    env = dict(os.environ)
    if variant == "tachy-rets":
        # An LD_PRELOAD object that can unwind: tachy plans by the
        # function's own code (probes on each ret).
        env["LD_PRELOAD"] = PRELOAD
    wp = subprocess.Popen([*RT, PYTHON, os.path.join(WORKLOADS, "getattr.py"), str(CALLS)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    line = wp.stdout.readline()
    if not line.startswith("ready "):
        wp.kill()
        sys.exit(f"bench: workload did not start: {line!r}")
    cmd = tracer(variant, wp.pid)
    tp, lines = None, []
    if cmd:
        tp = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reader = threading.Thread(target=lambda: lines.extend(tp.stdout), daemon=True)
        reader.start()
        addr = entry_addr(wp.pid)
        deadline = time.time() + 60
        while not probed(wp.pid, addr):
            if time.time() > deadline or tp.poll() is not None:
                wp.kill()
                tp.kill()
                sys.exit(f"bench: {variant} did not attach: {''.join(lines)[-300:]}")
            time.sleep(0.05)
        # Every probe of the plan is in place once the header is out.
        while variant != "bpftrace" and not any(l.startswith("Tracing ") for l in lines):
            time.sleep(0.05)
        time.sleep(0.2)
    wp.stdin.write("go\n")
    wp.stdin.flush()
    out = wp.stdout.read()
    wp.wait()
    if tp:
        try:
            tp.wait(timeout=20)
        except subprocess.TimeoutExpired:
            tp.send_signal(2)
            tp.wait()
        reader.join(5)
    m = re.search(r"wall_s (\S+)", out)
    if not m:
        sys.exit(f"bench: no result from the workload: {out!r}")
    return float(m.group(1)), "".join(lines)


def main():
    require_root()
    if not shutil.which("bpftrace"):
        sys.exit("bench: bpftrace is not installed (apt-get install bpftrace)")
    res = {v: [] for v in VARIANTS}
    plans = {}
    for _ in range(ROUNDS):
        for v in VARIANTS:
            wall, report = run_once(v)
            res[v].append(wall)
            if v.startswith("tachy"):
                m = re.search(r"count: (\d+)", report)
                if not m or int(m.group(1)) < 2 * CALLS:
                    sys.exit(f"bench: {v} counted too few calls:\n{report[-600:]}")
    for v in ("tachy", "tachy-rets"):
        pid_plan = subprocess.run(
            [TACHY, "latency", "--dry-run", FUNC, "--", PYTHON, "-c", "pass"],
            capture_output=True, text=True,
            env=dict(os.environ, **({"LD_PRELOAD": PRELOAD} if v == "tachy-rets" else {})))
        m = re.search(r"return: ([^\n]*)", pid_plan.stdout + pid_plan.stderr)
        plans[v] = m.group(1) if m else "?"
    med = medians(res)
    ratio = med["tachy"] / med["bpftrace"]
    lines = [
        SECTION,
        "",
        f"bench/cpython.py, {ROUNDS} rounds of {CALLS} loop iterations (two getattr() calls "
        f"each) of bench/workloads/getattr.py under {PYTHON}"
        f"{' at real-time priority (chrt -f 10)' if RT else ''}, variants interleaved; "
        f"load average at the end: {load_average()}.",
        "",
        "| variant | median wall s | all rounds (ms) |",
        "|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {med[v]:.3f} | {rounds_cell([x * 1000 for x in res[v]])} |")
    lines += [
        "",
        f"tachy's plan: {plans['tachy']}.",
        f"tachy-rets (LD_PRELOAD={PRELOAD}, a process that may unwind): {plans['tachy-rets']}.",
        "",
        f"tachy / bpftrace: {ratio:.2f}x (goal <= 1.1: {'met' if ratio <= 1.1 else 'NOT met'}); "
        f"tachy-rets / bpftrace: {med['tachy-rets'] / med['bpftrace']:.2f}x; "
        f"untraced {med['untraced']:.3f} s.",
    ]
    write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
