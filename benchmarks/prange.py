"""Parallel loops: zyg's gradient of numba ``prange`` code against the primal (issue 26).

Usage (from the repository root)::

    python -m benchmarks.prange                  # about a minute on 2 cores
    python -m benchmarks.prange --threads 1 2 4 8 16 --repeat 9 --out benchmarks/results/prange.md

Two workloads, written as a numba user writes them (``@njit(parallel=True)`` and
``prange``):

* **GMM** (GradBench's objective without the Wishart prior): a log-sum-exp over
  ``k`` components per point, ``prange`` over the ``n`` points; every iteration reads
  all the shared parameters (their cotangents are per-thread rows in the adjoint);
* **heat**: a 1-D explicit heat stencil on a ring, ``prange`` over the cells inside a
  time loop, ping-pong buffers; neighbours are read (atomic additions into the input's
  shadow).

For each thread count (``numba.set_num_threads``) it reports the median time of the
primal (numba, parallel), of zyg's gradient (cpu target: forward and backward loops
both ``prange``), their ratio, and each one's speed-up over its own 1-thread time.
Only ratios are reported (the machine is shared); the primal and the gradients run
alternately.  ``--paths`` also times the run-time path (``ZYG_NATIVE_LOOPS=0``: the loop
called through Python, zyg's path before session 15) in the same runs.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numba
import numpy as np
from numba import prange

import zyg


def gmm(alphas, means, icf, x):
    n, d = x.shape
    k = alphas.shape[0]
    total = 0.0
    for i in prange(n):
        vals = np.empty(k)
        for j in range(k):
            q = 0.0
            for l in range(d):
                z = (x[i, l] - means[j, l]) * np.exp(icf[j, l])
                q += z * z
            s = 0.0
            for l in range(d):
                s += icf[j, l]
            vals[j] = alphas[j] + s - 0.5 * q
        mx = vals[0]
        for j in range(1, k):
            if vals[j] > mx:
                mx = vals[j]
        acc = 0.0
        for j in range(k):
            acc += np.exp(vals[j] - mx)
        total += mx + np.log(acc)
    amx = np.max(alphas)
    return total - n * (amx + np.log(np.sum(np.exp(alphas - amx))))


def heat(u0, c, steps):
    n = u0.shape[0]
    a = u0.copy()
    b = np.empty(n)
    for t in range(steps):
        for i in prange(n):
            b[i] = a[i] + c * (a[(i + n - 1) % n] - 2.0 * a[i] + a[(i + 1) % n])
        a, b = b, a
    return np.sum(a * a)


def _medians(fns, repeat: int):
    """Medians of the functions' times, their runs alternated (a load that comes and goes
    on a shared machine then weighs on all alike)."""
    for fn in fns:
        fn()
    ts = [[] for _ in fns]
    for _ in range(repeat):
        for fn, got in zip(fns, ts):
            t = time.perf_counter()
            fn()
            got.append(time.perf_counter() - t)
    return [statistics.median(got) for got in ts]


def _runtime_path_grad(f, argnums, args):
    """The gradient of a copy of ``f`` built with ``ZYG_NATIVE_LOOPS=0`` (the loop called
    through Python as a function of values: zyg's path before the compiled pairs).  The
    variable is read when the gradient is generated, at its first call."""
    import os
    import types
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    os.environ["ZYG_NATIVE_LOOPS"] = "0"
    try:
        grad = zyg.grad(g, argnums=argnums, target="cpu")
        grad(*args)
    finally:
        del os.environ["ZYG_NATIVE_LOOPS"]
    return grad


def workloads(scale: float):
    rng = np.random.default_rng(0)
    n, d, k = int(20000 * scale), 10, 25
    g_args = (rng.normal(size=k), rng.normal(size=(k, d)), 0.1 * rng.normal(size=(k, d)),
              rng.normal(size=(n, d)))
    m = int(200000 * scale)
    h_args = (rng.normal(size=m), 0.2, 20)
    return [("GMM (n=%d, d=%d, k=%d)" % (n, d, k), gmm, g_args, (0, 1, 2)),
            ("heat (n=%d, 20 steps)" % m, heat, h_args, (0,))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="*", default=None)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--paths", action="store_true",
                    help="also time the run-time path (ZYG_NATIVE_LOOPS=0) in the same runs")
    a = ap.parse_args()
    maxt = numba.config.NUMBA_NUM_THREADS
    threads = [t for t in (a.threads or [1, 2, 4, 8, 16]) if t <= maxt] or [1]
    rows = []
    for name, f, args, argnums in workloads(a.scale):
        primal = numba.njit(parallel=True)(f)
        grads = [("compiled pair", zyg.grad(f, argnums=argnums, target="cpu"))]
        if a.paths:
            grads.append(("run-time path", _runtime_path_grad(f, argnums, args)))
        try:
            primal(*args)
        except Exception as e:      # numba issue 10132 on Python 3.12+ (docs/parallel.md)
            print(f"{name}: numba cannot compile the primal here: {str(e).splitlines()[-1]}")
            continue
        base = {}
        for t in threads:
            numba.set_num_threads(t)
            got = _medians([lambda: primal(*args)] + [lambda g=g: g(*args) for _, g in grads], a.repeat)
            tp = got[0]
            base.setdefault("p", tp)
            for (path, _), tg in zip(grads, got[1:]):
                base.setdefault(path, tg)
                label = name if not a.paths else f"{name}, {path}"
                rows.append((label, t, tg / tp, base["p"] / tp, base[path] / tg))
                print(f"{label}: {t} threads: gradient/primal {tg / tp:.2f}, primal speed-up "
                      f"{base['p'] / tp:.2f}, gradient speed-up {base[path] / tg:.2f}", flush=True)
    lines = ["# prange: zyg's gradient against the numba primal, by thread count", "",
             f"`python -m benchmarks.prange --threads {' '.join(map(str, threads))} --repeat {a.repeat} "
             f"--scale {a.scale}{' --paths' if a.paths else ''}` on "
             f"{maxt} hardware threads (medians; only ratios).", "",
             "| workload | threads | gradient / primal | primal speed-up | gradient speed-up |",
             "|---|---|---|---|---|"]
    for name, t, r, sp, sg in rows:
        lines.append(f"| {name} | {t} | {r:.2f} | {sp:.2f} | {sg:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
