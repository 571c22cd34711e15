#!/usr/bin/env python3
"""Probe time: how close tachy's readings come to the untraced time.

Builds tests/fixtures/calls.c (spins written in assembly, each with an
untraced twin that the fixture times in every iteration right after the
traced call), traces each spin with every kind of entry and exit tachy
uses, corrected and --raw, rounds interleaved, and prints per case the
untraced p50, the corrected p50 and its error, the time subtracted, and
the error of a --raw run, then the shares of a
known 90/10 split in `tachy nested`. Finally it shows how far the
probes' own time drifts on this machine: the calibration, measured several
times a few seconds apart.

Run as root: `make bench` runs it after bench/run.py; alone:
`python3 bench/probe_time.py [ROUNDS]`. The calibration cache is pointed at
a temporary directory, so every run measures afresh.
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TACHY = os.path.join(ROOT, "target", "release", "tachy")
ITERATIONS = 2000


def say(s=""):
    print(s, flush=True)


def build(out):
    bins = {}
    for name, extra in [("calls", []), ("calls_unwind", ["-DWITH_UNWIND"])]:
        path = os.path.join(out, name)
        subprocess.run(
            ["cc", "-std=c11", "-O2", "-g", "-pthread", *extra,
             os.path.join(ROOT, "tests", "fixtures", "calls.c"), "-o", path],
            check=True)
        bins[name] = path
    return bins


def trace(binary, mode, func, spin_ns, raw, env):
    """One run: fixture started, tachy attached with -p, then the work.
    Returns (tachy's JSON report, the fixture's untraced lines)."""
    fx = subprocess.Popen([binary, str(ITERATIONS), str(spin_ns)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
    line = fx.stdout.readline()
    if not line.startswith("ready"):
        fx.kill()
        sys.exit(f"probe_time: fixture said {line!r}")
    cmd = [TACHY, mode, "--json", *(["--raw"] if raw else []),
           "-p", str(fx.pid), func]
    t = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    err = ""
    while True:
        ch = t.stderr.readline()
        err += ch
        if not ch or "Hit Ctrl-C" in ch:
            break
    fx.stdin.write("go\n")
    fx.stdin.flush()
    out = fx.stdout.read()
    fx.wait()
    t.send_signal(2)
    rep_text, rest = t.communicate(timeout=60)
    reps = [json.loads(l) for l in rep_text.splitlines() if l.startswith("{")]
    if len(reps) != 1:
        sys.exit(f"probe_time: {' '.join(cmd)}: no report\n{err}{rest}")
    untraced = {}
    for l in out.splitlines():
        m = re.match(r"untraced (\S+) ([0-9.]+)", l)
        if m:
            untraced[m.group(1)] = float(m.group(2))
    return reps[0], untraced


def p50(rep):
    f = rep["functions"][0]
    return f["percentiles_ns"]["p50"], f.get("probe_ns_per_call", 0)


def shares(rep):
    root = rep["roots"][0]
    total = root["total_ns"] or 1
    kids = {k["name"]: 100.0 * k["total_ns"] / total for k in root["children"]}
    return kids.get("spin_long", 0.0), kids.get("short_leaf", 0.0)


def main():
    if os.geteuid() != 0:
        sys.exit("probe_time: run as root (uprobes)")
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    out = tempfile.mkdtemp(prefix="tachy-probe-time-")
    cache = os.path.join(out, "cache")
    env = dict(os.environ, TACHY_CACHE_DIR=cache)
    try:
        bins = build(out)
        say("Probe time (tests/fixtures/calls.c; p50 of 2000 calls; untraced ="
            " the untraced twin at the same moment; median of rounds)")
        say("  budget: within 20% of the untraced time (50 ns: within 100 ns)")
        cases = [
            ("push + uretprobe", "calls", "spin_push"),
            ("push + ret probes", "calls_unwind", "spin_push"),
            ("endbr64 (stepped) + uretprobe", "calls", "spin_endbr"),
            ("endbr64 (stepped) + ret probes", "calls_unwind", "spin_endbr"),
        ]
        say(f"  {'entry + exit':32} {'spin':>7} {'untraced':>9} {'corrected':>9} "
            f"{'error':>8} {'subtracted':>10} {'raw error':>9}  budget")
        for label, fx, func in cases:
            for ns in [50, 1000, 20000]:
                rows = []
                for _ in range(rounds):
                    shutil.rmtree(cache, ignore_errors=True)
                    rc, uc = trace(bins[fx], "latency", func, ns, False, env)
                    rr, ur = trace(bins[fx], "latency", func, ns, True, env)
                    got, sub = p50(rc)
                    raw, _ = p50(rr)
                    rows.append((uc[func], got, raw - ur[func], sub))
                u = statistics.median(r[0] for r in rows)
                got = statistics.median(r[1] for r in rows)
                raw = statistics.median(r[2] for r in rows)
                sub = statistics.median(r[3] for r in rows)
                err = got - u
                ok = abs(err) <= (100 if ns <= 50 else 0.2 * u)
                say(f"  {label:32} {ns:>5}ns {u:>8.0f}n {got:>8.0f}n {err:>+7.0f}n "
                    f"{sub:>9.0f}n {raw:>+8.0f}n  {'met' if ok else 'NOT met'}")
        say("")
        say("  tachy nested split (spin_long 90%, short_leaf x8 10%): shares, corrected / raw")
        for fx in ["calls", "calls_unwind"]:
            for _ in range(rounds):
                shutil.rmtree(cache, ignore_errors=True)
                rc, u = trace(bins[fx], "nested", "split", 1000, False, env)
                rr, _ = trace(bins[fx], "nested", "split", 1000, True, env)
                want_l = 100 * u["spin_long"] / u["split"]
                want_s = 100 * 8 * u["short_leaf"] / u["split"]
                cl, cs = shares(rc)
                rl, rs = shares(rr)
                ok = abs(cl - want_l) <= 5 and abs(cs - want_s) <= 5
                say(f"  {fx:13} untraced {want_l:4.1f}/{want_s:4.1f}%  corrected "
                    f"{cl:5.1f}/{cs:4.1f}%  raw {rl:5.1f}/{rs:4.1f}%  "
                    f"budget 5 points {'met' if ok else 'NOT met'}")
        say("")
        say("  drift of the probes' own time (calibration, us inside a call), "
            "measured 5 times, 2 s apart:")
        for i in range(5):
            shutil.rmtree(cache, ignore_errors=True)
            p = subprocess.run(
                [TACHY, "latency", "--verbose", "spin_push", "--",
                 bins["calls"], "1", "50"],
                input="go\n", capture_output=True, text=True, env=env)
            m = re.search(r"push\+ret ([0-9.]+)/.*?push\+uretprobe ([0-9.]+)/"
                          r".*?emulated end ([0-9.]+)/", p.stderr)
            if m:
                say(f"    push+ret {m.group(1)}  push+uretprobe {m.group(2)}  "
                    f"site, emulated end {m.group(3)}")
            time.sleep(2)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
