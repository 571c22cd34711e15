#!/usr/bin/env python3
"""tachy soak and scale checks (run by `make soak`, as root; minutes long).

Builds bench/workloads/soak.c and runs four checks, each against the calls
the workload says it made ("calls N"):

  rate     `tachy latency -i 1 --json -p PID soak_fn` while the workload makes
           SOAK_RATE calls/s (default 150000) for SOAK_MINUTES (default 10):
           tachy's RSS sampled every second from /proc/PID/status (after
           minute 1 (after 10 s on runs of 1 minute or less,
           half-way on runs under 20 s) against the
           end), one report per second (counted, and the largest gap
           between two reports' times), the sum of the interval counts
  threads  10,000 threads, 100 alive at a time, each making 100 calls and
           exiting: the count, tachy's RSS before and after
  path     `tachy latency PATH:soak_fn` (every process) while 100 processes
           of the workload start, make 10,000 calls each, and exit (4 at a
           time): the count; then, after tachy has exited, the first byte of
           soak_fn in the memory of a process that was running all along
           and of one started afterwards (0xcc, int3, is a probe left; the
           same byte is checked to be 0xcc while tachy is attached), and
           /sys/kernel/tracing/uprobe_events
  follow   `tachy latency --follow soak_fn -- soak fork 1000 1000`: 1,000
           children (10 alive at a time) and the parent, 1,000 calls each

Prints the figures and writes them, as the section "Soak" at the end, into
bench/RESULTS.md (SOAK_RESULTS to write elsewhere). SOAK_ONLY=rate,follow runs
only the named checks.
"""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the helpers of `make bench`)

ROOT = run.ROOT
OUT = os.path.join(ROOT, "target", "soak")
TACHY = os.path.join(OUT, "tachy")
BIN = os.path.join(OUT, "soak")
RESULTS = os.environ.get("SOAK_RESULTS") or os.path.join(ROOT, "bench", "RESULTS.md")
MARKER = "## Soak"

MINUTES = float(os.environ.get("SOAK_MINUTES", "10"))
RATE = int(os.environ.get("SOAK_RATE", "150000"))
CHECKS = ["rate", "threads", "path", "follow"]
ONLY = [x for x in os.environ.get("SOAK_ONLY", "").split(",") if x] or CHECKS

lines = []
problems = []

NOTES = """Notes. RSS is VmRSS from /proc/PID/status, in kB, shown in MB to 0.1. The rate
check paces the workload at SOAK_RATE calls/s; under load from other programs on
the 2 shared cores it falls behind and catches up in bursts, so single
seconds can hold fewer than 100,000 calls while the average is above it. No
probe left: tachy attaches through perf_event_open and uprobe_multi links,
which never appear in uprobe_events (and tracefs is not mounted on this
machine), so the evidence is the first byte of soak_fn read from
/proc/PID/mem: 0xcc (int3) while tachy is attached, the original byte after
it exited, in a process that ran all along and in one started afterwards.
"""


def say(s=""):
    print(s, flush=True)
    lines.append(s)


def problem(s):
    problems.append(s)
    say("  PROBLEM: " + s)


