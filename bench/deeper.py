#!/usr/bin/env python3
"""What `--by retval` and `--by stack` cost per call, side by side with
bpftrace doing the same (run by `make bench`, as root).

Workload bench/workloads/retstack.c: traced_ret returns one of four values
and is called from main through bench_call and route; C, built with frame
pointers, so its returns are uretprobes and its callers can be walked in
the kernel (TACHY_STACK_METHOD=fp) or copied and unwound (=copy).

Variants, interleaved in every round (each a fresh workload of N calls):

  untraced          the workload alone
  tachy             tachy latency -p PID traced_ret
  tachy-retval      tachy latency --by retval
  bpftrace-retval   uprobe + uretprobe, @[retval] = hist(duration)
  tachy-stack-fp    tachy latency --by stack, the rbp chain walked in BPF
  tachy-stack-copy  tachy latency --by stack, 12 KiB of stack copied per
                    call and unwound by tachy with .eh_frame
  bpftrace-stack    uprobe + uretprobe, @[ustack] = hist(duration)

Checks every tachy run's counts: N calls counted; --by retval's four
groups add up to them; --by stack's groups and its "not grouped" line
(records the ring buffer could not hold) add up to them. Prints the
medians, each tachy variant's cost per call over untraced against
bpftrace's for the same answer (ratio; met where <= 1.0), and writes the
section "--by retval and --by stack: cost per call" of bench/RESULTS.md.

Then an inlined instance: `work` of bench/workloads/inlined.c timed where
it was inlined, against the same function called out of line (tachy and
bpftrace), cost per call. `deeper.py --inlined` runs only these and puts
them in place of the section's earlier inlined rows.

Environment: BENCH_ROUNDS (default 5), BENCH_CALLS (default 200000),
BENCH_RESULTS, BENCH_TACHY.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

from benchlib import (OUT, RESULTS, ROUNDS, TACHY, WORKLOADS, attach_tracer, load_average,
                      medians, require_root, rounds_cell, write_section)

CALLS = int(os.environ.get("BENCH_CALLS", "200000"))
WARMUP = 1000
SECTION = "## --by retval and --by stack: cost per call"
FUNC = "traced_ret"
VARIANTS = ["untraced", "tachy", "tachy-retval", "bpftrace-retval", "tachy-stack-fp",
            "tachy-stack-copy", "bpftrace-stack"]
PAIRS = [("tachy-retval", "bpftrace-retval"), ("tachy-stack-fp", "bpftrace-stack"),
         ("tachy-stack-copy", "bpftrace-stack")]
FLAGS = ["-O2", "-g", "-fno-stack-protector", "-fno-omit-frame-pointer", "-fcf-protection=none"]


def tracer(variant, binary, pid, func=FUNC):
    """The tracer's command (None untraced) and the line it prints once
    attached."""
    if variant.startswith("untraced"):
        return None, None
    if variant == "bpftrace-out-of-line":
        prog = (f"uprobe:{binary}:{func} {{ @s[tid] = nsecs; }} "
                f"uretprobe:{binary}:{func} /@s[tid]/ "
                f"{{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}")
        return ["bpftrace", "-p", str(pid), "-e", prog], "Attaching"
    if variant.startswith("bpftrace"):
        key = "retval" if variant == "bpftrace-retval" else "ustack"
        prog = (f"uprobe:{binary}:{func} {{ @s[tid] = nsecs; }} "
                f"uretprobe:{binary}:{func} /@s[tid]/ "
                f"{{ @[{key}] = hist(nsecs - @s[tid]); delete(@s[tid]); }}")
        return ["bpftrace", "-p", str(pid), "-e", prog], "Attaching"
    env = {"tachy-stack-fp": "fp", "tachy-stack-copy": "copy"}.get(variant)
    by = {"tachy-retval": ["--by", "retval"]}.get(variant, [])
    if env:
        by = ["--by", "stack"]
    cmd = [TACHY, "latency", "-p", str(pid)] + by + [func]
    if env:
        cmd = ["env", f"TACHY_STACK_METHOD={env}"] + cmd
    return cmd, "Tracing "


def entry_address(binary, func=FUNC):
    """`func`'s file offset in `binary` (nm's value: the workload's text is
    at its own offset)."""
    out = subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout
    for l in out.splitlines():
        f = l.split()
        if len(f) == 3 and f[2] == func:
            return int(f[0], 16)
    sys.exit(f"bench: no {func} in {binary}")


def wait_int3(pid, binary, off, timeout=10.0):
    """Waits until the traced function's first byte holds a breakpoint
    (bpftrace says "Attaching" before it attaches)."""
    deadline = time.monotonic() + timeout
    real = os.path.realpath(binary)
    while time.monotonic() < deadline:
        for l in open(f"/proc/{pid}/maps"):
            f = l.split()
            if len(f) >= 6 and f[5] == real and "x" in f[1]:
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                at = lo + off - int(f[2], 16)
                if lo <= at < hi:
                    with open(f"/proc/{pid}/mem", "rb") as m:
                        m.seek(at)
                        if m.read(1) == b"\xcc":
                            return
        time.sleep(0.02)
    sys.exit(f"bench: no breakpoint at +{off:#x} after {timeout} s")


def run_once(binary, variant, func=FUNC):
    """ns per call the workload measured, the calls it made, the tracer's
    output. tachy says "Tracing" once attached; bpftrace says "Attaching"
    before it attaches, so a breakpoint at `func` is waited for."""
    wp = subprocess.Popen([binary, str(CALLS), str(WARMUP)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    line = wp.stdout.readline()
    if not line.startswith("ready "):
        wp.kill()
        sys.exit(f"bench: workload did not start: {line!r}")
    cmd, word = tracer(variant, binary, wp.pid, func)
    tp = lines = reader = None
    if cmd:
        tp, lines, reader = attach_tracer(cmd, word, 60, variant, wp)
        if variant.startswith("bpftrace"):
            wait_int3(wp.pid, binary, entry_address(binary, func))
    wp.stdin.write("g")
    wp.stdin.flush()
    out = wp.stdout.read()
    wp.wait()
    if tp:
        if variant.startswith("bpftrace"):
            tp.send_signal(signal.SIGINT)
        try:
            tp.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tp.kill()
            tp.wait()
        reader.join(5)
    m = re.search(r"calls (\d+) ns_per_call (\S+)", out)
    if not m:
        sys.exit(f"bench: no result from the workload: {out!r}")
    return float(m.group(2)), int(m.group(1)), "".join(lines or [])


def check(variant, calls, report):
    """Exits unless a tachy run counted every call, in its groups too.
    Returns the calls --by stack could not group (0 otherwise)."""
    if not variant.startswith("tachy"):
        return 0
    if f"count: {calls}" not in report:
        sys.exit(f"bench: {variant} did not count the {calls} calls:\n{report[-2000:]}")
    if variant == "tachy":
        return 0
    grouped = sum(int(x) for x in re.findall(r"^  (?:retval|stack) .*?\s+count\s+(\d+)\s",
                                             report, re.M))
    lost = re.search(r"^  not grouped: their records came.*?count\s+(\d+)", report, re.M)
    lost = int(lost.group(1)) if lost else 0
    if grouped + lost != calls:
        sys.exit(f"bench: {variant} grouped {grouped} and lost {lost} of {calls} calls:\n"
                 f"{report[-2000:]}")
    if variant == "tachy-retval" and len(re.findall(r"^  retval ", report, re.M)) != 4:
        sys.exit(f"bench: {variant} did not find the four return values:\n{report[-2000:]}")
    return lost


def main():
    require_root()
    if not shutil.which("bpftrace"):
        sys.exit("bench: bpftrace is not installed (make bench installs it)")
    if sys.argv[1:] == ["--inlined"]:
        return write_inlined(inlined_rows())
    binary = os.path.join(OUT, "retstack")
    subprocess.run(["gcc"] + FLAGS + ["-o", binary, os.path.join(WORKLOADS, "retstack.c")],
                   check=True)
    res = {v: [] for v in VARIANTS}
    lost = {v: [] for v in VARIANTS}
    for r in range(ROUNDS):
        for v in VARIANTS:
            ns, calls, report = run_once(binary, v)
            lost[v].append(check(v, calls, report))
            res[v].append(ns)
            print(f"round {r + 1}: {v:17} {ns:9.1f} ns/call", flush=True)
    med = medians(res)
    base = med["untraced"]
    lines = [
        SECTION, "",
        f"bench/deeper.py, {ROUNDS} rounds of {CALLS} calls per run of traced_ret "
        "(bench/workloads/retstack.c, C with frame pointers: returns timed by uretprobes), "
        f"variants interleaved; load average at the end: {load_average()}.", "",
        "| variant | median ns per call | over untraced | all rounds |", "|---|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {med[v]:.1f} | {med[v] - base:+.1f} | {rounds_cell(res[v])} |")
    lines.append("")
    for t, b in PAIRS:
        ratio = (med[t] - base) / (med[b] - base) if med[b] > base else float("nan")
        verdict = "met" if ratio <= 1.0 else "NOT met"
        lines.append(f"{t} against {b}: {ratio:.2f}x bpftrace's cost per call "
                     f"(goal <= 1.0x: {verdict}).")
    lines.append("Where --by stack is NOT met: each call sends a record with its stack "
                 "through the ring buffer (64 return addresses walked, or 12 KiB copied) and "
                 "tachy unwinds and groups it in user space, on the same CPUs; bpftrace keys "
                 "its map by a stack id the kernel keeps (bpf_get_stackid), only walking "
                 "frame pointers. Grouping by an in-kernel stack id where frame pointers "
                 "serve would meet it.")
    lines.append(f"Added by --by retval over plain tachy: {med['tachy-retval'] - med['tachy']:+.1f} "
                 "ns per call.")
    for v in ("tachy-stack-fp", "tachy-stack-copy"):
        lines.append(f"{v}: calls not grouped (records the ring buffer could not hold) per "
                     f"round: {', '.join(str(x) for x in lost[v])} of {CALLS + WARMUP}.")
    lines += [""] + inlined_rows()
    write_section(SECTION, "\n".join(lines).rstrip() + "\n")


INLINED_HEAD = "An inlined instance ("


def write_inlined(lines):
    """Puts the inlined rows in place of those of the section in RESULTS
    (its end), the rest of the section as it was."""
    text = "\n".join(lines).rstrip() + "\n"
    try:
        old = open(RESULTS).read()
    except OSError:
        old = ""
    start = old.find(SECTION)
    if start < 0:
        return write_section(SECTION, SECTION + "\n\n" + text)
    nxt = old.find("\n## ", start + len(SECTION))
    body = old[start:nxt + 1] if nxt >= 0 else old[start:]
    at = body.find(INLINED_HEAD)
    body = (body[:at] if at >= 0 else body).rstrip("\n") + "\n\n" + text
    print()
    print(text)
    with open(RESULTS, "w") as f:
        f.write(old[:start] + body + ("\n" + old[nxt + 1:] if nxt >= 0 else ""))


INLINED = ["untraced", "tachy-inlined", "untraced-out-of-line", "tachy-out-of-line",
           "bpftrace-out-of-line"]


def inlined_rows():
    """An inlined instance against an out-of-line copy of the same function
    (bench/workloads/inlined.c, built both ways): what timing each costs per
    call, bpftrace only where it can (it cannot time an inlined instance)."""
    src = os.path.join(WORKLOADS, "inlined.c")
    bins = {"inline": os.path.join(OUT, "inlined"), "ool": os.path.join(OUT, "inlined_ool")}
    subprocess.run(["gcc"] + FLAGS + ["-o", bins["inline"], src], check=True)
    subprocess.run(["gcc"] + FLAGS + ["-DOUT_OF_LINE", "-o", bins["ool"], src], check=True)
    res = {v: [] for v in INLINED}
    for r in range(ROUNDS):
        for v in INLINED:
            binary = bins["ool" if "out-of-line" in v else "inline"]
            ns, calls, report = run_once(binary, v, "work")
            if v.startswith("tachy") and f"count: {calls}" not in report \
                    and not re.search(rf"\s{calls}\s", report):
                sys.exit(f"bench: {v} did not count the {calls} calls:\n{report[-2000:]}")
            res[v].append(ns)
            print(f"round {r + 1}: {v:21} {ns:9.1f} ns/call", flush=True)
    med = medians(res)
    plan = subprocess.run([TACHY, "list", f"{bins['inline']}:work"], capture_output=True,
                          text=True).stdout
    price = re.search(r"price per call: (.*)", plan)
    inl = med["tachy-inlined"] - med["untraced"]
    ool = med["tachy-out-of-line"] - med["untraced-out-of-line"]
    bt = med["bpftrace-out-of-line"] - med["untraced-out-of-line"]
    lines = [INLINED_HEAD + "bench/workloads/inlined.c: `work` inlined into bench_call) "
             "against the same function called out of line through a pointer (-DOUT_OF_LINE); "
             "bpftrace cannot time the inlined instance:", "",
             "| variant | median ns per call | all rounds |", "|---|---|---|"]
    for v in INLINED:
        lines.append(f"| {v} | {med[v]:.1f} | {rounds_cell(res[v])} |")
    lines += ["", f"Timing the inlined instance costs {inl:.0f} ns per call; the out-of-line "
              f"copy {ool:.0f} ns with tachy and {bt:.0f} ns with bpftrace. tachy's plan for the "
              f"instance, as `tachy list` prices it: {price.group(1) if price else '?'}; "
              f"load average at the end: {load_average()}."]
    return lines


if __name__ == "__main__":
    main()
