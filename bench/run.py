#!/usr/bin/env python3
"""tachy overhead benchmark (run by `make bench`, as root).

Builds small workloads (bench/workloads), checks their machine code with
objdump, then runs every workload under every variant, interleaved in rounds
(round 1: A B C D E for every workload, round 2: A B C D E, ...), and prints
medians of the ns/call each workload measured itself:

  untraced    the workload alone
  floor       an empty BPF program on exactly tachy's probe sites, attached
              with perf uprobes by bench/workloads/floor.c (Debian's bpftrace
              0.17 refuses probes inside functions and uretprobes off a
              function's start, see below)
  floor-bt    the same with bpftrace `uprobe:BIN:0xADDR {}`, where bpftrace
              can express every site (all at function starts)
  floor-uret  the floor of tachy --uretprobe's sites, where they differ
  tachy       `tachy latency -p PID FUNC` (or `tachy nested` for nested)
  tachy-uret  `tachy latency --uretprobe -p PID FUNC`
  bpftrace    bpftrace's usual uprobe + uretprobe latency one-liner

Every traced run waits until the tracer says it is attached and then until
every expected probe site holds an int3 (0xcc) in the target's memory, and
checks the counts the tracer reports. Then it times tachy's and bpftrace's
start-up and peak RSS on a function of libLLVM.

Environment: BENCH_ROUNDS (default 5), BENCH_SCALE (multiplies N, default 1),
BENCH_RESULTS (where to write the results, default bench/RESULTS.md),
BENCH_ONLY (comma-separated workload names, e.g. "push,cppquiet": run only
those, and skip the start-up measurement unless "startup" is named too;
BENCH_ONLY=startup runs the start-up alone), BENCH_STARTUP_ROUNDS (default 5).

The run uses a private copy of target/release/tachy (target/bench/tachy), so
a rebuild during the run cannot mix two versions into one table.
"""

import glob
import hashlib
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "bench", "workloads")
OUT = os.path.join(ROOT, "target", "bench")
TACHY = os.path.join(ROOT, "target", "release", "tachy")
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(ROOT, "bench", "RESULTS.md")
BPFTRACE = "bpftrace"

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
WARMUP = 1000
UNTRACED_FACTOR = 10  # untraced runs are short: time more calls
ATTACH_TIMEOUT = 60.0

COMMON = ["-O2", "-g", "-fno-ipa-ra", "-fno-stack-protector"]

# name, label, source, compiler, flags, symbol (raw), tachy spec, N, mode
WORKLOADS = [
    dict(name="push", label="(a) push first", src="push.c", cc="gcc",
         flags=["-fno-omit-frame-pointer", "-fcf-protection=none"],
         sym="traced_push", spec="traced_push", n=200_000, mode="latency"),
    dict(name="endbr", label="(b) endbr64; push", src="push.c", cc="gcc",
         flags=["-fno-omit-frame-pointer", "-fcf-protection"],
         sym="traced_push", spec="traced_push", n=200_000, mode="latency"),
    dict(name="sub", label="(c) sub $N,%rsp; call", src="sub.c", cc="gcc",
         flags=["-fomit-frame-pointer", "-fcf-protection=none"],
         sym="traced_sub", spec="traced_sub", n=100_000, mode="latency"),
    dict(name="leaf", label="(d) leaf lea; ret", src="leaf.c", cc="gcc",
         flags=["-fcf-protection=none"],
         sym="traced_leaf", spec="traced_leaf", n=100_000, mode="latency"),
    dict(name="throw", label="(e) C++ exception passes", src="throw.cpp", cc="g++",
         flags=["-fcf-protection=none"],
         sym="_ZN5bench12pass_throughEi", spec="bench::pass_through", n=50_000,
         mode="latency", throws=True),
    dict(name="nested", label="(f) nested, 8 call sites", src="nested.c", cc="gcc",
         flags=["-fcf-protection=none"],
         sym="traced_nested", spec="traced_nested", n=20_000, mode="nested"),
    # Not in the brief's list: a C++ exception unwinding through a function of
    # a C library (a callback throws), where tachy's default may pick a
    # uretprobe because the library itself has no exception code.
    dict(name="cblib", label="(g) C++ exc. via C library", src="cbmain.cpp", cc="g++",
         flags=["-fcf-protection=none"], lib="cblib.c",
         sym="cb_apply", spec=None, n=50_000, mode="latency", throws=True),
    # C++ in an object with exception tables, push first, returning normally:
    # the helper provably cannot throw (h), so tachy may use a uretprobe; or
    # it may throw (i, never does here), so tachy keeps its ret probes.
    dict(name="cppquiet", label="(h) C++ helper can't throw", src="cppexits.cpp", cc="g++",
         flags=["-fno-omit-frame-pointer", "-fcf-protection=none"],
         sym="_ZN5bench6tracedEi", spec="bench::traced", n=200_000, mode="latency",
         budget=1.1),
    dict(name="cppthrow", label="(i) C++ helper may throw", src="cppexits.cpp", cc="g++",
         flags=["-fno-omit-frame-pointer", "-fcf-protection=none", "-DHELPER_MAY_THROW"],
         sym="_ZN5bench6tracedEi", spec="bench::traced", n=200_000, mode="latency"),
    # Go: each call runs on a new goroutine whose stack grows (is copied)
    # while the traced function is open; the runtime walks its frames. A
    # uretprobe can kill it (fragile), as an exception can the C++ ones.
    dict(name="go", label="(j) Go, stack grows", src="gogrow.go", cc="go", flags=[],
         sym="main.traced", spec="main.traced", n=20_000, mode="latency", fragile=True),
]

