"""Two Python threads calling a gradient at once against one thread (issue 26).

Usage (from the repository root)::

    python -m benchmarks.threads                 # about 20 s
    python -m benchmarks.threads --calls 40 --n 20000 --repeat 7

The workload is a loop-heavy scalar gradient (``zyg.grad`` of a double loop of ``sin``
and ``cos``, no arrays: the time is in compiled code).  One round makes ``calls`` calls;
the 1-thread time runs them in one thread, the 2-thread time splits the same calls over
two threads started together.  The speed-up is their ratio (2.0 is perfect scaling on
two free cores).  As a control the same generated code is compiled again *without*
``nogil`` (numba's default), where the ratio must stay near 1.  Medians over ``repeat``
rounds; only ratios are reported, since absolute times depend on the machine.

Also measured: the cost of calling the object ``zyg.grad`` returns (a
``zyg.driver.ZygFunction``, which pickles) against calling its fast wrapper as a plain
function, on a gradient that does almost nothing.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import threading
import time
import timeit

import zyg


def work(x, n):
    s = 0.0
    for i in range(n):
        for j in range(32):
            s += math.sin(x + 1e-3 * j) * math.cos(x * i * 1e-6)
    return s


def tiny(x):
    return x * x


def _round(fn, calls: int, threads: int, x: float, n: int) -> float:
    per = [calls // threads + (1 if k < calls % threads else 0) for k in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def run(m):
        barrier.wait()
        for _ in range(m):
            fn(x, n)
    ts = [threading.Thread(target=run, args=(m,)) for m in per]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def speedup(fn, calls: int, n: int, repeat: int):
    one, two = [], []
    for _ in range(repeat):
        one.append(_round(fn, calls, 1, 0.5, n))
        two.append(_round(fn, calls, 2, 0.5, n))
    t1, t2 = statistics.median(one), statistics.median(two)
    return t1, t2, t1 / t2


def with_gil(g):
    """The gradient ``g`` for (float, int) with its generated code compiled again without
    nogil (numba's default), called the same way (pooled tape buffers)."""
    import numba
    from zyg import driver
    entry = g._zyg.cache[(float, int)]
    disp = getattr(entry, "compiled", entry)
    assert disp.targetoptions.get("nogil") is True
    opts = {k: v for k, v in disp.targetoptions.items() if k not in ("nopython", "nogil")}
    again = numba.njit(**opts)(disp.py_func)
    # the entry: the zero-cotangent retry wrapper around the pooled call (zyg/driver.py)
    inner = [c.cell_contents for c in getattr(entry, "__closure__", None) or ()
             if isinstance(c.cell_contents, driver._pooled)] or [entry]
    if isinstance(inner[0], driver._pooled):
        return driver._pooled(again, inner[0].stacks, inner[0].value)
    return again


def call_overhead(repeat: int):
    g = zyg.grad(tiny)
    g(1.0)
    plain = type(g).__dict__["__call__"].__func__     # the fast wrapper as a function
    obj = min(timeit.repeat("g(1.0)", globals={"g": g}, number=200000, repeat=repeat)) / 200000
    fn = min(timeit.repeat("g(1.0)", globals={"g": plain}, number=200000, repeat=repeat)) / 200000
    return obj * 1e9, fn * 1e9


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=24)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    g = zyg.grad(work)
    g(0.5, 10)
    gil = with_gil(g)
    assert gil(0.5, 1000) == g(0.5, 1000)
    print(f"# threads benchmark: zyg.grad of a double loop (n={a.n}), {a.calls} calls per round, "
          f"median of {a.repeat} rounds; os.cpu_count()={os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| code | 1 thread s | 2 threads s | speed-up |")
    print("|---|---|---|---|")
    for label, fn in (("zyg.grad (nogil)", g), ("same code, GIL held (control)", gil)):
        t1, t2, s = speedup(fn, a.calls, a.n, a.repeat)
        print(f"| {label} | {t1:.3f} | {t2:.3f} | {s:.2f}x |")
    obj, fn = call_overhead(max(a.repeat, 9))
    print(f"\ncall of a tiny gradient: ZygFunction object {obj:.0f} ns, its wrapper as a plain "
          f"function {fn:.0f} ns (+{obj - fn:.0f} ns)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
