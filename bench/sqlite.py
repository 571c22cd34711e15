#!/usr/bin/env python3
"""Nested at depth on real code: sqlite3_step in Debian's sqlite3 shell (run
by `make bench`, as root).

The workload is the sqlite3 shell reading a script from a pipe: 3,000
INSERTs in one transaction, then 4,000 SELECT count(*) scans of the table
(11,006 calls of sqlite3_step in libsqlite3, counted by bpftrace; every tachy
variant must count the same): ~0.4 s untraced, several of the budget's
estimates (the first is 0.1 s in), where 400 scans ran 56 ms, over before
the budget could act. The shell is started first,
the tracer attached to it (its "Tracing" or "Attaching" line seen), then
the script written; the time from the first byte written to the shell's
exit is the workload's wall time. Variants, interleaved in every round:

  untraced   the shell alone
  latency    tachy latency -p PID sqlite3_step
  bpftrace   uprobe + uretprobe on sqlite3_step with a histogram
  nested1    tachy nested --depth 1 -p PID sqlite3_step
  nested2    tachy nested --depth 2 -p PID sqlite3_step

Prints, per variant, the median wall time, its slowdown against untraced,
and sqlite3_step's average as tachy reads it; writes the section "sqlite3:
nested at depth on real code" of bench/RESULTS.md with the budgets and
whether they are met: nested --depth 2 slows the workload at most 1.5x;
nested's parent average within 20% of latency's; and, per nested variant,
what the default budget (10%) did: the sites it held back, attached later,
never attached or shed (a slowdown met by timing no site is said so).

The shell runs at real-time priority (chrt -f 10, BENCH_RT=0 to run it as
is): on a machine whose CPUs other work keeps busy, its wait for a CPU
would land in every duration in proportion to its length and in every
wall time, and swamp what the probes add (at load 10 on 2 cores the
untraced rounds spread 0.33-0.47 s and latency read sqlite3_step 8x its
average).

Environment: BENCH_ROUNDS (default 5), BENCH_SQLITE_ROWS (default 3000),
BENCH_SQLITE_SCANS (default 4000), BENCH_RT, BENCH_RESULTS, BENCH_TACHY.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from benchlib import (OUT, ROUNDS, TACHY, attach_tracer, load_average, medians,
                      require_root, rounds_cell, write_section)

SQLITE = "/usr/bin/sqlite3"
ROWS = int(os.environ.get("BENCH_SQLITE_ROWS", "3000"))
SCANS = int(os.environ.get("BENCH_SQLITE_SCANS", "4000"))
SECTION = "## sqlite3: nested at depth on real code"
VARIANTS = ["untraced", "latency", "bpftrace", "nested1", "nested2"]
FUNC = "sqlite3_step"
BT = ("uprobe:{lib}:{f} {{ @s[tid] = nsecs; @n = count(); }} "
      "uretprobe:{lib}:{f} /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}")
# The workload's real-time priority, where chrt is there and not turned off.
RT = (["chrt", "-f", "10"] if os.environ.get("BENCH_RT", "1") != "0" and shutil.which("chrt")
      else [])
# Where each tracer says its probes are in place.
ATTACHED = {"bpftrace": "Attaching"}


def script():
    """The SQL the shell reads."""
    lines = ["CREATE TABLE t(a INTEGER, b TEXT);", "BEGIN;"]
    lines += [f"INSERT INTO t VALUES({i}, 'row{i}');" for i in range(ROWS)]
    lines.append("COMMIT;")
    lines += [f"SELECT count(*) FROM t WHERE a % 7 = {i % 7};" for i in range(SCANS)]
    return "\n".join(lines) + "\n"


def libsqlite(pid):
    """The libsqlite3 file process `pid` maps."""
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        if len(parts) >= 6 and "libsqlite3.so" in parts[5]:
            return parts[5]
    sys.exit("bench: sqlite3 maps no libsqlite3")


def tracer(variant, pid):
    p = str(pid)
    if variant == "latency":
        return [TACHY, "latency", "--json", "-p", p, FUNC]
    if variant.startswith("nested"):
        return [TACHY, "nested", "--json", "--depth", variant[-1], "-p", p, FUNC]
    if variant == "bpftrace":
        return ["bpftrace", "-p", p, "-e", BT.format(lib=libsqlite(pid), f=FUNC)]
    return None


def run_once(variant, sql, db):
    """The workload's wall time (s) and the tracer's output."""
    if os.path.exists(db):
        os.unlink(db)
    wp = subprocess.Popen([*RT, SQLITE, db], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                          text=True)
    # The shell has mapped its libraries once it waits on the pipe.
    deadline = time.time() + 10
    while "libsqlite3" not in open(f"/proc/{wp.pid}/maps").read():
        if time.time() > deadline:
            wp.kill()
            sys.exit("bench: sqlite3 did not start")
        time.sleep(0.01)
    cmd = tracer(variant, wp.pid)
    tp, lines = None, []
    if cmd:
        tp, lines, reader = attach_tracer(cmd, ATTACHED.get(variant, "Tracing "), 120, variant,
                                          victim=wp)
        time.sleep(0.2)
    t0 = time.monotonic()
    wp.stdin.write(sql)
    wp.stdin.close()
    wp.wait()
    wall = time.monotonic() - t0
    if tp:
        try:
            tp.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tp.send_signal(signal.SIGINT)
            tp.wait()
        reader.join(5)
    return wall, "".join(lines)


def parent(report, variant):
    """sqlite3_step's call count and average (ns) in a tachy JSON report."""
    for l in report.splitlines():
        if l.startswith("{"):
            d = json.loads(l)
            f = d["functions"][0] if variant == "latency" else d["roots"][0]
            return f["count"], f["total_ns"] / max(f["count"], 1)
    sys.exit(f"bench: no JSON report from {variant}:\n{report[-600:]}")


