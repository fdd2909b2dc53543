"""MPI weak scaling of a differentiated data-parallel loss (issue 26).

Usage (from the repository root; needs ``pip install ".[mpi]"``)::

    python -m benchmarks.mpi_scaling                     # ranks 1, 2, 4; about a minute
    python -m benchmarks.mpi_scaling --ranks 1 2 4 8 --rows 20000

Each rank holds ``rows`` rows of a logistic-regression data set (weak scaling: the data
grow with the ranks) and computes the loss of its rows, summed over the ranks with
``numba_mpi.allreduce``.  Per rank count it times, on every rank, the numba primal
(``numba.njit`` of the same function) and zyg's ``value_and_grad`` (cpu), medians of
``repeat`` calls after a warm-up, and reports the slowest rank.  Weak scaling is perfect
when the times stay flat as ranks are added; the gradient scales like the primal when
gradient/primal stays flat.  Ratios only: absolute times depend on the machine (and past
its core count the ranks share cores).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

if "--rank-main" in sys.argv:       # the ranks (not the driver, which only starts mpiexec)
    import numba_mpi as mpi


def nll(w, X, y):
    r = 0.0
    for i in range(X.shape[0]):
        z = 0.0
        for j in range(X.shape[1]):
            z += X[i, j] * w[j]
        r += max(z, 0.0) + np.log1p(np.exp(-abs(z))) - y[i] * z
    local = np.zeros(1)
    local[0] = r
    total = np.empty(1)
    mpi.allreduce(local, total, mpi.Operator.SUM)
    return total[0]


def rank_main(rows: int, cols: int, repeat: int) -> None:
    import numba
    import zyg
    zyg.set_compile_notice(0)
    rank = mpi.rank()
    rng = np.random.default_rng(rank)
    X = rng.standard_normal((rows, cols))
    y = (rng.random(rows) < 0.5).astype(np.float64)
    w = 0.1 * rng.standard_normal(cols)
    primal = numba.njit(nll)
    vg = zyg.value_and_grad(nll)
    out = {}
    for name, f in (("primal", primal), ("gradient", vg)):
        f(w, X, y)
        ts = []
        for _ in range(repeat):
            mpi.barrier()
            t0 = time.perf_counter()
            f(w, X, y)
            ts.append(time.perf_counter() - t0)
        ts.sort()
        out[name] = ts[len(ts) // 2]
    v, g = vg(w, X, y)
    assert abs(v - primal(w, X, y)) <= 1e-9 * abs(v)
    worst = {k: np.zeros(1) for k in out}
    for k in out:
        mpi.allreduce(np.array([out[k]]), worst[k], mpi.Operator.MAX)
    if rank == 0:
        print("RESULT " + json.dumps({k: float(worst[k][0]) for k in worst}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--cols", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank_main:
        return rank_main(a.rows, a.cols, a.repeat)
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    rows = []
    for n in a.ranks:
        p = subprocess.run([exe, "-n", str(n), sys.executable, "-m", "benchmarks.mpi_scaling",
                            "--rank-main", "--rows", str(a.rows), "--cols", str(a.cols),
                            "--repeat", str(a.repeat)], capture_output=True, text=True)
        line = [s for s in p.stdout.splitlines() if s.startswith("RESULT ")]
        if p.returncode or not line:
            sys.exit(p.stdout + p.stderr)
        r = json.loads(line[0][7:])
        rows.append((n, r["primal"], r["gradient"]))
    p1, g1 = rows[0][1], rows[0][2]
    print(f"weak scaling, {a.rows} rows x {a.cols} columns per rank, {os.cpu_count()} cores")
    print("| ranks | primal / primal at 1 rank | gradient / gradient at 1 rank | gradient / primal |")
    print("|---|---|---|---|")
    for n, p, g in rows:
        print(f"| {n} | {p / p1:.2f} | {g / g1:.2f} | {g / p:.2f} |")


if __name__ == "__main__":
    main()
