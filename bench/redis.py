#!/usr/bin/env python3
"""A hot function whose exits are single-stepped: Redis's getCommand under
redis-benchmark (run by `make bench`, as root, where redis-server is
installed; skipped with a line saying so where it is not).

getCommand's plan here: an emulated entry and a probe on its `ret` (Redis
maps libstdc++ and libgcc_s, so a uretprobe is refused: something the
function reaches could unwind through it), which the kernel single-steps.
bpftrace uses a uretprobe. Variants, interleaved in every round, each
measured by Redis itself (INFO commandstats: usec_per_call of GET, over
the GETs of one redis-benchmark run):

  untraced   Redis alone
  tachy      tachy latency -p PID getCommand
  bpftrace   uprobe + uretprobe on getCommand with a histogram

tachy must count every GET Redis counted. Writes the section "Redis
getCommand: a single-stepped exit" of bench/RESULTS.md with the budget
(tachy within 1.1x bpftrace's time per GET) and whether it is met.

Environment: BENCH_ROUNDS (default 5), BENCH_REDIS_GETS (default 50000),
BENCH_RESULTS, BENCH_TACHY.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from benchlib import (ROUNDS, TACHY, attach_tracer, load_average, medians, require_root,
                      rounds_cell, write_section)

GETS = int(os.environ.get("BENCH_REDIS_GETS", "50000"))
SECTION = "## Redis getCommand: a single-stepped exit"
VARIANTS = ["untraced", "tachy", "bpftrace"]
FUNC = "getCommand"
BT = ("uprobe:{exe}:{f} {{ @s[tid] = nsecs; @n = count(); }} "
      "uretprobe:{exe}:{f} /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout


def gets(port):
    """GETs Redis has run, and their usec_per_call."""
    m = re.search(r"cmdstat_get:calls=(\d+),usec=\d+,usec_per_call=([\d.]+)",
                  cli(port, "info", "commandstats"))
    return (int(m.group(1)), float(m.group(2))) if m else (0, 0.0)


def run_once(variant, port, pid, exe):
    """Redis's usec_per_call of the GETs of one benchmark run, the GETs it
    counted and the tracer's output."""
    cli(port, "config", "resetstat")
    cmd = {"tachy": [TACHY, "latency", "-p", str(pid), FUNC],
           "bpftrace": ["bpftrace", "-p", str(pid), "-e", BT.format(exe=exe, f=FUNC)]}.get(variant)
    tp, lines = None, []
    if cmd:
        word = "Attaching" if variant == "bpftrace" else "Tracing "
        tp, lines, reader = attach_tracer(cmd, word, 60, variant)
        time.sleep(0.3)
    subprocess.run(["redis-benchmark", "-p", str(port), "-t", "get", "-n", str(GETS), "-c", "2",
                    "-q"], capture_output=True, check=True)
    n, usec = gets(port)
    if tp:
        tp.send_signal(signal.SIGINT)
        try:
            tp.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tp.kill()
            tp.wait()
        reader.join(5)
    return usec, n, "".join(lines)


def main():
    require_root()
    if not shutil.which("redis-server"):
        print("bench/redis.py: skipped: redis-server is not installed (apt-get install redis-server)")
        return
    if not shutil.which("bpftrace"):
        sys.exit("bench: bpftrace is not installed (apt-get install bpftrace)")
    exe = os.path.realpath(shutil.which("redis-server"))
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        # Redis picks its role by the name it was started as.
        rp = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--save", "", "--appendonly", "no",
                               "--dir", d], stdout=subprocess.DEVNULL)
        try:
            deadline = time.time() + 10
            while True:
                try:
                    cli(port, "set", "key:__rand_int__", "x")
                    break
                except subprocess.CalledProcessError:
                    if time.time() > deadline:
                        sys.exit("bench: redis-server did not start")
                    time.sleep(0.1)
            plan = subprocess.run([TACHY, "latency", "--dry-run", "-p", str(rp.pid), FUNC],
                                  capture_output=True, text=True)
            m = re.search(r"return: ([^\n]*)", plan.stdout + plan.stderr)
            res = {v: [] for v in VARIANTS}
            for _ in range(ROUNDS):
                for v in VARIANTS:
                    usec, n, out = run_once(v, port, rp.pid, exe)
                    res[v].append(usec)
                    if v == "tachy":
                        c = re.search(r"count: (\d+)", out)
                        if not c or int(c.group(1)) != n:
                            sys.exit(f"bench: tachy counted {c and c.group(1)} of {n} GETs:\n"
                                     f"{out[-600:]}")
                    if v == "bpftrace":
                        c = re.search(r"^@n: (\d+)", out, re.M)
                        if not c or int(c.group(1)) != n:
                            sys.exit(f"bench: bpftrace counted {c and c.group(1)} of {n} GETs")
        finally:
            rp.terminate()
            rp.wait()
    med = medians(res)
    ratio = med["tachy"] / med["bpftrace"]
    lines = [
        SECTION,
        "",
        f"bench/redis.py, {ROUNDS} rounds of redis-benchmark -t get -n {GETS} -c 2 against "
        f"{shutil.which('redis-server')}, variants interleaved; Redis's own usec_per_call of GET (INFO commandstats); "
        f"tachy and bpftrace each counted every GET. Load average at the end: {load_average()}.",
        "",
        "| variant | median us per GET | all rounds |",
        "|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {med[v]:.2f} | {', '.join(f'{x:.2f}' for x in res[v])} |")
    lines += [
        "",
        f"tachy's plan for {FUNC}: {m.group(1) if m else '?'}.",
        "",
        f"tachy / bpftrace: {ratio:.2f}x (budget <= 1.1: {'met' if ratio <= 1.1 else 'NOT met'}). "
        "Both pay the entry's emulated hit; the exit is a single-step of `ret` for tachy and a "
        "uretprobe's return for bpftrace. What would meet it: a proof that nothing getCommand "
        "reaches can unwind (then a uretprobe is as safe), or a kernel that emulates `ret`.",
    ]
    write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