ONLY = [x for x in os.environ.get("BENCH_ONLY", "").split(",") if x]
# "startup" in BENCH_ONLY runs the start-up measurement (alone, or with the
# workloads named with it).
STARTUP_ONLY = "startup" in ONLY
ONLY = [x for x in ONLY if x != "startup"]
STARTUP_ROUNDS = int(os.environ.get("BENCH_STARTUP_ROUNDS", "5"))
if ONLY or STARTUP_ONLY:
    unknown = set(ONLY) - {w["name"] for w in WORKLOADS}
    if unknown:
        sys.exit(f"bench: unknown workload(s) in BENCH_ONLY: {', '.join(sorted(unknown))}")
    WORKLOADS = [w for w in WORKLOADS if w["name"] in ONLY]

FLOOR = os.path.join(OUT, "floor")
BT_VERSION_NOTE = "(it refuses a site inside a function and a uretprobe off a function's start)"

out_lines = []


def say(s=""):
    print(s, flush=True)
    out_lines.append(s)


def progress(s):
    print(s, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


# ---------------------------------------------------------------- machine

def machine():
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "kernel": platform.release(),
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "bpftrace": sh([BPFTRACE, "--version"]).strip(),
        "tachy": sh([TACHY, "--version"]).strip(),
        "gcc": sh(["gcc", "-dumpfullversion"]).strip(),
        "git": git_state(),
    }


def git_state():
    try:
        head = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip()
        dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "build.rs",
                    "Cargo.toml"]).strip()
        return head + (" (src has uncommitted changes)" if dirty else "")
    except Exception:
        return "?"


# ---------------------------------------------------------------- build and check

def function_insns(binary, sym):
    """(address, text) of a function's instructions, padding after its
    last ret dropped."""
    dump = sh(["objdump", "-d", "--no-show-raw-insn", "-M", "att", binary])
    insns, inside = [], False
    for line in dump.splitlines():
        if re.match(r"^[0-9a-f]+ <%s>:$" % re.escape(sym), line):
            inside = True
            continue
        if inside:
            if not line.strip():
                break
            m = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
            if m:
                insns.append((int(m.group(1), 16), re.sub(r"\s+", " ", m.group(2).strip())))
    last_ret = max((i for i, (_, t) in enumerate(insns) if t.startswith("ret")), default=None)
    tail = insns[last_ret + 1:] if last_ret is not None else []
    if tail and all(re.match(r"^(\S+ )*(nop|xchg %ax,%ax|int3)", t) for _, t in tail):
        insns = insns[: last_ret + 1]
    return insns


def check_shape(w, insns):
    """Whether the function's code is what the workload is meant to test."""
    t = [x[1] for x in insns]
    name = w["name"]
    if name == "push":
        return t[0].startswith("push ")
    if name == "endbr":
        return t[0] == "endbr64" and t[1].startswith("push ")
    if name == "sub":
        return re.match(r"^sub \$0x[0-9a-f]+,%rsp$", t[0]) is not None and any(
            x.startswith("call") for x in t)
    if name == "leaf":
        return len(t) == 2 and t[0].startswith("lea ") and t[1].startswith("ret")
    if name == "throw":
        return any(x.startswith("call") and "thrower" in x for x in t)
    if name == "nested":
        return sum(1 for x in t if x.startswith("call")) == 8
    if name == "cblib":
        return any(x.startswith("call *") for x in t)
    if name == "go":
        return any(x.startswith("call") and "morestack" in x for x in t) and any(
            x.startswith("call") and "main.deep" in x for x in t)
    if name in ("cppquiet", "cppthrow"):
        return t[0].startswith("push ") and any(
            x.startswith("call") and "helper" in x for x in t)
    return False


def build():
    os.makedirs(OUT, exist_ok=True)
    for w in WORKLOADS:
        w["bin"] = os.path.join(OUT, w["name"])
        link = []
        w["obj"] = w["bin"]
        if w.get("lib"):
            w["obj"] = os.path.join(OUT, "lib" + w["name"] + ".so")
            subprocess.run(["gcc"] + COMMON + w["flags"] + ["-fPIC", "-shared", "-o", w["obj"],
                                                             os.path.join(SRC, w["lib"])],
                           check=True)
            link = [w["obj"], "-Wl,-rpath," + OUT]
            w["spec"] = f"{w['obj']}:{w['sym']}"
        if w["cc"] == "go":
            env = dict(os.environ, GOCACHE=os.path.join(OUT, ".gocache"), GO111MODULE="off",
                       GOPATH=os.path.join(OUT, ".gopath"))
            subprocess.run(["go", "build", "-o", w["bin"], os.path.join(SRC, w["src"])],
                           check=True, env=env)
        else:
            subprocess.run([w["cc"]] + COMMON + w["flags"] + ["-I", SRC, "-o", w["bin"],
                                                              os.path.join(SRC, w["src"])]
                           + link, check=True)
        w["insns"] = function_insns(w["obj"], w["sym"])
        if not w["insns"]:
            sys.exit(f"bench: {w['sym']} not found in {w['obj']}")
        if not check_shape(w, w["insns"]):
            sys.exit(f"bench: {w['obj']}: {w['sym']} does not have the expected code:\n"
                     + "\n".join(t for _, t in w["insns"]))
    subprocess.run(["gcc", "-O2", "-Wall", "-o", FLOOR, os.path.join(SRC, "floor.c")],
                   check=True)
    host = os.path.join(OUT, "llvmhost")
    subprocess.run(["gcc", "-O2", "-o", host, os.path.join(SRC, "llvmhost.c"), "-ldl"],
                   check=True)
    return host


# ---------------------------------------------------------------- probes