def rss_kb(pid, field="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


def mb(kb):
    return "?" if kb is None else f"{kb / 1024:.1f} MB"


def soak_fn_off():
    for line in run.sh(["nm", "--defined-only", BIN]).splitlines():
        f = line.split()
        if len(f) == 3 and f[2] == "soak_fn":
            return run.vaddr_to_off(BIN, int(f[0], 16))
    sys.exit("soak: no soak_fn in " + BIN)


def build():
    os.makedirs(OUT, exist_ok=True)
    run.sh(["gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-fcf-protection=none",
            "-pthread", "-o", BIN, os.path.join(ROOT, "bench", "workloads", "soak.c")])
    # A private copy: a rebuild during the run cannot change the binary.
    tmp = TACHY + ".new"
    subprocess.run(["cp", os.path.join(ROOT, "target", "release", "tachy"), tmp], check=True)
    os.replace(tmp, TACHY)


def start_workload(args, wait=True):
    env = dict(os.environ)
    if not wait:
        env["FIXTURE_NO_WAIT"] = "1"
    p = subprocess.Popen([BIN] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    out = run.Reader(p.stdout)
    if not out.wait_for(lambda l: l.startswith("ready "), 10):
        p.kill()
        sys.exit("soak: the workload did not start")
    return p, out


def go(p):
    p.stdin.write(b"go\n")
    p.stdin.flush()


def start_tachy(args):
    """Starts tachy; returns (process, stdout, stderr) once it is attached."""
    tp, tout, terr = run.start_tracer([TACHY, "latency", "--json"] + args)
    if not terr.wait_for(run.attached_marker, run.ATTACH_TIMEOUT):
        run.stop_tracer(tp, 0)
        sys.exit("soak: tachy did not attach: " + terr.text().strip()[-300:])
    return tp, tout, terr


def reports(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def count_of(rep):
    return sum(f["count"] + f["unwound"] + f["overflow"] for f in rep["functions"])


def calls_of(reader, timeout):
    line = reader.wait_for(lambda l: l.startswith("calls "), timeout)
    return int(line.split()[1]) if line else None


def check_count(what, counted, made):
    ok = counted == made
    say(f"  {what}: tachy counted {counted}, the workload made {made}"
        + (": exact" if ok else f": DIFFERENT by {counted - made if made else '?'}"))
    if not ok:
        problem(f"{what}: tachy counted {counted} of {made} calls")


def check_rate():
    secs = MINUTES * 60
    say(f"1. rate: -i 1 --json -p PID, {RATE} calls/s for {secs:.0f} s")
    wp, wout = start_workload(["rate", str(secs), str(RATE)])
    tp, tout, terr = start_tachy(["-i", "1", "-p", str(wp.pid), "soak_fn"])
    t0 = time.monotonic()
    samples = []  # (seconds since go, RSS kB)
    go(wp)
    while wp.poll() is None:
        samples.append((time.monotonic() - t0, rss_kb(tp.pid)))
        time.sleep(1.0 - (time.monotonic() - t0) % 1.0)
    line = wout.wait_for(lambda l: l.startswith("calls "), 5)
    code, by_itself, ru = run.stop_tracer(tp, 5.0)
    made, took = (int(line.split()[1]), float(line.split()[3])) if line else (None, None)
    reps = reports(tout.text())
    counted = sum(count_of(r) for r in reps)
    if made is not None:
        say(f"  the workload made {made} calls in {took:.1f} s: {made / took:.0f} calls/s")
        if made / took < 100_000:
            problem(f"rate: the workload reached only {made / took:.0f} calls/s under tachy")
    check_count("rate: sum of the interval counts", counted, made)
    times = [r["time"] for r in reps]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # The last report is the partial one taken when the target exits.
    full = gaps[:-1] if gaps else []
    say(f"  reports: {len(reps)} over {took or 0:.1f} s of calls (plus the time before 'go'); "
        f"gaps between reports: min {min(full, default=0):.3f} s, max {max(full, default=0):.3f} s")
    late = [g for g in full if g > 1.5]
    if late or (took and len(reps) < int(took)):
        problem(f"rate: {len(late)} gaps over 1.5 s between reports, {len(reps)} reports "
                f"for {took:.1f} s")
    per = [count_of(r) for r in reps]
    busy = [c for c in per[1:-1] if c]
    if busy:
        low = [c for c in busy if c < 100_000]
        say(f"  calls per full report: min {min(busy)}, max {max(busy)}; {len(low)} of "
            f"{len(busy)} under 100000 (the workload is paced at {RATE}/s and runs bursts "
            "to catch up when it falls behind)")
    mark = 60.0 if secs > 60 else min(10.0, secs / 2)
    base = next((kb for t, kb in samples if t >= mark and kb), None)
    end = next((kb for t, kb in reversed(samples) if kb), None)
    peak = max((kb for _, kb in samples if kb), default=None)
    say(f"  tachy RSS: {mb(base)} at {mark:.0f} s, {mb(end)} at the end "
        f"({len(samples)} samples, peak {mb(peak)}, first {mb(samples[0][1] if samples else None)})")
    if base and end:
        growth = (end - base) / 1024
        say(f"  RSS change after {mark:.0f} s: {growth:+.2f} MB (target within +-1 MB)")
        if abs(growth) > 1.0:
            problem(f"rate: tachy's RSS changed by {growth:+.2f} MB after {mark:.0f} s")
    say(f"  tachy CPU: {ru.ru_utime + ru.ru_stime:.1f} s; exit {code}"
        + ("" if by_itself else " (did not end by itself after the target's exit)"))


def check_threads():
    total, batch, calls = 10_000, 100, 100
    say(f"2. threads: {total} threads, {batch} alive at a time, {calls} calls each")
    wp, wout = start_workload(["threads", str(total), str(batch), str(calls)])
    tp, tout, terr = start_tachy(["-p", str(wp.pid), "soak_fn"])
    before = rss_kb(tp.pid)
    t0 = time.monotonic()
    go(wp)
    made = calls_of(wout, 600)
    took = time.monotonic() - t0
    after = rss_kb(tp.pid)
    hwm = rss_kb(tp.pid, "VmHWM")
    go(wp)
    wp.wait()
    code, by_itself, _ = run.stop_tracer(tp, 5.0)
    counted = sum(count_of(r) for r in reports(tout.text()))
    say(f"  {total} threads in {took:.1f} s")
    check_count("threads", counted, made)
    say(f"  tachy RSS: {mb(before)} before, {mb(after)} after the threads exited "
        f"({(after - before) / 1024:+.2f} MB), peak {mb(hwm)}; exit {code}")


def first_byte(pid, off):
    return run.mem_bytes(pid, BIN, [off])[off]


def check_path():
    nproc, calls = 100, 10_000
    off = soak_fn_off()
    say(f"3. path: tachy latency {os.path.relpath(BIN, ROOT)}:soak_fn (every process), "
        f"{nproc} processes of {calls} calls, 4 at a time")
    hold, _ = start_workload(["hold"])
    orig = first_byte(hold.pid, off)
    tp, tout, terr = start_tachy([BIN + ":soak_fn"])
    missing = run.wait_int3(hold.pid, [(BIN, off)])
    say(f"  soak_fn's first byte in a running process: {orig:#04x} before tachy, "
        f"{first_byte(hold.pid, off):#04x} while attached")
    if missing:
        problem("path: no int3 at soak_fn in a running process while tachy is attached")
    rss0 = rss_kb(tp.pid)
    made, running = 0, []
    started = 0
    while started < nproc or running:
        while started < nproc and len(running) < 4:
            running.append(start_workload(["proc", str(calls)], wait=False))
            started += 1
        p, out = running.pop(0)
        n = calls_of(out, 60)
        p.wait()
        if n is None or p.returncode != 0:
            problem(f"path: a workload process failed (exit {p.returncode})")
        made += n or 0
    rss1 = rss_kb(tp.pid)
    tp.send_signal(signal.SIGINT)
    code, _, _ = run.stop_tracer(tp, 10.0)
    counted = sum(count_of(r) for r in reports(tout.text()))
    check_count("path", counted, made)
    say(f"  tachy RSS: {mb(rss0)} before the processes, {mb(rss1)} after; exit {code}")
    left = first_byte(hold.pid, off)
    late, _ = start_workload(["hold"])
    fresh = first_byte(late.pid, off)
    for p in (hold, late):
        go(p)
        go(p)
        p.wait()
    say(f"  after tachy exited: soak_fn's first byte {left:#04x} in the process running "
        f"all along, {fresh:#04x} in one started afterwards (0xcc would be a probe left)")
    if left == 0xCC or fresh == 0xCC or left != orig or fresh != orig:
        problem("path: a probe (int3) was left at soak_fn after tachy exited")
    # tachy attaches through perf_event_open and uprobe_multi links, which
    # never appear in uprobe_events: the int3 check above is the real one.
    for ev_path in ("/sys/kernel/tracing/uprobe_events",
                    "/sys/kernel/debug/tracing/uprobe_events"):
        try:
            with open(ev_path) as f:
                ev = [l for l in f if "soak" in l or "tachy" in l]
        except OSError as e:
            say(f"  {ev_path}: not readable ({e.strerror})")
            continue
        say(f"  {ev_path}: {len(ev)} entries for soak or tachy")
        if ev:
            problem("path: uprobe_events holds entries for soak or tachy")
        break


def check_follow():
    children, calls = 1000, 1000
    say(f"4. follow: tachy latency --follow soak_fn -- soak fork {children} {calls}")
    env = dict(os.environ, FIXTURE_NO_WAIT="1")
    t0 = time.monotonic()
    tp = subprocess.Popen([TACHY, "latency", "--json", "--follow", "soak_fn", "--", BIN, "fork",
                           str(children), str(calls)], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    tout, terr = run.Reader(tp.stdout), run.Reader(tp.stderr)
    samples = []  # tachy's RSS, kB, every 0.2 s until it exits
    while time.monotonic() - t0 < 600:
        kb = rss_kb(tp.pid)  # None once tachy has exited (a zombie has no VmRSS)
        if kb is None:
            break
        samples.append(kb)
        time.sleep(0.2)
    code, _, _ = run.stop_tracer(tp, 1.0)
    took = time.monotonic() - t0
    made = calls_of(terr, 1)
    counted = sum(count_of(r) for r in reports(tout.text()))
    say(f"  {children} children and the parent in {took:.1f} s; tachy exit {code}")
    if samples:
        say(f"  tachy RSS: {mb(samples[0])} first sample, {mb(samples[-1])} last, "
            f"max {mb(max(samples))} ({len(samples)} samples)")
    check_count("follow", counted, made)
    if code != 0:
        problem(f"follow: tachy exited {code}: {terr.text().strip()[-300:]}")


def write_results(stamp):
    try:
        with open(RESULTS) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    # Replaces the Soak section only: sections after it stay.
    rest = ""
    i = text.find("\n" + MARKER)
    if i >= 0:
        j = text.find("\n## ", i + 1)
        rest = "\n" + text[j + 1:] if j >= 0 else ""
        text = text[:i + 1]
    text = text.rstrip("\n") + "\n\n" if text else ""
    text += (f"{MARKER} (`make soak`, bench/soak.py)\n\n{stamp}. SOAK_MINUTES={MINUTES:g}.\n\n"
             "```\n" + "\n".join(lines) + "\n```\n\n" + NOTES + rest)
    with open(RESULTS, "w") as f:
        f.write(text)
    run.progress(f"saved {os.path.relpath(RESULTS, ROOT)}")


def main():
    if os.geteuid() != 0:
        sys.exit("soak: run as root (make soak)")
    unknown = set(ONLY) - set(CHECKS)
    if unknown:
        sys.exit(f"soak: unknown check(s) in SOAK_ONLY: {', '.join(sorted(unknown))}")
    build()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    say(f"tachy soak, {stamp}; {run.sh([TACHY, '--version']).strip()} (git {run.git_state()}); "
        f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
    for name in CHECKS:
        if name in ONLY:
            globals()["check_" + name]()
    say("")
    if problems:
        say("Problems found:")
        for p in problems:
            say("  - " + p)
    else:
        say("No problems found: every count exact, no interval lost, RSS flat, no probe left.")
    write_results(stamp)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