def probe_time(report):
    """The probe time tachy subtracted from each call of the parent (ns), and
    the share of its raw reading that was, in a tachy JSON report of nested:
    what an average off latency's could not have subtracted is at most of
    that order."""
    for l in report.splitlines():
        if l.startswith("{"):
            r = json.loads(l)["roots"][0]
            sub = r.get("probe_ns_per_call", 0) + r.get("site_probe_ns_per_call", 0)
            avg = r["total_ns"] / max(r["count"], 1)
            return sub, sub / (avg + sub) if avg + sub > 0 else 0.0
    return None


def timed_sites(report):
    """What the budget did in a tachy JSON report of nested: the sites
    planned, held back at the start and attached later, never attached,
    shed, and the bare function's own estimate when over the budget."""
    for l in report.splitlines():
        if l.startswith("{"):
            d = json.loads(l)
            o = d.get("overhead")
            if not o:
                return None

            def count(n):
                return 1 + sum(count(c) for c in n["children"])
            late = o.get("late", [])
            return {
                "sites": count(d["roots"][0]) - 1,
                "late": sum(1 for x in late if x["from_s"] is not None),
                "never": sum(1 for x in late if x["from_s"] is None),
                "shed": len(o["shed"]),
                "bare": o.get("bare_over_pct"),
                "estimated": o.get("estimated_pct"),
            }
    return None