PROBE_RE = re.compile(r"^\s+(?P<kind>\S.*?)\s+(?P<path>/\S+) \+0x(?P<off>[0-9a-f]+) "
                      r"\((?P<vaddr>0x[0-9a-f]+)\)\s*$")


def dry_run(args):
    r = subprocess.run([TACHY] + args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    probes = []
    for line in r.stderr.splitlines():
        m = PROBE_RE.match(line)
        if m:
            probes.append(dict(kind=m.group("kind"), path=m.group("path"),
                               off=int(m.group("off"), 16), vaddr=int(m.group("vaddr"), 16)))
    return probes, r.stderr


def exit_plan(dry_run_text):
    """How tachy times the traced function's return, and why, as --dry-run
    says it."""
    for line in dry_run_text.splitlines():
        if line.startswith("  [0] ") and "; return: " in line:
            return line.split("; return: ", 1)[1]
    return "?"


def floor_program(probes):
    """bpftrace's floor program (it accepts only function starts)."""
    seen, parts = set(), []
    for p in probes:
        typ = "uretprobe" if p["kind"] == "uretprobe" else "uprobe"
        key = (typ, p["path"], p["vaddr"])
        if key in seen:
            continue
        seen.add(key)
        parts.append(f"{typ}:{p['path']}:{p['vaddr']:#x} {{}}")
    return " ".join(parts)


def floor_args(probes):
    """bench/floor.c's arguments: PATH:OFFSET[:ret], one per distinct probe."""
    seen, args = set(), []
    for p in probes:
        a = f"{p['path']}:{p['off']:#x}" + (":ret" if p["kind"] == "uretprobe" else "")
        if a not in seen:
            seen.add(a)
            args.append(a)
    return args


def function_starts(binary):
    starts = set()
    for l in sh(["nm", "--defined-only", binary]).splitlines():
        f = l.split()
        if len(f) == 3 and f[1] in "tTwW":
            starts.add(int(f[0], 16))
    return starts


def sites_of(probes):
    return sorted({(p["path"], p["off"]) for p in probes})


def mem_bytes(pid, path, offs):
    """The first byte at each file offset of PATH in the process, or None."""
    maps = []
    real = os.path.realpath(path)
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fl = line.split(None, 5)
            if len(fl) == 6 and fl[5].strip() in (path, real):
                lo, hi = (int(x, 16) for x in fl[0].split("-"))
                maps.append((lo, hi, int(fl[2], 16)))
    res = {}
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as m:
        for off in offs:
            res[off] = None
            for lo, hi, foff in maps:
                if foff <= off < foff + (hi - lo):
                    m.seek(lo + off - foff)
                    res[off] = m.read(1)[0]
                    break
    return res


def wait_int3(pid, sites, timeout=5.0):
    """Waits until every site holds 0xcc; returns the sites that do not."""
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        by_path = {}
        for path, off in sites:
            by_path.setdefault(path, []).append(off)
        try:
            for path, offs in by_path.items():
                got = mem_bytes(pid, path, offs)
                missing += [(path, o) for o in offs if got[o] != 0xCC]
        except (FileNotFoundError, ProcessLookupError):
            return sites
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.02)


# ---------------------------------------------------------------- processes

class Reader:
    """Collects a pipe's lines in a thread; can wait for a marker."""

    def __init__(self, pipe):
        self.lines, self.cv = [], threading.Condition()
        self.closed = False
        self.t = threading.Thread(target=self._run, args=(pipe,), daemon=True)
        self.t.start()

    def _run(self, pipe):
        for raw in iter(pipe.readline, b""):
            with self.cv:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.closed = True
            self.cv.notify_all()

    def wait_for(self, pred, timeout):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for l in self.lines:
                    if pred(l):
                        return l
                left = deadline - time.monotonic()
                if self.closed or left <= 0:
                    return None
                self.cv.wait(left)

    def text(self):
        self.t.join(5)
        with self.cv:
            return "\n".join(self.lines)


def start_tracer(cmd):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    return p, Reader(p.stdout), Reader(p.stderr)


def attached_marker(line):
    return line.startswith("Tracing ") or line.startswith("Attaching ")


def stop_tracer(p, grace):
    """Lets the tracer end by itself for `grace` seconds, then SIGINT.
    Returns (exit status, whether it ended by itself, rusage)."""
    deadline = time.monotonic() + grace
    by_itself = True
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            if by_itself:
                by_itself = False
                p.send_signal(signal.SIGINT)
                deadline = time.monotonic() + 20
            else:
                p.kill()
                deadline = time.monotonic() + 1e9
        time.sleep(0.02)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, by_itself, ru


def sig_name(code):
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


# ---------------------------------------------------------------- one run

def tracer_cmd(w, variant, pid):
    if variant == "floor":
        return [FLOOR, str(pid)] + floor_args(w["probes"])
    if variant == "floor-uret":
        return [FLOOR, str(pid)] + floor_args(w["uret_probes"])
    if variant == "floor-bt":
        return [BPFTRACE, "--unsafe", "-p", str(pid), "-e", w["floor_prog"]]
    if variant == "bpftrace":
        b, s = w["obj"], w["sym"]
        prog = (f"uprobe:{b}:{s} {{ @s[tid] = nsecs; }} "
                f"uretprobe:{b}:{s} /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}")
        return [BPFTRACE, "-p", str(pid), "-e", prog]
    if variant == "tachy":
        return [TACHY, w["mode"], "-p", str(pid), w["spec"]]
    if variant == "tachy-uret":
        return [TACHY, "latency", "--uretprobe", "-p", str(pid), w["spec"]]
    raise ValueError(variant)


