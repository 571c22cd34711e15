"""A loop-heavy CPython workload for bench/cpython.py: attribute reads,
each a call of PyObject_GetAttr in the interpreter. Prints "ready PID",
waits for a line on stdin, runs, then prints "calls N" (the loop's
iterations) and "wall_s S" (its own wall time)."""

import os
import sys
import time


class Point:
    def __init__(self):
        self.x = 1
        self.y = 2


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300000
    p = Point()
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    s = 0
    for _ in range(n):
        s += getattr(p, "x") + getattr(p, "y")
    wall = time.perf_counter() - t0
    print(f"calls {n}")
    print(f"wall_s {wall:.4f}", flush=True)
    return 0 if s == 3 * n else 1


if __name__ == "__main__":
    sys.exit(main())