def main():
    require_root()
    if not shutil.which("bpftrace"):
        sys.exit("bench: bpftrace is not installed (apt-get install bpftrace)")
    sql = script()
    db = os.path.join(OUT, "sqlite-bench.db")
    res = {v: [] for v in VARIANTS}
    avgs = {v: [] for v in VARIANTS if v not in ("untraced", "bpftrace")}
    notes, counts, budgets, probes = {}, {}, {}, {}
    calls = None
    for _ in range(ROUNDS):
        for v in VARIANTS:
            wall, report = run_once(v, sql, db)
            res[v].append(wall)
            if v == "bpftrace":
                m = re.search(r"^@n: (\d+)", report, re.M)
                if not m:
                    sys.exit(f"bench: no count from bpftrace:\n{report[-600:]}")
                calls = int(m.group(1))
            if v in avgs:
                n, avg = parent(report, v)
                counts.setdefault(v, []).append(n)
                avgs[v].append(avg)
                if v.startswith("nested"):
                    budgets[v] = timed_sites(report)
                    probes.setdefault(v, []).append(probe_time(report))
                warn = [l.strip() for l in report.splitlines()
                        if l.startswith("tachy:")]
                if warn:
                    notes[v] = warn[0]
    for v, ns in counts.items():
        if any(n != calls for n in ns):
            sys.exit(f"bench: {v} counted {ns} calls of {FUNC}, bpftrace {calls}")
    med = medians(res)
    mavg = medians(avgs)
    slow = {v: med[v] / med["untraced"] for v in VARIANTS}
    lines = [
        SECTION,
        "",
        f"bench/sqlite.py, {ROUNDS} rounds of {SQLITE} reading {ROWS} INSERTs and {SCANS} "
        f"scans from a pipe ({calls} calls of {FUNC}), variants interleaved, the shell "
        f"{'at real-time priority (chrt -f 10)' if RT else 'at normal priority'}; load average "
        f"at the end: {load_average()}.",
        "",
        f"| variant | median wall s | slowdown | {FUNC} avg (us) | all rounds (ms) |",
        "|---|---|---|---|---|",
    ]
    for v in VARIANTS:
        a = f"{mavg[v] / 1000:.2f}" if v in mavg else "-"
        lines.append(f"| {v} | {med[v]:.3f} | {slow[v]:.1f}x | {a} | "
                     f"{rounds_cell([x * 1000 for x in res[v]])} |")
    lines.append("")
    for v, n in sorted(notes.items()):
        lines.append(f"{v} said: `{n}`")
    if notes:
        lines.append("")
    for v, b in sorted(budgets.items()):
        if not b:
            continue
        bare = (f"; {FUNC}'s own probes alone ~{b['bare']:.0f}% of its thread's time, over the "
                "budget" if b["bare"] is not None else "")
        lines.append(f"{v} (last round, --max-overhead 10): {b['sites']} call sites planned; "
                     f"{b['late'] + b['never']} held back at the start, {b['late']} attached later, "
                     f"{b['never']} never; {b['shed']} shed{bare}.")
    if budgets:
        lines.append("")
    lines.append("Budgets (default --max-overhead 10), one row each:")
    lines.append("")
    for v in ("nested1", "nested2"):
        depth = v[-1]
        off = mavg[v] / mavg["latency"] - 1
        ok = abs(off) <= 0.2
        row = (f"- nested --depth {depth}: parent avg {mavg[v] / 1000:.2f} us against latency's "
               f"{mavg['latency'] / 1000:.2f} us, {100 * off:+.0f}% (within 20%: "
               f"{'met' if ok else 'NOT met'})")
        if not ok:
            sub = sorted(p for p in probes.get(v, []) if p)
            if sub:
                ns, share = sub[len(sub) // 2]
                row += (f". Why: tachy subtracted {ns / 1000:.2f} us of probe time per call, "
                        f"{100 * share:.0f}% of the raw reading, at the calibrated price per hit; "
                        f"the {100 * off:+.0f}% is what the hits cost beyond that price here "
                        f"(cold caches, a loaded machine: load {load_average()}). "
                        "What would meet it: fewer single-stepped site ends per call (a kernel "
                        "that emulates the instruction after a call, or fewer sites: "
                        "--max-overhead lower)")
        lines.append(row + ".")
        ok = slow[v] <= 1.5
        b = budgets.get(v) or {}
        row = (f"- nested --depth {depth}: workload slowdown {slow[v]:.2f}x (<= 1.5x: "
               f"{'met' if ok else 'NOT met'})")
        if not ok:
            est = b.get("estimated")
            row += (f". Why: the budget estimated its probes at "
                    f"{'?' if est is None else f'{est:.0f}'}% of the traced threads' time, "
                    f"and {b.get('shed', 0)} sites were shed; the rest is what the estimate "
                    "does not see (attaching and detaching sites, hits dearer than their "
                    f"calibrated price on a machine at load {load_average()}). What would meet "
                    "it: a lower --max-overhead, or a kernel that emulates the instruction "
                    "after each call")
        lines.append(row + ".")
    lines.append(f"- latency {slow['latency']:.2f}x, bpftrace {slow['bpftrace']:.2f}x (no budget).")
    write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
