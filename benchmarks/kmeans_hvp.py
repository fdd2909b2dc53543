"""Hessian-vector products against gradients (issue 27): GradBench's k-means cost at the
sizes of its eval (k in 10, 100, 1000; n in 1000, 10000; d = 8, 16), timing the numba
primal, ``zyg.grad`` and ``zyg.hvp`` (the vector of ones, as the module's ``dir``) in one
process, medians of repeated calls after a first call; and ``zyg.hessian`` of two small
functions (a loop over numbers: the per-column driver; numpy code: the vector pass)
against one gradient.  Goal: ``hvp`` within 3 gradients.

Run ``python -m benchmarks.kmeans_hvp [k,n,d ...]`` (``--quick``: the small sizes only).
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np

SIZES = [(10, 1000, 8), (100, 1000, 8), (100, 10000, 8), (1000, 1000, 8),
         (1000, 10000, 8), (1000, 10000, 16)]


def loop_fn(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            s += math.sin(x[i] * x[j]) * x[i]
    return s


def numpy_fn(x):
    return np.sum(np.sin(np.outer(x, x)) * x[:, None]) + np.sum(x ** 3)


def median_time(fn, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main(argv) -> None:
    import numba

    import zyg
    from benchmarks.gradbench.modules.kmeans import cost
    quick = "--quick" in argv
    args = [a for a in argv if a != "--quick"]
    sizes = [tuple(map(int, a.split(","))) for a in args] or (SIZES[:2] if quick else SIZES)
    prim = numba.njit(cost)
    g = zyg.grad(cost)
    print(f"{'k, n, d':>18} {'primal':>10} {'grad':>10} {'hvp':>10} {'hvp/primal':>10} {'hvp/grad':>8}")
    for k, n, d in sizes:
        rng = np.random.default_rng(31337)
        pts = rng.random((n, d))
        c = pts[-k:].copy()
        ones = np.ones_like(c)
        prim(c, pts), g(c, pts), zyg.hvp(cost, c, ones, pts)
        reps = 5 if k * n * d >= 10 ** 7 else 21
        tp = median_time(lambda: prim(c, pts), reps)
        tg = median_time(lambda: g(c, pts), reps)
        th = median_time(lambda: zyg.hvp(cost, c, ones, pts), reps)
        print(f"{str((k, n, d)):>18} {tp * 1e3:8.3f}ms {tg * 1e3:8.3f}ms {th * 1e3:8.3f}ms "
              f"{th / tp:10.1f} {th / tg:8.2f}", flush=True)
    for f in (loop_fn, numpy_fn):
        H = zyg.hessian(f)
        gf = zyg.grad(f)
        for m in ((8, 32) if quick else (8, 32, 100)):
            x = np.linspace(0.1, 1.0, m)
            H(x), gf(x)
            th = median_time(lambda: H(x), 21)
            tg = median_time(lambda: gf(x), 21)
            print(f"hessian {f.__name__} n={m}: {th * 1e3:.3f} ms, grad {tg * 1e3:.4f} ms, "
                  f"hessian/grad {th / tg:.1f} (n columns: {th / tg / m:.2f} gradients each)",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
