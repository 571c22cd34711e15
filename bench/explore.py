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

and the same drill-down on libLLVM (110 MB, 250k symbols): bench/workloads/
llvmhost.c dlopens it and calls LLVMContextCreate() ~1,000 times a second;
`tachy explore -p PID LLVMContextCreate` runs in the pane, and in each round

  llvm        from the Enter on llvm::LLVMContext::LLVMContext()'s line to
              the screen saying its call sites are attached (planned with
              the view, held back until then); goal < 1 s
  llvm deep   then from the Enter on llvm::LLVMContextImpl's constructor
              (a third level, deeper than the plan: planned with --expand
              from the symbols already read, the plan grows by its call
              sites, attached while the other counts go on) to the screen
              saying they are attached (their numbers come with the next
              report, within a second); goal < 1 s

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
LLVM_GOAL = 1000.0


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


def select(text):
    """Moves the function view's selection to the row holding `text`."""
    tmux("send-keys", "-t", SESSION, "Home")
    for _ in range(60):
        if any(l.startswith("> ") and text in l for l in screen().splitlines()):
            return
        tmux("send-keys", "-t", SESSION, "Down")
        time.sleep(0.02)
    sys.exit(f"bench: no row holds {text}:\n{screen()}")


def timed_enter(what, ok):
    """Enter, then ms until the screen satisfies `ok` (polled every 5 ms)."""
    start = time.monotonic()
    tmux("send-keys", "-t", SESSION, "Enter")
    while True:
        s = screen()
        if ok(s):
            return (time.monotonic() - start) * 1000, s
        if time.monotonic() - start > 20:
            sys.exit(f"bench: the explorer never showed {what}:\n{s}")
        time.sleep(0.005)


def sites_shown(s):
    """The function view shows call sites under its header: the plan they
    are in is attached (the rows come with the session's start; their
    numbers with its first report, a second later)."""
    lines = s.splitlines()
    head = next((i for i, l in enumerate(lines) if "CALLS/C" in l), None)
    return head is not None and head + 1 < len(lines) and lines[head + 1].strip() != ""


def llvm_library():
    """The newest libLLVM shared library under /usr/lib/llvm-*/lib."""
    libs = sorted(p for p in glob.glob("/usr/lib/llvm-*/lib/libLLVM-*.so*")
                  if os.path.isfile(p))
    if not libs:
        sys.exit("bench: no libLLVM under /usr/lib/llvm-*/lib (install clang)")
    return max(libs, key=lambda p: int(re.search(r"llvm-(\d+)", p).group(1)))


def llvm_round(host, lib):
    wp = subprocess.Popen([host, lib, "contexts"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    line = wp.stdout.readline()
    if not line.startswith("ready "):
        wp.kill()
        sys.exit(f"bench: llvmhost did not start: {line!r}")
    try:
        tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "30",
             f"exec {TACHY} explore -p {wp.pid} LLVMContextCreate")
        wait_for("the first report", lambda s: re.search(r" LLVMContextCreate  calls [1-9]", s))
        select("llvm::LLVMContext::LLVMContext()")
        held, _ = timed_enter("LLVMContext's sites attached",
                              lambda s: re.search(r"call sites? attached in \d+ ms", s))
        select("llvm::LLVMContextImpl::LLVMContextImpl(")
        deep, _ = timed_enter("LLVMContextImpl's sites attached",
                              lambda s: "--expand" in s and sites_shown(s)
                              and re.search(r"call sites? attached in \d+ ms", s))
        return held, deep
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
    host = os.path.join(OUT, "llvmhost")
    subprocess.run(["gcc", "-O2", "-o", host, os.path.join(WORKLOADS, "llvmhost.c"), "-ldl"],
                   check=True)
    lib = llvm_library()
    res["llvm"], res["llvm_deep"] = [], []
    for r in range(ROUNDS):
        held, deep = llvm_round(host, lib)
        res["llvm"].append(held)
        res["llvm_deep"].append(deep)
        print(f"round {r + 1}: libLLVM drill-down {held:.0f} ms, a level deeper (the plan "
              f"grows) {deep:.0f} ms", flush=True)
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
        f"| libLLVM: drill-down into LLVMContext::LLVMContext(), Enter to attached, ms | "
        f"{med['llvm']:.0f} | {rounds_cell(res['llvm'])} | < {LLVM_GOAL:.0f} ms | "
        f"{met(med['llvm'] < LLVM_GOAL)} |",
        f"| libLLVM: a level deeper (the plan grows), Enter to its sites attached, ms | "
        f"{med['llvm_deep']:.0f} | {rounds_cell(res['llvm_deep'])} | < {LLVM_GOAL:.0f} ms | "
        f"{met(med['llvm_deep'] < LLVM_GOAL)} |",
        "",
        f"libLLVM: {lib}, `tachy explore -p PID LLVMContextCreate` on "
        "bench/workloads/llvmhost.c (LLVMContextCreate() ~1,000 calls/s).",
        "",
    ]
    if med["llvm_deep"] >= LLVM_GOAL:
        lines += [
            "Where the deeper drill-down is NOT met: the callee is planned with --expand "
            "from the symbols already read, and the loaded BPF object takes the new sites "
            "(its counters sized for growth at load): what is left is planning and attaching.",
            "",
        ]
    write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
