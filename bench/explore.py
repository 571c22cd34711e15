#!/usr/bin/env python3
"""The explorer's own cost (run by `make bench`, as root).

bench/workloads/fanout.c calls fanout() about 1,000 times a second: 50 call
sites, one of them fan_mid() with two of its own. The real binary runs as
`tachy explore -p PID fanout` in a tmux pane of 80x24 (its function view
refreshed once a second, the 50 sites attached, fan_mid's two held back as
the view plans them), and this measures, in each of BENCH_ROUNDS rounds:

  cpu         the explorer's own CPU time (every thread of it, from
              /proc/PID/task/*/schedstat) over BENCH_SECONDS seconds, in
              percent of one core; goal < 2%
  drill       from the Enter on fan_mid's line (sent with tmux send-keys)
              to the screen saying its call sites are attached (tmux
              capture-pane every 5 ms): the time to attached and counting
              as a user sees it; goal < 200 ms
  attach      the part of it the explorer reports itself ("attached in N
              ms": from the key to the probes counting)

Prints medians and whether each goal is met, and writes them as the section
"explore: the explorer's own CPU and drill-down" of bench/RESULTS.md.

Environment: BENCH_ROUNDS (default 5), BENCH_SECONDS (default 10),
BENCH_RESULTS, BENCH_TACHY (see benchlib).
"""

import glob
import os
import re
import statistics
import subprocess
import sys
import time

from benchlib import (OUT, ROUNDS, TACHY, WORKLOADS, load_average, require_root, rounds_cell,
                      write_section)

SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
SECTION = "## explore: the explorer's own CPU and drill-down"
SESSION = f"tachy-bench-explore-{os.getpid()}"
CPU_GOAL = 2.0
DRILL_GOAL = 200.0


def tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True).stdout


def screen():
    return tmux("capture-pane", "-p", "-t", SESSION)


def wait_for(what, ok, secs=30):
    until = time.monotonic() + secs
    while time.monotonic() < until:
        s = screen()
        if ok(s):
            return s
        time.sleep(0.05)
    sys.exit(f"bench: the explorer never showed {what}:\n{screen()}")


def cpu_ns(pid):
    """The CPU time of process `pid`'s threads, in ns."""
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def one_round(binary):
    wp = subprocess.Popen([binary], stdout=subprocess.PIPE, text=True)
    line = wp.stdout.readline()
    if not line.startswith("ready "):
        wp.kill()
        sys.exit(f"bench: fanout did not start: {line!r}")
    try:
        tmux("new-session", "-d", "-s", SESSION, "-x", "80", "-y", "24",
             f"exec {TACHY} explore -p {wp.pid} fanout")
        explorer = int(tmux("display-message", "-p", "-t", SESSION, "#{pane_pid}").strip())
        s = wait_for("the first report", lambda s: re.search(r" fanout  calls [1-9]", s))
        m = re.search(r"(\d+) probes in place, (\d+) held", s)
        if not m:
            sys.exit(f"bench: no probes in place on the screen:\n{s}")
        probes = int(m.group(1))
        # Counting, once a second: the explorer's own CPU from now.
        t0, c0 = time.monotonic(), cpu_ns(explorer)
        time.sleep(SECONDS)
        t1, c1 = time.monotonic(), cpu_ns(explorer)
        cpu = (c1 - c0) / ((t1 - t0) * 1e9) * 100
        # fan_mid's line is the first call line of fanout's view.
        row = next(i for i, l in enumerate(s.splitlines()) if "fan_mid();" in l)
        sel = next(i for i, l in enumerate(s.splitlines()) if l.startswith("> "))
        for _ in range(row - sel):
            tmux("send-keys", "-t", SESSION, "Down")
        wait_for("fan_mid selected", lambda s: any(
            l.startswith("> ") and "fan_mid();" in l for l in s.splitlines()))
        start = time.monotonic()
        tmux("send-keys", "-t", SESSION, "Enter")
        while True:
            s = screen()
            m = re.search(r"call sites? attached in (\d+) ms", s)
            if m:
                break
            if time.monotonic() - start > 10:
                sys.exit(f"bench: the drill-down never attached:\n{s}")
            time.sleep(0.005)
        drill = (time.monotonic() - start) * 1000
        attach = float(m.group(1))
        return cpu, drill, attach, probes
    finally:
        tmux("kill-session", "-t", SESSION)
        wp.kill()
        wp.wait()


def main():
    require_root()
    binary = os.path.join(OUT, "fanout")
    subprocess.run(["gcc", "-O2", "-g", "-fcf-protection=none", "-o", binary,
                    os.path.join(WORKLOADS, "fanout.c")], check=True)
    res = {"cpu": [], "drill": [], "attach": []}
    probes = 0
    for r in range(ROUNDS):
        cpu, drill, attach, probes = one_round(binary)
        res["cpu"].append(cpu)
        res["drill"].append(drill)
        res["attach"].append(attach)
        print(f"round {r + 1}: cpu {cpu:.2f}% of a core, drill-down {drill:.0f} ms "
              f"(attached in {attach:.0f} ms)", flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    met = lambda ok: "met" if ok else "NOT met"
    lines = [
        SECTION,
        "",
        f"bench/explore.py, {ROUNDS} rounds: `tachy explore -p PID fanout` in a tmux pane "
        f"of 80x24 on bench/workloads/fanout.c (fanout() ~1,000 calls/s, {probes} probes in "
        "place: its 50 call sites; fan_mid's 2 held back until the drill-down); load "
        f"average at the end: {load_average()}.",
        "",
        "| measure | median | all rounds | goal | |",
        "|---|---|---|---|---|",
        f"| explorer CPU over {SECONDS:.0f} s, % of one core | {med['cpu']:.2f} | "
        f"{', '.join(f'{x:.2f}' for x in res['cpu'])} | < {CPU_GOAL:.0f}% | "
        f"{met(med['cpu'] < CPU_GOAL)} |",
        f"| drill-down, Enter to the screen saying attached, ms | {med['drill']:.0f} | "
        f"{rounds_cell(res['drill'])} | < {DRILL_GOAL:.0f} ms | {met(med['drill'] < DRILL_GOAL)} |",
        f"| of which attaching, as the explorer reports it, ms | {med['attach']:.0f} | "
        f"{rounds_cell(res['attach'])} | | |",
        "",
    ]
    write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