def expected_sites(w, variant):
    if variant in ("floor", "floor-bt"):
        return sites_of(w["probes"])
    if variant == "floor-uret":
        return sites_of(w["uret_probes"])
    if variant == "tachy":
        return sites_of(w["probes"])
    if variant == "tachy-uret":
        return sites_of(w["uret_probes"])
    if variant == "bpftrace":
        return [(w["obj"], w["entry_off"])]
    return []


def run_once(w, variant):
    n = w["n"] * (UNTRACED_FACTOR if variant == "untraced" else 1)
    n = max(1000, int(n * SCALE))
    res = dict(variant=variant, ns=None, died=None, note="", counts=None)
    wp = subprocess.Popen([w["bin"], str(n), str(WARMUP)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wout, werr = Reader(wp.stdout), Reader(wp.stderr)
    if not wout.wait_for(lambda l: l.startswith("ready "), 10):
        wp.kill()
        wp.wait()
        res["note"] = "workload did not start"
        return res
    tp = None
    try:
        if variant != "untraced":
            tp, tout, terr = start_tracer(tracer_cmd(w, variant, wp.pid))
            t0 = time.monotonic()
            line = tout.wait_for(attached_marker, ATTACH_TIMEOUT)
            if line is None:
                code, _, _ = stop_tracer(tp, 0)
                res["note"] = (f"tracer did not attach ({sig_name(code)}): "
                               + (terr.text().strip().splitlines() or [""])[-1])
                res["refused"] = True
                return res
            missing = wait_int3(wp.pid, expected_sites(w, variant))
            res["attach_s"] = time.monotonic() - t0
            if missing:
                res["note"] += ("no int3 at " + ", ".join(f"+{o:#x}" for _, o in missing)
                                + " after the attach message; ")
        wp.stdin.write(b"g")
        wp.stdin.flush()
        line = wout.wait_for(lambda l: l.startswith("calls "), 600)
        wp.wait()
        if line:
            f = line.split()
            res["calls"], res["ns"] = int(f[1]), float(f[3])
        if wp.returncode != 0:
            err = werr.text().strip().splitlines()
            why = [l for l in err if "terminate" in l or "fatal error" in l] or err[-1:]
            res["died"] = sig_name(wp.returncode) + (f" ({why[0].strip()})" if why else "")
        if tp is not None:
            code, by_itself, _ = stop_tracer(tp, 3.0 if variant.startswith("tachy") else 0.2)
            text, etext = tout.text(), terr.text()
            res["tracer_exit"] = code
            res["tracer_by_itself"] = by_itself
            res["tracer_out"] = text
            res["tracer_err"] = etext
            res["counts"] = parse_counts(w, variant, text)
            if variant.startswith("tachy") and code not in (0,):
                res["note"] += f"tachy {sig_name(code)}: {etext.strip()[-200:]}; "
            if variant.startswith("tachy") and not by_itself:
                res["note"] += "tachy did not end by itself within 3 s of the target's exit; "
    finally:
        if wp.poll() is None:
            wp.kill()
            wp.wait()
        if tp is not None and tp.poll() is None:
            tp.kill()
    return res


def parse_counts(w, variant, text):
    if variant.startswith("floor"):
        return None
    if variant == "bpftrace":
        total = 0
        for l in text.splitlines():
            m = re.match(r"^[\[(].*?[\])]\s+(\d+) \|", l)
            if m:
                total += int(m.group(1))
        return dict(count=total)
    if w["mode"] == "nested":
        m = re.search(r"^(\S.*?)  calls (\d+)", text, re.M)
        sites = [float(x) for x in re.findall(r"\s(\d+\.\d\d) per call", text)]
        ex = re.search(r"left by exception: (\d+)", text)
        return dict(count=int(m.group(2)) if m else None, sites=sites,
                    unwound=int(ex.group(1)) if ex else 0)
    m = re.search(r"count: (\d+)", text)
    u = re.search(r"left by (?:exception or unwind|panic): (\d+)", text)
    return dict(count=int(m.group(1)) if m else None, unwound=int(u.group(1)) if u else None)


def check_counts(w, r):
    """Problems with what a tracer counted, as text."""
    c, calls = r.get("counts"), r.get("calls")
    if not c or calls is None or r["died"]:
        return []
    probs = []
    if r["variant"] == "bpftrace":
        if c["count"] != calls:
            probs.append(f"bpftrace's histogram holds {c['count']} calls, expected {calls}")
        return probs
    if w.get("throws"):
        # Every call leaves by exception: nothing to time, all unwound.
        if c.get("count") != 0 or c.get("unwound") not in (calls, calls - 1):
            probs.append(f"count {c.get('count')}, left by exception {c.get('unwound')}; "
                         f"expected count 0 and {calls} (or {calls - 1}) left by exception")
        return probs
    if c.get("count") != calls:
        probs.append(f"count {c.get('count')}, expected {calls}")
    if c.get("unwound"):
        probs.append(f"{c['unwound']} left by exception or unwind, expected 0")
    if w["mode"] == "nested" and r["variant"] == "tachy":
        if len(c["sites"]) != 8 or any(abs(s - 1.0) > 0.005 for s in c["sites"]):
            probs.append(f"call sites per call {c['sites']}, expected eight 1.00")
    return probs


# ---------------------------------------------------------------- start-up

def llvm_function():
    """The newest libLLVM (by its soname) and the entry points of
    llvm::APInt::udiv in it: [(demangled, mangled, vaddr)]."""
    libs = sorted(p for p in glob.glob("/usr/lib/llvm-*/lib/libLLVM*.so*")
                  if os.path.isfile(p) and not p.endswith(".a"))
    if not libs:
        sys.exit("bench: no libLLVM under /usr/lib/llvm-*/lib (install clang)")
    # The newest LLVM, named by its soname (e.g. libLLVM-14.so.1).
    newest = max(int(re.search(r"llvm-(\d+)", p).group(1)) for p in libs)
    libs = [p for p in libs if f"/llvm-{newest}/" in p]
    lib = libs[0]
    m = re.search(r"\(SONAME\)\s+Library soname: \[(.*?)\]", sh(["readelf", "-dW", lib]))
    for p in libs:
        if m and os.path.basename(p) == m.group(1):
            lib = p
    demangled = sh(["nm", "-D", "--defined-only", "-C", lib]).splitlines()
    raw = sh(["nm", "-D", "--defined-only", lib]).splitlines()
    by_addr = {}
    for l in raw:
        f = l.split(None, 2)
        if len(f) == 3 and f[1] == "T":
            by_addr.setdefault(f[0], []).append(f[2].split("@")[0])
    funcs = []
    for l in demangled:
        f = l.split(None, 2)
        if len(f) == 3 and f[1] == "T" and f[2].startswith(STARTUP_PATTERN + "("):
            funcs.append((f[2].split("@")[0], by_addr[f[0]][0], int(f[0], 16)))
    if not funcs:
        sys.exit(f"bench: no {STARTUP_PATTERN} in {lib}")
    return lib, funcs


# The case: two overloads in a 110 MB library of 44k dynamic symbols.
STARTUP_PATTERN = "llvm::APInt::udiv"
# Budgets: at most this fraction of bpftrace's start-up, this many seconds,
# this much peak RSS.
STARTUP_RATIO, STARTUP_SECONDS, STARTUP_RSS_MB = 0.25, 0.080, 30.0


def startup(host, rounds):
    lib, funcs = llvm_function()
    size = os.path.getsize(os.path.realpath(lib))
    mangled = [m for _, m, _ in funcs]
    say(f"Start-up on libLLVM: {lib} -> {os.path.realpath(lib)} ({size / 1e6:.0f} MB), "
        f"{STARTUP_PATTERN}: {', '.join(d for d, _, _ in funcs)} (mangled {', '.join(mangled)}); "
        f"-p target: bench/workloads/llvmhost.c, which dlopens the library and waits")
    hp = subprocess.Popen([host, lib], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    hr = Reader(hp.stdout)
    if not hr.wait_for(lambda l: l.startswith("ready "), 30):
        hp.kill()
        sys.exit("bench: llvmhost did not start")
    pid = hp.pid
    # bpftrace names both overloads by their common mangled prefix.
    prefix = os.path.commonprefix(mangled)
    bt_prog = (f"uprobe:{lib}:{prefix}* {{ @s[tid] = nsecs; }} "
               f"uretprobe:{lib}:{prefix}* /@s[tid]/ "
               f"{{ @h[probe] = hist(nsecs - @s[tid]); delete(@s[tid]); }}")
    cmds = {
        ("path", "tachy"): [TACHY, "latency", f"{lib}:{STARTUP_PATTERN}"],
        ("path", "bpftrace"): [BPFTRACE, "-e", bt_prog],
        ("-p", "tachy"): [TACHY, "latency", "-p", str(pid), f"{lib}:{STARTUP_PATTERN}"],
        ("-p", "bpftrace"): [BPFTRACE, "-p", str(pid), "-e", bt_prog],
    }
    for (target, k), cmd in cmds.items():
        shown = [f"'{c}'" if c == bt_prog else c for c in cmd]
        say(f"  {target:<4} {k:<8}: " + " ".join(shown))
    listing = subprocess.run([TACHY, "list", f"{lib}:{STARTUP_PATTERN}"],
                             capture_output=True, text=True).stdout.strip().splitlines()
    for l in listing[1:]:
        say("    tachy list: " + l.strip())
    verbose = subprocess.run([TACHY, "latency", "-v", "--dry-run", f"{lib}:{STARTUP_PATTERN}"],
                             capture_output=True, text=True).stderr.strip().splitlines()
    entries = [vaddr_to_off(lib, v) for _, _, v in funcs]
    data = {k: [] for k in cmds}
    phases = {t: [] for t in ("path", "-p")}
    problems = []
    try:
        for r in range(rounds):
            for (target, k), cmd in cmds.items():
                if k == "tachy":
                    cmd = cmd[:2] + ["-v"] + cmd[2:]
                t0 = time.monotonic()
                tp, tout, terr = start_tracer(cmd)
                line = tout.wait_for(attached_marker, 120)
                t_msg = time.monotonic() - t0
                # A path target places its probes in every process that
                # maps the library, the -p target among them.
                missing = wait_int3(pid, [(lib, e) for e in entries], 10) if line else None
                t_int3 = time.monotonic() - t0
                hwm = peak_rss_mib(tp.pid)
                code, _, ru = stop_tracer(tp, 0)
                if line is None:
                    problems.append(f"{target} {k}: did not attach ({sig_name(code)}): "
                                    + terr.text().strip()[-300:])
                    continue
                if missing:
                    problems.append(f"{target} {k}: no int3 at an entry of {STARTUP_PATTERN} "
                                    "after attaching")
                if k == "tachy":
                    if code != 0:
                        problems.append(f"tachy {target} exit {code} after SIGINT: "
                                        f"{terr.text().strip()[-200:]}")
                    said = "\n".join(l for l in terr.text().splitlines()
                                     if l.startswith("tachy: "))
                    ms = [re.search(rf"{w} in (\d+) ms", said)
                          for w in ("resolved", "planned", "loaded", "attached")]
                    if all(ms):
                        phases[target].append([int(m.group(1)) for m in ms])
                if hwm is None:
                    problems.append(f"{target} {k}: no VmHWM in /proc/{tp.pid}/status")
                    continue
                data[(target, k)].append((t_msg, t_int3, hwm, ru.ru_utime + ru.ru_stime))
                progress(f"  start-up round {r + 1} {target} {k}: {t_msg:.3f} s, {hwm:.1f} MiB")
    finally:
        hp.stdin.close()
        hp.wait()
    say("")
    say("'to attached msg' is wall time from start to tachy's 'Tracing ... Hit Ctrl-C' line or "
        "bpftrace's 'Attaching N probes' line")
    say("(bpftrace prints it before it attaches); 'to int3' until every entry holds an int3 "
        "in the running host process;")
    say("'peak RSS' is VmHWM of /proc/PID/status once attached (wait4's ru_maxrss would count "
        "the forking Python's pages).")
    say(f"{'target':<6} {'tracer':<10} {'to attached msg':>16} {'to int3':>10} "
        f"{'peak RSS':>10} {'CPU time':>10}")
    med = {}
    for (target, k), rows in data.items():
        if not rows:
            say(f"{target:<6} {k:<10} {'failed':>16}")
            continue
        m = [statistics.median(x) for x in zip(*rows)]
        med[(target, k)] = m
        say(f"{target:<6} {k:<10} {m[0]:>14.3f} s {m[1]:>8.3f} s {m[2]:>6.1f} MiB {m[3]:>8.3f} s")
    for target in ("path", "-p"):
        if phases[target]:
            p = [statistics.median(x) for x in zip(*phases[target])]
            say(f"tachy {target} phases (-v, medians): resolve {p[0]:.0f} ms, plan {p[1]:.0f} ms, "
                f"load {p[2]:.0f} ms, attach {p[3]:.0f} ms")
    for target in ("path", "-p"):
        t, b = med.get((target, "tachy")), med.get((target, "bpftrace"))
        if not t or not b:
            continue
        ratio = t[0] / b[0]
        checks = [
            (ratio <= STARTUP_RATIO, f"start-up {ratio:.2f}x bpftrace (budget <= {STARTUP_RATIO}x)"),
            (t[0] <= STARTUP_SECONDS,
             f"{t[0] * 1000:.0f} ms (budget < {STARTUP_SECONDS * 1000:.0f} ms)"),
            (t[2] < STARTUP_RSS_MB, f"peak RSS {t[2]:.1f} MiB (budget < {STARTUP_RSS_MB:.0f} MB), "
                                    f"{t[2] / b[2]:.2f}x bpftrace's"),
        ]
        say(f"tachy/bpftrace {target} target: "
            + "; ".join(f"{text}: {'met' if ok else 'NOT met'}" for ok, text in checks)
            + f" (medians of {rounds}, interleaved)")
    say("  (the time budgets are wall time and move with the machine's load; see the load "
        "average above)")
    for l in verbose:
        if l.startswith("tachy: "):
            say("  tachy -v --dry-run: " + l)
    return problems


# Planning of many functions at once (`--dry-run` on a path target, no
# process needed): (label, library glob, pattern, budget in seconds). The
# planner decodes each function, and each callee its proofs reach, once.
PLANNING_CASES = [
    ("libclang-cpp", "/usr/lib/x86_64-linux-gnu/libclang-cpp.so.*", "clang::Sema::Check*", 1.0),
    ("libc", "/usr/lib/x86_64-linux-gnu/libc.so.6", "*", 2.0),
    ("libLLVM", None, "llvm::*", 10.0),
]


def planning():
    """One `tachy latency -v --dry-run` per case: the functions planned and
    the planned-in time tachy reports, against the case's budget."""
    problems = []
    say("Planning many functions (tachy latency -v --dry-run PATH:PATTERN, one run each; "
        "'planned in' as tachy -v says it):")
    for label, pattern_glob, pattern, budget in PLANNING_CASES:
        if pattern_glob is None:
            lib = llvm_function()[0]
        else:
            libs = sorted(p for p in glob.glob(pattern_glob) if os.path.isfile(p))
            if not libs:
                say(f"  {label:<12} skipped: no {pattern_glob} (install it to measure)")
                continue
            lib = libs[-1]
        cmd = [TACHY, "latency", "-v", "--dry-run", f"{lib}:{pattern}"]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - t0
        m = re.search(r"resolved in (\d+) ms, planned in (\d+) ms", r.stderr)
        if r.returncode != 0 or not m:
            problems.append(f"planning {label}: exit {r.returncode}: {r.stderr.strip()[-200:]}")
            say(f"  {label:<12} failed")
            continue
        n = sum(1 for l in r.stdout.splitlines() + r.stderr.splitlines()
                if re.match(r"\s+\[\d+\] ", l))
        planned = int(m.group(2)) / 1000
        ok = planned < budget
        say(f"  {label:<12} {lib}:'{pattern}': {n} functions, resolved in {m.group(1)} ms, "
            f"planned in {planned:.2f} s (budget < {budget:.0f} s: {'met' if ok else 'NOT met'}), "
            f"{wall:.2f} s wall")
    return problems


def peak_rss_mib(pid):
    """The process's peak resident set so far (VmHWM), in MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for l in f:
                if l.startswith("VmHWM:"):
                    return int(l.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def vaddr_to_off(path, vaddr):
    for l in sh(["readelf", "-lW", path]).splitlines():
        f = l.split()
        if f and f[0] == "LOAD":
            off, va, fsz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + fsz:
                return vaddr - va + off
    return vaddr


# ---------------------------------------------------------------- main

def main():
    if os.geteuid() != 0:
        sys.exit("bench: run as root (uprobes)")
    global TACHY
    t_start = time.monotonic()
    host = build()
    private = os.path.join(OUT, "tachy")
    shutil.copy2(TACHY, private)
    TACHY = private
    with open(private, "rb") as f:
        tachy_sum = hashlib.sha256(f.read()).hexdigest()[:12]
    m = machine()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    say(f"tachy benchmark, {stamp}")
    say(f"machine: Linux {m['kernel']}, {m['cpu']}, nproc {m['nproc']}")
    # `tachy --version` names its commit when it was built from a checkout.
    built = m['tachy'] if "(git " in m['tachy'] else f"{m['tachy']} (git {m['git']})"
    say(f"tools: {built}, binary sha256 {tachy_sum}, {m['bpftrace']}, gcc {m['gcc']}")
    say(f"rounds: {ROUNDS}, variants interleaved in every round; warm-up {WARMUP} calls; "
        f"untraced runs time {UNTRACED_FACTOR}x more calls")
    try:
        load = open("/proc/loadavg").read().split()[:3]
        say(f"load average at start: {' '.join(load)}")
    except OSError:
        pass
    say("")

    say("Workloads (objdump of each traced function, then tachy's probes from --dry-run):")
    for w in WORKLOADS:
        w["entry_off"] = vaddr_to_off(w["obj"], w["insns"][0][0])
        say(f"{w['label']}: {os.path.relpath(w['obj'], ROOT)} {w['sym']}, "
            + (sh(["go", "version"]).strip() if w["cc"] == "go"
               else f"{w['cc']} {' '.join(COMMON + w['flags'])}")
            + (f" (library: gcc, {w['lib']})" if w.get("lib") else "")
            + f", N={int(w['n'] * SCALE)}")
        for a, t in w["insns"][:6]:
            say(f"    {a:6x}: {t}")
        if len(w["insns"]) > 6:
            say(f"    ... {len(w['insns']) - 6} more")
        args = [w["mode"], "--dry-run", w["spec"], "--", w["bin"]]
        probes, text = dry_run(args)
        if probes is None:
            sys.exit(f"bench: tachy {' '.join(args)} failed: {text}")
        w["probes"] = probes
        w["plan"] = exit_plan(text)
        say("  tachy exit plan: " + w["plan"])
        w["floor_prog"] = floor_program(probes)
        say("  tachy " + w["mode"] + ": " + "; ".join(
            f"{p['kind']} +{p['off']:#x}" for p in probes))
        if w["mode"] == "latency":
            up, text = dry_run(["latency", "--uretprobe", "--dry-run", w["spec"], "--", w["bin"]])
            if up is None:
                sys.exit(f"bench: tachy --uretprobe --dry-run failed: {text}")
            w["uret_probes"] = up
            say("  tachy --uretprobe: " + "; ".join(f"{p['kind']} +{p['off']:#x}" for p in up))
        starts = function_starts(w["obj"])
        w["variants"] = ["untraced", "floor"]
        if all(p["vaddr"] in starts for p in probes):
            w["variants"].append("floor-bt")
        if w["mode"] == "latency" and floor_args(w["uret_probes"]) != floor_args(probes):
            w["variants"].append("floor-uret")
        w["variants"] += ["tachy", "tachy-uret"] if w["mode"] == "latency" else ["tachy"]
        w["variants"].append("bpftrace")
        say(f"  floor: {os.path.relpath(FLOOR, ROOT)} PID " + " ".join(floor_args(probes)))
        if "floor-bt" in w["variants"]:
            say(f"  floor-bt: bpftrace --unsafe -p PID -e '{w['floor_prog']}'")
        else:
            say("  floor-bt: not expressible in bpftrace " + BT_VERSION_NOTE)
        if "floor-uret" in w["variants"]:
            say(f"  floor-uret: {os.path.relpath(FLOOR, ROOT)} PID "
                + " ".join(floor_args(w["uret_probes"])))
        say(f"  variants: {', '.join(w['variants'])}")
    say("")

    variants = {w["name"]: w["variants"] for w in WORKLOADS}
    results = {(w["name"], v): [] for w in WORKLOADS for v in variants[w["name"]]}
    for r in range(ROUNDS):
        for w in WORKLOADS:
            for v in variants[w["name"]]:
                res = run_once(w, v)
                results[(w["name"], v)].append(res)
                desc = f"{res['ns']:.1f} ns/call" if res["ns"] is not None else "no result"
                if res["died"]:
                    desc += f", target died: {res['died']}"
                if res.get("counts"):
                    desc += f", counts {res['counts']}"
                if res["note"]:
                    desc += f", {res['note']}"
                progress(f"round {r + 1}/{ROUNDS} {w['name']:<7} {v:<10} {desc}"
                         f"  [{time.monotonic() - t_start:.0f} s]")

    say("Overhead: medians over rounds of the ns/call the workload measured; "
        "added = variant - untraced;")
    say("ratios are of added ns/call (tachy-uret is compared with floor-uret where there "
        "is one); spread = (max - min) / median.")
    hdr = (f"{'workload':<26} {'variant':<12} {'ns/call':>10} {'spread':>7} {'added':>10} "
           f"{'vs floor':>9} {'vs bpftrace':>12}  note")
    say(hdr)
    say("-" * len(hdr))
    problems, bt_notes = [], []
    for w in WORKLOADS:
        med, spread = {}, {}
        for v in variants[w["name"]]:
            ok = [x["ns"] for x in results[(w["name"], v)] if x["ns"] is not None and not x["died"]]
            med[v] = statistics.median(ok) if ok else None
            spread[v] = (max(ok) - min(ok)) / med[v] if ok and med[v] else None
        base = med["untraced"]
        added = {v: (med[v] - base if med[v] is not None and base is not None else None)
                 for v in med}
        if w.get("budget") or w["name"] == "cppthrow":
            w["added"] = added
        for v in variants[w["name"]]:
            rs = results[(w["name"], v)]
            notes = []
            died = [x["died"] for x in rs if x["died"]]
            if died:
                notes.append(f"target killed in {len(died)}/{len(rs)} runs: {died[0]}")
            elif (w.get("throws") or w.get("fragile")) and v != "untraced":
                notes.append(f"target survived {len(rs)}/{len(rs)} runs")
            refused = [x["note"] for x in rs if x.get("refused")]
            if refused:
                notes.append(f"did not attach in {len(refused)}/{len(rs)}: {refused[0]}")
            if died and v == "tachy":
                problems.append(f"{w['label']}: tachy latency (default, no --uretprobe) killed "
                                f"the target in {len(died)}/{len(rs)} runs: {died[0]}; its plan: "
                                + "; ".join(f"{p['kind']} +{p['off']:#x}" for p in w["probes"]))
            for x in rs:
                for p in check_counts(w, x):
                    (bt_notes if v == "bpftrace" else problems).append(f"{w['label']}, {v}: {p}")
                if x["note"] and not x.get("refused"):
                    problems.append(f"{w['label']}, {v}: {x['note']}")
            counts = [x["counts"] for x in rs if x.get("counts")]
            if counts and v.startswith("tachy"):
                c, calls = counts[0], rs[0].get("calls")
                s = f"count {c.get('count')}"
                if c.get("unwound"):
                    s += f", left by exception {c['unwound']}"
                if c.get("sites"):
                    s += f", {len(c['sites'])} sites at " + "/".join(
                        sorted({f"{x:.2f}" for x in c["sites"]})) + " per call"
                notes.append(s + (f" of {calls} calls" if calls else "") + " (round 1)")
            ad = added[v]

            def ratio(ref):
                if ad is None or added.get(ref) is None or v in (ref, "untraced") \
                        or added[ref] <= 0:
                    return "-"
                return f"{ad / added[ref]:.2f}x"

            fl = "floor-uret" if v == "tachy-uret" and "floor-uret" in med else "floor"
            label = "tachy nested" if v == "tachy" and w["mode"] == "nested" else v
            say(f"{w['label']:<26} {label:<12} "
                f"{(f'{med[v]:.1f}' if med[v] is not None else 'killed'):>10} "
                f"{(f'{spread[v] * 100:.0f}%' if spread[v] is not None else '-'):>7} "
                f"{(f'{ad:+.1f}' if ad is not None and v != 'untraced' else '-'):>10} "
                f"{ratio(fl):>9} {ratio('bpftrace'):>12}  {'; '.join(notes)}")
        say("")

    if any(w.get("added") for w in WORKLOADS):
        say("Exit plans in C++ objects with exception tables (added ns/call, medians):")
    for w in WORKLOADS:
        added = w.get("added")
        if not added:
            continue
        t, b = added.get("tachy"), added.get("bpftrace")
        ratio = f"{t / b:.2f}x bpftrace" if t is not None and b and b > 0 else "no ratio"
        line = (f"  {w['label']}: tachy {t if t is None else f'{t:+.1f}'}, bpftrace "
                f"{b if b is None else f'{b:+.1f}'}: {ratio}")
        if w.get("budget"):
            ok = t is not None and b and t / b <= w["budget"]
            line += f" (budget <= {w['budget']}x: {'met' if ok else 'NOT met'})"
            if not ok:
                problems.append(f"{w['label']}: tachy {ratio}, over the {w['budget']}x budget")
        say(line)
        say(f"    tachy's exit plan: {w['plan']}")
    say("")
    if not ONLY or STARTUP_ONLY:
        problems += startup(host, STARTUP_ROUNDS)
        say("")
        problems += planning()
    say("")
    # The workloads a uretprobe can kill (exceptions, Go's moving stacks),
    # explicitly.
    for w in WORKLOADS:
        if not (w.get("throws") or w.get("fragile")):
            continue
        for v in w["variants"]:
            if v == "untraced":
                continue
            rs = results[(w["name"], v)]
            died = [x["died"] for x in rs if x["died"]]
            say(f"{w['label']} under {v}: "
                + (f"target KILLED in {len(died)}/{len(rs)} runs ({died[0]})" if died
                   else f"target survived all {len(rs)} runs"))
    say("")
    if bt_notes:
        say("bpftrace's own counts:")
        for p in dict.fromkeys(bt_notes):
            say("  - " + p)
    if problems:
        say("Problems found (tachy counts, probes, exits):")
        seen = set()
        for p in problems:
            if p not in seen:
                seen.add(p)
                say("  - " + p)
    else:
        say("No problems found: every tachy count matched the calls made, and every "
            "expected probe site held an int3.")
    say(f"total time: {time.monotonic() - t_start:.0f} s")

    # Keeps the section that `make soak` (bench/soak.py) writes at the end.
    soak = ""
    try:
        with open(RESULTS) as f:
            prev = f.read()
        i = prev.find("\n## Soak")
        if i >= 0:
            soak = "\n" + prev[i + 1:]
    except FileNotFoundError:
        pass
    with open(RESULTS, "w") as f:
        f.write(f"# tachy benchmark results\n\n{stamp}; Linux {m['kernel']}, {m['cpu']}, "
                f"nproc {m['nproc']}. Produced by `make bench` (bench/run.py).\n\n```\n")
        f.write("\n".join(out_lines) + "\n```\n" + soak)
    progress(f"saved {os.path.relpath(RESULTS, ROOT)}")


if __name__ == "__main__":
    main()
